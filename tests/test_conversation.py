"""Conversations across cells: `session.run(..., continue_conversation=True)` and `%%skill run --continue` go on
with the last run's messages, activated skills and system prompt; `%skills history` and `%skills reset`; one
cassette recorded across cells, replayed cell by cell, a changed turn refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from fake_anthropic import forget_machine_setup
from notebook_setup import register_magics, registered_magics
from skillfiles import tea_notes_skill
from skills_magic.models.scripted import ScriptedModel
from skills_magic.notebook.magics import unregister
from skills_magic.runs.conversation import NOT_RUN, NothingToContinue
from skills_magic.session import SkillsSession
from skills_magic.skills.catalog import Source

BODY = "# Tea notes\n\nThree lines of tasting notes.\n"
ACTIVATE = {"tool_use": [{"name": "activate_skill", "input": {"name": "tea-notes"}}], "usage": {"input_tokens": 100, "output_tokens": 5}}
FIRST, SECOND = "Orchid, cream, honey.", "Shorter: orchid and cream."


@pytest.fixture(autouse=True)
def environment(monkeypatch, tmp_path):
    forget_machine_setup(monkeypatch, tmp_path)
    monkeypatch.delenv("SKILLS_MAGIC_PATH", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def project(tmp_path) -> Path:
    tea_notes_skill(tmp_path / "skills" / "tea-notes", BODY, "Three lines.\n")
    return tmp_path


def new_session(project: Path, turns=()) -> SkillsSession:
    session = SkillsSession(sources=[Source("project", str(project / "skills"))], cwd=str(project))
    session.model_client = ScriptedModel(list(turns))
    return session


def user_texts(message) -> list[str]:
    return [b.get("text", "") for b in message["content"] if b.get("type") == "text"]


def test_a_continued_run_sends_the_earlier_turns_and_does_not_activate_the_skill_again(project):
    session = new_session(project, [ACTIVATE, FIRST, SECOND])
    first = session.run("Notes for an oolong.")
    earlier = [dict(m) for m in first.messages]

    second = session.run("Make them shorter.", continue_conversation=True)

    requests = session.model_client.requests
    last = requests[-1]
    assert last["messages"][:4] == earlier  # the earlier turns as they were, the new task after the last answer
    assert last["messages"][4] == {"role": "user", "content": [{"type": "text", "text": "Make them shorter."}]}
    assert last["system"] == requests[0]["system"] and last["tools"] == requests[0]["tools"]  # the cached prefix
    assert second.final_text == SECOND and second.activated == ["tea-notes"] and len(second.messages) == 6
    assert [e.stage for e in second.trace] == ["continue", "model"]  # no catalog, no activation sent again
    assert second.trace[0].detail == "4 earlier messages; active, not sent again: tea-notes"
    assert first.messages == earlier  # the first result keeps its own messages
    assert [(t.number, t.task, t.answer, t.skills) for t in session.conversation.history()] == [
        (1, "Notes for an oolong.", FIRST, ("tea-notes",)), (2, "Make them shorter.", SECOND, ("tea-notes",))]


def test_the_model_may_still_use_a_skill_the_conversation_activated(project):
    read = {"tool_use": [{"name": "read_skill_resource", "input": {"skill": "tea-notes", "path": "references/style.md"}}]}
    session = new_session(project, [ACTIVATE, FIRST, read, SECOND])
    session.run("Notes for an oolong.")

    second = session.run("Check the style guide.", continue_conversation=True)

    assert [c.is_error for c in second.tool_calls] == [False]
    assert [e.stage for e in second.trace] == ["continue", "model", "reference", "model"]


def test_a_run_without_continue_starts_a_new_conversation(project):
    session = new_session(project, [ACTIVATE, FIRST, SECOND, "Fresh."])
    session.run("Notes for an oolong.")
    session.run("Shorter.", continue_conversation=True)

    fresh = session.run("Something else.")

    assert len(session.model_client.requests[-1]["messages"]) == 1 and len(fresh.messages) == 2
    assert [t.task for t in session.conversation.history()] == ["Something else."]


def test_continue_with_nothing_to_continue_is_one_sentence_before_any_model_call(project):
    session = new_session(project, [FIRST])
    with pytest.raises(NothingToContinue) as caught:
        session.run("Go on.", continue_conversation=True)
    assert "\n" not in str(caught.value) and "without --continue" in str(caught.value)
    assert session.model_client.requests == []

    session.run("Notes.")
    assert session.conversation.reset() == 1
    with pytest.raises(NothingToContinue):
        session.run("Go on.", continue_conversation=True)


def test_a_turn_that_fails_leaves_the_conversation_where_it_was(project):
    failure = {"error": {"status": 500, "message": "overloaded"}}
    session = new_session(project, [FIRST, failure, SECOND])
    session.run("Notes.")

    failed = session.run("Shorter.", continue_conversation=True)
    assert failed.error == "overloaded" and len(session.conversation.history()) == 1

    retried = session.run("Shorter.", continue_conversation=True)  # the cell run again: the same turn, once
    assert retried.final_text == SECOND
    assert [m["role"] for m in session.model_client.requests[-1]["messages"]] == ["user", "assistant", "user"]


def test_a_tool_call_cut_off_by_max_tokens_is_answered_as_not_run_before_the_next_task(project):
    cut = {"text": "Let me look.", "tool_use": [{"name": "activate_skill", "input": {"name": "tea-notes"}, "id": "toolu_cut"}],
           "stop_reason": "max_tokens"}
    session = new_session(project, [cut, SECOND])
    first = session.run("Notes.")
    assert first.messages[-1]["role"] == "assistant" and "cut-off call was not run" in first.note

    session.run("Try again.", continue_conversation=True)

    last = session.model_client.requests[-1]["messages"][-1]
    assert last["role"] == "user"
    assert last["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_cut", "content": NOT_RUN, "is_error": True}
    assert user_texts(last) == ["Try again."]


def test_a_run_stopped_by_max_turns_after_tool_results_takes_the_next_task_in_the_same_user_turn(project):
    session = new_session(project, [ACTIVATE, SECOND])
    first = session.run("Notes.", max_turns=1)
    assert first.stop_reason == "max_turns" and first.messages[-1]["role"] == "user"

    session.run("Go on.", continue_conversation=True)

    roles = [m["role"] for m in session.model_client.requests[-1]["messages"]]
    assert roles == ["user", "assistant", "user"]  # never two user turns in a row
    last = session.model_client.requests[-1]["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["tool_result", "text"] and last[1]["text"] == "Go on."


def test_a_cassette_recorded_across_cells_replays_cell_by_cell_in_a_new_session(project, monkeypatch):
    session = new_session(project, [ACTIVATE, FIRST, SECOND])
    first = session.run("Notes for an oolong.", record="talk.json")
    second = session.run("Make them shorter.", continue_conversation=True, record="talk.json")
    cassette = json.loads((project / "talk.json").read_text(encoding="utf-8"))
    assert len(cassette["exchanges"]) == 3  # both cells' calls, in order, in one cassette

    replaying = new_session(project)  # a new kernel: nothing scripted, the cassette answers
    one = replaying.run("Notes for an oolong.", replay="talk.json")
    two = replaying.run("Make them shorter.", continue_conversation=True, replay="talk.json")

    assert (one.final_text, two.final_text) == (first.final_text, second.final_text) == (FIRST, SECOND)
    assert one.error is None and two.error is None and two.messages == second.messages


def test_replay_refuses_a_changed_turn_and_keeps_the_conversation(project):
    session = new_session(project, [ACTIVATE, FIRST, SECOND])
    session.run("Notes for an oolong.", record="talk.json")
    session.run("Make them shorter.", continue_conversation=True, record="talk.json")

    replaying = new_session(project)
    replaying.run("Notes for an oolong.", replay="talk.json")
    changed = replaying.run("Make them longer.", continue_conversation=True, replay="talk.json")

    assert changed.stop_reason == "error" and "request 3 differs" in changed.error
    assert "longer" in changed.error and "shorter" in changed.error
    assert len(replaying.conversation.history()) == 1
    again = replaying.run("Make them shorter.", continue_conversation=True, replay="talk.json")
    assert again.final_text == SECOND


def test_a_new_conversation_recording_into_the_same_file_starts_it_again(project):
    session = new_session(project, [FIRST, SECOND])
    session.run("Notes.", record="talk.json")

    session.run("Other notes.", record="talk.json")  # no --continue: a new conversation, a new cassette

    exchanges = json.loads((project / "talk.json").read_text(encoding="utf-8"))["exchanges"]
    assert len(exchanges) == 1 and exchanges[0]["request"]["messages"][0]["content"][0]["text"] == "Other notes."


def test_continuing_a_recording_whose_cassette_was_moved_away_is_refused_before_any_call(project):
    session = new_session(project, [FIRST, SECOND])
    session.run("Notes.", record="talk.json")
    (project / "talk.json").rename(project / "moved.json")

    with pytest.raises(Exception) as caught:
        session.run("Shorter.", continue_conversation=True, record="talk.json")

    assert "cannot go on recording talk.json" in str(caught.value) and "holds 0 of the 1" in str(caught.value)
    assert len(session.model_client.requests) == 1


# --- through the magics ---------------------------------------------------------------------------------------


@pytest.fixture
def magics(ip, project, monkeypatch):
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "project")
    monkeypatch.setenv("SKILLS_MAGIC_DB", str(project / "audit.sqlite"))
    (project / "turns.json").write_text(json.dumps({"turns": [ACTIVATE, FIRST, SECOND]}), encoding="utf-8")
    with registered_magics(ip) as instance:
        ip.run_line_magic("skills", "model scripted turns.json")
        yield instance


def test_continue_history_and_reset_through_the_magics(ip, magics):
    empty = ip.run_line_magic("skills", "history")
    assert empty.data() == {"turns": []} and empty.text().startswith("no conversation yet")

    ip.run_cell_magic("skill", "run", "Notes for an oolong.\n")
    second = ip.run_cell_magic("skill", "run --continue", "Make them shorter.\n")
    assert second.final_text == SECOND and second.trace[0].stage == "continue"

    history = ip.run_line_magic("skills", "history")
    turns = history.data()["turns"]
    assert [(t["turn"], t["task"], t["answer"], t["skills"], t["tool_calls"]) for t in turns] == [
        (1, "Notes for an oolong.", FIRST, ["tea-notes"], ["activate_skill"]), (2, "Make them shorter.", SECOND, ["tea-notes"], [])]
    lines = history.text().splitlines()
    assert lines[0].startswith("2 turns;") and lines[2].split()[:2] == ["turn", "task"]
    assert "Make them shorter." in lines[4] and "<table>" in history._repr_mimebundle_()[0]["text/html"]

    reset = ip.run_line_magic("skills", "reset")
    assert reset.data() == {"turns": [], "forgotten": 2} and reset.text().startswith("conversation reset (2 turns forgotten)")
    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("skill", "run --continue", "Go on.\n")
    assert "no conversation to continue" in str(caught.value) and "\n" not in str(caught.value)


def test_continue_and_no_model_exclude_each_other(ip, magics):
    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("skill", "run --continue --no-model --script scripts/x.py tea-notes", "\n")
    assert "--continue goes on with a model's conversation" in str(caught.value)


def test_a_new_kernel_has_no_conversation(ip, magics):
    ip.run_cell_magic("skill", "run", "Notes for an oolong.\n")
    unregister(ip)
    register_magics(ip)
    try:
        assert ip.run_line_magic("skills", "history").data() == {"turns": []}
    finally:
        unregister(ip)
