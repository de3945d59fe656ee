"""The experiment ledger's actions and rules (skills_magic.records.ledger), the session's `test_prediction` through the
permission gate, and the `experiment` tool the model gets in a run (on the scripted model).

Every refused action must raise a named error and write nothing: the tests count the rows of the file before and
after, straight from SQLite.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from database_files import entry_count as count
from notebook_setup import notebook_folder
from skillfiles import make_skill

from skills_magic.skills.catalog import Source
from skills_magic.records.db import Database
from skills_magic.notebook.views import RunView
from skills_magic.errors import SkillsMagicError
from skills_magic.records.ledger import (
    KINDS,
    LIST_LIMIT,
    MAX_TEXT_CHARS,
    BadPlan,
    EmptyText,
    Entry,
    EvidenceRequired,
    FalsifierRequired,
    Ledger,
    LedgerError,
    NoPlan,
    OpenPredictions,
    PredictionAlreadyJudged,
    UnknownHypothesis,
    UnknownOutcome,
    UnknownPrediction,
    gate_message,
    open_from_entries,
    plan_name,
)
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import LEDGER_OUTPUT_CHARS, SkillsSession

PLAN = "sci.demo"


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "ledger.sqlite"


@pytest.fixture
def ledger(db_path) -> Ledger:
    return Ledger(Database(str(db_path)), "test-session")


def seeded(ledger: Ledger, predictions: int = 1) -> list[Entry]:
    """H1 and P1..Pn under it."""
    entries = [ledger.hypothesis("demo", "The mean temperature is stable")]
    entries += [ledger.prediction("demo", f"prediction {i}", f"check {i}", "H1") for i in range(1, predictions + 1)]
    return entries


# --- labels ------------------------------------------------------------------------------------------------------


def test_labels_are_numbered_per_plan_and_per_kind(ledger):
    h1 = ledger.hypothesis("demo", "first hypothesis")
    p1 = ledger.prediction("demo", "first prediction", "run the check", "H1")
    o1 = ledger.observation("demo", "saw something")
    h2 = ledger.hypothesis("demo", "second hypothesis")
    p2 = ledger.prediction("demo", "second prediction", "run another check", "H2")
    p3 = ledger.prediction("demo", "third prediction", "a third check", "H1")
    v1 = ledger.verdict("demo", "P1", "confirmed", "O1 says so")
    s1 = ledger.skip("demo", "P2", "no data for it")
    c1 = ledger.conclusion("demo", "done")
    o2 = ledger.observation("demo", "linked", "P3")
    v2 = ledger.verdict("demo", "P3", "inconclusive")
    labels = [e.label for e in (h1, p1, o1, h2, p2, p3, v1, s1, c1, o2, v2)]
    assert labels == ["H1", "P1", "O1", "H2", "P2", "P3", "V1", "S1", "C1", "O2", "V2"]
    assert [e.kind for e in (h1, p1, v1, o1, c1, s1)] == ["hypothesis", "prediction", "verdict", "observation",
                                                          "conclusion", "skip"]
    assert all(e.plan == PLAN for e in (h1, p1, o1, h2, p2, p3, v1, s1, c1, o2, v2))
    assert p2.hypothesis == "H2" and p3.hypothesis == "H1" and p1.falsified_by == "run the check"
    assert v1.prediction == "P1" and v1.outcome == "confirmed" and v1.evidence == "O1 says so" and v1.text == "confirmed"
    assert s1.prediction == "P2" and s1.text == "no data for it"
    assert o1.prediction is None and o2.prediction == "P3"
    assert [e.label for e in ledger.entries("demo")] == labels  # in the order written
    assert count(ledger.database.path) == 11


def test_an_entry_keeps_its_session_and_a_utc_timestamp(ledger, db_path):
    entry = ledger.hypothesis("demo", "  padded text  ")
    assert entry.text == "padded text"  # stripped
    assert entry.at.endswith("Z") and entry.at[4] == "-" and "T" in entry.at
    connection = sqlite3.connect(db_path)
    row = connection.execute("SELECT session, number, label FROM ledger_entries").fetchone()
    assert row == ("test-session", 1, "H1")


def test_labels_are_looked_up_case_and_space_insensitively(ledger):
    seeded(ledger, 2)
    assert ledger.prediction("demo", "under h1", "check", " h1 ").hypothesis == "H1"
    assert ledger.verdict("demo", "p1", "CONFIRMED", "seen").prediction == "P1"
    assert ledger.skip("demo", " p2 ", "dropped").prediction == "P2"
    assert ledger.prediction_entry("sci.demo", "p3").text == "under h1"


# --- plan names -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("slug, plan", [
    ("demo", "sci.demo"), ("sci.demo", "sci.demo"), (" demo ", "sci.demo"), ("weather-gaps", "sci.weather-gaps"),
    ("a.b_c-1", "sci.a.b_c-1"), ("0", "sci.0"), ("x" * 63, "sci." + "x" * 63),
])
def test_plan_name_accepts_lowercase_slugs_with_or_without_sci(slug, plan):
    assert plan_name(slug) == plan


@pytest.mark.parametrize("slug", [
    "", "   ", "sci.", "my plan", "a/b", "sci.a/b", "..", "../x", "Demo", "sci.Demo", "SCI.demo", "DEMO", "-demo",
    ".demo", "_demo", "dé", "a\\b", "a\tb", "x" * 64, "sci.x y",
])
def test_plan_name_refuses_spaces_slashes_uppercase_and_empty(slug):
    with pytest.raises(BadPlan) as error:
        plan_name(slug)
    assert str(error.value).startswith("BadPlan: ")


# --- predictions ---------------------------------------------------------------------------------------------------


def test_a_prediction_needs_text_a_falsifier_and_an_existing_hypothesis(ledger, db_path):
    ledger.hypothesis("demo", "h")
    ledger.observation("demo", "an observation, not a hypothesis")
    before = count(db_path)
    with pytest.raises(EmptyText):
        ledger.prediction("demo", "   ", "check", "H1")
    for falsifier in (None, "", "  \n "):
        with pytest.raises(FalsifierRequired):
            ledger.prediction("demo", "text", falsifier, "H1")
    for hypothesis in (None, "", " ", "H2", "H0", "O1", "P1", "1", "h1x"):
        with pytest.raises(UnknownHypothesis):
            ledger.prediction("demo", "text", "check", hypothesis)
    assert count(db_path) == before
    p1 = ledger.prediction("demo", "text", "  check  ", "H1")
    assert (p1.label, p1.falsified_by, p1.hypothesis) == ("P1", "check", "H1")


def test_a_hypothesis_of_another_plan_does_not_count(ledger, db_path):
    ledger.hypothesis("other", "h of another plan")
    with pytest.raises(UnknownHypothesis, match="sci.demo has no hypothesis H1"):
        ledger.prediction("demo", "text", "check", "H1")
    assert count(db_path) == 1


# --- verdicts and skips ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome, evidence", [
    ("confirmed", "O1 shows it"), ("refuted", "O1 shows the opposite"), ("inconclusive", None),
    ("inconclusive", "O1 is ambiguous"), ("Confirmed", "case does not matter"), (" refuted ", "padded"),
])
def test_a_verdict_is_confirmed_refuted_or_inconclusive(ledger, outcome, evidence):
    seeded(ledger)
    verdict = ledger.verdict("demo", "P1", outcome, evidence)
    assert verdict.outcome == outcome.strip().lower() and verdict.kind == "verdict" and verdict.label == "V1"
    assert verdict.evidence == (evidence.strip() if evidence else None)
    assert ledger.state("demo").open_count == 0


@pytest.mark.parametrize("outcome", ["yes", "", "confirm", "true", "refute", "pass", "confirmed!", "None"])
def test_any_other_verdict_word_is_an_unknown_outcome(ledger, db_path, outcome):
    seeded(ledger)
    with pytest.raises(UnknownOutcome):
        ledger.verdict("demo", "P1", outcome, "evidence")
    assert count(db_path) == 2 and ledger.state("demo").open_count == 1


@pytest.mark.parametrize("outcome", ["confirmed", "refuted"])
@pytest.mark.parametrize("evidence", [None, "", "   ", "\n\t"])
def test_confirmed_and_refuted_need_evidence(ledger, db_path, outcome, evidence):
    seeded(ledger)
    with pytest.raises(EvidenceRequired, match=outcome):
        ledger.verdict("demo", "P1", outcome, evidence)
    assert count(db_path) == 2 and ledger.state("demo").open_count == 1


def test_inconclusive_with_blank_evidence_keeps_none(ledger):
    seeded(ledger)
    assert ledger.verdict("demo", "P1", "inconclusive", "   ").evidence is None


@pytest.mark.parametrize("first, second", [
    ("verdict", "verdict"), ("verdict", "skip"), ("skip", "verdict"), ("skip", "skip"),
    ("inconclusive", "verdict"), ("verdict", "inconclusive"),
])
def test_a_prediction_is_judged_once(ledger, db_path, first, second):
    seeded(ledger)
    act = {
        "verdict": lambda: ledger.verdict("demo", "P1", "confirmed", "seen"),
        "inconclusive": lambda: ledger.verdict("demo", "P1", "inconclusive"),
        "skip": lambda: ledger.skip("demo", "P1", "dropped"),
    }
    act[first]()
    before = count(db_path)
    with pytest.raises(PredictionAlreadyJudged, match="P1 already has a"):
        act[second]()
    assert count(db_path) == before
    assert count(db_path, "kind IN ('verdict', 'skip')") == 1


def test_a_second_verdict_with_the_opposite_outcome_is_refused_too(ledger):
    seeded(ledger)
    ledger.verdict("demo", "P1", "confirmed", "seen")
    with pytest.raises(PredictionAlreadyJudged) as error:
        ledger.verdict("demo", "P1", "refuted", "on second thought")
    assert "verdict (confirmed)" in str(error.value)
    assert [e.outcome for e in ledger.entries("demo") if e.kind == "verdict"] == ["confirmed"]


@pytest.mark.parametrize("reason", [None, "", "   ", "\n"])
def test_a_skip_needs_a_reason(ledger, db_path, reason):
    seeded(ledger)
    with pytest.raises(EmptyText):
        ledger.skip("demo", "P1", reason)
    assert count(db_path) == 2


@pytest.mark.parametrize("label", ["P2", "P0", "H1", "V1", "", "x", "1"])
def test_only_an_existing_prediction_can_be_judged(ledger, db_path, label):
    seeded(ledger)
    ledger.verdict("demo", "P1", "inconclusive")
    before = count(db_path)
    with pytest.raises(UnknownPrediction):
        ledger.verdict("demo", label, "inconclusive")
    with pytest.raises(UnknownPrediction):
        ledger.skip("demo", label, "reason")
    assert count(db_path) == before


# --- observations and conclusions ---------------------------------------------------------------------------------


def test_an_observation_may_be_linked_to_a_prediction(ledger, db_path):
    seeded(ledger)
    plain = ledger.observation("demo", "unlinked")
    linked = ledger.observation("demo", "linked to P1", prediction="p1")
    assert plain.prediction is None and linked.prediction == "P1"
    for label in ("P9", "H1", "O1"):
        with pytest.raises(UnknownPrediction):
            ledger.observation("demo", "linked to nothing", prediction=label)
    assert count(db_path) == 4
    assert ledger.state("demo").open_count == 1  # an observation does not close a prediction


def test_an_observation_can_follow_a_verdict(ledger):
    seeded(ledger)
    ledger.verdict("demo", "P1", "refuted", "seen")
    assert ledger.observation("demo", "afterwards", "P1").label == "O1"


# --- open predictions and the gate ---------------------------------------------------------------------------------


def test_open_predictions_are_those_with_neither_verdict_nor_skip(ledger):
    seeded(ledger, 5)
    ledger.verdict("demo", "P1", "confirmed", "seen")
    ledger.skip("demo", "P3", "dropped")
    ledger.observation("demo", "noted", "P4")
    ledger.verdict("demo", "P5", "inconclusive")
    state = ledger.state("demo")
    assert state.open_count == 2 and [p.label for p in state.open] == ["P2", "P4"]
    assert state.total == 10
    assert state.headline == "sci.demo: 10 entries, 2 open predictions"


def test_the_gate_lists_each_open_prediction_verbatim_with_its_check(ledger, db_path):
    ledger.hypothesis("demo", "h")
    texts = [("temp_C has at least one missing reading", 'python3 check.py --column "temp_C"'),
             ("rain isn't negative; ever", "SELECT min(rain) FROM t  -- must be >= 0"),
             ("closed one", "irrelevant")]
    for text, check in texts:
        ledger.prediction("demo", text, check, "H1")
    ledger.skip("demo", "P3", "not needed")
    before = count(db_path)
    with pytest.raises(OpenPredictions) as error:
        ledger.gate("demo")
    message = str(error.value)
    assert message.startswith("OpenPredictions: sci.demo has 2 open predictions:")
    for label, (text, check) in zip(("P1", "P2"), texts[:2]):
        assert f"  {label}: {text} (falsified by: {check})" in message.splitlines()
    assert "P3" not in message and "closed one" not in message
    assert "%ledger verdict" in message and "%ledger skip" in message
    assert count(db_path) == before  # the gate writes nothing


def test_the_gate_passes_when_nothing_is_open(ledger):
    assert ledger.gate("empty").open_count == 0  # a plan without entries has nothing open
    seeded(ledger, 2)
    ledger.verdict("demo", "P1", "refuted", "seen")
    with pytest.raises(OpenPredictions, match="1 open prediction:"):
        ledger.gate("demo")
    ledger.skip("demo", "P2", "dropped")
    state = ledger.gate("demo")
    assert state.open == [] and state.open_count == 0 and state.total == 5


def test_gate_message_singular_and_plural():
    one = Entry(PLAN, "prediction", "P1", "it rains", "", hypothesis="H1", falsified_by="look outside")
    assert gate_message(PLAN, [one]).splitlines()[:2] == ["sci.demo has 1 open prediction:",
                                                         "  P1: it rains (falsified by: look outside)"]
    assert gate_message(PLAN, [one, one]).startswith("sci.demo has 2 open predictions:")


def test_list_shows_the_newest_entries_and_exact_counts_beyond_the_limit(ledger):
    extra = 60
    seeded(ledger, LIST_LIMIT + extra)  # 1 hypothesis + 260 predictions
    for i in range(1, 11):
        ledger.verdict("demo", f"P{i}", "inconclusive")
    total = 1 + LIST_LIMIT + extra + 10
    state = ledger.state("demo")
    assert state.total == total and len(state.entries) == LIST_LIMIT
    assert state.entries[-1].label == "V10" and state.entries[0].label == f"P{total - LIST_LIMIT}"  # newest, in order
    assert state.open_count == LIST_LIMIT + extra - 10
    assert [p.label for p in state.open] == [f"P{i}" for i in range(11, 11 + LIST_LIMIT)]  # the oldest open ones
    assert state.headline == f"sci.demo: {total} entries, {LIST_LIMIT + extra - 10} open predictions"
    from skills_magic.notebook.views import LedgerStateView

    text = LedgerStateView(state, "ledger.sqlite").text()
    assert text.splitlines()[:2] == [state.headline, f"(the newest {LIST_LIMIT} of {total} entries)"]
    with pytest.raises(OpenPredictions) as error:  # the gate lists every open prediction, not only LIST_LIMIT
        ledger.gate("demo")
    assert sum(line.startswith("  P") for line in str(error.value).splitlines()) == LIST_LIMIT + extra - 10


def test_a_smaller_limit_keeps_the_counts_exact(ledger):
    seeded(ledger, 5)
    state = ledger.state("demo", limit=2)
    assert [e.label for e in state.entries] == ["P4", "P5"] and state.total == 6 and state.open_count == 5


# --- plans ---------------------------------------------------------------------------------------------------------


def test_plans_are_separate(ledger, db_path):
    a = [ledger.hypothesis("alpha", "ha"), ledger.prediction("alpha", "pa", "ca", "H1")]
    b = [ledger.hypothesis("beta", "hb"), ledger.prediction("sci.beta", "pb", "cb", "H1")]
    assert [e.label for e in a] == [e.label for e in b] == ["H1", "P1"]  # ids restart per plan
    ledger.prediction("alpha", "pa2", "ca2", "H1")
    before = count(db_path)
    with pytest.raises(UnknownPrediction, match="sci.beta has no prediction P2"):
        ledger.verdict("beta", "P2", "confirmed", "seen")  # P2 exists in alpha only
    with pytest.raises(UnknownPrediction):
        ledger.skip("beta", "P2", "reason")
    with pytest.raises(UnknownPrediction):
        ledger.observation("beta", "text", "P2")
    assert count(db_path) == before
    ledger.verdict("beta", "P1", "confirmed", "seen")
    assert ledger.state("alpha").open_count == 2 and ledger.state("beta").open_count == 0
    ledger.verdict("alpha", "P1", "refuted", "seen")  # beta's verdict did not judge alpha's P1
    assert ledger.plans() == ["sci.alpha", "sci.beta"]
    assert [e.plan for e in ledger.entries("beta")] == ["sci.beta"] * 3
    assert len(list(ledger.entries())) == count(db_path)
    ledger.gate("beta")
    with pytest.raises(OpenPredictions, match="P2: pa2"):
        ledger.gate("alpha")


# --- malformed input: a named error and nothing written -------------------------------------------------------


LONG = "x" * (MAX_TEXT_CHARS + 1)

MALFORMED = [
    ("hypothesis", ("demo", ""), EmptyText),
    ("hypothesis", ("demo", " \n\t "), EmptyText),
    ("hypothesis", ("demo", None), EmptyText),
    ("hypothesis", ("demo", LONG), EmptyText),
    ("hypothesis", ("my plan", "text"), BadPlan),
    ("hypothesis", ("a/b", "text"), BadPlan),
    ("hypothesis", ("Demo", "text"), BadPlan),
    ("hypothesis", ("", "text"), BadPlan),
    ("prediction", ("demo", "", "check", "H1"), EmptyText),
    ("prediction", ("demo", LONG, "check", "H1"), EmptyText),
    ("prediction", ("demo", "text", "", "H1"), FalsifierRequired),
    ("prediction", ("demo", "text", "check", "H7"), UnknownHypothesis),
    ("prediction", ("demo", "text", "check", "P1"), UnknownHypothesis),
    ("prediction", ("bad plan", "text", "check", "H1"), BadPlan),
    ("verdict", ("demo", "P1", "maybe"), UnknownOutcome),
    ("verdict", ("demo", "P1", "confirmed"), EvidenceRequired),
    ("verdict", ("demo", "P1", "refuted", " "), EvidenceRequired),
    ("verdict", ("demo", "P7", "inconclusive"), UnknownPrediction),
    ("verdict", ("demo", "H1", "inconclusive"), UnknownPrediction),
    ("verdict", ("DEMO", "P1", "inconclusive"), BadPlan),
    ("skip", ("demo", "P1", ""), EmptyText),
    ("skip", ("demo", "P1", LONG), EmptyText),
    ("skip", ("demo", "P7", "reason"), UnknownPrediction),
    ("skip", ("x/y", "P1", "reason"), BadPlan),
    ("observation", ("demo", ""), EmptyText),
    ("observation", ("demo", LONG), EmptyText),
    ("observation", ("demo", "text", "P7"), UnknownPrediction),
    ("observation", ("sci.", "text"), BadPlan),
    ("conclusion", ("demo", "  "), EmptyText),
    ("conclusion", ("demo", LONG), EmptyText),
    ("conclusion", ("de mo", "text"), BadPlan),
]


@pytest.mark.parametrize("action, args, error", MALFORMED, ids=[f"{a}-{e.__name__}-{i}" for i, (a, _, e) in enumerate(MALFORMED)])
def test_malformed_input_raises_a_named_error_and_writes_nothing(ledger, db_path, action, args, error):
    seeded(ledger)
    before = count(db_path)
    with pytest.raises(error) as raised:
        getattr(ledger, action)(*args)
    assert isinstance(raised.value, LedgerError) and isinstance(raised.value, SkillsMagicError)
    assert str(raised.value).startswith(f"{error.__name__}: ")  # the class name is part of the message
    assert "\n" not in str(raised.value)  # one line
    assert count(db_path) == before
    assert ledger.state("demo").open_count == 1


def test_text_of_exactly_the_limit_is_kept(ledger):
    assert len(ledger.hypothesis("demo", "y" * MAX_TEXT_CHARS).text) == MAX_TEXT_CHARS


@pytest.mark.parametrize("field", ["falsified_by", "evidence"])
def test_an_overlong_falsifier_or_evidence_is_refused_too(ledger, db_path, field):
    seeded(ledger)
    before = count(db_path)
    with pytest.raises(LedgerError):
        if field == "falsified_by":
            ledger.prediction("demo", "text", LONG, "H1")
        else:
            ledger.verdict("demo", "P1", "confirmed", LONG)
    assert count(db_path) == before


# --- rebuilding from entry dicts (what `ledger check NOTEBOOK` does) -----------------------------------------------


def test_open_from_entries_rebuilds_each_plans_open_predictions(ledger):
    seeded(ledger, 3)
    ledger.verdict("demo", "P1", "confirmed", "seen")
    ledger.skip("demo", "P3", "dropped")
    ledger.hypothesis("other", "h")
    ledger.prediction("other", "p", "c", "H1")
    ledger.verdict("other", "P1", "inconclusive")
    dicts = [e.to_dict() for e in ledger.entries()]
    assert all("at" not in d for d in dicts)
    dicts = dicts + dicts[:3] + [{"plan": "sci.x", "kind": "nonsense", "label": "Z1"}, "not a dict", {}]
    plans = open_from_entries(dicts)
    assert set(plans) == {"sci.demo", "sci.other"}
    assert plans["sci.other"] == []
    (p2,) = plans["sci.demo"]
    assert (p2.label, p2.text, p2.falsified_by, p2.hypothesis) == ("P2", "prediction 2", "check 2", "H1")
    assert open_from_entries([]) == {}


def test_open_from_entries_orders_predictions_by_number():
    dicts = [{"plan": PLAN, "kind": "prediction", "label": f"P{n}", "text": str(n), "falsified_by": "c"} for n in (10, 2, 1)]
    assert [p.label for p in open_from_entries(dicts)[PLAN]] == ["P1", "P2", "P10"]


def test_the_kinds_are_the_six_documented_ones():
    assert KINDS == ("hypothesis", "prediction", "verdict", "observation", "conclusion", "skip")


# --- the session: plan choice and running a falsifying check -----------------------------------------------------


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    notebook_folder(monkeypatch, tmp_path, db="ledger.sqlite")
    root = tmp_path / "skills"
    make_skill(root / "plain-skill", description="A plain skill. Use when testing.")
    make_skill(root / "lab-skill", 'name: lab-skill\ndescription: Keeps an experiment ledger. Use when testing.\n'
                                   'metadata:\n  experiment-ledger: "true"\n')
    make_skill(root / "false-skill", 'name: false-skill\ndescription: Says no. Use when testing.\n'
                                     'metadata:\n  experiment-ledger: "false"\n')
    return tmp_path


@pytest.fixture
def session(place) -> SkillsSession:
    return SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))


def test_use_plan_and_current_plan(session):
    with pytest.raises(NoPlan):
        session.current_plan()
    assert session.use_plan("demo") == "sci.demo" == session.current_plan()
    with pytest.raises(BadPlan):
        session.use_plan("Bad Plan")
    assert session.current_plan() == "sci.demo"  # a refused name leaves the plan as it was
    assert session.ledger.database.path == str(Path(session.cwd) / "ledger.sqlite")


def check_session(session: SkillsSession, command: str) -> None:
    session.use_plan("demo")
    session.ledger.hypothesis("demo", "the check tells")
    session.ledger.prediction("demo", "the check prints 42", command, "H1")


def test_unattended_without_a_rule_the_check_is_denied_and_nothing_is_recorded(session, place):
    marker = place / "ran.txt"
    command = f"{sys.executable} -c \"open('ran.txt', 'w').write('x')\""
    check_session(session, command)
    before = count(place / "ledger.sqlite")
    outcome, entry = session.test_prediction("P1")
    assert entry is None and not outcome.allowed and outcome.run is None
    assert "denied" in outcome.error and "to pre-approve" in outcome.error
    assert not marker.exists()
    assert count(place / "ledger.sqlite") == before
    decisions = session.audit()
    assert [(r["event"], r["skill"], r["path"], r["decision"]) for r in decisions] == [
        ("decision", "ledger", f"!{command}", "deny")]


def test_with_an_allow_rule_the_check_runs_and_an_observation_records_it(session, place):
    command = 'python3 -c "print(42)"'
    check_session(session, command)
    session.add_rule("allow", f"ledger:!{command}")
    outcome, entry = session.test_prediction("p1")
    assert outcome.allowed and outcome.run.exit_code == 0
    assert entry.kind == "observation" and entry.prediction == "P1" and entry.label == "O1"
    assert entry.text == f"ran the falsifying check `{command}`: exit code 0\n42"
    assert count(place / "ledger.sqlite", "kind = 'verdict'") == 0  # it never writes the verdict
    assert session.ledger.state("demo").open_count == 1
    assert [(r["event"], r["decision"], r["exit_code"]) for r in session.audit()] == [
        ("decision", "allow", None), ("run", None, 0)]


def test_a_script_in_the_folder_runs_as_the_check(session, place):
    (place / "check.py").write_text("import os\nprint('cwd', os.path.basename(os.getcwd()))\nprint('rows: 4')\n",
                                    encoding="utf-8")
    command = f"{sys.executable} check.py"
    check_session(session, command)
    session.add_rule("allow", "ledger:!* check.py")
    _, entry = session.test_prediction("P1")
    assert entry.text.splitlines() == [f"ran the falsifying check `{command}`: exit code 0", f"cwd {place.name}", "rows: 4"]


def test_a_failing_check_records_its_non_zero_exit_and_its_output(session, place):
    command = "python3 -c \"import sys; print('partial'); sys.stderr.write('boom'); sys.exit(3)\""
    check_session(session, command)
    session.add_rule("allow", "ledger:!*")
    outcome, entry = session.test_prediction("P1")
    assert outcome.run.exit_code == 3
    lines = entry.text.splitlines()
    assert lines[0] == f"ran the falsifying check `{command}`: exit code 3"
    assert "partial" in lines and "boom" in lines  # stdout and stderr
    assert count(place / "ledger.sqlite", "kind IN ('verdict', 'skip')") == 0
    assert session.ledger.state("demo").open_count == 1


def test_a_deny_rule_wins_over_an_allow_rule_for_a_check(session, place):
    check_session(session, 'python3 -c "print(42)"')
    session.add_rule("allow", "ledger:!*")
    session.add_rule("deny", "ledger:!python3 *")
    outcome, entry = session.test_prediction("P1")
    assert entry is None and "denied" in outcome.error
    assert count(place / "ledger.sqlite", "kind = 'observation'") == 0


def test_a_long_output_is_cut_in_the_observation(session):
    check_session(session, "python3 -c \"print('x' * 10000)\"")
    session.add_rule("allow", "ledger:!*")
    _, entry = session.test_prediction("P1")
    assert entry.text.endswith(f"[output cut at {LEDGER_OUTPUT_CHARS} characters]")
    assert entry.text.splitlines()[1] == "x" * LEDGER_OUTPUT_CHARS


def test_a_check_can_be_run_again_and_after_the_verdict(session):
    check_session(session, "true")
    session.add_rule("allow", "ledger:!true")
    assert session.test_prediction("P1")[1].label == "O1"
    session.ledger.verdict("demo", "P1", "confirmed", "O1")
    assert session.test_prediction("P1")[1].label == "O2"


def test_testing_needs_a_plan_and_an_existing_prediction(session):
    with pytest.raises(NoPlan):
        session.test_prediction("P1")
    session.use_plan("demo")
    session.add_rule("allow", "ledger:!*")
    with pytest.raises(UnknownPrediction):
        session.test_prediction("P1")
    assert session.audit() == []  # nothing was asked or run


# --- the experiment tool in a run ---------------------------------------------------------------------------------


def call(**data) -> dict:
    return {"tool_use": [{"name": "experiment", "input": data}]}


def tool_names(request) -> list[str]:
    return [t["name"] for t in request["tools"]]


def tool_results(request) -> list[dict]:
    return [b for m in request["messages"] if m["role"] == "user" for b in m["content"] if b.get("type") == "tool_result"]


def test_the_model_writes_entries_through_the_experiment_tool(session, place):
    session.use_plan("demo")
    session.ledger_for_model = True
    session.model_client = ScriptedModel([
        call(action="hypothesis", text="The file has gaps"),
        call(action="prediction", text="temp_C has a missing value", falsified_by="profile shows missing: 0", hypothesis="H1"),
        call(action="observation", text="profile: missing 1", prediction="P1"),
        call(action="verdict", prediction="P1", outcome="confirmed", evidence="O1"),
        call(action="conclusion", text="not ready"),
        call(action="list"),
        "Recorded.",
    ])
    result = session.run("Keep the ledger.")
    assert result.ok and result.final_text == "Recorded."
    assert [(e.kind, e.label) for e in result.ledger_entries] == [
        ("hypothesis", "H1"), ("prediction", "P1"), ("observation", "O1"), ("verdict", "V1"), ("conclusion", "C1")]
    assert [e.label for e in session.ledger.entries("demo")] == ["H1", "P1", "O1", "V1", "C1"]
    assert not any(c.is_error for c in result.tool_calls)
    requests = session.model_client.requests
    assert "experiment" in tool_names(requests[0])
    experiment = next(t for t in requests[0]["tools"] if t["name"] == "experiment")
    assert "sci.demo" in experiment["description"]
    answers = [r["content"] for r in tool_results(requests[-1])]
    assert answers[0] == "recorded sci.demo H1 The file has gaps"
    assert answers[3] == "recorded sci.demo V1 P1 confirmed; evidence: O1"
    assert answers[5].splitlines()[0] == "sci.demo: 5 entries, 0 open predictions"
    data = RunView(result).data()
    assert [e["label"] for e in data["ledger_entries"]] == ["H1", "P1", "O1", "V1", "C1"]
    assert data["ledger_entries"][1] == {"plan": "sci.demo", "kind": "prediction", "label": "P1",
                                         "text": "temp_C has a missing value", "hypothesis": "H1",
                                         "falsified_by": "profile shows missing: 0"}
    assert all("at" not in e for e in data["ledger_entries"])
    text = RunView(result).text()
    assert "ledger entries written by the model:" in text and "sci.demo V1 P1 confirmed; evidence: O1" in text
    assert "ledger entries (5)" in RunView(result).html()


@pytest.mark.parametrize("data, error", [
    ({"action": "verdict", "prediction": "P1", "outcome": "confirmed"}, "EvidenceRequired"),
    ({"action": "verdict", "prediction": "P1", "outcome": "yes", "evidence": "e"}, "UnknownOutcome"),
    ({"action": "verdict", "prediction": "P9", "outcome": "inconclusive"}, "UnknownPrediction"),
    ({"action": "prediction", "text": "t", "hypothesis": "H1"}, "FalsifierRequired"),
    ({"action": "prediction", "text": "t", "falsified_by": "c", "hypothesis": "H5"}, "UnknownHypothesis"),
    ({"action": "prediction", "text": "t", "falsified_by": "c"}, "UnknownHypothesis"),
    ({"action": "hypothesis"}, "EmptyText"),
    ({"action": "hypothesis", "text": 42}, "EmptyText"),
    ({"action": "skip", "prediction": "P1"}, "EmptyText"),
    ({"action": "observation", "text": "t", "prediction": "P9"}, "UnknownPrediction"),
    ({"action": "delete"}, "`action` must be one of"),
    ({}, "`action` must be one of"),
])
def test_the_models_mistakes_come_back_as_errors_and_the_run_goes_on(session, place, data, error):
    session.use_plan("demo")
    session.ledger.hypothesis("demo", "h")
    session.ledger.prediction("demo", "p", "c", "H1")
    session.ledger_for_model = True
    before = count(place / "ledger.sqlite")
    session.model_client = ScriptedModel([call(**data), call(action="conclusion", text="after the error"), "done"])
    result = session.run("Try.")
    assert result.ok and result.final_text == "done"
    first, second = result.tool_calls
    assert first.is_error and error in first.error and not second.is_error
    results = tool_results(session.model_client.requests[1])
    assert results[-1]["is_error"] is True and error in results[-1]["content"]
    assert [e.label for e in result.ledger_entries] == ["C1"]
    assert count(place / "ledger.sqlite") == before + 1


def test_a_second_verdict_from_the_model_is_refused_by_name(session):
    session.use_plan("demo")
    session.ledger.hypothesis("demo", "h")
    session.ledger.prediction("demo", "p", "c", "H1")
    session.ledger.verdict("demo", "P1", "confirmed", "seen by a person")
    session.ledger_for_model = True
    session.model_client = ScriptedModel([
        call(action="verdict", prediction="P1", outcome="refuted", evidence="the model disagrees"),
        call(action="skip", prediction="P1", reason="the model gives up"), "ok"])
    result = session.run("Judge.")
    assert [c.is_error for c in result.tool_calls] == [True, True]
    assert all(c.error.startswith("PredictionAlreadyJudged: ") for c in result.tool_calls)
    assert result.ledger_entries == [] and result.ok


def test_the_tool_is_absent_when_not_enabled(session, place):
    session.use_plan("demo")
    session.model_client = ScriptedModel([call(action="hypothesis", text="sneaky"), "done"])
    result = session.run("Try.")
    assert "experiment" not in tool_names(session.model_client.requests[0])
    assert result.tool_calls[0].is_error and "no tool named 'experiment'" in result.tool_calls[0].error
    assert result.ledger_entries == [] and count(place / "ledger.sqlite") == 0


@pytest.mark.parametrize("skill, offered", [("lab-skill", True), ("plain-skill", False), ("false-skill", False), (None, False)])
def test_a_skill_run_by_name_whose_metadata_asks_gets_the_tool(session, place, skill, offered):
    session.use_plan("demo")
    session.model_client = ScriptedModel([call(action="hypothesis", text="from the skill"), "done"])
    result = session.run("Go.", skill=skill)
    assert ("experiment" in tool_names(session.model_client.requests[0])) is offered
    assert [e.label for e in result.ledger_entries] == (["H1"] if offered else [])
    assert count(place / "ledger.sqlite") == (1 if offered else 0)


def test_enabling_the_tool_without_a_plan_is_a_no_plan_error(session):
    session.ledger_for_model = True
    session.model_client = ScriptedModel(["never asked"])
    with pytest.raises(NoPlan):
        session.run("Go.")
    assert session.model_client.requests == []
    session.ledger_for_model = False
    with pytest.raises(NoPlan):
        session.run("Go.", skill="lab-skill")


def test_the_tools_entries_land_in_the_sessions_current_plan(session):
    session.use_plan("first")
    session.ledger_for_model = True
    session.model_client = ScriptedModel([call(action="hypothesis", text="in first"), "done"])
    session.run("Go.")
    session.use_plan("second")
    session.model_client = ScriptedModel([call(action="hypothesis", text="in second"), "done"])
    session.run("Go.")
    assert [(e.plan, e.label, e.text) for e in session.ledger.entries()] == [
        ("sci.first", "H1", "in first"), ("sci.second", "H1", "in second")]
