"""What survives a kernel restart, tried as a researcher does: notebook 04 run twice in a row (a fresh kernel each
time, `skills-magic run-notebook`) against the same database passes its own cells and `skills-magic ledger check`
both times, because the ids in its cells mean this run's entries; a run that leaves a prediction open fails the
check until someone closes it by its session's id; `%ledger sessions` / `list --all` / `N:P1` through the magics; a
database of the old schema migrates with every row as it was; and `%skills allow --save` lands in the user's own
policy file (their config folder, not the project), which the next kernel loads."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from database_files import raw_rows
from IPython.core.error import UsageError
from kernels import execute
from notebook_setup import no_input, registered_magics

from skills_magic.records import db as records_db
from skills_magic.records.db import Database
from skills_magic.records.ledger import Ledger, OpenPredictions, PredictionAlreadyJudged, UnknownPrediction

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_04 = "04-experiment-ledger.ipynb"
SESSIONS_MIME = "application/vnd.skills-magic.ledger-sessions+json"
HISTORY_MIME = "application/vnd.skills-magic.ledger-history+json"
EXIT_OK, EXIT_INVALID = 0, 1


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKILLS_MAGIC_", "ANTHROPIC_"))}
    return {**env, "PYTHONUTF8": "1", **extra}


def skills_magic(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skills_magic", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=600, check=False)


def texts(path: Path) -> list[list[str]]:
    """Each code cell's text/plain outputs and streams, as a person reads them."""
    notebook = nbformat.read(path, as_version=4)
    return [[o.get("text") or o.get("data", {}).get("text/plain", "") for o in c.get("outputs", [])]
            for c in notebook.cells if c.cell_type == "code" and "nbval-ignore-output" not in c.metadata.get("tags", [])]


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of the project folder as notebook 04 needs it: the notebook, the sample skills, the example data."""
    for folder in ("sample-skills", "examples"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    (tmp_path / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / NOTEBOOK_04, tmp_path / "notebooks" / NOTEBOOK_04)
    return tmp_path


def run_04(project: Path, output: str, notebook: str = NOTEBOOK_04) -> Path:
    result = skills_magic("run-notebook", f"notebooks/{notebook}", "--output-dir", output, cwd=project)
    assert result.returncode == EXIT_OK, result.stdout[-3000:] + result.stderr[-3000:]
    return project / output / notebook


def check(project: Path) -> subprocess.CompletedProcess:
    return skills_magic("ledger", "check", "--db", "notebooks/.scratch/ledger.sqlite", cwd=project)


# --- notebook 04, Restart & Run All twice -------------------------------------------------------------------------


@pytest.mark.needs_sandbox  # `%ledger test P1` runs the profile script
def test_notebook_04_run_twice_passes_its_cells_and_the_check_both_times(project):
    database = project / "notebooks" / ".scratch" / "ledger.sqlite"
    first = run_04(project, "run1")
    result = check(project)
    assert result.returncode == EXIT_OK and result.stdout.splitlines() == ["sci.weather-gaps: 0 open predictions"]
    session_one = raw_rows(database, "SELECT * FROM ledger_entries ORDER BY id")

    second = run_04(project, "run2")  # a fresh kernel, the same database: the cells' H1 and P1 are this run's
    result = check(project)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["sci.weather-gaps: 0 open predictions"]
    assert texts(second) == texts(first)  # the same record, cell by cell (the gate passed, V1 judged this P1)
    for executed in (first, second):
        assert skills_magic("ledger", "check", str(executed), cwd=project).returncode == EXIT_OK

    rows = raw_rows(database, "SELECT * FROM ledger_entries ORDER BY id")
    assert rows[: len(session_one)] == session_one  # the first run's entries, exactly as they were written
    sessions = [r["session"] for r in rows]
    assert len(set(sessions)) == 2 and len(rows) == 2 * len(session_one)
    labels = [[r["label"] for r in rows if r["session"] == s] for s in dict.fromkeys(sessions)]
    assert labels[0] == labels[1] and labels[0][:5] == ["H1", "P1", "P2", "P3", "O1"]
    # each run's verdicts judge that run's own predictions
    by_id = {r["id"]: r for r in rows}
    assert all(by_id[r["prediction_id"]]["session"] == r["session"] for r in rows if r["kind"] in ("verdict", "skip"))
    listed = nbformat.read(second, as_version=4).cells[-1].outputs[0]["data"][SESSIONS_MIME]
    assert [(s["session"], s["entries"], s["open"], s["current"]) for s in listed["sessions"]] == [
        (1, 10, 0, False), (2, 10, 0, True)]


@pytest.mark.needs_sandbox
def test_a_run_that_leaves_a_prediction_open_fails_the_check_until_it_is_closed_by_its_sessions_id(project):
    run_04(project, "run1")
    notebook = nbformat.read(project / "notebooks" / NOTEBOOK_04, as_version=4)
    stop = next(i for i, c in enumerate(notebook.cells) if c.source.startswith("%ledger list"))
    notebook.cells = notebook.cells[: stop + 1]  # a run stopped after its predictions: none judged
    nbformat.write(notebook, project / "notebooks" / "stopped.ipynb")
    run_04(project, "run2", "stopped.ipynb")
    result = check(project)
    assert result.returncode == EXIT_INVALID
    assert result.stdout.splitlines()[:4] == [
        "sci.weather-gaps has 3 open predictions:",
        "  2:P1: The profile shows temp_C with at least one missing reading (refuted if it reports missing: 0). "
        "(falsified by: python3 ../sample-skills/csv-profile/scripts/profile_csv.py ../examples/data/weather.csv)",
        "  2:P2: rain_mm holds only numbers and missing markers. (falsified by: the profile reports rain_mm as type text)",
        "  2:P3: The south station's file has the same gaps. (falsified by: the south station's file has no missing readings)"]

    third = run_04(project, "run3")  # the whole notebook again passes its own cells: its P1..P3 are its own
    assert texts(third)[0][-1].startswith("sci.weather-gaps: 0 entries, 0 open predictions; 3 more open in other sessions")
    assert check(project).returncode == EXIT_INVALID  # run 2's predictions are still open

    closing = nbformat.v4.new_notebook()
    closing.cells = [nbformat.v4.new_code_cell("%env SKILLS_MAGIC_DB=.scratch/ledger.sqlite\n%load_ext skills_magic\n"
                                               "%ledger use weather-gaps")]
    closing.cells += [nbformat.v4.new_code_cell(f'%ledger skip 2:P{i} --reason "run 2 was stopped"') for i in (1, 2, 3)]
    closing.cells += [nbformat.v4.new_code_cell("%ledger gate --all")]
    nbformat.write(closing, project / "notebooks" / "closing.ipynb")
    closed = run_04(project, "run4", "closing.ipynb")
    assert texts(closed)[1] == ["sci.weather-gaps S1 2:P1 skipped: run 2 was stopped"]
    assert texts(closed)[-1] == ["sci.weather-gaps: 27 entries in 4 sessions, 0 open predictions"]
    assert check(project).returncode == EXIT_OK


# --- sessions through the magics ----------------------------------------------------------------------------------


@pytest.fixture
def folder(ip, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "bundled")
    monkeypatch.setenv("SKILLS_MAGIC_DB", "ledger.sqlite")
    monkeypatch.chdir(tmp_path)
    no_input(monkeypatch)
    return tmp_path


def kernel_run(ip, lines: list[str]) -> list:
    """Lines run by a new session on the shell, as after a kernel restart; their results."""
    with registered_magics(ip):
        return [ip.run_line_magic("ledger", line) for line in lines]


PLANNED = ["use demo", "hypothesis gaps", "prediction temp has a gap --falsified-by profile --hypothesis H1"]


def test_each_kernel_numbers_its_own_entries_and_a_bare_id_means_this_sessions(ip, folder):
    kernel_run(ip, PLANNED + ['verdict P1 confirmed --evidence "1 of 4"'])
    second = kernel_run(ip, PLANNED + ['verdict P1 refuted --evidence "0 of 4"', "list", "sessions", "list --all"])
    assert second[2].entry.label == "P1" and second[3].entry.prediction == "P1" and second[3].entry.outcome == "refuted"
    assert second[4].text().splitlines()[0] == "sci.demo: 3 entries, 0 open predictions"
    assert [e["label"] for e in second[4].data()["entries"]] == ["H1", "P1", "V1"]  # this session's only
    sessions = second[5]
    assert [(s["session"], s["entries"], s["current"]) for s in sessions.data()["sessions"]] == [(1, 3, False), (2, 3, True)]
    assert sessions.text().splitlines()[0] == "sci.demo: 2 sessions; `N:P1` names session N's P1"
    history = second[6]
    assert SESSIONS_MIME in sessions._repr_mimebundle_()[0] and HISTORY_MIME in history._repr_mimebundle_()[0]
    assert history.text().splitlines()[0] == "sci.demo: 6 entries in 2 sessions, 0 open predictions"
    assert [(e["session"], e["label"]) for e in history.data()["entries"]] == [
        (1, "H1"), (1, "P1"), (1, "V1"), (2, "H1"), (2, "P1"), (2, "V1")]
    assert history.text().splitlines()[1].split() == ["session", "id", "kind", "text", "links"]


def test_a_fresh_kernel_judges_an_earlier_sessions_prediction_by_its_id(ip, folder):
    kernel_run(ip, PLANNED)  # session 1 leaves P1 open
    kernel_run(ip, PLANNED)  # session 2 too
    with registered_magics(ip):
        ip.run_line_magic("ledger", "use demo")
        gate = ip.run_line_magic("ledger", "gate")  # this session has nothing of its own open, and says what others have
        assert gate.text() == "sci.demo: 0 entries, 0 open predictions; 2 more open in other sessions (%ledger list --all)"
        with pytest.raises(UsageError, match=r"OpenPredictions: sci.demo has 2 open predictions:\n  1:P1: .*\n  2:P1: "):
            ip.run_line_magic("ledger", "gate --all")
        skip = ip.run_line_magic("ledger", 'skip 1:P1 --reason "an old run"')
        assert skip.text() == "sci.demo S1 1:P1 skipped: an old run"
        verdict = ip.run_line_magic("ledger", "verdict P1 inconclusive")  # none of its own: the newest earlier P1
        assert verdict.entry.prediction == "2:P1"
        with pytest.raises(UsageError, match="PredictionAlreadyJudged: 1:P1 already has a skip"):
            ip.run_line_magic("ledger", "verdict 1:p1 confirmed --evidence x")
        with pytest.raises(UsageError, match=r"UnknownPrediction: sci.demo has no session 9 \(it has 3"):
            ip.run_line_magic("ledger", "skip 9:P1 --reason x")
        assert ip.run_line_magic("ledger", "gate --all").text() == "sci.demo: 6 entries in 3 sessions, 0 open predictions"


# --- an old database migrates ---------------------------------------------------------------------------------------


def old_database(path: Path) -> None:
    """A file as the package wrote it before sessions numbered their own labels: the m002 schema, labels plan-wide,
    two sessions and a row without one."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)")
    for name, function in records_db.MIGRATIONS[:2]:
        assert name in ("m001_audit", "m002_ledger")
        function(connection)
        connection.execute("INSERT INTO _migrations (name) VALUES (?)", (name,))
    rows = [  # id, kind, number, label, text, hypothesis_id, prediction_id, falsified_by, outcome, evidence, session
        (1, "hypothesis", 1, "H1", "gaps", None, None, None, None, None, "kernel-a"),
        (2, "prediction", 1, "P1", "temp gap", 1, None, "profile", None, None, "kernel-a"),
        (3, "prediction", 2, "P2", "rain numeric", 1, None, "profile types", None, None, "kernel-b"),
        (4, "verdict", 1, "V1", "confirmed", None, 2, None, "confirmed", "1 of 4", "kernel-b"),
        (5, "observation", 1, "O1", "by hand", None, 3, None, None, None, None),
    ]
    for row in rows:
        connection.execute("INSERT INTO ledger_entries (id, plan, kind, number, label, text, hypothesis_id, prediction_id, "
                           "falsified_by, outcome, evidence, session, at) VALUES (?, 'sci.demo', ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                           "?, '2026-01-01T00:00:00.000000Z')", row)
    connection.close()


def test_a_database_of_the_old_schema_migrates_with_every_row_as_it_was(tmp_path):
    path = tmp_path / "old.sqlite"
    old_database(path)
    before = raw_rows(path, "SELECT * FROM ledger_entries ORDER BY id")
    # read-only, as `ledger check` reads it, the old file needs no migration
    result = skills_magic("ledger", "check", "--db", str(path), cwd=tmp_path)
    assert result.returncode == EXIT_INVALID and "  2:P2: rain numeric (falsified by: profile types)" in result.stdout

    ledger = Ledger(Database(str(path)), "kernel-c")
    assert ledger.state("demo", every_session=True).open_count == 1  # migrated on first use
    after = raw_rows(path, "SELECT * FROM ledger_entries ORDER BY id")
    assert after == [{**r, "session": r["session"] or ""} for r in before]  # same ids, labels, links, times
    assert [r["name"] for r in raw_rows(path, "SELECT name FROM _migrations")][-1] == "m005_learned_skills"
    schema = {r["name"]: r["sql"] for r in raw_rows(path, "SELECT name, sql FROM sqlite_master")}
    assert "UNIQUE (plan, session, label)" in schema["ledger_entries"] and "ledger_entries_m002" not in str(schema)
    assert {"ledger_no_replace", "ledger_no_update", "ledger_no_delete", "ledger_one_judgement_only",
            "ledger_one_judgement"} <= set(schema)

    # the old labels still resolve (each is unique in the plan), and a new session numbers its own
    assert ledger.verdict("demo", "P2", "refuted", "rain_mm is text").prediction == "2:P2"
    assert ledger.hypothesis("demo", "a new one").label == "H1"
    with pytest.raises(PredictionAlreadyJudged):
        ledger.skip("demo", "1:P1", "again")
    with pytest.raises(UnknownPrediction):
        ledger.verdict("demo", "P3", "inconclusive")
    ledger.gate("demo", every_session=True)

    # the database's own rules hold after the migration, on a plain connection too
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in ("UPDATE ledger_entries SET text = 'x'", "DELETE FROM ledger_entries WHERE id = 1",
                          "INSERT INTO ledger_entries (plan, kind, number, label, text, at, session) "
                          "VALUES ('sci.demo', 'hypothesis', 1, 'H1', 'again', 'now', 'kernel-a')",
                          "INSERT INTO ledger_entries (plan, kind, number, label, text, at, prediction_id, outcome) "
                          "VALUES ('sci.demo', 'verdict', 9, 'V9', 'inconclusive', 'now', 2, 'inconclusive')",
                          "INSERT INTO ledger_entries (plan, kind, number, label, text, at, hypothesis_id) "
                          "VALUES ('sci.demo', 'prediction', 9, 'P9', 'no check', 'now', 1)"):
            with pytest.raises(sqlite3.IntegrityError):
                raw.execute(statement)
    finally:
        raw.close()
    assert Database(str(path)).connect().execute("PRAGMA foreign_key_check").fetchall() == []
    assert len(raw_rows(path, "SELECT * FROM ledger_entries")) == 7


def test_the_gate_of_this_session_ignores_but_names_what_other_sessions_left_open(tmp_path):
    database = Database(str(tmp_path / "ledger.sqlite"))
    earlier, now = Ledger(database, "earlier"), Ledger(database, "now")
    earlier.hypothesis("demo", "h")
    earlier.prediction("demo", "p", "c", "H1")
    assert now.gate("demo").headline == "sci.demo: 0 entries, 0 open predictions; 1 more open in other sessions (%ledger list --all)"
    with pytest.raises(OpenPredictions, match="\n  P1: p"):  # one session: no number needed
        now.gate("demo", every_session=True)
    now.hypothesis("demo", "h")
    now.prediction("demo", "p", "c", "H1")
    with pytest.raises(OpenPredictions, match="sci.demo has 1 open prediction:\n  P1: p"):
        now.gate("demo")


# --- %skills allow --save: the user's own policy file, loaded by the next kernel ------------------------------------


def test_allow_save_writes_the_users_config_folder_and_the_next_kernel_loads_it(tmp_path, monkeypatch):
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    home.mkdir()
    monkeypatch.delenv("SKILLS_MAGIC_CONFIG_DIR")  # the platform's config folder, as a user has it
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    setup = "%env SKILLS_MAGIC_SOURCES=bundled\n%env SKILLS_MAGIC_DB=.skills/test.sqlite\n%load_ext skills_magic"
    execute(project, [setup, '%skills allow "csv-profile:scripts/*" --env SOME_TOKEN --save'])
    saved = home / ".config" / "skills-magic" / "skills-policy.yaml"
    assert saved.is_file() and "csv-profile:scripts/*" in saved.read_text(encoding="utf-8")
    assert not (project / "skills-policy.yaml").exists()  # nothing in the project a clone would carry
    assert not [p for p in project.rglob("*.yaml")]

    later = execute(project, [setup, "%skills policy"])  # a new kernel: a new session reads the user's file
    rules = later.cells[1].outputs[0]["data"]["application/vnd.skills-magic.policy+json"]["rules"]
    assert [(r["rule"], r["kind"], r["origin"], r["env"]) for r in rules] == [
        ("csv-profile:scripts/*", "allow", "your skills-policy.yaml", ["SOME_TOKEN"])]
