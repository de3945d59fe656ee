"""`%skills runs`: the run log (every run, vote, eval and batch request of the project), listed and shown.

A mixin of `%skills` (SkillsCommandMagics inherits it): its `@subcommand` methods are `%skills` subcommands."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from skills_magic.notebook.magics.commands import positive, subcommand
from skills_magic.notebook.views.runlog import DEFAULT_LIMIT, RunLogView, entry_view

KINDS = ("run", "vote", "eval", "batch")  # the kinds of row the run log holds (records.runlog.KINDS)
SHOW_USAGE = "usage: %skills runs [--skill S] [--since DATE] [--limit N] [--kind K] | %skills runs show ID"


class RunLogCommands:
    """`%skills runs`: the project's run log."""

    @subcommand("runs")
    @argument("show", nargs="*", metavar="show ID", help="show one row: a run as its run view, others in detail")
    @argument("--skill", metavar="S", help="only rows of this skill")
    @argument("--since", metavar="DATE", help="only rows at or after this date (UTC), e.g. 2026-12-01")
    @argument("--limit", type=positive, metavar="N", help=f"the newest N rows (default {DEFAULT_LIMIT})")
    @argument("--kind", choices=KINDS, help="only rows of this kind")
    def _runs(self, args):
        """The run log: every `%%skill run`, verification vote, eval run and batch request, newest first."""
        if args.show:
            if len(args.show) != 2 or args.show[0] != "show" or not args.show[1].isdigit():
                raise UsageError(SHOW_USAGE)
            row = self.session.runs.get(int(args.show[1]))
            if row is None:
                raise UsageError(f"no row {args.show[1]} in the run log (`%skills runs` lists them)")
            return entry_view(row)
        rows = self.session.runs.rows(kind=args.kind, skill=args.skill, since=args.since,
                                      limit=args.limit or DEFAULT_LIMIT)
        return RunLogView(rows, "" if self.session.runs.enabled else "logging is off in this session")
