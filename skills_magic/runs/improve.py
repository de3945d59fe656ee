"""`%skills improve NAME PROMPTS`: description variants of one skill, chosen on a training split of a prompt set and
judged on the held-out rest, next to the current description, with intervals and the total cost.

Honest by construction: the split is fixed before any model call (stratified, by a hash of each prompt's id, so
the same prompt set splits the same way in every session), the best variant is chosen on the training prompts
only, and only the held-out prompts decide whether it is better. Nothing is written: the report shows the
`%%skill write` cell that would write the chosen description.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from skills_magic.errors import InvalidArgument, SkillsMagicError
from skills_magic.models.base import ModelClient, ModelError, usage_of
from skills_magic.models.prices import cost_of
from skills_magic.runs import evals
from skills_magic.runs.budget import capped
from skills_magic.runs.eval_stats import difference, wilson
from skills_magic.skills.skill import Skill

DEFAULT_VARIANTS = 3  # descriptions asked for: enough to choose among, few enough to evaluate each on every prompt
MAX_VARIANTS = 10  # more is a search the training split is too small to referee
HELD_OUT_EVERY = 3  # one prompt in three (of each kind) is held out: the training split keeps most of the signal
MAX_DESCRIPTION_CHARS = 1024  # the specification's limit for `description`
PROPOSE_TOOL = "propose_descriptions"
PROPOSE_MAX_TOKENS = 2048
PROPOSE_INSTRUCTIONS = (
    "You improve the description of an Agent Skill: the one text a model reads to decide whether to activate the "
    "skill. Write {n} alternative descriptions (each at most 1024 characters, third person, saying what the skill "
    "does and when to use it) that would make a model activate it for the prompts marked `should trigger` and not "
    "for those marked `should not trigger`. Answer only by calling propose_descriptions."
)


class Proposal(BaseModel):
    descriptions: list[str] = Field(min_length=1, max_length=MAX_VARIANTS)


PROPOSE_TOOL_DEFINITION = {"name": PROPOSE_TOOL, "description": "Propose alternative descriptions for the skill.",
                           "input_schema": Proposal.model_json_schema()}


class ImproveError(SkillsMagicError):
    """`%skills improve` cannot go on: the prompt set has no prompt for the skill, or the model proposed nothing."""


@dataclass
class Score:
    """One description's activations on a split: hits on the prompts that should trigger it, false activations on
    those that should not, errored runs apart (they count in neither)."""

    hits: int = 0
    positives: int = 0
    false: int = 0
    negatives: int = 0
    errored: int = 0

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.positives if self.positives else None

    @property
    def false_rate(self) -> float | None:
        return self.false / self.negatives if self.negatives else None

    @property
    def value(self) -> float:
        """What the choice maximises: the hit rate minus the false-activation rate."""
        return (self.hit_rate or 0.0) - (self.false_rate or 0.0)

    def intervals(self) -> dict[str, list[float] | None]:
        """The 95% Wilson intervals of both rates (None where the split has no prompt of that kind)."""
        hit, false = wilson(self.hits, self.positives), wilson(self.false, self.negatives)
        return {"hit_rate": hit.as_list() if hit else None, "false_rate": false.as_list() if false else None}


@dataclass
class Variant:
    description: str
    train: Score | None  # None: the cap stopped the improvement before this description was tried
    held_out: Score | None = None


@dataclass
class ImproveReport:
    skill: str
    current: Variant
    variants: list[Variant]
    best: Variant
    train_ids: list[str]
    held_out_ids: list[str]
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("input_tokens", "output_tokens",
                                                                          "cache_creation_input_tokens",
                                                                          "cache_read_input_tokens"), 0))
    cost_usd: float | None = None
    write_cell: str = ""  # the `%%skill write` cell that would write the chosen description (never run)
    note: str = ""

    @property
    def improved(self) -> bool:
        """The held-out split, not the training one, says whether the chosen variant does better."""
        return self.best is not self.current and self.best.held_out is not None and self.current.held_out is not None \
            and self.best.held_out.value > self.current.held_out.value

    def comparison(self) -> dict[str, Any] | None:
        """The held-out hit rates, the chosen description's against the current one's: the difference, its 95%
        interval and the exact test's p-value (None when nothing was chosen)."""
        now, new = self.current.held_out, self.best.held_out
        if self.best is self.current or now is None or new is None:
            found = None
        else:
            found = difference(now.hits, now.positives, new.hits, new.positives)
        return None if found is None else found.as_dict()


def split(items: Sequence[evals.EvalItem], skill: str) -> tuple[list[evals.EvalItem], list[evals.EvalItem]]:
    """(training, held-out): stratified by kind (should trigger `skill` / should not), every HELD_OUT_EVERY-th of
    each kind by a hash of its id held out, at least one of each kind in each split when the kind has two."""
    train, held = [], []
    positives = [i for i in items if skill in i.expected]
    negatives = [i for i in items if skill not in i.expected]
    for group in (positives, negatives):
        ordered = sorted(group, key=lambda i: hashlib.sha256(i.id.encode("utf-8")).hexdigest())
        chosen = {i.id for n, i in enumerate(ordered) if n % HELD_OUT_EVERY == HELD_OUT_EVERY - 1}
        if not chosen and len(ordered) >= 2:
            chosen = {ordered[-1].id}
        train += [i for i in group if i.id not in chosen]
        held += [i for i in group if i.id in chosen]
    return train, held


def score(report: evals.EvalReport, skill: str) -> Score:
    found = Score()
    for item, record in report._runs_of():
        if record.error:
            found.errored += 1
            continue
        hit = skill in record.activated
        if skill in item.expected:
            found.positives += 1
            found.hits += hit
        else:
            found.negatives += 1
            found.false += hit
    return found


def proposal_request(skill: Skill, train: Sequence[evals.EvalItem], model_id: str, n: int) -> dict[str, Any]:
    lines = [f"Skill: {skill.name}", f"Current description: {skill.description}", "", "Prompts:"]
    for item in train:
        kind = "should trigger" if skill.name in item.expected else "should not trigger"
        lines.append(f"- {kind}: {item.prompt}")
    return {"model": model_id, "max_tokens": PROPOSE_MAX_TOKENS, "system": PROPOSE_INSTRUCTIONS.format(n=n),
            "tools": [PROPOSE_TOOL_DEFINITION], "tool_choice": {"type": "tool", "name": PROPOSE_TOOL},
            "messages": [{"role": "user", "content": "\n".join(lines)}]}


def proposed(response: dict[str, Any], current: str, n: int) -> list[str]:
    """The distinct new descriptions a response proposes (cut to the specification's length), at most `n`."""
    for block in response.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") == PROPOSE_TOOL:
            try:
                found = Proposal.model_validate(block.get("input")).descriptions
            except ValidationError as error:
                raise ImproveError(f"the model's proposal does not fit the schema: {error.errors()[0]['msg']}") from None
            seen, kept = {current.strip()}, []
            for text in (" ".join(d.split())[:MAX_DESCRIPTION_CHARS] for d in found):
                if text and text not in seen:
                    seen.add(text)
                    kept.append(text)
            return kept[:n]
    raise ImproveError("the model proposed no descriptions (it did not call propose_descriptions)")


def write_cell(skill: Skill, description: str) -> str:
    """The `%%skill write NAME` cell that would write the skill with `description` (its other fields and its body
    as they are)."""
    with open(skill.path, encoding="utf-8") as handle:
        text = handle.read()
    parts = text.split("---", 2)
    data = yaml.safe_load(parts[1]) if len(parts) == 3 else {}
    data = dict(data or {})
    data["description"] = description
    front = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10_000)
    return f"%%skill write {skill.name}\n---\n{front}---\n{skill.body}"


def improve(skills: Sequence[Skill], client: ModelClient, model_id: str, name: str,
            items: Sequence[evals.EvalItem], *, variants: int = DEFAULT_VARIANTS, runs: int = 1,
            show_path: Callable[[str], str] = str, on_progress=None, max_cost: float | None = None) -> ImproveReport:
    """Ask for description variants of skill `name`, choose on the training split, judge on the held-out one; under
    `max_cost` (else SKILLS_MAGIC_MAX_COST) it stops before the call that would cross the cap and keeps what it has."""
    budget = capped(max_cost)
    if not 1 <= variants <= MAX_VARIANTS:
        raise InvalidArgument(f"--variants is between 1 and {MAX_VARIANTS}, not {variants}")
    skill = next((s for s in skills if s.name == name), None)
    if skill is None:
        raise InvalidArgument(f"no skill named {name!r} in the catalog")
    evals.check_expected(items, skills)
    train, held = split(items, name)
    if not any(name in i.expected for i in train) or not any(name in i.expected for i in held):
        raise ImproveError(f"the prompt set needs at least two prompts that should trigger {name!r} (one to train on, "
                           "one held out)")
    report_usage = dict.fromkeys(("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"), 0)
    costs: list[float | None] = []

    def spent(usage: dict[str, int]) -> None:
        for key in report_usage:
            report_usage[key] += usage.get(key, 0)
        costs.append(cost_of(model_id, usage))

    request = proposal_request(skill, train, model_id, variants)
    held_back = budget.reserve(model_id, request) if budget is not None else 0.0  # CapReached: nothing was asked
    try:
        response = client.create(request)
    except ModelError as error:
        raise ImproveError(f"asking for variants failed: {error}") from None
    finally:
        if budget is not None:
            budget.settle(held_back, model_id, None)
    if budget is not None:
        budget.settle(0.0, model_id, usage_of(response))
    spent(usage_of(response))
    texts = proposed(response, skill.description, variants)
    stopped: list[str] = []

    def evaluate(description: str, on: Sequence[evals.EvalItem]) -> Score | None:
        if stopped:
            return None  # the cap stopped an earlier evaluation: nothing more is sent
        catalog = [dataclasses.replace(s, description=description) if s.name == name else s for s in skills]
        report = evals.run_eval(catalog, client, model_id, on, runs=runs, show_path=show_path, on_progress=on_progress,
                                agent_options={"cap": budget} if budget is not None else None)
        for record in report.records:
            spent({"input_tokens": record.input_tokens, "output_tokens": record.output_tokens})
        if report.stopped:
            stopped.append(report.stopped)
        return score(report, name)

    current = Variant(skill.description, evaluate(skill.description, train))
    candidates = [Variant(text, evaluate(text, train)) for text in texts]
    scored = [v for v in [current, *candidates] if v.train is not None]
    best = max(scored, key=lambda v: v.train.value) if scored else current  # ties keep the current description
    current.held_out = evaluate(current.description, held)
    best.held_out = current.held_out if best is current else evaluate(best.description, held)
    known = [c for c in costs if c is not None]
    notes = ([] if texts else ["the model proposed nothing new"]) + [f"{note}; what ran is shown" for note in stopped[:1]]
    return ImproveReport(name, current, candidates, best, [i.id for i in train], [i.id for i in held],
                         usage=report_usage, cost_usd=sum(known) if len(known) == len(costs) else None,
                         write_cell=write_cell(skill, best.description) if best is not current and not stopped else "",
                         note="; ".join(notes))
