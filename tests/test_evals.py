"""Activation evals (`skills_magic.runs.evals`): prompt sets in three formats, the report's metrics, runs through the scripted
model, the keyword router and the real SDK (httpx2 MockTransport), behaviour evals with a judge, `%skills eval`,
`%skills lint` and `skills-magic lint`.

Nothing here sleeps or measures time: every model is scripted, deterministic, and answers at once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fake_anthropic import FakeMessagesAPI, text_message, tool_message, usage
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill

from skills_magic.runs.agent import SYSTEM_INSTRUCTIONS, ToolCall, tool_definitions
from skills_magic.skills.catalog import Catalog, Source
from skills_magic.datafiles import DataFileError
from skills_magic.notebook.views import EvalView, LintView, activation_chart_svg
from skills_magic.runs.evals import (
    CATEGORIES,
    FIRST_TURNS,
    FORCED_PREAMBLE,
    JUDGE_TOOL,
    JUDGE_TOOL_NAME,
    EvalItem,
    EvalReport,
    PromptSetError,
    RunRecord,
    activated_skills,
    behaviour_evals,
    load_prompt_set,
    prompt_text,
    run_eval,
)
from skills_magic.models.anthropic import AnthropicModel
from skills_magic.models.scripted import ScriptedModel, keyword_router

REPO = Path(__file__).resolve().parent.parent
ACTIVATION_SET = REPO / "notebooks" / "evals" / "activation.yaml"
EVAL_MIME = "application/vnd.skills-magic.eval+json"
LINT_MIME = "application/vnd.skills-magic.lint+json"
SVG = "{http://www.w3.org/2000/svg}"
MODEL_ID = "claude-test-1"
KEY = "sk-ant-fake-evals-0123456789KEYVALUE"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def skills_in(root: Path) -> list:
    return list(Catalog([Source("session", str(root), explicit=True)]).scan().skills)


@pytest.fixture
def two_skills(tmp_path):
    """tea-notes and unit-converter: descriptions that share no keywords, so the router never confuses them."""
    root = tmp_path / "skills"
    make_skill(root / "tea-notes", description="Writes tasting notes for a tea, oolong or green. Use when asked about tea.")
    make_skill(root / "unit-converter",
               description="Converts units of measure between metric and imperial. Use when asked to convert units.")
    found = skills_in(root)
    assert [s.name for s in found] == ["tea-notes", "unit-converter"]
    return found


def user_text(request: dict) -> str:
    """The text of a request's first user message (what run_eval sends as the prompt)."""
    content = request["messages"][0]["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


# --- prompt sets: three formats -----------------------------------------------------------------------------------


OURS = """
- prompt: Write tasting notes for this oolong.
  expected: [tea-notes]
  category: direct
- prompt: Write a haiku about the sea.
  expect_none: true
  category: negative
"""

OURS_MAPPING = """
prompts:
  - prompt: Write tasting notes for this oolong.
    expected: [tea-notes]
  - prompt: Write a haiku about the sea.
"""

SKILL_CREATOR_PER_ITEM = """
[{"query": "Write tasting notes for this oolong.", "should_trigger": true, "skill": "tea-notes"},
 {"query": "Write a haiku about the sea.", "should_trigger": false}]
"""

SKILL_CREATOR_TOP_LEVEL = """
skill: tea-notes
evals:
  - {query: "Write tasting notes for this oolong.", should_trigger: true}
  - {query: "Write a haiku about the sea.", should_trigger: false}
"""

SPECIFICATION = """
- skills: [tea-notes]
  query: Write tasting notes for this oolong.
  files: [notes/oolong.txt]
  expected_behavior:
    - Names the tea
    - Describes the aroma
- skills: []
  query: Write a haiku about the sea.
"""

SAME_ITEMS = [EvalItem("1", "Write tasting notes for this oolong.", ("tea-notes",), False, "direct"),
              EvalItem("2", "Write a haiku about the sea.", (), True, "negative")]


@pytest.mark.parametrize("name, text", [("ours.yaml", OURS), ("ours-mapping.yml", OURS_MAPPING),
                                        ("creator.json", SKILL_CREATOR_PER_ITEM), ("creator.yaml", SKILL_CREATOR_TOP_LEVEL)])
def test_our_format_and_skill_creators_parse_to_the_same_items(tmp_path, name, text):
    items = load_prompt_set(write(tmp_path / name, text))

    assert items == SAME_ITEMS


def test_the_specifications_format_parses_to_the_same_items_plus_files_and_behaviours(tmp_path):
    items = load_prompt_set(write(tmp_path / "spec.yaml", SPECIFICATION))

    overlap = [EvalItem(i.id, i.prompt, i.expected, i.expect_none, i.category) for i in items]
    assert overlap == SAME_ITEMS
    assert items[0].files == ("notes/oolong.txt",)
    assert items[0].expected_behavior == ("Names the tea", "Describes the aroma")
    assert items[1].files == () and items[1].expected_behavior == ()


def test_explicit_ids_categories_and_the_camel_case_expect_none_are_kept(tmp_path):
    text = json.dumps({"prompts": [
        {"id": "D1", "prompt": "Profile data.csv", "expected": ["csv-profile", "lab-notebook-entry"], "category": "direct"},
        {"id": "P1", "prompt": "What's in this table?", "expected": ["csv-profile"], "category": "paraphrase"},
        {"id": "N1", "prompt": "Hello", "expectNone": True},
        {"id": 7, "prompt": "A numeric id", "expected": ["csv-profile"]},
        {"id": "C1", "query": "Is this table sane?", "should_trigger": True, "skill": "csv-profile",
         "category": "paraphrase"},
    ]})
    items = load_prompt_set(write(tmp_path / "set.json", text))

    assert [i.id for i in items] == ["D1", "P1", "N1", "7", "C1"]
    assert items[0].expected == ("csv-profile", "lab-notebook-entry") and not items[0].expect_none
    assert [i.category for i in items] == ["direct", "paraphrase", "negative", "direct", "paraphrase"]
    assert items[2].expect_none and items[2].expected == ()
    assert items[4].expected == ("csv-profile",)


def test_the_notebooks_prompt_set_has_five_prompts_per_category():
    items = load_prompt_set(ACTIVATION_SET)

    assert len(items) == 15
    assert {c: sum(i.category == c for i in items) for c in CATEGORIES} == {"direct": 5, "paraphrase": 5, "negative": 5}
    assert all(i.expected and not i.expect_none for i in items if i.category != "negative")
    assert all(i.expect_none and not i.expected for i in items if i.category == "negative")


@pytest.mark.parametrize("text, words", [
    ("just a string", ["expected a list"]),
    ("{name: not a prompt set}", ["expected a list"]),
    ("- prompt: fine\n- 42\n", ["item 2", "not a mapping"]),
    ("- prompt: fine\n- expected: [tea-notes]\n", ["item 2", "neither `prompt` nor `query`"]),
    ("- prompt: '   '\n", ["item 1", "empty prompt"]),
    ("- query: ''\n  skills: [tea-notes]\n", ["item 1", "empty prompt"]),
    ("- {query: 'Brew it.', should_trigger: true}\n", ["item 1", "should trigger", "skill"]),
    ("- prompt: fine\n- prompt: fine too\n  category: sideways\n", ["item 2", "category must be one of",
                                                                   "direct, paraphrase, negative"]),
    ("- {id: A, prompt: one}\n- {id: A, prompt: two}\n", ["unique"]),
])
def test_a_bad_prompt_set_is_a_prompt_set_error_naming_the_file_and_the_item(tmp_path, text, words):
    path = write(tmp_path / "bad-set.yaml", text)

    with pytest.raises(PromptSetError) as raised:
        load_prompt_set(path)

    message = str(raised.value)
    assert message.startswith("bad-set.yaml: ")
    for word in words:
        assert word in message


def test_a_duplicate_id_error_names_the_repeated_id(tmp_path):
    path = write(tmp_path / "dupes.yaml", "- {id: D1, prompt: one}\n- {id: P7, prompt: two}\n- {id: P7, prompt: three}\n")

    with pytest.raises(PromptSetError) as raised:
        load_prompt_set(path)

    assert "P7" in str(raised.value)


@pytest.mark.parametrize("text", ["- {prompt: Profile data.csv, expected: csv-profile}\n",
                                  "- {query: Profile data.csv, skills: csv-profile}\n"])
def test_a_single_skill_name_where_a_list_is_expected_is_one_skill_or_an_error(tmp_path, text):
    path = write(tmp_path / "scalar.yaml", text)
    try:
        items = load_prompt_set(path)
    except PromptSetError:
        return
    assert items[0].expected == ("csv-profile",)


@pytest.mark.parametrize("name, text, words", [
    ("broken.yaml", "prompts:\n  - {id: a, prompt: 'unclosed'\n", "broken.yaml is not valid YAML (line 3)"),
    ("broken.json", '[{"prompt": "unclosed"', "broken.json is not valid JSON"),
])
def test_a_prompt_set_that_does_not_parse_is_a_clear_value_error_naming_the_file(tmp_path, name, text, words):
    path = write(tmp_path / name, text)

    with pytest.raises(DataFileError) as raised:
        load_prompt_set(path)

    assert isinstance(raised.value, ValueError) and str(raised.value).startswith(words)


# --- the report's metrics, on hand-built records ------------------------------------------------------------------


ITEMS = [
    EvalItem("d1", "direct one", ("alpha",), False, "direct"),
    EvalItem("d2", "direct two, two skills welcome", ("alpha", "beta"), False, "direct"),
    EvalItem("p1", "paraphrase", ("beta",), False, "paraphrase"),
    EvalItem("n1", "negative", (), True, "negative"),
]
RECORDS = [
    RunRecord("d1", 1, ["alpha"], 2, 100, 10),
    RunRecord("d1", 2, [], 1, 50, 5),
    RunRecord("d2", 1, ["beta"], 2, 100, 10),  # any expected skill is a hit
    RunRecord("d2", 2, ["gamma"], 2, 100, 10),  # a miss, and a wrong skill
    RunRecord("p1", 1, ["beta", "alpha"], 3, 200, 20),  # a hit, and a wrong skill
    RunRecord("p1", 2, [], 1, 0, 0, "the model call failed with HTTP 500"),
    RunRecord("n1", 1, ["alpha"], 2, 100, 10),  # a false positive
    RunRecord("n1", 2, [], 1, 50, 5),
]


def hand_report() -> EvalReport:
    return EvalReport("hand", list(ITEMS), list(RECORDS), runs=2)


def without_intervals(row: dict) -> dict:
    """A per-skill row's counts and rates (each rate also carries its Wilson interval, pinned in test_eval_stats)."""
    return {k: v for k, v in row.items() if not k.endswith("_interval")}


def test_activation_per_category_counts_a_run_that_activated_any_expected_skill():
    report = hand_report()

    assert report.activation_rate("direct") == 2 / 4
    assert report.activation_rate("paraphrase") == 1 / 1  # p1's errored run is counted apart, never as a miss
    assert report.activation_rate("negative") is None  # no positive item in that category


def test_false_positives_count_only_expect_none_items_and_wrong_skills_only_positive_ones():
    report = hand_report()

    assert report.false_positive_rate() == 1 / 2  # n1 run 1; the wrong skills on d2 and p1 are not false positives
    assert report.wrong_skill_rate() == 2 / 5  # d2 run 2 (gamma) and p1 run 1 (alpha); n1 and the errored run not


def test_precision_and_recall_per_skill():
    table = hand_report().per_skill()

    assert list(table) == ["alpha", "beta", "gamma"]
    # alpha: wanted in d1 x2 and d2 x2; hit in d1 r1 (tp), missed d1 r2, d2 r1, d2 r2 (fn); activated on p1 r1, n1 r1 (fp)
    assert without_intervals(table["alpha"]) == {"tp": 1, "fp": 2, "fn": 3, "precision": 1 / 3, "recall": 1 / 4}
    # beta: wanted in d2 x2 and p1 x1 (p1's other run errored); hit d2 r1 and p1 r1
    assert without_intervals(table["beta"]) == {"tp": 2, "fp": 0, "fn": 1, "precision": 1.0, "recall": 2 / 3}
    # gamma: never wanted, activated once: no recall to speak of
    assert table["gamma"]["recall"] is None and table["gamma"]["recall_interval"] is None
    assert (table["gamma"]["tp"], table["gamma"]["fp"], table["gamma"]["precision"]) == (0, 1, 0.0)
    assert table["beta"]["recall_interval"] == pytest.approx([0.2076, 0.9385], abs=1e-4)  # Wilson, 2 of 3


def test_per_prompt_counts_and_totals():
    report = hand_report()

    rows = {row["id"]: row for row in report.per_prompt()}
    assert list(rows) == ["d1", "d2", "p1", "n1"]
    assert rows["d1"] == {"id": "d1", "category": "direct", "expected": ["alpha"], "expect_none": False, "runs": 2,
                          "activated": {"alpha": 1}, "errors": 0, "rate": 0.5}
    assert rows["d2"]["activated"] == {"beta": 1, "gamma": 1}
    # issue 17: an errored run is counted apart: p1 has one counted run (a hit) and one errored
    assert rows["p1"]["activated"] == {"beta": 1, "alpha": 1} and rows["p1"]["errors"] == 1 and rows["p1"]["runs"] == 1
    assert rows["p1"]["rate"] == 1.0 and rows["n1"]["rate"] == 0.5  # a negative's rate: its false positives
    assert rows["n1"]["expected"] == [] and rows["n1"]["category"] == "negative"
    assert report.totals() == {"runs": 8, "calls": 14, "input_tokens": 700, "output_tokens": 70}


def test_the_per_prompt_table_shows_k_of_n_and_the_summary_holds_every_metric():
    report = hand_report()
    view = EvalView([report])

    rows = [line.split(None, 3) for line in view.text().splitlines()[-4:]]
    assert [r[0] for r in rows] == ["d1", "d2", "p1", "n1"]
    assert rows[0][3].split()[-2:] == ["alpha", "1/2"]
    assert rows[1][3].endswith("beta 1/2, gamma 1/2") and rows[2][3].endswith("alpha 1/1, beta 1/1 (1 errored)")
    assert rows[3][2:] == ["(none)", "alpha 1/2"]
    silent = EvalView([EvalReport("quiet", [ITEMS[3]], [RunRecord("n1", 1, []), RunRecord("n1", 2, [])], runs=2)])
    assert silent.text().splitlines()[-1].split() == ["n1", "negative", "(none)", "none", "0/2"]
    summary = report.summary()
    assert summary["activation"] == {"direct": 0.5, "paraphrase": 1.0}
    assert summary["false_positive_rate"] == 0.5 and summary["wrong_skill_rate"] == 2 / 5
    assert summary["counts"]["paraphrase"] == {"hits": 1, "runs": 1} and summary["counts"]["overall"] == {"hits": 4, "runs": 7}
    assert summary["errored"] == {"total": 1, "direct": 0, "paraphrase": 1, "negative": 0}
    assert summary["intervals"]["negative"] == pytest.approx([0.0945, 0.9055], abs=1e-4)  # Wilson, 1 of 2
    assert summary["spread"]["direct"] == {"prompts": 2, "min": 0.5, "max": 0.5, "sd": 0.0}  # d1 and d2: 1 of 2 each
    assert summary["per_prompt"] == report.per_prompt() and summary["per_skill"] == report.per_skill()
    assert summary["totals"] == report.totals() and summary["batch_ids"] == [] and summary["behaviour"] == {}
    json.dumps(summary)  # plain data


def test_empty_denominators_are_none_never_zero():
    negatives_only = EvalReport("n", [ITEMS[3]], [RunRecord("n1", 1, [])], runs=1)
    positives_only = EvalReport("p", [ITEMS[0]], [RunRecord("d1", 1, [])], runs=1)
    nothing_run = EvalReport("empty", list(ITEMS), [], runs=1)

    assert negatives_only.activation_rate("direct") is None and negatives_only.wrong_skill_rate() is None
    assert negatives_only.false_positive_rate() == 0.0 and negatives_only.per_skill() == {}
    assert positives_only.false_positive_rate() is None and positives_only.activation_rate("direct") == 0.0
    assert without_intervals(positives_only.per_skill()["alpha"]) == {"tp": 0, "fp": 0, "fn": 1, "precision": None,
                                                                      "recall": 0.0}
    for category in ("direct", "paraphrase"):
        assert nothing_run.activation_rate(category) is None
    assert nothing_run.false_positive_rate() is None and nothing_run.wrong_skill_rate() is None
    assert nothing_run.totals() == {"runs": 0, "calls": 0, "input_tokens": 0, "output_tokens": 0}
    headline = EvalView([nothing_run]).text().splitlines()[0]
    assert "activation direct -, paraphrase -; false positives -; wrong skill -" in headline


def test_activated_skills_counts_successful_activations_and_reads_of_skill_md_once_each_in_order():
    def call(name, data, is_error=False):
        return ToolCall("toolu_x", name, data, 10, is_error, "failed" if is_error else None)

    result = types.SimpleNamespace(tool_calls=[
        call("activate_skill", {"name": "teapot"}, is_error=True),  # unknown name: failed
        call("read_skill_resource", {"skill": "beta", "path": "references/guide.md"}),  # not SKILL.md
        call("read_skill_resource", {"skill": "beta", "path": "./SKILL.md"}),
        call("activate_skill", {"name": "alpha"}),
        call("activate_skill", {"name": "alpha"}),  # twice: once in the list
        call("read_skill_resource", {"skill": "gamma", "path": "SKILL.md"}, is_error=True),  # a failed read
        call("read_skill_resource", {"skill": "delta", "path": "skill.md"}),
        call("run_skill_script", {"skill": "epsilon", "path": "scripts/x.py"}),
        call("activate_skill", "not a dict"),
    ])

    assert activated_skills(result) == ["beta", "alpha", "delta"]


# --- run_eval through the scripted model ---------------------------------------------------------------------------


def scripted_items() -> list[EvalItem]:
    return [
        EvalItem("A", "ALPHA: write notes for this oolong", ("tea-notes",)),
        EvalItem("B", "BRAVO: convert five miles", ("unit-converter",), category="paraphrase"),
        EvalItem("C", "CHARLIE: anything at all", ("tea-notes",)),
        EvalItem("D", "DELTA: late activation", ("tea-notes",)),
        EvalItem("E", "ECHO: a haiku", (), True, "negative"),
    ]


def scripted_turns() -> list[dict]:
    return [
        # A: activate_skill on the first turn, then an answer
        {"when": "ALPHA", "tool_use": [{"name": "activate_skill", "input": {"name": "tea-notes"}}],
         "usage": {"input_tokens": 100, "output_tokens": 7}},
        {"when": "ALPHA", "text": "Notes written.", "usage": {"input_tokens": 150, "output_tokens": 20}},
        # B: the skill is read through read_skill_resource(SKILL.md), never activated
        {"when": "BRAVO", "tool_use": [{"name": "read_skill_resource", "input": {"skill": "unit-converter", "path": "SKILL.md"}}]},
        {"when": "BRAVO", "text": "8 km."},
        # C: an unknown name fails, and does not count
        {"when": "CHARLIE", "tool_use": [{"name": "activate_skill", "input": {"name": "teapot"}}]},
        {"when": "CHARLIE", "text": "Never mind."},
        # D: two turns of other tools, the activation only on turn 3 (beyond FIRST_TURNS)
        {"when": "DELTA", "tool_use": [{"name": "read_skill_resource", "input": {"skill": "tea-notes", "path": "notes.md"}}]},
        {"when": "DELTA", "tool_use": [{"name": "no_such_tool", "input": {}}]},
        {"when": "DELTA", "tool_use": [{"name": "activate_skill", "input": {"name": "tea-notes"}}]},
        # E: a direct answer
        {"when": "ECHO", "text": "Waves fold on stone.", "usage": {"input_tokens": 30, "output_tokens": 9}},
    ]


def test_run_eval_detects_activation_from_activate_skill_and_from_reading_skill_md(two_skills):
    model = ScriptedModel(scripted_turns())
    progress: list[tuple[int, int]] = []

    report = run_eval(two_skills, model, MODEL_ID, scripted_items(), runs=1, on_progress=lambda d, t: progress.append((d, t)))

    activated = {r.item: r.activated for r in report.records}
    assert activated == {"A": ["tea-notes"], "B": ["unit-converter"], "C": [], "D": [], "E": []}
    assert report.label == "plain" and report.runs == 1
    assert progress == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    by_item = {r.item: r for r in report.records}
    assert (by_item["A"].calls, by_item["A"].input_tokens, by_item["A"].output_tokens) == (2, 250, 27)
    assert (by_item["E"].calls, by_item["E"].input_tokens, by_item["E"].output_tokens) == (1, 30, 9)
    assert all(r.error is None for r in report.records)
    assert report.activation_rate("direct") == 1 / 3 and report.activation_rate("paraphrase") == 1.0
    assert report.false_positive_rate() == 0.0


def test_only_the_first_turns_count(two_skills):
    model = ScriptedModel(scripted_turns())

    report = run_eval(two_skills, model, MODEL_ID, scripted_items(), runs=1)

    late = next(r for r in report.records if r.item == "D")
    assert FIRST_TURNS == 2
    assert late.calls == FIRST_TURNS and late.activated == []
    assert model.remaining == 1  # the turn-3 activation was never asked for
    assert sum("DELTA" in user_text(r) for r in model.requests) == FIRST_TURNS


def test_a_failing_activation_is_answered_as_an_error_and_not_counted(two_skills):
    model = ScriptedModel(scripted_turns())

    run_eval(two_skills, model, MODEL_ID, scripted_items()[2:3], runs=1)

    second = model.requests[1]
    [result] = [b for b in second["messages"][-1]["content"] if b.get("type") == "tool_result"]
    assert result["is_error"] is True and "teapot" in result["content"]


def test_every_run_is_a_fresh_conversation_and_runs_times_items_records_come_in_order(two_skills):
    model = ScriptedModel(responder=keyword_router())
    items = [EvalItem("tea", "Write tasting notes for this oolong tea.", ("tea-notes",)),
             EvalItem("units", "Convert these units of measure from imperial to metric.", ("unit-converter",)),
             EvalItem("none", "Write a haiku about the sea.", (), True, "negative")]
    progress: list[tuple[int, int]] = []

    report = run_eval(two_skills, model, MODEL_ID, items, runs=3, on_progress=lambda d, t: progress.append((d, t)))

    assert [(r.item, r.run) for r in report.records] == [(i.id, n) for i in items for n in (1, 2, 3)]
    assert [r.activated for r in report.records] == [["tea-notes"]] * 3 + [["unit-converter"]] * 3 + [[]] * 3
    assert progress == [(n, 9) for n in range(1, 10)]
    firsts = [r for r in model.requests if len(r["messages"]) == 1]
    assert len(firsts) == 9  # one new conversation per (item, run)
    assert report.per_prompt()[0]["activated"] == {"tea-notes": 3}


def test_the_forced_strategy_starts_every_prompt_with_the_preamble_and_plain_does_not(two_skills):
    item = EvalItem("tea", "Write tasting notes for this oolong tea.", ("tea-notes",), files=("cup.txt", "pot.txt"))
    forced, plain = ScriptedModel(responder=keyword_router()), ScriptedModel(responder=keyword_router())

    forced_report = run_eval(two_skills, forced, MODEL_ID, [item], runs=2, strategy="forced")
    run_eval(two_skills, plain, MODEL_ID, [item], runs=2, strategy="plain")

    assert forced_report.label == "forced"
    assert FORCED_PREAMBLE.endswith("\n\n")
    for request in forced.requests:
        assert user_text(request).startswith(FORCED_PREAMBLE)
        assert user_text(request) == FORCED_PREAMBLE + item.prompt + "\n\nFiles: cup.txt, pot.txt"
    for request in plain.requests:
        assert user_text(request) == item.prompt + "\n\nFiles: cup.txt, pot.txt"
    assert prompt_text(item, "forced") == FORCED_PREAMBLE + prompt_text(item, "plain")


def test_the_keyword_router_is_more_eager_under_the_forced_preamble(two_skills):
    item = EvalItem("one-word", "Something with tea, please.", ("tea-notes",), category="paraphrase")  # one shared word

    plain = run_eval(two_skills, ScriptedModel(responder=keyword_router()), MODEL_ID, [item], runs=1)
    forced = run_eval(two_skills, ScriptedModel(responder=keyword_router()), MODEL_ID, [item], runs=1, strategy="forced")

    assert plain.records[0].activated == [] and forced.records[0].activated == ["tea-notes"]


def test_a_failed_model_call_is_recorded_as_an_error_with_no_activation(two_skills):
    model = ScriptedModel([{"when": "ALPHA", "error": {"status": 500, "message": "server on fire"}}])

    report = run_eval(two_skills, model, MODEL_ID, scripted_items()[:1], runs=1)

    [record] = report.records
    assert record.activated == [] and "server on fire" in record.error
    assert report.per_prompt()[0]["errors"] == 1


@pytest.mark.parametrize("options, words", [({"strategy": "loud"}, "plain or forced"), ({"runs": 0}, "at least one run")])
def test_run_eval_refuses_a_bad_strategy_or_no_runs(two_skills, options, words):
    model = ScriptedModel(responder=keyword_router())

    with pytest.raises(ValueError, match=words):
        run_eval(two_skills, model, MODEL_ID, scripted_items(), **options)
    assert model.requests == []


def test_run_eval_over_the_notebooks_prompt_set_with_the_keyword_router(sample_skills):
    skills = list(Catalog([Source("bundled", str(sample_skills))]).scan().skills)
    items = load_prompt_set(ACTIVATION_SET)
    progress: list[tuple[int, int]] = []

    report = run_eval(skills, ScriptedModel(responder=keyword_router()), MODEL_ID, items, runs=2,
                      on_progress=lambda d, t: progress.append((d, t)))

    assert len(report.records) == 30 and progress[-1] == (30, 30) and len(progress) == 30
    assert report.activation_rate("direct") == 1.0
    assert 0 < report.activation_rate("paraphrase") < 1.0
    assert report.false_positive_rate() == 0.0


# --- the real SDK, through httpx2.MockTransport -------------------------------------------------------------------


class KeywordAPI:
    """Answers the agent's requests like a model would: activate_skill for prompts with the keyword, a direct answer
    otherwise, a final answer after a tool result. Every served usage is recorded."""

    def __init__(self, keyword: str, skill: str):
        self.keyword, self.skill = keyword, skill
        self.served: list[dict] = []
        self.api = FakeMessagesAPI()
        self.api.add(*([self.reply] * 40))

    def reply(self, recorded):
        body = recorded.body
        last = body["messages"][-1]["content"]
        number = len(self.served) + 1
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            answer = text_message("Done.", usage=usage(200 + number, 20 + number))
        elif self.keyword in user_text(body).lower():
            answer = tool_message("activate_skill", {"name": self.skill}, usage=usage(100 + number, 10 + number))
        else:
            answer = text_message("A direct answer.", usage=usage(50 + number, 5 + number))
        self.served.append(answer["usage"])
        return answer


def test_an_eval_through_the_real_sdk_counts_activations_and_sums_the_reported_tokens(two_skills):
    fake = KeywordAPI("oolong", "tea-notes")
    model = AnthropicModel(MODEL_ID, api_key=KEY, http_client=fake.api.client())
    items = [EvalItem("t1", "Write notes for this oolong.", ("tea-notes",)),
             EvalItem("t2", "An oolong from Taiwan: what does it taste like?", ("tea-notes",), category="paraphrase"),
             EvalItem("n1", "Write a haiku about the sea.", (), True, "negative")]

    report = run_eval(two_skills, model, MODEL_ID, items, runs=2)

    assert [(r.item, r.run, r.activated) for r in report.records] == [
        ("t1", 1, ["tea-notes"]), ("t1", 2, ["tea-notes"]), ("t2", 1, ["tea-notes"]), ("t2", 2, ["tea-notes"]),
        ("n1", 1, []), ("n1", 2, [])]
    assert [r.calls for r in report.records] == [2, 2, 2, 2, 1, 1]
    assert len(fake.api.requests) == 10 == len(fake.served)
    totals = report.totals()
    assert totals["calls"] == 10 and totals["runs"] == 6
    assert totals["input_tokens"] == sum(u["input_tokens"] for u in fake.served)
    assert totals["output_tokens"] == sum(u["output_tokens"] for u in fake.served)
    for record in report.records:
        assert record.error is None
    sent = fake.api.requests[0]
    assert sent.method == "POST" and sent.path == "/v1/messages"
    body = sent.body
    assert body["model"] == MODEL_ID
    assert body["tools"] == tool_definitions(["tea-notes", "unit-converter"])
    assert body["system"][0]["text"].startswith(SYSTEM_INSTRUCTIONS + "\n\n<available_skills>")
    assert report.activation_rate("direct") == report.activation_rate("paraphrase") == 1.0
    assert report.false_positive_rate() == 0.0


# --- behaviour evals --------------------------------------------------------------------------------------------


BEHAVIOUR_SET = """
- skills: [tea-notes]
  query: Write tasting notes for this oolong tea.
  expected_behavior:
    - Names the tea it tasted
    - Describes the aroma
- skills: [unit-converter]
  query: Convert these units of measure from imperial to metric.
  expected_behavior:
    - Gives the result in kilometres
- skills: [tea-notes]
  query: An item with no expected behaviour is not judged.
"""


def judged(*results: tuple[str, bool, str]) -> dict:
    return {"tool_use": [{"name": JUDGE_TOOL_NAME,
                          "input": {"results": [{"behavior": b, "passed": p, "reason": r} for b, p, r in results]}}]}


def is_judge(request: dict) -> bool:
    return bool(request.get("tool_choice")) and "Judge the run" in json.dumps(request)


def agent_requests(model: ScriptedModel, words: str) -> list[dict]:
    return [r for r in model.requests if not is_judge(r) and words in user_text(r)]


def listed(request: dict) -> list[str]:
    return request["tools"][0]["input_schema"]["properties"]["name"]["enum"]


def test_behaviour_evals_judge_each_item_with_and_without_its_skill(tmp_path, two_skills):
    items = load_prompt_set(write(tmp_path / "behaviour.yaml", BEHAVIOUR_SET))
    judge_turns = [
        # oolong, with the skill: the run activated tea-notes (only the with-run's transcript names it)
        {"when": ["Judge the run", "oolong", "tea-notes"], **judged(("Names the tea it tasted", True, "it says oolong"),
                                                                    ("Describes the aroma", True, "orchid"))},
        # oolong, without it: the router found nothing and answered directly
        {"when": ["Judge the run", "oolong", "I can answer that directly"],
         **judged(("Names the tea it tasted", True, "it says oolong"), ("Describes the aroma", False, "no aroma"))},
        # units, with the skill: the judge answers in text, not through the tool
        {"when": ["Judge the run", "imperial", "unit-converter"], "text": "Looks fine to me: pass."},
        # units, without it: the tool, but an empty reason (the schema wants one)
        {"when": ["Judge the run", "imperial", "I can answer that directly"],
         **judged(("Gives the result in kilometres", True, ""))},
    ]
    model = ScriptedModel(judge_turns, responder=keyword_router())

    table = behaviour_evals(two_skills, model, MODEL_ID, items)

    assert model.remaining == 0  # every judgement was asked for, once
    assert set(table) == {"tea-notes", "unit-converter"}
    tea = table["tea-notes"]
    assert tea["with"] == [2, 2] and tea["without"] == [1, 2] and tea["unjudged"] == 0
    assert tea["with_rate"] == 1.0 and tea["without_rate"] == 0.5
    assert tea["reasons"] == ["1 with: pass: Names the tea it tasted: it says oolong", "1 with: pass: Describes the aroma: orchid",
                              "1 without: pass: Names the tea it tasted: it says oolong",
                              "1 without: fail: Describes the aroma: no aroma"]
    units = table["unit-converter"]  # judged in text, then with invalid input: unjudged, never a pass
    assert units["with"] == [0, 0] and units["without"] == [0, 0] and units["unjudged"] == 2
    assert units["with_rate"] is None and units["without_rate"] is None and units["reasons"] == []
    # the item without expected behaviours was never run
    assert agent_requests(model, "no expected behaviour") == []


def test_the_without_run_does_not_offer_the_expected_skill(tmp_path, two_skills):
    items = load_prompt_set(write(tmp_path / "behaviour.yaml", BEHAVIOUR_SET))[:1]
    model = ScriptedModel(responder=keyword_router())  # the judge gets the router's text: unjudged

    table = behaviour_evals(two_skills, model, MODEL_ID, items)

    runs = [r for r in agent_requests(model, "oolong") if len(r["messages"]) == 1]
    assert len(runs) == 2  # with, then without
    with_run, without_run = runs
    assert listed(with_run) == ["tea-notes", "unit-converter"] and "<name>\ntea-notes\n</name>" in with_run["system"][0]["text"]
    assert listed(without_run) == ["unit-converter"]
    assert "tea-notes" not in without_run["system"][0]["text"]
    assert table["tea-notes"]["unjudged"] == 2 and table["tea-notes"]["with_rate"] is None


def test_the_judge_is_asked_through_the_record_judgement_tool_with_the_behaviours_and_the_transcript(tmp_path, two_skills):
    items = load_prompt_set(write(tmp_path / "behaviour.yaml", BEHAVIOUR_SET))[:1]
    model = ScriptedModel(responder=keyword_router())

    behaviour_evals(two_skills, model, MODEL_ID, items)

    judges = [r for r in model.requests if is_judge(r)]
    assert len(judges) == 2
    for request in judges:
        assert request["tools"] == [JUDGE_TOOL]
        assert request["tool_choice"] == {"type": "tool", "name": JUDGE_TOOL_NAME}
        assert request["model"] == MODEL_ID
        prompt = request["messages"][0]["content"]
        assert "## Judge the run" in prompt and "Write tasting notes for this oolong tea." in prompt
        assert "1. Names the tea it tasted\n2. Describes the aroma" in prompt
    assert 'called activate_skill {"name": "tea-notes"}' in judges[0]["messages"][0]["content"]
    assert "called activate_skill" not in judges[1]["messages"][0]["content"]
    assert JUDGE_TOOL["input_schema"]["properties"]["results"]["type"] == "array"


@pytest.mark.parametrize("answer", [
    {"text": "All pass."},
    {"tool_use": [{"name": "some_other_tool", "input": {"results": []}}]},
    {"tool_use": [{"name": JUDGE_TOOL_NAME, "input": {"results": "all passed"}}]},
    {"tool_use": [{"name": JUDGE_TOOL_NAME, "input": {"verdict": "pass"}}]},
    {"tool_use": [{"name": JUDGE_TOOL_NAME, "input": {"results": [{"behavior": "Names the tea it tasted", "passed": "maybe",
                                                                   "reason": "unsure"}]}}]},
    {"error": {"status": 529, "message": "overloaded"}},
])
def test_a_judge_that_does_not_answer_through_the_schema_counts_as_unjudged_never_as_a_pass(tmp_path, two_skills, answer):
    items = load_prompt_set(write(tmp_path / "behaviour.yaml", BEHAVIOUR_SET))[:1]
    turns = [{"when": ["Judge the run", "oolong"], **answer}, {"when": ["Judge the run", "oolong"], **answer}]
    model = ScriptedModel(turns, responder=keyword_router())

    table = behaviour_evals(two_skills, model, MODEL_ID, items)

    tea = table["tea-notes"]
    assert tea["unjudged"] == 2 and tea["with"] == [0, 0] and tea["without"] == [0, 0]
    assert tea["with_rate"] is None and tea["without_rate"] is None


def test_a_judgement_that_skips_an_expected_behaviour_is_not_a_full_pass(tmp_path, two_skills):
    items = load_prompt_set(write(tmp_path / "behaviour.yaml", BEHAVIOUR_SET))[:1]
    partial = judged(("Names the tea it tasted", True, "it says oolong"))  # "Describes the aroma" never judged
    model = ScriptedModel([{"when": ["Judge the run", "oolong"], **partial}] * 2, responder=keyword_router())

    table = behaviour_evals(two_skills, model, MODEL_ID, items)

    assert table["tea-notes"]["with_rate"] != 1.0


# --- %skills eval over the notebook's prompt set ------------------------------------------------------------------


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    (tmp_path / "evals").mkdir()
    shutil.copy(ACTIVATION_SET, tmp_path / "evals" / "activation.yaml")
    with registered_magics(ip) as instance:
        ip.run_line_magic("skills", "model keywords")
        yield instance


def skills_eval(ip, line: str) -> EvalView:
    return ip.run_line_magic("skills", f"eval {line}")


def chart_of(html: str) -> ET.Element:
    start, end = html.index("<svg"), html.index("</svg>") + len("</svg>")
    return ET.fromstring(html[start:end])


def bars(svg: ET.Element) -> list[str]:
    """The bars' titles ("label: rate"), in drawing order; legend squares have no title."""
    return [rect.find(f"{SVG}title").text for rect in svg.iter(f"{SVG}rect") if rect.find(f"{SVG}title") is not None]


V2_CSV_PROFILE = """---
name: csv-profile
description: Profiles a CSV, TSV or spreadsheet export before analysis - row and column counts, column types, empty cells and odd columns. Use when the user asks what is inside a table or data file, or before analysing one whose structure is unknown.
---

# CSV profile

Report the shape, the column types and the missing values.
"""


def test_the_full_report_of_the_notebooks_prompt_set(ip, magics):
    view = skills_eval(ip, "evals/activation.yaml --runs 2")

    assert isinstance(view, EvalView)
    text = view.text()
    lines = text.splitlines()
    assert lines[0].startswith("plain: activation direct 100% (95% CI 72-100%), paraphrase 20% (6-51%); false positives 0% "
                               "(0-28%); wrong skill 0% (0-16%); 30 runs, 42 calls, 0 input / 0 output tokens")
    assert lines[1] == ("plain: per-prompt rates over 2 runs each: activation, direct 100% on every prompt; "
                        "activation, paraphrase 0% to 100% (sd 45 points); false positives 0% on every prompt")
    assert lines[2] == ""
    skill_table = lines[3:10]
    assert skill_table[0].split() == ["skill", "precision", "(plain)", "recall", "(plain)", "lint"]
    assert [row.split()[0] for row in skill_table[1:]] == ["claim-verification", "csv-profile", "deep-research",
                                                           "lab-notebook-entry", "scientific-method",
                                                           "source-verification"]
    assert all(row.split()[-1] == "clean" for row in skill_table[1:])  # the sample skills lint clean
    assert "csv-profile          100% (34-100%)     50% (15-85%)    clean" in text  # each rate with its interval
    prompt_table = lines[11:]
    assert prompt_table[0].split() == ["id", "category", "expected", "activated", "(plain)"]
    assert [row.split()[0] for row in prompt_table[1:]] == [f"{c}{n}" for c in "DPN" for n in range(1, 6)]
    assert prompt_table[1].split() == ["D1", "direct", "csv-profile", "csv-profile", "2/2"]
    assert prompt_table[6].split() == ["P1", "paraphrase", "csv-profile", "none", "0/2"]
    assert prompt_table[11].split() == ["N1", "negative", "(none)", "none", "0/2"]

    bundle, metadata = view._repr_mimebundle_()
    assert {"text/plain", "text/html", EVAL_MIME} <= set(bundle)
    assert "seconds" in metadata[EVAL_MIME] and "seconds" not in json.dumps(bundle[EVAL_MIME])
    data = bundle[EVAL_MIME]
    [report] = data["reports"]
    assert report["label"] == "plain"
    assert report["activation"] == {"direct": 1.0, "paraphrase": 0.2}
    assert report["false_positive_rate"] == 0.0 and report["wrong_skill_rate"] == 0.0
    assert report["totals"] == {"runs": 30, "calls": 42, "input_tokens": 0, "output_tokens": 0}
    assert without_intervals(report["per_skill"]["csv-profile"]) == {"tp": 2, "fp": 0, "fn": 2, "precision": 1.0, "recall": 0.5}
    assert report["per_skill"]["csv-profile"]["recall_interval"] == pytest.approx([0.1500, 0.8500], abs=1e-4)
    assert [row["id"] for row in report["per_prompt"]] == [row.split()[0] for row in prompt_table[1:]]
    assert report["per_prompt"][0]["activated"] == {"csv-profile": 2} and report["per_prompt"][0]["runs"] == 2
    assert data["lint"] == {name: [] for name in ["claim-verification", "csv-profile", "deep-research",
                                                  "lab-notebook-entry", "scientific-method", "source-verification"]}
    json.dumps(data)

    html = bundle["text/html"]
    assert html.count("<svg") == 1
    assert bars(chart_of(html)) == ["plain: 100% (95% CI 72-100%)", "plain: 20% (95% CI 6-51%)",
                                    "plain: 0% (95% CI 0-28%)"]  # one bar per category, with its interval
    assert len(list(chart_of(html).iter(f"{SVG}path"))) == 3  # an error bar on each
    # issue 15: cells carry an inline left-alignment style, so the cell is matched up to its closing tag
    assert "<table>" in html and ">D1</td>" in html and "<td style=" in html and "activation direct 100%" in html


def test_compare_forced_gives_two_reports_side_by_side(ip, magics):
    view = skills_eval(ip, "evals/activation.yaml --runs 1 --compare forced")

    plain, forced = view.reports
    assert (plain.label, forced.label) == ("plain", "forced")
    assert forced.activation_rate("paraphrase") > plain.activation_rate("paraphrase")
    lines = view.text().splitlines()
    assert lines[0].startswith("plain: activation direct 100% (95% CI 57-100%), paraphrase 20% (4-62%)")
    assert lines[1].startswith("forced: activation direct 100% (95% CI 57-100%), paraphrase ")
    # issue 16: where the two differ is said, prompt by prompt
    assert lines[2].startswith("activation differs between plain and forced on ") and set(view.differences()) <= {
        "P1", "P2", "P3", "P4", "P5", "N1", "N2", "N3", "N4", "N5"} and view.differences()
    # issue 17: per category and overall, the difference with its interval and the exact test, in plain words
    assert [line.split(":")[0] for line in lines[3:7]] == ["activation, direct", "activation, paraphrase", "false positives",
                                                           "overall (runs that did the right thing)"]
    assert lines[3] == ("activation, direct: forced 100% vs plain 100%, +0 points (95% CI -43 to +43), p = 1.00 "
                        "(Fisher's exact test): no evidence of a difference")
    assert set(view.comparison()) == {"direct", "paraphrase", "negative", "overall"}
    assert view.data()["comparison"]["direct"]["p_value"] == 1.0
    assert lines[7] == "" and "precision (plain)" in lines[8] and "precision (forced)" in lines[8] and lines[8].endswith("lint")
    assert "activated (plain)" in view.text() and "activated (forced)" in view.text() and "compared" in view.text()
    titles = bars(chart_of(view.html()))
    assert len(titles) == 6  # three categories, two reports
    assert [t.split(":")[0] for t in titles] == ["plain", "forced"] * 3
    assert [r["label"] for r in view.data()["reports"]] == ["plain", "forced"]
    forced_prompts = [r for r in magics.session.model_client.requests if FORCED_PREAMBLE in user_text(r)]
    assert len(forced_prompts) >= 15


def test_compare_a_folder_runs_its_version_of_a_skill_in_place_of_the_catalogs(ip, magics, tmp_path):
    write(tmp_path / "v2" / "csv-profile" / "SKILL.md", V2_CSV_PROFILE)

    view = skills_eval(ip, "evals/activation.yaml --runs 1 --compare v2")

    catalog, other = view.reports
    assert (catalog.label, other.label) == ("catalog", "v2")
    assert catalog.per_skill()["csv-profile"]["recall"] == 0.5 and other.per_skill()["csv-profile"]["recall"] == 1.0
    assert view.text().splitlines()[1].startswith("v2: activation direct 100% (95% CI 57-100%), paraphrase 40% (12-77%)")
    assert [t.split(":")[0] for t in bars(chart_of(view.html()))] == ["catalog", "v2"] * 3
    compared = [r for r in magics.session.model_client.requests if "Profiles a CSV, TSV or spreadsheet export" in
                r["system"][0]["text"]]
    assert len(compared) >= 15  # the second report's catalog held the folder's version
    assert magics.session.skill("csv-profile").description.startswith("Profile a CSV or TSV file")  # catalog untouched


def test_chart_writes_a_valid_svg_file(ip, magics, tmp_path):
    view = skills_eval(ip, "evals/activation.yaml --runs 1 --compare forced --chart out.svg")

    saved = (tmp_path / "out.svg").read_text(encoding="utf-8")
    assert saved == view.chart_svg() == activation_chart_svg(view.reports)
    root = ET.fromstring(saved)
    assert root.tag == f"{SVG}svg"
    assert len(bars(root)) == 6
    assert [t.text for t in root.iter(f"{SVG}text") if t.text in ("plain", "forced")] == ["plain", "forced"]  # legend


def test_an_awkward_label_still_makes_a_valid_svg(tmp_path):
    report = EvalReport("<v2> & 'friends'", list(ITEMS), list(RECORDS), runs=2)

    root = ET.fromstring(activation_chart_svg([report]))

    assert bars(root) == ["<v2> & 'friends': 50% (95% CI 15-85%)", "<v2> & 'friends': 100% (95% CI 21-100%)",
                          "<v2> & 'friends': 50% (95% CI 9-91%)"]


class Shown(list):
    def __call__(self, *objects, **kwargs):
        self.extend(objects)


def test_with_a_kernel_a_progress_bar_is_shown_and_reaches_its_max(ip, magics, monkeypatch):
    import ipywidgets

    shown = Shown()
    monkeypatch.setattr("IPython.display.display", shown)
    monkeypatch.setattr(ip, "kernel", types.SimpleNamespace(_allow_stdin=False), raising=False)

    view = skills_eval(ip, "evals/activation.yaml --runs 2")

    [bar] = shown
    assert isinstance(bar, ipywidgets.IntProgress)
    assert bar.max == 30 and bar.value == 30 and bar.description == "30/30"
    assert view.reports[0].totals()["runs"] == 30


def test_in_a_plain_shell_no_progress_bar_is_shown(ip, magics, monkeypatch):
    shown = Shown()
    monkeypatch.setattr("IPython.display.display", shown)
    assert getattr(ip, "kernel", None) is None

    skills_eval(ip, "evals/activation.yaml --runs 1")

    assert shown == []


@pytest.mark.parametrize("line, words", [
    ("missing.yaml", "missing.yaml"),
    ("evals/activation.yaml --runs 0", "--runs"),
    ("evals/activation.yaml --runs many", "--runs"),
    ("evals/activation.yaml --strategy loud", "--strategy"),
    ("evals/activation.yaml --compare no-such-folder", "no-such-folder"),
    ("", "the following arguments are required"),
    ("bad.yaml", "item 1 has an empty prompt"),
])
def test_bad_eval_options_are_usage_errors(ip, magics, tmp_path, line, words):
    write(tmp_path / "bad.yaml", "- prompt: ''\n")
    requests_before = len(magics.session.model_client.requests)

    with pytest.raises(UsageError) as raised:
        skills_eval(ip, line)

    assert words in str(raised.value)
    assert len(magics.session.model_client.requests) == requests_before  # nothing ran


def test_a_prompt_set_that_is_not_yaml_is_a_usage_error(ip, magics, tmp_path):
    write(tmp_path / "broken.yaml", "prompts:\n  - {id: a, prompt: 'unclosed'\n")

    with pytest.raises(UsageError, match="broken.yaml is not valid YAML"):
        skills_eval(ip, "broken.yaml")
    assert magics.session.model_client.requests == []


def test_behaviour_through_the_magic_shows_pass_rates_with_and_without_the_skill(ip, magics, tmp_path):
    write(tmp_path / "behaviour.yaml", """
- skills: [csv-profile]
  query: Profile this CSV file - row count, column types and missing values.
  expected_behavior: [Reports the row count, Reports the column types]
""")
    model = ScriptedModel([
        {"when": ["Judge the run", "csv-profile"], **judged(("Reports the row count", True, "120 rows"),
                                                            ("Reports the column types", False, "no types"))},
        {"when": ["Judge the run"], "text": "I would rather not use the tool."},
    ], responder=keyword_router())
    magics.session.model_client = model

    view = skills_eval(ip, "behaviour.yaml --runs 1 --behaviour")

    [report] = view.reports
    assert report.records[0].activated == ["csv-profile"]
    row = report.behaviour["csv-profile"]
    assert row["with"] == [1, 2] and row["without"] == [0, 0] and row["unjudged"] == 1
    assert view.text().splitlines()[-1] == ("plain: csv-profile: behaviours passed with the skill 50%, without it - "
                                            "(1 unjudged)")
    assert "<li>plain: csv-profile: behaviours passed with the skill 50%" in view.html()
    assert view.data()["reports"][0]["behaviour"]["csv-profile"]["with_rate"] == 0.5
    assert model.remaining == 0


def test_without_any_model_the_eval_explains_how_to_get_one(ip, magics):
    ip.run_line_magic("skills", "model auto")

    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        skills_eval(ip, "evals/activation.yaml")


# --- %skills lint and skills-magic lint ---------------------------------------------------------------------------


def test_skills_lint_shows_every_skill_and_one_skill(ip, magics, tmp_path):
    make_skill(tmp_path / "extra" / "data-helper", description="I help you with data.")
    ip.run_line_magic("skills", "add extra")

    view = ip.run_line_magic("skills", "lint")

    assert isinstance(view, LintView)
    data = view._repr_mimebundle_()[0][LINT_MIME]
    assert sorted(data["skills"]) == ["claim-verification", "csv-profile", "data-helper", "deep-research",
                                      "lab-notebook-entry", "scientific-method", "source-verification"]
    assert [f["rule"] for f in data["skills"]["data-helper"]] == ["too-short", "third-person", "what-and-when"]
    assert data["skills"]["csv-profile"] == []
    text = view.text()
    assert "csv-profile: clean" in text and "data-helper: warning [third-person]" in text
    assert text.splitlines()[-1] == "6 of 7 descriptions clean"

    one = ip.run_line_magic("skills", "lint data-helper")
    assert list(one.data()["skills"]) == ["data-helper"]
    assert one.text().splitlines()[-1] == "0 of 1 descriptions clean"
    clean = ip.run_line_magic("skills", "lint csv-profile")
    assert clean.text() == "csv-profile: clean\n1 of 1 descriptions clean"


def test_the_eval_reports_lint_column_shows_findings(ip, magics, tmp_path):
    make_skill(tmp_path / "extra" / "data-helper", description="I help you with data.")
    ip.run_line_magic("skills", "add extra")

    view = skills_eval(ip, "evals/activation.yaml --runs 1")

    row = next(line for line in view.text().splitlines() if line.startswith("data-helper"))
    assert row.endswith("too-short, third-person, what-and-when")
    assert view.data()["lint"]["data-helper"] == ["too-short", "third-person", "what-and-when"]


def test_linting_an_unknown_skill_is_a_usage_error_with_the_way_out(ip, magics):
    with pytest.raises(UsageError, match="no skill named 'nope'"):
        ip.run_line_magic("skills", "lint nope")


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SKILLS_MAGIC_SOURCES", "SKILLS_MAGIC_PATH")}
    env["PYTHONUTF8"] = "1"
    return subprocess.run([sys.executable, "-m", "skills_magic", "lint", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def test_the_lint_command_exits_0_on_the_sample_skills():
    result = cli("sample-skills")

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "6 of 6 descriptions clean"
    assert "clean: sample-skills/csv-profile/SKILL.md" in result.stdout


def test_the_lint_command_exits_1_on_the_messy_skills_and_names_the_rules():
    result = cli("examples/messy-skills")

    assert result.returncode == 1
    assert "examples/messy-skills/long-description/SKILL.md: error [too-long]" in result.stdout
    assert "examples/messy-skills/no-description/SKILL.md: error [empty]" in result.stdout
    assert "[unloadable]" in result.stdout
    assert result.stdout.splitlines()[-1].endswith("descriptions clean")


def test_the_lint_commands_json_is_one_object_keyed_by_path():
    result = cli("--json", "sample-skills/csv-profile", "examples/messy-skills")

    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["sample-skills/csv-profile/SKILL.md"] == []
    assert [f["rule"] for f in data["examples/messy-skills/long-description/SKILL.md"]] == ["too-long"]
    assert all(set(f) == {"rule", "severity", "message"} for found in data.values() for f in found)
    clean = cli("--json", "sample-skills")
    assert clean.returncode == 0 and all(found == [] for found in json.loads(clean.stdout).values())


@pytest.mark.parametrize("args", [[], ["no-such-folder"], ["--bogus", "sample-skills"]])
def test_the_lint_command_exits_2_on_a_usage_error(args):
    result = cli(*args)

    assert result.returncode == 2
    assert result.stdout == ""
