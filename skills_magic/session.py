"""SkillsSession: one object per kernel (or CLI call) holding the catalog and answering every front end.

Magics and the CLI only parse arguments, call a method here and display what it returns, so a notebook, a test
and a CI job share one code path. Nothing here imports IPython.
"""

from __future__ import annotations

import difflib
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skills_magic.skills.catalog import Catalog, CatalogScan, Source, default_sources
from skills_magic.clock import utc_now
from skills_magic.errors import InvalidArgument, NotASkillSource, SkillNotFound, SkillNotWritten, SourceNotFound
from skills_magic.skills.listing import DEFAULT_BUDGET_CHARS, Listing, text_listing
from skills_magic.skills.skill import Diagnostic, Skill
from skills_magic.skills.validate import Verdict, validate_folder, validate_path

if TYPE_CHECKING:
    from skills_magic.runs.agent import RunResult
    from skills_magic.models.base import ModelClient

RUNS_FOLDER = os.path.join(".skills", "runs")  # each sandboxed run's scratch folder (its outputs stay there)
MAX_LISTED_OUTPUTS = 50  # files named in a tool result; the rest are counted (30,000 files must not make 8 MB)
MAX_TOOL_RESULT_CHARS = 1024 * 1024  # a script's whole tool result (output and file list) stays under this
WRITE_FOLDER = os.path.join(".skills", "written")  # where `%%skill write` puts skills unless told otherwise
LEDGER_METADATA_KEY = "experiment-ledger"  # a skill with `metadata: {experiment-ledger: "true"}` gets the ledger tool
LEDGER_OUTPUT_CHARS = 4000  # a check's output kept in its observation; the rest is cut (and says so)
MAX_PARENT_HOPS = 3  # shown paths may climb this many folders from the cwd before we fall back to ~ or absolute


def display_path(path: str, cwd: str | None = None) -> str:
    """A path as shown in outputs: relative to the notebook's folder, so outputs are the same on every clone."""
    if not path:
        return path
    cwd = cwd or os.getcwd()
    absolute = os.path.abspath(path)
    try:
        relative = os.path.relpath(absolute, cwd)
    except ValueError:  # another drive on Windows
        relative = absolute
    if relative.split(os.sep)[: MAX_PARENT_HOPS + 1].count(os.pardir) <= MAX_PARENT_HOPS:
        return relative
    home = os.path.expanduser("~")
    if absolute.startswith(home + os.sep):
        return "~" + absolute[len(home) :]
    return absolute


@dataclass(frozen=True)
class SourceStatus:
    source: Source
    exists: bool
    skills: int


class SkillsSession:
    """The catalog of one kernel, and the operations the front ends offer on it."""

    def __init__(self, sources: list[Source] | None = None, cwd: str | None = None, extra_paths: list[str] | tuple = (),
                 allow: Sequence[str] = (), deny: Sequence[str] = ()):
        from skills_magic.safety.gate import unattended
        from skills_magic.safety.manifest import Manifest, lock_path
        from skills_magic.safety.policy import POLICY_FILE, Policy
        from skills_magic.safety.trust import TrustStore, user_policy_path

        self.cwd = os.path.abspath(cwd or os.getcwd())
        self.catalog = Catalog(sources if sources is not None else default_sources(self.cwd, extra=extra_paths))
        self.policy = Policy(trust=TrustStore.default())  # in the user's config folder, outside every project
        self.policy.extend("deny", deny, "IPython config")
        self.policy.extend("allow", allow, "IPython config")
        self.policy.load_file(user_policy_path(), owner="user")  # the user's own rules, with full powers
        self.policy.load_file(os.path.join(self.cwd, POLICY_FILE))  # the project's: allow rules inert until trusted
        self.manifest = Manifest(lock_path(self.cwd))
        self.asker = unattended  # front ends that can ask a person replace this
        self._database = None
        self._run_outputs: list[dict[str, Any]] = []
        self._run_changes: list[Any] = []  # changes.Change of the current model run's scripts, in run order
        self._run_ids: list[str] = []  # the run folders of the current model run's scripts
        self.plan: str | None = None  # the ledger plan `%ledger use` picked
        self.ledger_for_model = False  # offer the `experiment` tool in runs (`%ledger model on`)
        self.budget: int | None = DEFAULT_BUDGET_CHARS
        self.session_id = uuid.uuid4().hex  # ${CLAUDE_SESSION_ID} in skill bodies
        self.model_client: ModelClient | None = None  # chosen with `%skills model`; None: decided at run time
        self.model_id: str | None = None  # chosen with `%skills model ID`
        self.last_run: RunResult | None = None
        self.last_run_seconds: float | None = None
        self._listings: dict[tuple[int | None, str | None], tuple[CatalogScan, Listing, str]] = {}

    # --- catalog ------------------------------------------------------------------------------------------------

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
        scan = self.scan()
        return source, [s for s in scan.skills if s.source_root == source.root]

    def skill(self, name: str) -> Skill:
        scan = self.scan()
        found = scan.get(name)
        if found is None:
            raise SkillNotFound(name, difflib.get_close_matches(name, scan.names(), n=3))
        return found

    def listing(self, budget: int | None = None, source: str | None = None) -> tuple[CatalogScan, Listing, str]:
        """The text listing under `budget` characters (None: the session's budget; 0: everything)."""
        if budget is not None and budget < 0:
            raise InvalidArgument(f"a budget is a number of characters, not {budget}")
        scan = self.scan()
        budget = self.budget if budget is None else budget
        cached = self._listings.get((budget, source))
        if cached is not None and cached[0] is scan:  # nothing changed on disk: the same listing
            return cached
        skills = [s for s in scan.skills if source is None or s.source == source]
        listing, text = text_listing(skills, budget)
        self._listings[(budget, source)] = (scan, listing, text)
        return scan, listing, text

    def sources(self) -> list[SourceStatus]:
        scan = self.scan()
        return [SourceStatus(s, os.path.isdir(s.root), scan.counts.get((s.label, s.root), 0)) for s in self.catalog.sources]

    def diagnostics(self, severity: str | None = None, code: str | None = None) -> list[Diagnostic]:
        return [
            d
            for d in self.scan().diagnostics
            if (severity is None or d.severity == severity) and (code is None or d.code == code)
        ]

    def validate(self, target: str | None = None) -> list[Verdict]:
        """Strict verdicts: for a catalog name, a path, or (no target) every skill in the catalog."""
        if target is None:
            scan = self.scan()
            folders = [s.folder for s in scan.skills] + [os.path.dirname(r.path) for r in scan.skipped]
            return [validate_folder(f) for f in folders]
        found = self.scan().get(target)
        if found is not None:
            return [validate_folder(found.folder)]
        path = os.path.join(self.cwd, os.path.expanduser(target))
        if not os.path.exists(path):
            raise SkillNotFound(target, difflib.get_close_matches(target, self.scan().names(), n=3))
        return validate_path(path)

    # --- models and runs -----------------------------------------------------------------------------------------

    def choose_model(self, kind: str | None = None, value: str | None = None) -> ModelClient | None:
        """`%skills model`: `anthropic [ID]`, `scripted FILE`, `replay CASSETTE`, a model id, or `auto` (the default)."""
        if kind in (None, "auto"):
            self.model_client, self.model_id = None, None
        elif kind == "anthropic":
            from skills_magic.models.anthropic import AnthropicModel, warm_up

            warm_up()
            self.model_client, self.model_id = AnthropicModel(value), value
        elif kind == "scripted":
            from skills_magic.models.scripted import ScriptedModel

            self.model_client = ScriptedModel.from_file(self._path(_required(value, "scripted FILE")))
        elif kind == "keywords":  # offline: activates by keyword overlap, as measurements say models largely do
            from skills_magic.models.scripted import ScriptedModel, keyword_router

            overlap = _whole_number(value, "keywords [N]") if value else 2
            self.model_client = ScriptedModel(responder=keyword_router(overlap), source="keyword router")
        elif kind == "replay":
            from skills_magic.models.replay import ReplayModel

            self.model_client = ReplayModel(self._path(_required(value, "replay CASSETTE")))
        else:  # a model id for whichever client runs
            self.model_id = kind
        return self.model_client

    def _path(self, path: str) -> str:
        absolute = os.path.join(self.cwd, os.path.expanduser(path))
        if not os.path.exists(absolute):
            raise SourceNotFound(path)
        return absolute

    def client(self) -> ModelClient:
        """The chosen client; else Claude when ANTHROPIC_API_KEY is set; else a clear NoModelConfigured."""
        if self.model_client is not None:
            return self.model_client
        if os.environ.get("ANTHROPIC_API_KEY"):
            from skills_magic.models.anthropic import AnthropicModel

            self.model_client = AnthropicModel(self.model_id)
            return self.model_client
        from skills_magic.models.base import NoModelConfigured

        raise NoModelConfigured()

    def resolve_model_id(self, client: ModelClient, explicit: str | None, skill: Skill | None) -> str:
        """--model, else the explicitly run skill's own `model`, else `%skills model ID`, SKILLS_MAGIC_MODEL, default."""
        from skills_magic.models.anthropic import resolve_model

        if explicit:
            return resolve_model(explicit)
        if skill is not None and skill.frontmatter.model and skill.frontmatter.model != "inherit":
            return resolve_model(skill.frontmatter.model)
        recorded = getattr(client, "model", None) if client.name == "replay" else None
        return resolve_model(self.model_id or recorded)

    def resolve_model_id_only(self) -> str:
        from skills_magic.models.anthropic import resolve_model

        return resolve_model(self.model_id)

    # --- permissions, review, audit --------------------------------------------------------------------------

    @property
    def database(self):
        if self._database is None:
            from skills_magic.records.db import Database, resolve_path

            self._database = Database(resolve_path(self.cwd))
        return self._database

    def _audit(self, row: dict[str, Any]) -> None:
        """Append one audit row; its strings (a refusal's detail, an inline command) are stored with secrets masked."""
        from skills_magic.safety.redact import redactor

        masker = redactor()
        columns = ["session", *row]
        values = [self.session_id, *(masker.mask(value) for value in row.values())]
        self.database.connect().execute(
            f"INSERT INTO audit ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})", values)

    def audit(self, everything: bool = False) -> list[dict[str, Any]]:
        query = "SELECT * FROM audit" + ("" if everything else " WHERE session = ?") + " ORDER BY id"
        rows = self.database.connect().execute(query, () if everything else (self.session_id,)).fetchall()
        return [dict(r) for r in rows]

    @property
    def ledger(self):
        from skills_magic.records.ledger import Ledger

        return Ledger(self.database, self.session_id)

    def use_plan(self, slug: str) -> str:
        from skills_magic.records.ledger import plan_name

        self.plan = plan_name(slug)
        return self.plan

    def current_plan(self) -> str:
        from skills_magic.records.ledger import NoPlan

        if self.plan is None:
            raise NoPlan("no plan chosen: %ledger use SLUG (the plan is sci.SLUG)")
        return self.plan

    def test_prediction(self, label: str, asker=None):
        """Run a prediction's falsifying check through the permission gate and record what happened as an
        observation linked to it. Never writes the verdict."""
        plan = self.current_plan()
        prediction = self.ledger.prediction_entry(plan, label)
        outcome = self.gate().run_check("ledger", prediction.falsified_by, self.cwd, asker or self.asker)
        if outcome.run is None:
            return outcome, None
        run = outcome.run
        status = "timed out" if run.timed_out else f"exit code {run.exit_code}"
        output = (run.stdout + (("\n" + run.stderr) if run.stderr.strip() else "")).strip()
        if len(output) > LEDGER_OUTPUT_CHARS:
            output = output[:LEDGER_OUTPUT_CHARS] + f"\n[output cut at {LEDGER_OUTPUT_CHARS} characters]"
        text = f"ran the falsifying check `{prediction.falsified_by}`: {status}" + (f"\n{output}" if output else "")
        return outcome, self.ledger.observation(plan, text, prediction.label)

    def _ledger_tool(self, skill: Skill | None):
        """The `experiment` tool, when `%ledger model on` or the explicitly run skill asks for it in its metadata."""
        asked = skill is not None and skill.frontmatter.metadata.get(LEDGER_METADATA_KEY, "").lower() == "true"
        if not (self.ledger_for_model or asked):
            return None
        plan = self.current_plan()
        ledger = self.ledger

        def call(data: dict[str, Any]):
            action = data.get("action")
            if action == "list":
                state = ledger.state(plan)
                lines = [state.headline] + [e.summary() for e in state.entries]
                return "\n".join(lines), None
            actions = {
                "hypothesis": lambda: ledger.hypothesis(plan, data.get("text")),
                "prediction": lambda: ledger.prediction(plan, data.get("text"), data.get("falsified_by"), data.get("hypothesis")),
                "verdict": lambda: ledger.verdict(plan, str(data.get("prediction", "")), str(data.get("outcome", "")), data.get("evidence")),
                "observation": lambda: ledger.observation(plan, data.get("text"), data.get("prediction")),
                "conclusion": lambda: ledger.conclusion(plan, data.get("text")),
                "skip": lambda: ledger.skip(plan, str(data.get("prediction", "")), data.get("reason")),
            }
            if action not in actions:
                raise ValueError(f"`action` must be one of {', '.join([*actions, 'list'])}")
            entry = actions[action]()
            return f"recorded {entry.plan} {entry.summary()}", entry

        return plan, call

    def verify(self, claims, *, votes: int | None = None, refutations: int | None = None, concurrency: int | None = None,
               model: str | None = None, voters: Sequence[str] = (), timeout: float | None = None,
               max_claims: int | None = None, ledger_plan: str | None = None, on_vote=None, on_ready=None):
        """Verify claims by adversarial votes (all votes concurrently, in a worker thread's event loop).

        `voters` are seats: "model" or "script:SKILL:PATH" (a script runs only under an allow rule: a vote cannot
        stop to ask a person); seats beyond those given are model seats. KeyboardInterrupt cancels the run and keeps
        the votes already in.
        """
        from skills_magic.runs import verify as v
        from skills_magic.safety.gate import unattended
        from skills_magic.records.ledger import plan_name

        if ledger_plan:
            plan_name(ledger_plan)  # a bad plan name is refused before any vote is spent

        seats: list[v.Voter] = []
        model_voter: list[v.ModelVoter] = []  # one model voter, created only if a seat needs it

        def model_seat() -> v.ModelVoter:
            if not model_voter:
                client = self.client()
                if hasattr(client, "for_new_loop"):
                    client = client.for_new_loop()
                model_voter.append(v.ModelVoter(client, self.resolve_model_id(client, model, None)))
            return model_voter[0]

        for spec in list(voters) or ["model"]:
            if spec == "model":
                seats.append(model_seat())
            elif spec.startswith("script:") and spec.count(":") >= 2:
                _, skill_name, path = spec.split(":", 2)
                skill = self.skill(skill_name)
                gate = self.gate()

                def run(stdin: str, skill=skill, path=path, gate=gate):
                    outcome = gate.run_script(skill, path, [], stdin, unattended)
                    if outcome.run is None:
                        return None, outcome.error
                    if outcome.run.exit_code != 0:
                        return None, f"{path} exit code {outcome.run.exit_code}: {outcome.run.stderr.strip()[:200]}"
                    return outcome.run.stdout, None

                seats.append(v.ScriptVoter(run, f"{skill.name}:{path}"))
            else:
                raise InvalidArgument(f"a voter is `model` or `script:SKILL:PATH`, not {spec!r}")
        n_votes = votes or v.VOTES_PER_CLAIM
        while voters and len(seats) < n_votes:  # seats not given are model seats
            seats.append(model_seat())
        options = dict(votes_per_claim=n_votes, refutations_required=refutations or v.REFUTATIONS_REQUIRED,
                       concurrency=concurrency or v.CONCURRENCY, timeout=timeout or v.VOTE_TIMEOUT_SECONDS,
                       max_claims=max_claims or v.MAX_CLAIMS, on_vote=on_vote)
        if on_ready is not None:
            on_ready()  # the voters are known: the run really starts now
        result = _run_in_loop_thread(lambda: v.verify(claims, seats, **options))
        if ledger_plan:
            ledger, plan = self.ledger, self.use_plan(ledger_plan)
            for claim in result.claims:
                counts = {s: sum(vote.status == s for vote in claim.votes) for s in ("upheld", "refuted", "abstained")}
                ledger.observation(plan, f"claim verified by {n_votes} votes: {claim.outcome} (upheld {counts['upheld']}, "
                                         f"refuted {counts['refuted']}, abstained {counts['abstained']}): {claim.claim.claim}")
        return result

    def eval(self, path: str, *, runs: int | None = None, model: str | None = None, strategy: str = "plain",
             compare: str | None = None, behaviour: bool = False, batch: bool = False, resume: str | None = None,
             on_progress=None):
        """Activation evals over a prompt set; `compare` is a strategy (plain / forced) or a folder holding other
        versions of the skills (they shadow the catalog's). Returns the reports (one, or two side by side)."""
        from skills_magic.runs import evals

        if resume and not batch:
            raise InvalidArgument("--resume continues a batch run: add --batch")
        items = evals.load_prompt_set(self._path(path))
        client = self.client()
        if batch and not getattr(client, "supports_batches", False):  # the protocol's default for a duck-typed client
            raise InvalidArgument(f"--batch sends requests through the Message Batches API: it needs the Anthropic client "
                                  f"(ANTHROPIC_API_KEY, or %skills model anthropic), not {client.name!r}")
        if isinstance(resume, str) and "," in resume:
            resume = [part.strip() for part in resume.split(",") if part.strip()]  # every batch of the run, retries too
        model_id = self.resolve_model_id(client, model, None)
        runs = runs or evals.DEFAULT_RUNS
        variants = [(strategy, None)]
        if compare:
            if compare in ("plain", "forced"):
                variants.append((compare, None))
            else:
                variants.append((strategy, self._path(compare)))
        reports = []
        for number, (variant_strategy, folder) in enumerate(variants):
            skills = self._skills_with(folder)
            if folder is not None:
                label = self.show_path(folder)
            elif compare and compare not in ("plain", "forced"):
                label = "catalog"
            else:
                label = variant_strategy
            if batch:
                from skills_magic.runs.batch_evals import run_batch_eval

                report = run_batch_eval(skills, client, model_id, items, runs=runs, strategy=variant_strategy,
                                        label=label, show_path=self.show_path, batch_id=resume if number == 0 else None,
                                        on_progress=on_progress)
            else:
                report = evals.run_eval(skills, client, model_id, items, runs=runs, strategy=variant_strategy,
                                        label=label, show_path=self.show_path, on_progress=on_progress)
            if behaviour:
                report.behaviour = evals.behaviour_evals(skills, client, model_id, items, show_path=self.show_path)
            reports.append(report)
        return reports

    def _skills_with(self, folder: str | None) -> list:
        """The catalog's skills, with those found under `folder` taking precedence (another version of them)."""
        skills = list(self.scan().skills)
        if folder is None:
            return skills
        other = Catalog([Source("compare", folder, explicit=True)]).scan().skills
        names = {s.name for s in other}
        return list(other) + [s for s in skills if s.name not in names]

    def write_skill(self, name: str, text: str, folder: str | None = None):
        """`%%skill write`: the text becomes NAME/SKILL.md (created or replaced), then validated; the folder is a
        session source, so the catalog sees the new version at once."""
        from skills_magic.skills.validate import validate_folder

        root = os.path.join(self.cwd, os.path.expanduser(folder)) if folder else os.path.join(self.cwd, WRITE_FOLDER)
        target = os.path.join(root, name)
        try:
            os.makedirs(target, exist_ok=True)
            with open(os.path.join(target, "SKILL.md"), "w", encoding="utf-8") as handle:
                handle.write(text if text.endswith("\n") else text + "\n")
        except OSError as error:
            raise SkillNotWritten(f"cannot write {os.path.relpath(target, self.cwd)}/SKILL.md: {error.strerror or error}") from None
        self.catalog.add(root)
        from skills_magic.skills.validate import load_skill

        # the skill just written (another source may win in the catalog under this name)
        return validate_folder(target), load_skill(os.path.join(target, "SKILL.md")).skill

    def gate(self):
        from skills_magic.safety.gate import Gate

        return Gate(self.policy, self.manifest, self._audit, scratch_root=os.path.join(self.cwd, RUNS_FOLDER),
                    protected=self.control_files(), working_folder=self.cwd)

    def control_files(self) -> list[str]:
        """The project's own control files: read-only inside every sandbox, whatever a rule grants."""
        from skills_magic.records.db import resolve_path
        from skills_magic.safety.policy import POLICY_FILE

        database = resolve_path(self.cwd)
        return [os.path.join(self.cwd, POLICY_FILE), self.manifest.path, os.path.join(self.cwd, ".skills"), database,
                database + "-wal", database + "-shm"]

    def add_rule(self, kind: str, text: str, env: Sequence[str] = (), *, network: bool = False,
                 writable: Sequence[str] = (), unsandboxed: bool = False, limits=None, save: bool = False):
        """A rule the user typed (`%skills allow/deny`); `limits` raises the sandbox's limits ({"memory": "4G"});
        `save` also keeps it in the user's own policy file."""
        from skills_magic.safety.policy import parse_rule

        writable = [_writable_folder(os.path.join(self.cwd, os.path.expanduser(p))) for p in writable]
        rule = self.policy.add(parse_rule(kind, text, f"%skills {kind}", env, network=network, writable=writable,
                                          unsandboxed=unsandboxed, limits=limits))
        if save:
            self.policy.save_rule(rule)
        return rule

    def trust(self, path: str | None = None, *, revoke: bool = False):
        """`%skills trust`: record the sha256 of the project's policy file (or `path`) in the user's trust store, so
        its allow rules apply until one byte of it changes; returns the report of every rule those bytes hold. With
        `revoke`, forget it: its allow rules are inert again."""
        from skills_magic.safety.policy import POLICY_FILE

        target = os.path.join(self.cwd, os.path.expanduser(path)) if path else os.path.join(self.cwd, POLICY_FILE)
        report = self.policy.trust_file(target, revoke=revoke)
        if not revoke or report.sha256:
            self._audit({"at": utc_now(), "event": "revoke" if revoke else "trust", "skill": "*",
                         "path": self.show_path(report.path), "digest": report.sha256,
                         "decision": "deny" if revoke else "allow", "decided_by": "the user: %skills trust",
                         "detail": f"{len(report.rules)} rules, {len(report.problems)} refused or dropped"
                                   if not revoke else "its allow rules are inert again"})
        return report

    def review(self, name: str, confirm: Callable[[], bool] | None = None):
        """The files of a skill with their digests and what changed since the last review; writes skills.lock only
        when `confirm()` says yes. Returns (changes, written). Raises ReviewRefused, recording nothing, for a skill
        holding a file that is never read (a FIFO, a device, a symlink leaving the skill)."""
        from skills_magic.safety.manifest import ReviewRefused, UnsafeFile, skill_files

        skill = self.skill(name)
        try:
            files = skill_files(skill.folder)  # one scan, shown and recorded: the lock holds the bytes confirmed
        except UnsafeFile as error:
            raise ReviewRefused(error.of(skill.name)) from None
        changes = self.manifest.compare(skill.name, skill.folder, files)
        needed = any(c.kind != "unchanged" for c in changes) or self.manifest.entry(skill.name) is None
        written = bool(needed and confirm is not None and confirm())
        if written:
            self.manifest.write(skill.name, skill.folder, skill.version, files)
            self._audit({"at": utc_now(), "event": "review", "skill": skill.name, "path": "*", "decision": "allow",
                         "decided_by": "the reviewer", "detail": f"{len(changes)} files recorded in skills.lock"})
        return skill, changes, written

    def _script_runner(self, asker, placeholders: dict[str, str] | None = None):
        """The model's `run_skill_script` and inline-command runners. `placeholders`: the client's (a cassette writes a
        run id the tool result names as ${SKILLS_MAGIC_RUN_N}, so a replay matches though run ids differ)."""
        from skills_magic.runs.agent import TraceEvent

        gate = self.gate()
        named: list[str] = []  # the run ids this runner's tool results named, in order

        def run(skill: Skill, path: str, arguments: Sequence[str], stdin: str):
            outcome = gate.run_script(skill, path, arguments, stdin, asker)
            where = f"{skill.name}/{path}"
            if outcome.run is None:
                return outcome.error, True, TraceEvent("execute", where, bytes=len(stdin.encode("utf-8")), detail=outcome.error[:120])
            run_ = outcome.run
            event = TraceEvent("execute", where, bytes=run_.stdin_bytes, detail=run_.ending)
            files = _outputs_of(run_, f"{skill.name}/{path}")
            self._run_outputs.extend(files)
            changes = _changes_of(run_)
            self._run_changes.extend(changes)
            if run_.run_folder:
                self._run_ids.append(os.path.basename(run_.run_folder))
            if changes and placeholders is not None and changes[0].run_id not in named:
                named.append(changes[0].run_id)
                placeholders.setdefault(changes[0].run_id, f"${{SKILLS_MAGIC_RUN_{len(named)}}}")
            listing = written_listing(files) + changes_listing(changes)
            hint = f"\n{run_.hint}" if run_.hint else ""  # the cause and its fix, last, where a model reads it
            if run_.failed:
                return cap_tool_result(f"{path} {run_.ending}\n{run_.stderr}".rstrip() + hint, listing), True, event
            return cap_tool_result(run_.stdout + hint, listing), False, event

        return run, (lambda skill, body: gate.expand_inline(skill, body, asker))

    def run(self, task: str, skill: str | None = None, arguments: Sequence[str] = (), *, model: str | None = None,
            max_turns: int | None = None, record: str | None = None, replay: str | None = None,
            on_text: Callable[[str], None] | None = None, on_event: Callable[[str, Any], None] | None = None,
            asker=None) -> RunResult:
        """Run a task through the agent loop; with `skill`, that skill is activated explicitly."""
        from skills_magic.runs.agent import DEFAULT_MAX_TURNS, Agent

        chosen = self.skill(skill) if skill is not None else None
        if replay is not None:
            from skills_magic.models.replay import ReplayModel

            client: ModelClient = ReplayModel(self._path(replay))
        else:
            client = self.client()
        if record is not None:
            from skills_magic.models.replay import RecordingModel

            client = RecordingModel(client, os.path.join(self.cwd, record))
        placeholders = getattr(client, "placeholders", None)  # declared by the protocol; a duck-typed client may omit it
        run_script, expand_inline = self._script_runner(asker or self.asker,
                                                        placeholders if isinstance(placeholders, dict) else None)
        ledger = self._ledger_tool(chosen)
        agent = Agent(self.scan().skills, client, self.resolve_model_id(client, model, chosen),
                      show_path=self.show_path, session_id=self.session_id, budget=self.budget,
                      max_turns=max_turns or DEFAULT_MAX_TURNS, run_script=run_script, expand_inline=expand_inline,
                      ledger=ledger)
        started = time.perf_counter()
        self._run_outputs, self._run_changes, self._run_ids = [], [], []
        try:
            result = agent.run(task, chosen.name if chosen else None, arguments, on_text=on_text, on_event=on_event)
        finally:
            self.last_run_seconds = time.perf_counter() - started
        result.outputs = list(self._run_outputs)
        result.changes = list(self._run_changes)
        result.run_id = self._run_ids[-1] if self._run_ids else None
        self.last_run = result
        return result

    def run_script(self, skill: str, script: str, stdin: str = "", arguments: Sequence[str] = ()) -> RunResult:
        """`--no-model --script`: the user runs one of a skill's scripts directly, with no model involved.

        It passes the same gate as a model's request (the manifest check, deny rules, the audit), except that the
        user typing the command answers the question a prompt would ask.
        """
        from skills_magic.runs.agent import RunResult, TraceEvent

        chosen = self.skill(skill)
        result = RunResult(task=stdin, skill=chosen.name, client="none", model="-")
        started = time.perf_counter()
        outcome = self.gate().run_script(chosen, script, arguments, stdin, self.asker, requested_by="user")
        where = f"{chosen.name}/{script}"
        if outcome.run is None:
            result.error, result.stop_reason = outcome.error, "denied" if not outcome.allowed else "error"
            result.trace.append(TraceEvent("execute", where, bytes=len(stdin.encode("utf-8")), detail=(outcome.error or "")[:120]))
        else:
            run = outcome.run
            result.trace.append(TraceEvent("execute", where, bytes=run.stdin_bytes, detail=run.ending))
            result.final_text = run.stdout
            result.note = run.stderr.strip()
            result.outputs = _outputs_of(run, where)
            result.changes = _changes_of(run)
            result.run_id = os.path.basename(run.run_folder) if run.run_folder else None
            result.stop_reason = "script_failed" if run.failed else "no_model"
            if run.failed:
                result.error = f"{script} {run.ending}" + (f"\n{run.hint}" if run.hint else "")
            elif run.hint:  # it ended well but was refused something (a host): say what would allow it
                result.note = f"{result.note}\n{run.hint}".strip()
        self.last_run_seconds = time.perf_counter() - started
        self.last_run = result
        return result

    # --- a run's changes to the working folder: the user applies them ------------------------------------------

    def _run_folders(self, run: str) -> list[str]:
        """The run folders `run` names: a run id in .skills/runs/, or `last`: every script run of the last run."""
        from skills_magic.safety.changes import RUN_NAME, recent_runs, run_facts
        from skills_magic.errors import ChangeError, RunNotFound

        root = os.path.join(self.cwd, RUNS_FOLDER)
        if run == "last":
            last = self.last_run
            ids = [c.run_id for c in last.changes if c.run_id] + [last.run_id] if last is not None else []
            ids = [i for i in dict.fromkeys(ids) if i]
            if not ids:
                raise RunNotFound(run, recent_runs(root), why="no script of this session has run in a sandbox yet")
        else:
            ids = [run]
        folders = []
        for run_id in ids:
            folder = os.path.join(root, run_id)
            if not RUN_NAME.fullmatch(run_id) or os.path.islink(folder) or not os.path.isdir(folder):
                raise RunNotFound(run_id, recent_runs(root))
            seen = run_facts(folder).get("working_folder")
            if isinstance(seen, str) and os.path.realpath(seen) != os.path.realpath(self.cwd):
                raise ChangeError(f"{run_id} ran in {self.show_path(seen)}, not in this session's folder: "
                                  "apply it from a session there")
            folders.append(folder)
        return folders

    def changes(self, run: str) -> list:
        """What run `run` (a run id, or `last`) changed in this session's folder and has not applied (changes.Change)."""
        from skills_magic.safety.changes import run_changes

        return [c for folder in self._run_folders(run) for c in run_changes(folder, self.cwd)]

    def apply(self, run: str, paths: Sequence[str] = ()):
        """`%skills apply RUN [PATH...]`: copy what the run changed (every change, or those under `paths`) into this
        session's folder; the user typing the command is the decision. Control files, paths leaving the folder and
        files changed on disk since the run started are refused, with why. An audit row for each file."""
        from skills_magic.safety.changes import ApplyReport, apply_changes, run_changes, run_facts, select
        from skills_magic.errors import UnknownChange
        from skills_magic.safety.manifest import digest

        folders = self._run_folders(run)
        work = os.path.realpath(self.cwd)
        chosen: dict[str, list[str] | None] = {folder: None for folder in folders}
        if paths:
            changed = {folder: run_changes(folder, work) for folder in folders}
            chosen = {folder: [] for folder in folders}
            for path in paths:
                found = False
                for folder in folders:
                    try:
                        select(changed[folder], [path], work, os.path.basename(folder))
                    except UnknownChange:
                        continue
                    chosen[folder].append(path)
                    found = True
                if not found:
                    raise UnknownChange(path, run if len(folders) > 1 else os.path.basename(folders[0]),
                                        sorted({c.path for cs in changed.values() for c in cs}))
        report = ApplyReport()
        for folder, wanted in chosen.items():
            if wanted == []:
                continue
            part = apply_changes(folder, work, wanted, protected=self.control_files())
            skill = str(run_facts(folder).get("skill") or "*")
            for change in part.applied:
                try:
                    sha = digest(change.file) if change.file and change.link is None else None
                except OSError:
                    sha = None
                self._audit({"at": utc_now(), "event": "apply", "skill": skill, "path": change.path, "digest": sha,
                             "decision": "allow", "decided_by": "the user: %skills apply",
                             "detail": f"{change.summary()} from {change.run_id}"})
            for change, reason in part.refused:
                shown = change.path if hasattr(change, "path") else str(change)
                self._audit({"at": utc_now(), "event": "apply", "skill": skill, "path": shown, "decision": "deny",
                             "decided_by": "the apply checks", "detail": f"refused from {os.path.basename(folder)}: {reason}"})
            report = report.merge(part)
        return report

    def show_path(self, path: str) -> str:
        """A path for outputs: the same on every machine and clone, so notebooks re-run identically.

        Bundled skills are shown inside `<bundled>` (wherever the package is installed); other paths relative to the
        notebook's folder when that is near, else relative to their source (`<session>/collection/skill`).
        """
        if not path:
            return path
        absolute = os.path.abspath(path)
        sources = sorted(self.catalog.sources, key=lambda s: s.label != "bundled")
        for source in sources:
            if source.label == "bundled" and _is_under(absolute, source.root):
                return _inside(f"<{source.label}>", absolute, source.root)
        shown = display_path(absolute, self.cwd)
        if not os.path.isabs(shown) and not shown.startswith("~"):
            return shown
        for source in sources:
            if _is_under(absolute, source.root):
                return _inside(f"<{source.label}>", absolute, os.path.dirname(source.root))
        return shown


def _writable_folder(path: str) -> str:
    """A `--write` path as the sandbox can bind it: an existing file or folder, or a folder created now (a grant is
    never dropped silently); a file that does not exist yet is refused with what to grant instead."""
    from skills_magic.safety.policy import RuleError

    if os.path.lexists(path):
        return path
    if os.path.splitext(path)[1]:
        raise RuleError(f"--write {path}: no such file; a grant binds an existing file or folder: grant its folder "
                        f"(--write {os.path.dirname(path) or '.'}) or create the file first")
    try:
        os.makedirs(path)
    except OSError as error:
        raise RuleError(f"--write {path}: it does not exist and cannot be created ({error.strerror or error})") from None
    return path


def written_listing(files: Sequence[dict[str, Any]]) -> str:
    """The lines that tell the model which files a run wrote: the first MAX_LISTED_OUTPUTS, then one line for the rest."""
    lines = [f"\n[wrote {o['path']} ({o['bytes']:,} bytes) in $SKILLS_MAGIC_OUTPUT]" for o in files[:MAX_LISTED_OUTPUTS]]
    rest = files[MAX_LISTED_OUTPUTS:]
    if rest:
        lines.append(f"\n[... and {len(rest):,} more files ({sum(o['bytes'] for o in rest):,} bytes) not listed]")
    return "".join(lines)


def changes_listing(changes: Sequence[Any]) -> str:
    """The lines that tell the model what a run changed in the working folder, pending the user's `%skills apply`:
    the first MAX_LISTED_OUTPUTS, then one line for the rest."""
    lines = [f"\n[{c.summary()} in the working folder: not applied; the user applies with %skills apply {c.run_id}]"
             for c in changes[:MAX_LISTED_OUTPUTS]]
    rest = changes[MAX_LISTED_OUTPUTS:]
    if rest:
        lines.append(f"\n[... and {len(rest):,} more changes ({sum(c.bytes for c in rest):,} bytes) in the working folder "
                     "not listed: not applied]")
    if changes:
        lines.append("\n[scripts run later see the working folder without these changes until the user applies them]")
    return "".join(lines)


def cap_tool_result(text: str, listing: str = "") -> str:
    """A script's tool result, output and file list together, cut to MAX_TOOL_RESULT_CHARS (and saying so)."""
    whole = text + listing
    if len(whole) <= MAX_TOOL_RESULT_CHARS:
        return whole
    room = max(0, MAX_TOOL_RESULT_CHARS - len(listing[:MAX_TOOL_RESULT_CHARS // 2]) - 100)
    return (text[:room] + f"\n[tool result cut: {len(whole) - room - len(listing[:MAX_TOOL_RESULT_CHARS // 2]):,} "
            "more characters not shown]" + listing[:MAX_TOOL_RESULT_CHARS // 2])


def _outputs_of(run, script: str) -> list[dict[str, Any]]:
    """The files a sandboxed run left in its scratch folder: shown by name and size, kept by absolute path."""
    if not run.scratch:
        return []
    return [{"script": script, "path": path, "bytes": size, "file": os.path.join(run.scratch, path)}
            for path, size in run.outputs]


def _changes_of(run) -> list[Any]:
    """What a sandboxed run changed in the working folder it saw copy-on-write (changes.Change, sorted by path)."""
    if not run.run_folder or not run.working_folder:
        return []
    from skills_magic.safety.changes import run_changes

    try:
        return run_changes(run.run_folder, run.working_folder)
    except OSError:  # the run's folder is unreadable: `%skills apply` says why
        return []


def _run_in_loop_thread(make_coroutine):
    """Run a coroutine to completion in a worker thread with its own event loop (a notebook's kernel already runs
    one in the main thread). KeyboardInterrupt in the caller cancels it; the coroutine returns what it has."""
    import asyncio
    import threading

    box: dict[str, Any] = {}
    started, finished = threading.Event(), threading.Event()

    def work() -> None:
        loop = asyncio.new_event_loop()
        try:
            box["task"] = loop.create_task(make_coroutine())
            box["loop"] = loop
            started.set()
            box["result"] = loop.run_until_complete(box["task"])
        except BaseException as error:  # handed to the caller's thread
            box["error"] = error
        finally:
            started.set()
            loop.close()
            finished.set()

    thread = threading.Thread(target=work, name="skills-magic-verify", daemon=True)
    thread.start()
    # wait on an Event, not on join(): on Python <= 3.12 an interrupted join() can mark a live thread as stopped
    cancelled = False
    while not finished.is_set():
        try:
            finished.wait(0.1)
        except KeyboardInterrupt:
            if not cancelled:
                cancelled = True
                started.wait()
                if "loop" in box:
                    box["loop"].call_soon_threadsafe(box["task"].cancel)
    if "error" in box:
        raise box["error"]
    return box["result"]


def _required(value: str | None, usage: str) -> str:
    if not value:
        raise InvalidArgument(f"usage: %skills model {usage}")
    return value


def _whole_number(value: str, usage: str) -> int:
    if not value.isdigit():
        raise InvalidArgument(f"usage: %skills model {usage} (N a whole number), not {value!r}")
    return int(value)


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _inside(label: str, path: str, root: str) -> str:
    relative = os.path.relpath(path, root)
    return label if relative == os.curdir else f"{label}/{relative}"
