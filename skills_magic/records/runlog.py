"""The run log: one append-only row per `%%skill run`, verification vote, eval run and batch request, in the
project's SQLite file (the `runs` table of migration m004), queryable afterwards (`%skills runs`, `skills-magic logs`,
`session.runs.dataframe()`), as simonw/llm logs every prompt.

Logging never blocks a run: a locked database (another kernel writing), a full disk or a broken file becomes one
warning (`RunLogWarning`) and the run goes on without its row. Every string stored is masked as cassettes are
(`skills_magic.redact`): request and response bodies, tool inputs, errors.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
import warnings
from typing import Any

from skills_magic.clock import utc_now
from skills_magic.errors import InvalidArgument, SkillsMagicError
from skills_magic.records.db import BUSY_TIMEOUT_MS, Database

KINDS = ("run", "vote", "eval", "batch")
RECORD_BUSY_TIMEOUT_MS = 200  # a run waits at most this long for the log's write lock, then goes on without its row
JSON_COLUMNS = ("activated", "tool_calls", "trace", "data", "requests", "responses")
BODY_COLUMNS = ("requests", "responses")  # large: left out of listings, read by `get`
TEXT_COLUMNS = ("label", "model", "harness", "skill", "outcome", "error")
NUMBER_COLUMNS = ("seconds", "cost_usd", "reported_cost_usd")
USAGE_COLUMNS = {"input_tokens": "input_tokens", "output_tokens": "output_tokens",  # the API's name -> the column
                 "cache_read_input_tokens": "cache_read_tokens", "cache_creation_input_tokens": "cache_write_tokens"}
LISTED = ("id", "at", "session", "kind", *TEXT_COLUMNS, "activated", "tool_calls", "trace", *USAGE_COLUMNS.values(),
          *NUMBER_COLUMNS, "data")  # every column but the bodies


class RunLogWarning(SkillsMagicError, UserWarning):
    """The run log could not record a row; the run itself went on."""


class PandasMissing(SkillsMagicError):
    def __init__(self) -> None:
        super().__init__("session.runs.dataframe() needs pandas: `pip install pandas` (or `%skills runs` for a table)")


def since_text(since: str | datetime.date | None) -> str | None:
    """A date or time the rows must be at or after, as the text `at` compares with (UTC, ISO 8601)."""
    if since is None or isinstance(since, str) and not since.strip():
        return None
    if isinstance(since, datetime.date):
        return since.isoformat()
    try:
        parsed = datetime.datetime.fromisoformat(since.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"--since takes a date such as 2026-12-01 (or 2026-12-01T09:30), not {since!r}") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return parsed.isoformat() if len(since.strip()) > 10 else parsed.date().isoformat()


def _storable(text: str) -> str:
    """Text SQLite can store (UTF-8): a lone surrogate (a model may send one) becomes its escape, `\\ud800`."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _json(value: Any) -> str:
    """JSON text, readable UTF-8; with a lone surrogate somewhere, ASCII escapes, which read back exactly."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return json.dumps(value, default=str)


def _row(row: sqlite3.Row) -> dict[str, Any]:
    found = dict(row)
    for column in JSON_COLUMNS:
        if found.get(column) is not None:
            found[column] = json.loads(found[column])
    found["usage"] = {name: found.get(column) or 0 for name, column in USAGE_COLUMNS.items()}
    return found


class RunLog:
    """The run log of one session's project database; `enabled = False` stops this session's logging."""

    def __init__(self, database: Database, session_id: str):
        self.database, self.session_id = database, session_id
        self.enabled = True
        self._warned: set[str] = set()  # each distinct failure is said once, not at every vote of a verification

    def record(self, kind: str, **fields: Any) -> int | None:
        """Append one row (fields as in the module's columns; `usage`: the API's four token counts); its id, or
        None when logging is off or the database refused (a warning says why)."""
        if not self.enabled:
            return None
        try:
            columns, values = self._values(kind, fields)
            connection = self.database.connect()
            connection.execute(f"PRAGMA busy_timeout={RECORD_BUSY_TIMEOUT_MS}")
            try:
                cursor = connection.execute(f"INSERT INTO runs ({', '.join(columns)}) VALUES "
                                            f"({', '.join('?' for _ in columns)})", values)
            finally:
                connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            return cursor.lastrowid
        except (sqlite3.Error, SkillsMagicError, OSError, ValueError, TypeError) as error:
            self._warn(kind, error)
            return None

    def _values(self, kind: str, fields: dict[str, Any]) -> tuple[list[str], list[Any]]:
        from skills_magic.redact import redactor

        if kind not in KINDS:
            raise ValueError(f"a run log row is one of {', '.join(KINDS)}, not {kind!r}")
        masker = redactor()
        row: dict[str, Any] = {"at": utc_now(), "session": self.session_id, "kind": kind}
        for column in TEXT_COLUMNS:
            value = fields.get(column)
            row[column] = None if value is None else _storable(masker.mask(str(value)))
        for column in NUMBER_COLUMNS:
            row[column] = None if fields.get(column) is None else float(fields[column])
        usage = fields.get("usage") or {}
        for name, column in USAGE_COLUMNS.items():
            row[column] = int(usage.get(name) or 0)
        for column in JSON_COLUMNS:
            value = fields.get(column)
            row[column] = None if value is None else _json(masker.mask_data(value))
        return list(row), list(row.values())

    def _warn(self, kind: str, error: BaseException) -> None:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        if reason in self._warned:
            return
        self._warned.add(reason)
        warnings.warn(f"the run log could not record this {kind} ({reason}); the run goes on without its row",
                      RunLogWarning, stacklevel=3)

    def rows(self, kind: str | None = None, skill: str | None = None, since: str | datetime.date | None = None,
             limit: int | None = None, label: str | None = None, *, bodies: bool = False) -> list[dict[str, Any]]:
        """Rows of every session, newest first, filtered; the request and response bodies only with `bodies`."""
        conditions, values = [], []
        for column, value in (("kind", kind), ("skill", skill), ("label", label)):
            if value is not None:
                conditions.append(f"{column} = ?")
                values.append(value)
        after = since_text(since)
        if after is not None:
            conditions.append("at >= ?")
            values.append(after)
        query = f"SELECT {'*' if bodies else ', '.join(LISTED)} FROM runs"
        query += (" WHERE " + " AND ".join(conditions) if conditions else "") + " ORDER BY id DESC"
        if limit is not None:
            query += " LIMIT ?"
            values.append(int(limit))
        connection = self.database.connect()
        return [_row(r) for r in connection.execute(query, values).fetchall()]

    def get(self, run_id: int) -> dict[str, Any] | None:
        """One row with its bodies; None when there is no such id."""
        found = self.database.connect().execute("SELECT * FROM runs WHERE id = ?", (int(run_id),)).fetchone()
        return None if found is None else _row(found)

    def latest(self, kind: str, label: str | None) -> dict[str, Any] | None:
        """The newest row of `kind` with `label` (a saved eval result: its `data`), or None."""
        found = self.rows(kind=kind, label=label, limit=1)
        return found[0] if found else None

    def dataframe(self, **filters: Any):
        """The rows (as `rows` filters them, bodies left out) as a pandas DataFrame, `at` parsed as UTC times."""
        try:
            import pandas
        except ImportError:
            raise PandasMissing() from None
        frame = pandas.DataFrame(self.rows(**filters), columns=[*LISTED, "usage"])
        frame["at"] = pandas.to_datetime(frame["at"], utc=True, format="ISO8601")
        return frame.drop(columns=["usage"]).set_index("id")
