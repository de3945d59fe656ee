"""The model protocol: one Messages API request in, one Messages API response out, as plain JSON-shaped dicts.

Plain dicts keep the protocol narrow (the agent loop never sees an SDK type), make cassettes a JSON dump, and let a
scripted model be a list of turns. `on_text` receives text as it arrives when the client can stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from skills_magic.errors import SkillsMagicError

Request = dict[str, Any]  # the body of POST /v1/messages: model, system, messages, tools, max_tokens, ...
Response = dict[str, Any]  # a Message: id, content blocks, stop_reason, stop_sequence, usage
TextCallback = Callable[[str], None]


@runtime_checkable
class ModelClient(Protocol):
    """What the agent loop needs from a model."""

    name: str  # "anthropic", "scripted", "replay", ...
    # what a client can do or holds beyond `create`, declared here with a plain client's defaults (never probed)
    supports_batches: bool = False  # Message Batches (`skills_magic.models.batch`): needs `client()` and `api_key`
    source: str | None = None  # where the answers come from (a turns file, a cassette): `%skills model` shows it
    placeholders: dict[str, str] | None = None  # a cassette's: values written as placeholders (the session id, run ids)
    recorded_model: str | None = None  # a cassette's: the model id its exchanges were recorded with
    harness: str = "native"  # whose agent loop runs: this project's ("native") or Claude Code's ("claude-code")
    billed: bool = True  # its calls cost money (a scripted model's and a cassette's do not): large evals ask first

    def create(self, request: Request, on_text: TextCallback | None = None) -> Response: ...

    async def acreate(self, request: Request) -> Response: ...

    def for_new_loop(self) -> ModelClient:
        """The same client for another event loop (an async SDK client belongs to the loop that first used it)."""
        return self


class ObservedClient:
    """A wrapper around `inner` that sees each exchange (`_seen(request, response)`: a cassette, the run log) and
    passes requests and responses on unchanged."""

    inner: ModelClient

    def _seen(self, request: Request, response: Response) -> None:
        raise NotImplementedError

    def create(self, request: Request, on_text: TextCallback | None = None) -> Response:
        response = self.inner.create(request, on_text)
        self._seen(request, response)
        return response

    async def acreate(self, request: Request) -> Response:
        response = await self.inner.acreate(request)
        self._seen(request, response)
        return response


@dataclass(frozen=True)
class Capabilities:
    """What the protocol says a client can do or holds beyond `create`, with a plain client's defaults filled in."""

    supports_batches: bool = False
    source: str | None = None
    placeholders: dict[str, str] | None = None
    recorded_model: str | None = None
    harness: str = "native"
    billed: bool = True


def capabilities(client: ModelClient) -> Capabilities:
    """The one place a client's optional protocol attributes are read: a duck-typed client (a test's, a user's) may
    leave any of them out, and then has the protocol's default."""
    defaults = Capabilities()
    return Capabilities(**{name: getattr(client, name, getattr(defaults, name)) for name in defaults.__dataclass_fields__})


def client_name(client: Any) -> str:
    """`client.name`, or for an object that is no model client at all (a caller's mistake) its type's name."""
    return getattr(client, "name", type(client).__name__)


def for_new_loop(client: ModelClient) -> ModelClient:
    """`client.for_new_loop()`, or the client itself where it does not declare one (it then has no async state)."""
    fresh = getattr(client, "for_new_loop", None)
    return fresh() if fresh is not None else client


class ModelError(SkillsMagicError):
    """A model call failed after the SDK's retries; the message is one clear sentence and never holds a key."""

    def __init__(self, message: str, status: int | None = None, kind: str = "error"):
        super().__init__(message)
        self.status = status
        self.kind = kind  # "authentication", "rate_limit", "overloaded", "server", "timeout", "connection", "context", ...


class NoModelConfigured(SkillsMagicError):
    """No API key and no other client chosen."""

    def __init__(self) -> None:
        super().__init__(
            "No model is configured: ANTHROPIC_API_KEY is not set. To call Claude, set it in the kernel's environment "
            "(for example `%env ANTHROPIC_API_KEY=...` or export it before starting Jupyter; ANTHROPIC_BASE_URL points "
            "at an Anthropic-compatible server such as Ollama or llama.cpp). To work offline, choose the scripted model "
            "(`%skills model scripted PATH` with turns in a YAML/JSON file) or replay a recorded cassette "
            "(`%skills model replay CASSETTE`). `%%skill run --no-model --script PATH NAME` runs a skill's script "
            "without any model."
        )


def usage_of(response: Response) -> dict[str, int]:
    """The token counts the API reported (never estimated), zero where a field is absent."""
    usage = response.get("usage") or {}
    return {
        "input_tokens": int(usage.get("input_tokens") or 0),
        "output_tokens": int(usage.get("output_tokens") or 0),
        "cache_creation_input_tokens": int(usage.get("cache_creation_input_tokens") or 0),
        "cache_read_input_tokens": int(usage.get("cache_read_input_tokens") or 0),
    }
