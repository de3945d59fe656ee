"""`%skills improve` (issue 17, point 5): variants chosen on a training split, judged on the held-out one, nothing
written; offline on the keyword model."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from notebook_setup import notebook_folder, registered_magics

from skills_magic.errors import InvalidArgument
from skills_magic.models.scripted import ScriptedModel, keyword_router
from skills_magic.notebook.views.improve import ImproveView
from skills_magic.runs import evals, improve
from skills_magic.skills.catalog import Catalog, Source

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "notebooks" / "evals" / "improve-csv-profile.yaml"
SAMPLES = ROOT / "sample-skills"


def catalog(root: Path = SAMPLES):
    return list(Catalog([Source("bundled", str(root))]).scan().skills)


def keywords() -> ScriptedModel:
    return ScriptedModel(responder=keyword_router(2), source="keyword router")


def test_the_split_is_stratified_fixed_by_the_ids_and_disjoint():
    items = evals.load_prompt_set(PROMPTS)
    train, held = improve.split(items, "csv-profile")
    again_train, again_held = improve.split(list(reversed(items)), "csv-profile")
    assert {i.id for i in train} == {i.id for i in again_train} and {i.id for i in held} == {i.id for i in again_held}
    assert not {i.id for i in train} & {i.id for i in held} and len(train) + len(held) == len(items)
    assert any("csv-profile" in i.expected for i in held) and any(i.expect_none for i in held)
    ranked = sorted((i for i in items if "csv-profile" in i.expected), key=lambda i: hashlib.sha256(i.id.encode()).hexdigest())
    assert ranked[2] in held and ranked[0] in train  # every third of each kind, by hash


def test_improve_chooses_on_training_prompts_judges_on_held_out_ones_and_writes_nothing():
    skill_md = (SAMPLES / "csv-profile" / "SKILL.md").read_bytes()
    report = improve.improve(catalog(), keywords(), "claude-sonnet-5-5", "csv-profile",
                             evals.load_prompt_set(PROMPTS), variants=3)
    assert (SAMPLES / "csv-profile" / "SKILL.md").read_bytes() == skill_md  # never written
    assert len(report.variants) == 3 and all("spreadsheet" in v.description for v in report.variants)
    assert report.best is not report.current and report.best.train.value > report.current.train.value
    assert set(report.held_out_ids).isdisjoint(report.train_ids)
    assert report.current.held_out.positives == report.best.held_out.positives >= 1  # the same held-out prompts
    assert report.improved and report.best.held_out.hits > report.current.held_out.hits
    compared = report.comparison()
    assert compared["p_value"] >= 0.05 and not compared["evidence"]  # three held-out prompts prove nothing
    assert report.cost_usd == 0.0  # the keyword model reports no tokens
    assert report.write_cell.startswith("%%skill write csv-profile\n---\n") and report.best.description in report.write_cell
    text = ImproveView(report).text()
    assert "no evidence of a difference" in text and "held out" in text and "cost: $0.0000" in text
    assert ImproveView(report).data()["chosen"]["description"] == report.best.description


def test_a_set_without_two_prompts_for_the_skill_or_a_model_that_proposes_nothing_is_a_clear_error(tmp_path):
    one = tmp_path / "one.yaml"
    one.write_text("prompts:\n  - {id: A, category: direct, expected: [csv-profile], prompt: Profile this CSV.}\n"
                   "  - {id: B, category: negative, expect_none: true, prompt: Write a haiku.}\n", encoding="utf-8")
    with pytest.raises(improve.ImproveError, match="at least two prompts"):
        improve.improve(catalog(), keywords(), "m", "csv-profile", evals.load_prompt_set(one))
    silent = ScriptedModel(["I would rather not."])
    with pytest.raises(improve.ImproveError, match="proposed no descriptions"):
        improve.improve(catalog(), silent, "m", "csv-profile", evals.load_prompt_set(PROMPTS))
    wrong = ScriptedModel([{"tool_use": [{"name": improve.PROPOSE_TOOL, "input": {"descriptions": "one string"}}]}])
    with pytest.raises(improve.ImproveError, match="does not fit the schema"):
        improve.improve(catalog(), wrong, "m", "csv-profile", evals.load_prompt_set(PROMPTS))
    with pytest.raises(InvalidArgument, match="no skill named"):
        improve.improve(catalog(), keywords(), "m", "no-such-skill", evals.load_prompt_set(PROMPTS))
    with pytest.raises(InvalidArgument, match="--variants"):
        improve.improve(catalog(), keywords(), "m", "csv-profile", evals.load_prompt_set(PROMPTS), variants=50)


def test_the_variant_request_carries_the_training_prompts_only():
    items = evals.load_prompt_set(PROMPTS)
    train, held = improve.split(items, "csv-profile")
    skill = next(s for s in catalog() if s.name == "csv-profile")
    request = improve.proposal_request(skill, train, "m", 3)
    sent = request["messages"][0]["content"]
    assert all(i.prompt in sent for i in train) and not any(i.prompt in sent for i in held)
    assert request["tool_choice"] == {"type": "tool", "name": improve.PROPOSE_TOOL}


def test_percent_skills_improve_through_the_shell(ip, tmp_path, monkeypatch):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "set.yaml").write_text(PROMPTS.read_text(encoding="utf-8"), encoding="utf-8")
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    with registered_magics(ip):
        ip.run_line_magic("skills", "model keywords")
        view = ip.run_line_magic("skills", "improve csv-profile evals/set.yaml --variants 2")
    data = view.data()
    assert data["skill"] == "csv-profile" and len(data["variants"]) == 2 and data["write_cell"]
    assert data["comparison"] is not None and "interval" in data["comparison"]


def test_under_a_cap_improve_stops_before_the_crossing_call_and_keeps_what_it_has():
    from skills_magic.runs.budget import CapReached

    items = evals.load_prompt_set(PROMPTS)
    with pytest.raises(CapReached):  # not even the request for variants fits: nothing is sent
        improve.improve(catalog(), keywords(), "claude-sonnet-5-5", "csv-profile", items, max_cost=0.000001)
    from skills_magic.runs.budget import Budget

    train, _ = improve.split(items, "csv-profile")
    skill = next(s for s in catalog() if s.name == "csv-profile")
    asking = Budget(1.0).call_cost("claude-sonnet-5-5", improve.proposal_request(skill, train, "claude-sonnet-5-5", 3))
    model = keywords()  # a cap the request for variants fits in, and no eval call (max_tokens 4,096) after it
    report = improve.improve(catalog(), model, "claude-sonnet-5-5", "csv-profile", items, max_cost=asking * 1.01)
    assert "cap" in report.note and not report.write_cell  # the variants were asked for; their evaluation stopped
    assert len(model.requests) == 1 and report.variants  # only the request for variants was made
    assert all(v.train is None for v in report.variants) and "not run" in ImproveView(report).text()
