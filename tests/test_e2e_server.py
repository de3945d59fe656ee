"""End to end: a notebook executed by nbclient in a real kernel, talking to a fake Messages API on 127.0.0.1.

The kernel knows nothing of the test: it gets ANTHROPIC_BASE_URL and a fake ANTHROPIC_API_KEY from its environment,
the official SDK sends real HTTP requests, and the server answers from a script (activate the skill, read a resource,
answer). Everything asserted about bytes is measured from what the server actually received.
"""

from __future__ import annotations

import json

import nbformat
import pytest
from kernels import bundle, execute

from fake_anthropic import (Error, FakeAnthropicServer, forget_machine_setup, message, sent_key, text_block, text_message,
                            text_pieces, tool_message, tool_results, tool_use_block, usage, utf8_size)
from skillfiles import tea_notes_skill
from skills_magic.models.anthropic import DEFAULT_MODEL, AnthropicModel
from skills_magic.models.base import ModelError

FAKE_KEY = "sk-ant-e2e-FAKE-KEY-7f3a9c1d2e"
RUN_MIME = "application/vnd.skills-magic.run+json"
TRACE_MIME = "application/vnd.skills-magic.trace+json"
STYLE = "Three lines at most — ünïcode ☕ and “quotes”.\nNo marketing words.\n"
BODY = "# Tea notes\n\nRead `references/style.md` before writing, then write the notes.\n"
FIRST_ANSWER = "Orchid nose, creamy body, a long honey finish."
SECOND_ANSWER = "Smoke, leather, dried longan."
TASK = "Write tasting notes for this Dong Ding oolong."
RUN_USAGES = [usage(1200, 40, 1000, 0), usage(1350, 35, 0, 1000), usage(1420, 60, 0, 1000)]


@pytest.fixture
def environment(monkeypatch, tmp_path):
    """The kernel inherits os.environ: the fake server's URL and key, and nothing else of the machine's Anthropic setup."""
    forget_machine_setup(monkeypatch, tmp_path)
    for name in ("SKILLS_MAGIC_PATH", "SKILLS_MAGIC_SOURCES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)

    def point_at(server: FakeAnthropicServer) -> None:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)

    return point_at


@pytest.fixture
def skill_folder(tmp_path):
    return tea_notes_skill(tmp_path / "my-skills" / "tea-notes", BODY, STYLE,
                           description="Writes tasting notes for a tea. Use when asked about a tea.")


def run_replies(answer: str) -> list:
    return [
        tool_message("activate_skill", {"name": "tea-notes"}, text="I'll use the tea-notes skill.", usage=RUN_USAGES[0]),
        tool_message("read_skill_resource", {"skill": "tea-notes", "path": "references/style.md"}, usage=RUN_USAGES[1]),
        text_message(answer, usage=RUN_USAGES[2]),
    ]


def test_a_notebook_runs_a_skill_against_the_fake_api(environment, skill_folder, tmp_path):
    replies = run_replies(FIRST_ANSWER) + run_replies(SECOND_ANSWER) + [Error(401, f"invalid x-api-key: {FAKE_KEY}")]
    with FakeAnthropicServer(replies) as server:
        environment(server)
        nb = execute(tmp_path, [
            "%env SKILLS_MAGIC_SOURCES=bundled",
            "%load_ext skills_magic",
            f"%skills add {skill_folder}",
            f"%%skill run\n{TASK}",
            "%skills trace",
            "%%skill run\nAnd now notes for a roasted Tieguanyin.",
            "%%skill run\nOne more, please.",
        ])
        received = list(server.requests)

    # --- what the server saw ---
    assert len(received) == 7 and server.api.remaining == 0
    assert all(r.method == "POST" and r.path == "/v1/messages" for r in received)
    assert all(sent_key(r.headers) == FAKE_KEY for r in received)
    bodies = [r.body for r in received]
    assert all(b["model"] == DEFAULT_MODEL and "stream" not in b for b in bodies)  # nbclient: not interactive, no stream
    assert [len(b["messages"]) for b in bodies] == [1, 3, 5, 1, 3, 5, 1]
    system = bodies[0]["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    raw_systems = [json.dumps(b["system"], ensure_ascii=False).encode("utf-8") for b in bodies]
    assert len(set(raw_systems)) == 1  # byte-identical in every call of both runs (and the third)
    catalog = system[0]["text"][system[0]["text"].index("<available_skills>"):]
    assert "<name>\ntea-notes\n</name>" in catalog and "style.md" not in catalog  # only the catalog until activation

    # --- the first run, as the notebook shows it ---
    run = bundle(nb.cells[3], RUN_MIME)
    assert run["final_text"] == FIRST_ANSWER
    assert run["stop_reason"] == "end_turn" and run["error"] is None and not run["interrupted"]
    assert (run["client"], run["model"], run["turns"], run["skill"]) == ("anthropic", DEFAULT_MODEL, 3, None)
    assert run["usage"] == {key: sum(u[key] for u in RUN_USAGES) for key in RUN_USAGES[0]}
    answered = tool_results(bodies[2])
    assert [r["tool_use_id"] for r in answered] == [b["id"] for m in bodies[2]["messages"] if m["role"] == "assistant"
                                                    for b in m["content"] if b["type"] == "tool_use"]
    activation_bytes, style_bytes = (utf8_size(r["content"]) for r in answered)
    assert answered[1]["content"] == STYLE and style_bytes == len(STYLE.encode("utf-8")) > len(STYLE)
    assert BODY.strip() in answered[0]["content"]
    assert run["tool_calls"] == [
        {"name": "activate_skill", "input": {"name": "tea-notes"}, "result_bytes": activation_bytes, "is_error": False,
         "error": None},
        {"name": "read_skill_resource", "input": {"skill": "tea-notes", "path": "references/style.md"},
         "result_bytes": style_bytes, "is_error": False, "error": None},
    ]
    trace = run["trace"]
    assert [row["stage"] for row in trace] == ["discover", "model", "activate", "model", "reference", "model"]
    assert trace[0]["bytes"] == len(catalog.encode("utf-8"))
    assert trace[2] == {"stage": "activate", "object": "tea-notes", "bytes": activation_bytes}
    assert trace[4] == {"stage": "reference", "object": "tea-notes/references/style.md", "bytes": style_bytes}
    for row, reported, stop in zip([trace[1], trace[3], trace[5]], RUN_USAGES, ["tool_use", "tool_use", "end_turn"]):
        assert row["input_tokens"] == reported["input_tokens"] and row["output_tokens"] == reported["output_tokens"]
        assert row["cache_write_tokens"] == reported["cache_creation_input_tokens"]
        assert row["cache_read_tokens"] == reported["cache_read_input_tokens"]
        assert row["detail"] == stop
    text = next(o["data"]["text/plain"] for o in nb.cells[3].outputs if o.get("output_type") == "execute_result")
    assert FIRST_ANSWER in text and "stop: end_turn after 3 model calls" in text

    # --- %skills trace shows the same rows ---
    assert bundle(nb.cells[4], TRACE_MIME) == {"trace": trace}

    # --- the second run: same catalog, same bytes ---
    second = bundle(nb.cells[5], RUN_MIME)
    assert second["final_text"] == SECOND_ANSWER and second["stop_reason"] == "end_turn"
    assert [row["bytes"] for row in second["trace"] if "bytes" in row] == [row["bytes"] for row in trace if "bytes" in row]

    # --- the third run: the server refuses the key (and echoes it): a clear error, never the key ---
    third = bundle(nb.cells[6], RUN_MIME)
    assert third["stop_reason"] == "error"
    assert third["error"].startswith("authentication failed (HTTP 401)") and "ANTHROPIC_API_KEY" in third["error"]
    assert [row["stage"] for row in third["trace"]] == ["discover"]

    # --- nothing in the notebook holds the key ---
    for cell in nb.cells:
        assert not any(o.get("output_type") == "error" for o in cell.outputs), cell.outputs
    assert FAKE_KEY not in nbformat.writes(nb)


def test_streaming_through_the_server_hands_over_each_delta(environment, tmp_path):
    text = "Streamed over a real socket, word by word."
    reply = message([text_block(text), tool_use_block("activate_skill", {"name": "tea-notes"}, "toolu_stream")],
                    usage=usage(50, 12, 0, 40))
    with FakeAnthropicServer([Error(529, "Overloaded"), reply]) as server:
        model = AnthropicModel("claude-test-1", base_url=server.url)
        received: list[str] = []
        got = model.create({"model": "claude-test-1", "max_tokens": 256,
                            "messages": [{"role": "user", "content": [text_block("Stream, please.")]}]},
                           on_text=received.append)

    assert received == text_pieces(text) and "".join(received) == text
    assert got["content"] == reply["content"] and got["stop_reason"] == "tool_use"
    assert got["usage"]["input_tokens"] == 50 and got["usage"]["output_tokens"] == 12
    assert got["usage"]["cache_read_input_tokens"] == 40
    assert len(server.requests) == 2  # the 529 was retried (without waiting: retry-after-ms)
    assert all(r.body["stream"] is True and sent_key(r.headers) == FAKE_KEY for r in server.requests)


def test_a_server_that_is_gone_is_a_connection_error(environment):
    with FakeAnthropicServer() as server:
        url = server.url
    # the port is closed now: nothing listens there
    model = AnthropicModel("claude-test-1", base_url=url, max_retries=0)
    with pytest.raises(ModelError) as caught:
        model.create({"model": "claude-test-1", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})

    assert caught.value.kind == "connection"
    assert FAKE_KEY not in str(caught.value)


def test_the_fake_server_refuses_what_it_was_not_scripted_for(environment):
    with FakeAnthropicServer([text_message("only one")]) as server:
        model = AnthropicModel("claude-test-1", base_url=server.url)
        request = {"model": "claude-test-1", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        assert model.create(request)["content"] == [text_block("only one")]
        with pytest.raises(ModelError) as caught:
            model.create(request)

    assert caught.value.status == 400 and "no scripted reply for request 2" in str(caught.value)
    assert len(server.requests) == 2  # x-should-retry: false
