"""The audit: every decision and run is a row of the project's SQLite file, append-only in the database itself,
shared by every kernel of the project and shown per session."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from database_files import raw_rows
from notebook_setup import notebook_folder
from skillfiles import make_skill, write_file
from skills_magic.skills.catalog import Source
from skills_magic.records.db import DEFAULT_PATH, MIGRATIONS, Database, migrate, resolve_path
from skills_magic.notebook.views import AuditView
from skills_magic.safety.gate import unattended
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import SkillsSession

RUN = "print('ran')\n"
FAIL = "import sys\nsys.exit(4)\n"
COLUMNS = ["id", "at", "session", "event", "skill", "path", "digest", "decision", "decided_by", "exit_code", "seconds",
           "detail"]


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    notebook_folder(monkeypatch, tmp_path)
    skill = tmp_path / "skills" / "x"
    make_skill(skill)
    write_file(skill, "scripts/run.py", RUN)
    write_file(skill, "scripts/fail.py", FAIL)
    return tmp_path


def new_session(place: Path) -> SkillsSession:
    return SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- what is recorded -------------------------------------------------------------------------------------------


def test_every_decision_and_run_is_a_row_in_the_file_at_skills_magic_db(place):
    session = new_session(place)
    session.add_rule("allow", "x:scripts/run.py")
    session.add_rule("allow", "x:scripts/fail.py")
    session.add_rule("deny", "x:scripts/denied.py")
    gate, skill = session.gate(), session.skill("x")
    gate.run_script(skill, "scripts/run.py", [], "", unattended)
    gate.run_script(skill, "scripts/fail.py", [], "", unattended)
    write_file(place / "skills" / "x", "scripts/denied.py", RUN)
    gate.run_script(skill, "scripts/denied.py", [], "", unattended)
    gate.run_script(skill, "scripts/other.py", [], "", unattended)  # not a file: the executor refuses
    write_file(place / "skills" / "x", "scripts/asked.py", RUN)
    gate.run_script(skill, "scripts/asked.py", [], "", unattended)
    assert (place / "audit.sqlite").is_file()
    rows = raw_rows(place / "audit.sqlite")
    assert list(rows[0]) == COLUMNS
    assert all(r["session"] == session.session_id for r in rows)
    facts = [(r["event"], r["skill"], r["path"], r["decision"], r["exit_code"]) for r in rows]
    assert facts == [
        ("decision", "x", "scripts/run.py", "allow", None),
        ("run", "x", "scripts/run.py", None, 0),
        ("decision", "x", "scripts/fail.py", "allow", None),
        ("run", "x", "scripts/fail.py", None, 4),
        ("decision", "x", "scripts/denied.py", "deny", None),
        ("decision", "x", "scripts/other.py", "deny", None),
        ("decision", "x", "scripts/asked.py", "deny", None),
    ]
    decided = [r["decided_by"] for r in rows if r["event"] == "decision"]
    assert decided[0] == "allow x:scripts/run.py  [%skills allow]"
    assert decided[2] == "deny x:scripts/denied.py  [%skills deny]"
    assert decided[3] == "the executor"
    assert "nobody can answer" in decided[4] and "%skills allow x:scripts/asked.py" in decided[4]
    assert rows[0]["digest"] == rows[1]["digest"] == sha(RUN)
    assert rows[3]["digest"] == sha(FAIL)
    assert all(r["seconds"] is not None and r["seconds"] >= 0 for r in rows if r["event"] == "run")
    assert all(r["seconds"] is None for r in rows if r["event"] == "decision")
    assert all(r["at"].endswith("Z") for r in rows)
    assert session.audit() == rows


def test_a_run_the_user_typed_is_recorded_as_theirs(place):
    session = new_session(place)
    session.run_script("x", "scripts/run.py")
    decision, run = session.audit()
    assert decision["decided_by"] == "the user's own command" and decision["decision"] == "allow"
    assert run["event"] == "run" and run["exit_code"] == 0


def test_a_model_run_records_its_decisions_and_runs(place):
    session = new_session(place)
    session.add_rule("allow", "x:scripts/run.py")
    call = {"name": "run_skill_script", "input": {"skill": "x", "path": "scripts/run.py"}}
    denied = {"name": "run_skill_script", "input": {"skill": "x", "path": "scripts/fail.py"}}
    session.model_client = ScriptedModel([{"tool_use": [call, denied]}, "done"])
    session.run("task")
    assert [(r["event"], r["path"], r["decision"]) for r in session.audit()] == [
        ("decision", "scripts/run.py", "allow"), ("run", "scripts/run.py", None), ("decision", "scripts/fail.py", "deny")]


# --- append-only ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("statement", [
    "UPDATE audit SET decision = 'allow'",
    "UPDATE audit SET decided_by = 'nobody' WHERE id = 1",
    "DELETE FROM audit",
    "DELETE FROM audit WHERE id = 1",
])
def test_rows_cannot_be_updated_or_deleted(place, statement):
    session = new_session(place)
    session.run_script("x", "scripts/run.py")
    before = raw_rows(place / "audit.sqlite")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        session.database.connect().execute(statement)
    connection = sqlite3.connect(place / "audit.sqlite")  # another program is stopped by the database, too
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            connection.execute(statement)
    finally:
        connection.close()
    assert raw_rows(place / "audit.sqlite") == before


# --- the file and its migrations --------------------------------------------------------------------------------


def test_migrations_are_recorded_and_applied_once(tmp_path):
    database = Database(str(tmp_path / "sub" / "project.sqlite"))
    connection = database.connect()
    names = [r["name"] for r in connection.execute("SELECT name FROM _migrations ORDER BY name")]
    assert names == ["m001_audit", "m002_ledger", "m003_ledger_labels_per_session", "m004_run_log", "m005_learned_skills"] == [name for name, _ in MIGRATIONS]
    assert migrate(connection) == []  # nothing left to apply
    again = Database(str(tmp_path / "sub" / "project.sqlite")).connect()
    assert [r["name"] for r in again.execute("SELECT name FROM _migrations")] == ["m001_audit", "m002_ledger", "m003_ledger_labels_per_session", "m004_run_log", "m005_learned_skills"]
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_fresh_file_gets_every_migration(tmp_path):
    connection = sqlite3.connect(tmp_path / "f.sqlite", isolation_level=None)
    try:
        assert migrate(connection) == [name for name, _ in MIGRATIONS]
        assert migrate(connection) == []
    finally:
        connection.close()


def test_the_database_path_follows_skills_magic_db_relative_to_the_session_folder(tmp_path):
    assert resolve_path(str(tmp_path), {}) == os.path.join(str(tmp_path), DEFAULT_PATH)
    assert DEFAULT_PATH == os.path.join(".skills", "skills.sqlite")
    assert resolve_path(str(tmp_path), {"SKILLS_MAGIC_DB": ".scratch/a.sqlite"}) == os.path.join(str(tmp_path), ".scratch/a.sqlite")
    assert resolve_path(str(tmp_path), {"SKILLS_MAGIC_DB": "/abs/a.sqlite"}) == "/abs/a.sqlite"


def test_without_skills_magic_db_the_file_is_in_the_projects_skills_folder(place, monkeypatch):
    monkeypatch.delenv("SKILLS_MAGIC_DB")
    session = new_session(place)
    session.run_script("x", "scripts/run.py")
    assert len(raw_rows(place / ".skills" / "skills.sqlite")) == 2


def test_two_database_objects_on_one_file_both_write(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    one, two = Database(path), Database(path)
    insert = "INSERT INTO audit (at, session, event, skill, path) VALUES ('t', ?, 'decision', 'x', 'p')"
    one.connect().execute(insert, ("one",))
    two.connect().execute(insert, ("two",))
    one.connect().execute(insert, ("one",))
    assert [r["session"] for r in raw_rows(Path(path))] == ["one", "two", "one"]
    assert [r["name"] for r in two.connect().execute("SELECT name FROM _migrations")] == ["m001_audit", "m002_ledger", "m003_ledger_labels_per_session", "m004_run_log", "m005_learned_skills"]


def test_a_database_gives_each_thread_its_own_connection(tmp_path):
    database = Database(str(tmp_path / "t.sqlite"))
    seen = []

    def worker():
        connection = database.connect()
        connection.execute("INSERT INTO audit (at, session, event, skill, path) VALUES ('t', 'w', 'run', 'x', 'p')")
        seen.append(connection)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    main = database.connect()
    assert seen[0] is not main
    assert main.execute("SELECT count(*) FROM audit").fetchone()[0] == 1


def test_two_sessions_on_one_file_like_two_kernels(place):
    first, second = new_session(place), new_session(place)
    assert first.session_id != second.session_id
    first.run_script("x", "scripts/run.py")
    second.run_script("x", "scripts/fail.py")
    first.run_script("x", "scripts/fail.py")
    assert {r["session"] for r in first.audit()} == {first.session_id}
    assert [r["path"] for r in first.audit()] == ["scripts/run.py"] * 2 + ["scripts/fail.py"] * 2
    assert [r["path"] for r in second.audit()] == ["scripts/fail.py"] * 2
    everything = first.audit(everything=True)
    assert len(everything) == 6 and everything == second.audit(everything=True)
    assert [r["session"] for r in everything] == [first.session_id] * 2 + [second.session_id] * 2 + [first.session_id] * 2
    assert everything == raw_rows(place / "audit.sqlite")


def test_a_session_that_recorded_nothing_shows_nothing(place):
    other = new_session(place)
    other.run_script("x", "scripts/run.py")
    session = new_session(place)
    assert session.audit() == []
    assert AuditView(session.audit()).text() == "no decisions or runs recorded in this session"


# --- the view ---------------------------------------------------------------------------------------------------


def test_audit_view_keeps_times_in_metadata_not_in_data(place):
    session = new_session(place)
    session.add_rule("allow", "x:scripts/*")
    session.gate().run_script(session.skill("x"), "scripts/fail.py", [], "", unattended)
    rows = session.audit()
    view = AuditView(rows)
    data = view.data()
    assert data == {"audit": [
        {"event": "decision", "skill": "x", "path": "scripts/fail.py", "digest": sha(FAIL), "decision": "allow",
         "decided_by": "allow x:scripts/*  [%skills allow]", "exit_code": None, "detail": None},
        {"event": "run", "skill": "x", "path": "scripts/fail.py", "digest": sha(FAIL), "decision": None,
         "decided_by": None, "exit_code": 4, "detail": None},
    ]}
    assert all("seconds" not in row and "at" not in row and "session" not in row and "id" not in row
               for row in data["audit"])
    bundle, metadata = view._repr_mimebundle_()
    mime = "application/vnd.skills-magic.audit+json"
    assert bundle[mime] == data
    assert metadata[mime] == {"at": [r["at"] for r in rows], "seconds": [r["seconds"] for r in rows]}
    assert metadata[mime]["seconds"][0] is None and metadata[mime]["seconds"][1] >= 0
    text = view.text()
    assert text.splitlines()[0].split() == ["event", "skill", "path", "decision", "decided", "by", "exit", "detail"]
    assert "scripts/fail.py" in text and " 4" in text
    for row in rows:
        assert row["at"] not in text and row["at"] not in bundle["text/html"]


def test_audit_view_data_is_the_same_on_every_rerun(place):
    views = []
    for _ in range(2):
        session = new_session(place)
        session.add_rule("allow", "x:scripts/*")
        session.gate().run_script(session.skill("x"), "scripts/run.py", [], "", unattended)
        views.append(AuditView(session.audit()))
    assert views[0].data() == views[1].data()
    assert views[0].text() == views[1].text()
