"""Cassettes: record each request/response pair of a real run, replay them strictly.

A cassette is a JSON file: {"version": 1, "model": ..., "exchanges": [{"request": ..., "response": ...}]}. Nothing
secret is written: requests are bodies (the key travels in a header and is never seen here), every string is masked
by `skills_magic.redact` (a secret environment variable's value becomes `[redacted:NAME]`; a URL's password, a
webhook URL or a token such as `sk-ant-...` in a tool result becomes `***`). Values that change on every run
(the session id a skill body may contain) are written as placeholders. Replay compares each request with the
recorded one and fails with a readable diff when they differ, never silently serving a mismatched answer.

A conversation across cells (`%%skill run --continue`) is one cassette: each cell's exchanges follow the earlier
cells' (`keep`), and replaying the cells in order serves each its own (`start`).
"""

from __future__ import annotations

import difflib
import json
import os
from typing import Any

from skills_magic.models.base import ModelClient, ModelError, ObservedClient, Request, Response, TextCallback

CASSETTE_VERSION = 1
SECRET_LABEL = "[redacted:{name}]"  # a masked environment value says which variable it was, so a reader can set it
MAX_DIFF_LINES = 60  # enough to see what changed without flooding a cell


class ReplayMismatch(ModelError):
    """The run sent a request the cassette does not have."""

    def __init__(self, message: str):
        super().__init__(message, kind="replay")


def _replace_strings(value: Any, replacements: dict[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in replacements.items():
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {k: _replace_strings(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_strings(v, replacements) for v in value]
    return value


class _Placeholders:
    """Values to write as placeholders (set by the agent, e.g. {session_id: "${CLAUDE_SESSION_ID}"})."""

    def __init__(self) -> None:
        self.placeholders: dict[str, str] = {}

    def _normalize(self, value: Any) -> Any:
        """Masked (the same way when recording and when comparing a replayed request), then placeholders."""
        from skills_magic.redact import redactor

        return _replace_strings(redactor(label=SECRET_LABEL).mask_data(value), self.placeholders)


class RecordingModel(_Placeholders, ObservedClient):
    """Wraps a real client and appends each exchange to a cassette (rewritten whole, so a stopped run keeps its part)."""

    def __init__(self, inner: ModelClient, path: str | os.PathLike, keep: int = 0):
        """With `keep`, the cassette's first `keep` exchanges stay and the new ones follow them (a conversation
        recorded across cells: `--continue --record FILE` after `--record FILE`)."""
        super().__init__()
        self.inner = inner
        self.name = f"{inner.name}+record"
        self.model = getattr(inner, "model", None)
        self.path = os.fspath(path)
        self.source = self.path  # the cassette being written
        self.exchanges: list[dict[str, Any]] = []
        if keep:
            try:
                recorded_model, earlier = read_cassette(self.path)
            except (OSError, ReplayMismatch):  # moved away or overwritten since the last cell: nothing to go on from
                recorded_model, earlier = None, []
            if len(earlier) < keep:
                raise ModelError(f"cannot go on recording {os.path.basename(self.path)}: it holds {len(earlier)} of the "
                                 f"{keep} exchanges the conversation recorded in it so far; record it again from the "
                                 "start (`%skills reset`, then --record)", kind="record")
            self.model, self.exchanges = recorded_model or self.model, earlier[:keep]
        try:  # before any model call: a cassette that cannot be written must not cost a paid call first
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._write()
        except OSError as error:
            raise ModelError(f"cannot write the cassette {self.path}: {error.strerror or error}", kind="record") from None

    def _write(self) -> None:
        cassette = {"version": CASSETTE_VERSION, "model": self.model, "exchanges": self.exchanges}
        with open(self.path, "w", encoding="utf-8") as handle:
            json.dump(cassette, handle, indent=1, ensure_ascii=False, sort_keys=True)
            handle.write("\n")

    @property
    def cassette_position(self) -> tuple[str, int]:
        """(the cassette, how many exchanges it holds now): where a continued conversation's next cell goes on."""
        return self.path, len(self.exchanges)

    def _seen(self, request: Request, response: Response) -> None:
        self.model = request.get("model", self.model)  # the id the requests carry, which a replay must send again
        self.exchanges.append({"request": self._normalize(request), "response": self._normalize(response)})
        self._write()


def read_cassette(path: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(the model id the recorded requests carry, the exchanges) of a cassette; ReplayMismatch when it is not one."""
    not_a_cassette = ReplayMismatch(f"{os.path.basename(path)} is not a version-{CASSETTE_VERSION} skills-magic cassette")
    try:
        with open(path, encoding="utf-8") as handle:
            cassette = json.load(handle)
    except (ValueError, UnicodeDecodeError):
        raise not_a_cassette from None
    exchanges = cassette.get("exchanges") if isinstance(cassette, dict) else None
    if not isinstance(exchanges, list) or cassette.get("version") != CASSETTE_VERSION or not all(
        isinstance(e, dict) and isinstance(e.get("request"), dict) and isinstance(e.get("response"), dict) for e in exchanges
    ):
        raise not_a_cassette
    return cassette.get("model"), exchanges


def _pretty(value: Any) -> list[str]:
    return json.dumps(value, indent=1, ensure_ascii=False, sort_keys=True).splitlines()


class ReplayModel(_Placeholders):
    """Serves a cassette's responses in order, for requests equal to the recorded ones."""

    name = "replay"
    billed = False  # answers from the cassette: nothing is spent

    def __init__(self, path: str | os.PathLike, start: int = 0):
        """With `start`, the first `start` exchanges were served to earlier cells of the same conversation
        (`--continue --replay FILE`): replay goes on from there."""
        super().__init__()
        self.path = os.fspath(path)
        self.source = self.path  # the cassette being replayed
        self.recorded_model, self.exchanges = read_cassette(self.path)  # the model id the recorded requests carry
        self.model = self.recorded_model  # what the session read before `recorded_model` (kept for older callers)
        self.position = start

    @property
    def cassette_position(self) -> tuple[str, int]:
        """(the cassette, how many exchanges were served): where a continued conversation's next cell goes on."""
        return self.path, self.position

    def create(self, request: Request, on_text: TextCallback | None = None) -> Response:
        if self.position >= len(self.exchanges):
            raise ReplayMismatch(
                f"the run made request {self.position + 1}, but {os.path.basename(self.path)} recorded only "
                f"{len(self.exchanges)}; record the run again with --record"
            )
        recorded = self.exchanges[self.position]
        sent = self._normalize(request)
        if sent != recorded["request"]:
            diff = list(difflib.unified_diff(_pretty(recorded["request"]), _pretty(sent), "recorded", "sent", lineterm="", n=2))
            shown = "\n".join(diff[:MAX_DIFF_LINES]) + ("\n..." if len(diff) > MAX_DIFF_LINES else "")
            raise ReplayMismatch(
                f"request {self.position + 1} differs from the one in {os.path.basename(self.path)} "
                f"(the skill, the catalog or the task changed; record again with --record):\n{shown}"
            )
        self.position += 1
        response = recorded["response"]
        if on_text is not None:
            for block in response.get("content", []):
                if block.get("type") == "text":
                    on_text(block["text"])
        return response

    async def acreate(self, request: Request) -> Response:
        return self.create(request)
