"""SkillsSession: one object per kernel (or CLI call) holding the catalog and answering every front end.

Magics and the CLI only parse arguments, call a method here and display what it returns, so a notebook, a test
and a CI job share one code path. The session holds state (the catalog, the policy, the chosen model, the ledger
plan, the last run) and hands each operation to the subject that owns it: skills/, models/, runs/, safety/ and
records/. Nothing here imports IPython.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skills_magic.errors import NotASkillSource, SourceNotFound
from skills_magic.models import base, choice
from skills_magic.paths import display_path, shown_path  # noqa: F401  (display_path re-exported: its home before the split)
from skills_magic.records import ledger_check, runlog, usage
from skills_magic.records.audit import AuditLog
from skills_magic.records.db import Database, resolve_path
from skills_magic.records.ledger import Ledger, NoPlan, plan_name
from skills_magic.runs import (conversation, eval_plan, eval_saved, evals, experiment, fields, improve, learn, logged,
                               notebooks, pytools, research, script_tool, voting)
from skills_magic.runs import inputs as kernel_inputs
from skills_magic.runs import verify as v  # the constants a verification's options default to
from skills_magic.runs.result import RunResult
from skills_magic.runs.experiment import LEDGER_METADATA_KEY, LEDGER_OUTPUT_CHARS  # noqa: F401  (re-exported)
from skills_magic.runs.script_tool import MAX_LISTED_OUTPUTS, MAX_TOOL_RESULT_CHARS  # noqa: F401  (re-exported)
from skills_magic.safety import controls, requests, status
from skills_magic.safety.gate import Gate
from skills_magic.safety.manifest import Manifest, lock_path
from skills_magic.safety.policy import POLICY_FILE, Policy
from skills_magic.safety.trust import TrustStore, user_policy_path
from skills_magic.safety.working import pending
from skills_magic.skills import to_prompt, writing
from skills_magic.skills.catalog import Catalog, CatalogScan, Source, SourceStatus, default_sources, source_statuses
from skills_magic.skills.lint import lint_path, lint_skill
from skills_magic.skills.listing import DEFAULT_BUDGET_CHARS, Listing, ListingCache
from skills_magic.skills.skill import Diagnostic, Skill
from skills_magic.skills.validate import Verdict, validate_target
from skills_magic.skills.writing import WRITE_FOLDER

RUNS_FOLDER = os.path.join(".skills", "runs")  # each sandboxed run's scratch folder (its outputs stay there)


class SkillsSession:
    """The catalog of one kernel, and the operations the front ends offer on it, in the order of the house: the
    catalog, models, records, runs, safety, the checks a CI job runs too, and values the views show."""

    def __init__(self, sources: list[Source] | None = None, cwd: str | None = None, extra_paths: list[str] | tuple = (),
                 allow: Sequence[str] = (), deny: Sequence[str] = ()):
        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.catalog = Catalog(sources if sources is not None else default_sources(self.cwd, extra=extra_paths))
        self.policy = Policy(trust=TrustStore.default())  # in the user's config folder, outside every project
        self.policy.extend("deny", deny, "IPython config")
        self.policy.extend("allow", allow, "IPython config")
        self.policy.load_file(user_policy_path(), owner="user")  # the user's own rules, with full powers
        self.policy.load_file(os.path.join(self.cwd, POLICY_FILE))  # the project's: allow rules inert until trusted
        self.manifest = Manifest(lock_path(self.cwd))
        self.asker = requests.unattended  # front ends that can ask a person replace this
        self.plan: str | None = None  # the ledger plan `%ledger use` picked
        self.ledger_for_model = False  # offer the `experiment` tool in runs (`%ledger model on`)
        self.budget: int | None = DEFAULT_BUDGET_CHARS
        self.session_id = uuid.uuid4().hex  # ${CLAUDE_SESSION_ID} in skill bodies
        self.model_client: base.ModelClient | None = None  # chosen with `%skills model`; None: decided at run time
        self.model_id: str | None = None  # chosen with `%skills model ID`
        self.last_run: RunResult | None = None
        self.last_run_seconds: float | None = None
        self.conversation = conversation.Conversation()  # what `%%skill run --continue` goes on with
        self.tools = pytools.ToolRegistry(audit=self._audit)  # the user's Python functions offered to the model
        self._listings = ListingCache()  # the last listing per budget and source, until the catalog changes

    def scan(self) -> CatalogScan:
        return self.catalog.scan()

    def add(self, path: str) -> tuple[Source, list[Skill]]:
        """Add a skill folder or a collection; returns the source and the skills it made visible."""
        absolute = os.path.abspath(os.path.join(self.cwd, os.path.expanduser(path)))
        if not os.path.exists(absolute):
            raise SourceNotFound(path)
        if os.path.isfile(absolute) and os.path.basename(absolute).lower() != "skill.md":
            raise NotASkillSource(path)
        source = self.catalog.add(absolute)
        return source, [s for s in self.scan().skills if s.source_root == source.root]

    def skill(self, name: str) -> Skill:
        scan = self.scan()
        found = scan.get(name)
        if found is None:
            raise scan.not_found(name, self.show_path)  # a skipped skill: why, with file and line
        return found

    def listing(self, budget: int | None = None, source: str | None = None, drop_first=()) -> tuple[CatalogScan, Listing, str]:
        """The text listing under `budget` characters (None: the session's budget; 0: everything; `drop_first`: names)."""
        return self._listings.get(self.scan(), self.budget if budget is None else budget, source, drop_first)

    def sources(self) -> list[SourceStatus]:
        return source_statuses(self.catalog.sources, self.scan())

    def diagnostics(self, severity: str | None = None, code: str | None = None) -> list[Diagnostic]:
        return [d for d in self.scan().diagnostics
                if (severity is None or d.severity == severity) and (code is None or d.code == code)]

    def validate(self, target: str | None = None) -> list[Verdict]:
        """Strict verdicts: for a catalog name, a path, or (no target) every skill in the catalog."""
        return validate_target(self.scan(), target, self.cwd, self.show_path)

    def write_skill(self, target: str, text: str, folder: str | None = None, overwrite: bool = True) -> writing.WrittenFile:
        """`%%skill write NAME[/scripts/FILE]`: the file written, the whole skill validated, its folder a source."""
        root = os.path.join(self.cwd, os.path.expanduser(folder or WRITE_FOLDER))
        written = writing.write_skill_file(root, target, text, self.cwd, overwrite)
        if not writing.already_listed(self.catalog.sources, root):  # else `.skills/written`, a source in every session
            self.catalog.add(root)  # for this session: a --dir folder, or .skills/written left out by SKILLS_MAGIC_SOURCES
        return written

    def show_path(self, path: str) -> str:
        """A path for outputs: the same on every machine and clone, so notebooks re-run identically."""
        return shown_path(path, self.cwd, self.catalog.sources)

    def _path(self, path: str) -> str:
        """A path the user typed, relative to the session's folder; it must exist."""
        absolute = os.path.join(self.cwd, os.path.expanduser(path))
        if not os.path.exists(absolute):
            raise SourceNotFound(path)
        return absolute

    def choose_model(self, kind: str | None = None, value: str | None = None) -> base.ModelClient | None:
        """`%skills model`: `anthropic [ID]`, `scripted FILE`, `replay CASSETTE`, a model id, or `auto` (the default)."""
        self.model_client, self.model_id = choice.choose(kind, value, (self.model_client, self.model_id), self._path)
        return self.model_client

    def client(self) -> base.ModelClient:
        """The chosen client; else Claude when ANTHROPIC_API_KEY is set; else a clear NoModelConfigured."""
        if self.model_client is None:
            self.model_client = choice.default_client(self.model_id)
        return self.model_client

    def resolve_model_id(self, client: base.ModelClient | None = None, explicit: str | None = None, skill: Skill | None = None
                         ) -> str:
        """--model, else the explicitly run skill's own `model`, else `%skills model ID`, SKILLS_MAGIC_MODEL, default."""
        return choice.model_id_for(client, explicit, skill.frontmatter.model if skill is not None else None, self.model_id)

    @functools.cached_property
    def database(self) -> Database:
        return Database(resolve_path(self.cwd))

    def _audit(self, row: dict[str, Any]) -> None:
        AuditLog(self.database, self.session_id).record(row)

    def audit(self, everything: bool = False) -> list[dict[str, Any]]:
        return AuditLog(self.database, self.session_id).rows(everything)

    @functools.cached_property
    def runs(self) -> runlog.RunLog:  # the run log; `session.runs.enabled = False` stops this session's logging
        return runlog.RunLog(self.database, self.session_id)
    def skill_usage(self) -> dict[str, usage.Usage]: return usage.skill_usage(self.runs)  # per skill name (records.usage)

    ledger = property(lambda self: Ledger(self.database, self.session_id))
    learning = functools.cached_property(lambda self: learn.Learning(self))  # learned skills (`%skills learn on`)

    def use_plan(self, slug: str) -> str:
        self.plan = plan_name(slug)
        return self.plan

    def current_plan(self) -> str:
        if self.plan is None:
            raise NoPlan("no plan chosen: %ledger use SLUG (the plan is sci.SLUG)")
        return self.plan

    def test_prediction(self, label: str, asker=None):
        """Run a prediction's falsifying check through the gate; what happened becomes an observation (no verdict)."""
        return experiment.check_prediction(self.ledger, self.gate(), self.current_plan(), label, self.cwd, asker or self.asker)

    def _ledger_tool(self, skill: Skill | None):
        """The `experiment` tool, when `%ledger model on` or the explicitly run skill asks for it in its metadata."""
        wanted = self.ledger_for_model or experiment.asks_for_ledger(skill)
        return experiment.experiment_tool(self.ledger, self.current_plan()) if wanted else None

    def run(self, task: str, skill: str | None = None, arguments: str | Sequence[str] = "", *, model: str | None = None,
            max_turns: int | None = None, record: str | None = None, replay: str | None = None, harness: str | None = None,
            on_text: Callable[[str], None] | None = None, on_event: Callable[[str, Any], None] | None = None,
            asker=None, inputs: Mapping[str, Any] | None = None, continue_conversation: bool = False,
            max_cost: float | None = None) -> RunResult:
        """Run a task through the agent loop; with `skill`, that skill is activated explicitly; `inputs`: kernel
        objects handed to the run by name (`--with`); `harness`: whose loop (native, claude-code), else the model's."""
        from skills_magic.runs.claude_code import DEFAULT_MAX_TURNS, loop_for

        chosen = self.skill(skill) if skill is not None else None
        start = self.conversation.start(continue_conversation)  # NothingToContinue before anything is spent
        client = logged.Capture(start.client(replay and self._path(replay), record and os.path.join(self.cwd, record),
                                             choice.for_harness(harness, self.client)))  # its exchanges: for the run log
        Agent = loop_for(client)  # noqa: N806 -- the native loop's class, or Claude Code's with the same arguments
        placeholders = base.capabilities(client).placeholders
        task, inputs_folder, written = kernel_inputs.prepare(task, inputs or {}, self.cwd)
        tool = script_tool.ScriptTool(self.gate().with_inputs(inputs_folder), asker or self.asker,
                                      placeholders if isinstance(placeholders, dict) else None)
        agent = Agent(self.scan().skills, client, self.resolve_model_id(client, model, chosen),
                      show_path=self.show_path, session_id=self.session_id, budget=self.budget,
                      max_turns=max_turns or DEFAULT_MAX_TURNS, run_script=tool.run_script,
                      expand_inline=tool.expand_inline, ledger=self._ledger_tool(chosen), python_tools=self.tools,
                      files=fields.run_files(written, arguments, self.cwd), model_fixed=model is not None,
                      max_cost=max_cost, learned=self.learning.tool_for())  # max_cost: in dollars (runs.budget)
        started = time.perf_counter()
        try:
            result = agent.run(task, chosen.name if chosen else None, arguments, on_text=on_text, on_event=on_event,
                               **start.options())
        finally:
            self.last_run_seconds = time.perf_counter() - started
        self.last_run = tool.kept_in(result)
        self.last_run.inputs, self.last_run.seconds = written, self.last_run_seconds
        self.conversation.advance(start, self.last_run, agent.activated, client)
        logged.record_run(self.runs, self.last_run, client)
        return self.last_run

    def run_script(self, skill: str, script: str, stdin: str = "", arguments: Sequence[str] = (),
                   inputs: Mapping[str, Any] | None = None) -> RunResult:
        """`--no-model --script`: the user runs a skill's script through the gate (typing it answers the prompt)."""
        chosen = self.skill(skill)
        started = time.perf_counter()
        folder, written = kernel_inputs.write_inputs(inputs, self.cwd) if inputs else (None, [])
        self.last_run = script_tool.run_directly(self.gate().with_inputs(folder), chosen, script, stdin, arguments,
                                                 self.asker)
        self.last_run_seconds = self.last_run.seconds = time.perf_counter() - started
        self.last_run.inputs = written
        return self.last_run

    def verify(self, claims, *, votes: int | None = None, refutations: int | None = None, concurrency: int | None = None,
               model: str | None = None, voters: Sequence[str] = (), timeout: float | None = None,
               max_claims: int | None = None, ledger_plan: str | None = None, on_vote=None, on_ready=None,
               max_cost: float | None = None, on_estimate=None, web=None):
        """Verify claims by adversarial votes, concurrently in a worker thread; `voters` as `voting.seats` takes them,
        `web` (WebTools) the model voters' web tools. KeyboardInterrupt cancels the run, keeping the votes in."""
        if ledger_plan:
            plan_name(ledger_plan)  # a bad plan name is refused before any vote is spent
        n_votes = votes or v.VOTES_PER_CLAIM
        model_seat = voting.one_model_voter(lambda: base.for_new_loop(self.client()),
                                            lambda client: self.resolve_model_id(client, model, None), web)
        chosen = voting.seats(voters, n_votes, model_seat, self.skill, self.gate())
        options = {"votes_per_claim": n_votes, "refutations_required": refutations or v.REFUTATIONS_REQUIRED,
                   "concurrency": concurrency or v.CONCURRENCY, "timeout": timeout or v.VOTE_TIMEOUT_SECONDS,
                   "max_claims": max_claims or v.MAX_CLAIMS, "on_vote": on_vote, "run_log": self.runs}
        options["budget"] = voting.budgeted(claims, chosen, options, max_cost, on_estimate)  # its estimate: shown first
        if on_ready is not None:
            on_ready()  # the voters are known: the run really starts now
        result = voting.run_in_loop_thread(lambda: v.verify(claims, chosen, **options))
        if ledger_plan:
            voting.record_outcomes(self.ledger, self.use_plan(ledger_plan), result, n_votes)
        return result

    def research(self, subject, *, model: str | None = None, **options):
        """`%%skill research` (a question) or `reverify` (a list of claims): the deep-research workflow (runs.research)."""
        client = self.client()
        return research.run_research(client, self.resolve_model_id(client, model), subject, run_log=self.runs, **options)

    def improve(self, name: str, path: str, **options):
        """`%skills improve NAME PROMPTS`: description variants, chosen on a training split, judged on the held-out one."""
        return improve.improve(self.scan().skills, self.client(), self.resolve_model_id(self.client()), name,
                               evals.load_prompt_set(self._path(path)), show_path=self.show_path, **options)

    def eval(self, path: str, *, runs: int | None = None, model: str | None = None, strategy: str = "plain",
             compare: str | None = None, behaviour: bool = False, batch: bool = False, resume: str | None = None,
             on_progress=None, harness: str | None = None, save: str | None = None, against: str | None = None,
             max_cost: float | None = None, on_estimate=None):
        """Activation evals over a prompt set: a report, or two side by side (`compare`: a strategy, a folder, or
        `harness`: the other harness); `harness`: whose loop the runs go through."""
        resume = eval_plan.resume_ids(batch, resume)
        items = evals.load_prompt_set(self._path(path))
        saved = eval_saved.baseline(self.runs, against, items, compare=compare, save=save)  # `--against`: before any call
        client = choice.for_harness(harness, self.client)()
        eval_plan.check_batch_client(client, batch)
        model_id = self.resolve_model_id(client, model, None)
        reports = eval_plan.run_variants(list(self.scan().skills), client, model_id, items,
                                         eval_plan.variants(strategy, compare, self.learning.find), runs=runs or evals.DEFAULT_RUNS,
                                         compare=compare, behaviour=behaviour, batch=batch, resume=resume,
                                         show_path=self.show_path, on_progress=on_progress, run_log=self.runs,
                                         max_cost=max_cost, on_estimate=on_estimate, asker=self.asker)
        return eval_saved.keep(self.runs, save, saved, reports, model=model_id, harness=harness)  # `--save`: stored

    def gate(self):
        return Gate(self.policy, self.manifest, self._audit, scratch_root=os.path.join(self.cwd, RUNS_FOLDER),
                    protected=self.control_files(), working_folder=self.cwd)

    def control_files(self) -> list[str]:
        """The project's own control files: read-only inside every sandbox, whatever a rule grants."""
        return controls.control_files(self.cwd, self.manifest, resolve_path(self.cwd))

    def add_rule(self, kind: str, text: str, env: Sequence[str] = (), *, network: bool = False,
                 writable: Sequence[str] = (), unsandboxed: bool = False, limits=None, save: bool = False):
        """A rule the user typed (`%skills allow/deny`); `limits` raises the sandbox's limits ({"memory": "4G"});
        `save` also keeps it in the user's own policy file."""
        return controls.add_rule(self.policy, self.cwd, kind, text, env, network=network, writable=writable,
                        unsandboxed=unsandboxed, limits=limits, save=save)

    def trust(self, path: str | None = None, *, revoke: bool = False):
        """`%skills trust`: pin the sha256 of the project's policy file (or `path`); with `revoke`, forget it."""
        target = os.path.join(self.cwd, os.path.expanduser(path or POLICY_FILE))
        return controls.trust(self.policy, target, revoke, self._audit, self.show_path)

    def review(self, name: str, confirm: Callable[[], bool] | None = None):
        """(skill, changes since the last review, written): skills.lock is written only when `confirm()` says yes."""
        skill = self.skill(name)
        return (skill, *controls.review(self.manifest, skill, confirm, self._audit))

    def _run_folders(self, run: str) -> list[str]:
        return pending.run_folders(os.path.join(self.cwd, RUNS_FOLDER), run, self.last_run, self.cwd, self.show_path)

    def changes(self, run: str) -> list:
        """What run `run` (a run id, or `last`) changed in this session's folder and has not applied (changes.Change)."""
        return pending.pending_changes(self._run_folders(run), self.cwd)

    def apply(self, run: str, paths: Sequence[str] = ()):
        """`%skills apply RUN [PATH...]`: copy what the run changed into this folder (`pending.apply_runs`)."""
        return pending.apply_runs(self._run_folders(run), os.path.realpath(self.cwd), paths, run, self.control_files(),
                                  self._audit)

    def lint(self, target: str | Skill | None = None) -> dict[str, list]:
        """Description lint findings: of a catalog skill (by name), of a skill object, or of every catalog skill."""
        skills = [target] if isinstance(target, Skill) else [self.skill(target)] if target else self.scan().skills
        return {s.name: lint_skill(s) for s in skills}

    def lint_paths(self, paths: Sequence[str]) -> list[tuple[str, list]]:
        """(SKILL.md path, findings) for skill folders, SKILL.md files or collections (relative to the session's folder)."""
        return [item for path in paths for item in lint_path(os.path.join(self.cwd, path))]

    def prompt_listing(self, paths: Sequence[str]):
        """`to-prompt`: the <available_skills> XML of the skills under `paths`, or the verdicts of invalid ones."""
        return to_prompt.prompt_listing([os.path.join(self.cwd, p) for p in paths])

    def ledger_check(self, notebook: str | None = None, db: str | None = None, plan: str | None = None):
        """Each plan's open predictions, from an executed notebook's outputs or the database (read-only)."""
        return ledger_check.check(notebook, db or resolve_path(self.cwd), plan_name(plan) if plan else None)

    def ledger_export(self, db: str | None = None, plan: str | None = None, fmt: str = "jsonl") -> list[str]:
        return ledger_check.export_lines(db or resolve_path(self.cwd), plan_name(plan) if plan else None, fmt)

    def run_notebooks(self, paths: Sequence[str], **options) -> list[str]:
        """Execute notebooks headless, each in its own folder (`notebooks.run_notebooks` says the options)."""
        return notebooks.run_notebooks(list(paths), **options)

    def policy_state(self):
        """`%skills policy`: the rules, policy files, review states and sandbox as they stand now (safety.status)."""
        return status.policy_state(self.policy, self.scan().skills, self.manifest)

    def review_state(self, skill: Skill):
        """`%skills review`: each file's size, whether skills.lock holds the skill, and its path (safety.status)."""
        return status.review_state(skill, self.manifest, self.cwd)
