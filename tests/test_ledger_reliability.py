"""The ledger under real processes: concurrent appends, racing verdicts, a writer killed mid-append, and the rules the
database itself enforces (append-only triggers, CHECK constraints, one judgement per prediction).

No test sleeps: children report over pipes, and racing children are released together by a shared barrier.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from skills_magic.records.db import Database
from skills_magic.records.ledger import Ledger, PredictionAlreadyJudged

PLAN = "sci.demo"
LABEL = re.compile(r"([HPVOCS])([1-9][0-9]*)")
PREFIX = {"hypothesis": "H", "prediction": "P", "verdict": "V", "observation": "O", "conclusion": "C", "skip": "S"}
SAFETY_SECONDS = 120  # only so that a broken child cannot hang the suite; never a threshold the test measures

APPENDER = r"""
import sys
from skills_magic.records.db import Database
from skills_magic.records.ledger import Ledger

path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ledger = Ledger(Database(path), tag)
ledger.db  # connect (and migrate) before the start signal
print("ready", flush=True)
sys.stdin.readline()  # the parent releases both writers at once
kinds = ["hypothesis", "observation", "conclusion"]
for i in range(n):
    getattr(ledger, kinds[i % 3])("demo", f"{tag} {i}")
print("done", flush=True)
"""

LOOPER = r"""
import sys
from skills_magic.records.db import Database
from skills_magic.records.ledger import Ledger

ledger = Ledger(Database(sys.argv[1]), "looper")
i = 0
while i < 10_000_000:  # killed long before
    i += 1
    h = ledger.hypothesis("demo", f"hypothesis {i}")
    p = ledger.prediction("demo", f"prediction {i}", f"check {i}", h.label)
    ledger.verdict("demo", p.label, "confirmed", f"evidence {i}")
    print(i, flush=True)
"""


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def migrated(path: Path) -> Path:
    """Create and migrate the file once, then close it: the children meet an existing ledger."""
    Database(str(path)).connect().close()
    return path


def raw(path: Path) -> sqlite3.Connection:
    """A plain connection, as any other program would open the file (foreign keys off: the sqlite3 default)."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.row_factory = sqlite3.Row
    return connection


def rows(path: Path) -> list[sqlite3.Row]:
    connection = raw(path)
    try:
        return connection.execute("SELECT * FROM ledger_entries ORDER BY id").fetchall()
    finally:
        connection.close()


def assert_labels_unique_and_contiguous(all_rows) -> Counter:
    """Per plan, session and kind (labels are numbered within a session), the labels are exactly 1..n, once each,
    and match the number column. Returns the count per plan and kind, every session together."""
    by_kind: dict[tuple[str, str, str], list[int]] = {}
    for r in all_rows:
        match = LABEL.fullmatch(r["label"])
        assert match and match.group(1) == PREFIX[r["kind"]] and int(match.group(2)) == r["number"], dict(r)
        by_kind.setdefault((r["plan"], r["session"], r["kind"]), []).append(r["number"])
    for key, numbers in by_kind.items():
        assert sorted(numbers) == list(range(1, len(numbers) + 1)), key
    counts: Counter = Counter()
    for (plan, _, kind), numbers in by_kind.items():
        counts[(plan, kind)] += len(numbers)
    return counts


def start(path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(path), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=SAFETY_SECONDS)
    assert process.returncode == 0, err
    return out


# --- concurrent appends -------------------------------------------------------------------------------------------


def test_two_processes_appending_a_thousand_entries_each_lose_nothing(tmp_path):
    path = migrated(tmp_path / "ledger.sqlite")
    appender = script(tmp_path, "appender.py", APPENDER)
    writers = [start(appender, str(path), tag, "1000") for tag in ("a", "b")]
    for w in writers:
        assert w.stdout.readline().strip() == "ready"
    for w in writers:  # both are waiting on their stdin: release them together
        w.stdin.write("go\n")
        w.stdin.flush()
    for w in writers:
        assert finish(w).strip() == "done"
    found = rows(path)
    assert len(found) == 2000
    assert {(r["session"], r["text"]) for r in found} == {(t, f"{t} {i}") for t in "ab" for i in range(1000)}
    counts = assert_labels_unique_and_contiguous(found)
    assert counts == {(PLAN, "hypothesis"): 668, (PLAN, "observation"): 666, (PLAN, "conclusion"): 666}
    assert len({(r["session"], r["label"]) for r in found}) == 2000  # each session numbers its own
    check = raw(path)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_threads_of_one_process_each_with_its_own_connection_lose_nothing(tmp_path):
    ledger = Ledger(Database(str(tmp_path / "ledger.sqlite")), "threads")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def write(tag: int) -> None:
        try:
            barrier.wait(SAFETY_SECONDS)
            for i in range(250):
                ledger.hypothesis("demo", f"{tag}-{i}")
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SAFETY_SECONDS)
    assert errors == []
    found = rows(tmp_path / "ledger.sqlite")
    assert len(found) == 1000
    assert assert_labels_unique_and_contiguous(found) == {(PLAN, "hypothesis"): 1000}


def test_opening_a_new_file_waits_for_a_writer_instead_of_failing_at_once(tmp_path, monkeypatch):
    path = tmp_path / "fresh.sqlite"
    writer = sqlite3.connect(path, isolation_level=None)  # another kernel, in the middle of creating the file
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE other_kernels_work (x)")
    started: list[str] = []
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):
        connection = real_connect(*args, **kwargs)

        def traced(statement: str) -> None:
            started.append(statement)
            if len(started) == 2 and writer.in_transaction:
                writer.execute("COMMIT")  # the writer finishes once the opener has met its lock (and tries again)

        connection.set_trace_callback(traced)
        return connection

    # no clock involved: the writer lets go exactly when the opener starts its second statement, i.e. after its first
    # attempt met the lock; the opener's code as it is fails on that first attempt, before any wait
    monkeypatch.setattr(sqlite3, "connect", connect)
    try:
        connection = Database(str(path)).connect()
    finally:
        monkeypatch.undo()
        if writer.in_transaction:
            writer.execute("ROLLBACK")
        writer.close()
    assert started[0].upper().startswith("PRAGMA JOURNAL_MODE")
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("SELECT COUNT(*) FROM ledger_entries").fetchone()[0] == 0


# --- racing verdicts ----------------------------------------------------------------------------------------------


ROUNDS = 20


def judge_in_rounds(path: str, worker: int, barrier, results) -> None:
    """Spawned twice: for each round, wait for the other worker, then both judge the same prediction at once."""
    ledger = Ledger(Database(path), f"judge-{worker}")
    ledger.db.execute("SELECT 1")  # connected before the first round
    for round_ in range(1, ROUNDS + 1):
        barrier.wait(SAFETY_SECONDS)
        try:
            if round_ % 2 == 0 and worker == 1:  # even rounds: a skip races a verdict
                ledger.skip("demo", f"P{round_}", f"worker {worker} skips")
            else:
                ledger.verdict("demo", f"P{round_}", "confirmed" if worker == 0 else "refuted", f"worker {worker} saw it")
            results.put((round_, worker, "won"))
        except PredictionAlreadyJudged:
            results.put((round_, worker, "PredictionAlreadyJudged"))
        except Exception as error:  # noqa: BLE001 (reported to the parent, which fails the test)
            results.put((round_, worker, f"{type(error).__name__}: {error}"))


def test_two_processes_judging_the_same_prediction_at_once_exactly_one_wins(tmp_path):
    path = migrated(tmp_path / "ledger.sqlite")
    ledger = Ledger(Database(str(path)))
    ledger.hypothesis("demo", "h")
    for i in range(1, ROUNDS + 1):
        ledger.prediction("demo", f"prediction {i}", f"check {i}", "H1")
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(2), context.Queue()
    workers = [context.Process(target=judge_in_rounds, args=(str(path), w, barrier, results)) for w in (0, 1)]
    for w in workers:
        w.start()
    outcomes = [results.get(timeout=SAFETY_SECONDS) for _ in range(2 * ROUNDS)]
    for w in workers:
        w.join(SAFETY_SECONDS)
        assert w.exitcode == 0
    by_round: dict[int, list[str]] = {}
    for round_, _, outcome in outcomes:
        by_round.setdefault(round_, []).append(outcome)
    for round_ in range(1, ROUNDS + 1):
        assert sorted(by_round[round_]) == ["PredictionAlreadyJudged", "won"], (round_, by_round[round_])
    found = rows(path)
    judgements = Counter(r["prediction_id"] for r in found if r["kind"] in ("verdict", "skip"))
    predictions = {r["id"] for r in found if r["kind"] == "prediction"}
    assert set(judgements) == predictions and set(judgements.values()) == {1}  # exactly one per prediction
    assert assert_labels_unique_and_contiguous(found)[(PLAN, "prediction")] == ROUNDS
    winners = Counter(worker for _, worker, outcome in outcomes if outcome == "won")
    assert sum(winners.values()) == ROUNDS
    assert ledger.state("demo").open_count == 0


# --- a writer killed mid-append -----------------------------------------------------------------------------------


def test_a_writer_killed_mid_append_leaves_a_sound_file(tmp_path):
    path = tmp_path / "ledger.sqlite"
    looper = script(tmp_path, "looper.py", LOOPER)
    hypotheses = 0
    for kill in range(3):  # three writers killed in turn, each continuing the same file
        child = start(looper, str(path))
        done = 0
        while done < 100:  # bounded: the child prints one line per completed iteration
            line = child.stdout.readline()
            assert line, child.stderr.read()
            done = int(line)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(SAFETY_SECONDS)
        assert child.returncode == -signal.SIGKILL
        for stream in (child.stdin, child.stdout, child.stderr):
            stream.close()

        connection = raw(path)
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        connection.close()
        found = rows(path)
        counts = assert_labels_unique_and_contiguous(found)
        # every iteration the child reported had been committed before it printed
        assert counts[(PLAN, "hypothesis")] >= hypotheses + done
        for r in found:
            assert all(r[c] is not None for c in ("plan", "kind", "number", "label", "text", "at")), dict(r)
            assert r["text"].strip() and r["plan"] == PLAN
            if r["kind"] == "prediction":
                assert r["hypothesis_id"] is not None and r["falsified_by"].startswith("check ")
            if r["kind"] == "verdict":
                assert r["prediction_id"] is not None and r["outcome"] == "confirmed" and r["evidence"].startswith("evidence ")

        ledger = Ledger(Database(str(path)), "after")
        state = ledger.state("demo", all_open=True)
        assert state.open_count <= 1  # only the iteration the kill interrupted may have left a prediction open
        for p in state.open:
            ledger.skip("demo", p.label, "its writer was killed")
        entry = ledger.hypothesis("demo", "after the kill")  # a new writer carries on after the killed one
        assert entry.label == f"H{kill + 1}"  # its session's own numbering (the looper's continues its own: above)
        hypotheses = counts[(PLAN, "hypothesis")] + 1
        assert ledger.gate("demo").open_count == 0


# --- what the database itself refuses -----------------------------------------------------------------------------


@pytest.fixture
def filled(tmp_path) -> Path:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(Database(str(path)), "s")
    ledger.hypothesis("demo", "h")
    ledger.prediction("demo", "p1", "c1", "H1")
    ledger.prediction("demo", "p2", "c2", "H1")
    ledger.verdict("demo", "P1", "confirmed", "seen")
    return path


@pytest.mark.parametrize("statement", [
    "UPDATE ledger_entries SET text = 'rewritten' WHERE label = 'H1'",
    "UPDATE ledger_entries SET outcome = 'refuted' WHERE kind = 'verdict'",
    "UPDATE ledger_entries SET evidence = NULL",
    "DELETE FROM ledger_entries WHERE label = 'V1'",
    "DELETE FROM ledger_entries",
    ("INSERT INTO ledger_entries (id, plan, kind, number, label, text, at) VALUES (1, 'sci.demo', 'hypothesis', 1, 'H1', "
     "'replaced', 'now') ON CONFLICT (id) DO UPDATE SET text = excluded.text"),
])
def test_update_and_delete_fail_in_the_database_itself(filled, statement):
    before = [dict(r) for r in rows(filled)]
    connection = raw(filled)
    with pytest.raises(sqlite3.IntegrityError, match="append-only|UNIQUE"):
        connection.execute(statement)
    connection.close()
    assert [dict(r) for r in rows(filled)] == before


@pytest.mark.parametrize("verb", ["INSERT OR REPLACE", "REPLACE"])
def test_replace_cannot_rewrite_an_entry(filled, verb):
    before = [dict(r) for r in rows(filled)]
    connection = raw(filled)
    try:
        with pytest.raises(sqlite3.IntegrityError):
            connection.execute(f"{verb} INTO ledger_entries (id, plan, kind, number, label, text, at, prediction_id, "
                               "outcome, evidence) VALUES (4, 'sci.demo', 'verdict', 1, 'V1', 'refuted', 'now', 2, "
                               "'refuted', 'forged')")
    finally:
        assert [dict(r) for r in rows(filled)] == before, "the verdict V1 was rewritten"
        connection.close()


def test_the_triggers_hold_for_the_packages_own_connection_too(filled):
    connection = Database(str(filled)).connect()
    with pytest.raises(sqlite3.IntegrityError, match="the ledger is append-only"):
        connection.execute("UPDATE ledger_entries SET text = 'x'")
    with pytest.raises(sqlite3.IntegrityError, match="the ledger is append-only"):
        connection.execute("DELETE FROM ledger_entries")
    assert len(rows(filled)) == 4


def insert(path: Path, **columns) -> None:
    values = {"plan": PLAN, "at": "2026-01-01T00:00:00.000000Z", **columns}
    connection = raw(path)
    try:
        connection.execute(f"INSERT INTO ledger_entries ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                           list(values.values()))
    finally:
        connection.close()


def entry(kind: str, label: str, text: str | None = "t", **extra) -> dict:
    """The columns of one raw row (number 9 unless given); text=None leaves the text out."""
    columns = {"kind": kind, "number": extra.pop("number", 9), "label": label, **extra}
    return columns if text is None else {**columns, "text": text}


# ids in `filled`: 1 H1, 2 P1, 3 P2, 4 V1 (judges P1)
REFUSED = {
    "prediction-without-hypothesis": entry("prediction", "P9", falsified_by="c"),
    "prediction-with-blank-falsifier": entry("prediction", "P9", falsified_by="  ", hypothesis_id=1),
    "prediction-with-empty-falsifier": entry("prediction", "P9", falsified_by="", hypothesis_id=1),
    "confirmed-with-blank-evidence": entry("verdict", "V9", "confirmed", outcome="confirmed", evidence=" ", prediction_id=3),
    "refuted-with-empty-evidence": entry("verdict", "V9", "refuted", outcome="refuted", evidence="", prediction_id=3),
    "verdict-without-outcome": entry("verdict", "V9", evidence="e", prediction_id=3),
    "verdict-with-unknown-outcome": entry("verdict", "V9", outcome="maybe", evidence="e", prediction_id=3),
    "verdict-without-prediction": entry("verdict", "V9", outcome="inconclusive"),
    "skip-without-prediction": entry("skip", "S9", "reason"),
    "second-verdict": entry("verdict", "V9", "refuted", outcome="refuted", evidence="e", prediction_id=2),
    "skip-after-verdict": entry("skip", "S9", "reason", prediction_id=2),
    "unknown-kind": entry("note", "N9"),
    "blank-text": entry("hypothesis", "H9", "   "),
    "missing-text": entry("hypothesis", "H9", None),
    "missing-at": entry("hypothesis", "H9", at=None),
    "duplicate-label": entry("hypothesis", "H1", "again", number=1, session="s"),  # labels are per session: the same one
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_inserts_that_break_the_rules_are_refused_by_the_database(filled, case):
    before = len(rows(filled))
    with pytest.raises(sqlite3.IntegrityError):
        insert(filled, **REFUSED[case])
    assert len(rows(filled)) == before


def test_two_judgements_race_through_raw_sql_only_one_lands(filled):
    insert(filled, kind="skip", number=1, label="S1", text="dropped", prediction_id=3)  # P2: the first is fine
    with pytest.raises(sqlite3.IntegrityError, match="prediction already judged|ledger_entries.prediction_id"):
        insert(filled, kind="verdict", number=2, label="V2", text="inconclusive", outcome="inconclusive", prediction_id=3)


def test_a_well_formed_raw_insert_is_accepted(filled):
    insert(filled, kind="verdict", number=2, label="V2", text="inconclusive", outcome="inconclusive", prediction_id=3)
    assert Ledger(Database(str(filled))).state("demo").open_count == 0


def test_a_link_to_a_missing_entry_is_refused_with_foreign_keys_on(filled):
    connection = Database(str(filled)).connect()  # the package's connections turn foreign keys on
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        connection.execute("INSERT INTO ledger_entries (plan, kind, number, label, text, at, prediction_id) "
                           "VALUES ('sci.demo', 'observation', 1, 'O1', 't', 'now', 999)")


@pytest.mark.parametrize("case", ["prediction-with-null-falsifier", "confirmed-with-null-evidence", "refuted-with-null-evidence"])
def test_null_falsifier_or_null_evidence_is_refused_by_the_database(filled, case):
    columns = {
        "prediction-with-null-falsifier": entry("prediction", "P9", hypothesis_id=1),
        "confirmed-with-null-evidence": entry("verdict", "V9", "confirmed", outcome="confirmed", prediction_id=3),
        "refuted-with-null-evidence": entry("verdict", "V9", "refuted", outcome="refuted", prediction_id=3),
    }[case]
    with pytest.raises(sqlite3.IntegrityError):
        insert(filled, **columns)


def test_the_file_is_in_wal_mode_with_a_busy_timeout(filled):
    connection = Database(str(filled)).connect()
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert connection.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    assert connection.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    index = raw(filled).execute("SELECT sql FROM sqlite_master WHERE name = 'ledger_one_judgement'").fetchone()[0]
    assert "UNIQUE" in index and "prediction_id" in index


def test_the_database_location_follows_skills_magic_db(tmp_path, monkeypatch):
    from skills_magic.records.db import resolve_path

    monkeypatch.setenv("SKILLS_MAGIC_DB", "elsewhere/x.sqlite")
    assert resolve_path(str(tmp_path)) == str(tmp_path / "elsewhere" / "x.sqlite")
    monkeypatch.delenv("SKILLS_MAGIC_DB")
    assert resolve_path(str(tmp_path)) == str(tmp_path / ".skills" / "skills.sqlite")
