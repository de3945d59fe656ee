"""The `%skills` magics: parse the line, call the session, return a view. No logic lives here (usage: `%skills?`)."""

from __future__ import annotations

import argparse
import os
import shlex
import time

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from traitlets import List, Unicode

from skills_magic.notebook import views as display
from skills_magic.errors import SkillsMagicError
from skills_magic.safety.manifest import skill_files
from skills_magic.session import SkillsSession
from skills_magic.skills.skill import CODES



SHORT_USAGE = "usage: %skills list|show|validate|add|sources|diagnostics|model|trace ... (`%skills?` for details)"
RUN_USAGE = ("usage: %%skill run [NAME [ARGS...]] [--model M] [--max-turns N] [--record FILE | --replay FILE] [--background] "
             "[--no-model --script PATH [ARG...]]; the cell body is the task (`%%skill?` for details)")
STREAM_UPDATE_SECONDS = 0.1  # redraw a streaming answer at most this often: smooth to read, cheap for the kernel
SOURCE_LABELS = ("session", "path", "project", "user", "bundled")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line in the notebook) instead of printing and exiting; a subclass names
    its own usage line (subparsers are made of the same class, so they share it)."""

    usage_line = SHORT_USAGE

    def error(self, message):
        raise UsageError(f"{message}; {self.usage_line}")

    def exit(self, status=0, message=None):
        raise UsageError(self.usage_line)


def _budget(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a budget is a number of characters (0: no budget), not {value}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="skills", add_help=False)
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    listing = sub.add_parser("list", add_help=False)
    listing.add_argument("--source", choices=SOURCE_LABELS, help="only skills from this source")
    listing.add_argument("--budget", type=_budget, help="character budget (default 8000); 0 shows everything")
    listing.add_argument("--json", action="store_true", help="return the listing as JSON data")
    show = sub.add_parser("show", add_help=False)
    show.add_argument("name")
    validate = sub.add_parser("validate", add_help=False)
    validate.add_argument("target", nargs="?")
    add = sub.add_parser("add", add_help=False)
    add.add_argument("path")
    sub.add_parser("sources", add_help=False)
    diagnostics = sub.add_parser("diagnostics", add_help=False)
    diagnostics.add_argument("--severity", choices=["error", "warning", "info"])
    diagnostics.add_argument("--code", choices=sorted(CODES))
    diagnostics.add_argument("--json", action="store_true")
    model = sub.add_parser("model", add_help=False)
    model.add_argument("choice", nargs="?", help="auto | anthropic [ID] | scripted FILE | keywords [N] | replay CASSETTE | a model id")
    model.add_argument("value", nargs="?")
    sub.add_parser("trace", add_help=False)
    evaluate = sub.add_parser("eval", add_help=False)
    evaluate.add_argument("file")
    evaluate.add_argument("--runs", type=_positive)
    evaluate.add_argument("--model")
    evaluate.add_argument("--strategy", choices=["plain", "forced"], default="plain")
    evaluate.add_argument("--compare")
    evaluate.add_argument("--behaviour", "--behavior", action="store_true")
    evaluate.add_argument("--batch", action="store_true")
    evaluate.add_argument("--resume", help="the batch ids to resume after a kernel restart, comma-separated (with --batch)")
    evaluate.add_argument("--chart", help="also save the bar chart as this SVG file")
    lint = sub.add_parser("lint", add_help=False)
    lint.add_argument("name", nargs="?")
    for kind in ("allow", "deny"):
        rule = sub.add_parser(kind, add_help=False)
        rule.add_argument("rule", nargs="+", help="SKILL:PATH-PATTERN, e.g. source-verification:scripts/* (spaces allowed)")
        rule.add_argument("--save", action="store_true", help="also keep it in your config folder's skills-policy.yaml")
        if kind == "allow":
            rule.add_argument("--env", action="append", default=[], help="a secret-looking variable the script may see")
            rule.add_argument("--network", nargs="?", const=True, default=False, metavar="HOSTS",
                              help="HOSTS (pypi.org,*.crossref.org): only those, through the proxy; alone: everything")
            rule.add_argument("--write", action="append", default=[], help="a path the script may write besides its scratch")
            rule.add_argument("--unsandboxed", action="store_true", help="run even where no sandbox can be made")
            rule.add_argument("--memory", help="memory a process may use (default 2G), e.g. 4G")
            rule.add_argument("--processes", help="processes and threads together (default 256)")
            rule.add_argument("--cpu", help="CPU seconds a process may use (default 120)")
            rule.add_argument("--max-writes", dest="max_writes", help="everything a run writes together (default 256M)")
            rule.add_argument("--max-file", dest="max_file", help="the largest file a run writes (default 1G)")
            rule.add_argument("--timeout", help="seconds a run may take in all (default 60)")
    sub.add_parser("policy", add_help=False)
    trust = sub.add_parser("trust", add_help=False)
    trust.add_argument("--revoke", action="store_true", help="forget the trusted digest: the file's allow rules are inert again")
    review = sub.add_parser("review", add_help=False)
    review.add_argument("name")
    review.add_argument("--yes", action="store_true", help="accept the bytes shown without a prompt")
    audit = sub.add_parser("audit", add_help=False)
    audit.add_argument("--all", action="store_true", help="every session's records, not only this one's")
    apply = sub.add_parser("apply", add_help=False)
    apply.add_argument("run", help="a run id (run-ab12cd34) or `last`: the scripts of this session's last run")
    apply.add_argument("paths", nargs="*", help="only these changed files (or folders), relative to the working folder")
    return parser


LEDGER_USAGE = ("usage: %ledger use SLUG | hypothesis TEXT | prediction TEXT --falsified-by CHECK --hypothesis H | "
                "verdict P confirmed|refuted|inconclusive [--evidence TEXT] | observation TEXT [--prediction P] | "
                "conclusion TEXT | skip P --reason TEXT | list | gate | test P | model on|off (`%ledger?` for details)")


def _ledger_words(line: str) -> list[str]:
    """Words of a %ledger line: double quotes group, and an apostrophe is just a letter (the station's file)."""
    lexer = shlex.shlex(line, posix=True)
    lexer.quotes = '"'
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


class _LedgerParser(_Parser):
    usage_line = LEDGER_USAGE


def _build_ledger_parser() -> argparse.ArgumentParser:
    parser = _LedgerParser(prog="ledger", add_help=False)
    sub = parser.add_subparsers(dest="action", parser_class=_LedgerParser)
    sub.add_parser("use", add_help=False).add_argument("slug")
    for action in ("hypothesis", "conclusion"):
        sub.add_parser(action, add_help=False).add_argument("text", nargs="*")
    prediction = sub.add_parser("prediction", add_help=False)
    prediction.add_argument("text", nargs="*")
    prediction.add_argument("--falsified-by", required=True)
    prediction.add_argument("--hypothesis", required=True)
    verdict = sub.add_parser("verdict", add_help=False)
    verdict.add_argument("prediction")
    verdict.add_argument("outcome")
    verdict.add_argument("--evidence")
    observation = sub.add_parser("observation", add_help=False)
    observation.add_argument("text", nargs="*")
    observation.add_argument("--prediction")
    skip = sub.add_parser("skip", add_help=False)
    skip.add_argument("prediction")
    skip.add_argument("--reason", required=True)
    for action in ("list", "gate"):
        sub.add_parser(action, add_help=False).add_argument("--plan")
    sub.add_parser("test", add_help=False).add_argument("prediction")
    sub.add_parser("model", add_help=False).add_argument("switch", choices=["on", "off"])
    return parser


class _RunParser(_Parser):
    usage_line = RUN_USAGE


def _turns(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least one turn, not {value}")
    return value


VERIFY_USAGE = ("usage: %%skill verify [--votes N] [--refutations R] [--concurrency C] [--model M] [--voter model|"
                "script:SKILL:PATH ...] [--timeout S] [--max-claims K] [--ledger SLUG]; the cell is a YAML list of "
                "{claim, quote, source}")


class _VerifyParser(_Parser):
    usage_line = VERIFY_USAGE


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


def _build_verify_parser() -> argparse.ArgumentParser:
    parser = _VerifyParser(prog="skill verify", add_help=False)
    parser.add_argument("--votes", type=_positive)
    parser.add_argument("--refutations", type=_positive)
    parser.add_argument("--concurrency", type=_positive)
    parser.add_argument("--model")
    parser.add_argument("--voter", action="append", default=[])
    parser.add_argument("--timeout", type=_seconds)
    parser.add_argument("--max-claims", type=_positive)
    parser.add_argument("--ledger")
    return parser


def split_script_words(words: list[str]) -> tuple[list[str], list[str] | None]:
    """`%%skill run`'s words, split where the script's own begin: every word after `--script PATH` is the script's
    (options like `--port 8765` too), and one `--` right after PATH is dropped; None when there is no `--script`
    (before a `--`, which ends our options)."""
    for index, word in enumerate(words):
        if word == "--":
            break
        end = index + 2 if word == "--script" else index + 1 if word.startswith("--script=") else None
        if end is not None and end <= len(words):
            rest = words[end:]
            return words[:end], rest[1:] if rest[:1] == ["--"] else rest
    return words, None


def _build_run_parser() -> argparse.ArgumentParser:
    parser = _RunParser(prog="skill run", add_help=False)
    parser.add_argument("words", nargs="*", help="the skill's name, then its arguments")
    parser.add_argument("--model")
    parser.add_argument("--max-turns", type=_turns)
    parser.add_argument("--no-model", action="store_true")
    parser.add_argument("--script")
    parser.add_argument("--record")
    parser.add_argument("--replay")
    parser.add_argument("--background", action="store_true")
    return parser


class JSONResult(dict):
    """`--json`: the view's JSON data as a plain dict (displayed as JSON, usable as data)."""

    def _repr_mimebundle_(self, include=None, exclude=None):
        import json

        return {"application/json": dict(self), "text/plain": json.dumps(self, indent=1, ensure_ascii=False)}, {}


@magics_class
class SkillsMagics(Magics):
    """`%skills`: list, show, validate and add Agent Skills."""

    paths = List(Unicode(), help="Extra folders searched for skills, after session-added ones.").tag(config=True)
    allow = List(Unicode(), help="Permission rules SKILL:PATH that allow scripts to run.").tag(config=True)
    deny = List(Unicode(), help="Permission rules SKILL:PATH that forbid scripts to run (they win).").tag(config=True)

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        self.session = SkillsSession(extra_paths=self.paths, allow=self.allow, deny=self.deny)
        self.session.asker = self._ask
        self.parser = _build_parser()
        self.run_parser = _build_run_parser()
        self.verify_parser = _build_verify_parser()
        self.ledger_parser = _build_ledger_parser()

    @line_magic
    def skills(self, line: str):
        """List, show, validate and add Agent Skills.

        %skills list [--source LABEL] [--budget N] [--json]   the catalog, grouped by source, under a character budget
        %skills show NAME                                     the annotation line and the body verbatim
        %skills validate [NAME|PATH]                          strict verdicts (the specification, exactly)
        %skills add PATH                                      add a skill folder or a collection, ahead of the others
        %skills sources                                       the sources in precedence order
        %skills diagnostics [--severity S] [--code C] [--json]
        %skills model [auto | anthropic [ID] | scripted FILE | keywords | replay CASSETTE | ID]   the model runs use
        %skills trace                                         the load trace of the last run
        %skills allow SKILL:PATH [--env VAR] [--network] [--write PATH] [--unsandboxed] [--save]
                     [--memory 4G] [--processes 512] [--cpu 600] [--max-writes 1G] [--max-file 2G] [--timeout 300]
                                                              let scripts matching the rule run (deny rules win);
                                                              --save keeps it in your config folder's policy file
        %skills deny SKILL:PATH [--save]                      never let scripts matching the rule run
        %skills policy                                        the rules, where each came from, the policy files
                                                              (trusted or not), the review state
        %skills trust [--revoke]                              show every rule of the project's skills-policy.yaml and
                                                              trust these exact bytes (any change: inert again)
        %skills review NAME [--yes]                           files, digests and changes; accept them into skills.lock
        %skills audit [--all]                                 every permission decision and script run
        %skills apply RUN|last [PATH...]                      copy what a run's scripts wrote in the working folder
                                                              (copy-on-write until now) into the project
        %skills eval FILE [--runs 3] [--strategy plain|forced] [--compare plain|forced|FOLDER] [--behaviour]
                     [--batch [--resume BATCH_ID]] [--model M] [--chart FILE.svg]   activation evals of a prompt set
        %skills lint [NAME]                                   description lint of one skill or every skill
        """
        try:
            argv = shlex.split(line)
        except ValueError as error:
            raise UsageError(f"{error}; {SHORT_USAGE}") from None
        if not argv:
            raise UsageError(SHORT_USAGE)
        args = self.parser.parse_args(argv)
        try:
            return getattr(self, f"_{args.command}")(args)
        except SkillsMagicError as error:
            raise UsageError(str(error)) from None

    def _show_path(self, path: str) -> str:
        return self.session.show_path(path)

    def _list(self, args):
        started = time.perf_counter()
        scan, listing, text = self.session.listing(budget=args.budget, source=args.source)
        view = display.ListingView(scan, listing, text, self._show_path, time.perf_counter() - started)
        return JSONResult(view.data()) if args.json else view

    def _show(self, args):
        return display.SkillView(self.session.skill(args.name), self._show_path)

    def _validate(self, args):
        return display.VerdictsView(self.session.validate(args.target), self._show_path)

    def _add(self, args):
        source, skills = self.session.add(args.path)
        inside = source.root.rstrip(os.sep) + os.sep
        problems = [d for d in self.session.diagnostics() if d.path == source.root or d.path.startswith(inside)]
        return display.AddedView(source, skills, problems, self._show_path)

    def _sources(self, args):
        return display.SourcesView(self.session.sources(), self._show_path)

    def _diagnostics(self, args):
        view = display.DiagnosticsView(self.session.diagnostics(args.severity, args.code), self._show_path)
        return JSONResult(view.data()) if args.json else view


    def _model(self, args):
        if args.choice is not None:
            self.session.choose_model(args.choice, args.value)
        client = self.session.model_client
        if client is None:
            chosen = "anthropic (ANTHROPIC_API_KEY is set)" if os.environ.get("ANTHROPIC_API_KEY") else "none yet (no ANTHROPIC_API_KEY)"
            return display.ModelView("auto", self.session.resolve_model_id_only(), f"runs use {chosen}")
        source = getattr(client, "source", None)  # declared by the protocol; a duck-typed client may omit it
        shown = source if source == "keyword router" else (self._show_path(source) if source else "")
        return display.ModelView(client.name, self.session.resolve_model_id(client, None, None), shown)

    def _ask(self, request):
        """A person at the notebook decides (input() raises where nobody can: the gate then denies)."""
        answer = input(f"{request.describe()}\nAllow? [o]nce / [a]lways for this skill and path / [d]eny: ")
        return {"o": "once", "once": "once", "a": "always", "always": "always"}.get(answer.strip().lower(), "deny")

    def _allow(self, args):
        limits = {name: value for name, value in (("memory", args.memory), ("processes", args.processes),
                                                  ("cpu", args.cpu), ("max-writes", args.max_writes),
                                                  ("max-file", args.max_file), ("timeout", args.timeout))
                  if value is not None}
        self.session.add_rule("allow", " ".join(args.rule), args.env, network=args.network, writable=args.write,
                              unsandboxed=args.unsandboxed, limits=limits, save=args.save)
        return self._policy(args)

    def _deny(self, args):
        rule = self.session.add_rule("deny", " ".join(args.rule))
        if args.save:
            self.session.policy.save_rule(rule)
        return self._policy(args)

    def _policy(self, args):
        self.session.policy.refresh()
        states = []
        for skill in self.session.scan().skills:
            entry = self.session.manifest.entry(skill.name)
            if entry is None:
                states.append((skill.name, "not reviewed"))
                continue
            try:
                self.session.manifest.check(skill.name, skill.folder)
                states.append((skill.name, f"reviewed (version {entry.get('version')}), bytes match"))
            except SkillsMagicError as error:
                states.append((skill.name, f"MISMATCH: {error}"))
        policy = self.session.policy
        return display.PolicyView(policy.rules, policy.problems, states, policy.files, self._show_path)

    def _trust(self, args):
        return display.TrustView(self.session.trust(revoke=args.revoke), self._show_path)

    def _review(self, args):
        def confirm() -> bool:
            if args.yes:
                return True
            try:
                return input("Write these digests to skills.lock? [y/N]: ").strip().lower() in ("y", "yes")
            except Exception:  # StdinNotImplementedError, EOFError, OSError: nobody can confirm here
                return False

        skill, changes, written = self.session.review(args.name, confirm)
        sizes = {f.path: f.size for f in skill_files(skill.folder)}
        lock = os.path.relpath(self.session.manifest.path, self.session.cwd)
        if written:
            note = f"written to {lock}: these bytes are now the reviewed ones"
        elif all(c.kind == "unchanged" for c in changes) and self.session.manifest.entry(skill.name) is not None:
            note = f"unchanged since the last review in {lock}"
        else:
            note = f"not written: nobody confirmed (accept these bytes with %skills review {skill.name} --yes)"
        return display.ReviewView(skill, changes, sizes, written, note)

    def _eval(self, args):
        progress = None
        if getattr(self.shell, "kernel", None) is not None:
            import ipywidgets
            from IPython.display import display as show

            bar = ipywidgets.IntProgress(value=0, min=0, max=1, description="eval")
            show(bar)

            def progress(done: int, total: int) -> None:
                bar.max, bar.value = total, done
                bar.description = f"{done}/{total}"

        started = time.perf_counter()
        reports = self.session.eval(args.file, runs=args.runs, model=args.model, strategy=args.strategy,
                                    compare=args.compare, behaviour=args.behaviour, batch=args.batch, resume=args.resume,
                                    on_progress=progress)
        lint = self._lint_findings()
        view = display.EvalView(reports, lint, time.perf_counter() - started)
        if args.chart:
            with open(os.path.join(self.session.cwd, args.chart), "w", encoding="utf-8") as handle:
                handle.write(view.chart_svg())
        return view

    def _lint_findings(self, name: str | None = None) -> dict[str, list]:
        from skills_magic.skills.lint import lint_skill

        skills = [self.session.skill(name)] if name else list(self.session.scan().skills)
        return {s.name: lint_skill(s) for s in skills}

    def _lint(self, args):
        return display.LintView(self._lint_findings(args.name))

    def _audit(self, args):
        return display.AuditView(self.session.audit(everything=args.all))

    def _apply(self, args):
        return display.ApplyView(self.session.apply(args.run, args.paths))

    def _trace(self, args):
        if self.session.last_run is None:
            raise UsageError("no run yet: `%%skill run` first")
        return display.TraceView(self.session.last_run)

    @line_cell_magic
    def ledger(self, line: str, cell: str | None = None):
        """The experiment ledger of a plan: hypotheses, predictions with their falsifying checks, verdicts.

        %ledger use SLUG                                        pick the plan sci.SLUG
        %ledger hypothesis TEXT
        %ledger prediction TEXT --falsified-by CHECK --hypothesis H1
        %ledger verdict P1 confirmed|refuted|inconclusive --evidence TEXT   (evidence required unless inconclusive)
        %ledger observation TEXT [--prediction P1]
        %ledger conclusion TEXT
        %ledger skip P1 --reason TEXT                           a prediction deliberately dropped
        %ledger list [--plan SLUG]                              the entries and the number of open predictions
        %ledger gate [--plan SLUG]                              fails while any prediction is open
        %ledger test P1                                         run P1's falsifying check (permission policy), record it
        %ledger model on|off                                    offer the ledger to the model as a tool in runs
        As a cell magic (%%ledger ACTION ...), the cell body is the TEXT.
        """
        try:
            argv = _ledger_words(line)
        except ValueError as error:
            raise UsageError(f"{error}; {LEDGER_USAGE}") from None
        if not argv:
            raise UsageError(LEDGER_USAGE)
        args = self.ledger_parser.parse_args(argv)
        if cell is not None and hasattr(args, "text"):
            args.text = [cell.strip()]
        session, ledger = self.session, self.session.ledger
        try:
            action = args.action
            if action == "use":
                session.use_plan(args.slug)
                return display.LedgerStateView(ledger.state(session.plan), self._db_path())
            if action == "model":
                session.ledger_for_model = args.switch == "on"
                return display.ModelView("ledger tool", "on" if session.ledger_for_model else "off",
                                         f"plan {session.plan or '(none chosen)'}")
            if action in ("list", "gate"):
                plan = args.plan or session.current_plan()
                state = ledger.gate(plan) if action == "gate" else ledger.state(plan)
                return display.LedgerStateView(state, self._db_path())
            plan = session.current_plan()
            text = " ".join(getattr(args, "text", []) or [])
            if action == "hypothesis":
                entry = ledger.hypothesis(plan, text)
            elif action == "prediction":
                entry = ledger.prediction(plan, text, args.falsified_by, args.hypothesis)
            elif action == "verdict":
                entry = ledger.verdict(plan, args.prediction, args.outcome, args.evidence)
            elif action == "observation":
                entry = ledger.observation(plan, text, args.prediction)
            elif action == "conclusion":
                entry = ledger.conclusion(plan, text)
            elif action == "skip":
                entry = ledger.skip(plan, args.prediction, args.reason)
            else:  # test
                outcome, entry = session.test_prediction(args.prediction)
                if entry is None:
                    raise UsageError(f"{outcome.error}; nothing was recorded")
            return display.LedgerEntryView(entry, self._db_path())
        except SkillsMagicError as error:
            raise UsageError(str(error)) from None

    def _db_path(self) -> str:
        return os.path.relpath(self.session.database.path, self.session.cwd)

    @line_cell_magic
    def skill(self, line: str, cell: str | None = None):
        """Run a task with Agent Skills through a model (progressive disclosure), or one skill's script.

        On one line, `%skill run NAME --no-model --script PATH [ARGS...]` runs a script with empty stdin.

        %%skill run [NAME [ARGS...]] [--model M] [--max-turns N] [--record FILE | --replay FILE]
            the cell body is the task; with NAME that skill is activated explicitly (no model decision), without
            it the model chooses from the catalog; ARGS fill $ARGUMENTS / $0 / $1 ... in the skill's body
        %%skill run ... --background
            run the loop in a worker thread; permission prompts appear as Allow/Deny buttons (no answer: deny)
        %%skill run NAME --no-model --script PATH [ARGS...]
            run one script of the skill with the cell body as its stdin, no model at all; every word after PATH is
            the script's, options included (a `--` right after PATH is dropped)
        %%skill write NAME [--dir PATH]
            the cell body becomes NAME/SKILL.md (in .skills/written unless --dir), validated, linted, and listed at once
        %%skill verify [--votes 3] [--refutations 2] [--concurrency 8] [--model M] [--voter model|script:SKILL:PATH]
                       [--timeout S] [--max-claims 25] [--ledger SLUG]
            verify the claims in the cell (a YAML list of {claim, quote, source}) by adversarial votes, all
            concurrently; a live vote board, then the result (confirmed / refuted / unverified per claim)
        """
        cell = cell or ""  # the line form: no body
        try:
            argv = shlex.split(line)
        except ValueError as error:
            raise UsageError(f"{error}; {RUN_USAGE}") from None
        if argv and argv[0] == "verify":
            return self._verify(argv[1:], cell)
        if argv and argv[0] == "write":
            return self._write(argv[1:], cell)
        if not argv or argv[0] != "run":
            raise UsageError(f"{RUN_USAGE}\n{VERIFY_USAGE}")
        own, script_words = split_script_words(argv[1:])
        args = self.run_parser.parse_intermixed_args(own)
        name, arguments = (args.words[0], args.words[1:]) if args.words else (None, [])
        arguments = [*arguments, *(script_words or [])]
        task = cell.strip("\n")
        if args.script and not args.no_model:
            late = " before --script PATH (every word after the path is the script's)" if "--no-model" in arguments else ""
            raise UsageError(f"--script runs a script without a model: add --no-model{late}; {RUN_USAGE}")
        if args.record and args.replay:
            raise UsageError(f"--record and --replay exclude each other; {RUN_USAGE}")
        try:
            if args.no_model:
                if name is None or not args.script:
                    raise UsageError(f"--no-model needs a skill NAME and --script PATH; {RUN_USAGE}")
                result = self.session.run_script(name, args.script, cell, arguments)
            else:
                if not task.strip() and name is None:
                    raise UsageError(f"the cell body is the task, and it is empty; {RUN_USAGE}")
                if args.background:
                    from skills_magic.notebook.widgets import BackgroundRun

                    return BackgroundRun(self.session, task, name, arguments, dict(
                        model=args.model, max_turns=args.max_turns, record=args.record, replay=args.replay)).start()
                result = self._run_model(task, name, arguments, args)
        except SkillsMagicError as error:
            raise UsageError(str(error)) from None
        return display.RunView(result, self.session.last_run_seconds)

    def _verify(self, argv: list[str], cell: str):
        import yaml

        from skills_magic.runs import verify

        args = self.verify_parser.parse_args(argv)
        try:
            claims = verify.parse_claims(yaml.safe_load(cell))
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or "cannot be parsed"
            raise UsageError(f"the cell is not YAML ({problem}{where}); {VERIFY_USAGE}") from None
        except verify.ClaimsError as error:
            raise UsageError(f"{error}; {VERIFY_USAGE}") from None
        votes = args.votes or verify.VOTES_PER_CLAIM
        board = None
        if getattr(self.shell, "kernel", None) is not None and claims:  # a front end that renders widgets
            from skills_magic.notebook.widgets import VoteBoard

            board = VoteBoard(claims[: args.max_claims or verify.MAX_CLAIMS], votes)

        def show_board() -> None:  # only once the run really starts: a refused run leaves no board behind
            if board is not None:
                from IPython.display import display as show

                show(board)

        try:
            result = self.session.verify(
                claims, votes=args.votes, refutations=args.refutations, concurrency=args.concurrency, model=args.model,
                voters=args.voter, timeout=args.timeout, max_claims=args.max_claims, ledger_plan=args.ledger,
                on_vote=board.update if board else None, on_ready=show_board)
        except SkillsMagicError as error:
            raise UsageError(str(error)) from None
        view = display.VotesView(result)
        if board is not None:
            board.finish(view.summary(), result.claims)
        return view

    def _write(self, argv: list[str], cell: str):
        if not argv or argv[0].startswith("-"):
            raise UsageError("usage: %%skill write NAME [--dir PATH]; the cell body is the SKILL.md")
        name, folder = argv[0], None
        if len(argv) == 3 and argv[1] == "--dir":
            folder = argv[2]
        elif len(argv) != 1:
            raise UsageError("usage: %%skill write NAME [--dir PATH]; the cell body is the SKILL.md")
        if "/" in name or name in (".", "..") or not name.strip():
            raise UsageError(f"{name!r} is not a skill folder name")
        try:
            verdict, skill = self.session.write_skill(name, cell, folder)
        except SkillsMagicError as error:
            raise UsageError(str(error)) from None
        from skills_magic.skills.lint import lint_skill

        return display.WrittenView(name, verdict, lint_skill(skill) if skill is not None else [], self._show_path)

    def _interactive(self) -> bool:
        # someone is at the notebook when the kernel may ask them for input (nbclient, nbval and papermill say no)
        kernel = getattr(self.shell, "kernel", None)
        return bool(kernel is not None and getattr(kernel, "_allow_stdin", False))

    def _run_model(self, task, name, arguments, args):
        options = dict(model=args.model, max_turns=args.max_turns, record=args.record, replay=args.replay)
        if not self._interactive():
            return self.session.run(task, name, arguments, **options)
        from IPython.display import Markdown, display as show

        streamed: list[str] = []
        handle = show(Markdown(""), display_id=True)
        last = [0.0]

        def on_text(text: str) -> None:
            streamed.append(text)
            now = time.monotonic()
            if now - last[0] >= STREAM_UPDATE_SECONDS:
                last[0] = now
                handle.update(Markdown("".join(streamed)))

        try:
            return self.session.run(task, name, arguments, on_text=on_text, **options)
        finally:
            handle.update(Markdown(""))  # the finished run is shown once, by the returned view


def register(ipython) -> None:
    ipython.register_magics(SkillsMagics)
    if os.environ.get("ANTHROPIC_API_KEY"):
        from skills_magic.models.anthropic import warm_up

        warm_up()  # import the SDK in the background now, so the first run does not wait 1.5 s for it


def unregister(ipython) -> None:
    magics = ipython.magics_manager.registry.get("SkillsMagics")
    if magics is not None:
        ipython.magics_manager.registry.pop("SkillsMagics", None)
        ipython.magics_manager.magics["line"].pop("skills", None)
        ipython.magics_manager.magics["cell"].pop("skill", None)
        ipython.magics_manager.magics["line"].pop("ledger", None)
        ipython.magics_manager.magics["cell"].pop("ledger", None)
