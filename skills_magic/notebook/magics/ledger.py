"""`%ledger` (and `%%ledger ACTION`, the cell body being the TEXT): the experiment ledger of a plan. Each action is a
method with IPython `@argument`s: it calls the session's ledger and returns the entry written or the plan's state.
`%ledger?` prints the usage generated from those arguments."""

from __future__ import annotations

import os
import shlex

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument

from skills_magic.notebook.magics.base import SessionMagics
from skills_magic.notebook.magics.commands import command_parser, help_text, subcommand, subcommands, user_errors, words
from skills_magic.notebook.views.ledger import LedgerEntryView, LedgerHistoryView, LedgerSessionsView, LedgerStateView
from skills_magic.notebook.views.runs import ModelView
from skills_magic.records.ledger import plan_name

LEDGER_USAGE = ("usage: %ledger use SLUG | hypothesis TEXT | prediction TEXT --falsified-by CHECK --hypothesis H | "
                "verdict P confirmed|refuted|inconclusive [--evidence TEXT] | observation TEXT [--prediction P] | "
                "conclusion TEXT | skip P --reason TEXT | list [--all] | gate [--all] | sessions | test P | model on|off "
                "(`%ledger?` for details)")
SUMMARY = """The experiment ledger of a plan: hypotheses, predictions with their falsifying checks, verdicts.
As a cell magic (%%ledger ACTION ...), the cell body is the TEXT. Ids (H1, P1) are this session's: each kernel (a
Restart & Run All) numbers its own from 1; `2:P1` names P1 of the plan's session 2 (`%ledger sessions`)."""

# arguments several actions take (an `@argument` may decorate any number of methods)
TEXT = argument("text", nargs="*", help="the text (as %%%%ledger, the cell body)")
PREDICTION = argument("prediction", help="e.g. P1 (this session's; else the newest earlier one's), or 2:P1 (session 2's)")
PLAN = argument("--plan", metavar="SLUG", help="another plan (default: the one in use)")
EVERY_SESSION = argument("--all", action="store_true", dest="every_session",
                         help="every session of the plan (earlier runs of the notebook too), not only this one")


def _ledger_words(line: str) -> list[str]:
    """Words of a %ledger line: double quotes group, and an apostrophe is just a letter (the station's file)."""
    lexer = shlex.shlex(line, posix=True)
    lexer.quotes = '"'
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def _text(args) -> str:
    return " ".join(args.text or [])


@magics_class
class LedgerMagics(SessionMagics):
    """`%ledger`: hypotheses, predictions, verdicts and the gate of a plan."""

    @subcommand("use")
    @argument("slug", help="the plan is sci.SLUG")
    def _use(self, args):
        """Pick the plan sci.SLUG."""
        self.session.use_plan(args.slug)
        return LedgerStateView(self.session.ledger.state(self.session.plan), self._database())

    @subcommand("hypothesis")
    @TEXT
    def _hypothesis(self, args):
        """Record a hypothesis (H1, H2, ...)."""
        return self._entry(self.session.ledger.hypothesis(self.session.current_plan(), _text(args)))

    @subcommand("conclusion")
    @TEXT
    def _conclusion(self, args):
        """Record a conclusion."""
        return self._entry(self.session.ledger.conclusion(self.session.current_plan(), _text(args)))

    @subcommand("prediction")
    @TEXT
    @argument("--falsified-by", required=True, metavar="CHECK", help="the exact check that would refute it")
    @argument("--hypothesis", required=True, metavar="H", help="the hypothesis it tests, e.g. H1")
    def _prediction(self, args):
        """Record a prediction with the check that would refute it."""
        plan = self.session.current_plan()
        return self._entry(self.session.ledger.prediction(plan, _text(args), args.falsified_by, args.hypothesis))

    @subcommand("verdict")
    @PREDICTION
    @argument("outcome", help="confirmed | refuted | inconclusive")
    @argument("--evidence", metavar="TEXT", help="required unless inconclusive")
    def _verdict(self, args):
        """Judge a prediction, once."""
        plan = self.session.current_plan()
        return self._entry(self.session.ledger.verdict(plan, args.prediction, args.outcome, args.evidence))

    @subcommand("observation")
    @TEXT
    @argument("--prediction", metavar="P", help="the prediction it bears on, e.g. P1")
    def _observation(self, args):
        """Record an observation."""
        return self._entry(self.session.ledger.observation(self.session.current_plan(), _text(args), args.prediction))

    @subcommand("skip")
    @PREDICTION
    @argument("--reason", required=True, metavar="TEXT", help="why it is dropped")
    def _skip(self, args):
        """A prediction deliberately dropped."""
        return self._entry(self.session.ledger.skip(self.session.current_plan(), args.prediction, args.reason))

    @subcommand("list")
    @PLAN
    @EVERY_SESSION
    def _entries(self, args):
        """This session's entries and open predictions (--all: every session's)."""
        state = self.session.ledger.state(args.plan or self.session.current_plan(), every_session=args.every_session)
        return self._state(state)

    @subcommand("gate")
    @PLAN
    @EVERY_SESSION
    def _gate(self, args):
        """Fails while a prediction of this session is open (--all: of any session)."""
        state = self.session.ledger.gate(args.plan or self.session.current_plan(), every_session=args.every_session)
        return self._state(state)

    @subcommand("sessions")
    @PLAN
    def _sessions(self, args):
        """Each session (kernel) that wrote to the plan: when it started, its entries, its open predictions."""
        plan = plan_name(args.plan) if args.plan else self.session.current_plan()
        return LedgerSessionsView(plan, self.session.ledger.sessions(plan), self._database())

    @subcommand("test")
    @PREDICTION
    def _test(self, args):
        """Run the prediction's falsifying check (permission policy), record what happened as an observation."""
        self.session.current_plan()
        outcome, entry = self.session.test_prediction(args.prediction)
        if entry is None:
            raise UsageError(f"{outcome.error}; nothing was recorded")
        return self._entry(entry)

    @subcommand("model")
    @argument("switch", choices=["on", "off"], help="on: runs get the `experiment` tool")
    def _tool(self, args):
        """Offer the ledger to the model as a tool in runs."""
        session = self.session
        session.ledger_for_model = args.switch == "on"
        return ModelView("ledger tool", "on" if session.ledger_for_model else "off", f"plan {session.plan or '(none chosen)'}")

    def _entry(self, entry) -> LedgerEntryView:
        return LedgerEntryView(entry, self._database())

    def _state(self, state) -> LedgerStateView:
        return (LedgerHistoryView if state.every_session else LedgerStateView)(state, self._database())

    def _database(self) -> str:
        return os.path.relpath(self.session.database.path, self.session.cwd)

    @line_cell_magic
    def ledger(self, line: str, cell: str | None = None):
        argv = words(line, LEDGER_USAGE, _ledger_words)
        if not argv:
            raise UsageError(LEDGER_USAGE)
        args = PARSER.parse_args(argv)
        if cell is not None and hasattr(args, "text"):
            args.text = [cell.strip()]
        with user_errors():
            return args.handler(self, args)


PARSER = command_parser("ledger", "action", LEDGER_USAGE, subcommands(LedgerMagics))
LedgerMagics.ledger.__doc__ = help_text(SUMMARY, list(PARSER.commands.values()))
