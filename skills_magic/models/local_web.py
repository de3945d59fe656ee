"""An offline stand-in for the Messages API's server tools, web search and web fetch: a local web of pages, and the
content blocks the API returns for searches and fetches over it, with the same types and error codes.

A scripted turn (`models.scripted`) names its searches, fetches and citations; the blocks built here are what the
API's server loop would have put in the response: a `server_tool_use` followed by its `web_search_tool_result` or
`web_fetch_tool_result`, text citations pointing into those results, and `usage.server_tool_use` counts. The
request's tool definitions are honoured (offered or not, `max_uses`, `allowed_domains`, `blocked_domains`), and a
turn with many uses is split at `pause_turn` as the API's server loop splits a long turn, so code that continues a
paused turn runs offline too.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from skills_magic.errors import SkillsMagicError
from skills_magic.models.base import ModelError, Request, Response

SEARCH_RESULTS = 5  # results per search: enough to choose from, few enough that a test can reason about all of them
PAUSE_AFTER_SERVER_USES = 2  # a scripted turn with more server uses than this pauses, so continuation code runs offline
CITED_TEXT_CHARS = 150  # the API quotes at most 150 characters of a search result in a citation
TOOL_USE_ID = "srvtoolu_local_{turn:02d}{use:02d}"  # by turn and use, not by call order: concurrent runs get the same ids
PAGE_SUFFIXES = (".md", ".txt")  # the files of a page folder
STOPWORDS = frozenset("a an and are as at be by for from how in is it of on or that the this to was what when which "
                      "who why with".split())  # words too common to rank a page by
SERVER_RESULTS = ("web_search_tool_result", "web_fetch_tool_result")
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


class LocalWebError(SkillsMagicError, ValueError):
    """A page folder that cannot be read as a local web, or a citation of a page the answer never saw."""


@dataclass(frozen=True)
class Page:
    """One page of the local web: what a fetch returns as its document and a search ranks by."""

    url: str
    title: str
    text: str
    page_age: str | None = None

    @property
    def domain(self) -> str:
        return (urlsplit(self.url).hostname or "").lower()


def _words(text: str) -> set[str]:
    return {word for word in _WORD.findall(text.lower()) if word not in STOPWORDS}


def _url_key(url: str) -> str:
    """A url as looked up: without its fragment and trailing slash (`https://x.org/a/` is `https://x.org/a`)."""
    return url.split("#", 1)[0].rstrip("/")


def domain_matches(url: str, domain: str) -> bool:
    """Whether `url` is on `domain` as the API reads a domain rule: "example.org" matches example.org and its
    subdomains; a rule with a path ("example.org/docs") matches only under that path."""
    rule = re.sub(r"^[a-z]+://", "", domain.strip().lower())
    rule_host, _, rule_path = rule.partition("/")
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host != rule_host and not host.endswith("." + rule_host):
        return False
    return not rule_path or (parts.path.lstrip("/") + "/").startswith(rule_path.rstrip("/") + "/")


def permitted(url: str, allowed_domains: Sequence[str] = (), blocked_domains: Sequence[str] = ()) -> bool:
    """On an allowed domain (when any are given) and on no blocked one."""
    if allowed_domains and not any(domain_matches(url, d) for d in allowed_domains):
        return False
    return not any(domain_matches(url, d) for d in blocked_domains)


def _read_page(path: str, shown: str) -> Page:
    """A page from a file that starts with YAML front matter (`url`, `title`, optional `page_age`)."""
    import yaml

    from skills_magic.skills.frontmatter import is_frontmatter_fence, split_frontmatter

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise LocalWebError(f"{shown}: cannot read the page: {error}") from None
    parts = split_frontmatter(text) if is_frontmatter_fence(text.split("\n", 1)[0]) else None
    if parts is None:
        raise LocalWebError(f"{shown}: a page starts with YAML front matter between `---` lines (url:, title:)")
    try:
        fields = yaml.safe_load(parts[0])
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise LocalWebError(f"{shown}: the front matter is not valid YAML{where}: {getattr(error, 'problem', error)}") from None
    if not isinstance(fields, dict):
        raise LocalWebError(f"{shown}: the front matter must be a mapping with url: and title:")
    missing = [key for key in ("url", "title") if not fields.get(key)]
    if missing:
        raise LocalWebError(f"{shown}: the front matter has no {' and no '.join(missing)}")
    url = str(fields["url"])
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise LocalWebError(f"{shown}: url {url!r} is not an http(s) address")
    age = fields.get("page_age")
    return Page(url, str(fields["title"]), parts[1].strip(), None if age is None else str(age))


class LocalWeb:
    """Pages by url, searched by word overlap and fetched by address, deterministically."""

    def __init__(self, pages: Iterable[Page]):
        self.pages = list(pages)
        self._by_url: dict[str, Page] = {}
        for page in self.pages:
            self._by_url.setdefault(_url_key(page.url), page)  # the first page of a url wins, as listed

    @classmethod
    def from_folder(cls, path: str | os.PathLike) -> LocalWeb:
        """Every *.md and *.txt file under `path` (sorted by its path in the folder) as a page."""
        folder = os.fspath(path)
        if not os.path.isdir(folder):
            raise LocalWebError(f"no folder of web pages at {folder}")
        names = sorted(
            os.path.relpath(os.path.join(where, name), folder)
            for where, _, files in os.walk(folder) for name in files if name.endswith(PAGE_SUFFIXES)
        )
        if not names:
            raise LocalWebError(f"{folder} holds no pages (*.md or *.txt files with url: and title: front matter)")
        pages, seen = [], {}
        for name in names:
            page = _read_page(os.path.join(folder, name), os.path.join(folder, name))
            if _url_key(page.url) in seen:
                raise LocalWebError(f"{os.path.join(folder, name)}: url {page.url} is already the url of {seen[_url_key(page.url)]}")
            seen[_url_key(page.url)] = os.path.join(folder, name)
            pages.append(page)
        return cls(pages)

    def search(self, query: str, *, allowed_domains: Sequence[str] = (), blocked_domains: Sequence[str] = (),
               limit: int = SEARCH_RESULTS) -> list[Page]:
        """The permitted pages sharing words with the query, most shared words first, ties by url."""
        wanted = _words(query)
        scored = [(len(wanted & _words(f"{page.title} {page.text}")), page) for page in self.pages
                  if permitted(page.url, allowed_domains, blocked_domains)]
        ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1].url))
        return [page for _, page in ranked[:limit]]

    def fetch(self, url: str, *, allowed_domains: Sequence[str] = (), blocked_domains: Sequence[str] = ()) -> Page | None:
        """The page at `url`, or None when there is none or the domains do not permit it."""
        if not permitted(url, allowed_domains, blocked_domains):
            return None
        return self._by_url.get(_url_key(url))


def tool_use_ids(turn: int) -> Iterator[str]:
    """The ids of one turn's server tool uses, in order: srvtoolu_local_TTUU (turn, use)."""
    use = 0
    while True:
        use += 1
        yield TOOL_USE_ID.format(turn=turn, use=use)


def offered_tools(request: Request) -> dict[str, dict[str, Any]]:
    """The request's server web tools by name ("web_search", "web_fetch"): whatever version its type names."""
    offered = {}
    for tool in request.get("tools") or []:
        name = tool.get("name") if isinstance(tool, dict) else None
        if name in ("web_search", "web_fetch") and str(tool.get("type", "")).startswith(name + "_"):
            offered.setdefault(name, tool)
    return offered


def _token(*parts: str) -> str:
    """An opaque, deterministic stand-in for the API's encrypted fields."""
    return base64.urlsafe_b64encode("\n".join(("local",) + parts).encode()).decode()


def _search_result(page: Page) -> dict[str, Any]:
    return {"type": "web_search_result", "url": page.url, "title": page.title,
            "encrypted_content": _token(page.url), "page_age": page.page_age}


def _fetch_result(page: Page, citations: bool) -> dict[str, Any]:
    return {"type": "web_fetch_result", "url": page.url, "retrieved_at": page.page_age, "content": {
        "type": "document", "source": {"type": "text", "media_type": "text/plain", "data": page.text},
        "title": page.title, "citations": {"enabled": citations}}}


def _fetch_content(web: LocalWeb, tool: dict[str, Any], url: str, over: bool) -> dict[str, Any]:
    allowed, blocked = tool.get("allowed_domains") or (), tool.get("blocked_domains") or ()
    if over:
        code = "max_uses_exceeded"
    elif not permitted(url, allowed, blocked):
        code = "url_not_allowed"
    else:
        page = web.fetch(url)
        if page is not None:
            return _fetch_result(page, bool((tool.get("citations") or {}).get("enabled", True)))
        code = "url_not_accessible"
    return {"type": "web_fetch_tool_result_error", "error_code": code}


def server_blocks(request: Request, web: LocalWeb, searches: Sequence[str], fetches: Sequence[str],
                  ids: Iterator[str]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The content blocks of these searches and then these fetches, as the API returns them, and the usage's
    `server_tool_use` counts. A use past the tool's `max_uses` gets the API's error result; a tool the request
    does not offer is the script's mistake (ModelError, kind "script")."""
    tools = offered_tools(request)
    blocks: list[dict[str, Any]] = []
    for name, values, field in (("web_search", searches, "query"), ("web_fetch", fetches, "url")):
        if not values:
            continue
        tool = tools.get(name)
        if tool is None:
            offered = ", ".join(str(t.get("name")) for t in request.get("tools") or [] if isinstance(t, dict)) or "none"
            raise ModelError(f"the scripted turn uses {name}, a tool the request does not offer (its tools: {offered})",
                             kind="script")
        limit = tool.get("max_uses")
        for number, value in enumerate(values, 1):
            use_id, over = next(ids), limit is not None and number > limit
            blocks.append({"type": "server_tool_use", "id": use_id, "name": name, "input": {field: str(value)}})
            if name == "web_search":
                found = web.search(str(value), allowed_domains=tool.get("allowed_domains") or (),
                                   blocked_domains=tool.get("blocked_domains") or ())
                content: Any = ({"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"} if over
                                else [_search_result(page) for page in found])
                blocks.append({"type": "web_search_tool_result", "tool_use_id": use_id, "content": content})
            else:
                blocks.append({"type": "web_fetch_tool_result", "tool_use_id": use_id,
                               "content": _fetch_content(web, tool, str(value), over)})
    return blocks, server_tool_usage(blocks)


def server_tool_usage(blocks: Sequence[dict[str, Any]]) -> dict[str, int]:
    """`usage.server_tool_use`: the searches that ran and the fetches that were tried (a use refused before it
    ran, past max_uses or off the allowed domains, is not counted)."""
    searches = sum(1 for b in blocks if b.get("type") == "web_search_tool_result" and isinstance(b.get("content"), list))
    fetches = sum(1 for b in blocks if b.get("type") == "web_fetch_tool_result"
                  and b["content"].get("error_code") not in ("max_uses_exceeded", "url_not_allowed"))
    return {"web_search_requests": searches, "web_fetch_requests": fetches}


def _quote(text: str, wanted: str | None, url: str) -> tuple[int, int]:
    """Where the cited words are in the page: the given sentence, or else the page's first sentence."""
    if wanted:
        start = text.find(wanted)
        if start < 0:
            raise LocalWebError(f"it cites {wanted!r} from {url}, which the page does not say")
        return start, start + len(wanted)
    start = len(text) - len(text.lstrip())
    end = _SENTENCE_END.search(text, start)
    return start, min(end.end() if end else len(text), start + CITED_TEXT_CHARS)


def citations(web: LocalWeb, blocks: Sequence[dict[str, Any]], cites: Sequence[Any]) -> list[dict[str, Any]]:
    """A text block's citations of pages this answer fetched (char_location into the fetched document) or found in
    a search (web_search_result_location); each cite is a url, or {url, text} with the words it quotes."""
    documents = [b["content"] for b in blocks if b.get("type") == "web_fetch_tool_result"
                 and b["content"].get("type") == "web_fetch_result"]
    found = {_url_key(r["url"]): r for b in blocks if b.get("type") == "web_search_tool_result"
             and isinstance(b.get("content"), list) for r in b["content"]}
    cited = []
    for cite in cites:
        url, wanted = (cite, None) if isinstance(cite, str) else (str((cite or {}).get("url", "")), (cite or {}).get("text"))
        index = next((i for i, d in enumerate(documents) if _url_key(d["url"]) == _url_key(url)), None)
        if index is not None:
            document = documents[index]["content"]
            if not document["citations"]["enabled"]:
                raise LocalWebError(f"it cites {url}, fetched with citations disabled by the request's web_fetch tool")
            start, end = _quote(document["source"]["data"], wanted, url)
            cited.append({"type": "char_location", "cited_text": document["source"]["data"][start:end],
                          "document_index": index, "document_title": document["title"],
                          "start_char_index": start, "end_char_index": end, "file_id": None})
        elif _url_key(url) in found:
            result, page = found[_url_key(url)], web.fetch(url)
            start, end = _quote(page.text if page else "", wanted, url)
            cited.append({"type": "web_search_result_location", "url": result["url"], "title": result["title"],
                          "cited_text": (page.text if page else "")[start:end][:CITED_TEXT_CHARS],
                          "encrypted_index": _token(result["url"], str(start))})
        else:
            raise LocalWebError(f"it cites {url}, which this answer neither fetched nor found in a search")
    return cited


def split_at_pauses(message: Response, per_response: int = PAUSE_AFTER_SERVER_USES) -> list[Response]:
    """One scripted answer as the API's server loop would send it: while more than `per_response` server uses are
    left, a response with the next `per_response` uses and their results and stop_reason "pause_turn"; then the
    rest with the answer's text and tool calls. The declared token usage goes with the last part."""
    content = list(message["content"])
    parts: list[list[dict[str, Any]]] = []
    while sum(1 for b in content if b.get("type") == "server_tool_use") > per_response:
        cut, uses = 0, 0
        for position, block in enumerate(content):
            if block.get("type") in SERVER_RESULTS:
                uses += 1
                if uses == per_response:
                    cut = position + 1
                    break
        parts.append(content[:cut])
        content = content[cut:]
    responses = [{**message, "id": f"{message['id']}_{number}" if number else message["id"], "content": part,
                  "stop_reason": "pause_turn", "stop_sequence": None,
                  "usage": {"input_tokens": 0, "output_tokens": 0, "server_tool_use": server_tool_usage(part)}}
                 for number, part in enumerate(parts)]
    last = {**message, "id": f"{message['id']}_{len(parts)}" if parts else message["id"], "content": content}
    if parts:
        last["usage"] = {**message["usage"], "server_tool_use": server_tool_usage(content)}
    return [*responses, last]


def paused_at(content: Any) -> str | None:
    """The tool_use_id of the server result a paused turn's content ends with (the key of what follows it)."""
    last = content[-1] if isinstance(content, list) and content else None
    return last.get("tool_use_id") if isinstance(last, dict) and last.get("type") in SERVER_RESULTS else None
