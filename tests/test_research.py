"""The deep-research workflow (runs.research) with scripted agents: the phases in order, the agent-call count against
the seed's formula, the claim pool merged and ranked, every early exit a report, the trimmed reverify, the cap."""

from __future__ import annotations

import asyncio

import pytest

from research_agents import Agents, scripted
from skills_magic.models.base import ModelError
from skills_magic.models.scripted import ScriptedModel
from skills_magic.runs import research as r
from skills_magic.runs.budget import Budget
from skills_magic.runs.orchestrate import Orchestra, run
from skills_magic.runs.verify import Claim

MODEL = "claude-sonnet-5-5"  # priced: the report's cost is not zero


def researched(agents: Agents | None = None, question: str = "Do green roofs cool cities?", **options):
    orchestra = Orchestra(scripted(agents), MODEL, **{k: options.pop(k) for k in ("budget", "run_log", "on_event") if k in options})
    return run(r.research(orchestra, question, **options)), orchestra


def test_the_whole_pipeline_reports_what_it_found_and_counts_its_agent_calls_by_the_formula():
    report, orchestra = researched()

    assert report.status == "complete" and report.stopped == ""
    assert report.angles == ["surface", "energy"]
    assert [s.url for s in report.sources] == ["https://a.example/roofs", "https://b.example/meta",
                                                "https://c.example/vendor", "https://d.example/review"]  # b once
    assert report.formula == "1 + 2 + 4 + 4 × 3 + 1 = 20"
    assert report.agent_calls == report.expected_agent_calls == 20 == orchestra.calls
    assert {c.claim.claim: c.outcome for c in report.claims} == {
        "Green roofs were 20 C cooler than black roofs in July": "confirmed",
        "Green roofs lower air temperature by 0.3 C": "confirmed",
        "Green roofs cut energy use by 75%": "refuted",
        "Cooling energy savings range from 2% to 16%": "confirmed"}
    assert report.synthesis.executive_summary.startswith("Green roofs cool")
    assert report.cost_usd == pytest.approx(20 * (1000 * 2.0 + 100 * 10.0) / 1e6)
    assert report.board.stages == {"scope": {"started": 1, "done": 1, "abstained": 0},
                                   "search": {"started": 2, "done": 2, "abstained": 0},
                                   "fetch": {"started": 4, "done": 4, "abstained": 0},
                                   "verify": {"started": 12, "done": 12, "abstained": 0},
                                   "synthesise": {"started": 1, "done": 1, "abstained": 0}}
    assert len(report.trace) == 20 and {line["outcome"] for line in report.trace} == {"answered"}


def test_the_pool_is_merged_and_ranked_by_importance_then_support_and_the_rest_is_not_verified():
    report, _ = researched(settings=r.Settings(max_verified_claims=2))

    first = report.pool[0]
    assert first.claim == "Green roofs were 20 C cooler than black roofs in July"  # importance 5, two sources
    assert first.source == "https://a.example/roofs, https://b.example/meta"
    assert [c.claim.claim for c in report.claims] == [first.claim, "Green roofs lower air temperature by 0.3 C"]
    assert [c.claim for c in report.not_verified] == ["Green roofs cut energy use by 75%",
                                                       "Cooling energy savings range from 2% to 16%"]
    assert report.formula == "1 + 2 + 4 + 2 × 3 + 1 = 14" and report.agent_calls == 14


def test_max_sources_caps_the_fetches_first_come():
    report, _ = researched(settings=r.Settings(max_sources=2))

    assert [s.url for s in report.sources] == ["https://a.example/roofs", "https://b.example/meta"]
    assert report.calls["sources"] == 2 and report.agent_calls == report.expected_agent_calls


def test_the_barrier_holds_verification_until_every_fetch_is_done_and_fetches_start_before_all_searches_end():
    events: list[tuple[str, str]] = []
    slow = Agents()
    model = ScriptedModel(responder=slow)

    async def delayed(request, _inner=model.acreate):  # the second angle's search is slow
        if "**Angle:** energy" in str(request["messages"][0]["content"]):
            await asyncio.sleep(0.05)
        return await _inner(request)

    model.acreate = delayed
    orchestra = Orchestra(model, MODEL, on_event=lambda kind, data: events.append((kind, data["stage"])))
    run(r.research(orchestra, "Do green roofs cool cities?"))

    finished_search = [i for i, e in enumerate(events) if e == ("finished", "search")]
    started_fetch = [i for i, e in enumerate(events) if e == ("started", "fetch")]
    finished_fetch = [i for i, e in enumerate(events) if e == ("finished", "fetch")]
    started_verify = [i for i, e in enumerate(events) if e == ("started", "verify")]
    assert started_fetch[0] < finished_search[-1]  # the first angle's sources did not wait for the slow angle
    assert max(finished_fetch) < min(started_verify)  # the barrier


def test_an_underspecified_question_ends_with_clarifying_questions_and_clarified_it_runs():
    report, _ = researched(Agents(underspecified=True))

    assert report.status == "needs_clarification" and "--clarify" in report.stopped
    assert report.scope.clarifying_questions == ["Which climate?", "Surface or air temperature?"]
    assert report.formula.endswith("= 1") and report.agent_calls == 1

    clarified, _ = researched(Agents(underspecified=True), clarifications="temperate; surface")
    assert clarified.status == "complete" and clarified.agent_calls == 20


@pytest.mark.parametrize("agents, stopped, calls", [
    (Agents(fail={"record_scope"}), "the scope failed (the model is overloaded", 1),
    (Agents(no_sources=True), "no sources were found", 3),
    (Agents(fail={"record_search"}), "no sources were found", 3),
    (Agents(no_claims=True), "no claims could be extracted", 7),
    (Agents(refute=("Green", "Cooling")), "no claim survived verification", 19),
    (Agents(malformed={"record_synthesise"}), "the synthesis failed", 20),
])
def test_every_early_exit_is_a_report_with_its_stats(agents, stopped, calls):
    report, _ = researched(agents)

    assert report.status == "stopped" and report.stopped.startswith(stopped)
    assert report.agent_calls == calls and report.stats["agent_calls"] == calls
    assert report.to_dict()["stats"]["agent_calls"] == calls  # a report however it ended


def test_a_search_that_fails_is_named_in_the_report_and_the_other_angle_goes_on():
    agents = Agents()
    failing = agents.record_search

    def search(prompt):
        if "**Angle:** energy" in prompt:
            raise ModelError("the model is overloaded (scripted)", 529, "overloaded")
        return failing(prompt)

    agents.record_search = search
    report, _ = researched(agents)

    assert report.status == "complete" and [s.url for s in report.sources] == ["https://a.example/roofs",
                                                                              "https://b.example/meta"]
    assert report.abstentions == ["search energy: the model is overloaded (scripted)"]
    assert report.formula == "1 + 2 + 2 + 2 × 3 + 1 = 12" and report.agent_calls == 12


def test_a_failed_synthesis_keeps_the_verified_claims_and_the_retry_is_one_more_request_not_one_more_agent():
    report, orchestra = researched(Agents(malformed={"record_synthesise"}))

    assert len(report.claims) == 4 and report.synthesis is None
    assert orchestra.calls == 21 and report.agent_calls == 20  # synthesis asked twice: one agent, two requests
    assert [line["outcome"] for line in report.trace if line["stage"] == "synthesise"] == ["malformed", "malformed"]


def test_a_cost_cap_stops_the_run_with_a_report_of_what_it_has():
    per_call = (1000 * 2.0 + 100 * 10.0) / 1e6
    report, orchestra = researched(budget=Budget(per_call * 9.5))

    assert report.status == "stopped" and "cap" in report.stopped
    assert orchestra.calls <= 9 and report.cost_usd <= per_call * 9.5
    assert report.to_dict()["stats"]["requests"] == orchestra.calls


def test_cancelling_keeps_the_report_so_far():
    model = ScriptedModel(responder=Agents())

    async def hang(request, _inner=model.acreate):
        if "Claim extractor" in str(request["messages"][0]["content"]):
            await asyncio.sleep(30)
        return await _inner(request)

    model.acreate = hang

    async def cancelled():
        task = asyncio.ensure_future(r.research(Orchestra(model, MODEL), "Do green roofs cool cities?"))
        await asyncio.sleep(0.1)
        task.cancel()
        return await task

    report = asyncio.run(cancelled())
    assert report.stopped.startswith("cancelled") and report.angles == ["surface", "energy"]


def test_reverify_is_the_same_verifier_and_synthesis_over_claims_already_extracted():
    claims = [Claim(claim="Green roofs cut energy use by 75%", quote="75%", source="vendor"),
              Claim(claim="Cooling energy savings range from 2% to 16%", quote="2-16%", source="review")]
    agents = Agents()
    report = run(r.reverify(Orchestra(scripted(agents), MODEL), claims, question="Do green roofs save energy?"))

    assert report.kind == "reverify" and report.status == "complete"
    assert [c.outcome for c in report.claims] == ["refuted", "confirmed"]
    assert report.formula == "2 × 3 + 1 = 7" and report.agent_calls == 7
    assert set(agents.seen) == {"record_verdict", "record_synthesise"}  # no scope, search or fetch


def test_reverify_of_no_claims_is_a_report_not_an_error():
    report = run(r.reverify(Orchestra(scripted(), MODEL), []))

    assert report.status == "stopped" and report.stopped == "no claims to verify" and report.agent_calls == 0


def test_every_agent_call_lands_in_the_run_log(tmp_path):
    from skills_magic.records.db import Database
    from skills_magic.records.runlog import RunLog

    log = RunLog(Database(str(tmp_path / "project.sqlite")), "session-1")
    report, _ = researched(Agents(malformed={"record_synthesise"}), run_log=log)

    rows = log.rows(kind="vote")
    assert len(rows) == report.requests == 21
    assert sorted({row["label"] for row in rows}) == ["stage:fetch", "stage:scope", "stage:search", "stage:synthesise",
                                                      "stage:verify"]


def test_the_constants_sit_at_the_top_and_the_formula_uses_them():
    assert (r.VOTES_PER_CLAIM, r.REFUTATIONS_REQUIRED, r.MAX_SOURCES, r.MAX_VERIFIED_CLAIMS) == (3, 2, 15, 25)
    settings = r.Settings()
    assert (settings.votes_per_claim, settings.max_sources, settings.max_verified_claims) == (3, 15, 25)


def test_without_web_tools_the_prompts_say_so_and_the_report_warns_the_sources_are_recollection():
    from skills_magic.notebook.views.research import ResearchView

    agents = Agents()
    model = scripted(agents)
    report = run(r.research(Orchestra(model, MODEL), "Do green roofs cool cities?"))

    prompts = [req["messages"][0]["content"] for req in model.requests]
    assert any("You cannot search" in p for p in prompts) and any("You cannot fetch" in p for p in prompts)
    assert not any("Search the web for this angle" in p for p in prompts)
    assert "the model's recollection" in ResearchView(report).text()


def test_the_session_reverifies_claims_given_as_mappings_or_strings(tmp_path):
    from skills_magic.session import SkillsSession

    session = SkillsSession(sources=[], cwd=str(tmp_path))
    session.model_client = scripted()
    report = session.research([{"claim": "Green roofs cut energy use by 75%", "quote": "75%"},
                               "Cooling energy savings range from 2% to 16%"], model=MODEL, question="Energy?")

    assert report.kind == "reverify" and [c.outcome for c in report.claims] == ["refuted", "confirmed"]
    assert report.formula == "2 × 3 + 1 = 7" and session.runs.rows(kind="vote")
