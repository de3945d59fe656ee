"""`%%skill run | verify | write` (and `%skill run ...` on one line): a task through a model, one skill's script,
adversarial verification of claims, a SKILL.md written from the cell. Each parses its words, calls the session and
returns a view; `%%skill?` prints the usage generated from the arguments below."""

from __future__ import annotations

import argparse
import keyword
import time

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument

from skills_magic.notebook.magics.base import SessionMagics
from skills_magic.notebook.magics.commands import help_text, parser_of, positive, user_errors, words
from skills_magic.notebook.views.runs import ShownRun
from skills_magic.notebook.views.skills import WrittenView
from skills_magic.notebook.views.votes import VotesView
from skills_magic.runs.inputs import InputError
from skills_magic.runs.interpolate import interpolate

RUN_USAGE = ("usage: %%skill run [NAME [ARGS...]] [--model M] [--max-turns N] [--record FILE | --replay FILE] [--continue] "
             "[--as NAME] [--background] "
             "[--no-model --script PATH [ARG...]]; the cell body is the task (`%%skill?` for details)")
VERIFY_USAGE = ("usage: %%skill verify [--votes N] [--refutations R] [--concurrency C] [--model M] [--voter model|"
                "script:SKILL:PATH ...] [--timeout S] [--max-claims K] [--ledger SLUG]; the cell is a YAML list of "
                "{claim, quote, source}")
WRITE_USAGE = ("usage: %%skill write NAME [--dir PATH] [--no-overwrite] (or NAME/scripts/FILE, NAME/references/FILE, "
               "NAME/assets/FILE); the cell body is the SKILL.md (or the file)")
STREAM_UPDATE_SECONDS = 0.1  # redraw a streaming answer at most this often: smooth to read, cheap for the kernel
SUMMARY = """Run a task with Agent Skills through a model (progressive disclosure), or one skill's script; verify claims
by votes; write a skill. On one line, `%skill run NAME --no-model --script PATH [ARGS...]` runs a script with empty
stdin."""
WRITE_HELP = """::

  %%skill write NAME[/scripts/FILE] [--dir PATH] [--no-overwrite]

the cell body becomes NAME/SKILL.md (in .skills/written unless --dir), or the file NAME/scripts/FILE (also
references/, assets/); the whole skill is validated, linted, and listed at once. Replacing a file says so
(with the size it had); --no-overwrite refuses to replace one instead"""


def _turns(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least one turn, not {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, not {text}")
    return value


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


@magics_class
class RunMagics(SessionMagics):
    """`%%skill`: run a task or a script, verify claims, write a skill."""

    @argument("words", nargs="*", help="the skill's name, then its arguments")
    @argument("--model", metavar="M", help="the model id (else the skill's own `model`, then `%%skills model`)")
    @argument("--max-turns", type=_turns, metavar="N", help="model calls the run may make")
    @argument("--no-model", action="store_true", help="no model at all: run --script with the cell body as its stdin")
    @argument("--script", metavar="PATH", help="the script to run (with --no-model); every word after PATH is the script's")
    @argument("--record", metavar="FILE", help="record the model's answers in this cassette")
    @argument("--replay", metavar="FILE", help="answer from this cassette instead of a model")
    @argument("--background", action="store_true",
              help="run in a worker thread; permission prompts appear as Allow/Deny buttons (no answer: deny)")
    @argument("--with", dest="with_names", action="append", default=[], metavar="NAMES",
              help="kernel objects handed to the run, by name (df,fig,notes): files in its inputs folder")
    @argument("--raw", action="store_true", help="send the cell body as written: no {name} / {In[n]} interpolation")
    @argument("--continue", dest="continue_conversation", action="store_true",
              help="go on with the last run's conversation (`%%skills history` shows it, `%%skills reset` starts over)")
    @argument("--as", dest="assign_to", metavar="NAME", help="also assign the RunResult to NAME in the notebook")
    def _run(self, argv: list[str], cell: str):
        """The cell body is the task; with NAME that skill is activated explicitly (no model decision), without it the
        model chooses from the catalog; ARGS fill $ARGUMENTS / $0 / $1 ... in the skill's body."""
        own, script_words = split_script_words(argv)
        args = RUN_PARSER.parse_intermixed_args(own)
        name, arguments = (args.words[0], args.words[1:]) if args.words else (None, [])
        arguments = [*arguments, *(script_words or [])]
        task = cell.strip("\n")
        if args.script and not args.no_model:
            late = " before --script PATH (every word after the path is the script's)" if "--no-model" in arguments else ""
            raise UsageError(f"--script runs a script without a model: add --no-model{late}; {RUN_USAGE}")
        if args.record and args.replay:
            raise UsageError(f"--record and --replay exclude each other; {RUN_USAGE}")
        self._check_run_options(args)
        with user_errors():
            inputs = self._kernel_values(args.with_names)
            if args.no_model:
                if name is None or not args.script:
                    raise UsageError(f"--no-model needs a skill NAME and --script PATH; {RUN_USAGE}")
                result = self.session.run_script(name, args.script, cell, arguments, inputs=inputs)
            else:
                if not task.strip() and name is None:
                    raise UsageError(f"the cell body is the task, and it is empty; {RUN_USAGE}")
                if name is not None:  # `user-invocable: false`: the model may choose the skill, the user not name it
                    from skills_magic.runs.fields import check_user_invocable

                    check_user_invocable(self.session.skill(name))
                if not args.raw:
                    task = interpolate(task, self.shell.user_ns, self.cell_errors)
                options = dict(model=args.model, max_turns=args.max_turns, record=args.record, replay=args.replay,
                               inputs=inputs, continue_conversation=args.continue_conversation)
                if args.background:
                    from skills_magic.notebook.widgets import BackgroundRun

                    return BackgroundRun(self.session, task, name, arguments, options).start()
                result = self._run_model(task, name, arguments, options)
        return self._returned(result, args.assign_to)

    @staticmethod
    def _check_run_options(args) -> None:
        if args.assign_to is not None and (not args.assign_to.isidentifier() or keyword.iskeyword(args.assign_to)):
            raise UsageError(f"--as {args.assign_to!r}: the name must be a Python identifier; {RUN_USAGE}")
        if args.assign_to is not None and args.background:
            raise UsageError("--as names the run's result, which a --background run has only when it ends: "
                             f"run without --background to name it; {RUN_USAGE}")
        if args.continue_conversation and args.no_model:
            raise UsageError(f"--continue goes on with a model's conversation; a --no-model script run has none; {RUN_USAGE}")

    def _returned(self, result, name: str | None):
        """The RunResult itself, displayed as its view (`_` is the result); with `--as NAME`, NAME in the notebook too."""
        shown = ShownRun.of(result)
        if name is not None:
            self.shell.user_ns[name] = shown
        return shown

    def _kernel_values(self, groups: list[str]) -> dict:
        """The kernel objects `--with a,b --with c` names, by name; a name the kernel lacks is refused before the run."""
        names = list(dict.fromkeys(n.strip() for group in groups for n in group.split(",") if n.strip()))
        missing = [n for n in names if n not in self.shell.user_ns]
        if missing:
            raise InputError(f"--with {', '.join(missing)}: no such variable in the kernel")
        return {n: self.shell.user_ns[n] for n in names}

    def remember_error(self, result) -> None:
        """post_run_cell: the exception cell n raised, as one line, for a task's `{Err[n]}`."""
        error = result.error_in_exec or result.error_before_exec
        if error is not None and result.execution_count is not None:
            self.cell_errors[result.execution_count] = f"{type(error).__name__}: {error}"

    def _run_model(self, task, name, arguments, options):
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

        def on_event(kind: str, value) -> None:
            if kind == "call":  # a Python function of the notebook is running: say so until it returns
                handle.update(Markdown("".join(streamed) + f"\n\n*calling `{value['name']}`…*"))

        try:
            return self.session.run(task, name, arguments, on_text=on_text, on_event=on_event, **options)
        finally:
            handle.update(Markdown(""))  # the finished run is shown once, by the returned view

    @argument("--votes", type=positive, metavar="N", help="votes per claim")
    @argument("--refutations", type=positive, metavar="R", help="refutations that refute a claim")
    @argument("--concurrency", type=positive, metavar="C", help="votes running at once")
    @argument("--model", metavar="M", help="the model id the voters ask for")
    @argument("--voter", action="append", default=[], metavar="VOTER", help="model | script:SKILL:PATH, once per seat")
    @argument("--timeout", type=_seconds, metavar="S", help="seconds a vote may take")
    @argument("--max-claims", type=positive, metavar="K", help="claims verified; the rest are listed as not verified")
    @argument("--ledger", metavar="SLUG", help="record each outcome in the ledger plan sci.SLUG")
    def _verify(self, argv: list[str], cell: str):
        """Verify the claims in the cell (a YAML list of {claim, quote, source}) by adversarial votes, all concurrently;
        a live vote board, then the result (confirmed / refuted / unverified per claim)."""
        import yaml

        from skills_magic.runs import verify

        args = VERIFY_PARSER.parse_args(argv)
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
        if self._has_front_end() and claims:  # a front end that renders widgets
            from skills_magic.notebook.widgets import VoteBoard

            board = VoteBoard(claims[: args.max_claims or verify.MAX_CLAIMS], votes)

        def show_board() -> None:  # only once the run really starts: a refused run leaves no board behind
            if board is not None:
                from IPython.display import display as show

                show(board)

        with user_errors():
            result = self.session.verify(
                claims, votes=args.votes, refutations=args.refutations, concurrency=args.concurrency, model=args.model,
                voters=args.voter, timeout=args.timeout, max_claims=args.max_claims, ledger_plan=args.ledger,
                on_vote=board.update if board else None, on_ready=show_board)
        view = VotesView(result)
        if board is not None:
            board.finish(view.summary(), result.claims)
        return view

    def _write(self, argv: list[str], cell: str):
        # parsed by hand: the target first, then `--dir PATH` and `--no-overwrite` (argparse would also take options
        # before the target, or --dir=PATH); the target's own checks are the core's (skills/writing.py)
        if not argv or argv[0].startswith("-"):
            raise UsageError(WRITE_USAGE)
        target, rest, folder, keep = argv[0], argv[1:], None, False
        while rest:
            if rest[0] == "--dir" and len(rest) > 1 and not rest[1].startswith("-") and folder is None:
                folder, rest = rest[1], rest[2:]
            elif rest[0] == "--no-overwrite" and not keep:
                keep, rest = True, rest[1:]
            else:
                raise UsageError(WRITE_USAGE)
        with user_errors():
            written = self.session.write_skill(target, cell, folder, overwrite=not keep)
            findings = self.session.lint(written.skill)[written.skill.name] if written.skill is not None else []
        return WrittenView(written, findings, self.session.show_path)

    @line_cell_magic
    def skill(self, line: str, cell: str | None = None):
        cell = cell or ""  # the line form: no body
        argv = words(line, RUN_USAGE)
        if argv and argv[0] == "verify":
            return self._verify(argv[1:], cell)
        if argv and argv[0] == "write":
            return self._write(argv[1:], cell)
        if not argv or argv[0] != "run":
            raise UsageError(f"{RUN_USAGE}\n{VERIFY_USAGE}")
        return self._run(argv[1:], cell)


RUN_PARSER = parser_of(RunMagics._run, "%skill run", RUN_USAGE)
VERIFY_PARSER = parser_of(RunMagics._verify, "%skill verify", VERIFY_USAGE)
RunMagics.skill.__doc__ = help_text(SUMMARY, [RUN_PARSER, VERIFY_PARSER], WRITE_HELP)
