"""An eval's budget: its pre-flight estimate (every prompt run's first request, times the model calls a run may make,
at the model's price), approval where it is large and uncapped, and the cap its runs are checked against."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from skills_magic.models.base import capabilities
from skills_magic.runs import budget
from skills_magic.runs.agent import Agent
from skills_magic.runs.evals import BEHAVIOUR_TURNS, FIRST_TURNS, EvalItem, prompt_text


def first_requests(skills: Sequence[Any], client, model_id: str, items: Sequence[EvalItem], strategy: str,
                   show_path: Callable[[str], str]) -> list[dict[str, Any]]:
    """The first request of each prompt's run, as the agent loop would send it."""
    agent = Agent(skills, client, model_id, show_path=show_path, max_turns=FIRST_TURNS)
    return [agent.request([{"role": "user", "content": [{"type": "text", "text": prompt_text(item, strategy)}]}])
            for item in items]


def eval_budget(variants: Sequence[tuple[str, Sequence[Any]]], client, model_id: str, items: Sequence[EvalItem], *,
                runs: int, batch: bool, behaviour: bool, max_cost: float | None, show_path: Callable[[str], str],
                on_estimate: Callable[[budget.Estimate], None] | None = None, asker=None) -> budget.Budget:
    """The eval's Budget (its cap: --max-cost, else SKILLS_MAGIC_MAX_COST), after its estimate was handed to
    `on_estimate`; with no cap, an estimate above budget.ASK_ABOVE_USD must be approved by `asker` (unattended: it
    stops); a batch that would cross its cap is refused whole (a batch cannot stop part-way)."""
    spending = budget.Budget(budget.session_cap(max_cost))
    calls = 1 if batch else FIRST_TURNS  # the model calls one prompt run may make
    requests: list[tuple[dict[str, Any], int]] = []
    for strategy, skills in variants:
        first = first_requests(skills, client, model_id, items, strategy, show_path)
        requests += [(request, calls) for request in first] * runs
        if behaviour:  # each behaviour item runs with its skills and without them, up to BEHAVIOUR_TURNS calls each
            requests += [(r, BEHAVIOUR_TURNS) for r, item in zip(first, items, strict=True) if item.expected_behavior] * 2
    estimate = spending.preflight("eval", model_id, requests, batch=batch, billed=capabilities(client).billed)
    if on_estimate is not None:
        on_estimate(estimate)
    if estimate.billed:  # a scripted model or a cassette spends nothing: nobody needs asking
        budget.approve(estimate, asker)
    if batch and spending.cap is not None and (estimate.cost_usd or 0.0) > spending.cap:
        raise budget.CapReached(f"the batch could cost up to {budget.dollars(estimate.cost_usd)}, over the cap of "
                                f"{budget.dollars(spending.cap)}: nothing was sent (a batch cannot stop part-way)")
    return spending
