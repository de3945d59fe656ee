"""Record and replay: cassettes hold no secret and no session id, replays are strict and offline.

Runs go through `SkillsSession.run(record=..., replay=...)` (the code path of `%%skill run --record/--replay`) with a
scripted model or the real SDK over a MockTransport, and finally through the magic in an IPython shell.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from fake_anthropic import FakeMessagesAPI, forget_machine_setup, text_message, tool_message, usage
from notebook_setup import register_magics, registered_magics
from skillfiles import tea_notes_skill
from skills_magic.skills.catalog import Source
from skills_magic.notebook.magics import unregister
from skills_magic.models.anthropic import DEFAULT_MODEL, AnthropicModel
from skills_magic.models.replay import CASSETTE_VERSION, RecordingModel, ReplayMismatch, ReplayModel
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import SkillsSession

API_KEY = "sk-ant-api-DISTINCTIVE-0123456789"
SERVICE_TOKEN = "svc-token-DISTINCTIVE-424242"
TASK = f"Write tasting notes for this oolong (my key, pasted by mistake: {API_KEY})."
BODY = (
    "# Tea notes\n\n"
    f"Call the tasting service with the token {SERVICE_TOKEN}.\n"
    "Tag the notes with session ${CLAUDE_SESSION_ID}.\n"
    "Read references/style.md first.\n"
)
STYLE = "Three lines — ünïcode ☕.\n"
ANSWER = "Orchid, cream, a long honey finish."


@pytest.fixture(autouse=True)
def environment(monkeypatch, tmp_path):
    forget_machine_setup(monkeypatch, tmp_path)
    monkeypatch.delenv("SKILLS_MAGIC_PATH", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", SERVICE_TOKEN)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def project(tmp_path) -> Path:
    """tmp_path with the tea-notes skill in its `skills/` folder (a project source)."""
    tea_notes_skill(tmp_path / "skills" / "tea-notes", BODY, STYLE)
    return tmp_path


def new_session(project: Path) -> SkillsSession:
    return SkillsSession(sources=[Source("project", str(project / "skills"))], cwd=str(project))


def chosen_turns():
    """The model activates the skill, reads its reference, answers."""
    return [
        {"tool_use": [{"name": "activate_skill", "input": {"name": "tea-notes"}}], "usage": {"input_tokens": 100, "output_tokens": 10}},
        {"tool_use": [{"name": "read_skill_resource", "input": {"skill": "tea-notes", "path": "references/style.md"}}],
         "usage": {"input_tokens": 150, "output_tokens": 12, "cache_read_input_tokens": 90}},
        {"text": ANSWER, "usage": {"input_tokens": 170, "output_tokens": 20, "cache_read_input_tokens": 90}},
    ]


def record(project: Path, turns=None, task: str = TASK, skill: str | None = None, cassette: str = "run.json"):
    session = new_session(project)
    session.model_client = ScriptedModel(turns if turns is not None else chosen_turns())
    result = session.run(task, skill, record=cassette)
    return session, result, project / cassette


def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a replay opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def trace_of(result) -> list[dict]:
    return [e.to_dict() for e in result.trace]


def calls_of(result) -> list[tuple]:
    return [(c.name, c.input, c.result_bytes, c.is_error, c.error) for c in result.tool_calls]


def without_session_ids(value, *session_ids):
    text = json.dumps(value, sort_keys=True)
    for session_id in session_ids:
        text = text.replace(session_id, "<session>")
    return json.loads(text)


# --- recording -------------------------------------------------------------------------------------------------------


def test_a_recorded_cassette_has_one_exchange_per_model_call(project):
    session, result, path = record(project)

    assert result.ok and result.final_text == ANSWER and result.turns == 3
    cassette = json.loads(path.read_text(encoding="utf-8"))
    assert cassette["version"] == CASSETTE_VERSION
    assert cassette["model"] == result.model == DEFAULT_MODEL
    assert len(cassette["exchanges"]) == 3
    for exchange, sent in zip(cassette["exchanges"], session.model_client.requests):
        assert set(exchange) == {"request", "response"}
        assert set(exchange["request"]) == set(sent) == {"model", "max_tokens", "system", "tools", "messages"}
        assert exchange["request"]["model"] == DEFAULT_MODEL
    assert [e["response"]["stop_reason"] for e in cassette["exchanges"]] == ["tool_use", "tool_use", "end_turn"]
    assert [len(e["request"]["messages"]) for e in cassette["exchanges"]] == [1, 3, 5]


def test_secrets_from_the_environment_never_reach_the_cassette(project):
    turns = chosen_turns()
    turns[-1] = {"text": f"{ANSWER} (I used {SERVICE_TOKEN}.)"}  # the model even echoes the token back
    session, result, path = record(project, turns)

    sent = json.dumps(session.model_client.requests)
    assert API_KEY in sent and SERVICE_TOKEN in sent  # the model really was sent them ...
    text = path.read_text(encoding="utf-8")
    assert API_KEY not in text and SERVICE_TOKEN not in text  # ... the cassette never holds them
    assert "[redacted:ANTHROPIC_API_KEY]" in text
    assert "[redacted:MY_SERVICE_TOKEN]" in text
    cassette = json.loads(text)
    assert cassette["exchanges"][-1]["response"]["content"][0]["text"] == f"{ANSWER} (I used [redacted:MY_SERVICE_TOKEN].)"
    assert result.final_text == f"{ANSWER} (I used {SERVICE_TOKEN}.)"  # the run itself is not redacted


def test_short_or_harmless_environment_values_are_not_redacted(project, monkeypatch):
    monkeypatch.setenv("DEBUG_TOKEN", "1")  # secret-looking name, too short to be a secret
    monkeypatch.setenv("EDITOR_THEME", "Three lines")  # a long value, but not a secret-looking name
    _, _, path = record(project)

    cassette = json.loads(path.read_text(encoding="utf-8"))
    tool_result = cassette["exchanges"][2]["request"]["messages"][4]["content"][0]
    assert tool_result["type"] == "tool_result"
    assert tool_result["content"] == STYLE


def test_the_session_id_is_written_as_a_placeholder(project):
    session, _, path = record(project)

    text = path.read_text(encoding="utf-8")
    assert session.session_id not in text
    assert "Tag the notes with session ${CLAUDE_SESSION_ID}." in json.loads(text)["exchanges"][1]["request"]["messages"][2][
        "content"][0]["content"]
    sent = json.dumps(session.model_client.requests)
    assert f"Tag the notes with session {session.session_id}." in sent  # the model was sent the real id


def test_recording_through_the_sdk_redacts_the_cassette_but_not_what_is_sent(project):
    api = FakeMessagesAPI([
        tool_message("activate_skill", {"name": "tea-notes"}, id="toolu_a", usage=usage(100, 10, 90, 0)),
        tool_message("read_skill_resource", {"skill": "tea-notes", "path": "references/style.md"}, id="toolu_b"),
        text_message(ANSWER, usage=usage(170, 20, 0, 90)),
    ])
    session = new_session(project)
    session.model_client = AnthropicModel(http_client=api.client())  # the key comes from ANTHROPIC_API_KEY

    recorded = session.run(TASK, record="sdk.json")

    assert recorded.ok and recorded.final_text == ANSWER
    assert len(api.requests) == 3
    assert SERVICE_TOKEN in api.requests[-1].raw.decode("utf-8")
    text = (project / "sdk.json").read_text(encoding="utf-8")
    assert API_KEY not in text and SERVICE_TOKEN not in text and session.session_id not in text
    assert len(json.loads(text)["exchanges"]) == 3

    replayed = new_session(project).run(TASK, replay="sdk.json")

    assert replayed.ok and replayed.final_text == ANSWER
    assert trace_of(replayed) == trace_of(recorded) and calls_of(replayed) == calls_of(recorded)
    assert replayed.usage == recorded.usage
    assert len(api.requests) == 3  # the replay never reached the API


def test_an_async_call_is_recorded_too(tmp_path):
    inner = ScriptedModel(["async answer"])
    model = RecordingModel(inner, tmp_path / "async.json")
    request = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": f"hi {SERVICE_TOKEN}"}]}

    response = asyncio.run(model.acreate(request))

    assert response["content"][0]["text"] == "async answer"
    cassette = json.loads((tmp_path / "async.json").read_text(encoding="utf-8"))
    assert cassette["exchanges"][0]["request"]["messages"][0]["content"] == "hi [redacted:MY_SERVICE_TOKEN]"


# --- replaying -------------------------------------------------------------------------------------------------------


def test_a_replay_from_another_session_gives_the_same_result_without_network(project, monkeypatch):
    first, recorded, _ = record(project)
    no_network(monkeypatch)
    second = new_session(project)
    assert second.session_id != first.session_id
    streamed: list[str] = []

    replayed = second.run(TASK, replay="run.json", on_text=streamed.append)

    assert replayed.error is None and replayed.ok
    assert replayed.client == "replay" and replayed.model == recorded.model
    assert replayed.final_text == recorded.final_text == ANSWER
    assert "".join(streamed) == ANSWER
    assert replayed.stop_reason == recorded.stop_reason == "end_turn"
    assert replayed.turns == recorded.turns == 3
    assert trace_of(replayed) == trace_of(recorded)
    assert [e.stage for e in replayed.trace] == ["discover", "model", "activate", "model", "reference", "model"]
    assert calls_of(replayed) == calls_of(recorded)
    assert replayed.usage == recorded.usage
    assert replayed.system == recorded.system
    # the replayed run activated the skill with its own session id, and matched the cassette anyway
    assert f"session {second.session_id}." in json.dumps(replayed.messages)
    assert without_session_ids(replayed.messages, second.session_id) == without_session_ids(recorded.messages, first.session_id)


def test_a_replay_of_an_explicitly_activated_skill(project):
    turns = [{"text": ANSWER}]
    _, recorded, _ = record(project, turns, skill="tea-notes", cassette="explicit.json")

    replayed = new_session(project).run(TASK, "tea-notes", replay="explicit.json")

    assert replayed.ok and replayed.final_text == ANSWER
    assert trace_of(replayed) == trace_of(recorded)
    assert [e.stage for e in replayed.trace] == ["discover", "activate", "model"]


def test_a_changed_task_is_a_mismatch_with_a_readable_diff(project):
    record(project, task="Write tasting notes for this oolong.")

    result = new_session(project).run("Write tasting notes for this green tea.", replay="run.json")

    assert result.stop_reason == "error" and not result.ok
    assert result.error.startswith("request 1 differs from the one in run.json")
    assert "--record" in result.error
    lines = result.error.splitlines()
    assert "--- recorded" in lines and "+++ sent" in lines
    assert any(line.startswith("-") and "this oolong." in line for line in lines)
    assert any(line.startswith("+") and "this green tea." in line for line in lines)
    assert [e.stage for e in result.trace] == ["discover"]  # the trace so far is kept
    assert result.turns == 1 and result.final_text == ""


def test_a_changed_skill_body_is_a_mismatch_where_the_body_is_first_sent(project):
    record(project)
    skill_md = project / "skills" / "tea-notes" / "SKILL.md"
    skill_md.write_text(skill_md.read_text(encoding="utf-8").replace("Read references/style.md first.",
                                                                    "Read references/style.md twice."), encoding="utf-8")

    result = new_session(project).run(TASK, replay="run.json")

    # the catalog (name and description) did not change: request 1 matches, the activation in request 2 does not
    assert result.error.startswith("request 2 differs")
    diff = result.error.splitlines()
    assert any(line.startswith("-") and "first." in line for line in diff)
    assert any(line.startswith("+") and "twice." in line for line in diff)
    assert API_KEY not in result.error and SERVICE_TOKEN not in result.error  # the diff is redacted too
    assert [e.stage for e in result.trace] == ["discover", "model", "activate"]
    assert [c.name for c in result.tool_calls] == ["activate_skill"]


def test_a_long_diff_is_cut_off(tmp_path):
    recorded = {"model": "m", "items": [f"recorded {n}" for n in range(200)]}
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"version": 1, "model": "m", "exchanges": [{"request": recorded, "response": {}}]}))

    with pytest.raises(ReplayMismatch) as caught:
        ReplayModel(path).create({"model": "m", "items": [f"sent {n}" for n in range(200)]})

    message = str(caught.value)
    assert message.startswith("request 1 differs from the one in long.json")
    assert message.endswith("\n...")
    assert len(message.splitlines()) == 1 + 60 + 1  # the sentence, MAX_DIFF_LINES lines of diff, the ellipsis


def test_more_requests_than_recorded_is_a_clear_error(project):
    def interrupt(request):
        raise KeyboardInterrupt

    turns = chosen_turns()
    turns[2] = interrupt  # the recording is stopped during the third call: the cassette keeps two exchanges
    _, stopped, path = record(project, turns)
    assert stopped.interrupted
    assert len(json.loads(path.read_text(encoding="utf-8"))["exchanges"]) == 2

    result = new_session(project).run(TASK, replay="run.json")

    assert result.error == "the run made request 3, but run.json recorded only 2; record the run again with --record"
    assert result.stop_reason == "error"
    assert [e.stage for e in result.trace] == ["discover", "model", "activate", "model", "reference"]


def test_a_replay_model_past_its_last_exchange_raises_replay_mismatch(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"version": 1, "model": "m", "exchanges": [
        {"request": {"model": "m"}, "response": {"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}}]}))
    model = ReplayModel(path)

    assert model.create({"model": "m"})["content"][0]["text"] == "hi"
    with pytest.raises(ReplayMismatch) as caught:
        model.create({"model": "m"})

    assert caught.value.kind == "replay"
    assert "request 2" in str(caught.value) and "recorded only 1" in str(caught.value)


@pytest.mark.parametrize("content", [
    "[]",
    '{"version": 2, "model": "m", "exchanges": []}',
    '{"exchanges": []}',
    '"a string"',
])
def test_a_json_file_that_is_not_a_cassette_is_a_replay_mismatch(tmp_path, content):
    path = tmp_path / "other.json"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(ReplayMismatch) as caught:
        ReplayModel(path)

    assert "is not a version-1 skills-magic cassette" in str(caught.value)
    assert caught.value.kind == "replay"


@pytest.mark.parametrize("content", ["these are my notes, not a cassette\n", '{"version": 1, "exchanges": [', ""])
def test_a_file_that_is_not_json_is_a_replay_mismatch(tmp_path, content):
    path = tmp_path / "notes.md"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(ReplayMismatch):
        ReplayModel(path)


@pytest.mark.parametrize("content", ['{"version": 1}', '{"version": 1, "exchanges": {"request": {}}}'])
def test_a_version_1_object_without_exchanges_is_a_replay_mismatch(tmp_path, content):
    path = tmp_path / "broken.json"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(ReplayMismatch):
        ReplayModel(path).create({"model": "m"})


def test_replaying_a_missing_cassette_names_it(project):
    from skills_magic.errors import SourceNotFound

    with pytest.raises(SourceNotFound) as caught:
        new_session(project).run(TASK, replay="nowhere.json")

    assert "nowhere.json" in str(caught.value)


# --- through the magic -------------------------------------------------------------------------------------------------


@pytest.fixture
def magics(ip, project, monkeypatch):
    """A fresh `SkillsMagics` rooted at the project (only its `skills/` folder searched)."""
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "project")
    with registered_magics(ip) as instance:
        yield instance


def write_turns(project: Path, turns) -> str:
    (project / "turns.json").write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return "turns.json"


def comparable(view) -> dict:
    data = view.data()
    data.pop("client")
    return data


def test_record_then_replay_through_the_magic_round_trips(ip, magics, project, monkeypatch):
    ip.run_line_magic("skills", f"model scripted {write_turns(project, chosen_turns())}")
    recorded = ip.run_cell_magic("skill", "run --record tea.json", TASK + "\n")
    first_id = magics.session.session_id

    assert recorded.data()["client"] == "scripted+record"
    assert recorded.data()["final_text"] == ANSWER and recorded.data()["stop_reason"] == "end_turn"
    text = (project / "tea.json").read_text(encoding="utf-8")
    assert API_KEY not in text and SERVICE_TOKEN not in text and first_id not in text
    unregister(ip)

    # a new kernel: a fresh session (another session id), no model chosen, no network
    no_network(monkeypatch)
    fresh = register_magics(ip)
    assert fresh.session.session_id != first_id and fresh.session.model_client is None
    replayed = ip.run_cell_magic("skill", "run --replay tea.json", TASK + "\n")

    assert replayed.data()["client"] == "replay"
    assert comparable(replayed) == comparable(recorded)
    trace = ip.run_line_magic("skills", "trace")
    assert trace.data()["trace"] == replayed.data()["trace"]
    assert [row["stage"] for row in trace.data()["trace"]] == ["discover", "model", "activate", "model", "reference", "model"]


def test_the_replay_model_chosen_with_skills_model_round_trips(ip, magics, project):
    ip.run_line_magic("skills", f"model scripted {write_turns(project, chosen_turns())}")
    recorded = ip.run_cell_magic("skill", "run --record tea.json", TASK + "\n")

    chosen = ip.run_line_magic("skills", "model replay tea.json")
    replayed = ip.run_cell_magic("skill", "run", TASK + "\n")

    assert chosen.data() == {"client": "replay", "model": DEFAULT_MODEL, "detail": "tea.json"}
    assert replayed.data()["client"] == "replay"
    assert comparable(replayed) == comparable(recorded)


def test_record_then_replay_of_a_named_skill_through_the_magic(ip, magics, project):
    ip.run_line_magic("skills", f"model scripted {write_turns(project, [{'text': ANSWER}])}")
    recorded = ip.run_cell_magic("skill", "run --record named.json tea-notes", "Notes for a Dong Ding, please.\n")
    replayed = ip.run_cell_magic("skill", "run --replay named.json tea-notes", "Notes for a Dong Ding, please.\n")

    assert recorded.data()["skill"] == replayed.data()["skill"] == "tea-notes"
    assert comparable(replayed) == comparable(recorded)
    assert replayed.data()["final_text"] == ANSWER


def test_record_then_replay_through_the_magic_with_the_sdk(ip, magics, project):
    api = FakeMessagesAPI([
        tool_message("activate_skill", {"name": "tea-notes"}, id="toolu_1"),
        tool_message("read_skill_resource", {"skill": "tea-notes", "path": "references/style.md"}, id="toolu_2"),
        text_message(ANSWER),
    ])
    magics.session.model_client = AnthropicModel(http_client=api.client())

    recorded = ip.run_cell_magic("skill", "run --record sdk.json", TASK + "\n")
    replayed = ip.run_cell_magic("skill", "run --replay sdk.json", TASK + "\n")

    assert recorded.data()["client"] == "anthropic+record"
    assert comparable(replayed) == comparable(recorded)
    assert len(api.requests) == 3


def test_record_with_a_model_option_replays_without_it(ip, magics, project):
    ip.run_line_magic("skills", f"model scripted {write_turns(project, [{'text': ANSWER}])}")
    recorded = ip.run_cell_magic("skill", "run --model opus --record opus.json tea-notes", "Notes.\n")
    replayed = ip.run_cell_magic("skill", "run --replay opus.json tea-notes", "Notes.\n")

    assert recorded.data()["model"] == "claude-opus-5-5"
    assert replayed.data()["error"] is None
    assert comparable(replayed) == comparable(recorded)


def test_a_changed_task_through_the_magic_shows_the_diff(ip, magics, project):
    ip.run_line_magic("skills", f"model scripted {write_turns(project, chosen_turns())}")
    ip.run_cell_magic("skill", "run --record run.json", "Notes for an oolong.\n")

    view = ip.run_cell_magic("skill", "run --replay run.json", "Notes for a pu-erh.\n")

    data = view.data()
    assert data["stop_reason"] == "error" and data["client"] == "replay"
    assert "request 1 differs" in data["error"] and "pu-erh" in data["error"] and "oolong" in data["error"]
    assert "error: request 1 differs" in view.text()


def test_record_into_a_folder_that_does_not_exist_yet(ip, magics, project):
    ip.run_line_magic("skills", f"model scripted {write_turns(project, [{'text': ANSWER}])}")
    scripted = magics.session.model_client

    try:
        view = ip.run_cell_magic("skill", "run --record cassettes/new.json tea-notes", "Notes.\n")
    except UsageError:
        assert scripted.requests == []  # refused before spending a model call
    else:
        assert view.data()["final_text"] == ANSWER
        assert len(json.loads((project / "cassettes" / "new.json").read_text(encoding="utf-8"))["exchanges"]) == 1


def test_record_and_replay_together_is_a_usage_error(ip, magics):
    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("skill", "run --record a.json --replay b.json", "task\n")

    assert "exclude each other" in str(caught.value)


def test_replaying_a_file_that_is_not_a_cassette_through_the_magic_is_a_usage_error(ip, magics, project):
    (project / "list.json").write_text("[1, 2, 3]\n", encoding="utf-8")

    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("skill", "run --replay list.json", "task\n")

    assert "list.json is not a version-1 skills-magic cassette" in str(caught.value)
