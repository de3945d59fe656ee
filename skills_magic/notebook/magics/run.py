"""`%%skill run | verify | write` (and `%skill run ...` on one line): a task through a model, one skill's script,
adversarial verification of claims, a SKILL.md written from the cell. Each parses its words, calls the session and
returns a view; `%%skill?` prints the usage generated from the arguments below."""

from __future__ import annotations

import argparse
import time

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument

from skills_magic.notebook.magics.base import SessionMagics
from skills_magic.notebook.magics.commands import help_text, parser_of, positive, user_errors, words
from skills_magic.notebook.views.runs import RunView
from skills_magic.notebook.views.skills import WrittenView
from skills_magic.notebook.views.votes import VotesView

RUN_USAGE = ("usage: %%skill run [NAME [ARGS...]] [--model M] [--max-turns N] [--record FILE | --replay FILE] [--background] "
             "[--no-model --script PATH [ARG...]]; the cell body is the task (`%%skill?` for details)")
VERIFY_USAGE = ("usage: %%skill verify [--votes N] [--refutations R] [--concurrency C] [--model M] [--voter model|"
                "script:SKILL:PATH ...] [--timeout S] [--max-claims K] [--ledger SLUG]; the cell is a YAML list of "
                "{claim, quote, source}")
WRITE_USAGE = "usage: %%skill write NAME [--dir PATH]; the cell body is the SKILL.md"
STREAM_UPDATE_SECONDS = 0.1  # redraw a streaming answer at most this often: smooth to read, cheap for the kernel
SUMMARY = """Run a task with Agent Skills through a model (progressive disclosure), or one skill's script; verify claims
by votes; write a skill. On one line, `%skill run NAME --no-model --script PATH [ARGS...]` runs a script with empty
stdin."""
WRITE_HELP = """::

  %%skill write NAME [--dir PATH]

the cell body becomes NAME/SKILL.md (in .skills/written unless --dir), validated, linted, and listed at once"""


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
        with user_errors():
            if args.no_model:
                if name is None or not args.script:
                    raise UsageError(f"--no-model needs a skill NAME and --script PATH; {RUN_USAGE}")
                result = self.session.run_script(name, args.script, cell, arguments)
            else:
                if not task.strip() and name is None:
                    raise UsageError(f"the cell body is the task, and it is empty; {RUN_USAGE}")
                options = dict(model=args.model, max_turns=args.max_turns, record=args.record, replay=args.replay)
                if args.background:
                    from skills_magic.notebook.widgets import BackgroundRun

                    return BackgroundRun(self.session, task, name, arguments, options).start()
                result = self._run_model(task, name, arguments, options)
        return RunView(result, self.session.last_run_seconds)

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

        try:
            return self.session.run(task, name, arguments, on_text=on_text, **options)
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
        # parsed by hand: exactly NAME or NAME --dir PATH (argparse would also take --dir first, or --dir=PATH)
        if not argv or argv[0].startswith("-"):
            raise UsageError(WRITE_USAGE)
        name, folder = argv[0], None
        if len(argv) == 3 and argv[1] == "--dir":
            folder = argv[2]
        elif len(argv) != 1:
            raise UsageError(WRITE_USAGE)
        if "/" in name or name in (".", "..") or not name.strip():
            raise UsageError(f"{name!r} is not a skill folder name")
        with user_errors():
            verdict, skill = self.session.write_skill(name, cell, folder)
        return WrittenView(name, verdict, self.session.lint(skill)[skill.name] if skill is not None else [], self.session.show_path)

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
