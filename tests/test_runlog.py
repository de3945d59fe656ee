"""The run log (issue 17, point 1): every `%%skill run`, verification vote, eval run and batch request is a row of the
project's SQLite file, with its tokens, its cost from the price table and its bodies masked; append-only; listed by
`%skills runs`, `skills-magic logs` and `session.runs.dataframe()`; and it never blocks a run."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from kernels import execute
from notebook_setup import notebook_folder, registered_magics

from skills_magic.errors import InvalidArgument
from skills_magic.models.prices import cost_of
from skills_magic.models.scripted import ScriptedModel
from skills_magic.notebook.views.runlog import RunEntryView, RunLogView
from skills_magic.notebook.views.runs import RunView
from skills_magic.records.db import Database
from skills_magic.records.runlog import RunLog, RunLogWarning
from skills_magic.runs.verify import VERDICT_TOOL_NAME, parse_claims
from skills_magic.session import SkillsSession

REPO = Path(__file__).resolve().parent.parent
RUNLOG_MIME = "application/vnd.skills-magic.runlog+json"
SECRET = "sk-ant-api03-" + "Q" * 40  # a key-shaped string in a tool result or an answer
ANSWER = {"text": "The file has 4 rows.", "usage": {"input_tokens": 1200, "output_tokens": 40,
                                                    "cache_read_input_tokens": 300}}
PROMPTS = """prompts:
  - {id: D1, category: direct, expected: [csv-profile], prompt: "Profile this CSV file: row count, column types and missing values."}
  - {id: N1, category: negative, expect_none: true, prompt: "Write a haiku about the sea."}
"""

pytestmark = pytest.mark.usefixtures("machine_setup_forgotten")


def vote_turns(word: str, votes: int = 3) -> list[dict]:
    return [{"when": [f"voter {n} of {votes}", word], "usage": {"input_tokens": 400 + n, "output_tokens": 30},
             "tool_use": [{"name": VERDICT_TOOL_NAME, "input": {"refuted": False, "evidence": "The quote says so.",
                                                                "confidence": "high"}}]} for n in range(1, votes + 1)]


@pytest.fixture
def session(monkeypatch, tmp_path) -> SkillsSession:
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    return SkillsSession(cwd=str(tmp_path))


def scripted(session: SkillsSession, *turns) -> ScriptedModel:
    session.model_client = ScriptedModel(list(turns))
    return session.model_client


# --- recording each kind ---------------------------------------------------------------------------------------------

def test_a_run_is_a_row_with_its_tokens_its_cost_from_the_price_table_and_its_bodies(session):
    scripted(session, ANSWER)

    result = session.run("What is in weather.csv?")
    [row] = session.runs.rows(bodies=True)

    assert row["kind"] == "run" and row["session"] == session.session_id and row["harness"] == "native"
    assert row["model"] == result.model and row["outcome"] == "end_turn" and row["error"] is None
    assert row["usage"] == {"input_tokens": 1200, "output_tokens": 40, "cache_read_input_tokens": 300,
                            "cache_creation_input_tokens": 0}
    assert row["cost_usd"] == pytest.approx(cost_of(result.model, result.usage)) and row["cost_usd"] > 0
    assert row["reported_cost_usd"] is None and row["seconds"] == pytest.approx(result.seconds)
    assert row["data"]["final_text"] == "The file has 4 rows." and row["trace"][0]["stage"] == "discover"
    assert [r["messages"][0]["role"] for r in row["requests"]] == ["user"]
    assert row["responses"][0]["content"][0]["text"] == "The file has 4 rows."


def test_each_vote_is_a_row_with_its_tokens_and_cost(session):
    scripted(session, *vote_turns("four days"))

    session.verify(parse_claims([{"claim": "The file covers four days", "quote": "2026-11-01 .. 2026-11-04"}]))
    rows = session.runs.rows(kind="vote")

    assert len(rows) == 3 and {r["outcome"] for r in rows} == {"upheld"}
    assert sorted(r["usage"]["input_tokens"] for r in rows) == [401, 402, 403]
    assert all(r["cost_usd"] == pytest.approx(cost_of(r["model"], r["usage"])) and r["cost_usd"] > 0 for r in rows)
    assert rows[0]["data"]["claim"] == "The file covers four days"
    assert session.runs.get(rows[0]["id"])["requests"][0]["tool_choice"]["name"] == VERDICT_TOOL_NAME


def test_each_eval_run_is_a_row_labelled_with_its_report(session, tmp_path):
    (tmp_path / "prompts.yaml").write_text(PROMPTS, encoding="utf-8")
    session.choose_model("keywords")

    [report] = session.eval("prompts.yaml", runs=2)
    rows = session.runs.rows(kind="eval")

    assert len(rows) == 4 and {r["label"] for r in rows} == {report.label}
    assert sorted((r["data"]["item"], r["data"]["run"]) for r in rows) == [("D1", 1), ("D1", 2), ("N1", 1), ("N1", 2)]
    assert all(r["cost_usd"] == cost_of(r["model"], r["usage"]) for r in rows)
    assert [r["data"]["counted"] for r in rows if r["data"]["item"] == "D1"] == [["csv-profile"]] * 2
    assert session.runs.latest("eval", report.label)["id"] == rows[0]["id"]


def test_each_batch_request_is_a_row_at_the_batch_price(tmp_path, sample_skills):
    from test_batch import FakeBatches
    from test_evals_batch import answers

    from skills_magic.runs.batch_evals import run_batch_eval
    from skills_magic.runs.evals import EvalItem
    from skills_magic.skills.catalog import Catalog, Source

    skills = list(Catalog([Source("bundled", str(sample_skills))]).scan().skills)
    fake = FakeBatches(lambda cid, params, number: answers(cid, params, number, flaky=()), polls_before_end=0)
    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")

    run_batch_eval(skills, fake.model(), "claude-sonnet-5-5", [EvalItem("D1", "Profile this CSV file.", ("csv-profile",))],
                   runs=2, poll_seconds=0, sleep=lambda s: None, run_log=log)
    rows = log.rows(kind="batch", bodies=True)

    assert len(rows) == 2 and {r["label"] for r in rows} == {"plain (batch)"}
    assert all(r["cost_usd"] == pytest.approx(cost_of("claude-sonnet-5-5", r["usage"], batch=True)) and r["cost_usd"] > 0
               for r in rows)
    assert rows[0]["tool_calls"] == [{"name": "activate_skill", "input": {"name": "csv-profile"}}]
    assert rows[0]["data"]["batch_ids"] == ["msgbatch_fake_0001"] and rows[0]["requests"][0]["model"] == "claude-sonnet-5-5"


def test_a_key_in_a_body_is_masked_in_the_log(session, monkeypatch):
    monkeypatch.setenv("LAB_API_TOKEN", "lab-token-0123456789")
    scripted(session, {"text": f"Your key is {SECRET}; the lab's is lab-token-0123456789.", "usage": ANSWER["usage"]})

    session.run(f"Check {SECRET}")
    stored = json.dumps([list(r) for r in sqlite3.connect(session.database.path).execute("SELECT * FROM runs")])

    assert SECRET not in stored and "lab-token-0123456789" not in stored
    assert "***" in stored and "Your key is ***" in stored


def test_logging_turned_off_records_nothing(session):
    scripted(session, ANSWER)
    session.runs.enabled = False

    result = session.run("What is in weather.csv?")

    assert result.final_text == "The file has 4 rows." and session.runs.rows() == []


def test_a_locked_database_is_one_warning_and_the_run_returns(session):
    scripted(session, ANSWER, ANSWER)
    session.runs.rows()  # the file exists and is migrated: only the lock stands in the way
    holder = sqlite3.connect(session.database.path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = session.run("What is in weather.csv?")
            second = session.run("And now?")
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    assert first.final_text == second.final_text == "The file has 4 rows."
    said = [str(w.message) for w in caught if issubclass(w.category, RunLogWarning)]
    assert len(said) == 1 and "locked" in said[0]  # said once, not at every run
    assert session.runs.rows() == []


def test_a_broken_file_is_a_warning_and_the_run_returns(monkeypatch, tmp_path):
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"this is not a database" * 100)
    notebook_folder(monkeypatch, tmp_path, db="broken.sqlite", sources="bundled")
    session = SkillsSession(cwd=str(tmp_path))
    scripted(session, ANSWER)

    with pytest.warns(RunLogWarning, match="broken.sqlite"):
        result = session.run("What is in weather.csv?")

    assert result.final_text == "The file has 4 rows."


def test_the_log_is_append_only(session):
    scripted(session, ANSWER)
    session.run("What is in weather.csv?")
    db = sqlite3.connect(session.database.path)

    for statement in ("UPDATE runs SET cost_usd = 0", "DELETE FROM runs",
                      "INSERT OR REPLACE INTO runs (id, at, session, kind) VALUES (1, 'x', 'y', 'run')"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            db.execute(statement)
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_rows_filter_by_kind_skill_label_date_and_limit(tmp_path):
    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")
    for kind, skill, label in [("run", "csv-profile", None), ("vote", None, None), ("eval", None, "plain"),
                               ("eval", None, "forced"), ("run", "lab-notebook-entry", None)]:
        log.record(kind, skill=skill, label=label, usage={"input_tokens": 10})

    assert [r["kind"] for r in log.rows()] == ["run", "eval", "eval", "vote", "run"]  # newest first
    assert [r["skill"] for r in log.rows(kind="run")] == ["lab-notebook-entry", "csv-profile"]
    assert [r["skill"] for r in log.rows(skill="csv-profile")] == ["csv-profile"]
    assert [r["label"] for r in log.rows(label="plain")] == ["plain"]
    assert len(log.rows(limit=2)) == 2 and log.rows(since="2999-01-01") == []
    assert len(log.rows(since="2000-01-01")) == 5 and len(log.rows(since="2000-01-01T10:00")) == 5
    assert log.latest("eval", "forced")["label"] == "forced" and log.latest("eval", "none") is None
    assert log.get(999) is None and "requests" not in log.rows()[0]
    with pytest.raises(InvalidArgument, match="--since"):
        log.rows(since="last tuesday")


def test_a_lone_surrogate_a_model_sent_is_stored_and_read_back(tmp_path):
    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")

    with warnings.catch_warnings():
        warnings.simplefilter("error", RunLogWarning)
        run_id = log.record("run", error="bad \ud800 byte", tool_calls=[{"name": "t", "input": {"x": "\udce9"}}])

    row = log.get(run_id)
    assert row["tool_calls"][0]["input"] == {"x": "\udce9"} and row["error"] == "bad \\ud800 byte"


def test_a_row_of_an_unknown_kind_is_a_warning_never_an_error(tmp_path):
    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")

    with pytest.warns(RunLogWarning, match="run, vote, eval, batch"):
        assert log.record("banana") is None


def test_the_dataframe_has_a_row_per_record(session):
    scripted(session, ANSWER)
    session.run("What is in weather.csv?")

    frame = session.runs.dataframe()

    assert list(frame["kind"]) == ["run"] and frame["input_tokens"].iloc[0] == 1200
    assert str(frame["at"].dt.tz) == "UTC" and frame.index.name == "id"


# --- the front ends --------------------------------------------------------------------------------------------------

def test_skills_runs_lists_rows_and_shows_one_as_its_view(ip, monkeypatch, tmp_path):
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    with registered_magics(ip) as magics:
        magics.session.model_client = ScriptedModel([ANSWER, *vote_turns("four days")])
        ip.run_cell_magic("skill", "run", "What is in weather.csv?")
        magics.session.verify(parse_claims([{"claim": "The file covers four days"}]))

        listed = ip.run_line_magic("skills", "runs --limit 10")
        votes = ip.run_line_magic("skills", "runs --kind vote")
        run_id = next(i for i, r in zip(listed.metadata()["ids"], listed.rows, strict=True) if r["kind"] == "run")
        shown = ip.run_line_magic("skills", f"runs show {run_id}")
        vote = ip.run_line_magic("skills", f"runs show {votes.rows[0]['id']}")

    assert isinstance(listed, RunLogView) and [r["kind"] for r in listed.rows].count("vote") == 3
    bundle, meta = listed._repr_mimebundle_()
    assert "id" not in bundle[RUNLOG_MIME]["runs"][0] and "at" not in bundle[RUNLOG_MIME]["runs"][0]
    assert meta[RUNLOG_MIME]["ids"] == [r["id"] for r in listed.rows]
    assert "tokens" in listed.text() and "$" in listed.text() and "end_turn" in listed.text()
    assert len(votes.rows) == 3
    assert isinstance(shown, RunView) and shown.result.final_text == "The file has 4 rows."
    assert shown.data()["usage"]["input_tokens"] == 1200 and "load trace" in shown.text()
    assert shown.result.priced_usd == pytest.approx(cost_of(shown.result.model, shown.result.usage))
    assert isinstance(vote, RunEntryView) and "upheld" in vote.text() and "id" not in vote.data()


def test_skills_runs_show_of_an_unknown_id_is_one_line(ip, monkeypatch, tmp_path):
    from IPython.core.error import UsageError

    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    with registered_magics(ip):
        with pytest.raises(UsageError, match="no row 42"):
            ip.run_line_magic("skills", "runs show 42")
        with pytest.raises(UsageError, match="runs show ID"):
            ip.run_line_magic("skills", "runs shw 42")


def logs(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skills_magic", "logs", *args], cwd=folder, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ), check=False)


def test_skills_magic_logs_json_prints_the_rows(session, tmp_path):
    scripted(session, ANSWER)
    session.run("What is in weather.csv?")

    found = logs(tmp_path, "--json")
    text = logs(tmp_path)
    refused = logs(tmp_path, "--since", "someday")

    assert found.returncode == 0, found.stderr
    [row] = json.loads(found.stdout)
    assert row["kind"] == "run" and row["usage"]["input_tokens"] == 1200
    assert row["cost_usd"] == pytest.approx(cost_of(row["model"], row["usage"]))
    assert text.returncode == 0 and "end_turn" in text.stdout and "1 row" in text.stdout
    assert refused.returncode == 2 and "--since" in refused.stderr


# --- a real kernel -----------------------------------------------------------------------------------------------------

TWO_RUNS = {"turns": [ANSWER, {"text": "Four days.", "usage": {"input_tokens": 900, "output_tokens": 20}}]}


def test_a_notebooks_runs_vote_and_eval_are_in_the_log_a_second_kernel_and_the_cli_see(monkeypatch, tmp_path):
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    (tmp_path / "runs.json").write_text(json.dumps(TWO_RUNS), encoding="utf-8")
    (tmp_path / "votes.json").write_text(json.dumps({"turns": vote_turns("four days")}), encoding="utf-8")
    (tmp_path / "prompts.yaml").write_text(PROMPTS, encoding="utf-8")

    execute(tmp_path, [
        "%load_ext skills_magic",
        "%skills model scripted runs.json",
        "%%skill run\nWhat is in weather.csv?",
        "%%skill run\nHow many days?",
        "%skills model scripted votes.json",
        "%%skill verify\n- claim: The file covers four days\n  quote: 2026-11-01 .. 2026-11-04",
        "%skills model keywords",
        "%skills eval prompts.yaml --runs 1",
    ])
    found = logs(tmp_path, "--json", "--limit", "0")
    second = execute(tmp_path, ["%load_ext skills_magic", "%skills runs --limit 100"])

    assert found.returncode == 0, found.stderr
    rows = json.loads(found.stdout)
    assert sorted(r["kind"] for r in rows) == ["eval", "eval", "run", "run", "vote", "vote", "vote"]
    for row in rows:
        assert row["cost_usd"] == pytest.approx(cost_of(row["model"], row["usage"]))
        assert set(row["usage"]) == {"input_tokens", "output_tokens", "cache_read_input_tokens",
                                     "cache_creation_input_tokens"}
    assert sorted(r["usage"]["input_tokens"] for r in rows if r["kind"] == "run") == [900, 1200]
    assert all(r["cost_usd"] > 0 for r in rows if r["kind"] in ("run", "vote"))
    assert len({r["session"] for r in rows}) == 1
    [listed] = [o for o in second.cells[1].outputs if RUNLOG_MIME in o.get("data", {})]
    assert listed["metadata"][RUNLOG_MIME]["ids"] == [r["id"] for r in rows]  # the second kernel sees the same rows
    assert [r["kind"] for r in listed["data"][RUNLOG_MIME]["runs"]] == [r["kind"] for r in rows]
