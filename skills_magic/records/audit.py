"""The audit log: one append-only row per permission decision, run, review, trust and apply, in the database."""

from __future__ import annotations

from typing import Any

from skills_magic.records.db import Database


class AuditLog:
    """The audit rows of one session (its id on every row) in `database`."""

    def __init__(self, database: Database, session_id: str):
        self.database, self.session_id = database, session_id

    def record(self, row: dict[str, Any]) -> None:
        """Append one row; its strings (a refusal's detail, an inline command) are stored with secrets masked."""
        from skills_magic.redact import redactor

        masker = redactor()
        columns = ["session", *row]
        values = [self.session_id, *(masker.mask(value) for value in row.values())]
        self.database.connect().execute(
            f"INSERT INTO audit ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})", values)

    def rows(self, everything: bool = False) -> list[dict[str, Any]]:
        """This session's rows in order (or every session's)."""
        query = "SELECT * FROM audit" + ("" if everything else " WHERE session = ?") + " ORDER BY id"
        rows = self.database.connect().execute(query, () if everything else (self.session_id,)).fetchall()
        return [dict(r) for r in rows]
