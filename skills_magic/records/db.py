"""The project's SQLite file: one per project (default `.skills/skills.sqlite`), WAL, foreign keys on.

The schema is a list of small migrations applied in order and recorded in `_migrations` (simonw/llm's idea), so
it grows issue by issue without breaking a user's existing file. Audit rows are append-only, enforced in the
database by triggers, not only in Python.

A file that is not a usable SQLite database (random bytes, a damaged or truncated file, a folder, no permission) is
a `DatabaseUnreadable` naming the file, raised before anything that needs it runs. `Database(path, read_only=True)`
only reads (no migration, no WAL switch), so `skills-magic ledger check` works on a file in a read-only folder.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from skills_magic.errors import DatabaseUnreadable

DEFAULT_PATH = os.path.join(".skills", "skills.sqlite")  # relative to the session's folder
PATH_VARIABLE = "SKILLS_MAGIC_DB"
BUSY_TIMEOUT_MS = 5000  # concurrent kernels wait this long for a write lock instead of failing at once
# SQLite's primary result codes that mean the file itself cannot be used, not that a statement was wrong: PERM,
# READONLY, IOERR, CORRUPT, CANTOPEN, NOTADB (`sqlite3.SQLITE_*` from Python 3.11; numbers so 3.10 imports too)
UNUSABLE_CODES = frozenset({3, 8, 10, 11, 14, 26})
UNUSABLE_MESSAGES = ("file is not a database", "database disk image is malformed", "unable to open database file",
                     "disk I/O error", "attempt to write a readonly database")  # the same, where no code is attached
READ_ONLY_HINT = "check that --db (or SKILLS_MAGIC_DB) names the project's skills.sqlite"

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


def ledger_table(session_column: str, unique: str) -> str:
    """`CREATE TABLE ledger_entries` with the rules every version of it has (the CHECK constraints); the session
    column and the UNIQUE key are what changed between versions."""
    return f"""
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
            {session_column},
            UNIQUE ({unique}),
            CHECK (kind != 'prediction' OR (hypothesis_id IS NOT NULL AND COALESCE(length(trim(falsified_by)), 0) > 0)),
            CHECK (kind NOT IN ('verdict', 'skip') OR prediction_id IS NOT NULL),
            CHECK (kind != 'verdict' OR outcome IS NOT NULL),
            CHECK (kind != 'verdict' OR outcome = 'inconclusive' OR COALESCE(length(trim(evidence)), 0) > 0)
        );
    """


# one verdict or skip per prediction (the unique index; the trigger names the error), and no UPDATE or DELETE ever
LEDGER_GUARDS = """
        CREATE INDEX ledger_plan_order ON ledger_entries(plan, id);
        CREATE INDEX ledger_prediction ON ledger_entries(prediction_id, kind);
        CREATE UNIQUE INDEX ledger_one_judgement ON ledger_entries(prediction_id) WHERE kind IN ('verdict', 'skip');
        CREATE TRIGGER ledger_one_judgement_only BEFORE INSERT ON ledger_entries
            WHEN NEW.kind IN ('verdict', 'skip') AND EXISTS (
                SELECT 1 FROM ledger_entries WHERE prediction_id = NEW.prediction_id AND kind IN ('verdict', 'skip'))
            BEGIN SELECT RAISE(ABORT, 'prediction already judged'); END;
        CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger_entries
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger_entries
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
"""


@migration
def m002_ledger(db: sqlite3.Connection) -> None:
    run_statements(
        db,
        ledger_table("session TEXT", "plan, label") + LEDGER_GUARDS + """
        CREATE INDEX ledger_plan_kind ON ledger_entries(plan, kind, number);
        -- REPLACE deletes the old row without firing delete triggers: refuse any insert that would replace one
        CREATE TRIGGER ledger_no_replace BEFORE INSERT ON ledger_entries
            WHEN EXISTS (SELECT 1 FROM ledger_entries WHERE id = NEW.id OR (plan = NEW.plan AND label = NEW.label))
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        """,
    )


@migration
def m003_ledger_labels_per_session(db: sqlite3.Connection) -> None:
    """Labels are numbered within a session (a kernel: one run of a notebook), so UNIQUE (plan, label) becomes
    UNIQUE (plan, session, label). SQLite cannot change a table's constraints in place: the table is renamed, made
    again with the new key and the same rules, the rows copied as they are (same ids, labels and links: nothing is
    rewritten; a missing session becomes ''), and the old table dropped (DROP fires no delete trigger; its indexes
    and triggers go with it). Renaming first keeps the new table's links pointing at itself, foreign keys on."""
    run_statements(
        db,
        "ALTER TABLE ledger_entries RENAME TO ledger_entries_m002;"
        + ledger_table("session TEXT NOT NULL DEFAULT ''", "plan, session, label") + """
        INSERT INTO ledger_entries (id, plan, kind, number, label, text, hypothesis_id, prediction_id, falsified_by,
                                    outcome, evidence, at, session)
            SELECT id, plan, kind, number, label, text, hypothesis_id, prediction_id, falsified_by, outcome, evidence,
                   at, COALESCE(session, '') FROM ledger_entries_m002 ORDER BY id;
        DROP TABLE ledger_entries_m002;
        """ + LEDGER_GUARDS + """
        CREATE INDEX ledger_plan_kind ON ledger_entries(plan, session, kind, number);
        CREATE INDEX ledger_plan_session ON ledger_entries(plan, session, id);
        -- REPLACE deletes the old row without firing delete triggers: refuse any insert that would replace one
        CREATE TRIGGER ledger_no_replace BEFORE INSERT ON ledger_entries
            WHEN EXISTS (SELECT 1 FROM ledger_entries WHERE id = NEW.id
                         OR (plan = NEW.plan AND session = NEW.session AND label = NEW.label))
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        """,
    )


@migration
def m004_run_log(db: sqlite3.Connection) -> None:
    """The run log (records/runlog.py): one row per `%%skill run`, verification vote, eval run and batch request,
    append-only like the audit. JSON columns hold lists and dicts as text; bodies are stored with secrets masked."""
    run_statements(
        db,
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,              -- UTC, ISO 8601 (clock.utc_now)
            session TEXT NOT NULL,         -- the kernel session that ran it
            kind TEXT NOT NULL CHECK (kind IN ('run', 'vote', 'eval', 'batch')),
            label TEXT,                    -- an eval report's label; a saved result's name
            model TEXT,
            harness TEXT,                  -- native | claude-code
            skill TEXT,                    -- the skill run explicitly (a run), or the script voter's skill
            activated TEXT,                -- JSON: the skills active when it ended
            tool_calls TEXT,               -- JSON: [{name, input, result_bytes, is_error, error}]
            trace TEXT,                    -- JSON: the load trace
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            cache_read_tokens INTEGER NOT NULL DEFAULT 0,
            cache_write_tokens INTEGER NOT NULL DEFAULT 0,
            seconds REAL,
            cost_usd REAL,                 -- computed from the price table (models/prices.py)
            reported_cost_usd REAL,        -- what the harness reported (Claude Code's total_cost_usd)
            outcome TEXT,                  -- a run's stop reason, a vote's status
            error TEXT,
            data TEXT,                     -- JSON: what else the kind keeps (a vote's claim, an eval's prompt id)
            requests TEXT,                 -- JSON: the request bodies sent, secrets masked
            responses TEXT                 -- JSON: the response bodies received, secrets masked
        );
        -- newest first, overall and by kind or skill ("%skills runs --skill S --limit N"); `at` for --since
        CREATE INDEX runs_kind_id ON runs(kind, id);
        CREATE INDEX runs_skill_id ON runs(skill, id);
        CREATE INDEX runs_label_id ON runs(label, id);
        CREATE INDEX runs_at ON runs(at);
        CREATE TRIGGER runs_no_replace BEFORE INSERT ON runs WHEN EXISTS (SELECT 1 FROM runs WHERE id = NEW.id)
            BEGIN SELECT RAISE(ABORT, 'the run log is append-only'); END;
        CREATE TRIGGER runs_no_update BEFORE UPDATE ON runs
            BEGIN SELECT RAISE(ABORT, 'the run log is append-only'); END;
        CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs
            BEGIN SELECT RAISE(ABORT, 'the run log is append-only'); END;
        """
    )


@migration
def m005_learned_skills(db: sqlite3.Connection) -> None:
    """Every version of every learned skill (records/learned.py): a skill the model (or the user) wrote through
    `manage_skill`, append-only like the audit, so a bad edit is always recoverable."""
    run_statements(
        db,
        """
        CREATE TABLE learned_versions (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,              -- UTC, ISO 8601 (clock.utc_now)
            session TEXT NOT NULL,         -- the kernel session that wrote it
            name TEXT NOT NULL,
            version INTEGER NOT NULL,      -- 1, 2, ... per name
            action TEXT NOT NULL CHECK (action IN ('create', 'update', 'delete', 'revert')),
            author TEXT NOT NULL,          -- "user" or the model id
            run TEXT,                      -- the run's id, when a run wrote it
            reason TEXT,                   -- why, in the author's words
            files TEXT NOT NULL,           -- JSON: {relative path: text}; {} for a delete
            digest TEXT NOT NULL,          -- sha256 of the files' JSON
            UNIQUE (name, version)
        );
        CREATE TRIGGER learned_no_update BEFORE UPDATE ON learned_versions
            BEGIN SELECT RAISE(ABORT, 'learned skill versions are append-only'); END;
        CREATE TRIGGER learned_no_delete BEFORE DELETE ON learned_versions
            BEGIN SELECT RAISE(ABORT, 'learned skill versions are append-only'); END;
        """
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


def unusable(path: str, error: BaseException, hint: str | None = None) -> DatabaseUnreadable | None:
    """The named error for an SQLite error that means the file cannot be used; None for any other error."""
    if not isinstance(error, sqlite3.Error) or isinstance(error, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
        return None
    code = getattr(error, "sqlite_errorcode", None)  # extended codes: the primary code is the low byte
    if isinstance(code, int) and (code & 0xFF) not in UNUSABLE_CODES:
        return None
    if not isinstance(code, int) and not any(m in str(error) for m in UNUSABLE_MESSAGES):
        return None
    if os.path.isdir(path):
        return DatabaseUnreadable(path, "it is a folder, not a file", hint)
    return DatabaseUnreadable(path, (str(error).splitlines() or [type(error).__name__])[0], hint)


@contextlib.contextmanager
def _file_errors_named(connection: sqlite3.Connection):
    """Turn an SQLite error that means "this file cannot be used" into DatabaseUnreadable naming the file."""
    try:
        yield
    except sqlite3.Error as error:
        found = unusable(getattr(connection, "file_path", "?"), error, getattr(connection, "hint", None))
        if found is not None:
            raise found from None
        raise


class _Cursor(sqlite3.Cursor):
    """A cursor whose errors about the file (damaged pages found while reading rows too) are DatabaseUnreadable."""

    def execute(self, sql, parameters=(), /):
        with _file_errors_named(self.connection):
            return super().execute(sql, parameters)

    def fetchone(self):
        with _file_errors_named(self.connection):
            return super().fetchone()

    def fetchall(self):
        with _file_errors_named(self.connection):
            return super().fetchall()

    def fetchmany(self, size: int = 1):
        with _file_errors_named(self.connection):
            return super().fetchmany(size)

    def __next__(self):
        with _file_errors_named(self.connection):
            return super().__next__()


class _Connection(sqlite3.Connection):
    """`execute` goes through `_Cursor`, so every statement of the package reports an unusable file by name."""

    file_path = ""
    hint: str | None = None

    def execute(self, sql, parameters=(), /):
        return self.cursor(_Cursor).execute(sql, parameters)


class Database:
    """A connection per thread to the project's file, migrated on first use (or, `read_only`, only read)."""

    def __init__(self, path: str, read_only: bool = False):
        self.path = path
        self.read_only = read_only
        self._local = threading.local()
        self._migrated = False
        self._lock = threading.Lock()

    def connect(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._open_read_only() if self.read_only else self._open()
            self._local.connection = connection
        if not self.read_only:
            with self._lock:
                if not self._migrated:
                    migrate(connection)
                    self._migrated = True
        return connection

    def _connection(self, target: str, hint: str | None, **options) -> _Connection:
        try:
            connection = sqlite3.connect(target, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                         factory=_Connection, **options)
        except sqlite3.Error as error:
            found = unusable(self.path, error, hint)
            if found is None:
                raise
            raise found from None
        connection.file_path, connection.hint = self.path, hint
        connection.row_factory = sqlite3.Row
        return connection

    def _open(self) -> _Connection:
        if os.path.isdir(self.path):
            raise DatabaseUnreadable(self.path, "it is a folder, not a file")
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        except OSError as error:
            raise DatabaseUnreadable(self.path, f"its folder cannot be made ({error.strerror or error})") from None
        connection = self._connection(self.path, None)
        try:
            _retry_locked(lambda: connection.execute("PRAGMA journal_mode=WAL"))  # the busy timeout does not cover it
            connection.execute("PRAGMA synchronous=NORMAL")  # WAL: commits survive a crashed process; no fsync each
            connection.execute("PRAGMA foreign_keys=ON")
            connection.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        except BaseException:
            connection.close()
            raise
        return connection

    def _open_read_only(self) -> _Connection:
        if not os.path.isfile(self.path):
            reason = "it is a folder, not a file" if os.path.isdir(self.path) else "no such file"
            raise DatabaseUnreadable(self.path, reason, READ_ONLY_HINT)
        uri = Path(os.path.abspath(self.path)).as_uri()
        # mode=ro still needs the -shm file of a WAL database, which a read-only folder cannot hold: immutable=1
        # reads the file as it is, which is complete once the last writer closed (its -wal is checkpointed and gone)
        for query in ("mode=ro", "immutable=1"):
            connection = self._connection(f"{uri}?{query}", READ_ONLY_HINT, uri=True)
            try:
                connection.cursor().execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file for real
                return connection
            except sqlite3.Error as error:
                connection.close()
                code = getattr(error, "sqlite_errorcode", None)
                cannot_open = (code & 0xFF) == 14 if isinstance(code, int) else "unable to open" in str(error)
                if query == "mode=ro" and cannot_open:
                    if _has_pending_log(self.path):
                        raise DatabaseUnreadable(self.path, "its -wal file holds commits that cannot be read while "
                                                 "the folder is read-only", "open it once where it is writable") from None
                    continue
                found = unusable(self.path, error, READ_ONLY_HINT)
                if found is None:
                    raise
                raise found from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def has_table(self, name: str) -> bool:
        row = self.connect().execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
        return row is not None


def _has_pending_log(path: str) -> bool:
    """A non-empty -wal file: commits not yet in the main file, which immutable=1 would silently miss."""
    try:
        return os.path.getsize(path + "-wal") > 0
    except OSError:
        return False


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
            if db.in_transaction:  # a damaged file may already have ended it: keep the first error, not ROLLBACK's
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
