"""AnthropicModel through the real `anthropic` SDK, with an httpx2 MockTransport in place of the network.

Every request goes through the SDK's own request building, retries and response parsing; only the socket is fake
(`fake_anthropic.FakeMessagesAPI`). Error replies carry `retry-after-ms: 1`, so the SDK's retries never wait.
"""

from __future__ import annotations

import asyncio
import sys

import httpx2
import pytest

from fake_anthropic import (Error, FakeMessagesAPI, StreamError, message, sent_key, text_block, text_message,
                            text_pieces, tool_message, tool_use_block, usage)
from skillfiles import tea_notes_skill
from skills_magic.runs.agent import SYSTEM_INSTRUCTIONS, Agent, tool_definitions
from skills_magic.skills.catalog import Catalog, Source
from skills_magic.models import anthropic as anthropic_module
from skills_magic.models.anthropic import DEFAULT_MODEL, AnthropicModel, resolve_model, warm_up
from skills_magic.models.base import ModelError, usage_of
from skills_magic.session import SkillsSession

KEY = "sk-ant-fake-0123456789abcdefKEYVALUE"
MODEL_ID = "claude-test-1"
STYLE = "Be brief — ünïcode ☕, three lines at most.\n"
BODY = "# Tea notes\n\nRead references/style.md first, then write the notes.\n"


pytestmark = pytest.mark.usefixtures("machine_setup_forgotten")


@pytest.fixture
def skills(tmp_path):
    root = tmp_path / "skills"
    tea_notes_skill(root / "tea-notes", BODY, STYLE)
    found = Catalog([Source("session", str(root), explicit=True)]).scan().skills
    assert [s.name for s in found] == ["tea-notes"]
    return found


def model_for(api: FakeMessagesAPI, **kwargs) -> AnthropicModel:
    kwargs.setdefault("api_key", KEY)
    return AnthropicModel(MODEL_ID, http_client=api.client(), **kwargs)


def a_request(text: str = "Hello") -> dict:
    return {"model": MODEL_ID, "max_tokens": 64, "messages": [{"role": "user", "content": [text_block(text)]}]}


def stages(result) -> list[str]:
    return [e.stage for e in result.trace]


def never_sleep(monkeypatch):
    """Backoff without headers (timeouts, connection errors) would sleep: make the SDK's computed wait zero."""
    import anthropic

    for cls in (anthropic.Anthropic, anthropic.AsyncAnthropic):
        monkeypatch.setattr(cls, "_calculate_retry_timeout", lambda self, *args, **kwargs: 0.0)


# --- plain calls -----------------------------------------------------------------------------------------------------


def test_a_plain_create_returns_the_message_as_a_dict_and_sends_the_agents_request(skills):
    reply = message([text_block("Here are the notes."), tool_use_block("activate_skill", {"name": "tea-notes"}, "toolu_1")],
                    usage=usage(120, 30, 40, 0))
    api = FakeMessagesAPI([reply])
    model = model_for(api)
    agent = Agent(skills, model, MODEL_ID, show_path=str)
    request = agent.request([{"role": "user", "content": [text_block("Describe this oolong.")]}])

    got = model.create(request)

    assert isinstance(got, dict)
    assert got["id"] == reply["id"] and got["type"] == "message" and got["role"] == "assistant"
    assert got["content"] == reply["content"]
    assert got["stop_reason"] == "tool_use"
    assert usage_of(got) == reply["usage"]
    [sent] = api.requests
    assert sent.method == "POST" and sent.path == "/v1/messages"
    body = sent.body
    assert body["model"] == MODEL_ID
    assert body["max_tokens"] == agent.max_tokens
    assert body["system"] == [{"type": "text", "text": agent.system, "cache_control": {"type": "ephemeral"}}]
    assert body["system"][0]["text"].startswith(SYSTEM_INSTRUCTIONS + "\n\n<available_skills>")
    assert body["tools"] == tool_definitions(["tea-notes"])
    assert body["messages"] == [{"role": "user", "content": [text_block("Describe this oolong.")]}]
    assert "stream" not in body


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_the_key_travels_in_the_auth_header(monkeypatch, where):
    api = FakeMessagesAPI([text_message("ok")])
    if where == "environment":
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        model = AnthropicModel(MODEL_ID, http_client=api.client())
    else:
        model = model_for(api)

    model.create(a_request())

    headers = api.requests[0].headers
    assert sent_key(headers) == KEY
    assert KEY not in api.requests[0].raw.decode("utf-8")  # never in the body
    assert headers["anthropic-version"]


def test_streaming_hands_each_text_delta_to_on_text_in_order_and_returns_the_final_message():
    text = "Rolled oolong: orchid nose, creamy body, a long sweet finish."
    reply = message([text_block(text), tool_use_block("read_skill_resource", {"skill": "tea-notes", "path": "references/style.md"},
                                                      "toolu_s")], usage=usage(300, 45, 0, 250))
    api = FakeMessagesAPI([reply])
    received: list[str] = []

    got = model_for(api).create(a_request(), on_text=received.append)

    assert received == text_pieces(text) and len(received) > 5
    assert "".join(received) == text
    assert got["content"] == reply["content"]  # the tool input rebuilt from its input_json_delta fragments
    assert got["stop_reason"] == "tool_use"
    assert usage_of(got) == reply["usage"]  # input and cache counts from message_start, output from message_delta
    assert api.requests[0].body["stream"] is True


def test_a_stream_that_is_retried_delivers_its_text_once():
    api = FakeMessagesAPI([Error(529, "Overloaded"), text_message("Only once, please.")])
    received: list[str] = []

    got = model_for(api).create(a_request(), on_text=received.append)

    assert "".join(received) == "Only once, please."
    assert got["content"] == [text_block("Only once, please.")]
    assert len(api.requests) == 2


def test_anthropic_base_url_from_the_environment_is_honoured(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://fake-anthropic.invalid:8123")
    api = FakeMessagesAPI([text_message("from the other host")])
    model = model_for(api)
    assert model.base_url is None  # nothing passed: the SDK reads the environment

    got = model.create(a_request())

    assert got["content"] == [text_block("from the other host")]
    assert api.requests[0].headers["host"] == "fake-anthropic.invalid:8123"
    assert api.requests[0].path == "/v1/messages"


def test_an_explicit_base_url_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://from-environment.invalid")
    api = FakeMessagesAPI([text_message("ok")])

    model_for(api, base_url="http://explicit.invalid:9000").create(a_request())

    assert api.requests[0].headers["host"] == "explicit.invalid:9000"


# --- errors ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_a_401_is_one_line_naming_authentication_and_never_shows_the_key(monkeypatch, where):
    # a proxy that echoes the bad key back must not get it into the notebook
    api = FakeMessagesAPI([Error(401, f"invalid x-api-key {KEY}")])
    if where == "environment":
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        model = AnthropicModel(MODEL_ID, http_client=api.client())
    else:
        model = model_for(api)

    with pytest.raises(ModelError) as caught:
        model.create(a_request())

    error = caught.value
    assert error.kind == "authentication" and error.status == 401
    text = str(error)
    assert "\n" not in text
    assert "401" in text and "ANTHROPIC_API_KEY" in text
    assert KEY not in text and KEY not in repr(error) and KEY not in repr(error.args)
    assert KEY not in repr(model) and KEY not in str(model)
    assert error.__cause__ is None and error.__suppress_context__  # the SDK's error (with the raw body) is not chained
    assert len(api.requests) == 1  # a 401 is not retried


def test_repr_of_the_model_names_model_and_url_but_not_the_key():
    model = AnthropicModel("haiku", api_key=KEY, base_url="http://127.0.0.1:1", max_retries=5)
    assert repr(model) == "AnthropicModel(model='claude-haiku-5-5', base_url='http://127.0.0.1:1', max_retries=5)"
    assert KEY not in repr(model)


@pytest.mark.parametrize("status, kind", [(429, "rate_limit"), (529, "overloaded"), (500, "server"), (503, "server")])
@pytest.mark.parametrize("max_retries", [0, 1, 2])
def test_retryable_statuses_are_retried_max_retries_times_then_reported(status, kind, max_retries):
    api = FakeMessagesAPI([Error(status, "busy, try later")] * (max_retries + 1) + [text_message("never reached")])

    with pytest.raises(ModelError) as caught:
        model_for(api, max_retries=max_retries).create(a_request())

    assert len(api.requests) == max_retries + 1
    assert [r.headers["x-stainless-retry-count"] for r in api.requests] == [str(n) for n in range(max_retries + 1)]
    error = caught.value
    assert error.kind == kind and error.status == status
    assert f"HTTP {status}" in str(error) and "busy, try later" in str(error) and "retries" in str(error)
    assert "\n" not in str(error)
    assert api.remaining == 1


def test_the_default_is_three_attempts_and_a_retry_that_succeeds_is_invisible():
    api = FakeMessagesAPI([Error(429, "slow down"), Error(529, "Overloaded"), text_message("third time lucky")])

    got = model_for(api).create(a_request())

    assert got["content"] == [text_block("third time lucky")]
    assert len(api.requests) == 3
    assert AnthropicModel().max_retries == 2


@pytest.mark.parametrize("status, kind", [(400, "bad_request"), (403, "permission"), (404, "not_found"), (413, "too_large")])
def test_client_errors_are_not_retried_and_keep_their_kind(status, kind):
    api = FakeMessagesAPI([Error(status, "no good")])

    with pytest.raises(ModelError) as caught:
        model_for(api).create(a_request())

    assert (caught.value.kind, caught.value.status) == (kind, status)
    assert len(api.requests) == 1
    assert "retries" not in str(caught.value)


def test_a_timeout_is_kind_timeout(monkeypatch):
    never_sleep(monkeypatch)
    api = FakeMessagesAPI([httpx2.ReadTimeout("the read timed out")] * 3)

    with pytest.raises(ModelError) as caught:
        model_for(api).create(a_request())

    assert caught.value.kind == "timeout" and caught.value.status is None
    assert "timed out" in str(caught.value) and "\n" not in str(caught.value)
    assert len(api.requests) == 3  # the SDK retries timeouts too


def test_a_timeout_with_no_retries_is_one_attempt():
    api = FakeMessagesAPI([httpx2.ReadTimeout("the read timed out")])

    with pytest.raises(ModelError) as caught:
        model_for(api, max_retries=0).create(a_request())

    assert caught.value.kind == "timeout"
    assert len(api.requests) == 1


def test_a_connection_error_is_kind_connection_and_hides_the_key():
    api = FakeMessagesAPI([httpx2.ConnectError(f"refused while sending {KEY}")])

    with pytest.raises(ModelError) as caught:
        model_for(api, max_retries=0).create(a_request())

    assert caught.value.kind == "connection"
    assert "could not reach the model server" in str(caught.value)
    assert KEY not in str(caught.value)


def test_a_prompt_too_long_400_is_kind_context():
    api = FakeMessagesAPI([Error(400, "prompt is too long: 212345 tokens > 200000 maximum")])

    with pytest.raises(ModelError) as caught:
        model_for(api).create(a_request())

    assert (caught.value.kind, caught.value.status) == ("context", 400)
    assert "prompt is too long" in str(caught.value)


def test_an_error_in_the_middle_of_a_stream_keeps_its_meaning():
    api = FakeMessagesAPI([StreamError(text_message("Half an answer and then"), "overloaded_error", "Overloaded")])
    received: list[str] = []

    with pytest.raises(ModelError) as caught:
        model_for(api).create(a_request(), on_text=received.append)

    assert received  # part of the text arrived before the failure
    assert caught.value.kind == "overloaded"
    assert "HTTP 200" not in str(caught.value)


# --- errors inside an agent run ---------------------------------------------------------------------------------------


def test_a_500_in_the_middle_of_a_run_ends_it_with_the_trace_so_far(skills):
    api = FakeMessagesAPI([tool_message("activate_skill", {"name": "tea-notes"}, usage=usage(100, 12, 80, 0))]
                          + [Error(500, "Internal server error")] * 3)
    result = Agent(skills, model_for(api), MODEL_ID, show_path=str).run("Describe this oolong.")

    assert result.error is not None and "HTTP 500" in result.error and "Internal server error" in result.error
    assert result.stop_reason == "error" and not result.ok and not result.interrupted
    assert stages(result) == ["discover", "model", "activate"]
    first = result.trace[1]
    assert (first.input_tokens, first.output_tokens, first.cache_write_tokens) == (100, 12, 80)
    assert result.trace[2].object == "tea-notes" and result.trace[2].bytes > len(BODY)
    assert [c.name for c in result.tool_calls] == ["activate_skill"]
    assert result.usage["input_tokens"] == 100
    assert len(api.requests) == 1 + 3  # the failing call was tried max_retries + 1 times
    assert result.turns == 2


def test_a_500_in_the_middle_of_a_session_run_is_kept_as_the_last_run(skills, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    api = FakeMessagesAPI([tool_message("activate_skill", {"name": "tea-notes"})] + [Error(500, "boom")] * 2)
    session = SkillsSession(sources=[Source("session", str(tmp_path / "skills"), explicit=True)], cwd=str(tmp_path))
    session.model_client = model_for(api, max_retries=1)

    result = session.run("Describe this oolong.")

    assert session.last_run is result
    assert result.client == "anthropic" and result.model == DEFAULT_MODEL
    assert result.stop_reason == "error" and "HTTP 500" in result.error
    assert stages(result) == ["discover", "model", "activate"]
    assert [r.body["model"] for r in api.requests] == [DEFAULT_MODEL] * 3


def test_prompt_too_long_stops_the_run_as_context_window_exceeded(skills):
    api = FakeMessagesAPI([tool_message("activate_skill", {"name": "tea-notes"}),
                           Error(400, "prompt is too long: 212345 tokens > 200000 maximum")])
    result = Agent(skills, model_for(api), MODEL_ID, show_path=str).run("Describe this oolong.")

    assert result.stop_reason == "context_window_exceeded"
    assert "prompt is too long" in result.error
    assert stages(result) == ["discover", "model", "activate"]
    assert len(api.requests) == 2


def test_keyboard_interrupt_inside_the_transport_keeps_the_trace(skills):
    api = FakeMessagesAPI([tool_message("activate_skill", {"name": "tea-notes"}), KeyboardInterrupt()])
    result = Agent(skills, model_for(api), MODEL_ID, show_path=str).run("Describe this oolong.")

    assert result.interrupted is True
    assert result.stop_reason == "interrupted"
    assert result.error is None and not result.ok
    assert "KeyboardInterrupt" in result.note
    assert stages(result) == ["discover", "model", "activate"]
    assert [c.name for c in result.tool_calls] == ["activate_skill"]
    assert len(api.requests) == 2  # an interrupt is never retried


def test_a_full_run_through_the_sdk_activates_reads_and_answers(skills):
    api = FakeMessagesAPI([
        tool_message("activate_skill", {"name": "tea-notes"}, usage=usage(100, 10, 90, 0)),
        tool_message("read_skill_resource", {"skill": "tea-notes", "path": "references/style.md"}, usage=usage(150, 11, 0, 90)),
        text_message("Orchid, cream, honey.", usage=usage(170, 9, 0, 90)),
    ])
    streamed: list[str] = []
    result = Agent(skills, model_for(api), MODEL_ID, show_path=str).run("Describe this oolong.", on_text=streamed.append)

    assert result.ok and result.stop_reason == "end_turn" and result.final_text == "Orchid, cream, honey."
    assert "".join(streamed) == "Orchid, cream, honey."
    assert stages(result) == ["discover", "model", "activate", "model", "reference", "model"]
    assert result.usage == {"input_tokens": 420, "output_tokens": 30, "cache_creation_input_tokens": 90,
                            "cache_read_input_tokens": 180}
    last = api.requests[-1].body
    results = [b for m in last["messages"] if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"]
    assert results[1]["content"] == STYLE
    assert result.trace[4].bytes == len(STYLE.encode("utf-8"))
    assert all(r.body["system"] == api.requests[0].body["system"] for r in api.requests)


# --- async -----------------------------------------------------------------------------------------------------------


def test_acreate_goes_through_the_async_client():
    api = FakeMessagesAPI([text_message("async hello", usage=usage(7, 3))])
    model = AnthropicModel(MODEL_ID, api_key=KEY, async_http_client=api.async_client())

    got = asyncio.run(model.acreate(a_request()))

    assert got["content"] == [text_block("async hello")]
    assert usage_of(got)["input_tokens"] == 7
    assert api.requests[0].headers["x-stainless-async"].startswith("async")
    assert sent_key(api.requests[0].headers) == KEY


def test_acreate_maps_errors_after_retries():
    api = FakeMessagesAPI([Error(529, "Overloaded")] * 2)
    model = AnthropicModel(MODEL_ID, api_key=KEY, max_retries=1, async_http_client=api.async_client())

    with pytest.raises(ModelError) as caught:
        asyncio.run(model.acreate(a_request()))

    assert caught.value.kind == "overloaded" and caught.value.status == 529
    assert len(api.requests) == 2


# --- model ids and the background import -------------------------------------------------------------------------------


def test_resolve_model_prefers_explicit_then_environment_then_default(monkeypatch):
    assert resolve_model(None) == DEFAULT_MODEL
    assert resolve_model("opus") == "claude-opus-5-5"
    assert resolve_model("claude-exact-1") == "claude-exact-1"
    monkeypatch.setenv("SKILLS_MAGIC_MODEL", "haiku")
    assert resolve_model(None) == "claude-haiku-5-5"
    assert resolve_model("sonnet") == DEFAULT_MODEL
    assert AnthropicModel().model == "claude-haiku-5-5"


def test_warm_up_imports_the_sdk_once_in_the_background(monkeypatch):
    monkeypatch.setattr(anthropic_module, "_warm", None)
    warm_up()
    thread = anthropic_module._warm
    warm_up()
    assert anthropic_module._warm is thread and thread.daemon
    thread.join()
    assert "anthropic" in sys.modules
