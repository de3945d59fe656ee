"""Research stages that search and fetch: a stage's request offers the server tools, a paused turn is continued (each
part one request, under the cap), the evidence is kept; through the real SDK against the local fake server, through
the offline stand-in (models.local_web), and `%%skill research` / `reverify` in an IPython shell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from pydantic import BaseModel

from fake_anthropic import (FakeAnthropicServer, FakeMessagesAPI, cited_text_block, message, server_tool_use_block,
                            tool_use_block, web_fetch_tool_result_block, web_search_result, web_search_tool_result_block)
from notebook_setup import notebook_folder, registered_magics
from skills_magic.models.anthropic import AnthropicModel
from skills_magic.models.local_web import LocalWeb, Page
from skills_magic.models.scripted import ScriptedModel
from skills_magic.models.web_tools import WebTools
from skills_magic.notebook.views.research import ResearchView
from skills_magic.runs.budget import Budget
from skills_magic.runs.orchestrate import Abstention, Orchestra, Stage, run

pytestmark = pytest.mark.usefixtures("machine_setup_forgotten")

REPO = Path(__file__).resolve().parents[1]
MODEL_ID = "claude-sonnet-5-5"


class Found(BaseModel):
    urls: list[str]


finder = Stage("search", lambda angle: f"Source finder for {angle}", Found, web=WebTools(max_uses=3))


def sdk_model(api) -> AnthropicModel:
    return AnthropicModel(MODEL_ID, api_key="sk-test", http_client=api.client(), async_http_client=api.async_client())


def paused_part() -> dict:
    search = server_tool_use_block("web_search", {"query": "green roofs"}, id="srvtoolu_a")
    results = web_search_tool_result_block("srvtoolu_a", [web_search_result("https://a.example/roofs", "Roofs")])
    return message([search, results], "pause_turn", usage={"input_tokens": 500, "output_tokens": 20,
                                                            "server_tool_use": {"web_search_requests": 1}})


def final_part() -> dict:
    fetch = server_tool_use_block("web_fetch", {"url": "https://a.example/roofs"}, id="srvtoolu_b")
    fetched = web_fetch_tool_result_block("srvtoolu_b", "https://a.example/roofs", "Roofs are 20 C cooler.", "Roofs")
    cited = cited_text_block("Roofs are cooler.", [{"type": "char_location", "cited_text": "Roofs are 20 C cooler.",
                                                    "document_index": 0, "document_title": "Roofs",
                                                    "start_char_index": 0, "end_char_index": 22}])
    return message([fetch, fetched, cited, tool_use_block("record_search", {"urls": ["https://a.example/roofs"]})],
                   usage={"input_tokens": 700, "output_tokens": 60, "server_tool_use": {"web_fetch_requests": 1}})


def test_a_stage_with_web_offers_the_server_tools_and_continues_a_paused_turn_through_the_sdk():
    api = FakeMessagesAPI([paused_part(), final_part()])
    orchestra = Orchestra(sdk_model(api), MODEL_ID)

    [answer] = run(orchestra.parallel(["surface"], finder))

    assert answer == Found(urls=["https://a.example/roofs"])
    first, second = api.bodies()
    assert first["tool_choice"] == {"type": "auto"}  # a forced tool could not search first
    assert [t["name"] for t in first["tools"]] == ["record_search", "web_search"]
    assert first["tools"][1] == {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    assert second["messages"][:-1] == first["messages"]
    paused = second["messages"][-1]
    assert paused["role"] == "assistant" and [b["type"] for b in paused["content"]] == ["server_tool_use",
                                                                                        "web_search_tool_result"]
    assert paused["content"][1]["content"][0]["encrypted_content"]  # sent back as it came
    assert orchestra.calls == 2 and orchestra.agent_calls == 1
    assert orchestra.usage["web_search_requests"] == 1 and orchestra.usage["web_fetch_requests"] == 1
    assert orchestra.found[("search", "0")]["citations"][0]["url"] == "https://a.example/roofs"
    assert [line["outcome"] for line in orchestra.trace] == ["paused", "answered"]
    assert orchestra.cost_usd == pytest.approx((1200 * 2 + 80 * 10) / 1e6 + 0.01)  # tokens, and one search


def test_a_stage_through_a_real_socket_keeps_its_evidence():
    with FakeAnthropicServer([paused_part(), final_part()]) as server:
        client = AnthropicModel(MODEL_ID, api_key="sk-test", base_url=server.url)
        orchestra = Orchestra(client, MODEL_ID)
        [answer] = run(orchestra.parallel(["surface"], finder))

    assert answer.urls == ["https://a.example/roofs"] and len(server.requests) == 2
    assert orchestra.found[("search", "0")]["consulted"][0]["tool"] == "web_search"


def test_a_turn_paused_for_ever_is_an_abstention_and_not_a_hang():
    api = FakeMessagesAPI([paused_part() for _ in range(20)])
    orchestra = Orchestra(sdk_model(api), MODEL_ID)

    [answer] = run(orchestra.parallel(["surface"], finder))

    assert isinstance(answer, Abstention) and "paused" in answer.reason
    assert orchestra.calls == 2 * 6 and orchestra.agent_calls == 1  # two attempts, each continued 5 times


def test_the_cap_is_checked_before_each_continuation():
    api = FakeMessagesAPI([paused_part(), final_part()])
    budget = Budget(0.0001)  # enough for no request at all
    orchestra = Orchestra(sdk_model(api), MODEL_ID, budget=budget)

    [answer] = run(orchestra.parallel(["surface"], finder))

    assert isinstance(answer, Abstention) and "cap" in answer.reason and api.bodies() == []


PAGES = [Page("https://a.example/roofs", "Roofs", "Green roofs are 20 C cooler than black roofs."),
         Page("https://b.example/energy", "Energy", "Savings in cooling energy ranged from 2% to 16%.")]


def test_the_offline_stand_in_gives_the_same_blocks_and_pauses_so_continuation_runs_offline():
    turns = [{"when": "Source finder", "web_search": ["green roofs", "cooling energy", "roof temperature"],
              "text": "Two sources.", "cite": ["https://a.example/roofs"],
              "tool_use": [{"name": "record_search", "input": {"urls": ["https://a.example/roofs"]}}],
              "usage": {"input_tokens": 900, "output_tokens": 90}}]
    model = ScriptedModel(turns, web=LocalWeb(PAGES))
    orchestra = Orchestra(model, MODEL_ID)

    [answer] = run(orchestra.parallel(["surface"], finder))

    assert answer.urls == ["https://a.example/roofs"]
    assert len(model.requests) == 2 and model.requests[1]["messages"][-1]["role"] == "assistant"  # paused after two
    assert orchestra.usage["web_search_requests"] == 3
    assert orchestra.found[("search", "0")]["citations"][0]["url"] == "https://a.example/roofs"


# --- the magics -------------------------------------------------------------------------------------------------------


@pytest.fixture
def shell(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    turns = (REPO / "notebooks" / "turns" / "research.yaml").read_text(encoding="utf-8")
    (tmp_path / "research.yaml").write_text(turns.replace("../../examples/web/green-roofs",
                                                          str(REPO / "examples" / "web" / "green-roofs")), encoding="utf-8")
    with registered_magics(ip) as instance:
        ip.run_line_magic("skills", "model scripted research.yaml")
        yield ip, instance


CLARIFY = "--clarify \"temperate cities; cooling of streets and of buildings\""


def test_the_research_magic_runs_the_notebook_s_pipeline_and_its_report_is_a_view(shell):
    ip, _ = shell
    first = ip.run_cell_magic("skill", f"research --model {MODEL_ID}", "Are green roofs worth it?")
    assert isinstance(first, ResearchView) and first.report.status == "needs_clarification"

    view = ip.run_cell_magic("skill", f"research --web --max-claims 5 --model {MODEL_ID} {CLARIFY}",
                             "Are green roofs worth it?")
    report = view.report
    assert report.status == "complete" and report.agent_calls == report.expected_agent_calls == 23
    assert report.formula == "1 + 2 + 4 + 5 × 3 + 1 = 23" and report.requests == 26
    assert report.stats["web_searches"] == 18 and report.stats["web_fetches"] == 4 and report.cost_usd > 0
    refuted = report.outcome("refuted")
    assert [c.claim.claim for c in refuted] == ["Green roofs cut a building's energy use by 75%"]
    assert all(vote.citations for vote in refuted[0].votes)  # each voter's search is its evidence
    data, meta = view._repr_mimebundle_()
    assert "seconds" not in str(data["application/vnd.skills-magic.research+json"]["stats"])
    assert "seconds" in meta["application/vnd.skills-magic.research+json"]
    assert "23 agent calls (formula: 1 + 2 + 4 + 5 × 3 + 1 = 23)" in view.text()
    assert "<table class='skills-magic-board'>" in view.html() and "executive summary" in view.html()


def test_every_research_call_is_in_the_run_log(shell):
    ip, instance = shell
    ip.run_cell_magic("skill", f"research --model {MODEL_ID}", "Are green roofs worth it?")
    view = ip.run_cell_magic("skill", f"research --web --max-claims 5 --model {MODEL_ID} {CLARIFY}",
                             "Are green roofs worth it?")
    rows = instance.session.runs.rows(kind="vote")
    runs = {row["data"].get("orchestration") for row in rows}
    assert len(runs) == 2 and view.report.run_id in runs  # one id per research run, in each of its rows
    mine = [row for row in rows if row["data"]["orchestration"] == view.report.run_id]
    assert len(mine) == view.report.requests == 26
    assert view.metadata()["run_id"] == view.report.run_id and view.report.run_id not in str(view.data())


def test_reverify_in_the_shell_is_the_trimmed_workflow(shell):
    ip, _ = shell
    cell = ("- claim: The city will fund 100 new green roofs by 2027\n  quote: \"100 new green roofs by 2027\"\n"
            "- claim: The new green roofs will cool every street by 2 °C\n  quote: \"cool their streets\"\n")
    # the notebook's reverify turns come after its research turns: use those first
    ip.run_cell_magic("skill", f"research --model {MODEL_ID}", "Are green roofs worth it?")
    ip.run_cell_magic("skill", f"research --web --max-claims 5 --model {MODEL_ID} {CLARIFY}", "Are green roofs worth it?")
    view = ip.run_cell_magic("skill", f"reverify --question \"What is the city planning?\" --model {MODEL_ID}", cell)
    assert view.report.kind == "reverify" and view.report.formula == "2 × 3 + 1 = 7"
    assert [c.outcome for c in view.report.claims] == ["confirmed", "refuted"]


@pytest.mark.parametrize("line, cell, says", [
    ("research", "   ", "the cell is the question"),
    ("reverify", "- claim: [unclosed", "not YAML"),
    ("reverify", "- quote: no claim", "claim 1"),
    ("research --angles 0", "Q?", "--angles"),
    ("research --allowed-domain x.example", "Q?", None),  # accepted: only used with --web
])
def test_bad_input_is_a_one_line_usage_error_and_nothing_is_spent(shell, line, cell, says):
    ip, instance = shell
    if says is None:
        view = ip.run_cell_magic("skill", f"{line} --max-cost 0.0001", cell)
        assert view.report.stopped.startswith("stopped before a call")
        return
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("skill", line, cell)
    assert says in str(raised.value)
    assert instance.session.runs.rows(kind="vote") == []


def test_the_cap_holds_a_request_s_possible_web_searches_before_it_is_sent():
    request = finder.request(MODEL_ID, [{"role": "user", "content": "Source finder for surface"}])
    plain = Stage("search", finder.prompt, Found).request(MODEL_ID, request["messages"])

    with_web, without = Budget(1.0).call_cost(MODEL_ID, request), Budget(1.0).call_cost(MODEL_ID, plain)
    assert with_web - without == pytest.approx(3 * 0.01, abs=0.002)  # max_uses 3, $10 per 1,000 searches


def test_allowed_domains_reach_every_web_tool_of_every_stage(shell):
    ip, instance = shell
    ip.run_cell_magic("skill", f"research --model {MODEL_ID}", "Are green roofs worth it?")
    model = instance.session.client()
    before = len(model.requests)
    view = ip.run_cell_magic("skill", f"research --web --allowed-domain climate.rotterdam.example "
                                      f"--allowed-domain journal.example --max-claims 5 --model {MODEL_ID} {CLARIFY}",
                             "Are green roofs worth it?")

    tools = [t for request in model.requests[before:] for t in request.get("tools", []) if "type" in t]
    assert tools and {tuple(t["allowed_domains"]) for t in tools} == {("climate.rotterdam.example", "journal.example")}
    assert {t["type"] for t in tools} == {"web_search_20250305", "web_fetch_20250910"}
    # the stand-in honours them: the scripted agents that cite the vendor's or the review's page (now out of reach)
    # fail, and each such failure is that agent's abstention, named in the report, never the run's end
    report = view.report
    assert any("greenroof-vendor.example" in note for note in report.abstentions), report.abstentions
    assert report.board.stages["search"]["abstained"] == 1 and report.agent_calls == report.expected_agent_calls


def test_with_no_model_the_magic_says_so_in_one_line(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    with registered_magics(ip):
        with pytest.raises(UsageError) as raised:
            ip.run_cell_magic("skill", "research", "Do green roofs cool cities?")
    assert "ANTHROPIC_API_KEY" in str(raised.value)


# --- the whole notebook pipeline through the real SDK, over a real socket -----------------------------------------


def test_the_notebook_s_pipeline_runs_through_the_real_sdk_against_a_local_server(ip, tmp_path, monkeypatch):
    """The local server answers each request from the offline stand-in (the notebook's scripted agents and local
    web): every block, server_tool_use, web_search_tool_result, web_fetch_tool_result, citations and pause_turn
    included, is parsed and dumped by the SDK's own types on its way to the orchestra and back."""
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    turns = (REPO / "notebooks" / "turns" / "research.yaml").read_text(encoding="utf-8")
    (tmp_path / "research.yaml").write_text(turns.replace("../../examples/web/green-roofs",
                                                          str(REPO / "examples" / "web" / "green-roofs")), encoding="utf-8")
    agents = ScriptedModel.from_file(tmp_path / "research.yaml")
    with FakeAnthropicServer([lambda recorded: agents.create(recorded.body) for _ in range(60)]) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-research")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        with registered_magics(ip):
            ip.run_cell_magic("skill", f"research --model {MODEL_ID}", "Are green roofs worth it?")
            view = ip.run_cell_magic("skill", f"research --web --max-claims 5 --model {MODEL_ID} {CLARIFY}",
                                     "Are green roofs worth it?")
        bodies = [r.body for r in server.requests]

    report = view.report
    assert report.status == "complete" and report.formula == "1 + 2 + 4 + 5 × 3 + 1 = 23"
    assert report.agent_calls == 23 and report.requests == 26 and len(bodies) == 1 + 26
    assert [c.outcome for c in report.claims] == ["confirmed", "confirmed", "refuted", "confirmed", "confirmed"]
    continued = [b for b in bodies if b["messages"][-1]["role"] == "assistant"]
    assert len(continued) == 1 and continued[0]["messages"][-1]["content"][0]["type"] == "server_tool_use"
    assert all(block.get("encrypted_content") for block in continued[0]["messages"][-1]["content"][1]["content"])
    assert report.stats["web_searches"] == 18 and report.stats["web_fetches"] == 4
    assert all(vote.citations for vote in report.outcome("refuted")[0].votes)
    assert "sk-test-research" not in json.dumps(report.to_dict()) + view.text()


def test_web_search_is_another_name_for_web_as_in_verify(shell):
    ip, instance = shell
    ip.run_cell_magic("skill", f"research --model {MODEL_ID}", "Are green roofs worth it?")
    view = ip.run_cell_magic("skill", f"research --web-search --max-claims 5 --model {MODEL_ID} {CLARIFY}",
                             "Are green roofs worth it?")
    assert view.report.web and view.report.status == "complete"
