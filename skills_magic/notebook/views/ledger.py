"""The views of the experiment ledger: one entry as written, and a plan's entries with its open predictions."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, table_html, table_text

LEDGER_COLUMNS = ("id", "kind", "text", "links")


def ledger_row(e) -> tuple[str, str, str, str]:
    row = _ledger_cells(e)
    return tuple(" ".join(cell.split()) for cell in row)  # one line per entry in a table; the data keeps the text


def _ledger_cells(e) -> tuple[str, str, str, str]:
    if e.kind == "prediction":
        return e.label, e.kind, e.text, f"{e.hypothesis}; falsified by: {e.falsified_by}"
    if e.kind == "verdict":
        return e.label, e.kind, e.outcome or "", f"{e.prediction}" + (f"; evidence: {e.evidence}" if e.evidence else "")
    if e.kind == "skip":
        return e.label, e.kind, e.text, e.prediction or ""
    return e.label, e.kind, e.text, e.prediction or ""


class LedgerEntryView(View):
    """One ledger entry as a cell output: the executed notebook itself carries the record."""

    kind = "ledger"

    def __init__(self, entry, database_path: str):
        self.entry, self.database_path = entry, database_path

    def text(self) -> str:
        return f"{self.entry.plan} {self.entry.summary()}"

    def html(self) -> str:
        return f"<div class='skills-magic-ledger'><code>{escape(self.entry.plan)}</code> {table_html(LEDGER_COLUMNS, [ledger_row(self.entry)])}</div>"

    def data(self) -> dict[str, Any]:
        return {"entries": [self.entry.to_dict()]}

    def metadata(self) -> dict[str, Any]:
        return {"at": [self.entry.at], "database": self.database_path}


class LedgerStateView(View):
    """`%ledger list` / `%ledger gate`: the entries as a table with the open-prediction count."""

    kind = "ledger"

    def __init__(self, state, database_path: str):
        self.state, self.database_path = state, database_path

    def _rows(self):
        return [ledger_row(e) for e in self.state.entries]

    def text(self) -> str:
        lines = [self.state.headline]
        if len(self.state.entries) < self.state.total and self.state.entries:
            lines.append(f"(the newest {len(self.state.entries)} of {self.state.total} entries)")
        if self.state.entries:
            lines.append(table_text(LEDGER_COLUMNS, self._rows(), numeric=frozenset()))
        return "\n".join(lines)

    def html(self) -> str:
        return f"<p><b>{escape(self.state.headline)}</b></p>" + (table_html(LEDGER_COLUMNS, self._rows()) if self.state.entries else "")

    def data(self) -> dict[str, Any]:
        return {
            "plan": self.state.plan,
            "total": self.state.total,
            "open": self.state.open_count,
            "entries": [e.to_dict() for e in self.state.entries],
        }

    def metadata(self) -> dict[str, Any]:
        return {"at": [e.at for e in self.state.entries], "database": self.database_path}
