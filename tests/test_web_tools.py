"""Voters that use the Messages API's server-side web tools (web search, web fetch): the request offers them, a turn
the server paused is continued with its content as is, and what the searches returned and the answer cited is kept.

Every vote goes through the real `anthropic` SDK against `fake_anthropic.FakeMessagesAPI` (or, for the magic, the
same fake on a real socket), so each block is parsed and dumped by the SDK's own types.
"""

from __future__ import annotations

import asyncio
import copy
import json

import pytest
from IPython.core.error import UsageError

from fake_anthropic import (FakeAnthropicServer, FakeMessagesAPI, cited_text_block, message, server_tool_use_block,
                            text_block, tool_use_block, web_fetch_tool_result_block, web_search_error_block,
                            web_search_result, web_search_tool_result_block)
from notebook_setup import notebook_folder, registered_magics
from skills_magic.errors import InvalidArgument, SkillsMagicError
from skills_magic.models import web_tools as w
from skills_magic.models.anthropic import AnthropicModel
from skills_magic.models.prices import WEB_SEARCH_USD_PER_REQUEST, cost_of
from skills_magic.records.db import Database
from skills_magic.records.runlog import RunLog
from skills_magic.runs import verify as v
from skills_magic.notebook.views import VotesView

pytestmark = pytest.mark.usefixtures("machine_setup_forgotten")

KEY = "sk-test"
MODEL_ID = "claude-sonnet-5"  # priced at $2 / $10 per million tokens: the search charge shows next to the tokens
CLAIM = v.Claim(claim="The Eiffel Tower is 330 m tall", quote="it stands 330 metres", source="https://example.org/t")
VERDICT = {"refuted": False, "evidence": "example.org says 330 m", "confidence": "high"}


def model(api: FakeMessagesAPI) -> AnthropicModel:
    return AnthropicModel(MODEL_ID, api_key=KEY, http_client=api.client(), async_http_client=api.async_client())


def web_usage(input_tokens: int, output_tokens: int, searches: int = 0, fetches: int = 0) -> dict:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "server_tool_use": {"web_search_requests": searches, "web_fetch_requests": fetches}}


def searched_answer(verdict: dict = VERDICT, *, stop_reason: str | None = None, searches: int = 1) -> dict:
    """One whole answer: a search, its results, a cited sentence, then the verdict call."""
    search = server_tool_use_block("web_search", {"query": "Eiffel Tower height"}, id="srvtoolu_1")
    results = [web_search_result("https://example.org/tower", "Tower facts", "2 days ago"),
               web_search_result("https://example.com/other", "Other page")]
    cited = cited_text_block("It is 330 m tall.", [
        {"type": "web_search_result_location", "url": "https://example.org/tower", "title": "Tower facts",
         "cited_text": "The tower is 330 metres tall.", "encrypted_index": "EncIndex1=="}])
    return message([text_block("Let me check."), search, web_search_tool_result_block("srvtoolu_1", results), cited,
                    tool_use_block(v.VERDICT_TOOL_NAME, verdict)], stop_reason, usage=web_usage(1000, 200, searches))


def voted(api: FakeMessagesAPI, web: w.WebTools | None = w.WebTools(), run_log=None, **options) -> v.VerificationResult:
    voter = v.ModelVoter(model(api), MODEL_ID, web=web)
    return asyncio.run(v.verify([CLAIM], [voter], votes_per_claim=1, refutations_required=1, run_log=run_log, **options))


def only_vote(result: v.VerificationResult) -> v.Vote:
    (vote,) = result.votes
    return vote


# --- the definitions and the request ---------------------------------------------------------------------------------


def test_the_definitions_carry_type_name_max_uses_domains_and_fetch_citations():
    tools = w.WebTools(search=True, fetch=True, max_uses=3, allowed_domains=("example.org",)).definitions()
    assert tools == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3, "allowed_domains": ["example.org"]},
        {"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 3, "allowed_domains": ["example.org"],
         "citations": {"enabled": True}}]
    assert w.WebTools(max_uses=None, blocked_domains=["spam.example"]).definitions() == [
        {"type": "web_search_20250305", "name": "web_search", "blocked_domains": ["spam.example"]}]


@pytest.mark.parametrize("options", [{"allowed_domains": ("a.org",), "blocked_domains": ("b.org",)},
                                     {"search": False, "fetch": False}, {"max_uses": 0}])
def test_impossible_web_tools_are_refused_when_made(options):
    with pytest.raises(InvalidArgument) as refused:
        w.WebTools(**options)
    assert isinstance(refused.value, SkillsMagicError)


def test_offer_appends_the_tools_relaxes_a_forced_choice_and_leaves_its_input_alone():
    request = {"model": MODEL_ID, "messages": [], "tools": [v.VERDICT_TOOL],
               "tool_choice": {"type": "tool", "name": v.VERDICT_TOOL_NAME}}
    before = copy.deepcopy(request)
    offered = w.offer(request, w.WebTools())
    assert request == before
    assert offered["tools"] == [v.VERDICT_TOOL, *w.WebTools().definitions()]
    assert offered["tool_choice"] == {"type": "auto"}
    assert w.offer(request, None) is request


def test_the_request_sent_carries_the_web_tools_and_tool_choice_auto():
    api = FakeMessagesAPI([searched_answer()])
    voted(api, w.WebTools(fetch=True, max_uses=2, allowed_domains=("example.org",)))
    (body,) = api.bodies()
    assert body["tool_choice"] == {"type": "auto"}
    assert [t.get("type") for t in body["tools"]] == [None, "web_search_20250305", "web_fetch_20250910"]
    search, fetch = body["tools"][1:]
    assert search == {"type": "web_search_20250305", "name": "web_search", "max_uses": 2,
                      "allowed_domains": ["example.org"]}
    assert fetch["name"] == "web_fetch" and fetch["max_uses"] == 2 and fetch["allowed_domains"] == ["example.org"]
    prompt = body["messages"][0]["content"]
    assert "2. Search the web for contradicting evidence" in prompt and "Cite" in prompt


def test_without_web_tools_the_request_is_as_before():
    api = FakeMessagesAPI([message([tool_use_block(v.VERDICT_TOOL_NAME, VERDICT)])])
    voted(api, None)
    (body,) = api.bodies()
    assert body["tool_choice"] == {"type": "tool", "name": v.VERDICT_TOOL_NAME}
    assert body["tools"] == [json.loads(json.dumps(v.VERDICT_TOOL))]
    assert "Search the web" not in body["messages"][0]["content"]


# --- a vote that searched ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("refuted, status", [(False, "upheld"), (True, "refuted")])
def test_a_searched_vote_keeps_its_citations_and_searches_in_the_vote_and_the_run_log(tmp_path, refuted, status):
    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")
    api = FakeMessagesAPI([searched_answer({**VERDICT, "refuted": refuted})])
    vote = only_vote(voted(api, run_log=log))
    assert vote.status == status and vote.verdict.refuted is refuted
    citation = {"url": "https://example.org/tower", "title": "Tower facts", "cited_text": "The tower is 330 metres tall."}
    searched = {"tool": "web_search", "query": "Eiffel Tower height", "results": [
        {"url": "https://example.org/tower", "title": "Tower facts", "page_age": "2 days ago"},
        {"url": "https://example.com/other", "title": "Other page", "page_age": None}]}
    assert vote.citations == [citation] and vote.consulted == [searched]
    assert vote.to_dict()["citations"] == [citation] and vote.to_dict()["consulted"] == [searched]
    assert "EncIndex1" not in json.dumps(vote.to_dict()) and "EncContent" not in json.dumps(vote.to_dict())
    (row,) = log.rows(kind="vote", bodies=True)
    assert row["data"]["citations"] == [citation] and row["data"]["consulted"] == [searched]
    assert row["outcome"] == status and len(row["requests"]) == len(row["responses"]) == 1


def test_the_views_show_the_cited_urls():
    api = FakeMessagesAPI([searched_answer()])
    view = VotesView(voted(api))
    assert "cites https://example.org/tower" in view.text()
    assert "cites https://example.org/tower" in view.html()
    assert view.data()["claims"][0]["votes"][0]["citations"][0]["url"] == "https://example.org/tower"


def test_a_vote_without_web_results_has_no_citation_fields():
    api = FakeMessagesAPI([message([tool_use_block(v.VERDICT_TOOL_NAME, VERDICT)])])
    data = only_vote(voted(api)).to_dict()
    assert "citations" not in data and "consulted" not in data


def test_the_cost_adds_a_cent_per_web_search():
    api = FakeMessagesAPI([searched_answer(searches=3)])
    vote = only_vote(voted(api))
    tokens = (1000 * 2.0 + 200 * 10.0) / 1_000_000
    assert WEB_SEARCH_USD_PER_REQUEST == 0.01
    assert vote.cost_usd == pytest.approx(tokens + 3 * 0.01)
    assert cost_of(MODEL_ID, web_usage(1000, 200, 3, 4)) == pytest.approx(tokens + 0.03)  # fetches: only tokens
    assert cost_of(MODEL_ID, {"input_tokens": 1000, "output_tokens": 200}) == pytest.approx(tokens)


def test_the_run_log_row_costs_the_searches_too(tmp_path):
    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")
    voted(FakeMessagesAPI([searched_answer(searches=2)]), run_log=log)
    (row,) = log.rows(kind="vote")
    assert row["cost_usd"] == pytest.approx((1000 * 2.0 + 200 * 10.0) / 1_000_000 + 0.02)


def test_a_search_error_does_not_break_the_vote():
    search = server_tool_use_block("web_search", {"query": "tower"}, id="srvtoolu_9")
    api = FakeMessagesAPI([message([search, web_search_error_block("srvtoolu_9", "max_uses_exceeded"),
                                    text_block("No search left; judging from the quote."),
                                    tool_use_block(v.VERDICT_TOOL_NAME, VERDICT)], usage=web_usage(500, 80, 0))])
    vote = only_vote(voted(api))
    assert vote.status == "upheld"
    assert vote.consulted == [{"tool": "web_search", "query": "tower", "results": [], "error": "max_uses_exceeded"}]
    assert vote.citations == []


# --- web fetch ---------------------------------------------------------------------------------------------------------


def test_a_fetched_document_cited_by_char_location_is_evidence_with_the_fetched_url():
    fetch = server_tool_use_block("web_fetch", {"url": "https://example.org/tower"}, id="srvtoolu_f")
    page = web_fetch_tool_result_block("srvtoolu_f", "https://example.org/tower", "The tower is 330 metres tall.",
                                       "Tower facts")
    cited = cited_text_block("330 m, says the page.", [
        {"type": "char_location", "document_index": 0, "document_title": "Tower facts", "start_char_index": 0,
         "end_char_index": 29, "cited_text": "The tower is 330 metres tall."}])
    api = FakeMessagesAPI([message([fetch, page, cited, tool_use_block(v.VERDICT_TOOL_NAME, VERDICT)],
                                   usage=web_usage(900, 90, 0, 1))])
    vote = only_vote(voted(api, w.WebTools(fetch=True)))
    assert vote.status == "upheld"
    assert vote.citations == [{"url": "https://example.org/tower", "title": "Tower facts",
                               "cited_text": "The tower is 330 metres tall."}]
    assert vote.consulted == [{"tool": "web_fetch", "url": "https://example.org/tower", "title": "Tower facts"}]
    assert vote.cost_usd == pytest.approx((900 * 2.0 + 90 * 10.0) / 1_000_000)  # a fetch: no charge of its own


def test_a_failed_fetch_is_consulted_with_its_error_and_the_requested_url():
    content = [server_tool_use_block("web_fetch", {"url": "https://example.org/gone"}, id="srvtoolu_g"),
               {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_g",
                "content": {"type": "web_fetch_tool_result_error", "error_code": "url_not_accessible"}}]
    assert w.consulted(content) == [{"tool": "web_fetch", "url": "https://example.org/gone", "title": None,
                                     "error": "url_not_accessible"}]


def test_evidence_is_deduplicated_in_order_and_an_unknown_document_keeps_its_title():
    location = {"type": "web_search_result_location", "url": "https://a.example", "title": "A", "cited_text": "a",
                "encrypted_index": "x"}
    other = {"type": "char_location", "document_index": 4, "document_title": "Notes", "cited_text": "n",
             "start_char_index": 0, "end_char_index": 1}
    content = [cited_text_block("one", [location]), cited_text_block("two", [location, other])]
    assert w.evidence(content) == [{"url": "https://a.example", "title": "A", "cited_text": "a"},
                                   {"url": None, "title": "Notes", "cited_text": "n"}]


# --- pause_turn --------------------------------------------------------------------------------------------------------


def paused_part() -> dict:
    search = server_tool_use_block("web_search", {"query": "Eiffel Tower height"}, id="srvtoolu_p")
    results = [web_search_result("https://example.org/tower", "Tower facts", "1 day ago")]
    return message([text_block("Searching."), search, web_search_tool_result_block("srvtoolu_p", results)],
                   "pause_turn", usage=web_usage(700, 40, 1))


def test_a_paused_turn_is_continued_with_its_content_as_is_and_the_vote_uses_the_merged_turn(tmp_path):
    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")
    first = paused_part()
    cited = cited_text_block("330 m.", [{"type": "web_search_result_location", "url": "https://example.org/tower",
                                          "title": "Tower facts", "cited_text": "330 metres", "encrypted_index": "E=="}])
    second = message([cited, tool_use_block(v.VERDICT_TOOL_NAME, VERDICT)], usage=web_usage(900, 60, 0))
    api = FakeMessagesAPI([first, second])
    vote = only_vote(voted(api, run_log=log))
    sent_first, sent_second = api.bodies()
    assert sent_second["messages"][:-1] == sent_first["messages"]
    assert sent_second["messages"][-1] == {"role": "assistant", "content": first["content"]}  # encrypted fields too
    assert "EncContent" in json.dumps(sent_second["messages"][-1])
    assert sent_second["tools"] == sent_first["tools"]
    assert vote.status == "upheld" and vote.calls == 2
    assert vote.input_tokens == 1600 and vote.output_tokens == 100
    assert vote.consulted[0]["query"] == "Eiffel Tower height" and vote.citations[0]["cited_text"] == "330 metres"
    assert vote.cost_usd == pytest.approx((1600 * 2.0 + 100 * 10.0) / 1_000_000 + 0.01)
    (row,) = log.rows(kind="vote", bodies=True)
    assert len(row["requests"]) == len(row["responses"]) == 2


def test_merged_sums_usage_field_by_field_and_keeps_the_rest_from_the_last_part():
    parts = [{"id": "m1", "content": [{"type": "text", "text": "a"}], "stop_reason": "pause_turn",
              "usage": {"input_tokens": 1, "output_tokens": 2, "service_tier": "standard",
                        "server_tool_use": {"web_search_requests": 1, "web_fetch_requests": 0}}},
             {"id": "m2", "content": [{"type": "text", "text": "b"}], "stop_reason": "end_turn",
              "usage": {"input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 5, "service_tier": "standard",
                        "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 1}}}]
    whole = w.merged(parts)
    assert whole["id"] == "m2" and whole["stop_reason"] == "end_turn"
    assert [b["text"] for b in whole["content"]] == ["a", "b"]
    assert whole["usage"] == {"input_tokens": 11, "output_tokens": 22, "cache_read_input_tokens": 5,
                              "service_tier": "standard",
                              "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 1}}
    assert w.server_uses(whole["usage"]) == {"web_search_requests": 3, "web_fetch_requests": 1}
    assert w.server_uses({}) == {"web_search_requests": 0, "web_fetch_requests": 0}


def test_a_continuation_extends_an_assistant_message_already_last():
    request = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Thinking"}]}
    following = w.continuation(request, {"stop_reason": "pause_turn", "content": [{"type": "text", "text": "more"}]})
    assert following["messages"] == [{"role": "user", "content": "q"}, {"role": "assistant", "content": [
        {"type": "text", "text": "Thinking"}, {"type": "text", "text": "more"}]}]
    assert request["messages"][-1]["content"] == "Thinking"
    assert w.continuation(request, {"stop_reason": "end_turn", "content": []}) is None


def test_a_turn_paused_more_than_the_limit_is_an_abstention():
    api = FakeMessagesAPI([paused_part() for _ in range(w.MAX_CONTINUATIONS + 1)])
    vote = only_vote(voted(api))
    assert vote.status == "abstained" and "paused" in vote.reason
    assert len(api.bodies()) == w.MAX_CONTINUATIONS + 1 and api.remaining == 0
    assert vote.input_tokens == 700 * (w.MAX_CONTINUATIONS + 1)
    assert vote.cost_usd == pytest.approx((700 * 2.0 + 40 * 10.0) / 1_000_000 * 6 + 0.01 * 6)


def test_complete_keeps_pause_turn_when_still_paused():
    class Paused:
        async def acreate(self, request):
            return {"content": [{"type": "text", "text": "…"}], "stop_reason": "pause_turn", "usage": {"input_tokens": 1}}

    response, exchanges = asyncio.run(w.complete(Paused().acreate, {"messages": [{"role": "user", "content": "q"}]}))
    assert response["stop_reason"] == "pause_turn" and len(exchanges) == w.MAX_CONTINUATIONS + 1
    assert response["usage"]["input_tokens"] == w.MAX_CONTINUATIONS + 1
    assert len(exchanges[-1][0]["messages"]) == 2  # one assistant message, extended each time


def test_a_paused_vote_that_ends_in_text_abstains_as_a_text_answer():
    api = FakeMessagesAPI([paused_part(), message([text_block("I think it holds.")], usage=web_usage(10, 5))])
    vote = only_vote(voted(api))
    assert vote.status == "abstained" and "text" in vote.reason and vote.consulted


# --- the magic ---------------------------------------------------------------------------------------------------------


CELL = "- claim: The Eiffel Tower is 330 m tall\n  quote: it stands 330 metres\n"


def test_the_magic_with_web_search_and_an_allowed_domain_reaches_the_api_with_the_web_search_tool(ip, tmp_path,
                                                                                                monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    with FakeAnthropicServer([searched_answer()]) as server, registered_magics(ip) as magics:
        magics.session.model_client = AnthropicModel(MODEL_ID, api_key=KEY, base_url=server.url)
        view = ip.run_cell_magic("skill", "verify --votes 1 --refutations 1 --web-search --allowed-domain example.org "
                                 "--max-searches 2", CELL)
        bodies = [r.body for r in server.requests]
    (body,) = bodies
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 2,
            "allowed_domains": ["example.org"]} in body["tools"]
    assert body["tool_choice"] == {"type": "auto"}
    vote = view.data()["claims"][0]["votes"][0]
    assert vote["status"] == "upheld" and vote["citations"][0]["url"] == "https://example.org/tower"


def test_the_magic_refuses_a_domain_without_web_search(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    with registered_magics(ip), pytest.raises(UsageError, match="--web-search"):
        ip.run_cell_magic("skill", "verify --allowed-domain example.org", CELL)


# --- a paused vote under the cap ----------------------------------------------------------------------------------------


def test_each_continuation_of_a_paused_vote_is_held_by_the_cap_before_it_is_sent(tmp_path):
    from skills_magic.runs.budget import Budget

    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")
    api = FakeMessagesAPI([paused_part(), searched_answer()])
    voter = v.ModelVoter(model(api), MODEL_ID, web=w.WebTools())
    first_hold = Budget(1.0).call_cost(MODEL_ID, voter.request(CLAIM, 1, 1, 1))
    budget = Budget(first_hold * 1.5)  # room for the first request, not for a continuation on top of it
    result = asyncio.run(v.verify([CLAIM], [voter], votes_per_claim=1, refutations_required=1, run_log=log,
                                  budget=budget))

    vote = only_vote(result)
    assert vote.status == "abstained" and vote.reason.startswith("a continuation not sent: stopped before a call")
    assert len(api.bodies()) == 1  # the continuation was never sent
    spent = cost_of(MODEL_ID, paused_part()["usage"])
    assert budget.spent == pytest.approx(spent) and budget.held == pytest.approx(0.0)  # the first part, and its search
    [row] = log.rows(kind="vote", bodies=True)
    assert len(row["responses"]) == 1 and row["responses"][0]["stop_reason"] == "pause_turn"  # the part it had


def test_a_vote_timed_out_part_way_keeps_the_parts_it_had_in_the_run_log(tmp_path):
    log = RunLog(Database(str(tmp_path / "log.sqlite")), "s")

    class Slow:
        name = "slow"

        def __init__(self):
            self.sent = 0

        async def acreate(self, request):
            self.sent += 1
            if self.sent == 1:
                return paused_part()
            await asyncio.sleep(5)

    voter = v.ModelVoter(Slow(), MODEL_ID, web=w.WebTools())
    result = asyncio.run(v.verify([CLAIM], [voter], votes_per_claim=1, refutations_required=1, run_log=log,
                                  timeout=0.2))

    assert only_vote(result).reason == "timed out after 0.2 s"
    [row] = log.rows(kind="vote", bodies=True)
    assert [r["stop_reason"] for r in row["responses"]] == ["pause_turn"]
