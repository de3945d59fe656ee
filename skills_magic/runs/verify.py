"""Claim verification by adversarial votes: each claim is checked by several independent voters, concurrently.

A voter is a model call that must answer through one tool whose input is the `VoteVerdict` schema, or a skill script
that reads the claim as JSON and prints the verdict JSON (through the permission policy). A vote that errors, times
out, answers in text, or does not validate is an abstention, never a pass: a claim is confirmed only with enough
valid votes and too few refutations.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError

from skills_magic.errors import InvalidArgument, SkillsMagicError
from skills_magic.models.base import ModelClient, ModelError, capabilities, usage_of
from skills_magic.models.prices import cost_of
from skills_magic.models.web_tools import WebTools, complete, consulted, evidence, merged, offer, server_uses
from skills_magic.runs.budget import Budget, CapReached, dollars

VOTES_PER_CLAIM = 3  # independent checks per claim: one careless voter cannot decide alone
REFUTATIONS_REQUIRED = 2  # refutations that kill a claim, and the valid votes a confirmation needs
MAX_CLAIMS = 25  # claims verified per run; the rest are reported as not verified, never dropped silently
CONCURRENCY = 8  # votes in flight at once: fast, and gentle with rate limits
VOTE_TIMEOUT_SECONDS = 120.0  # a vote slower than this is an abstention; the others do not wait for it
VOTE_MAX_TOKENS = 1024  # a verdict is a few sentences of evidence
VERDICT_TOOL_NAME = "record_verdict"


Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]  # blank is not text


class VoteVerdict(BaseModel):
    """The one verdict schema every voter answers with."""

    refuted: bool = Field(description="true unless the claim is well supported, current, and matched by the source's quality")
    evidence: Text = Field(description="specific evidence for the verdict: what in the quote or source decides it")
    confidence: Literal["high", "medium", "low"]
    counter_source: str | None = Field(None, description="a source that contradicts the claim, if one is known")


class Claim(BaseModel):
    claim: Text
    quote: str = ""
    source: str | None = None


class ClaimsError(SkillsMagicError, ValueError):
    """Claims that cannot be read (not a list of {claim, quote, source})."""


def parse_claims(data: Any) -> list[Claim]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise ClaimsError("the claims must be a YAML list of {claim, quote, source}")
    claims = []
    for number, item in enumerate(data, 1):
        if isinstance(item, str):
            item = {"claim": item}
        try:
            claims.append(Claim.model_validate(item))
        except ValidationError as error:
            problem = error.errors()[0]
            raise ClaimsError(f"claim {number}: {'.'.join(map(str, problem['loc']))} {problem['msg']}") from None
    return claims


def voter_prompt(claim: Claim, voter: int, votes: int = VOTES_PER_CLAIM, refutations: int = REFUTATIONS_REQUIRED, *,
                 web: bool = False) -> str:
    """The verifier prompt: a role with the voter number, the claim and quote, a checklist, the rule as a rule;
    `web`: a voter that can search is told to look for contradicting evidence and cite it."""
    source = f"\n**Source:** {claim.source}" if claim.source else ""
    checks = ["Is the claim actually supported by the quote, or is it an overreach?",
              "Is the source's quality sufficient for the strength of the claim?", "Is the claim outdated?",
              "Is it a marketing claim, a cherry-picked benchmark, or speculation?"]
    if web:
        checks.insert(1, "Search the web for contradicting evidence")
    first = "Search the web first, then answer" if web else "Answer"
    cite = " Cite what you found on the web (its URL) in the evidence." if web else ""
    return (
        f"## Adversarial claim verifier (voter {voter} of {votes})\n\n"
        f"Be skeptical: try to refute this claim. {refutations} refutations out of {votes} votes reject it.\n\n"
        f"## Claim under review\n\"{claim.claim}\"\n**Supporting quote:** \"{claim.quote}\"{source}\n\n"
        "## Checklist\n" + "".join(f"{number}. {check}\n" for number, check in enumerate(checks, 1)) + "\n"
        "## Decision rule\n"
        "refuted=false ONLY if the claim is well supported by the quote, current, and the source's quality matches "
        "the claim's strength. Default to refuted=true when uncertain.\n\n"
        f"{first} only by calling {VERDICT_TOOL_NAME}. The evidence must be specific.{cite}"
    )


VERDICT_TOOL = {
    "name": VERDICT_TOOL_NAME,
    "description": "Record your verdict on the claim.",
    "input_schema": VoteVerdict.model_json_schema(),
}

VoteStatus = Literal["pending", "upheld", "refuted", "abstained"]


@dataclass
class Vote:
    claim: int  # index in the run's claims
    voter: int  # 1-based seat
    kind: str  # "model" or "script:SKILL:PATH"
    status: VoteStatus = "pending"
    verdict: VoteVerdict | None = None
    reason: str = ""  # why an abstention abstained
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0  # agent calls this vote made (model requests or script runs)
    seconds: float = 0.0
    cost_usd: float | None = None  # what its tokens cost at the price table (models.prices); None: no price
    exchanges: list[tuple[dict, dict]] = field(default_factory=list, repr=False, compare=False)  # the run log's
    citations: list[dict] = field(default_factory=list)  # web evidence the voter cited (models.web_tools.evidence)
    consulted: list[dict] = field(default_factory=list)  # its web searches and fetches (models.web_tools.consulted)
    server_uses: dict[str, int] = field(default_factory=dict)  # its web search / fetch requests, as usage reports them

    def to_dict(self) -> dict[str, Any]:
        data = {"claim": self.claim, "voter": self.voter, "kind": self.kind, "status": self.status}
        if self.verdict is not None:
            data.update(self.verdict.model_dump(exclude_none=True))
        if self.reason:
            data["reason"] = self.reason
        data.update({name: getattr(self, name) for name in ("citations", "consulted") if getattr(self, name)})
        return data


Outcome = Literal["confirmed", "refuted", "unverified", "not_verified"]


def decide(votes: Sequence[Vote], refutations_required: int = REFUTATIONS_REQUIRED) -> Outcome:
    """Confirmed only with at least `refutations_required` valid votes and fewer refutations than that."""
    valid = [v for v in votes if v.verdict is not None]
    refutations = sum(1 for v in valid if v.verdict.refuted)
    if refutations >= refutations_required:
        return "refuted"
    if len(valid) >= refutations_required:
        return "confirmed"
    return "unverified"  # too many abstentions: never a pass


@dataclass
class ClaimResult:
    index: int
    claim: Claim
    votes: list[Vote]
    outcome: Outcome = "unverified"


@dataclass
class VerificationResult:
    claims: list[ClaimResult]
    not_verified: list[Claim]  # beyond max_claims
    votes_per_claim: int
    refutations_required: int
    seconds: float = 0.0
    cancelled: bool = False
    stopped: str = ""  # why its budget cap stopped it (runs.budget), else empty
    estimate: Any = None  # budget.Estimate: what it was expected to cost before it started

    @property
    def cost_usd(self) -> float | None:
        """What its model votes cost at the price table; None when none of them has a price."""
        priced = [v.cost_usd for v in self.votes if v.cost_usd is not None]
        return sum(priced) if priced else None

    @property
    def votes(self) -> list[Vote]:
        return [v for c in self.claims for v in c.votes]

    @property
    def stats(self) -> dict[str, int]:
        votes = self.votes
        return {
            "claims": len(self.claims),
            "confirmed": sum(c.outcome == "confirmed" for c in self.claims),
            "refuted": sum(c.outcome == "refuted" for c in self.claims),
            "unverified": sum(c.outcome == "unverified" for c in self.claims),
            "not_verified": len(self.not_verified),
            "agent_calls": sum(v.calls for v in votes),
            "input_tokens": sum(v.input_tokens for v in votes),
            "output_tokens": sum(v.output_tokens for v in votes),
        }


class Voter:
    """A seat's behaviour: `async vote(claim, seat, votes, refutations) -> Vote` fills in a vote."""

    kind = "voter"

    async def vote(self, vote: Vote, claim: Claim, votes: int, refutations: int) -> None:
        raise NotImplementedError


class ModelVoter(Voter):
    kind = "model"

    def __init__(self, client: ModelClient, model_id: str, prompt: Callable[[Claim, int, int, int], str] = voter_prompt,
                 web: WebTools | None = None):
        if web is not None and prompt is voter_prompt:
            prompt = functools.partial(voter_prompt, web=True)
        self.client, self.model_id, self.prompt, self.web = client, model_id, prompt, web

    def request(self, claim: Claim, seat: int, votes: int, refutations: int) -> dict[str, Any]:
        return offer({
            "model": self.model_id,
            "max_tokens": VOTE_MAX_TOKENS,
            "messages": [{"role": "user", "content": self.prompt(claim, seat, votes, refutations)}],
            "tools": [VERDICT_TOOL],
            "tool_choice": {"type": "tool", "name": VERDICT_TOOL_NAME},
        }, self.web)  # with web tools: offered too, and the verdict tool no longer forced

    async def vote(self, vote: Vote, claim: Claim, votes: int, refutations: int, send=None) -> None:
        """`send(request)`: how each request (the first, and each continuation of a paused turn) is sent, else
        the client's `acreate` (verify's sends through the cap's hold)."""
        vote.calls += 1
        request = self.request(claim, vote.voter, votes, refutations)
        vote.exchanges = []  # filled as the parts come: a failure part-way keeps the ones sent
        response, _ = await complete(send or self.client.acreate, request, exchanges=vote.exchanges)
        vote.calls += len(vote.exchanges) - 1
        usage = usage_of(response)
        vote.input_tokens, vote.output_tokens = usage["input_tokens"], usage["output_tokens"]
        vote.cost_usd = cost_of(self.model_id, response.get("usage") or {})
        content = response.get("content", [])
        vote.citations, vote.consulted = evidence(content), consulted(content)
        vote.server_uses = {k: n for k, n in server_uses(response.get("usage")).items() if n}
        calls = [b for b in content if b.get("type") == "tool_use" and b.get("name") == VERDICT_TOOL_NAME]
        if response.get("stop_reason") == "pause_turn":  # continued MAX_CONTINUATIONS times: no answer yet
            raise _Abstain(f"the server still paused the turn after {len(vote.exchanges)} requests: no verdict")
        if not calls:
            raise _Abstain("answered in text instead of the verdict tool")
        try:
            vote.verdict = VoteVerdict.model_validate(calls[0].get("input"))
        except ValidationError as error:
            problem = error.errors()[0]
            raise _Abstain(f"invalid verdict: {'.'.join(map(str, problem['loc'])) or 'input'} {problem['msg']}") from None


class ScriptVoter(Voter):
    """A skill's script as a voter: the claim as JSON on stdin, the verdict JSON on stdout, through the policy."""

    def __init__(self, run: Callable[[str], tuple[str | None, str | None]], label: str):
        self.run = run  # stdin -> (stdout, error)
        self.kind = f"script:{label}"

    async def vote(self, vote: Vote, claim: Claim, votes: int, refutations: int) -> None:
        vote.calls += 1
        payload = json.dumps({**claim.model_dump(), "voter": vote.voter, "votes": votes}, ensure_ascii=False)
        stdout, error = await asyncio.to_thread(self.run, payload)
        if error is not None:
            raise _Abstain(error)
        try:
            vote.verdict = VoteVerdict.model_validate_json(stdout or "")
        except ValidationError as invalid:
            raise _Abstain(f"the script's output is not a verdict: {invalid.errors()[0]['msg']}") from None


class _Abstain(Exception):
    """A seat that gave no usable verdict: its vote counts as an abstention, with this reason."""


async def verify(claims: Sequence[Claim], seats: Sequence[Voter], *, votes_per_claim: int = VOTES_PER_CLAIM,
                 refutations_required: int = REFUTATIONS_REQUIRED, concurrency: int = CONCURRENCY,
                 timeout: float = VOTE_TIMEOUT_SECONDS, max_claims: int = MAX_CLAIMS,
                 on_vote: Callable[[ClaimResult, Vote], None] | None = None, run_log=None,
                 budget: Budget | None = None) -> VerificationResult:
    """Every vote of every claim at once, at most `concurrency` in flight; `on_vote` hears each one as it lands;
    `run_log` (records.runlog.RunLog) gets a row per vote; `budget` (runs.budget) is checked before each model vote:
    one that would cross its cap is not sent, nor is any after it."""
    if votes_per_claim < 1 or refutations_required < 1 or concurrency < 1:
        raise InvalidArgument("votes, refutations and concurrency must each be at least 1")
    if not seats:
        raise InvalidArgument("at least one voter is needed")
    chosen, rest = list(claims)[:max_claims], list(claims)[max_claims:]
    results = [ClaimResult(i, claim, [Vote(i, seat + 1, seats[seat % len(seats)].kind) for seat in range(votes_per_claim)])
               for i, claim in enumerate(chosen)]
    result = VerificationResult(results, rest, votes_per_claim, refutations_required)
    limit = asyncio.Semaphore(concurrency)
    notify = on_vote or (lambda claim, vote: None)  # hears each vote once, when it lands

    async def one(claim: ClaimResult, vote: Vote) -> None:
        voter = seats[(vote.voter - 1) % len(seats)]
        async with limit:
            started, holds = time.perf_counter(), []
            try:
                extra = {}
                if budget is not None and isinstance(voter, ModelVoter):
                    holds.append(budget.reserve(voter.model_id, voter.request(claim.claim, vote.voter, votes_per_claim,
                                                                              refutations_required)))

                    async def held(sent, voter=voter):  # each continuation of a paused turn is held before it is sent
                        if vote.exchanges:
                            holds.append(budget.reserve(voter.model_id, sent))
                        return await voter.client.acreate(sent)

                    extra["send"] = held
                await asyncio.wait_for(voter.vote(vote, claim.claim, votes_per_claim, refutations_required, **extra),
                                       timeout)
            except CapReached as stop:
                vote.reason = f"{'a continuation ' if vote.exchanges else ''}not sent: {stop}"
            except asyncio.TimeoutError:
                vote.reason = f"timed out after {timeout:g} s"
            except _Abstain as abstain:
                vote.reason = str(abstain)
            except ModelError as error:
                vote.reason = str(error)
            except Exception as error:  # a voter's own failure is its abstention, never the run's end
                vote.reason = f"{type(error).__name__}: {error}"
            vote.seconds = time.perf_counter() - started
            if holds:  # its holds released; what its answered parts reported spent (a failure part-way included)
                spent = merged([answer for _sent, answer in vote.exchanges]).get("usage") if vote.exchanges else None
                budget.settle(sum(holds), voter.model_id, spent or None)
        if vote.verdict is not None:
            vote.status = "refuted" if vote.verdict.refuted else "upheld"
        else:
            vote.status, vote.verdict = "abstained", None
        claim.outcome = decide(claim.votes, refutations_required) if all(v.status != "pending" for v in claim.votes) else claim.outcome
        if run_log is not None:
            run_log.record("vote", **vote_fields(voter, claim, vote))
        notify(claim, vote)

    started = time.perf_counter()
    tasks = [asyncio.ensure_future(one(claim, vote)) for claim in results for vote in claim.votes]
    try:
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        result.cancelled = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for claim in results:
            for vote in claim.votes:
                if vote.status == "pending":
                    vote.status, vote.reason = "abstained", "cancelled"
    finally:
        result.seconds = time.perf_counter() - started
        if budget is not None:
            result.stopped, result.estimate = budget.stopped, budget.estimate
        for claim in results:
            claim.outcome = decide(claim.votes, refutations_required)
    return result


def vote_fields(voter: Voter, claim: ClaimResult, vote: Vote) -> dict[str, Any]:
    """The run log's fields of one vote: its tokens and their cost, its verdict, its model exchange."""
    from skills_magic.models.prices import cost_of

    model_id, client = getattr(voter, "model_id", None), getattr(voter, "client", None)
    usage = {"input_tokens": vote.input_tokens, "output_tokens": vote.output_tokens,
             **({"server_tool_use": vote.server_uses} if vote.server_uses else {})}
    return {"model": model_id, "harness": None if client is None else capabilities(client).harness,
            "skill": vote.kind.split(":")[1] if vote.kind.startswith("script:") else None, "usage": usage,
            "seconds": vote.seconds, "cost_usd": cost_of(model_id, usage) if model_id else None,
            "outcome": vote.status, "error": vote.reason or None, "data": {**vote.to_dict(), "claim": claim.claim.claim, "claim_index": claim.index},
            "requests": [sent for sent, _ in vote.exchanges] or None,
            "responses": [answer for _, answer in vote.exchanges] or None}


def outcome_counts(result: VerificationResult) -> str:
    stats = result.stats
    text = (f"{stats['confirmed']} confirmed, {stats['refuted']} refuted, {stats['unverified']} unverified"
            f" of {stats['claims']} claims")
    if stats["not_verified"]:
        text += f"; {stats['not_verified']} more not verified (over the limit of {len(result.claims)})"
    if result.cancelled:
        text += "; cancelled (votes already in are kept)"
    if result.stopped:
        text += f"; {result.stopped} (the votes sent are kept)"
    cost = f", cost {dollars(result.cost_usd)}" if result.cost_usd is not None else ""
    return text + f"; {stats['agent_calls']} agent calls, {stats['input_tokens']:,} input / {stats['output_tokens']:,} output tokens{cost}"
