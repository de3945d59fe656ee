"""The offline stand-in for web search and web fetch: a local web of pages, and a scripted model whose answers
carry the same blocks the Messages API's server tools return (checked against the installed SDK's types), honour
the request's tool definitions, and pause long turns the way the API's server loop does."""

from __future__ import annotations

import asyncio
import threading

import pytest
from anthropic.types import (
    CitationCharLocation,
    CitationsWebSearchResultLocation,
    Message,
    ServerToolUseBlock,
    TextBlock,
    ToolUseBlock,
    WebFetchBlock,
    WebFetchToolResultBlock,
    WebFetchToolResultErrorBlock,
    WebSearchResultBlock,
    WebSearchToolResultBlock,
    WebSearchToolResultError,
)

from skills_magic.models.base import ModelError
from skills_magic.models.local_web import PAUSE_AFTER_SERVER_USES, SEARCH_RESULTS, LocalWeb, LocalWebError, Page
from skills_magic.models.scripted import ScriptedModel, TurnsError

GREEN = Page("https://tea.example.org/green", "Green tea", "Green tea is steeped at 80 degrees. It tastes grassy.",
             "April 2, 2024")
BLACK = Page("https://blog.tea.example.org/black", "Black tea", "Black tea is steeped at 95 degrees for four minutes.")
COFFEE = Page("https://coffee.example.com/brew", "Coffee brewing", "Coffee is brewed at 93 degrees, not boiling.")
WEB = LocalWeb([GREEN, BLACK, COFFEE])
SEARCH = {"type": "web_search_20250305", "name": "web_search"}
FETCH = {"type": "web_fetch_20250910", "name": "web_fetch", "citations": {"enabled": True}}


def request(*tools: dict, prompt: str = "How hot should tea be?") -> dict:
    return {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": prompt}],
            "tools": list(tools)}


def continued(sent: dict, paused: dict) -> dict:
    """The continuation of a paused answer: the paused content appended as the assistant's turn, as is."""
    return {**sent, "messages": sent["messages"] + [{"role": "assistant", "content": paused["content"]}]}


def blocks_of(response: dict) -> list:
    """The response as the SDK reads it (it must validate), its content as SDK block objects."""
    return Message.model_validate(response).content


def test_every_response_is_an_sdk_message_with_the_apis_block_types():
    turn = {"web_search": ["green tea temperature"], "web_fetch": [BLACK.url], "text": "80 and 95 degrees.",
            "cite": [{"url": GREEN.url, "text": "Green tea is steeped at 80 degrees."},
                     {"url": BLACK.url, "text": "steeped at 95 degrees"}],
            "tool_use": [{"name": "record_verdict", "input": {"verdict": "true"}}]}
    model = ScriptedModel([turn], web=WEB)
    response = model.create(request(SEARCH, FETCH))
    assert response["stop_reason"] == "tool_use"
    use, found, fetch, fetched, text, call = blocks_of(response)
    assert isinstance(use, ServerToolUseBlock) and use.name == "web_search" and use.input == {"query": "green tea temperature"}
    assert isinstance(found, WebSearchToolResultBlock) and found.tool_use_id == use.id
    assert all(isinstance(result, WebSearchResultBlock) for result in found.content)
    assert found.content[0].url == GREEN.url and found.content[0].page_age == "April 2, 2024"
    assert isinstance(fetch, ServerToolUseBlock) and fetch.input == {"url": BLACK.url} and fetch.id != use.id
    assert isinstance(fetched, WebFetchToolResultBlock) and isinstance(fetched.content, WebFetchBlock)
    assert fetched.content.content.source.data == BLACK.text and fetched.content.content.citations.enabled
    assert isinstance(text, TextBlock) and isinstance(call, ToolUseBlock)
    search_cite, fetch_cite = text.citations
    assert isinstance(search_cite, CitationsWebSearchResultLocation)
    assert (search_cite.url, search_cite.title, search_cite.cited_text) == (GREEN.url, GREEN.title, "Green tea is steeped at 80 degrees.")
    assert isinstance(fetch_cite, CitationCharLocation) and fetch_cite.document_index == 0
    assert BLACK.text[fetch_cite.start_char_index:fetch_cite.end_char_index] == fetch_cite.cited_text == "steeped at 95 degrees"
    usage = Message.model_validate(response).usage.server_tool_use
    assert (usage.web_search_requests, usage.web_fetch_requests) == (1, 1)


def test_an_uncited_quote_is_the_pages_first_sentence_and_a_page_the_answer_never_saw_cannot_be_cited():
    model = ScriptedModel([{"web_search": ["coffee"], "text": "Not boiling.", "cite": [COFFEE.url]},
                           {"web_search": ["coffee"], "text": "x", "cite": [GREEN.url]},
                           {"web_search": ["coffee"], "text": "x", "cite": [{"url": COFFEE.url, "text": "cold brew"}]}],
                          web=WEB)
    (cite,) = blocks_of(model.create(request(SEARCH)))[-1].citations
    assert cite.cited_text == "Coffee is brewed at 93 degrees, not boiling."
    with pytest.raises(TurnsError, match="turn 2: it cites https://tea.example.org/green, which this answer neither"):
        model.create(request(SEARCH))
    with pytest.raises(TurnsError, match="'cold brew' from https://coffee.example.com/brew, which the page does not say"):
        model.create(request(SEARCH))


def test_search_ranks_by_shared_words_then_url_whatever_order_the_pages_are_in():
    pages = [Page(f"https://site{n}.example.net/", f"Page {n}", text) for n, text in
             enumerate(["oolong tea leaves", "tea", "oolong tea leaves rolled", "tea leaves", "coffee only"])]
    ranked = [page.url for page in LocalWeb(pages).search("rolled oolong tea leaves")]
    assert ranked == ["https://site2.example.net/", "https://site0.example.net/", "https://site3.example.net/",
                      "https://site1.example.net/"]  # 4, 3, 2, 1 shared words; the coffee page shares none
    assert [page.url for page in LocalWeb(reversed(pages)).search("rolled oolong tea leaves")] == ranked
    many = LocalWeb([Page(f"https://t{n:02d}.example.net/", "Tea", "tea") for n in range(9)])
    assert [p.url for p in many.search("tea")] == [f"https://t{n:02d}.example.net/" for n in range(SEARCH_RESULTS)]
    assert many.search("the of and") == []  # common words rank nothing


def test_domains_match_like_the_api_subdomains_included_and_keep_pages_out_of_results_and_fetches():
    assert [p.url for p in WEB.search("tea steeped", allowed_domains=["tea.example.org"])] == [BLACK.url, GREEN.url]
    assert [p.url for p in WEB.search("degrees", blocked_domains=["blog.tea.example.org", "coffee.example.com"])] == [GREEN.url]
    assert WEB.fetch(GREEN.url, blocked_domains=["example.org"]) is None
    assert WEB.fetch(GREEN.url + "/", allowed_domains=["https://tea.example.org"]) == GREEN
    assert WEB.search("tea", allowed_domains=["ea.example.org"]) == []  # a domain is matched whole, not by suffix
    tools = ({**SEARCH, "allowed_domains": ["tea.example.org"]}, {**FETCH, "blocked_domains": ["coffee.example.com"]})
    model = ScriptedModel([{"web_search": ["brewed degrees"], "web_fetch": [COFFEE.url]}, {"web_fetch": [GREEN.url]}],
                          web=WEB)
    response = model.create(request(*tools))
    content = blocks_of(response)
    assert COFFEE.url not in [result.url for result in content[1].content]
    refused = content[3].content
    assert isinstance(refused, WebFetchToolResultErrorBlock) and refused.error_code == "url_not_allowed"
    assert response["usage"]["server_tool_use"] == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert blocks_of(model.create(request(*tools)))[1].content.url == GREEN.url


def test_uses_past_max_uses_get_the_apis_error_results():
    tools = ({**SEARCH, "max_uses": 1}, {**FETCH, "max_uses": 1})
    model = ScriptedModel([{"web_search": ["tea", "coffee"], "web_fetch": [GREEN.url, COFFEE.url]}], web=WEB)
    paused = model.create(request(*tools))
    rest = model.create(continued(request(*tools), paused))
    _, searched, _, refused = blocks_of(paused)
    _, fetched, _, over = blocks_of(rest)
    assert isinstance(searched.content, list)
    assert isinstance(refused.content, WebSearchToolResultError) and refused.content.error_code == "max_uses_exceeded"
    assert isinstance(fetched.content, WebFetchBlock)
    assert isinstance(over.content, WebFetchToolResultErrorBlock) and over.content.error_code == "max_uses_exceeded"
    assert paused["usage"]["server_tool_use"] == {"web_search_requests": 1, "web_fetch_requests": 0}
    assert rest["usage"]["server_tool_use"] == {"web_search_requests": 0, "web_fetch_requests": 1}


def test_a_fetch_of_a_page_not_in_the_local_web_is_not_accessible():
    model = ScriptedModel([{"web_fetch": ["https://tea.example.org/white"], "text": "I could not read it."}], web=WEB)
    _, result, _ = blocks_of(model.create(request(FETCH)))
    assert isinstance(result.content, WebFetchToolResultErrorBlock) and result.content.error_code == "url_not_accessible"


def test_a_turn_using_a_tool_the_request_does_not_offer_is_a_script_error():
    model = ScriptedModel([{"web_fetch": [GREEN.url]}], web=WEB)
    with pytest.raises(ModelError, match="uses web_fetch, a tool the request does not offer") as raised:
        model.create(request(SEARCH, {"name": "record_verdict", "input_schema": {"type": "object"}}))
    assert raised.value.kind == "script"


def test_a_turn_with_web_keys_needs_a_local_web():
    with pytest.raises(TurnsError, match="turn 1 uses web_search but the scripted model has no local web"):
        ScriptedModel([{"web_search": ["tea"]}]).create(request(SEARCH))


def write_page(folder, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")


def test_a_page_folder_is_read_in_filename_order(tmp_path):
    write_page(tmp_path, "b.md", "---\nurl: https://b.example.org/\ntitle: B\npage_age: 2024-05-01\n---\nBee text.\n")
    write_page(tmp_path, "a.txt", "---\nurl: https://a.example.org/\ntitle: A\n---\nAy text.\n")
    write_page(tmp_path, "notes.json", "{}")  # not a page
    web = LocalWeb.from_folder(tmp_path)
    assert web.pages == [Page("https://a.example.org/", "A", "Ay text."), Page("https://b.example.org/", "B", "Bee text.", "2024-05-01")]


@pytest.mark.parametrize(("text", "problem"), [
    ("---\nurl: https://x.example.org/\n---\nno title\n", "the front matter has no title"),
    ("---\nurl: [unclosed\ntitle: X\n---\n", "the front matter is not valid YAML"),
    ("just text, no front matter\n", "a page starts with YAML front matter"),
    ("---\nurl: x.example.org\ntitle: X\n---\n", "is not an http.s. address"),
])
def test_a_bad_page_is_an_error_naming_its_file(tmp_path, text, problem):
    write_page(tmp_path, "good.md", "---\nurl: https://good.example.org/\ntitle: Good\n---\nFine.\n")
    write_page(tmp_path, "broken.md", text)
    with pytest.raises(LocalWebError, match=problem) as raised:
        LocalWeb.from_folder(tmp_path)
    assert "broken.md" in str(raised.value)


def test_a_missing_or_empty_folder_is_an_error(tmp_path):
    with pytest.raises(LocalWebError, match="no folder of web pages"):
        LocalWeb.from_folder(tmp_path / "absent")
    with pytest.raises(LocalWebError, match="holds no pages"):
        LocalWeb.from_folder(tmp_path)


def test_a_long_turn_pauses_and_its_continuation_gets_the_rest_without_using_a_turn():
    uses = ["green tea", "black tea", "coffee", "oolong", "brewed"]
    model = ScriptedModel([{"web_search": uses, "text": "Done searching.", "usage": {"input_tokens": 7, "output_tokens": 3}},
                           "the next turn"], web=WEB)
    sent = request(SEARCH)
    parts = [model.create(sent)]
    while parts[-1]["stop_reason"] == "pause_turn":
        sent = continued(sent, parts[-1])
        parts.append(model.create(sent))
    assert [p["stop_reason"] for p in parts] == ["pause_turn", "pause_turn", "end_turn"]
    queries = [b.input["query"] for p in parts for b in blocks_of(p) if isinstance(b, ServerToolUseBlock)]
    assert queries == uses
    assert [sum(isinstance(b, ServerToolUseBlock) for b in blocks_of(p)) for p in parts] == [PAUSE_AFTER_SERVER_USES] * 2 + [1]
    assert blocks_of(parts[-1])[-1].text == "Done searching."
    assert sum(p["usage"]["input_tokens"] for p in parts) == 7
    assert sum(p["usage"]["server_tool_use"]["web_search_requests"] for p in parts) == 5
    assert len(model.requests) == 3 and model.remaining == 1
    assert model.create(request(SEARCH))["content"] == [{"type": "text", "text": "the next turn"}]


def test_a_continuation_built_from_the_sdks_own_objects_continues_too():
    model = ScriptedModel([{"web_search": ["tea", "coffee", "green"], "text": "ok"}], web=WEB)
    paused = model.create(request(SEARCH))
    echoed = {"content": [block.model_dump() for block in Message.model_validate(paused).to_param()["content"]]}
    assert blocks_of(model.create(continued(request(SEARCH), echoed)))[-1].text == "ok"


def voter_turns(count: int) -> list[dict]:
    return [{"when": f"voter {n}", "delay": 0.01 * (count - n), "web_search": ["tea", "coffee", "degrees"],
             "text": f"verdict of voter {n}"} for n in range(count)]


def test_concurrent_async_callers_each_get_their_own_remainder():
    count = 6
    model = ScriptedModel(voter_turns(count), web=WEB)

    async def vote(n: int) -> dict:
        sent = request(SEARCH, prompt=f"voter {n}: is tea hot?")
        paused = await model.acreate(sent)
        assert paused["stop_reason"] == "pause_turn"
        return await model.acreate(continued(sent, paused))

    async def all_votes() -> list[dict]:
        return await asyncio.gather(*(vote(n) for n in range(count)))

    answers = asyncio.run(all_votes())
    assert [blocks_of(a)[-1].text for a in answers] == [f"verdict of voter {n}" for n in range(count)]
    assert model.remaining == 0 and len(model.requests) == 2 * count


def test_concurrent_threads_each_get_their_own_remainder():
    count = 6
    model = ScriptedModel(voter_turns(count), web=WEB)
    answers: dict[int, str] = {}
    start = threading.Barrier(count)

    def vote(n: int) -> None:
        sent = request(SEARCH, prompt=f"voter {n}: is tea hot?")
        start.wait()
        paused = model.create(sent)
        answers[n] = blocks_of(model.create(continued(sent, paused)))[-1].text

    threads = [threading.Thread(target=vote, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == {n: f"verdict of voter {n}" for n in range(count)}


def test_a_turns_file_names_its_web_folder_relative_to_itself(tmp_path):
    write_page(tmp_path / "pages", "green.md", f"---\nurl: {GREEN.url}\ntitle: {GREEN.title}\n---\n{GREEN.text}\n")
    script = tmp_path / "turns.yaml"
    script.write_text("web: pages\nturns:\n  - web_fetch: [https://tea.example.org/green]\n"
                      "    text: Eighty degrees.\n    cite: [{url: 'https://tea.example.org/green', text: It tastes grassy.}]\n",
                      encoding="utf-8")
    model = ScriptedModel.from_file(script)
    *_, text = blocks_of(model.create(request(FETCH)))
    assert text.citations[0].cited_text == "It tastes grassy." and text.citations[0].document_title == "Green tea"
    bad = tmp_path / "bad.yaml"
    bad.write_text("web: missing\nturns: [hello]\n", encoding="utf-8")
    with pytest.raises(LocalWebError, match="no folder of web pages"):
        ScriptedModel.from_file(bad)


def test_web_keys_of_the_wrong_shape_are_turn_errors():
    model = ScriptedModel([{"web_search": [{"q": "tea"}]}, {"text": "x", "web_search": ["tea"], "cite": [3]},
                           {"web_search": ["tea"], "cite": [GREEN.url]}], web=WEB)
    with pytest.raises(TurnsError, match="turn 1: web_search is a list of queries"):
        model.create(request(SEARCH))
    with pytest.raises(TurnsError, match="turn 2: cite is a list of urls or"):
        model.create(request(SEARCH))
    with pytest.raises(TurnsError, match="turn 3: cite needs the text"):
        model.create(request(SEARCH))
