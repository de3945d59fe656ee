"""A verification run's seats (model voters and script voters), its budget, and what it leaves
in the ledger."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from skills_magic.errors import InvalidArgument
from skills_magic.records.ledger import Ledger
from skills_magic.models.base import capabilities
from skills_magic.runs import budget
from skills_magic.runs import verify as v
from skills_magic.runs.orchestrate import run_in_loop_thread  # noqa: F401  (re-exported: its home before research)
from skills_magic.skills.skill import Skill


def seats(voters: Sequence[str], votes: int, model_seat: Callable[[], v.Voter], skill: Callable[[str], Skill],
          gate) -> list[v.Voter]:
    """The voters for `voters` seats: "model" or "script:SKILL:PATH" (a script runs only under an allow rule: a vote
    cannot stop to ask a person); seats beyond those given are model seats, up to `votes`."""
    from skills_magic.safety.requests import unattended

    chosen: list[v.Voter] = []
    for spec in list(voters) or ["model"]:
        if spec == "model":
            chosen.append(model_seat())
        elif spec.startswith("script:") and spec.count(":") >= 2:
            _, skill_name, path = spec.split(":", 2)
            found = skill(skill_name)

            def run(stdin: str, skill=found, path=path):
                outcome = gate.run_script(skill, path, [], stdin, unattended)
                if outcome.run is None:
                    return None, outcome.error
                if outcome.run.exit_code != 0:
                    return None, f"{path} exit code {outcome.run.exit_code}: {outcome.run.stderr.strip()[:200]}"
                return outcome.run.stdout, None

            chosen.append(v.ScriptVoter(run, f"{found.name}:{path}"))
        else:
            raise InvalidArgument(f"a voter is `model` or `script:SKILL:PATH`, not {spec!r}")
    while voters and len(chosen) < votes:  # seats not given are model seats
        chosen.append(model_seat())
    return chosen


def one_model_voter(make_client: Callable[[], Any], model_id_for: Callable[[Any], str],
                    web=None) -> Callable[[], v.ModelVoter]:
    """A seat maker for model seats: one model voter, made when a seat first needs it, shared by every model seat;
    `web` (models.web_tools.WebTools): the server web tools it may use."""
    made: list[v.ModelVoter] = []

    def seat() -> v.ModelVoter:
        if not made:
            client = make_client()
            made.append(v.ModelVoter(client, model_id_for(client), web=web))
        return made[0]

    return seat


def budgeted(claims: Sequence[v.Claim], chosen: Sequence[v.Voter], options: dict[str, Any], max_cost: float | None,
             on_estimate: Callable[[Any], None] | None = None) -> budget.Budget:
    """The verification's Budget (its cap: --max-cost, else SKILLS_MAGIC_MAX_COST), after its pre-flight estimate
    (every model vote's request at VOTE_MAX_TOKENS) was handed to `on_estimate`: all before the first vote."""
    spending = budget.Budget(budget.session_cap(max_cost))
    votes, refutations = options["votes_per_claim"], options["refutations_required"]
    requests, model_id, billed = [], "", False
    for claim in list(claims)[: options["max_claims"]]:
        for seat in range(1, votes + 1):
            voter = chosen[(seat - 1) % len(chosen)] if chosen else None
            if isinstance(voter, v.ModelVoter):
                requests.append((voter.request(claim, seat, votes, refutations), 1))
                model_id, billed = voter.model_id, capabilities(voter.client).billed
    estimate = spending.preflight("verification", model_id, requests, billed=billed)
    if on_estimate is not None:
        on_estimate(estimate)
    return spending


def record_outcomes(ledger: Ledger, plan: str, result, votes: int) -> None:
    """One observation per claim: its outcome and the votes behind it."""
    for claim in result.claims:
        counts = {s: sum(vote.status == s for vote in claim.votes) for s in ("upheld", "refuted", "abstained")}
        ledger.observation(plan, f"claim verified by {votes} votes: {claim.outcome} (upheld {counts['upheld']}, "
                                 f"refuted {counts['refuted']}, abstained {counts['abstained']}): {claim.claim.claim}")
