"""The Messages API's server-side web tools (web search, web fetch): their definitions in a request, a turn the
server paused (`stop_reason: "pause_turn"`) continued to its end, and what a turn kept as evidence.

The server runs these tools itself: the response holds `server_tool_use` blocks, their `web_search_tool_result` /
`web_fetch_tool_result` blocks and text blocks with `citations`; `usage.server_tool_use` counts the requests. A long
turn can come back paused: the same request with the paused content appended as the assistant's turn, as is
(encrypted fields included), continues it. Plain dicts in and out (the model protocol of models/base.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skills_magic.errors import InvalidArgument

WEB_SEARCH_TOOL_TYPE = "web_search_20250305"  # the web search version every model with server tools accepts
WEB_FETCH_TOOL_TYPE = "web_fetch_20250910"  # the first web fetch version out of beta: accepted without a beta header
DEFAULT_MAX_USES = 5  # searches (or fetches) one request may make: enough to look for a contradiction, a bounded cost
MAX_CONTINUATIONS = 5  # a paused turn is continued at most this often: a turn that never ends is no answer, not a hang

WEB_SEARCH_NAME, WEB_FETCH_NAME = "web_search", "web_fetch"  # the names the API requires for these tool types


@dataclass(frozen=True)
class WebTools:
    """Which server web tools a request offers, how often each may be used, and the domains they may (or may not)
    reach: `allowed_domains` and `blocked_domains` cannot be given together (the API refuses that)."""

    search: bool = True
    fetch: bool = False
    max_uses: int | None = DEFAULT_MAX_USES
    allowed_domains: tuple[str, ...] = ()
    blocked_domains: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("allowed_domains", "blocked_domains"):  # a list, or one domain as a string, is read as a tuple
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value or ()))
        if not self.search and not self.fetch:
            raise InvalidArgument("web tools need web search, web fetch or both")
        if self.allowed_domains and self.blocked_domains:
            raise InvalidArgument("give allowed domains or blocked domains, not both (the API takes one of them)")
        if self.max_uses is not None and (isinstance(self.max_uses, bool) or not isinstance(self.max_uses, int)
                                          or self.max_uses < 1):
            raise InvalidArgument(f"the web tools' max uses must be a whole number of at least 1, not {self.max_uses!r}")

    def _common(self) -> dict[str, Any]:
        common: dict[str, Any] = {}
        if self.max_uses is not None:
            common["max_uses"] = self.max_uses
        if self.allowed_domains:
            common["allowed_domains"] = list(self.allowed_domains)
        if self.blocked_domains:
            common["blocked_domains"] = list(self.blocked_domains)
        return common

    def definitions(self) -> list[dict[str, Any]]:
        """The tool definitions a request's `tools` gets: web search, then web fetch (with citations on)."""
        tools = []
        if self.search:
            tools.append({"type": WEB_SEARCH_TOOL_TYPE, "name": WEB_SEARCH_NAME, **self._common()})
        if self.fetch:
            tools.append({"type": WEB_FETCH_TOOL_TYPE, "name": WEB_FETCH_NAME, **self._common(),
                          "citations": {"enabled": True}})
        return tools


def offer(request: dict[str, Any], web: WebTools | None) -> dict[str, Any]:
    """A new request offering `web`'s tools too (the input is left as it is); a forced tool choice becomes auto,
    since a model forced to call one tool cannot search first. `web` None: the request unchanged."""
    if web is None:
        return request
    offered = {**request, "tools": [*request.get("tools", []), *web.definitions()]}
    choice = request.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") == "tool":
        offered["tool_choice"] = {"type": "auto", **({"disable_parallel_tool_use": choice["disable_parallel_tool_use"]}
                                                    if "disable_parallel_tool_use" in choice else {})}
    return offered


def continuation(request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any] | None:
    """The request that continues a paused turn: the paused content appended as the assistant's turn, as is (or
    added to the request's last message when that is already the assistant's); None when the turn was not paused."""
    if response.get("stop_reason") != "pause_turn":
        return None
    paused = list(response.get("content") or [])
    messages = list(request.get("messages") or [])
    if messages and messages[-1].get("role") == "assistant":
        before = messages[-1].get("content")
        before = [{"type": "text", "text": before}] if isinstance(before, str) else list(before or [])
        messages[-1] = {**messages[-1], "content": before + paused}
    else:
        messages.append({"role": "assistant", "content": paused})
    return {**request, "messages": messages}


def _count(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _summed(parts: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Usages added field by field: numbers summed, nested counts (server_tool_use, cache_creation) likewise, any
    other value (service_tier) from the last part that has it."""
    total: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            earlier = total.get(key)
            if value is None:
                continue
            if isinstance(value, Mapping):
                total[key] = _summed([earlier if isinstance(earlier, Mapping) else {}, value])
            elif _count(value) and (earlier is None or _count(earlier)):
                total[key] = (earlier or 0) + value
            else:
                total[key] = value
    return total


def merged(responses: list[dict[str, Any]]) -> dict[str, Any]:
    """The parts of one paused-and-continued turn as one response: content in order, usage summed, the rest (stop
    reason, id, model) from the last part."""
    if not responses:
        raise ValueError("merged() needs at least one response")  # a caller's bug, not a user's error
    whole = dict(responses[-1])
    whole["content"] = [block for part in responses for block in part.get("content") or []]
    usages = [part["usage"] for part in responses if isinstance(part.get("usage"), Mapping)]
    if usages:
        whole["usage"] = _summed(usages)
    return whole


async def complete(send, request: dict[str, Any], *, exchanges: list | None = None
                   ) -> tuple[dict[str, Any], list[tuple[dict[str, Any], dict[str, Any]]]]:
    """`await send(request)` (a client's `acreate`, or a caller's wrapper that holds a cap or logs each part),
    continued while the server pauses the turn (at most MAX_CONTINUATIONS times): the merged response and every
    (request, response) sent, added to `exchanges` as they come (so a failure part-way keeps the earlier ones).
    Still paused at the end: its stop_reason stays pause_turn."""
    exchanges = [] if exchanges is None else exchanges
    response = await send(request)
    exchanges.append((request, response))
    for _ in range(MAX_CONTINUATIONS):
        following = continuation(request, response)
        if following is None:
            break
        request = following
        response = await send(request)
        exchanges.append((request, response))
    return merged([answer for _sent, answer in exchanges]), exchanges


def _fetched(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The web fetch results that hold a document, in order: what a char_location's document_index counts."""
    return [block["content"] for block in content if block.get("type") == "web_fetch_tool_result"
            and isinstance(block.get("content"), Mapping) and block["content"].get("type") == "web_fetch_result"]


def _document_title(fetched: Mapping[str, Any]) -> str | None:
    document = fetched.get("content")
    return document.get("title") if isinstance(document, Mapping) else None


def evidence(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The citations of the text blocks, in order, each once: {url, title, cited_text} (a document citation's url is
    the fetched page's, by its document_index; never the encrypted fields)."""
    fetched = _fetched(content)
    kept: list[dict[str, Any]] = []
    for block in content:
        if block.get("type") != "text":
            continue
        for citation in block.get("citations") or []:
            url, title = citation.get("url") or citation.get("source"), citation.get("title")
            index = citation.get("document_index")
            if url is None and isinstance(index, int) and 0 <= index < len(fetched):
                url, title = fetched[index].get("url"), citation.get("document_title") or _document_title(fetched[index])
            elif url is None:
                title = citation.get("document_title") or title
            found = {"url": url, "title": title, "cited_text": citation.get("cited_text", "")}
            if found not in kept:
                kept.append(found)
    return kept


def consulted(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the server's searches and fetches returned, in order: {tool: web_search, query, results: [{url, title,
    page_age}]} or {tool: web_fetch, url, title}; an error result has "error": its error_code."""
    asked = {block.get("id"): block.get("input") or {} for block in content if block.get("type") == "server_tool_use"}
    found: list[dict[str, Any]] = []
    for block in content:
        kind, result = block.get("type"), block.get("content")
        given = asked.get(block.get("tool_use_id"), {})
        if kind == "web_search_tool_result":
            entry: dict[str, Any] = {"tool": WEB_SEARCH_NAME, "query": given.get("query"), "results": []}
            if isinstance(result, list):
                entry["results"] = [{"url": r.get("url"), "title": r.get("title"), "page_age": r.get("page_age")}
                                    for r in result if isinstance(r, Mapping)]
            elif isinstance(result, Mapping):
                entry["error"] = result.get("error_code", "unknown")
            found.append(entry)
        elif kind == "web_fetch_tool_result":
            result = result if isinstance(result, Mapping) else {}
            entry = {"tool": WEB_FETCH_NAME, "url": result.get("url") or given.get("url"), "title": _document_title(result)}
            if result.get("type") != "web_fetch_result":
                entry["error"] = result.get("error_code", "unknown")
            found.append(entry)
    return found


def server_uses(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """The server tool requests a usage reports: {web_search_requests, web_fetch_requests}, 0 where absent."""
    counts = (usage or {}).get("server_tool_use")
    counts = counts if isinstance(counts, Mapping) else {}
    return {name: int(counts.get(name) or 0) for name in ("web_search_requests", "web_fetch_requests")}
