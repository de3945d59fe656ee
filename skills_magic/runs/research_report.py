"""What a deep-research run (runs.research) returns, however it ended: the phases' results, the agent calls it made
beside the seed's formula for them, tokens, cost, the board and the trace. A value: views render it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from skills_magic.runs.orchestrate import Board

Status = Literal["complete", "needs_clarification", "stopped"]


@dataclass
class SourceRead:
    """A source chosen for fetching: where it came from and how many claims its fetch gave (None: not fetched)."""

    url: str
    title: str
    angle: str
    claims: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "title": self.title, "angle": self.angle, "claims": self.claims}


@dataclass
class ResearchReport:
    kind: Literal["research", "reverify"]
    question: str
    clarifications: str
    votes_per_claim: int
    refutations_required: int
    web: bool = False  # the agents could search and fetch (server tools, or the offline stand-in)
    status: Status = "complete"
    stopped: str = ""  # why it ended early; "" when it ran to its report
    scope: Any = None  # research.Scope
    angles: list[str] = field(default_factory=list)
    sources: list[SourceRead] = field(default_factory=list)
    pool: list[Any] = field(default_factory=list)  # verify.Claim: every claim extracted, merged and ranked
    claims: list[Any] = field(default_factory=list)  # verify.ClaimResult: the verified ones
    not_verified: list[Any] = field(default_factory=list)  # verify.Claim: ranked below MAX_VERIFIED_CLAIMS
    synthesis: Any = None  # research.Synthesis
    abstentions: list[str] = field(default_factory=list)  # the searches and fetches that gave no answer, and why
    calls: dict[str, int] = field(default_factory=dict)  # the formula's terms: scope, angles, sources, verified, votes, synthesis
    agent_calls: int = 0  # measured: stage invocations that sent at least one request
    requests: int = 0  # model requests (retries and pause_turn continuations included)
    usage: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    seconds: float = 0.0
    run_id: str = ""  # its calls' run log rows say it ("orchestration" in their data); volatile, so metadata only
    board: Board = field(default_factory=Board)
    trace: list[dict[str, Any]] = field(default_factory=list)

    def stop(self, reason: str, status: Status = "stopped") -> None:
        """An early exit: the first reason is the one kept."""
        if not self.stopped:
            self.stopped, self.status = reason, status

    @property
    def expected_agent_calls(self) -> int:
        """The seed's formula, 1 + angles + sources + claims x votes + 1, over the phases that ran."""
        c = self.calls
        return (c.get("scope", 0) + c.get("angles", 0) + c.get("sources", 0) + c.get("verified", 0) * c.get("votes", 0)
                + c.get("synthesis", 0))

    @property
    def formula(self) -> str:
        c = self.calls
        terms = [str(c.get("scope", 0)), str(c.get("angles", 0)), str(c.get("sources", 0))] if self.kind == "research" else []
        terms += [f"{c.get('verified', 0)} × {c.get('votes', self.votes_per_claim)}", str(c.get("synthesis", 0))]
        return f"{' + '.join(terms)} = {self.expected_agent_calls}"

    def outcome(self, name: str) -> list[Any]:
        return [c for c in self.claims if c.outcome == name]

    @property
    def stats(self) -> dict[str, Any]:
        return {
            "angles": len(self.angles), "sources": len(self.sources), "claims_extracted": len(self.pool),
            "claims_verified": len(self.claims), "confirmed": len(self.outcome("confirmed")),
            "refuted": len(self.outcome("refuted")), "unverified": len(self.outcome("unverified")),
            "not_verified": len(self.not_verified), "agent_calls": self.agent_calls,
            "expected_agent_calls": self.expected_agent_calls, "requests": self.requests,
            "input_tokens": self.usage.get("input_tokens", 0), "output_tokens": self.usage.get("output_tokens", 0),
            "web_searches": self.usage.get("web_search_requests", 0), "web_fetches": self.usage.get("web_fetch_requests", 0),
            "cost_usd": round(self.cost_usd, 6),
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything but the volatile facts (seconds; the trace's timings): the same on every re-run."""
        synthesis = self.synthesis.model_dump() if self.synthesis is not None else None
        return {
            "kind": self.kind, "question": self.question, "status": self.status, "stopped": self.stopped,
            "clarifying_questions": list(self.scope.clarifying_questions) if self.scope is not None else [],
            "angles": self.angles, "sources": [s.to_dict() for s in self.sources],
            "claims": [{"claim": c.claim.claim, "quote": c.claim.quote, "source": c.claim.source, "outcome": c.outcome,
                        "votes": [v.to_dict() for v in c.votes]} for c in self.claims],
            "not_verified": [c.claim for c in self.not_verified], "synthesis": synthesis,
            "abstentions": self.abstentions, "board": self.board.stages, "formula": self.formula, "stats": self.stats,
        }
