"""The views of the experiment ledger: one entry as written, a plan's entries with its open predictions (this
session's, or every session's with a session column), and the plan's sessions."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, table_html, table_text

LEDGER_COLUMNS = ("id", "kind", "text", "links")
SESSION_COLUMNS = ("session", "started", "entries", "predictions", "open", "")


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
        return {"at": [self.entry.at], "session": [self.entry.session], "database": self.database_path}


class LedgerStateView(View):
    """`%ledger list` / `%ledger gate`: this session's entries as a table with the open-prediction count. Its data
    is what `ledger check NOTEBOOK` reads: this run's entries, the same on every run."""

    kind = "ledger"
    columns = LEDGER_COLUMNS

    def __init__(self, state, database_path: str):
        self.state, self.database_path = state, database_path

    def _rows(self):
        return [ledger_row(e) for e in self.state.entries]

    def text(self) -> str:
        lines = [self.state.headline]
        if len(self.state.entries) < self.state.total and self.state.entries:
            lines.append(f"(the newest {len(self.state.entries)} of {self.state.total} entries)")
        if self.state.entries:
            lines.append(table_text(self.columns, self._rows(), numeric=frozenset()))
        return "\n".join(lines)

    def html(self) -> str:
        return f"<p><b>{escape(self.state.headline)}</b></p>" + (table_html(self.columns, self._rows()) if self.state.entries else "")

    def data(self) -> dict[str, Any]:
        return {
            "plan": self.state.plan,
            "total": self.state.total,
            "open": self.state.open_count,
            "entries": [e.to_dict() for e in self.state.entries],
        }

    def metadata(self) -> dict[str, Any]:
        return {"at": [e.at for e in self.state.entries], "session": [e.session for e in self.state.entries],
                "database": self.database_path}


class LedgerHistoryView(LedgerStateView):
    """`%ledger list --all` / `%ledger gate --all`: every session's entries, each row saying whose it is. Its own
    MIME type: the history in a cell's output is not this run's record, so `ledger check NOTEBOOK` leaves it out."""

    kind = "ledger-history"
    columns = ("session", *LEDGER_COLUMNS)

    def _rows(self):
        return [(str(e.session or ""), *ledger_row(e)) for e in self.state.entries]

    def data(self) -> dict[str, Any]:
        return {**super().data(), "sessions": self.state.sessions,
                "entries": [{**e.to_dict(), "session": e.session} for e in self.state.entries]}


def _minute(at: str) -> str:
    """`2026-12-01T11:41:09.921930Z` as `2026-12-01 11:41 UTC`: when a session started, to the minute."""
    return f"{at[:10]} {at[11:16]} UTC" if len(at) >= 16 and at[10] == "T" else at


class LedgerSessionsView(View):
    """`%ledger sessions`: each session (kernel) that wrote to the plan, oldest first, and which one is asking."""

    kind = "ledger-sessions"

    def __init__(self, plan: str, sessions, database_path: str):
        self.plan, self.sessions, self.database_path = plan, sessions, database_path

    def _rows(self):
        return [(str(s.number), _minute(s.started), str(s.entries), str(s.predictions), str(s.open), "this session" if s.current else "")
                for s in self.sessions]

    def _headline(self) -> str:
        count = len(self.sessions)
        ids = "; `N:P1` names session N's P1" if count > 1 else ""
        return f"{self.plan}: {count} session{'' if count == 1 else 's'}{ids}"

    def text(self) -> str:
        return "\n".join([self._headline(), table_text(SESSION_COLUMNS, self._rows(), numeric=frozenset({0, 2, 3, 4}))]
                         if self.sessions else [self._headline()])

    def html(self) -> str:
        return f"<p><b>{escape(self._headline())}</b></p>" + (table_html(SESSION_COLUMNS, self._rows()) if self.sessions else "")

    def data(self) -> dict[str, Any]:
        return {"plan": self.plan, "sessions": [{"session": s.number, "started": s.started, "entries": s.entries,
                                                  "predictions": s.predictions, "open": s.open, "current": s.current}
                                                 for s in self.sessions]}

    def metadata(self) -> dict[str, Any]:
        return {"session_ids": [s.session_id for s in self.sessions], "database": self.database_path}
