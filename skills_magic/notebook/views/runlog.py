"""The views of the run log: `%skills runs` (a table of rows, newest first) and `%skills runs show ID` (a run as
the RunView it was shown as, rebuilt from its row; a vote, eval or batch row as a plain detail view).

Ids, times and durations differ on every run of a notebook: the JSON data leaves them out and the metadata holds
them, so a notebook that lists its runs re-runs with the same data."""

from __future__ import annotations

import json
from typing import Any

from skills_magic.notebook.views.base import View, preformatted, table_html, table_text
from skills_magic.notebook.views.runs import RunView
from skills_magic.runs.result import RunResult, ToolCall, TraceEvent

DEFAULT_LIMIT = 50  # rows `%skills runs` and `skills-magic logs` list without --limit: the newest screenful or two
RUNS_COLUMNS = ("id", "when", "kind", "skill", "model", "harness", "tokens", "cost", "outcome")
RUNS_NUMBERS = frozenset({0, 6, 7})
VOLATILE = ("id", "at", "session", "seconds")  # in the metadata, never the data
BODIES = ("requests", "responses")


def tokens(row: dict[str, Any]) -> int:
    return sum((row.get("usage") or {}).values())


def dollars(value: float | None) -> str:
    return "" if value is None else f"${value:.6f}"


def when(at: str) -> str:
    """2026-12-01T09:30:00.123456Z as 2026-12-01 09:30:00 (UTC)."""
    return at[:19].replace("T", " ")


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    skill = row.get("skill") or ", ".join(row.get("activated") or []) or ""
    if row.get("label"):
        skill = f"{skill} [{row['label']}]" if skill else f"[{row['label']}]"
    cost = dollars(row.get("cost_usd"))
    if row.get("reported_cost_usd") is not None:
        cost += f" (reported {dollars(row['reported_cost_usd'])})"
    return (str(row["id"]), when(row["at"]), row["kind"], skill, row.get("model") or "", row.get("harness") or "",
            f"{tokens(row):,}", cost, row.get("outcome") or "")


def stable(row: dict[str, Any]) -> dict[str, Any]:
    """A row without its volatile facts (and bodies), as data."""
    return {k: v for k, v in row.items() if k not in VOLATILE and k not in BODIES}


class RunLogView(View):
    """`%skills runs`: the rows, newest first: when, what, which model and harness, tokens, cost, outcome."""

    kind = "runlog"

    def __init__(self, rows: list[dict[str, Any]], note: str = ""):
        self.rows, self.note = rows, note

    def _footer(self) -> str:
        total = sum(r["cost_usd"] or 0 for r in self.rows)
        shown = f"{len(self.rows):,} row{'' if len(self.rows) == 1 else 's'}, newest first; {dollars(total)} computed"
        return shown + (f"; {self.note}" if self.note else "") + " (`%skills runs show ID` shows one)"

    def text(self) -> str:
        if not self.rows:
            return "no runs logged" + (f" ({self.note})" if self.note else "")
        return table_text(RUNS_COLUMNS, [_cells(r) for r in self.rows], numeric=RUNS_NUMBERS) + "\n" + self._footer()

    def html(self) -> str:
        if not self.rows:
            return preformatted(self.text())
        return (table_html(RUNS_COLUMNS, [_cells(r) for r in self.rows], names=(1, 2, 3), numeric=RUNS_NUMBERS)
                + preformatted(self._footer()))

    def data(self) -> dict[str, Any]:
        return {"runs": [stable(r) for r in self.rows]}

    def metadata(self) -> dict[str, Any]:
        return {"ids": [r["id"] for r in self.rows], "at": [r["at"] for r in self.rows],
                "seconds": [r.get("seconds") for r in self.rows]}


def result_of(row: dict[str, Any]) -> RunResult:
    """The RunResult a `run` row was recorded from, as far as the row keeps it (its answer, tool calls, trace,
    usage, stop and cost); the messages are not rebuilt (the row's bodies hold the exchanges)."""
    data = row.get("data") or {}
    calls = [ToolCall(c.get("id", ""), c.get("name", ""), c.get("input"), c.get("result_bytes") or 0,
                      bool(c.get("is_error")), c.get("error")) for c in row.get("tool_calls") or []]
    trace = [TraceEvent(**{k: v for k, v in e.items() if k in TraceEvent.__dataclass_fields__})
             for e in row.get("trace") or []]
    result = RunResult(task=data.get("task", ""), skill=row.get("skill"), client=data.get("client", ""),
                       model=row.get("model") or "", final_text=data.get("final_text", ""),
                       stop_reason=row.get("outcome") or "", note=data.get("note", ""), turns=data.get("turns", 0),
                       tool_calls=calls, usage=dict(row.get("usage") or {}), trace=trace, error=row.get("error"),
                       interrupted=bool(data.get("interrupted")), activated=list(row.get("activated") or []),
                       seconds=row.get("seconds"), cost_usd=row.get("reported_cost_usd"), run_id=data.get("run_id"))
    result.priced_usd = row.get("cost_usd")  # at the price table, as the run was costed when it ran
    return result


class RunEntryView(View):
    """`%skills runs show ID` of a vote, eval or batch row: its fields, its data and its bodies."""

    kind = "runlog-entry"

    def __init__(self, row: dict[str, Any]):
        self.row = row

    def _lines(self) -> list[str]:
        r = self.row
        lines = [f"{r['kind']} {r['id']} at {when(r['at'])} UTC" + (f" [{r['label']}]" if r.get("label") else "")]
        for name in ("model", "harness", "skill", "outcome", "error"):
            if r.get(name):
                lines.append(f"{name}: {r[name]}")
        usage = r.get("usage") or {}
        lines.append("tokens: " + " · ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in usage.items()))
        lines.append(f"cost: {dollars(r.get('cost_usd')) or 'no price for this model'}"
                     + (f" (reported {dollars(r['reported_cost_usd'])})" if r.get("reported_cost_usd") is not None else ""))
        if r.get("data"):
            lines.append("data: " + json.dumps(r["data"], ensure_ascii=False, sort_keys=True))
        for name in BODIES:
            lines.append(f"{name}: {len(r.get(name) or [])} bodies")
        return lines

    def text(self) -> str:
        return "\n".join(self._lines())

    def html(self) -> str:
        bodies = "".join(f"<details><summary>{name} ({len(self.row.get(name) or [])})</summary>"
                         + preformatted(json.dumps(self.row.get(name) or [], indent=1, ensure_ascii=False)) + "</details>"
                         for name in BODIES)
        return preformatted(self.text()) + bodies

    def data(self) -> dict[str, Any]:
        return {k: v for k, v in self.row.items() if k not in VOLATILE}

    def metadata(self) -> dict[str, Any]:
        return {k: self.row.get(k) for k in VOLATILE}


def entry_view(row: dict[str, Any]) -> View:
    """The view of one row: a run as its RunView, anything else as its detail view."""
    if row["kind"] == "run":
        return RunView(result_of(row), row.get("seconds"))
    return RunEntryView(row)
