"""The project's SQLite file: one per project (default `.skills/skills.sqlite`), WAL, foreign keys on.

The schema is a list of small migrations applied in order and recorded in `_migrations` (simonw/llm's idea), so
it grows issue by issue without breaking a user's existing file. Audit rows are append-only, enforced in the
database by triggers, not only in Python.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable

DEFAULT_PATH = os.path.join(".skills", "skills.sqlite")  # relative to the session's folder
PATH_VARIABLE = "SKILLS_MAGIC_DB"
BUSY_TIMEOUT_MS = 5000  # concurrent kernels wait this long for a write lock instead of failing at once

MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = []


def migration(function: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], None]:
    MIGRATIONS.append((function.__name__, function))
    return function


@migration
def m001_audit(db: sqlite3.Connection) -> None:
    run_statements(
        db,
        """
        CREATE TABLE audit (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,              -- UTC, ISO 8601
            session TEXT NOT NULL,         -- the kernel session that asked
            event TEXT NOT NULL,           -- decision | run | review
            skill TEXT NOT NULL,
            path TEXT NOT NULL,            -- script path in the skill, or !command for inline shell
            digest TEXT,                   -- sha256 of the script's bytes
            decision TEXT,                 -- allow | deny
            decided_by TEXT,               -- the rule, the person, or the reason nobody could answer
            exit_code INTEGER,
            seconds REAL,
            detail TEXT
        );
        CREATE INDEX audit_session ON audit(session, id);
        CREATE TRIGGER audit_no_replace BEFORE INSERT ON audit WHEN EXISTS (SELECT 1 FROM audit WHERE id = NEW.id)
            BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
            BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
            BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
        """
    )


@migration
def m002_ledger(db: sqlite3.Connection) -> None:
    run_statements(
        db,
        """
        CREATE TABLE ledger_entries (
            id INTEGER PRIMARY KEY,
            plan TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('hypothesis', 'prediction', 'verdict', 'observation', 'conclusion', 'skip')),
            number INTEGER NOT NULL,
            label TEXT NOT NULL,
            text TEXT NOT NULL CHECK (length(trim(text)) > 0),
            hypothesis_id INTEGER REFERENCES ledger_entries(id),
            prediction_id INTEGER REFERENCES ledger_entries(id),
            falsified_by TEXT,
            outcome TEXT CHECK (outcome IS NULL OR outcome IN ('confirmed', 'refuted', 'inconclusive')),
            evidence TEXT,
            at TEXT NOT NULL,
            session TEXT,
            UNIQUE (plan, label),
            CHECK (kind != 'prediction' OR (hypothesis_id IS NOT NULL AND COALESCE(length(trim(falsified_by)), 0) > 0)),
            CHECK (kind NOT IN ('verdict', 'skip') OR prediction_id IS NOT NULL),
            CHECK (kind != 'verdict' OR outcome IS NOT NULL),
            CHECK (kind != 'verdict' OR outcome = 'inconclusive' OR COALESCE(length(trim(evidence)), 0) > 0)
        );
        CREATE INDEX ledger_plan_kind ON ledger_entries(plan, kind, number);
        CREATE INDEX ledger_plan_order ON ledger_entries(plan, id);
        CREATE INDEX ledger_prediction ON ledger_entries(prediction_id, kind);
        CREATE UNIQUE INDEX ledger_one_judgement ON ledger_entries(prediction_id) WHERE kind IN ('verdict', 'skip');
        -- REPLACE deletes the old row without firing delete triggers: refuse any insert that would replace one
        CREATE TRIGGER ledger_no_replace BEFORE INSERT ON ledger_entries
            WHEN EXISTS (SELECT 1 FROM ledger_entries WHERE id = NEW.id OR (plan = NEW.plan AND label = NEW.label))
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        CREATE TRIGGER ledger_one_judgement_only BEFORE INSERT ON ledger_entries
            WHEN NEW.kind IN ('verdict', 'skip') AND EXISTS (
                SELECT 1 FROM ledger_entries WHERE prediction_id = NEW.prediction_id AND kind IN ('verdict', 'skip'))
            BEGIN SELECT RAISE(ABORT, 'prediction already judged'); END;
        CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger_entries
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger_entries
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        """,
    )


def _retry_locked(action, seconds: float = BUSY_TIMEOUT_MS / 1000) -> None:
    """Retry an action SQLite refuses with "database is locked" instead of waiting (switching a new file to WAL
    while another connection writes it), for as long as the busy timeout would have waited."""
    import time

    deadline = time.monotonic() + seconds
    delay = 0.005
    while True:
        try:
            action()
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def resolve_path(folder: str, environ=None) -> str:
    environ = os.environ if environ is None else environ
    return os.path.join(folder, os.path.expanduser(environ.get(PATH_VARIABLE) or DEFAULT_PATH))


class Database:
    """A connection per thread to the project's file, migrated on first use."""

    def __init__(self, path: str):
        self.path = path
        self._local = threading.local()
        self._migrated = False
        self._lock = threading.Lock()

    def connect(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            connection.row_factory = sqlite3.Row
            _retry_locked(lambda: connection.execute("PRAGMA journal_mode=WAL"))  # the busy timeout does not cover it
            connection.execute("PRAGMA synchronous=NORMAL")  # WAL: commits survive a crashed process; no fsync each
            connection.execute("PRAGMA foreign_keys=ON")
            connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._local.connection = connection
        with self._lock:
            if not self._migrated:
                migrate(connection)
                self._migrated = True
        return connection


def migrate(db: sqlite3.Connection) -> list[str]:
    """Apply the migrations this file has not had yet, each in its own transaction; returns their names."""
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
    applied = []
    for name, function in MIGRATIONS:
        db.execute("BEGIN IMMEDIATE")  # one kernel migrates; a concurrent one waits, then sees it done
        try:
            if db.execute("SELECT 1 FROM _migrations WHERE name = ?", (name,)).fetchone() is None:
                function(db)
                db.execute("INSERT INTO _migrations (name) VALUES (?)", (name,))
                applied.append(name)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return applied



def run_statements(db: sqlite3.Connection, sql: str) -> None:
    """Run several statements inside the current transaction (`executescript` would commit it first)."""
    pending = ""
    for line in sql.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            db.execute(pending)
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement: {pending.strip()[:80]}")
