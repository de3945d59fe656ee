"""`context: fork` runs a skill as a sub-agent in a fresh context (issue 16, point 4f): the child loop gets the body
and no catalog, only its final answer goes back to the caller, its usage counts in the run's, and the trace shows it
as a nested run. Unit tests with the scripted model and with the real SDK against a fake transport, then one real
kernel where `%%skill run` of a fork skill shows the nested run in the cell's output."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from skillfiles import make_skill

from skills_magic.models.scripted import ScriptedModel
from skills_magic.notebook.views.runs import RunView, TraceView
from skills_magic.runs.agent import Agent
from skills_magic.runs.fork import AGENT_NOT_USED, FORK_RESULT, MAX_FORK_DEPTH
from skills_magic.skills.catalog import Catalog, Source

FORK_BODY = "# Deep research\n\nRESEARCH STEPS: read everything, then summarise for $ARGUMENTS.\n"
OTHER_BODY = "Other steps.\n"
CHILD_ANSWER = "The summary: tea is brewed."


def build(root: Path) -> Path:
    make_skill(root / "deep", "name: deep\ndescription: Deep research. Use when asked to research.\ncontext: fork\n"
                              "agent: Explore\n", FORK_BODY)
    make_skill(root / "other", "name: other\ndescription: Another skill. Use when other things come up.\n", OTHER_BODY)
    make_skill(root / "opus-fork", "name: opus-fork\ndescription: Hard research. Use when it is hard.\ncontext: fork\n"
                                   "model: claude-opus-4-6\neffort: high\n", "Think hard.\n")
    return root


@pytest.fixture
def skills(tmp_path):
    return Catalog([Source("session", str(build(tmp_path / "skills")), explicit=True)]).scan().skills


class Snapshots(ScriptedModel):
    """The scripted model, keeping each request as it was when sent (the loop appends to its lists afterwards)."""

    def create(self, request, on_text=None):
        return super().create(copy.deepcopy(request), on_text)


def agent(skills, turns, **options) -> tuple[Agent, Snapshots]:
    model = Snapshots(list(turns))
    return Agent(skills, model, "claude-sonnet-4-5", show_path=str, session_id="s", **options), model


def activate(name: str, tokens: tuple[int, int] = (0, 0)) -> dict:
    return {"tool_use": [{"name": "activate_skill", "input": {"name": name}}],
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


def answer(text: str, tokens: tuple[int, int] = (0, 0)) -> dict:
    return {"text": text, "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


def tool_results(request: dict) -> list[dict]:
    return [b for m in request["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]


# --- the model activates a fork skill ---------------------------------------------------------------------------------


def test_the_parent_gets_only_the_childs_final_answer_as_the_tool_result(skills):
    working = {"text": "Working.", "tool_use": [{"name": "read_skill_resource", "input": {"skill": "deep", "path": "x.md"}}]}
    one, model = agent(skills, [activate("deep"), working, answer(CHILD_ANSWER), answer("Done.")])
    result = one.run("Research tea")
    assert len(model.requests) == 4  # parent, child, child, parent
    parent_second = model.requests[3]
    (only,) = tool_results(parent_second)
    assert only["content"] == f"{FORK_RESULT.format(name='deep')}\n\n{CHILD_ANSWER}" and not only.get("is_error")
    assert "RESEARCH STEPS" not in json.dumps(parent_second) and "Working." not in json.dumps(parent_second)
    assert [m["role"] for m in result.messages] == ["user", "assistant", "user", "assistant"]  # none of the child's
    assert result.final_text == "Done." and result.ok
    assert "deep" not in result.activated and "deep" not in one.activated  # its body never entered this context


def test_the_childs_first_request_has_the_body_and_the_task_and_no_catalog(skills):
    one, model = agent(skills, [activate("deep"), answer(CHILD_ANSWER), answer("Done.")])
    one.run("Research tea")
    child_first = model.requests[1]
    assert "system" not in child_first  # no instructions, no <available_skills>
    assert [t["name"] for t in child_first["tools"]] == ["read_skill_resource", "run_skill_script"]
    assert "Another skill" not in json.dumps(child_first) and "other" not in json.dumps(child_first["tools"])
    (message,) = child_first["messages"]
    text = message["content"][0]["text"]
    assert message["role"] == "user" and "RESEARCH STEPS: read everything" in text
    assert text.endswith("\n\nThe caller asked: Research tea")
    assert "<available_skills>" in model.requests[0]["system"][0]["text"]  # the parent's catalog is as before


def test_the_childs_usage_counts_in_the_runs_and_the_trace_nests_its_run(skills):
    one, _ = agent(skills, [activate("deep", (100, 10)), answer(CHILD_ANSWER, (40, 7)), answer("Done.", (120, 5))])
    result = one.run("Research tea")
    assert result.usage["input_tokens"] == 260 and result.usage["output_tokens"] == 22
    assert [e.stage for e in result.trace] == ["discover", "model", "fork", "model"]
    row = result.trace[2]
    assert row.object == "deep" and (row.input_tokens, row.output_tokens) == (40, 7)
    assert row.bytes == len(f"{FORK_RESULT.format(name='deep')}\n\n{CHILD_ANSWER}".encode())
    assert row.detail == ("1 model call; 40 input + 7 output tokens; stop: end_turn; "
                          + AGENT_NOT_USED.format(agent="Explore"))
    (child,) = result.forks
    assert child.skill == "deep" and child.final_text == CHILD_ANSWER and child.turns == 1
    assert [e.stage for e in child.trace] == ["discover", "activate", "model"]
    assert child.trace[0].object == "catalog of 0 skills" and child.activated == ["deep"]


def test_the_views_show_the_fork_as_a_nested_run_in_text_html_and_data(skills):
    one, _ = agent(skills, [activate("deep"), answer(CHILD_ANSWER, (40, 7)), answer("Done.")])
    result = one.run("Research tea")
    text = RunView(result).text()
    nested = text[text.index("fork deep: its own run"):]
    assert "    stop: end_turn after 1 model call" in nested and "    activate  deep" in nested
    html = RunView(result).html()
    assert "<details open class='skills-magic-fork'><summary>fork deep: its own run" in html
    assert html.index("skills-magic-fork") > html.index("load trace")
    data = RunView(result).data()
    assert [f["skill"] for f in data["forks"]] == ["deep"]
    assert [e["stage"] for e in data["forks"][0]["trace"]] == ["discover", "activate", "model"]
    assert "seconds" not in json.dumps(data)  # nothing volatile in the data
    assert TraceView(result).data()["forks"][0]["skill"] == "deep"
    assert "fork deep" in TraceView(result).text()


def test_a_fork_skills_model_and_effort_apply_to_the_child_only(skills):
    one, model = agent(skills, [activate("opus-fork"), answer(CHILD_ANSWER), answer("Done.")])
    one.run("A hard question")
    _, child_first, parent_second = model.requests
    assert child_first["model"] == "claude-opus-4-6" and child_first["output_config"] == {"effort": "high"}
    assert parent_second["model"] == "claude-sonnet-4-5" and "output_config" not in parent_second


def test_an_inline_skill_is_still_activated_inline(skills):
    one, model = agent(skills, [activate("other"), answer("Done.")])
    result = one.run("Other things")
    assert OTHER_BODY in tool_results(model.requests[1])[0]["content"]
    assert result.forks == [] and result.activated == ["other"]
    assert "forks" not in RunView(result).data()  # the data of runs without forks stays as it was


# --- failures and the depth limit -------------------------------------------------------------------------------------


def test_a_child_whose_model_call_fails_is_an_error_result_and_the_run_goes_on(skills):
    failing = {"error": {"status": 500, "message": "the server is overloaded"}}
    one, model = agent(skills, [activate("deep", (10, 1)), failing, answer("Went on without it.")])
    result = one.run("Research tea")
    (only,) = tool_results(model.requests[2])
    assert only["is_error"] is True
    assert only["content"] == "Skill deep ran in its own context and failed: the server is overloaded"
    assert result.final_text == "Went on without it." and result.ok
    assert result.forks[0].stop_reason == "error" and result.trace[2].stage == "fork"
    assert result.tool_calls[0].is_error


def test_a_child_that_hits_the_turn_limit_is_an_error_result(skills):
    read = {"tool_use": [{"name": "read_skill_resource", "input": {"skill": "deep", "path": "missing.md"}}]}
    one, model = agent(skills, [activate("deep"), read, read, answer("Fine.")], max_turns=2)
    result = one.run("Research tea")
    (only,) = tool_results(model.requests[3])
    assert only["is_error"] is True and "failed: stopped after 2 model calls" in only["content"]
    assert result.forks[0].stop_reason == "max_turns" and result.final_text == "Fine."


def test_forks_nest_at_most_max_fork_depth_deep(skills):
    assert MAX_FORK_DEPTH == 2
    inner, model = agent(skills, [activate("deep"), answer(CHILD_ANSWER), answer("Done.")])
    inner.fork_depth = MAX_FORK_DEPTH - 1  # a loop inside one fork may still fork
    assert inner.run("Research tea").forks[0].final_text == CHILD_ANSWER
    deepest, model = agent(skills, [activate("deep"), answer("Done without it.")])
    deepest.fork_depth = MAX_FORK_DEPTH  # a loop inside two forks: a third is refused, and nothing is run for it
    result = deepest.run("Research tea")
    assert len(model.requests) == 2 and result.forks == []
    (only,) = tool_results(model.requests[1])
    assert only["is_error"] is True and "forks may nest only 2 deep" in only["content"]
    assert result.trace[2].stage == "fork" and result.trace[2].detail == "not run: forks nest at most 2 deep"


def test_keyboard_interrupt_in_the_child_stops_the_whole_run_and_keeps_both_traces(skills):
    def interrupted(request):
        raise KeyboardInterrupt

    one, model = agent(skills, [activate("deep"), interrupted])
    result = one.run("Research tea")
    assert result.interrupted and result.stop_reason == "interrupted" and len(model.requests) == 2  # no parent call after
    assert result.forks[0].interrupted and result.trace[-1].stage == "fork"


# --- the user runs a fork skill by name -------------------------------------------------------------------------------


def test_a_run_by_name_runs_the_child_and_the_parent_makes_no_model_call(skills):
    one, model = agent(skills, [answer(CHILD_ANSWER, (30, 4))])
    result = one.run("Summarise for the board", skill="deep", arguments=["managers"])
    (child_request,) = model.requests
    assert "system" not in child_request
    first = child_request["messages"][0]["content"]
    assert "summarise for managers" in first[0]["text"] and first[-1]["text"] == "Summarise for the board"
    assert result.final_text == CHILD_ANSWER and result.ok and result.turns == 0
    assert result.usage["input_tokens"] == 30 and [e.stage for e in result.trace] == ["discover", "fork"]
    assert result.forks[0].turns == 1 and result.activated == []
    assert result.messages == [{"role": "user", "content": [{"type": "text", "text": "Summarise for the board"}]},
                               {"role": "assistant", "content": [{"type": "text", "text": CHILD_ANSWER}]}]


def test_a_conversation_goes_on_after_a_run_by_name_without_the_body(skills):
    one, model = agent(skills, [answer(CHILD_ANSWER), answer("And more.")])
    first = one.run("Summarise", skill="deep")
    again = Agent(skills, model, "claude-sonnet-4-5", show_path=str, session_id="s")
    result = again.run("Go on", messages=first.messages, activated={}, system=first.system)
    sent = model.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"] and "RESEARCH STEPS" not in json.dumps(sent)
    assert result.final_text == "And more."


def test_a_failing_run_by_name_carries_the_childs_error(skills):
    one, _ = agent(skills, [{"error": {"status": 500, "message": "the server is overloaded"}}])
    result = one.run("Summarise", skill="deep")
    assert result.error == "the server is overloaded" and result.stop_reason == "error" and not result.ok
    assert result.messages == [{"role": "user", "content": [{"type": "text", "text": "Summarise"}]}]


# --- the real SDK, against a fake transport ---------------------------------------------------------------------------


@pytest.mark.usefixtures("machine_setup_forgotten")
def test_the_sdk_client_sends_the_child_its_own_conversation(skills):
    from fake_anthropic import (
        FAKE_MODEL,
        FakeMessagesAPI,
        message,
        text_message,
        tool_use_block,
    )

    from skills_magic.models.anthropic import AnthropicModel

    api = FakeMessagesAPI([message([tool_use_block("activate_skill", {"name": "deep"})]), text_message(CHILD_ANSWER),
                           text_message("Done.")])
    client = AnthropicModel(FAKE_MODEL, api_key="sk-test-fork", http_client=api.client())
    result = Agent(skills, client, FAKE_MODEL, show_path=str, session_id="s").run("Research tea")
    _, child_first, parent_second = api.bodies()
    assert "system" not in child_first and "RESEARCH STEPS" in json.dumps(child_first["messages"])
    assert len(child_first["messages"]) == 1
    assert tool_results(parent_second)[0]["content"] == f"{FORK_RESULT.format(name='deep')}\n\n{CHILD_ANSWER}"
    assert "RESEARCH STEPS" not in json.dumps(parent_second)
    assert result.final_text == "Done." and result.forks[0].final_text == CHILD_ANSWER


# --- in a real kernel -------------------------------------------------------------------------------------------------


def test_a_real_kernel_shows_a_fork_skill_run_by_name_as_a_nested_run(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from notebook_setup import notebook_folder

    build(tmp_path / "skills")
    (tmp_path / "turns.yaml").write_text(f"turns:\n  - text: '{CHILD_ANSWER}'\n", encoding="utf-8")
    cells = ["%load_ext skills_magic\n%skills model scripted turns.yaml", "%%skill run deep\nSummarise tea"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook_folder(monkeypatch, tmp_path, db="db.sqlite", lock=None, sources="path", path=tmp_path / "skills")
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    (output,) = [o for o in notebook.cells[1].outputs if o.get("output_type") == "execute_result"]
    text, html = output["data"]["text/plain"], output["data"]["text/html"]
    assert text.startswith(CHILD_ANSWER)
    assert "fork      deep" in text and "fork deep: its own run, in a fresh context:" in text
    assert "    activate  deep" in text and "agent: Explore (not used: one kind of sub-agent)" in text
    assert "<details open class='skills-magic-fork'>" in html
    data = output["data"]["application/vnd.skills-magic.run+json"]
    assert data["final_text"] == CHILD_ANSWER and data["forks"][0]["skill"] == "deep"
    assert [e["stage"] for e in data["forks"][0]["trace"]] == ["discover", "activate", "model"]
