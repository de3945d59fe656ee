"""The deep-research workflow, built only from runs.orchestrate's primitives: one question in, a verified report out,
with the agent calls it made and what they cost.

  scope       1 agent: the question restated; 2-3 clarifying questions when it is underspecified; search angles
  search      1 agent per angle (web search): the sources worth reading          } pipeline(): each angle's sources
  fetch       1 agent per source (web fetch): claims, each with a verbatim quote } are fetched as soon as it is done
  BARRIER     intentional: the claim pool must be complete before it is ranked
  rank        no agent: duplicates merged, ordered by importance and support, the first MAX_VERIFIED_CLAIMS kept
  verify      VOTES_PER_CLAIM voters per claim, nested parallel(); runs.verify.decide's rule (a null vote abstains)
  synthesise  1 agent: an executive summary, findings resting on confirmed claims, caveats, open questions

agent calls = 1 + angles + sources + verified claims x VOTES_PER_CLAIM + 1 (`ResearchReport.formula`). `reverify`
is the same skeleton with the first phases replaced by a list of claims already extracted. Every early exit (a
question to clarify, no sources, no claims, nothing confirmed, a failed synthesis, a cap reached, a cancel)
returns the report so far with its stats; nothing here raises for what a model did.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel, Field

from skills_magic.models.web_tools import WebTools
from skills_magic.runs.orchestrate import BARRIER, Abstention, Orchestra, Stage, run_in_loop_thread
from skills_magic.runs.research_report import ResearchReport, SourceRead
from skills_magic.runs.verify import (VERDICT_TOOL_NAME, VOTE_MAX_TOKENS, Claim, ClaimResult, Text, Vote, VoteVerdict,
                                     decide, parse_claims, voter_prompt)

ANGLES = 5  # search angles the scope proposes: the seed's run had 5, enough to cover a topic from different sides
SOURCES_PER_ANGLE = 5  # sources one search agent may name: the best few, not a results page
MAX_SOURCES = 15  # sources fetched in all (the seed's MAX_FETCH): the first ones found, duplicates skipped
CLAIMS_PER_SOURCE = 8  # claims one fetch agent may extract: the checkable ones, not every sentence
MAX_VERIFIED_CLAIMS = 25  # claims verified (the seed's MAX_VERIFY_CLAIMS); the rest are listed as not verified
VOTES_PER_CLAIM = 3  # independent voters per claim
REFUTATIONS_REQUIRED = 2  # refutations that kill a claim, and the valid votes a confirmation needs
SEARCHES_PER_AGENT = 3  # web searches one search agent (or one voter, with web on) may make
FETCHES_PER_SOURCE = 2  # web fetches one fetch agent may make: its page, and one it links to


@dataclass(frozen=True)
class Settings:
    """The constants above, as one value a caller (or a test) may change in part."""

    angles: int = ANGLES
    sources_per_angle: int = SOURCES_PER_ANGLE
    max_sources: int = MAX_SOURCES
    claims_per_source: int = CLAIMS_PER_SOURCE
    max_verified_claims: int = MAX_VERIFIED_CLAIMS
    votes_per_claim: int = VOTES_PER_CLAIM
    refutations_required: int = REFUTATIONS_REQUIRED


# --- one schema per agent type: one agent's output is the next one's typed input ------------------------------------


class Angle(BaseModel):
    angle: Text = Field(description="what this line of search looks at")
    query: Text = Field(description="the web search query for it")


class Scope(BaseModel):
    question: Text = Field(description="the question, restated precisely")
    underspecified: bool = Field(description="true when the question cannot be researched well without answers")
    clarifying_questions: list[Text] = Field(default_factory=list, description="2 or 3, when underspecified")
    angles: list[Angle] = Field(default_factory=list, description="search angles that together cover the question")


class SourceRef(BaseModel):
    url: Text
    title: str = ""
    why: str = Field("", description="what this source can establish")


class Sources(BaseModel):
    sources: list[SourceRef]


class FoundClaim(BaseModel):
    claim: Text = Field(description="one checkable statement, in your words")
    quote: Text = Field(description="the source's exact words that support it")
    importance: int = Field(3, ge=1, le=5, description="5: central to the question; 1: a side detail")


class Claims(BaseModel):
    claims: list[FoundClaim]


class Finding(BaseModel):
    finding: Text
    claims: list[int] = Field(default_factory=list, description="the numbers of the confirmed claims it rests on")


class Synthesis(BaseModel):
    executive_summary: Text
    findings: list[Finding]
    caveats: list[str] = Field(default_factory=list)
    open_questions: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Lead:
    """A source to read, and the angle it was found for."""

    angle: Angle
    source: SourceRef


# --- prompts as functions: a role, the context, a numbered checklist, a decision rule, the output ---------------------


def scope_prompt(question: str, clarifications: str = "") -> str:
    answers = f"\n**The researcher's answers to earlier questions:** {clarifications}" if clarifications else ""
    return (f"## Research scoper\n\n## Question\n\"{question}\"{answers}\n\n## Checklist\n"
            "1. Restate the question precisely.\n"
            "2. Is it underspecified: would two careful researchers read it differently (scope, period, population, "
            "what counts as evidence)? If so, write 2 or 3 clarifying questions.\n"
            f"3. Propose up to {ANGLES} search angles that together cover it, each with a web search query.\n\n"
            "## Decision rule\nunderspecified=true ONLY if the answers would change what is searched; with the "
            "researcher's answers given, decide on them.\n\nAnswer only by calling the tool.")


def search_prompt(lead: tuple[str, Angle], limit: int = SOURCES_PER_ANGLE, web: bool = True) -> str:
    question, angle = lead
    first = ("Search the web for this angle." if web else
             "You cannot search: name only sources you know exist, with their real urls.")
    return (f"## Source finder\n\n## Question\n\"{question}\"\n**Angle:** {angle.angle}\n**Query:** {angle.query}\n\n"
            f"## Checklist\n1. {first}\n2. Prefer primary sources (papers, official data, "
            "documentation) over commentary.\n3. Skip marketing pages, forums and duplicates.\n\n"
            f"## Output\nAt most {limit} sources, best first: url, title and what each can establish. "
            "Answer only by calling the tool.")


def fetch_prompt(item: tuple[str, Lead], limit: int = CLAIMS_PER_SOURCE, web: bool = True) -> str:
    question, lead = item
    first = "Fetch the source." if web else "You cannot fetch: use only what you know this source says."
    return (f"## Claim extractor\n\n## Question\n\"{question}\"\n**Angle:** {lead.angle.angle}\n"
            f"**Source:** {lead.source.url} ({lead.source.title})\n\n## Checklist\n1. {first}\n"
            "2. Extract the claims that bear on the question, each with the source's exact words as its quote.\n"
            "3. Rate each claim's importance to the question from 1 to 5.\n\n## Decision rule\nA claim without a "
            f"verbatim quote is not a claim. At most {limit} claims; none is a valid answer.\n\n"
            "Answer only by calling the tool.")


def synthesis_prompt(item: tuple[str, Sequence[ClaimResult]]) -> str:
    question, results = item
    lines = "\n".join(f"{c.index + 1}. [{c.outcome}] {c.claim.claim} (source: {c.claim.source or 'none'})" for c in results)
    return (f"## Research synthesiser\n\n## Question\n\"{question}\"\n\n## Verified claims\n{lines}\n\n## Checklist\n"
            "1. Write an executive summary that answers the question from the CONFIRMED claims only.\n"
            "2. List the findings, each with the numbers of the confirmed claims it rests on.\n"
            "3. Caveats: what the refuted and unverified claims, and the sources' limits, mean for the answer.\n"
            "4. Open questions the evidence leaves.\n\nAnswer only by calling the tool.")


# --- the stages ------------------------------------------------------------------------------------------------------


def _web(search: bool, fetch: bool, uses: int, web: WebTools | None) -> WebTools | None:
    """The web tools a stage offers: the run's (its domains) with this stage's tools and uses; None: no web."""
    return None if web is None else replace(web, search=search, fetch=fetch, max_uses=uses)


def _normal(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


class Research:
    """One research run: its settings, its orchestra, and the report it fills in phase by phase."""

    def __init__(self, orchestra: Orchestra, report: ResearchReport, settings: Settings, web: WebTools | None):
        self.orchestra, self.report, self.settings, self.web = orchestra, report, settings, web
        self._seen: set[str] = set()

    def _leads(self, angle: Angle, found: Sources) -> list[Lead]:
        """A search's sources that flow on to fetching: new urls only, up to MAX_SOURCES in all (first come)."""
        chosen = []
        for source in found.sources[: self.settings.sources_per_angle]:
            key = source.url.strip().rstrip("/")
            if key in self._seen or len(self._seen) >= self.settings.max_sources:
                continue
            self._seen.add(key)
            chosen.append(Lead(angle, source))
            self.report.sources.append(SourceRead(source.url, source.title, angle.angle))
        return chosen

    def stages(self) -> tuple[Stage, Stage]:
        question, limit = self.report.question, self.settings
        web = self.web is not None
        search = Stage("search", lambda item: search_prompt(item, limit.sources_per_angle, web), Sources,
                       web=_web(True, False, SEARCHES_PER_AGENT, self.web),
                       carry=lambda item, found: [(question, lead) for lead in self._leads(item[1], found)],
                       fan_out=lambda leads: leads)
        fetch = Stage("fetch", lambda item: fetch_prompt(item, limit.claims_per_source, web), Claims,
                      web=_web(False, True, FETCHES_PER_SOURCE, self.web), carry=self._claims_of)
        return search, fetch

    def _claims_of(self, item: tuple[str, Lead], extracted: Claims) -> list[tuple[FoundClaim, str]]:
        lead = item[1]
        kept = extracted.claims[: self.settings.claims_per_source]
        for read in self.report.sources:
            if read.url == lead.source.url:
                read.claims = len(kept)
        return [(claim, lead.source.url) for claim in kept]

    def rank(self, found: list[tuple[FoundClaim, str]]) -> list[Claim]:
        """The claim pool merged (the same claim from several sources is one, its support their number) and ordered
        by importance, then support, then the order found; the first MAX_VERIFIED_CLAIMS are verified."""
        merged: dict[str, list[Any]] = {}
        for order, (claim, url) in enumerate(found):
            entry = merged.setdefault(_normal(claim.claim), [claim, set(), order])
            entry[1].add(url)
            entry[0] = claim if claim.importance > entry[0].importance else entry[0]
        ranked = sorted(merged.values(), key=lambda e: (-e[0].importance, -len(e[1]), e[2]))
        pool = [Claim(claim=c.claim, quote=c.quote, source=", ".join(sorted(urls))) for c, urls, _ in ranked]
        self.report.pool = pool
        return pool

    async def verify(self, claims: Sequence[Claim]) -> list[ClaimResult]:
        settings, report = self.settings, self.report
        chosen, report.not_verified = list(claims)[: settings.max_verified_claims], list(claims)[settings.max_verified_claims:]
        votes, refutations = settings.votes_per_claim, settings.refutations_required
        web = _web(True, False, SEARCHES_PER_AGENT, self.web)
        voter = Stage("verify", lambda seat: voter_prompt(seat[0], seat[1], votes, refutations, web=web is not None),
                      VoteVerdict, max_tokens=VOTE_MAX_TOKENS, web=web, tool=VERDICT_TOOL_NAME)
        report.calls["verified"], report.calls["votes"] = len(chosen), votes

        async def one_claim(numbered: tuple[int, Claim]) -> list[Any]:
            index, claim = numbered
            return await self.orchestra.parallel([(claim, seat) for seat in range(1, votes + 1)], voter, key=f"{index}")

        answers = await self.orchestra.parallel(list(enumerate(chosen)), one_claim)  # claims x votes, nested
        results = []
        for index, (claim, seats) in enumerate(zip(chosen, answers)):
            cast = [self._vote(index, seat, answer) for seat, answer in enumerate(seats, 1)]
            results.append(ClaimResult(index, claim, cast, decide(cast, refutations)))
        report.claims = results
        return results

    def _vote(self, index: int, seat: int, answer: Any) -> Vote:
        vote = Vote(index, seat, "model")
        if isinstance(answer, Abstention):
            vote.status, vote.reason = "abstained", answer.reason
        else:
            vote.verdict, vote.status = answer, ("refuted" if answer.refuted else "upheld")
        found = self.orchestra.found.get(("verify", f"{index}.{seat - 1}"), {})
        for name in ("citations", "consulted"):
            if found.get(name) and hasattr(vote, name):
                setattr(vote, name, found[name])
        return vote

    async def synthesise(self, results: Sequence[ClaimResult]) -> None:
        report = self.report
        if not any(c.outcome == "confirmed" for c in results):
            report.stop("no claim survived verification: nothing confirmed to build a report on")
            return
        report.calls["synthesis"] = 1
        answer = await self.orchestra.one(Stage("synthesise", synthesis_prompt, Synthesis, max_tokens=4096),
                                          (report.question, results))
        if isinstance(answer, Abstention):
            report.stop(f"the synthesis failed ({answer.reason}): the verified claims are the result")
        else:
            report.synthesis = answer


async def research(orchestra: Orchestra, question: str, *, clarifications: str = "", web: WebTools | None = None,
                   settings: Settings = Settings()) -> ResearchReport:
    """The whole workflow for `question` (runs.orchestrate.run or a worker loop runs it); its report, however it ends."""
    report = ResearchReport("research", question, clarifications, settings.votes_per_claim,
                            settings.refutations_required, web=web is not None)
    run = Research(orchestra, report, settings, web)
    return await _finished(run, _research(run))


async def _research(run: Research) -> None:
    report, orchestra = run.report, run.orchestra
    report.calls["scope"] = 1
    scope = await orchestra.one(Stage("scope", lambda q: scope_prompt(*q), Scope), (report.question, report.clarifications))
    if isinstance(scope, Abstention):
        return report.stop(orchestra.stopped or f"the scope failed ({scope.reason})")
    report.scope = scope
    if scope.underspecified and scope.clarifying_questions and not report.clarifications:
        return report.stop("the question needs clarifying first: answer the questions and run it again "
                           "(--clarify \"...\")", status="needs_clarification")
    angles = scope.angles[: run.settings.angles]
    report.angles, report.calls["angles"] = [a.angle for a in angles], len(angles)
    if not angles:
        return report.stop("the scope proposed no search angles")
    search, fetch = run.stages()
    trees = await orchestra.pipeline([(report.question, angle) for angle in angles], search, fetch, BARRIER)
    report.calls["sources"] = len(report.sources)
    found = [pair for tree in trees if isinstance(tree, list) for branch in tree if isinstance(branch, list)
             for pair in branch]
    for failed in [t for t in trees if isinstance(t, Abstention)] + [b for t in trees if isinstance(t, list)
                                                                     for b in t if isinstance(b, Abstention)]:
        what = failed.item[1].angle if failed.stage == "search" else failed.item[1].source.url
        report.abstentions.append(f"{failed.stage} {what}: {failed.reason}")
    if orchestra.stopped:
        return report.stop(orchestra.stopped)
    if not report.sources:
        return report.stop("no sources were found for any angle")
    if not found:
        return report.stop("no claims could be extracted from the sources")
    results = await run.verify(run.rank(found))
    if orchestra.stopped:
        return report.stop(orchestra.stopped)
    await run.synthesise(results)
    if orchestra.stopped and not report.stopped:
        report.stop(orchestra.stopped)


async def reverify(orchestra: Orchestra, claims: Sequence[Claim], *, question: str = "", web: WebTools | None = None,
                   settings: Settings = Settings()) -> ResearchReport:
    """The trimmed workflow: the same verifier and synthesis over claims already extracted (no scope, search or
    fetch); the claims are verified in the order given."""
    report = ResearchReport("reverify", question or "what do these claims establish?", "", settings.votes_per_claim,
                            settings.refutations_required, web=web is not None)
    report.pool = list(claims)
    run = Research(orchestra, report, settings, web)

    async def trimmed() -> None:
        if not claims:
            return report.stop("no claims to verify")
        results = await run.verify(claims)
        if orchestra.stopped:
            return report.stop(orchestra.stopped)
        await run.synthesise(results)

    return await _finished(run, trimmed())


async def _finished(run: Research, phases) -> ResearchReport:
    """The phases run to their end or an early exit; a cancel keeps the report so far. The orchestra's counts in."""
    started = time.perf_counter()
    try:
        await phases
    except asyncio.CancelledError:
        run.report.stop("cancelled: the calls already answered are kept")
    report, orchestra = run.report, run.orchestra
    report.seconds = time.perf_counter() - started
    report.agent_calls, report.requests, report.usage = orchestra.agent_calls, orchestra.calls, dict(orchestra.usage)
    report.cost_usd, report.board, report.trace = orchestra.cost_usd, orchestra.board, orchestra.trace
    report.run_id = orchestra.name
    return report


def run_research(client, model_id: str, subject: str | Sequence[Claim], *, run_log=None, max_cost: float | None = None,
                 on_event=None, web: bool = False, allowed_domains: Sequence[str] = (), clarifications: str = "",
                 question: str = "", **settings: int | None) -> ResearchReport:
    """`%%skill research` (a question) or `reverify` (claims), from synchronous code: the calls run in a worker
    thread's event loop (a notebook's kernel runs one already); KeyboardInterrupt cancels and keeps the report so far.
    `settings`: angles, max_sources, max_claims (max_verified_claims), votes, refutations; None keeps the constant."""
    from skills_magic.runs.budget import capped

    names = {"max_claims": "max_verified_claims", "votes": "votes_per_claim", "refutations": "refutations_required"}
    chosen = replace(Settings(), **{names.get(k, k): v for k, v in settings.items() if v is not None})
    tools = WebTools(search=True, fetch=True, allowed_domains=tuple(allowed_domains)) if web else None
    name = f"{'research' if isinstance(subject, str) else 'reverify'}-{uuid.uuid4().hex[:12]}"
    orchestra = Orchestra(client, model_id, budget=capped(max_cost), run_log=run_log, on_event=on_event,
                          name=name)
    if isinstance(subject, str):
        return run_in_loop_thread(lambda: research(orchestra, subject, clarifications=clarifications, web=tools,
                                                   settings=chosen))
    claims = parse_claims(list(subject))  # Claims, or {claim, quote, source} mappings, or plain strings
    return run_in_loop_thread(lambda: reverify(orchestra, claims, question=question, web=tools, settings=chosen))


__all__ = ["run_research", "Research", "Settings", "research", "reverify", "ANGLES", "MAX_SOURCES", "MAX_VERIFIED_CLAIMS",
           "VOTES_PER_CLAIM", "REFUTATIONS_REQUIRED"]
