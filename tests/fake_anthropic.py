"""A fake Anthropic Messages API for tests: Message JSON, its SSE stream, and two ways to serve scripted replies.

- `FakeMessagesAPI(replies)`: answers `POST /v1/messages` from a queue of scripted replies and records every request.
  `api.client()` / `api.async_client()` are `httpx2` clients over a `MockTransport` (for `AnthropicModel(http_client=...)`).
- `FakeAnthropicServer(replies)`: the same API on a real socket, 127.0.0.1 and a free port (`with ... as server:`;
  `server.url` is the base URL), for a kernel or anything else that only takes `ANTHROPIC_BASE_URL`.
- `QuietHandler`: its request handler's base, for any other stand-in web server a test runs (`reply` sends one whole
  response; nothing is logged to the test's output).

A reply is a Message dict (served as JSON, or as the SSE stream of that message when the request has "stream": true),
an `Error` (a status with an Anthropic error body; retryable ones carry `retry-after-ms: 1` so the SDK's retries never
wait), a `StreamError` (a 200 stream that fails with an `event: error` part-way), an exception instance (raised inside
the transport; MockTransport only), or a callable `reply(recorded_request) -> reply`. A request beyond the script gets
a 400 that the SDK does not retry, naming the request number.
"""

from __future__ import annotations

import itertools
import json
import queue
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAKE_MODEL = "claude-fake-1"
# what the SDK and the model choice read from the machine: a test starts with none of it
MACHINE_ANTHROPIC_SETUP = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS",
                           "ANTHROPIC_PROFILE", "ANTHROPIC_IDENTITY_TOKEN", "ANTHROPIC_IDENTITY_TOKEN_FILE",
                           "ANTHROPIC_FEDERATION_RULE_ID", "ANTHROPIC_ORGANIZATION_ID", "SKILLS_MAGIC_MODEL",
                           "SKILLS_MAGIC_MAX_RETRIES")
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               529: "overloaded_error"}
NO_WAIT = {"retry-after-ms": "1"}  # the SDK honours this before its own backoff: retries without sleeping
_ids = itertools.count(1)


# --- messages -----------------------------------------------------------------------------------------------------


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use_block(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_fake_{next(_ids):04d}", "name": name, "input": input}


def server_tool_use_block(name: str, input: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """A server tool call (web_search, web_fetch) as the API returns it: the server runs it, not the client."""
    return {"type": "server_tool_use", "id": id or f"srvtoolu_fake_{next(_ids):04d}", "name": name, "input": input}


def web_search_result(url: str, title: str, page_age: str | None = None) -> dict[str, Any]:
    """One search hit, with the opaque encrypted_content the API sends (it must go back as is on a continuation)."""
    result = {"type": "web_search_result", "url": url, "title": title,
              "encrypted_content": f"EncContent{next(_ids):04d}=="}
    return {**result, "page_age": page_age} if page_age is not None else result


def web_search_tool_result_block(tool_use_id: str, results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "web_search_tool_result", "tool_use_id": tool_use_id, "content": [dict(r) for r in results]}


def web_search_error_block(tool_use_id: str, code: str) -> dict[str, Any]:
    """A failed search (e.g. max_uses_exceeded): the result's content is an error object, not a list."""
    return {"type": "web_search_tool_result", "tool_use_id": tool_use_id,
            "content": {"type": "web_search_tool_result_error", "error_code": code}}


def web_fetch_tool_result_block(tool_use_id: str, url: str, text: str, title: str) -> dict[str, Any]:
    """A fetched page: a plain-text document with citations on, as web_fetch_20250910 returns it."""
    return {"type": "web_fetch_tool_result", "tool_use_id": tool_use_id, "content": {
        "type": "web_fetch_result", "url": url, "retrieved_at": "2026-12-01T10:00:00Z",
        "content": {"type": "document", "title": title, "citations": {"enabled": True},
                    "source": {"type": "text", "media_type": "text/plain", "data": text}}}}


def cited_text_block(text: str, citations: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A text block with its citations (web_search_result_location, char_location, ...)."""
    return {"type": "text", "text": text, "citations": [dict(c) for c in citations]}


def usage(input_tokens: int = 0, output_tokens: int = 0, cache_creation_input_tokens: int = 0,
          cache_read_input_tokens: int = 0) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_creation_input_tokens, "cache_read_input_tokens": cache_read_input_tokens}


def message(content: Sequence[dict[str, Any]] | str, stop_reason: str | None = None, *, usage: dict[str, int] | None = None,
            model: str = FAKE_MODEL, id: str | None = None, stop_sequence: str | None = None) -> dict[str, Any]:
    """A Message as the API returns it; `stop_reason` defaults to tool_use when there is a tool call, else end_turn."""
    blocks = [text_block(content)] if isinstance(content, str) else [dict(b) for b in content]
    if stop_reason is None:
        stop_reason = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {
        "id": id or f"msg_fake_{next(_ids):04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": dict(usage) if usage else {"input_tokens": 10, "output_tokens": 5},
    }


def text_message(text: str, **kwargs) -> dict[str, Any]:
    return message([text_block(text)], **kwargs)


def tool_message(name: str, input: dict[str, Any], text: str = "", *, id: str | None = None, **kwargs) -> dict[str, Any]:
    blocks = ([text_block(text)] if text else []) + [tool_use_block(name, input, id)]
    return message(blocks, **kwargs)


# --- the SSE stream of a message -----------------------------------------------------------------------------------


def text_pieces(text: str) -> list[str]:
    """How the fake splits a text block into text_delta events: a word with the spaces after it."""
    return re.findall(r"\s*\S+\s*|\s+", text) or [""]


def json_pieces(value: Any, size: int = 7) -> list[str]:
    """A tool input as input_json_delta fragments (the API sends partial JSON, cut anywhere)."""
    text = json.dumps(value, ensure_ascii=False)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def stream_events(msg: dict[str, Any], *, ping: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of a streamed Message, in the order and shapes the Messages API sends them."""
    u = msg.get("usage") or {}
    start_usage = {k: v for k, v in u.items() if k != "output_tokens"}
    start_usage["output_tokens"] = 1  # the API reports a placeholder count at the start, the total at the end
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {
        "type": "message_start",
        "message": {**{k: v for k, v in msg.items() if k not in ("content", "stop_reason", "stop_sequence", "usage")},
                    "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage},
    })]
    for index, block in enumerate(msg["content"]):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            if ping and index == 0:
                events.append(("ping", {"type": "ping"}))
            for piece in text_pieces(block["text"]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "text_delta", "text": piece}}))
        elif block["type"] == "tool_use":
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}))
            for piece in json_pieces(block["input"]):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "input_json_delta", "partial_json": piece}}))
        else:
            raise ValueError(f"the fake streams text and tool_use blocks, not {block['type']}")
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": msg.get("stop_sequence")},
        "usage": {"output_tokens": u.get("output_tokens", 0), **{k: v for k, v in u.items() if k != "output_tokens"}},
    }))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def sse(events: Iterable[tuple[str, dict[str, Any]]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n" for name, data in events).encode("utf-8")


def stream_bytes(msg: dict[str, Any]) -> bytes:
    return sse(stream_events(msg))


# --- scripted replies ----------------------------------------------------------------------------------------------


@dataclass
class Error:
    """An error response: `status` with the API's error body. Retryable statuses carry retry-after-ms: 1."""

    status: int
    message: str = "fake failure"
    type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.type or ERROR_TYPES.get(self.status, "api_error"),
                                           "message": self.message}}

    def all_headers(self) -> dict[str, str]:
        return {**NO_WAIT, "content-type": "application/json", "request-id": f"req_fake_{next(_ids):04d}", **self.headers}


@dataclass
class StreamError:
    """A streamed reply that starts as `msg` and then fails with `event: error` (HTTP 200, as the API does mid-stream)."""

    msg: dict[str, Any]
    status_type: str = "overloaded_error"
    message: str = "Overloaded"

    def body(self) -> bytes:
        events = stream_events(self.msg)
        cut = next(i for i, (name, _) in enumerate(events) if name == "content_block_stop")
        return sse(events[:cut] + [("error", {"type": "error", "error": {"type": self.status_type, "message": self.message}})])


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.raw)

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


class FakeMessagesAPI:
    """The scripted Messages API: `respond()` turns one request into (status, headers, body bytes)."""

    def __init__(self, replies: Iterable[Any] = ()):
        self.replies: queue.SimpleQueue = queue.SimpleQueue()
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        for reply in replies:
            self.add(reply)

    def add(self, *replies: Any) -> None:
        for reply in replies:
            self.replies.put(reply)

    @property
    def remaining(self) -> int:
        return self.replies.qsize()

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def respond(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], bytes]:
        recorded = Recorded(method, path, {k.lower(): v for k, v in headers.items()}, raw)
        with self._lock:
            self.requests.append(recorded)
            number = len(self.requests)
        if method != "POST" or path.split("?")[0].rstrip("/") != "/v1/messages":
            error = Error(404, f"the fake serves POST /v1/messages, not {method} {path}", headers={"x-should-retry": "false"})
            return error.status, error.all_headers(), json.dumps(error.body()).encode()
        try:
            reply = self.replies.get_nowait()
        except queue.Empty:
            error = Error(400, f"the fake has no scripted reply for request {number}", headers={"x-should-retry": "false"})
            return error.status, error.all_headers(), json.dumps(error.body()).encode()
        while callable(reply) and not isinstance(reply, type):
            reply = reply(recorded)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Error):
            return reply.status, reply.all_headers(), json.dumps(reply.body(), ensure_ascii=False).encode("utf-8")
        if isinstance(reply, StreamError):
            return 200, {"content-type": "text/event-stream"}, reply.body()
        if recorded.stream:
            return 200, {"content-type": "text/event-stream", "request-id": f"req_fake_{number}"}, stream_bytes(reply)
        return (200, {"content-type": "application/json", "request-id": f"req_fake_{number}"},
                json.dumps(reply, ensure_ascii=False).encode("utf-8"))

    # --- httpx2 MockTransport ---------------------------------------------------------------------------------------

    def handler(self, request):
        import httpx2

        status, headers, body = self.respond(request.method, request.url.raw_path.decode(), dict(request.headers),
                                             request.read())
        return httpx2.Response(status, headers=headers, content=body)

    async def async_handler(self, request):
        import httpx2

        status, headers, body = self.respond(request.method, request.url.raw_path.decode(), dict(request.headers),
                                             await request.aread())
        return httpx2.Response(status, headers=headers, content=body)

    def client(self):
        import httpx2

        return httpx2.Client(transport=httpx2.MockTransport(self.handler))

    def async_client(self):
        import httpx2

        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.async_handler))


# --- a real socket -------------------------------------------------------------------------------------------------


class QuietHandler(BaseHTTPRequestHandler):
    """A stand-in server's request handler: `reply` sends a status, headers and a body; nothing is logged."""

    def reply(self, body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def log_message(self, format, *args):  # keep pytest's output clean
        pass


class _Handler(QuietHandler):
    protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers after stop()
    api: FakeMessagesAPI  # set on the subclass made per server

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            status, headers, body = self.api.respond(self.command, self.path, dict(self.headers.items()), raw)
        except BaseException as error:  # noqa: BLE001 -- an exception reply cannot cross a socket: a 500 that says so, never retried
            status, headers = 500, {"content-type": "application/json", "x-should-retry": "false"}
            body = json.dumps(Error(500, f"fake server raised {error!r}").body()).encode()
        self.reply(body, status, headers)

    do_POST = do_GET = _serve


class FakeAnthropicServer:
    """`with FakeAnthropicServer(replies) as server:` serves the fake API at `server.url` until the block ends."""

    def __init__(self, replies: Iterable[Any] = ()):
        self.api = FakeMessagesAPI(replies)
        handler = type("FakeAnthropicHandler", (_Handler,), {"api": self.api})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-anthropic-server", daemon=True)

    @property
    def requests(self) -> list[Recorded]:
        return self.api.requests

    def add(self, *replies: Any) -> None:
        self.api.add(*replies)

    def start(self) -> FakeAnthropicServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of a request body's messages, in order."""
    return [block for m in body.get("messages", []) if m["role"] == "user" and isinstance(m["content"], list)
            for block in m["content"] if block.get("type") == "tool_result"]


def utf8_size(content: Any) -> int:
    """UTF-8 bytes of a tool_result's content (a string, or text blocks)."""
    if isinstance(content, list):
        return sum(len(b.get("text", "").encode("utf-8")) for b in content)
    return len(str(content).encode("utf-8"))


def sent_key(headers: dict[str, str]) -> str | None:
    """The API key a request carried: `x-api-key`, or `Authorization: Bearer KEY` (how anthropic 2.x sends it)."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    authorization = headers.get("authorization", "")
    return authorization[len("Bearer "):] if authorization.startswith("Bearer ") else None


ReplyFn = Callable[[Recorded], Any]


def forget_machine_setup(monkeypatch, tmp_path) -> None:
    """No real credentials, base URL, profile, model choice or retry setting leaks in from the machine running the
    tests; the SDK's config folder points at an empty place."""
    for name in MACHINE_ANTHROPIC_SETUP:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path / "no-anthropic-config"))
