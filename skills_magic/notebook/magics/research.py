"""`%%skill research` (the cell is the question) and `%%skill reverify` (the cell is a YAML list of claims): the
deep-research workflow of runs.research, a live board of its stages, then its report.

A mixin of `%%skill` (RunMagics inherits it): `RunMagics.skill` hands it the words after `research` / `reverify`."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from skills_magic.notebook.magics.commands import parser_of, positive, user_errors
from skills_magic.notebook.magics.costs import MAX_COST
from skills_magic.notebook.views.research import ResearchView, outcome_line

RESEARCH_USAGE = ("usage: %%skill research [--angles N] [--max-sources N] [--max-claims K] [--votes N] "
                  "[--refutations R] [--web] [--allowed-domain D ...] [--clarify TEXT] [--model M] [--max-cost USD]; "
                  "the cell is the question")
REVERIFY_USAGE = ("usage: %%skill reverify [--question TEXT] [--max-claims K] [--votes N] [--refutations R] [--web] "
                  "[--allowed-domain D ...] [--model M] [--max-cost USD]; the cell is a YAML list of {claim, quote, source}")


def _common(method):
    """The options research and reverify share: votes, the web, the model, the cap."""
    for option in reversed((
            argument("--max-claims", type=positive, metavar="K", help="claims verified (the rest are listed)"),
            argument("--votes", type=positive, metavar="N", help="voters per claim"),
            argument("--refutations", type=positive, metavar="R", help="refutations that refute a claim"),
            argument("--web", "--web-search", dest="web", action="store_true",
                     help="the agents may use the API's server-side web search and fetch (voters: search)"),
            argument("--allowed-domain", dest="allowed_domains", action="append", default=[], metavar="D",
                     help="with --web: the only domains searched and fetched (repeatable)"),
            argument("--model", metavar="M", help="the model id every agent asks for"),
            MAX_COST)):
        method = option(method)
    return method


def read_claims(cell: str, usage: str) -> list:
    """The claims of a cell: a YAML list of {claim, quote, source}; a one-line UsageError saying what is wrong."""
    import yaml

    from skills_magic.runs import verify

    try:
        return verify.parse_claims(yaml.safe_load(cell))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "cannot be parsed"
        raise UsageError(f"the cell is not YAML ({problem}{where}); {usage}") from None
    except verify.ClaimsError as error:
        raise UsageError(f"{error}; {usage}") from None


class ResearchMagics:
    """`%%skill research` and `%%skill reverify`."""

    @argument("--angles", type=positive, metavar="N", help="search angles the scope may propose")
    @argument("--max-sources", type=positive, metavar="N", help="sources fetched in all")
    @argument("--clarify", metavar="TEXT", help="answers to the scope's clarifying questions")
    @_common
    def _research(self, argv: list[str], cell: str):
        """Research the question in the cell: scope, search angles, fetch sources, extract claims, rank, verify by
        votes, synthesise; a live board of the stages, then the report with its agent calls and cost."""
        args = RESEARCH_PARSER.parse_args(argv)
        question = cell.strip()
        if not question:
            raise UsageError(f"the cell is the question, and it is empty; {RESEARCH_USAGE}")
        return self._research_run(question, args, angles=args.angles, max_sources=args.max_sources,
                                  clarifications=args.clarify or "")

    @argument("--question", metavar="TEXT", help="the question the claims bear on (for the synthesis)")
    @_common
    def _reverify(self, argv: list[str], cell: str):
        """Verify the claims in the cell (a YAML list of {claim, quote, source}) with research's verifier and
        synthesis, without its scope, search and fetch: the trimmed workflow."""
        args = REVERIFY_PARSER.parse_args(argv)
        claims = read_claims(cell, REVERIFY_USAGE)
        return self._research_run(claims, args, question=args.question or "")

    def _research_run(self, subject, args, **options):
        board = None
        with user_errors():
            self.session.client()  # no model at all is said before a board is shown
        if self._has_front_end():  # a front end renders widgets; elsewhere the report's own board is shown
            from IPython.display import display

            from skills_magic.notebook.widgets import StageBoard

            board = StageBoard()
            display(board)
        with user_errors():
            report = self.session.research(
                subject, model=args.model, max_claims=args.max_claims, votes=args.votes, refutations=args.refutations,
                web=args.web, allowed_domains=args.allowed_domains, max_cost=args.max_cost,
                on_event=board.hear if board else None, **options)
        if board is not None:
            board.finish(report.board, outcome_line(report))
        return ResearchView(report)


RESEARCH_PARSER = parser_of(ResearchMagics._research, "%skill research", RESEARCH_USAGE)
REVERIFY_PARSER = parser_of(ResearchMagics._reverify, "%skill reverify", REVERIFY_USAGE)
