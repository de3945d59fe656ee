"""The views of a deep-research run: the board of stages (also drawn live by `widgets.StageBoard`) and the report,
with its claims, their votes, the agent calls beside the formula, and the cost. Values in, outputs out."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import NAME_CELL_STYLE, View, escape, plural, table_html, table_text
from skills_magic.notebook.views.votes import VOTE_MARK, votes_table_html
from skills_magic.runs.budget import dollars

BOARD_COLUMNS = ("stage", "started", "done", "abstained", "running")
PROSE = ("executive summary", "complete", "needs clarifying", "stopped early")  # sections shown as a paragraph
STATUS_LINE = {"complete": "complete", "needs_clarification": "needs clarifying", "stopped": "stopped early"}


def board_rows(stages: dict[str, dict[str, int]]) -> list[list[str]]:
    return [[name, str(c["started"]), str(c["done"]), str(c["abstained"]), str(c["started"] - c["done"] - c["abstained"])]
            for name, c in stages.items()]


def board_text(stages: dict[str, dict[str, int]]) -> str:
    return table_text(BOARD_COLUMNS, board_rows(stages), numeric=frozenset({1, 2, 3, 4}))


def board_html(stages: dict[str, dict[str, int]], summary: str = "") -> str:
    rows = "".join(
        f"<tr data-stage='{escape(name)}' data-done='{c['done']}' data-abstained='{c['abstained']}'>"
        f"<td style='{NAME_CELL_STYLE}'>{escape(name)}</td>"
        + "".join(f"<td style='text-align:right'>{value}</td>" for value in row[1:]) + "</tr>"
        for (name, c), row in zip(stages.items(), board_rows(stages)))
    head = "".join(f"<th style='{NAME_CELL_STYLE}'>{c}</th>" for c in BOARD_COLUMNS)
    note = f"<p class='board-summary'>{escape(summary)}</p>" if summary else ""
    return f"<table class='skills-magic-board'><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{note}"


def calls_line(report) -> str:
    s = report.stats
    web = f", {plural(s['web_searches'], 'web search', 'web searches')}, {plural(s['web_fetches'], 'web fetch', 'web fetches')}" if report.web else ""
    short = s["expected_agent_calls"] - s["agent_calls"]
    missing = f", {short} not made (refused by the cap, or cancelled)" if short > 0 else ""
    return (f"{plural(s['agent_calls'], 'agent call')} (formula: {report.formula}{missing}), "
            f"{plural(s['requests'], 'request')}"
            f"{web}; {s['input_tokens']:,} input / {s['output_tokens']:,} output tokens; cost {dollars(s['cost_usd'])}")


def outcome_line(report) -> str:
    s = report.stats
    text = (f"{s['confirmed']} confirmed, {s['refuted']} refuted, {s['unverified']} unverified of "
            f"{plural(s['claims_verified'], 'claim')} verified")
    if report.kind == "research":
        text = (f"{plural(s['angles'], 'angle')}, {plural(s['sources'], 'source')}, "
                f"{plural(s['claims_extracted'], 'claim')} extracted; ") + text
    if s["not_verified"]:
        text += f"; {s['not_verified']} more not verified (over the limit)"
    return text


class ResearchView(View):
    """A research report: summary, findings, caveats, open questions, the claims and their votes, the board."""

    kind = "research"

    def __init__(self, report):
        self.report = report

    def _sections(self) -> list[tuple[str, list[str]]]:
        """(heading, lines) of the report's prose: what a reader needs first."""
        r, sections = self.report, []
        if r.stopped:
            sections.append((STATUS_LINE[r.status], [r.stopped]))
        if r.scope is not None and r.status == "needs_clarification":
            sections.append(("clarifying questions", list(r.scope.clarifying_questions)))
        if r.synthesis is not None:
            sections.append(("executive summary", [r.synthesis.executive_summary]))
            sections.append(("findings", [f"{f.finding} [{', '.join(f'claim {n}' for n in f.claims)}]" if f.claims
                                          else f.finding for f in r.synthesis.findings]))
        caveats = list(r.synthesis.caveats) if r.synthesis is not None else []
        caveats += [f"refuted: {c.claim.claim}" for c in r.outcome("refuted")]
        caveats += [f"unverified (too few valid votes): {c.claim.claim}" for c in r.outcome("unverified")]
        if r.kind == "research" and not r.web and r.sources:
            caveats.append("the agents could not search or fetch (no --web): the sources and quotes are the model's "
                           "recollection, not pages it read")
        if caveats:
            sections.append(("caveats", caveats))
        if r.abstentions:
            sections.append(("agents that gave no answer", list(r.abstentions)))
        if r.synthesis is not None and r.synthesis.open_questions:
            sections.append(("open questions", list(r.synthesis.open_questions)))
        if r.not_verified:
            sections.append(("not verified (over the limit)", [c.claim for c in r.not_verified]))
        return sections

    def text(self) -> str:
        r = self.report
        lines = [f"{r.kind}: {r.question}", outcome_line(r), calls_line(r)]
        for heading, items in self._sections():
            lines += ["", heading.upper(), *(f"- {item}" for item in items)]
        if r.claims:
            lines += ["", "CLAIMS"]
            for c in r.claims:
                marks = " ".join(VOTE_MARK[v.status] for v in c.votes)
                lines.append(f"{c.index + 1:>2}. {c.outcome.upper():<10} [{marks}]  {c.claim.claim}  ({c.claim.source or 'no source'})")
        if r.board.stages:
            lines += ["", "BOARD", board_text(r.board.stages)]
        return "\n".join(lines)

    def html(self) -> str:
        r = self.report
        parts = [f"<div class='skills-magic-research' data-status='{r.status}'>",
                 f"<h4>{escape(r.kind)}: {escape(r.question)}</h4>",
                 f"<p class='research-outcome'>{escape(outcome_line(r))}</p>",
                 f"<p class='research-calls' data-agent-calls='{r.agent_calls}' data-expected='{r.expected_agent_calls}'>"
                 f"{escape(calls_line(r))}</p>"]
        for heading, items in self._sections():
            if heading in PROSE:  # a paragraph, not a list of one
                parts.append(f"<h5>{escape(heading)}</h5><p class='research-{heading.replace(' ', '-')}'>"
                             f"{escape(' '.join(items))}</p>")
            else:
                parts.append(f"<h5>{escape(heading)}</h5><ul>{''.join(f'<li>{escape(i)}</li>' for i in items)}</ul>")
        if r.claims:
            parts.append("<h5>claims</h5>" + votes_table_html(r.claims, r.votes_per_claim, ""))
        if r.sources:
            rows = [[s.url, s.title, s.angle, "not read" if s.claims is None else str(s.claims)] for s in r.sources]
            parts.append("<h5>sources</h5>" + table_html(("url", "title", "angle", "claims"), rows, numeric=(3,)))
        if r.board.stages:
            parts.append("<h5>board</h5>" + board_html(r.board.stages))
        return "".join(parts) + "</div>"

    def data(self) -> dict[str, Any]:
        return self.report.to_dict()

    def metadata(self) -> dict[str, Any]:
        """The volatile facts: how long it took, and each request's time and stop (the trace)."""
        return {"seconds": round(self.report.seconds, 3), "run_id": self.report.run_id,
                "trace": list(self.report.trace)}
