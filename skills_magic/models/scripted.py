"""A scripted model: turns declared in YAML/JSON or Python, answered in order, through the same agent loop.

A turn is one of:
  - a string: one text block, `end_turn`
  - a mapping: `text` (str), `tool_use` (a list of {name, input[, id]}), optional `stop_reason`, `stop_sequence`,
    `usage` ({input_tokens, output_tokens, ...}: what a real API would report; nothing is estimated), or `content`
    (raw content blocks), or `error` ({status, message}: the call fails as a real one would)
  - in Python, also a callable `turn(request) -> turn`, to answer from what the model was sent.
`stop_reason` defaults to `tool_use` when the turn has tool calls, else `end_turn`.

A mapping turn may also use the server web tools over a local web (`models.local_web`: `ScriptedModel(web=...)`, or
`web: FOLDER` in a turns file that is a mapping, relative to the file): `web_search` (a list of queries), `web_fetch`
(a list of urls) and `cite` (a list of urls, or {url, text} quoting the page). The content is then the searches'
blocks, then the fetches' (each `server_tool_use` with its result), then `text` carrying the citations, then the
`tool_use` calls; `usage.server_tool_use` counts them. The request must offer the tools it uses. A turn with more
than PAUSE_AFTER_SERVER_USES uses stops with `pause_turn` after that many; the continuation request (the paused
content appended as the assistant's) gets the rest without using another turn.

A turn with `when` (a string or a list of strings) answers the first request whose JSON contains all of them, in
any order of calls: concurrent callers (verification votes) then get the same answers on every run. `delay`
(seconds) makes `acreate` wait that long first, like a model taking its time.

Turns are used once, across runs: a file may script several runs in a row (or a conversation over cells). Used up,
the next call fails naming the way to start again (`%skills model scripted FILE` reads the file afresh;
`rewind()` in Python); it never starts over by itself, which would answer a later run with an earlier run's turns.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from skills_magic.errors import SkillsMagicError
from skills_magic.models.base import ModelError, Request, Response, TextCallback
from skills_magic.models.local_web import (LocalWeb, LocalWebError, citations, paused_at, server_blocks,
                                           split_at_pauses, tool_use_ids)
from skills_magic.paths import display_path

Turn = str | dict[str, Any] | Callable[[Request], Any]
WEB_KEYS = ("web_search", "web_fetch", "cite")  # a turn's keys that need the local web
WEB_KEYS_HOLD = {"web_search": "queries", "web_fetch": "urls", "cite": "urls or {url, text} quotes"}  # for errors


class TurnsError(SkillsMagicError, ValueError):
    """A script of turns that does not have the expected shape."""


def load_turns(path: str | os.PathLike) -> list[Turn]:
    """Turns from a .json, .yaml or .yml file: a list, or a mapping with a `turns` list."""
    return load_script(path)[0]


def load_script(path: str | os.PathLike) -> tuple[list[Turn], LocalWeb | None]:
    """The turns of a file, and the local web its mapping names with `web: FOLDER` (relative to the file)."""
    from skills_magic.datafiles import read_yaml_or_json

    path = os.fspath(path)
    data = read_yaml_or_json(path)
    turns = data.get("turns") if isinstance(data, dict) else data
    if not isinstance(turns, list):
        raise TurnsError(f"{path}: expected a list of turns, or a mapping with a `turns` list")
    folder = data.get("web") if isinstance(data, dict) else None
    if folder is not None and not isinstance(folder, str):
        raise TurnsError(f"{path}: `web` names a folder of pages, not {type(folder).__name__}")
    return turns, (LocalWeb.from_folder(os.path.join(os.path.dirname(path), folder)) if folder else None)


def _web_part(turn: dict[str, Any], index: int, request: Request | None, web: LocalWeb | None):
    """A turn's server blocks, its text's citations and the usage's server_tool_use counts (None without web keys)."""
    if not any(key in turn for key in WEB_KEYS):
        return [], [], None
    used = next(key for key in WEB_KEYS if key in turn)
    if web is None:
        raise TurnsError(f"turn {index} uses {used} but the scripted model has no local web: give "
                         "ScriptedModel(web=LocalWeb...) or `web: FOLDER` in the turns file")
    lists = {}
    for key in WEB_KEYS:
        value = turn.get(key) or []
        lists[key] = [value] if isinstance(value, (str, dict)) else value
        kinds = (str, dict) if key == "cite" else str
        if not isinstance(lists[key], list) or not all(isinstance(v, kinds) for v in lists[key]):
            raise TurnsError(f"turn {index}: {key} is a list of {WEB_KEYS_HOLD[key]}")
    if lists["cite"] and not turn.get("text"):
        raise TurnsError(f"turn {index}: cite needs the text that carries the citations")
    try:
        blocks, usage = server_blocks(request or {}, web, lists["web_search"], lists["web_fetch"], tool_use_ids(index))
        return blocks, citations(web, blocks, lists["cite"]), usage
    except LocalWebError as error:
        raise TurnsError(f"turn {index}: {error}") from None


def _message(turn: Any, index: int, model: str, request: Request | None = None, web: LocalWeb | None = None) -> Response:
    if isinstance(turn, str):
        turn = {"text": turn}
    if not isinstance(turn, dict):
        raise TurnsError(f"turn {index}: expected text or a mapping, not {type(turn).__name__}")
    if "error" in turn:
        error = turn["error"] or {}
        raise ModelError(str(error.get("message", "scripted failure")), error.get("status"), str(error.get("kind", "error")))
    if "content" in turn:
        content, server_usage = list(turn["content"]), None
    else:
        content, cited, server_usage = _web_part(turn, index, request, web)
        if turn.get("text"):
            content.append({"type": "text", "text": str(turn["text"]), **({"citations": cited} if cited else {})})
        for number, call in enumerate(turn.get("tool_use") or [], 1):
            if not isinstance(call, dict) or "name" not in call:
                raise TurnsError(f"turn {index}: a tool_use needs a name")
            content.append({
                "type": "tool_use",
                "id": str(call.get("id") or f"toolu_scripted_{index:02d}_{number}"),
                "name": str(call["name"]),
                "input": call.get("input", {}),
            })
    has_tools = any(block.get("type") == "tool_use" for block in content)
    return {
        "id": f"msg_scripted_{index:02d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": turn.get("stop_reason") or ("tool_use" if has_tools else "end_turn"),
        "stop_sequence": turn.get("stop_sequence"),
        "usage": {**(turn.get("usage") or {"input_tokens": 0, "output_tokens": 0}),
                  **({"server_tool_use": server_usage} if server_usage else {})},
    }


class ScriptedModel:
    """Answers each call with the next declared turn; keeps every request it was sent (`requests`)."""

    name = "scripted"
    billed = False  # answers from a file or a function: nothing is spent

    def __init__(self, turns: Sequence[Turn] = (), model: str = "scripted", source: str | None = None,
                 responder: Callable[[Request], Any] | None = None, web: LocalWeb | None = None):
        self.turns = list(turns)
        self.web = web  # the pages the turns' web_search and web_fetch see
        self.responder = responder  # answers every request once the declared turns are used up
        self.model = model
        self.source = source
        self.requests: list[Request] = []
        self._used: set[int] = set()
        self._first_request = 0  # requests before the last rewind() do not count in "request N"
        self._lock = threading.Lock()  # concurrent callers (votes in threads) take distinct turns
        self._paused: dict[str, Response] = {}  # what follows a paused answer, by the id of its last server block

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ScriptedModel:
        turns, web = load_script(path)
        return cls(turns, source=os.fspath(path), web=web)

    @property
    def remaining(self) -> int:
        return len(self.turns) - len(self._used)

    def rewind(self) -> None:
        """Every declared turn unused again: the script starts over (the requests seen so far are kept)."""
        with self._lock:
            self._used.clear()
            self._paused.clear()
            self._first_request = len(self.requests)

    def _start_again(self) -> str:
        """How to start a used-up script again, for the error that says it is used up."""
        if self.source is None:
            return "`model.rewind()` starts its turns again"
        return f"`%skills model scripted {display_path(self.source)}` starts the file again"

    def _next(self, request: Request) -> tuple[int, Any]:
        """The turn that answers this request: the first unused matching `when` turn, else the next plain one."""
        with self._lock:
            self.requests.append(request)
            text = None
            for index, turn in enumerate(self.turns):
                if index in self._used:
                    continue
                when = turn.get("when") if isinstance(turn, dict) else None
                if when is None:
                    continue
                text = text if text is not None else json.dumps(request, ensure_ascii=False)
                if all(part in text for part in ([when] if isinstance(when, str) else when)):
                    self._used.add(index)
                    return index, turn
            for index, turn in enumerate(self.turns):
                if index not in self._used and not (isinstance(turn, dict) and "when" in turn):
                    self._used.add(index)
                    return index, turn
        if self.responder is not None:
            return len(self.requests) - 1, self.responder
        raise ModelError(f"the script has no turn left for request {len(self.requests) - self._first_request} "
                         f"({len(self.turns)} turns declared); {self._start_again()}", kind="script")

    def _continued(self, request: Request) -> Response | None:
        """The rest of a paused answer, when the request continues one (its assistant content ends where it paused)."""
        messages = request.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        key = paused_at(last.get("content")) if last.get("role") == "assistant" else None
        with self._lock:
            following = self._paused.pop(key, None) if key else None
            if following is not None:
                self.requests.append(request)
        return following

    def _answer(self, turn: Any, index: int, request: Request) -> Response:
        """The turn's message, or its first part when it pauses (the later parts wait for their continuations)."""
        parts = split_at_pauses(_message(turn, index + 1, self.model, request, self.web))
        with self._lock:
            for part, following in zip(parts, parts[1:]):
                self._paused[paused_at(part["content"])] = following
        return parts[0]

    def create(self, request: Request, on_text: TextCallback | None = None) -> Response:
        message = self._continued(request)
        if message is None:
            index, turn = self._next(request)
            if callable(turn):
                turn = turn(request)
            message = self._answer(turn, index, request)
        if on_text is not None:
            for block in message["content"]:
                if block.get("type") == "text":
                    on_text(block["text"])
        return message

    async def acreate(self, request: Request) -> Response:
        continued = self._continued(request)
        if continued is not None:
            return continued
        index, turn = self._next(request)
        delay = turn.get("delay") if isinstance(turn, dict) else None
        if delay:
            await asyncio.sleep(float(delay))
        if callable(turn):
            turn = turn(request)
        return self._answer(turn, index, request)


FORCED_MARK = "go through <available_skills>"  # the forced-evaluation preamble of evals.FORCED_PREAMBLE
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i in into is it its of on or that the this to use "
    "used uses using what when which with you your my me we our all any if then than so not no".split()
)


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 2}


PROPOSE_TOOL = "propose_descriptions"  # runs.improve's request for description variants


def _propose(request: Request) -> dict[str, Any]:
    """Description variants as the keyword router can write them: the current description, then the words the
    prompts that should trigger the skill share and the others lack, more of them in each variant (deterministic)."""
    text = " ".join(m["content"] for m in request.get("messages") or [] if isinstance(m.get("content"), str))
    current = next((line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Current description: ")), "")
    counts: dict[str, int] = {}
    avoid: set[str] = set()
    for line in text.splitlines():
        if line.startswith("- should trigger: "):
            for word in _words(line.split(": ", 1)[1]):
                counts[word] = counts.get(word, 0) + 1
        elif line.startswith("- should not trigger: "):
            avoid |= _words(line.split(": ", 1)[1])
    ranked = [w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if w not in avoid and w not in _words(current)]
    wanted = int(re.search(r"Write (\d+)", " ".join(str(b) for b in [request.get("system", "")])).group(1)) if re.search(
        r"Write (\d+)", str(request.get("system", ""))) else 3
    variants = [f"{current.rstrip('.')}. Use when the request mentions {', '.join(ranked[:2 + 2 * k])}."
                for k in range(wanted) if ranked[:2 + 2 * k]]
    return {"tool_use": [{"name": PROPOSE_TOOL, "input": {"descriptions": variants or [current]}}],
            "usage": {"input_tokens": 0, "output_tokens": 0}}


def keyword_router(threshold: int = 2) -> Callable[[Request], Any]:
    """A responder that activates a skill the way measurements say models do: by keyword overlap between the
    request and a skill's name and description in the catalog (at least `threshold` shared words), else it answers
    directly. Offline, deterministic, and sensitive to how a description is written: good for teaching evals."""

    def respond(request: Request) -> dict[str, Any]:
        if any(t.get("name") == PROPOSE_TOOL for t in request.get("tools") or []):
            return _propose(request)
        messages = request.get("messages") or []
        last = messages[-1]["content"] if messages else ""
        if isinstance(last, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last):
            return {"text": "Done.", "usage": {"input_tokens": 0, "output_tokens": 0}}
        prompt = last if isinstance(last, str) else " ".join(b.get("text", "") for b in last if isinstance(b, dict))
        system = " ".join(b.get("text", "") for b in request.get("system") or [] if isinstance(b, dict))
        needed = threshold
        if FORCED_MARK in prompt:  # "evaluate each skill, then activate": it looks harder, so one shared word will do
            prompt = prompt.split("\n\n", 1)[-1]
            needed = max(1, threshold - 1)
        wanted = _words(prompt)
        best, best_score = None, 0
        for name, description in re.findall(r"<name>\n(.*?)\n</name>\n<description>\n(.*?)\n</description>", system, re.S):
            score = len(wanted & (_words(description) | _words(name.replace("-", " "))))
            if score > best_score:
                best, best_score = name, score
        if best is not None and best_score >= needed:
            return {"tool_use": [{"name": "activate_skill", "input": {"name": best}}],
                    "usage": {"input_tokens": 0, "output_tokens": 0}}
        return {"text": "I can answer that directly.", "usage": {"input_tokens": 0, "output_tokens": 0}}

    return respond
