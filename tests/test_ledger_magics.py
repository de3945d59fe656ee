"""`%ledger` through a real IPython shell: every action, list and gate, the cell form, quoting, named errors as
one-line UsageErrors, the views' mime bundles, and `%ledger model on` offering the `experiment` tool to a run."""

from __future__ import annotations

import json
import re

import pytest
from IPython.core.error import UsageError
from database_files import entry_count
from notebook_setup import no_input, register_magics, registered_magics

from skills_magic.notebook.views import LedgerEntryView, LedgerStateView, ModelView, RunView

LEDGER_MIME = "application/vnd.skills-magic.ledger+json"
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
TURNS = """turns:
  - tool_use:
      - name: experiment
        input: {action: hypothesis, text: "The model's own hypothesis"}
  - tool_use:
      - name: experiment
        input: {action: verdict, prediction: P1, outcome: confirmed}
  - text: Recorded what I could.
"""


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "bundled")
    monkeypatch.setenv("SKILLS_MAGIC_DB", "ledger.sqlite")  # relative to the session's folder: tmp_path
    monkeypatch.setenv("SKILLS_MAGIC_LOCK", str(tmp_path / "skills.lock"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("SKILLS_MAGIC_MODEL", raising=False)
    monkeypatch.chdir(tmp_path)
    no_input(monkeypatch, EOFError("nobody at the notebook"))
    (tmp_path / "turns.yaml").write_text(TURNS, encoding="utf-8")
    with registered_magics(ip) as instance:
        yield instance


def ledger(ip, line: str, cell: str | None = None):
    return ip.run_line_magic("ledger", line) if cell is None else ip.run_cell_magic("ledger", line, cell)


def refused(ip, line: str, cell: str | None = None) -> str:
    with pytest.raises(UsageError) as error:
        ledger(ip, line, cell)
    return str(error.value)


def rows(tmp_path) -> int:
    return entry_count(tmp_path / "ledger.sqlite")


def planned(ip) -> None:
    """sci.demo with H1 and two predictions under it."""
    ledger(ip, "use demo")
    ledger(ip, "hypothesis The north station's file has gaps")
    ledger(ip, 'prediction temp_C has a missing reading --falsified-by "python3 profile.py weather.csv" --hypothesis H1')
    ledger(ip, 'prediction "rain_mm  is numeric" --falsified-by "profile reports rain_mm as text" --hypothesis H1')


# --- use and each action --------------------------------------------------------------------------------------------


def test_use_picks_the_plan_and_shows_its_state(ip, magics):
    view = ledger(ip, "use demo")
    assert isinstance(view, LedgerStateView) and magics.session.plan == "sci.demo"
    assert view.text() == "sci.demo: 0 entries, 0 open predictions"
    assert ledger(ip, "use sci.other").state.plan == "sci.other"


def test_each_action_records_an_entry_and_shows_it(ip, magics, tmp_path):
    ledger(ip, "use demo")
    views = [
        ledger(ip, "hypothesis The north station's file has gaps"),
        ledger(ip, 'prediction temp_C has a missing reading --falsified-by "python3 profile.py weather.csv" --hypothesis H1'),
        ledger(ip, 'prediction rain is numeric --hypothesis h1 --falsified-by "profile says text"'),
        ledger(ip, 'observation --prediction P1 "profile: temp_C missing 1 of 4"'),
        ledger(ip, 'verdict P1 confirmed --evidence "O1: 1 of 4 missing"'),
        ledger(ip, "verdict p2 inconclusive"),
        ledger(ip, 'prediction a third --falsified-by "x" --hypothesis H1'),
        ledger(ip, 'skip P3 --reason "no south station file"'),
        ledger(ip, "conclusion Not ready for a monthly mean"),
    ]
    assert all(isinstance(v, LedgerEntryView) for v in views)
    assert [v.text() for v in views] == [
        "sci.demo H1 The north station's file has gaps",
        "sci.demo P1 temp_C has a missing reading  (falsified by: python3 profile.py weather.csv; under H1)",
        "sci.demo P2 rain is numeric  (falsified by: profile says text; under H1)",
        "sci.demo O1 [P1] profile: temp_C missing 1 of 4",
        "sci.demo V1 P1 confirmed; evidence: O1: 1 of 4 missing",
        "sci.demo V2 P2 inconclusive",
        "sci.demo P3 a third  (falsified by: x; under H1)",
        "sci.demo S1 P3 skipped: no south station file",
        "sci.demo C1 Not ready for a monthly mean",
    ]
    assert views[1].data() == {"entries": [{"plan": "sci.demo", "kind": "prediction", "label": "P1",
                                            "text": "temp_C has a missing reading", "hypothesis": "H1",
                                            "falsified_by": "python3 profile.py weather.csv"}]}
    assert rows(tmp_path) == 9


def test_list_shows_the_headline_and_a_table(ip, magics):
    planned(ip)
    ledger(ip, 'verdict P1 refuted --evidence "no gaps at all"')
    view = ledger(ip, "list")
    lines = view.text().splitlines()
    assert lines[0] == "sci.demo: 4 entries, 1 open prediction"
    assert lines[1].split() == ["id", "kind", "text", "links"]
    assert lines[2].split()[:2] == ["H1", "hypothesis"]
    # a table row is one line with single spaces; the data keeps the text verbatim
    assert any(line.startswith("P2") and "rain_mm is numeric" in line and "falsified by: profile reports rain_mm as text"
               in line for line in lines)
    assert [e["text"] for e in view.data()["entries"] if e["label"] == "P2"] == ["rain_mm  is numeric"]
    assert any(line.split()[:3] == ["V1", "verdict", "refuted"] and "evidence: no gaps at all" in line for line in lines)
    html = view._repr_mimebundle_()[0]["text/html"]
    assert "<b>sci.demo: 4 entries, 1 open prediction</b>" in html and "<table>" in html
    assert view.data()["total"] == 4 and view.data()["open"] == 1 and len(view.data()["entries"]) == 4


def test_list_and_gate_of_another_plan_need_no_use(ip, magics):
    planned(ip)
    ledger(ip, "use other")
    assert ledger(ip, "list --plan demo").text().startswith("sci.demo: 3 entries, 2 open predictions")
    assert ledger(ip, "list").text() == "sci.other: 0 entries, 0 open predictions"
    assert "OpenPredictions" in refused(ip, "gate --plan sci.demo")
    assert ledger(ip, "gate").data()["open"] == 0


# --- the gate -------------------------------------------------------------------------------------------------------


def test_the_gate_fails_listing_each_open_prediction_verbatim_with_its_check(ip, magics, tmp_path):
    planned(ip)
    before = rows(tmp_path)
    message = refused(ip, "gate")
    lines = message.splitlines()
    assert lines[0] == "OpenPredictions: sci.demo has 2 open predictions:"
    assert "  P1: temp_C has a missing reading (falsified by: python3 profile.py weather.csv)" in lines
    assert "  P2: rain_mm  is numeric (falsified by: profile reports rain_mm as text)" in lines  # verbatim, two spaces
    assert rows(tmp_path) == before


def test_the_gate_passes_once_every_prediction_is_judged_or_skipped(ip, magics):
    planned(ip)
    ledger(ip, 'verdict P1 confirmed --evidence "seen"')
    still_open = [line for line in refused(ip, "gate").splitlines() if line.startswith("  P")]
    assert still_open == ["  P2: rain_mm  is numeric (falsified by: profile reports rain_mm as text)"]
    ledger(ip, 'skip P2 --reason "dropped"')
    view = ledger(ip, "gate")
    assert isinstance(view, LedgerStateView)
    assert view.text() == "sci.demo: 5 entries, 0 open predictions"  # the gate's view: the counts, no table
    assert view.data()["open"] == 0


# --- refusals: one line, the error's name, nothing written ----------------------------------------------------


def test_a_second_verdict_is_a_one_line_usage_error_naming_prediction_already_judged(ip, magics, tmp_path):
    planned(ip)
    ledger(ip, 'verdict P1 confirmed --evidence "seen"')
    before = rows(tmp_path)
    message = refused(ip, 'verdict P1 refuted --evidence "on second thought"')
    assert message == "PredictionAlreadyJudged: P1 already has a verdict (confirmed)"
    assert "\n" not in refused(ip, 'skip P1 --reason "too late"')
    assert rows(tmp_path) == before


@pytest.mark.parametrize("line, error", [
    ("hypothesis", "EmptyText"),
    ('hypothesis "   "', "EmptyText"),
    ("prediction text --falsified-by check --hypothesis H9", "UnknownHypothesis"),
    ('prediction text --falsified-by "" --hypothesis H1', "FalsifierRequired"),
    ("prediction --falsified-by check --hypothesis H1", "EmptyText"),
    ("verdict P1 maybe", "UnknownOutcome"),
    ("verdict P1 confirmed", "EvidenceRequired"),
    ('verdict P1 refuted --evidence " "', "EvidenceRequired"),
    ("verdict P9 inconclusive", "UnknownPrediction"),
    ("skip P9 --reason gone", "UnknownPrediction"),
    ('skip P1 --reason ""', "EmptyText"),
    ("observation text --prediction P9", "UnknownPrediction"),
    ("conclusion", "EmptyText"),
    ('use "My Plan"', "BadPlan"),
    ("use a/b", "BadPlan"),
    ("list --plan Bad", "BadPlan"),
    ("gate --plan a/b", "BadPlan"),
])
def test_named_errors_are_one_line_usage_errors_and_write_nothing(ip, magics, tmp_path, line, error):
    planned(ip)
    before = rows(tmp_path)
    message = refused(ip, line)
    assert message.startswith(f"{error}: ") and "\n" not in message
    assert rows(tmp_path) == before
    assert magics.session.plan == "sci.demo"


@pytest.mark.parametrize("line", [
    "", "   ", "frobnicate", "prediction text --hypothesis H1", "prediction text --falsified-by x", "skip P1",
    "verdict", "verdict P1", "model maybe", "use", 'hypothesis "unclosed', "test",
])
def test_malformed_lines_are_usage_errors_with_the_usage(ip, magics, tmp_path, line):
    planned(ip)
    before = rows(tmp_path)
    assert "usage: %ledger" in refused(ip, line)
    assert rows(tmp_path) == before


@pytest.mark.parametrize("line", ["hypothesis text", "prediction t --falsified-by c --hypothesis H1", "verdict P1 inconclusive",
                                  "skip P1 --reason r", "observation text", "conclusion text", "list", "gate", "test P1"])
def test_every_action_without_a_plan_is_no_plan(ip, magics, tmp_path, line):
    message = refused(ip, line)
    assert message.startswith("NoPlan: ") and "%ledger use" in message
    assert rows(tmp_path) == 0


# --- the cell form and quoting ----------------------------------------------------------------------------------


def test_the_cell_form_takes_the_body_as_the_text(ip, magics):
    ledger(ip, "use demo")
    hypothesis = ledger(ip, "hypothesis", "It's the logger's fault: it \"drops\" readings.\n\n")
    assert hypothesis.entry.text == "It's the logger's fault: it \"drops\" readings."
    prediction = ledger(ip, 'prediction --hypothesis H1 --falsified-by "python3 check.py --station \'north\'"',
                        "The north station's file has a gap\non two lines")
    assert prediction.entry.text == "The north station's file has a gap\non two lines"
    assert prediction.entry.falsified_by == "python3 check.py --station 'north'"
    observation = ledger(ip, "observation --prediction P1", "the profile's output: missing 1")
    assert observation.entry.prediction == "P1" and observation.entry.text == "the profile's output: missing 1"
    assert ledger(ip, "conclusion", "We're done.").entry.text == "We're done."
    assert "EmptyText" in refused(ip, "hypothesis", "   \n  ")


def test_a_line_keeps_apostrophes_as_letters_and_double_quotes_group(ip, magics):
    ledger(ip, "use demo")
    assert ledger(ip, "hypothesis The station's logger isn't reliable").entry.text == "The station's logger isn't reliable"
    view = ledger(ip, 'prediction it\'s  spaced --falsified-by "grep -c \'n/a\' data.csv" --hypothesis H1')
    assert view.entry.text == "it's spaced"  # words outside quotes are joined by one space
    assert view.entry.falsified_by == "grep -c 'n/a' data.csv"
    assert ledger(ip, 'observation "#1 is not a comment"').entry.text == "#1 is not a comment"


# --- the views' mime bundles ------------------------------------------------------------------------------------


def _no_timestamps(value) -> bool:
    if isinstance(value, dict):
        return "at" not in value and all(_no_timestamps(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_timestamps(v) for v in value)
    return not (isinstance(value, str) and TIMESTAMP.search(value))


def test_every_ledger_view_has_text_html_and_ledger_json_with_times_and_path_in_metadata(ip, magics):
    views = [ledger(ip, "use demo")]
    views.append(ledger(ip, "hypothesis h"))
    views.append(ledger(ip, 'prediction p --falsified-by "c" --hypothesis H1'))
    views.append(ledger(ip, "observation o --prediction P1"))
    views.append(ledger(ip, "list"))
    views.append(ledger(ip, 'verdict P1 confirmed --evidence "e"'))
    views.append(ledger(ip, "conclusion c"))
    views.append(ledger(ip, "hypothesis", "cell text"))
    views.append(ledger(ip, "gate"))
    for view in views:
        bundle, metadata = view._repr_mimebundle_()
        assert {"text/plain", "text/html", LEDGER_MIME} <= set(bundle), view
        assert bundle["text/plain"] == view.text()
        assert set(metadata[LEDGER_MIME]) == {"at", "session", "database"}
        assert metadata[LEDGER_MIME]["database"] == "ledger.sqlite"  # relative to the notebook's folder
        assert set(metadata[LEDGER_MIME]["session"]) <= {1}  # which session of the plan wrote each entry
        assert all(TIMESTAMP.match(at) for at in metadata[LEDGER_MIME]["at"])
        assert _no_timestamps(bundle[LEDGER_MIME])
        json.dumps(bundle[LEDGER_MIME])  # plain JSON
    listed = views[4]._repr_mimebundle_()
    assert len(listed[1][LEDGER_MIME]["at"]) == 3 == len(listed[0][LEDGER_MIME]["entries"])
    assert views[1]._repr_mimebundle_()[1][LEDGER_MIME]["at"] == [views[1].entry.at]


def test_the_html_escapes_entry_text(ip, magics):
    ledger(ip, "use demo")
    html = ledger(ip, "hypothesis", "<script>alert('x')</script> & more")._repr_mimebundle_()[0]["text/html"]
    assert "<script>" not in html and "&lt;script&gt;" in html and "&amp; more" in html


def test_a_database_elsewhere_is_shown_relative_in_the_metadata(ip, magics, tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLS_MAGIC_DB", str(tmp_path / "data" / "lab.sqlite"))
    register_magics(ip)
    view = ip.run_line_magic("ledger", "use demo")
    assert view._repr_mimebundle_()[1][LEDGER_MIME]["database"] == "data/lab.sqlite"
    assert (tmp_path / "data" / "lab.sqlite").is_file()


# --- %ledger test ------------------------------------------------------------------------------------------------


def test_ledger_test_runs_an_allowed_check_and_records_an_observation(ip, magics, tmp_path):
    ledger(ip, "use demo")
    ledger(ip, "hypothesis h")
    ledger(ip, 'prediction prints 42 --falsified-by "python3 -c \'print(42)\'" --hypothesis H1')
    message = refused(ip, "test P1")  # nobody can answer the prompt here: denied
    assert "denied" in message and "nothing was recorded" in message and "%skills allow" in message
    assert rows(tmp_path) == 2
    ip.run_line_magic("skills", "allow \"ledger:!python3 -c 'print(42)'\"")
    view = ledger(ip, "test P1")
    assert isinstance(view, LedgerEntryView)
    assert view.entry.kind == "observation" and view.entry.prediction == "P1"
    assert view.entry.text == "ran the falsifying check `python3 -c 'print(42)'`: exit code 0\n42"
    assert ledger(ip, "list").data()["open"] == 1  # no verdict written


# --- the model --------------------------------------------------------------------------------------------------


def test_ledger_model_on_offers_the_experiment_tool_to_a_run(ip, magics, tmp_path):
    planned(ip)
    view = ledger(ip, "model on")
    assert isinstance(view, ModelView) and view.text() == "model: ledger tool (on); plan sci.demo"
    ip.run_line_magic("skills", "model scripted turns.yaml")
    run = ip.run_cell_magic("skill", "run", "Keep the ledger.")
    assert isinstance(run, RunView)
    client = magics.session.model_client
    assert "experiment" in [t["name"] for t in client.requests[0]["tools"]]
    data = run.data()
    assert [e["label"] for e in data["ledger_entries"]] == ["H2"]
    assert data["ledger_entries"][0] == {"plan": "sci.demo", "kind": "hypothesis", "label": "H2",
                                         "text": "The model's own hypothesis"}
    call = data["tool_calls"][1]
    assert call["is_error"] and call["error"].startswith("EvidenceRequired: ")  # the run went on
    assert data["final_text"] == "Recorded what I could." and data["stop_reason"] == "end_turn"
    assert "sci.demo H2 The model's own hypothesis" in run.text()
    assert ledger(ip, "list").data()["total"] == 4


def test_ledger_model_off_removes_the_tool(ip, magics):
    planned(ip)
    ledger(ip, "model on")
    assert ledger(ip, "model off").text() == "model: ledger tool (off); plan sci.demo"
    ip.run_line_magic("skills", "model scripted turns.yaml")
    run = ip.run_cell_magic("skill", "run", "Keep the ledger.")
    assert "experiment" not in [t["name"] for t in magics.session.model_client.requests[0]["tools"]]
    assert run.data()["ledger_entries"] == [] and run.data()["tool_calls"][0]["is_error"]


def test_ledger_model_on_without_a_plan_makes_the_run_a_no_plan_error(ip, magics):
    assert "(none chosen)" in ledger(ip, "model on").text()
    ip.run_line_magic("skills", "model scripted turns.yaml")
    with pytest.raises(UsageError, match="NoPlan"):
        ip.run_cell_magic("skill", "run", "Keep the ledger.")
