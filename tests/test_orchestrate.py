"""The orchestration primitives: typed stages, parallel and pipeline (overlap, fan-out, barrier), retries,
abstentions, the cost cap, the shared concurrency limit and the run log. Overlap is shown by the order of stage
starts and ends (timestamps from the event hook), never by thresholds on wall time."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from skills_magic.models.prices import cost_of
from skills_magic.models.scripted import ScriptedModel
from skills_magic.runs.budget import Budget
from skills_magic.runs.orchestrate import BARRIER, Abstention, Orchestra, Stage, run

PRICED = "claude-opus-5-5"  # a model with a price, so a cap can be kept


class Note(BaseModel):
    text: str


class Angles(BaseModel):
    angles: list[str]


first = Stage("first", lambda item: f"[{item}/first] summarise", Note)
second = Stage("second", lambda note: f"[{note.text}/second] expand", Note)


def turn(marker: str, tool: str, text: str, delay: float = 0.0) -> dict:
    return {"when": marker, "delay": delay, "tool_use": [{"name": tool, "input": {"text": text}}]}


class Board:
    """The event hook's record: when each (stage, item) started and finished."""

    def __init__(self):
        self.times: dict[tuple[str, str, str], float] = {}

    def __call__(self, kind: str, data: dict) -> None:
        self.times[(kind, data["stage"], data["item"])] = time.perf_counter()

    def at(self, kind: str, stage: str, item: str) -> float:
        return self.times[(kind, stage, item)]


def two_stage_script(first_delays: list[float], second_delays: list[float]) -> ScriptedModel:
    """Item i's first stage answers `i` after first_delays[i]; its second stage after second_delays[i]."""
    turns = [turn(f"[{i}/first]", "record_first", f"{i}", d) for i, d in enumerate(first_delays)]
    turns += [turn(f"[{i}/second]", "record_second", f"{i} expanded", d) for i, d in enumerate(second_delays)]
    return ScriptedModel(turns)


def test_parallel_returns_schema_instances_in_input_order_whatever_order_they_finish():
    model = two_stage_script([0.15, 0.05, 0.0], [])
    board = Board()
    orchestra = Orchestra(model, "scripted", on_event=board)

    results = run(orchestra.parallel([0, 1, 2], first))

    assert [r.text for r in results] == ["0", "1", "2"] and all(isinstance(r, Note) for r in results)
    assert board.at("finished", "first", "2") < board.at("finished", "first", "1") < board.at("finished", "first", "0")
    assert orchestra.calls == 3 and len(model.requests) == 3
    request = model.requests[0]
    assert request["tool_choice"] == {"type": "tool", "name": "record_first"}
    assert [t["name"] for t in request["tools"]] == ["record_first"]
    assert request["tools"][0]["input_schema"] == Note.model_json_schema()


def test_pipeline_moves_each_item_on_without_waiting_for_the_others():
    # item 0 is quick through the first stage and slow through the second; item 1 the other way round
    model = two_stage_script([0.01, 0.3], [0.3, 0.01])
    board = Board()
    orchestra = Orchestra(model, "scripted", on_event=board)

    results = run(orchestra.pipeline([0, 1], first, second))

    assert [r.text for r in results] == ["0 expanded", "1 expanded"]
    # item 0 was in its second stage while item 1 was still in its first: the stages overlapped
    assert board.at("started", "second", "0") < board.at("finished", "first", "1")
    assert board.at("finished", "first", "1") < board.at("finished", "second", "0")


def test_a_barrier_holds_every_item_until_the_last_has_left_the_stage_before_it():
    model = two_stage_script([0.01, 0.3], [0.3, 0.01])
    board = Board()
    orchestra = Orchestra(model, "scripted", on_event=board)

    results = run(orchestra.pipeline([0, 1], first, BARRIER, second))

    assert [r.text for r in results] == ["0 expanded", "1 expanded"]
    last_first_end = max(board.at("finished", "first", i) for i in ("0", "1"))
    assert min(board.at("started", "second", i) for i in ("0", "1")) >= last_first_end


def test_a_stage_fans_out_and_each_value_flows_on_in_order():
    angles = Stage("angles", lambda question: f"[{question}/angles]", Angles, fan_out=lambda a: a.angles)
    fetch = Stage("fetch", lambda angle: f"[{angle}/fetch]", Note)
    turns = [{"when": "[q/angles]", "tool_use": [{"name": "record_angles", "input": {"angles": ["a", "b", "c"]}}]}]
    turns += [turn(f"[{a}/fetch]", "record_fetch", f"source for {a}", d) for a, d in (("a", 0.1), ("b", 0.0), ("c", 0.05))]
    board = Board()

    results = run(Orchestra(ScriptedModel(turns), "scripted", on_event=board).pipeline(["q"], angles, fetch))

    assert [[n.text for n in results[0]]] == [["source for a", "source for b", "source for c"]]
    assert ("finished", "fetch", "0.2") in board.times


def test_a_malformed_answer_is_retried_once_with_the_problem_then_it_is_an_abstention():
    model = ScriptedModel([
        "I would rather write prose.",  # no tool call
        {"tool_use": [{"name": "record_first", "input": {"words": 3}}]},  # not the schema
    ])
    orchestra = Orchestra(model, "scripted")

    [result] = run(orchestra.parallel(["x"], first))

    assert isinstance(result, Abstention) and result.stage == "first" and result.item == "x"
    assert "malformed twice" in result.reason and "text" in result.reason
    assert orchestra.calls == 2 and len(model.requests) == 2
    retry = model.requests[1]["messages"]
    assert [m["role"] for m in retry] == ["user", "assistant", "user"]
    assert "no call to record_first" in retry[2]["content"][0]["text"]


def test_a_retry_that_answers_well_is_the_result_and_an_invalid_call_gets_its_tool_result():
    model = ScriptedModel([
        {"tool_use": [{"name": "record_first", "input": {"txt": "oops"}, "id": "toolu_1"}]},
        {"tool_use": [{"name": "record_first", "input": {"text": "fine"}}]},
    ])

    [result] = run(Orchestra(model, "scripted").parallel(["x"], first))

    assert result == Note(text="fine")
    reply = model.requests[1]["messages"][2]["content"][0]
    assert reply["type"] == "tool_result" and reply["tool_use_id"] == "toolu_1" and reply["is_error"] is True
    assert "text" in reply["content"] and "invalid" in reply["content"]


def test_a_model_error_is_an_abstention_and_the_next_item_still_flows():
    model = ScriptedModel([{"when": "[0/first]", "error": {"status": 529, "message": "overloaded", "kind": "overloaded"}},
                           turn("[1/first]", "record_first", "1"), turn("[1/second]", "record_second", "1 expanded")])

    results = run(Orchestra(model, "scripted").pipeline([0, 1], first, second))

    assert isinstance(results[0], Abstention) and results[0].reason == "overloaded" and results[0].stage == "first"
    assert results[1] == Note(text="1 expanded")


def test_a_cap_stops_further_calls_each_refused_one_an_abstention_with_the_cap_s_note():
    usage = {"input_tokens": 0, "output_tokens": first.max_tokens}
    model = ScriptedModel(responder=lambda request: {"tool_use": [{"name": "record_first", "input": {"text": "ok"}}],
                                                      "usage": usage})
    estimate = Budget(None).call_cost(PRICED, first.request(PRICED, [{"role": "user", "content": first.prompt(0)}]))
    spent = cost_of(PRICED, usage)  # what each call reports
    budget = Budget(1.5 * spent + estimate)  # room for two calls, not three
    orchestra = Orchestra(model, PRICED, limit=1, budget=budget)

    results = run(orchestra.parallel([0, 1, 2, 3], first))

    assert [isinstance(r, Note) for r in results] == [True, True, False, False]
    assert all("stopped before a call that would cross the cap" in r.reason for r in results[2:])
    assert len(model.requests) == 2 and orchestra.calls == 2 and budget.calls == 2
    assert orchestra.usage["output_tokens"] == 2 * first.max_tokens and orchestra.cost_usd > 0


class CountingClient:
    """An async client that counts the calls in flight at once."""

    name = "counting"

    def __init__(self):
        self.in_flight = self.most = self.made = 0

    async def acreate(self, request):
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        self.made += 1
        tool = request["tool_choice"]["name"]
        return {"content": [{"type": "tool_use", "id": "t", "name": tool, "input": {"text": "ok"}}],
                "usage": {"input_tokens": 1, "output_tokens": 1}}


def test_the_concurrency_limit_is_shared_by_every_stage_and_never_exceeded():
    client = CountingClient()
    orchestra = Orchestra(client, "counting", limit=3)

    results = run(orchestra.pipeline(range(10), first, second))

    assert len(results) == 10 and client.made == 20 and orchestra.calls == 20
    assert client.most == 3


def test_nested_parallel_shares_the_limit_claims_times_votes():
    client = CountingClient()
    orchestra = Orchestra(client, "counting", limit=4)

    async def votes(claim):
        return await orchestra.parallel([f"{claim}-{seat}" for seat in range(3)], first)

    results = run(orchestra.parallel(range(5), votes))

    assert [len(r) for r in results] == [3] * 5 and client.made == 15 and client.most == 4


def test_every_call_lands_in_the_run_log(tmp_path):
    from skills_magic.records.db import Database
    from skills_magic.records.runlog import RunLog

    log = RunLog(Database(str(tmp_path / "project.sqlite")), "session-1")
    model = ScriptedModel(["no tool", {"tool_use": [{"name": "record_first", "input": {"text": "0"}}]},
                           {"tool_use": [{"name": "record_second", "input": {"text": "done"}}]}])

    run(Orchestra(model, "scripted", run_log=log).pipeline([0], first, second))

    rows = sorted(log.rows(kind="vote", bodies=True), key=lambda r: r["id"])
    assert [(r["label"], r["outcome"], r["data"]["attempt"]) for r in rows] == [
        ("stage:first", "malformed", 1), ("stage:first", "answered", 2), ("stage:second", "answered", 1)]
    assert rows[0]["requests"][0]["tool_choice"]["name"] == "record_first" and rows[0]["responses"]


def test_run_works_inside_a_running_event_loop_as_in_a_notebook():
    model = two_stage_script([0.0], [])

    async def cell():  # Jupyter runs cells inside a loop: run() then uses a thread of its own
        return run(Orchestra(model, "scripted").parallel([0], first))

    assert asyncio.run(cell()) == [Note(text="0")]


def test_parallel_takes_a_limit_of_its_own_under_the_shared_one():
    client = CountingClient()
    orchestra = Orchestra(client, "counting", limit=8)

    results = run(orchestra.parallel(range(6), first, limit=2))

    assert [r.text for r in results] == ["ok"] * 6 and client.made == 6 and client.most == 2


def test_the_primitives_are_public_names_of_the_package():
    import skills_magic

    assert skills_magic.BARRIER is BARRIER and skills_magic.Orchestra is Orchestra and skills_magic.Stage is Stage


def test_a_call_slower_than_the_timeout_is_an_abstention_and_the_others_are_kept():
    model = two_stage_script([5.0, 0.0], [])
    orchestra = Orchestra(model, "scripted", timeout=0.1)

    slow, quick = run(orchestra.parallel([0, 1], first))

    assert isinstance(slow, Abstention) and "no answer within 0.1 s" in slow.reason
    assert quick == Note(text="1") and orchestra.agent_calls == 2
    assert [line["error"] for line in orchestra.trace if line["item"] == "0"] == ["no answer within 0.1 s"]


def test_a_client_s_own_failure_is_that_agent_s_abstention_and_the_run_goes_on():
    class Broken(CountingClient):
        async def acreate(self, request):
            if "[0/first]" in request["messages"][0]["content"]:
                raise RuntimeError("the socket fell over")
            return await super().acreate(request)

    orchestra = Orchestra(Broken(), "counting")
    failed, fine = run(orchestra.parallel([0, 1], first))

    assert isinstance(failed, Abstention) and failed.reason == "RuntimeError: the socket fell over"
    assert fine == Note(text="ok") and sorted(line["outcome"] for line in orchestra.trace) == ["answered", "error"]
