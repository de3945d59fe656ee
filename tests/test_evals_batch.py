"""`%skills eval FILE --batch`: first-turn activation evals through the Message Batches API, end to end against the
fake batch service of tests/test_batch.py (FakeBatches over an httpx2 MockTransport, or FakeBatchServer on a socket).

Nothing sleeps: the fake batches end at the first retrieve (polls_before_end=0), or the poll interval is 0 and the
`sleep` given to run_batch_eval only records its calls.
"""

from __future__ import annotations

import json
import types

import pytest
from fake_anthropic import text_message, tool_message, usage
from notebook_setup import notebook_folder, register_magics, registered_magics
from IPython.core.error import UsageError
from test_batch import KEY, FakeBatches, FakeBatchServer, Recorder, errored

from skills_magic.runs.agent import Agent
from skills_magic.notebook.views import EvalView
from skills_magic.runs.evals import FORCED_PREAMBLE, EvalItem, load_prompt_set, prompt_text
from skills_magic.runs.batch_evals import custom_id, run_batch_eval
from skills_magic.notebook.magics import SkillsMagics, unregister
from skills_magic.models.anthropic import DEFAULT_MODEL

EVAL_MIME = "application/vnd.skills-magic.eval+json"
PROMPTS = """prompts:
  - {id: D1, category: direct, expected: [csv-profile], prompt: "Profile this CSV file: columns and missing values."}
  - {id: P1, category: paraphrase, expected: [lab-notebook-entry], prompt: "Keep a notebook of what we ran today."}
  - {id: D2, category: direct, expected: [csv-profile], prompt: "Ask the teapot what is in data.csv."}
  - {id: N1, category: negative, expect_none: true, prompt: "Write a haiku about the sea."}
"""
IDS = ["p0-r1", "p0-r2", "p1-r1", "p1-r2", "p2-r1", "p2-r2", "p3-r1", "p3-r2"]


pytestmark = pytest.mark.usefixtures("machine_setup_forgotten")


def prompt_of(params: dict) -> str:
    return "".join(b["text"] for b in params["messages"][0]["content"])


def answers(custom_id: str, params: dict, number: int, *, flaky: tuple[str, ...] = ("p1-r1",),
            broken: tuple[str, ...] = ()) -> dict:
    """What the fake model's first turn does: activate csv-profile for a CSV prompt, the wrong skill for the notebook
    paraphrase, an unknown skill for the teapot, a direct answer otherwise. `flaky` ids fail in the first batch only,
    `broken` ids in every batch."""
    if custom_id in broken or (custom_id in flaky and number == 1):
        return errored("overloaded_error", "Overloaded")
    text = prompt_of(params)
    n = int(custom_id[1]) * 10 + int(custom_id[-1])  # distinct usage per request, to check the sums
    if "CSV" in text:
        message = tool_message("activate_skill", {"name": "csv-profile"}, "Profiling it.", model=params["model"],
                               usage=usage(1000 + n, 40 + n))
    elif "notebook" in text:
        message = tool_message("activate_skill", {"name": "scientific-method"}, model=params["model"], usage=usage(900 + n, 30 + n))
    elif "teapot" in text:
        message = tool_message("activate_skill", {"name": "teapot"}, model=params["model"], usage=usage(800 + n, 20 + n))
    else:
        message = text_message("Waves fold on stone.", model=params["model"], usage=usage(700 + n, 10 + n))
    return {"type": "succeeded", "message": message}


def served_usage(fake: FakeBatches) -> tuple[int, int]:
    """The usage of every succeeded line the fake served, counted once per custom id (its last success)."""
    final: dict[str, dict] = {}
    for batch in fake.batches.values():
        for line in batch["lines"]:
            if line["result"]["type"] == "succeeded":
                final[line["custom_id"]] = line["result"]["message"]["usage"]
    return sum(u["input_tokens"] for u in final.values()), sum(u["output_tokens"] for u in final.values())


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    (tmp_path / "set.yaml").write_text(PROMPTS, encoding="utf-8")
    with registered_magics(ip) as instance:
        yield instance


def new_magics(ip) -> SkillsMagics:
    """A fresh session, as after a kernel restart."""
    unregister(ip)
    return register_magics(ip)


def batch_eval(ip, line: str) -> EvalView:
    return ip.run_line_magic("skills", f"eval {line}")


def test_every_prompt_and_run_is_one_batch_request_with_the_first_turns_params(ip, magics):
    fake = FakeBatches(answers, polls_before_end=0)
    magics.session.model_client = fake.model()

    batch_eval(ip, "set.yaml --batch --runs 2")

    first = fake.created[0]["requests"]
    assert [r["custom_id"] for r in first] == IDS
    items = load_prompt_set("set.yaml")
    agent = Agent(magics.session.scan().skills, magics.session.model_client, DEFAULT_MODEL, show_path=str, max_turns=1)
    for request in first:
        index, run = int(request["custom_id"][1]), int(request["custom_id"][-1])
        assert request["custom_id"] == custom_id(index, run)
        params = request["params"]
        assert params == agent.request([{"role": "user", "content": [{"type": "text", "text": items[index].prompt}]}])
        assert params["model"] == DEFAULT_MODEL and "stream" not in params
        assert "<available_skills>" in params["system"][0]["text"]
        assert "<name>\ncsv-profile\n</name>" in params["system"][0]["text"]
        assert params["tools"][0]["name"] == "activate_skill"
        assert params["tools"][0]["input_schema"]["properties"]["name"]["enum"] == [
            "claim-verification", "csv-profile", "deep-research", "lab-notebook-entry", "scientific-method",
            "source-verification"]
        assert prompt_of(params) == items[index].prompt
    assert fake.create_calls() == 2  # the batch, then one retry batch for the item that errored


def test_activation_comes_from_each_results_activate_skill_and_an_errored_item_is_retried_once(ip, magics):
    fake = FakeBatches(answers, polls_before_end=0, extra_lines=[("p9-r9", {"type": "expired"})])
    magics.session.model_client = fake.model()

    view = batch_eval(ip, "set.yaml --batch --runs 2")

    [report] = view.reports
    assert [(r.item, r.run, r.activated, r.error) for r in report.records] == [
        ("D1", 1, ["csv-profile"], None), ("D1", 2, ["csv-profile"], None),
        ("P1", 1, ["scientific-method"], None), ("P1", 2, ["scientific-method"], None),  # p1-r1 after its retry
        ("D2", 1, [], None), ("D2", 2, [], None),  # an unknown skill name is no activation
        ("N1", 1, [], None), ("N1", 2, [], None)]
    assert fake.created_ids() == [IDS, ["p1-r1"]]  # the retry holds only the errored item
    assert report.batch_ids == ["msgbatch_fake_0001", "msgbatch_fake_0002"]
    assert report.activation_rate("direct") == 0.5 and report.activation_rate("paraphrase") == 0.0
    assert report.wrong_skill_rate() == 2 / 6 and report.false_positive_rate() == 0.0
    assert {k: v for k, v in report.per_skill()["scientific-method"].items() if not k.endswith("_interval")} == {
        "tp": 0, "fp": 2, "fn": 0, "precision": 0.0, "recall": None}
    totals = report.totals()
    assert totals["runs"] == 8 and totals["calls"] == 8  # one first turn per (prompt, run)
    assert (totals["input_tokens"], totals["output_tokens"]) == served_usage(fake)
    headline = view.text().splitlines()[0]
    assert headline.endswith("; batches msgbatch_fake_0001, msgbatch_fake_0002")
    assert view._repr_mimebundle_()[0][EVAL_MIME]["reports"][0]["batch_ids"] == ["msgbatch_fake_0001", "msgbatch_fake_0002"]


def test_results_out_of_order_are_matched_to_their_prompts_by_custom_id(ip, magics):
    fake = FakeBatches(answers, polls_before_end=0)
    magics.session.model_client = fake.model()

    view = batch_eval(ip, "set.yaml --batch --runs 1")

    served = [line["custom_id"] for line in fake.batches["msgbatch_fake_0001"]["lines"]]
    assert served == ["p3-r1", "p2-r1", "p1-r1", "p0-r1"]  # the fake served them in reverse
    assert [(r.item, r.activated) for r in view.reports[0].records] == [
        ("D1", ["csv-profile"]), ("P1", ["scientific-method"]), ("D2", []), ("N1", [])]


def test_an_item_that_fails_twice_is_reported_as_an_error_not_an_activation(ip, magics):
    fake = FakeBatches(lambda cid, params, number: answers(cid, params, number, flaky=(), broken=("p0-r1",)),
                       polls_before_end=0)
    magics.session.model_client = fake.model()

    view = batch_eval(ip, "set.yaml --batch --runs 1")

    record = view.reports[0].records[0]
    assert record.item == "D1" and record.activated == [] and record.calls == 0
    assert "overloaded_error" in record.error and "after one retry" in record.error
    assert view.reports[0].per_prompt()[0]["errors"] == 1
    assert view.reports[0].activation_rate("direct") == 0.0  # a failed run is a miss, never a hit
    assert fake.created_ids() == [IDS[::2], ["p0-r1"]]


def test_resume_creates_no_new_batch_and_gives_the_same_report(ip, magics):
    fake = FakeBatches(lambda cid, params, number: answers(cid, params, number, flaky=()), polls_before_end=0)
    magics.session.model_client = fake.model()
    first = batch_eval(ip, "set.yaml --batch --runs 2")
    [batch_id] = first.reports[0].batch_ids
    assert fake.create_calls() == 1

    restarted = new_magics(ip)
    restarted.session.model_client = fake.model()
    again = batch_eval(ip, f"set.yaml --batch --runs 2 --resume {batch_id}")

    assert fake.create_calls() == 1  # nothing created, nothing paid twice
    assert again.data() == first.data()
    assert again.reports[0].batch_ids == [batch_id]
    assert ("GET", f"/v1/messages/batches/{batch_id}/results") in fake.calls[-2:]


def test_resuming_an_unknown_batch_is_a_usage_error_that_names_it(ip, magics):
    fake = FakeBatches(answers, polls_before_end=0)
    magics.session.model_client = fake.model()

    with pytest.raises(UsageError) as raised:
        batch_eval(ip, "set.yaml --batch --resume msgbatch_never_made")

    assert "msgbatch_never_made" in str(raised.value) and KEY not in str(raised.value)
    assert fake.create_calls() == 0


def test_compare_forced_with_batch_makes_one_batch_per_report(ip, magics):
    fake = FakeBatches(lambda cid, params, number: answers(cid, params, number, flaky=()), polls_before_end=0)
    magics.session.model_client = fake.model()

    view = batch_eval(ip, "set.yaml --batch --runs 1 --compare forced")

    assert [r.label for r in view.reports] == ["plain", "forced"]
    assert [r.batch_ids for r in view.reports] == [["msgbatch_fake_0001"], ["msgbatch_fake_0002"]]
    plain, forced = (body["requests"] for body in fake.created)
    assert not any(prompt_of(r["params"]).startswith(FORCED_PREAMBLE) for r in plain)
    assert all(prompt_of(r["params"]).startswith(FORCED_PREAMBLE) for r in forced)


def test_with_a_kernel_the_progress_bar_reaches_its_max(ip, magics, monkeypatch):
    import ipywidgets

    shown: list = []
    monkeypatch.setattr("IPython.display.display", lambda *objects, **kwargs: shown.extend(objects))
    monkeypatch.setattr(ip, "kernel", types.SimpleNamespace(_allow_stdin=False), raising=False)
    fake = FakeBatches(answers, polls_before_end=0)
    magics.session.model_client = fake.model()

    batch_eval(ip, "set.yaml --batch --runs 2")

    estimate, bar = shown  # the pre-flight estimate (a billed client's) first, then the bar
    assert estimate.text().startswith("estimate before the eval: 8 requests") and isinstance(bar, ipywidgets.IntProgress)
    assert bar.max == 8 and bar.value == 8 and bar.description == "8/8"


def test_the_whole_path_through_anthropic_base_url_and_a_real_socket(ip, magics, monkeypatch):
    fake = FakeBatches(answers, polls_before_end=0)
    with FakeBatchServer(fake) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        ip.run_line_magic("skills", "model anthropic")
        view = batch_eval(ip, "set.yaml --batch --runs 2 --model claude-test-9")

    [report] = view.reports
    assert [r.activated for r in report.records] == [["csv-profile"]] * 2 + [["scientific-method"]] * 2 + [[]] * 4
    assert report.batch_ids == ["msgbatch_fake_0001", "msgbatch_fake_0002"]
    assert all(r["params"]["model"] == "claude-test-9" for r in fake.created[0]["requests"])
    assert fake.calls[0] == ("POST", "/v1/messages/batches")


def test_run_batch_eval_reports_progress_and_polls_without_sleeping(sample_skills):
    from skills_magic.skills.catalog import Catalog, Source

    skills = list(Catalog([Source("bundled", str(sample_skills))]).scan().skills)
    fake = FakeBatches(lambda cid, params, number: answers(cid, params, number, flaky=()), polls_before_end=2)
    items = [EvalItem("D1", "Profile this CSV file.", ("csv-profile",)), EvalItem("N1", "A haiku.", (), True, "negative")]
    recorder = Recorder()
    progress: list[tuple[int, int]] = []

    report = run_batch_eval(skills, fake.model(), "claude-test-1", items, runs=3, poll_seconds=0, sleep=recorder.sleep,
                            on_progress=lambda done, total: progress.append((done, total)))

    assert recorder.sleeps == [0, 0]
    assert progress == [(0, 6), (0, 6), (6, 6), (6, 6)]  # every retrieve, then the end
    assert report.label == "plain (batch)" and report.runs == 3
    assert [r.activated for r in report.records] == [["csv-profile"]] * 3 + [[]] * 3
    assert json.loads(json.dumps(report.summary()))["batch_ids"] == ["msgbatch_fake_0001"]
    assert [r["params"]["messages"][0]["content"][0]["text"] for r in fake.created[0]["requests"]] == [
        prompt_text(items[0], "plain")] * 3 + [prompt_text(items[1], "plain")] * 3


def test_progress_never_goes_backwards_through_the_retry_round(sample_skills, tmp_path):
    from skills_magic.skills.catalog import Catalog, Source

    skills = list(Catalog([Source("bundled", str(sample_skills))]).scan().skills)
    fake = FakeBatches(answers, polls_before_end=0)
    (tmp_path / "set.yaml").write_text(PROMPTS, encoding="utf-8")
    items = load_prompt_set(tmp_path / "set.yaml")
    progress: list[int] = []

    run_batch_eval(skills, fake.model(), "claude-test-1", items, runs=2, poll_seconds=0, sleep=lambda s: None,
                   on_progress=lambda done, total: progress.append(done))

    assert fake.create_calls() == 2 and progress[-1] == 8
    assert progress == sorted(progress)


@pytest.mark.parametrize("model", ["keywords", "scripted"])
def test_batch_with_the_scripted_model_is_a_clear_usage_error(ip, magics, tmp_path, model):
    (tmp_path / "turns.yaml").write_text("turns: ['Hello.']\n", encoding="utf-8")
    ip.run_line_magic("skills", "model keywords" if model == "keywords" else "model scripted turns.yaml")

    with pytest.raises(UsageError) as raised:
        batch_eval(ip, "set.yaml --batch --runs 1")

    assert "Anthropic" in str(raised.value)
    assert magics.session.model_client.requests == []
