"""The views of a verification by votes: the vote table (also drawn live by `widgets.VoteBoard`) and the result."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import CELL_STYLE, NAME_CELL_STYLE, NUMBER_CELL_STYLE, View, escape

VOTE_MARK = {"pending": "…", "upheld": "✓", "refuted": "✗", "abstained": "–"}
VOTE_COLOUR = {"pending": "#e0e0e0", "upheld": "#b7e1b0", "refuted": "#f3b0ae", "abstained": "#d0d0d0"}
OUTCOME_COLOUR = {"confirmed": "#2e7d32", "refuted": "#c62828", "unverified": "#ef6c00", "not_verified": "#757575"}


def cited(vote) -> str:
    """The web pages a vote cited, each once: "; cites URL, URL" (a citation without a url by its title)."""
    places = list(dict.fromkeys(c.get("url") or c.get("title") or "?" for c in getattr(vote, "citations", None) or []))
    return f"; cites {', '.join(places)}" if places else ""


def vote_title(vote) -> str:
    if vote.verdict is not None:
        counter = f" (counter source: {vote.verdict.counter_source})" if vote.verdict.counter_source else ""
        return (f"voter {vote.voter} ({vote.kind}), {vote.verdict.confidence} confidence: {vote.verdict.evidence}{counter}"
                f"{cited(vote)}")
    return f"voter {vote.voter} ({vote.kind}): {vote.reason or vote.status}{cited(vote)}"


def votes_table_html(claims, votes_per_claim: int, summary: str) -> str:
    head = "".join(f"<th style='{NAME_CELL_STYLE}'>voter {i}</th>" for i in range(1, votes_per_claim + 1))
    rows = []
    for c in claims:
        cells = "".join(
            f"<td class='vote vote-{v.status}' data-status='{v.status}' title='{escape(vote_title(v))}' "
            f"style='background:{VOTE_COLOUR[v.status]};text-align:center'>{VOTE_MARK[v.status]} {v.status}</td>"
            for v in c.votes
        )
        outcome = c.outcome if all(v.status != "pending" for v in c.votes) else "pending"
        colour = OUTCOME_COLOUR.get(outcome, "#9e9e9e")
        rows.append(f"<tr data-claim='{c.index + 1}'><td style='{NUMBER_CELL_STYLE}'>{c.index + 1}</td>"
                    f"<td style='{CELL_STYLE}'>{escape(c.claim.claim)}</td>{cells}<td class='outcome' data-outcome='{outcome}' "
                    f"style='color:{colour};font-weight:bold;{NAME_CELL_STYLE}'>{outcome}</td></tr>")
    return (f"<table class='skills-magic-votes'><thead><tr><th style='{NUMBER_CELL_STYLE}'>#</th>"
            f"<th style='{CELL_STYLE}'>claim</th>{head}<th style='{NAME_CELL_STYLE}'>outcome</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table><p class='votes-summary'>{escape(summary)}</p>")


class VotesView(View):
    """The static result of a verification: per-claim outcome and every vote (shown where widgets do not render)."""

    kind = "votes"

    def __init__(self, result):
        self.result = result

    def summary(self) -> str:
        from skills_magic.runs.verify import outcome_counts

        return outcome_counts(self.result)

    def text(self) -> str:
        lines = []
        for c in self.result.claims:
            marks = " ".join(VOTE_MARK[v.status] for v in c.votes)
            lines.append(f"{c.index + 1:>2}. {c.outcome.upper():<10} [{marks}]  {c.claim.claim}")
            for v in c.votes:
                lines.append(f"      {vote_title(v)}")
        for extra in self.result.not_verified:
            lines.append(f"  - NOT VERIFIED (over the limit)  {extra.claim}")
        lines.append(self.summary())
        return "\n".join(lines)

    def html(self) -> str:
        extra = "".join(f"<li>{escape(c.claim)}</li>" for c in self.result.not_verified)
        return votes_table_html(self.result.claims, self.result.votes_per_claim, self.summary()) + (
            f"<p>not verified (over the limit):</p><ul>{extra}</ul>" if extra else "")

    def data(self) -> dict[str, Any]:
        return {
            "claims": [{"claim": c.claim.model_dump(exclude_none=True), "outcome": c.outcome,
                        "votes": [v.to_dict() for v in c.votes]} for c in self.result.claims],
            "not_verified": [c.model_dump(exclude_none=True) for c in self.result.not_verified],
            "votes_per_claim": self.result.votes_per_claim,
            "refutations_required": self.result.refutations_required,
            "cancelled": self.result.cancelled,
            "stats": self.result.stats,
            **({"cost_usd": round(self.result.cost_usd, 8)} if self.result.cost_usd is not None else {}),
            **({"stopped": self.result.stopped} if self.result.stopped else {}),  # its budget cap stopped it
        }

    def metadata(self) -> dict[str, Any]:
        return {"seconds": round(self.result.seconds, 6),
                "vote_seconds": [round(v.seconds, 6) for v in self.result.votes]}
