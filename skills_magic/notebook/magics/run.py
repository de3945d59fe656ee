"""`%%skill run | verify | write` (and `%skill run ...` on one line): a task through a model, one skill's script,
adversarial verification of claims, a SKILL.md written from the cell. Each parses its words, calls the session and
returns a view; `%%skill?` prints the usage generated from the arguments below."""

from __future__ import annotations

import argparse
import difflib
import keyword
import time
from collections.abc import Iterator
from dataclasses import dataclass

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument

from skills_magic.errors import SkillsMagicError
from skills_magic.notebook.magics.base import SessionMagics
from skills_magic.notebook.magics.commands import help_text, parser_of, positive, user_errors, words
from skills_magic.notebook.magics.costs import MAX_COST, show_estimate
from skills_magic.notebook.magics.research import (RESEARCH_PARSER, RESEARCH_USAGE, REVERIFY_PARSER, REVERIFY_USAGE,
                                                   ResearchMagics, read_claims)
from skills_magic.notebook.views.runs import ShownRun
from skills_magic.notebook.views.skills import WrittenView
from skills_magic.notebook.views.votes import VotesView
from skills_magic.runs.inputs import InputError
from skills_magic.runs.interpolate import interpolate

RUN_USAGE = ("usage: %%skill run [OPTIONS] [NAME [ARGS...]]: the magic's OPTIONS go before NAME, everything after "
             "NAME is the skill's ARGS as typed, or `NAME OPTIONS -- ARGS`; e.g. `%%skill run --model M fix-bug the "
             "login form`, `%%skill run fix-bug --model M -- the login form`, `%%skill run --no-model --script "
             "scripts/x.py NAME a \"b c\"`; the cell body is the task (`%%skill?` lists the options)")
VERIFY_USAGE = ("usage: %%skill verify [--votes N] [--refutations R] [--concurrency C] [--model M] [--voter model|"
                "script:SKILL:PATH ...] [--timeout S] [--max-claims K] [--ledger SLUG] [--max-cost USD] [--web-search] "
                "[--web-fetch] [--allowed-domain D ...] [--max-searches N]; the cell is a YAML list of {claim, quote, source}")
WRITE_USAGE = ("usage: %%skill write NAME [--dir PATH] [--no-overwrite] (or NAME/scripts/FILE, NAME/references/FILE, "
               "NAME/assets/FILE); the cell body is the SKILL.md (or the file)")
BLANKS = " \t\r\n"  # what separates the words of a line, as for shlex.split
OPTION_MATCH_CUTOFF = 0.7  # how alike a mistyped option must be to be suggested: --modl is --model, --dry no option
STREAM_UPDATE_SECONDS = 0.1  # redraw a streaming answer at most this often: smooth to read, cheap for the kernel
SUMMARY = """Run a task with Agent Skills through a model (progressive disclosure), or one skill's script; verify claims
by votes; research a question (or re-verify claims) by the deep-research workflow; write a skill. On one line, `%skill run --no-model --script PATH NAME [ARGS...]` runs a script with empty
stdin."""
WRITE_HELP = """::

  %%skill write NAME[/scripts/FILE] [--dir PATH] [--no-overwrite]

the cell body becomes NAME/SKILL.md (in .skills/written unless --dir), or the file NAME/scripts/FILE (also
references/, assets/); the whole skill is validated, linted, and listed at once. Replacing a file says so
(with the size it had); --no-overwrite refuses to replace one instead"""


def _web_tools(args):
    """The model voters' web tools from `%%skill verify`'s options; None without --web-search or --web-fetch."""
    if not (args.web_search or args.web_fetch):
        if args.allowed_domain or args.max_searches:
            raise UsageError(f"--allowed-domain and --max-searches need --web-search or --web-fetch; {VERIFY_USAGE}")
        return None
    from skills_magic.models.web_tools import DEFAULT_MAX_USES, WebTools

    return WebTools(search=True, fetch=args.web_fetch, max_uses=args.max_searches or DEFAULT_MAX_USES,
                    allowed_domains=tuple(args.allowed_domain))


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


@dataclass(frozen=True)
class RunLine:
    """A `%%skill run` line read: the magic's own options (parsed), the skill's NAME, and its ARGS as typed."""

    options: argparse.Namespace
    name: str | None
    arguments: str


class OpenQuote(SkillsMagicError):
    """A quote (or a final backslash) on the magic's line that does not close: shlex.split's two errors."""


def lexed(text: str) -> Iterator[tuple[str, str, int]]:
    """The shell words of `text` (POSIX quoting, as shlex.split reads them) one by one, each as (the word, its text as
    typed, the offset just past it); lazily, so a quote left open is an OpenQuote only where words are read."""
    index, end = 0, len(text)
    while True:
        while index < end and text[index] in BLANKS:
            index += 1
        if index == end:
            return
        start, word = index, []
        while index < end and text[index] not in BLANKS:
            char = text[index]
            if char == "'":  # single quotes: everything up to the next one, as it is
                close = text.find("'", index + 1)
                if close < 0:
                    raise OpenQuote("No closing quotation")
                word.append(text[index + 1:close])
                index = close + 1
            elif char == '"':  # double quotes: a backslash escapes only `"` and itself
                index += 1
                while index < end and text[index] != '"':
                    if text[index] == "\\" and index + 1 == end:
                        raise OpenQuote("No escaped character")
                    if text[index] == "\\" and text[index + 1] in '"\\':
                        index += 1
                    word.append(text[index])
                    index += 1
                if index == end:
                    raise OpenQuote("No closing quotation")
                index += 1
            elif char == "\\":  # outside quotes a backslash takes the next character as it is
                if index + 1 == end:
                    raise OpenQuote("No escaped character")
                word.append(text[index + 1])
                index += 2
            else:
                word.append(char)
                index += 1
        yield "".join(word), text[start:index], index


def _run_options() -> dict[str, argparse.Action]:
    # read from the parser, so an option declared on `_run` is one here too
    return {flag: action for action in RUN_PARSER._actions for flag in action.option_strings}


def _option_words(word: str, following: Iterator[tuple[str, str, int]], where: str) -> list[str]:
    """One of the magic's options as argparse is given it (`--opt=value`, whatever the value starts with), its value
    the next word of `following` unless given after `=`."""
    flag, equals, value = word.partition("=")
    options = _run_options()
    action = options.get(flag)
    if action is None:
        close = difflib.get_close_matches(flag, list(options), n=1, cutoff=OPTION_MATCH_CUTOFF)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"unknown option {flag}{hint} {where}; {RUN_USAGE}")
    if action.nargs == 0:
        if equals:
            raise UsageError(f"{flag} takes no value; {RUN_USAGE}")
        return [flag]
    if not equals:
        value = next(following, (None,))[0]
        if value is None:
            raise UsageError(f"{flag} needs a value; {RUN_USAGE}")
    return [f"{flag}={value}"]


def _options_after_name(rest: str) -> tuple[list[str], str]:
    """`NAME OPTIONS -- ARGS`: when the text after NAME starts with one of the magic's options and a `--` follows, the
    words before that `--` are the magic's options and the text after it the ARGS; otherwise all of it is ARGS."""
    words = lexed(rest)
    try:
        first = next(words, None)
        if first is None or first[0].partition("=")[0] not in _run_options():
            return [], rest
        before = [first]
        for word in words:
            if word[1] == "--":  # a `--` as typed: a quoted "--" is an argument
                end = word[2]
                break
            before.append(word)
        else:
            return [], rest
    except OpenQuote:  # a quote the ARGS leave open: they are the skill's, as typed
        return [], rest
    own, items = [], iter(before)
    for word, _typed, _end in items:
        if not word.startswith("-"):
            raise UsageError(f"{word!r} between the skill's NAME and `--` is not an option: the skill's ARGS go after "
                             f"the `--`; {RUN_USAGE}")
        own += _option_words(word, items, "between the skill's NAME and `--`")
    return own, rest[end:].strip()


def read_run_line(text: str) -> RunLine:
    """`%%skill run [OPTIONS] [NAME [ARGS...]]` read off the line as typed: options until the first word that is not
    one (or after a `--`), that word the NAME, and the rest of the line, untouched, the ARGS."""
    own: list[str] = []
    name, end = None, len(text)
    words = lexed(text)
    try:
        for word, _typed, end in words:
            if word == "--":  # the options end: the next word is NAME whatever it starts with
                name, _typed, end = next(words, (None, "", len(text)))
                break
            if word.startswith("-") and word != "-":
                own += _option_words(word, words, "before the skill's NAME")
                continue
            name = word
            break
    except OpenQuote as error:
        raise UsageError(f"{error}; {RUN_USAGE}") from None
    after, arguments = _options_after_name(text[end:].strip()) if name is not None else ([], "")
    return RunLine(RUN_PARSER.parse_args(own + after), name, arguments)


@magics_class
class RunMagics(ResearchMagics, SessionMagics):
    """`%%skill`: run a task or a script, verify claims, research a question, write a skill."""

    @argument("name", nargs="?", metavar="NAME", help="the skill to activate (else the model chooses)")
    @argument("arguments", nargs="*", metavar="ARGS",
              help="the rest of the line, as typed: $ARGUMENTS (with --no-model, the script's argv)")
    @argument("--model", metavar="M", help="the model id (else the skill's own `model`, then `%%skills model`)")
    @argument("--harness", choices=["native", "claude-code"],
              help="whose agent loop runs it: this project's or Claude Code's (the claude-code extra)")
    @argument("--max-turns", type=_turns, metavar="N", help="model calls the run may make")
    @argument("--no-model", action="store_true", help="no model at all: run --script with the cell body as its stdin")
    @argument("--script", metavar="PATH", help="the script to run (with --no-model); its argv: the ARGS' shell words")
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
    @MAX_COST
    def _run(self, line: str, cell: str):
        """The cell body is the task; with NAME that skill is activated explicitly (no model decision), without it the
        model chooses from the catalog.

          %%skill run [OPTIONS] [NAME [ARGS...]]

        OPTIONS are the magic's own and go before NAME (a `--` ends them). Everything after NAME is the skill's ARGS,
        exactly as typed: $ARGUMENTS is that text, $0, $1 ... its shell words; a `--flag` there is the skill's too.
        For options after NAME, end them with `--`: `NAME OPTIONS -- ARGS`. With --no-model --script PATH, the
        ARGS' shell words are the script's argv.

          %%skill run --model claude-opus-4-6 fix-bug      options, then the skill
          %%skill run echo-args "hello world" --dry-run    ARGS: `"hello world" --dry-run`, as typed
          %%skill run fix-bug --model claude-opus-4-6 -- the login form    options after NAME, ended by `--`
          %%skill run --no-model --script scripts/x.py NAME a "b c"        the script's argv: a, b c"""
        read = read_run_line(line)
        args, name, arguments = read.options, read.name, read.arguments
        task = cell.strip("\n")
        if args.script and not args.no_model:
            raise UsageError(f"--script runs a script without a model: add --no-model; {RUN_USAGE}")
        if args.record and args.replay:
            raise UsageError(f"--record and --replay exclude each other; {RUN_USAGE}")
        self._check_run_options(args)
        with user_errors():
            inputs = self._kernel_values(args.with_names)
            if args.no_model:
                if name is None or not args.script:
                    raise UsageError(f"--no-model needs a skill NAME and --script PATH; {RUN_USAGE}")
                result = self.session.run_script(name, args.script, cell, words(arguments, RUN_USAGE), inputs=inputs)
            else:
                if not task.strip() and name is None:
                    raise UsageError(f"the cell body is the task, and it is empty; {RUN_USAGE}")
                if name is not None:  # `user-invocable: false`: the model may choose the skill, the user not name it
                    from skills_magic.runs.fields import check_user_invocable

                    check_user_invocable(self.session.skill(name))
                if not args.raw:
                    task = interpolate(task, self.shell.user_ns, self.cell_errors)
                options = dict(model=args.model, max_turns=args.max_turns, record=args.record, replay=args.replay,
                               inputs=inputs, continue_conversation=args.continue_conversation, harness=args.harness,
                               max_cost=args.max_cost)
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
    @MAX_COST
    @argument("--web-search", action="store_true", help="the model voters may search the web (server-side, $0.01 a search)")
    @argument("--web-fetch", action="store_true", help="the model voters may also fetch web pages (turns web search on)")
    @argument("--allowed-domain", action="append", default=[], metavar="D", help="the only domains they may reach, once each")
    @argument("--max-searches", type=positive, metavar="N", help="searches (and fetches) one vote's request may make")
    def _verify(self, argv: list[str], cell: str):
        """Verify the claims in the cell (a YAML list of {claim, quote, source}) by adversarial votes, all concurrently;
        a live vote board, then the result (confirmed / refuted / unverified per claim)."""
        from skills_magic.runs import verify

        args = VERIFY_PARSER.parse_args(argv)
        claims = read_claims(cell, VERIFY_USAGE)
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
                on_vote=board.update if board else None, on_ready=show_board, max_cost=args.max_cost,
                on_estimate=show_estimate, web=_web_tools(args))  # the estimate first, then the board
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
        command, *rest = line.split(None, 1) or [""]
        if command == "run":  # read as typed: the skill's ARGS are never split into words and rejoined
            return self._run("".join(rest), cell)
        argv = words(line, RUN_USAGE)
        if argv and argv[0] == "verify":
            return self._verify(argv[1:], cell)
        if argv and argv[0] == "write":
            return self._write(argv[1:], cell)
        if argv and argv[0] in ("research", "reverify"):
            return (self._research if argv[0] == "research" else self._reverify)(argv[1:], cell)
        raise UsageError(f"{RUN_USAGE}\n{VERIFY_USAGE}\n{RESEARCH_USAGE}\n{REVERIFY_USAGE}")


RUN_PARSER = parser_of(RunMagics._run, "%skill run", RUN_USAGE)
VERIFY_PARSER = parser_of(RunMagics._verify, "%skill verify", VERIFY_USAGE)
RunMagics.skill.__doc__ = help_text(SUMMARY, [RUN_PARSER, VERIFY_PARSER, RESEARCH_PARSER, REVERIFY_PARSER], WRITE_HELP)
