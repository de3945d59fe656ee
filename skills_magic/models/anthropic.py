"""Claude through the official `anthropic` SDK (sync and async), or any Anthropic-compatible server.

The key and base URL come from the environment (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`), so Ollama (>= 0.14) and
llama.cpp's server work unchanged. Retries are the SDK's own (408/409/429/5xx/529, with backoff and retry-after).
`import anthropic` is slow (about 1.5 s), so it happens on first use, or in the background via `warm_up()`.
Errors become one-sentence `ModelError`s that never contain the key.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from skills_magic.errors import InvalidSetting
from skills_magic.models.base import ModelError, NoModelConfigured, Request, Response, TextCallback

DEFAULT_MODEL = "claude-sonnet-5-5"  # a current Claude model; `%skills model`, SKILLS_MAGIC_MODEL or --model change it
MODEL_VARIABLE = "SKILLS_MAGIC_MODEL"
DEFAULT_MAX_RETRIES = 2  # the SDK's default: three attempts in all
RETRIES_VARIABLE = "SKILLS_MAGIC_MAX_RETRIES"
DEFAULT_TIMEOUT_SECONDS = 600.0  # the SDK's default for one request
ALIASES = {  # the short names skills use in their `model` field (Claude Code's convention)
    "sonnet": DEFAULT_MODEL,
    "opus": "claude-opus-5-5",
    "haiku": "claude-haiku-5-5",
}
# what a failure means to the user, by HTTP status
_STATUS_KINDS = {400: "bad_request", 401: "authentication", 403: "permission", 404: "not_found", 413: "too_large",
                 429: "rate_limit", 500: "server", 529: "overloaded"}

_ERROR_TYPE_KINDS = {"overloaded_error": "overloaded", "rate_limit_error": "rate_limit", "api_error": "server",
                     "authentication_error": "authentication", "permission_error": "permission",
                     "invalid_request_error": "bad_request", "request_too_large": "too_large", "timeout_error": "timeout"}

# the headers a request authenticates with: without one (and no credentials provider) the SDK fails every request
# with a TypeError ("Could not resolve authentication method") deep in its request building
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key"})
# variables that name a credential the user chose on purpose: when the SDK cannot load it, its own message says why
CHOSEN_CREDENTIAL_VARIABLES = ("ANTHROPIC_PROFILE", "ANTHROPIC_IDENTITY_TOKEN", "ANTHROPIC_IDENTITY_TOKEN_FILE")

_warm: threading.Thread | None = None


def warm_up() -> None:
    """Import the SDK in a background thread (once), so the first run does not wait for it."""
    global _warm
    if _warm is None:
        _warm = threading.Thread(target=lambda: __import__("anthropic"), name="skills-magic-warm-anthropic", daemon=True)
        _warm.start()


def resolve_model(name: str | None) -> str:
    """A model id from an explicit name, an alias, SKILLS_MAGIC_MODEL, or the default."""
    chosen = name or os.environ.get(MODEL_VARIABLE) or DEFAULT_MODEL
    return ALIASES.get(chosen, chosen)


def _retries_from_environment() -> int:
    value = os.environ.get(RETRIES_VARIABLE, "")
    if not value:
        return DEFAULT_MAX_RETRIES
    if not value.isdigit():
        raise InvalidSetting(f"{RETRIES_VARIABLE} must be a whole number of retries, not {value!r}")
    return int(value)


def _scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


def model_error(error: Exception, secret: str | None) -> ModelError:
    """An SDK error as a ModelError of one sentence, with `secret` (the API key) scrubbed from it."""
    import anthropic

    if isinstance(error, anthropic.APITimeoutError):
        return ModelError("the model did not answer in time (request timed out after the SDK's retries)", kind="timeout")
    if isinstance(error, anthropic.APIConnectionError):
        return ModelError(f"could not reach the model server: {_scrub(str(error), secret)}", kind="connection")
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        body = error.body if isinstance(error.body, dict) else {}
        inner = body.get("error") if isinstance(body.get("error"), dict) else {}
        detail = f": {_scrub(str(inner['message']), secret)}" if inner.get("message") else ""
        if status == 200:  # the stream had begun when the API sent an error event: its type says what happened
            kind = _ERROR_TYPE_KINDS.get(str(inner.get("type")), "error")
            return ModelError(f"the model's answer stopped with an error ({kind}){detail}", None, kind)
        kind = _STATUS_KINDS.get(status, "server" if status >= 500 else "error")
        if kind == "authentication":
            return ModelError(f"authentication failed (HTTP 401){detail}; check ANTHROPIC_API_KEY", status, kind)
        if status == 400 and "prompt is too long" in detail:
            kind = "context"
        retried = " after the SDK's retries" if status in (408, 409, 429) or status >= 500 else ""
        return ModelError(f"the model call failed with HTTP {status}{retried}{detail}", status, kind)
    return ModelError(_scrub(f"{type(error).__name__}: {error}", secret))


def _authenticated(make, **options):
    """An SDK client that can authenticate, or NoModelConfigured (the paragraph `auto` gives) before any request:
    with no key, token, profile or credential header the SDK would fail each request with a TypeError traceback."""
    import anthropic

    try:
        sdk = make(**options)
    except anthropic.CredentialsError:
        # a profile or identity the user named that cannot be loaded: the SDK's message says which and why
        if any(os.environ.get(name) for name in CHOSEN_CREDENTIAL_VARIABLES):
            raise
        raise NoModelConfigured() from None  # only the default profile was looked for, and there is none
    headers = {name.lower() for name, value in sdk.default_headers.items() if isinstance(value, str) and value}
    if sdk.credentials is None and not headers & CREDENTIAL_HEADERS:
        raise NoModelConfigured()
    return sdk


class AnthropicModel:
    """The Messages API through `anthropic.Anthropic` / `anthropic.AsyncAnthropic`."""

    name = "anthropic"
    supports_batches = True  # `skills_magic.models.batch` sends Message Batches through `client()`
    source = None  # the API itself: nothing to show

    def __init__(self, model: str | None = None, *, api_key: str | None = None, base_url: str | None = None,
                 max_retries: int | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS,
                 http_client: Any = None, async_http_client: Any = None):
        self.model = resolve_model(model)
        self._api_key = api_key  # None: the SDK reads ANTHROPIC_API_KEY itself
        self.base_url = base_url  # None: the SDK reads ANTHROPIC_BASE_URL itself
        self.max_retries = max_retries if max_retries is not None else _retries_from_environment()
        self.timeout = timeout
        self._http_client = http_client  # an httpx2.Client, e.g. with a MockTransport in tests
        self._async_http_client = async_http_client
        self._sync: Any = None
        self._async: Any = None

    def __repr__(self) -> str:  # never shows the key
        return f"AnthropicModel(model={self.model!r}, base_url={self.base_url!r}, max_retries={self.max_retries})"

    @property
    def api_key(self) -> str | None:
        """The key the calls use (given, else ANTHROPIC_API_KEY), so that messages can be scrubbed of it."""
        return self._api_key or os.environ.get("ANTHROPIC_API_KEY")

    def _options(self) -> dict[str, Any]:
        return {"api_key": self._api_key, "base_url": self.base_url, "max_retries": self.max_retries, "timeout": self.timeout}

    def for_new_loop(self) -> AnthropicModel:
        """The same settings with a fresh async client: an async client belongs to the event loop that first used it."""
        copy = AnthropicModel.__new__(AnthropicModel)
        copy.__dict__.update(self.__dict__)
        copy._async = None
        return copy

    def client(self):
        if self._sync is None:
            import anthropic

            self._sync = _authenticated(anthropic.Anthropic, **self._options(), http_client=self._http_client)
        return self._sync

    def async_client(self):
        if self._async is None:
            import anthropic

            self._async = _authenticated(anthropic.AsyncAnthropic, **self._options(), http_client=self._async_http_client)
        return self._async

    def create(self, request: Request, on_text: TextCallback | None = None) -> Response:
        import anthropic

        try:
            if on_text is None:
                message = self.client().messages.create(**request)
            else:
                with self.client().messages.stream(**request) as stream:
                    for text in stream.text_stream:
                        on_text(text)
                    message = stream.get_final_message()
        except anthropic.AnthropicError as error:
            raise model_error(error, self.api_key) from None
        return message.model_dump(mode="json", exclude_none=True)

    async def acreate(self, request: Request) -> Response:
        import anthropic

        try:
            message = await self.async_client().messages.create(**request)
        except anthropic.AnthropicError as error:
            raise model_error(error, self.api_key) from None
        return message.model_dump(mode="json", exclude_none=True)
