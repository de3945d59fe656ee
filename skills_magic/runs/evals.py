"""Activation evals: does the model activate the right skill for a prompt, and only then?

A prompt set mixes direct prompts (they name the skill's keywords), paraphrases (the same need in other words: the
case public measurements found to fail) and negatives (nothing should trigger). Each prompt runs N times through the
same agent loop as `%%skill run`, limited to its first turns; a skill counts as activated when the model called
`activate_skill` for it or read its SKILL.md. The report gives activation per category, false positives on
negatives, wrong-skill activations, per-skill precision and recall, and a per-prompt table. Behaviour evals (the
format's `expected_behavior` items) are scored by a judge model through a tool schema, with and without the skill.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from skills_magic.runs import eval_stats
from skills_magic.runs.agent import Agent
from skills_magic.runs import logged
from skills_magic.runs.claude_code import loop_for
from skills_magic.errors import InvalidArgument, SkillsMagicError
from skills_magic.models.base import ModelClient, ModelError, usage_of
from skills_magic.skills.skill import Skill

CATEGORIES = ("direct", "paraphrase", "negative")
COMPARED = ("direct", "paraphrase", "negative", "overall")  # what `--compare` tests: activation, false positives, all
DEFAULT_RUNS = 3  # runs per prompt: activation is not deterministic, one run proves little
FIRST_TURNS = 2  # activation counts within the first model calls: a skill found late is not the routing we measure
BEHAVIOUR_TURNS = 8  # a behaviour eval lets the run do the task
FORCED_PREAMBLE = (
    "Before you answer, go through <available_skills>: for each skill, decide yes or no whether it applies to this "
    "request. Then activate every skill you said yes to with activate_skill, before doing anything else.\n\n"
)  # the "evaluate, then activate" instruction public measurements found to raise activation
JUDGE_TOOL_NAME = "record_judgement"
CLOSE_MATCHES = 3  # names suggested for each unknown skill a prompt set expects


class PromptSetError(SkillsMagicError, ValueError):
    """A prompt set that cannot be read."""


class UnknownExpectedSkills(PromptSetError, LookupError):
    """A prompt set expects skills the catalog does not have: its recall would be 0% for a typo, not for the model."""

    def __init__(self, unknown: dict[str, list[str]], known: Sequence[str]):
        self.unknown = unknown  # skill name -> the ids of the items that expect it
        named = []
        for name, ids in unknown.items():
            close = difflib.get_close_matches(name, list(known), n=CLOSE_MATCHES)
            named.append(f"{name!r} (item {', '.join(ids)}" + (f"; did you mean {', '.join(close)}?)" if close else ")"))
        super().__init__(f"the prompt set expects skills that are not in the catalog: {'; '.join(named)}; "
                         "`%skills list` shows the names")


def check_expected(items: Sequence[EvalItem], skills: Sequence[Skill]) -> None:
    """Refuse (before any model call) a prompt set whose `expected` names a skill that `skills` do not hold."""
    known = [s.name for s in skills]
    unknown: dict[str, list[str]] = {}
    for item in items:
        for name in item.expected:
            if name not in known:
                unknown.setdefault(name, []).append(item.id)
    if unknown:
        raise UnknownExpectedSkills(unknown, known)


@dataclass(frozen=True)
class EvalItem:
    id: str
    prompt: str
    expected: tuple[str, ...] = ()
    expect_none: bool = False
    category: str = "direct"
    files: tuple[str, ...] = ()
    expected_behavior: tuple[str, ...] = ()


def _items(data: Any, origin: str) -> list[EvalItem]:
    default_skill = None
    if isinstance(data, dict):
        default_skill = data.get("skill")
        data = data.get("prompts") or data.get("evals") or data.get("items")
    if not isinstance(data, list):
        raise PromptSetError(f"{origin}: expected a list of prompts (or a mapping with `prompts`)")
    items = []
    for number, raw in enumerate(data, 1):
        if not isinstance(raw, dict):
            raise PromptSetError(f"{origin}: item {number} is not a mapping")
        ident = str(raw.get("id") or f"{number}")
        if "prompt" in raw:  # our format
            expected = _names(raw.get("expected"))
            expect_none = bool(raw.get("expect_none", raw.get("expectNone", not expected)))
            category = str(raw.get("category") or ("negative" if expect_none else "direct"))
            prompt = raw["prompt"]
        elif "should_trigger" in raw:  # skill-creator's trigger evals
            skill = raw.get("skill") or default_skill
            if raw["should_trigger"] and not skill:
                raise PromptSetError(f"{origin}: item {number} should trigger, but no `skill` names which")
            expected = (skill,) if raw["should_trigger"] else ()
            expect_none = not raw["should_trigger"]
            category = str(raw.get("category") or ("direct" if raw["should_trigger"] else "negative"))
            prompt = raw.get("query")
        elif "query" in raw:  # the specification's evaluation structure
            expected = _names(raw.get("skills"))
            expect_none = not expected
            category = str(raw.get("category") or ("negative" if expect_none else "direct"))
            prompt = raw["query"]
        else:
            raise PromptSetError(f"{origin}: item {number} has neither `prompt` nor `query`")
        if not isinstance(prompt, str) or not prompt.strip():
            raise PromptSetError(f"{origin}: item {number} has an empty prompt")
        if category not in CATEGORIES:
            raise PromptSetError(f"{origin}: item {number}: category must be one of {', '.join(CATEGORIES)}")
        items.append(EvalItem(ident, prompt, tuple(map(str, expected)), expect_none, category,
                              tuple(map(str, raw.get("files") or ())), tuple(map(str, raw.get("expected_behavior") or ()))))
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise PromptSetError(f"{origin}: item id {item.id!r} is used twice; ids must be unique")
        seen.add(item.id)
    return items


def _names(value: Any) -> tuple[str, ...]:
    """Skill names: a list, or one name written on its own (never split into letters)."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(map(str, value))


def load_prompt_set(path: str | os.PathLike) -> list[EvalItem]:
    from skills_magic.datafiles import read_yaml_or_json

    return _items(read_yaml_or_json(path), os.path.basename(os.fspath(path)))


@dataclass
class RunRecord:
    item: str
    run: int
    activated: list[str]
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    cost_usd: float | None = None  # what its tokens cost at the price table (models.prices); None: no price


def activated_skills(result) -> list[str]:
    """Skills the run activated: an activate_skill call (Claude Code: a `Skill` call) that succeeded, or a read of a
    skill's SKILL.md."""
    found: list[str] = []
    for call in result.tool_calls:
        name = None
        if call.name == "activate_skill" and not call.is_error and isinstance(call.input, dict):
            name = call.input.get("name")
        elif call.name == "Skill" and not call.is_error and isinstance(call.input, dict):  # Claude Code's tool
            name = call.input.get("skill")
        elif call.name == "Read" and not call.is_error and isinstance(call.input, dict):  # Claude Code reading it
            parts = str(call.input.get("file_path", "")).replace(os.sep, "/").split("/")
            if len(parts) >= 3 and parts[-1].lower() == "skill.md" and parts[-3] == "skills":
                name = parts[-2]
        elif call.name == "read_skill_resource" and not call.is_error and isinstance(call.input, dict):
            if str(call.input.get("path", "")).lower() in ("skill.md", "./skill.md"):
                name = call.input.get("skill")
        if isinstance(name, str) and name not in found:
            found.append(name)
    return found


@dataclass
class EvalReport:
    label: str
    items: list[EvalItem]
    records: list[RunRecord] = field(default_factory=list)
    runs: int = DEFAULT_RUNS
    behaviour: dict[str, dict[str, Any]] = field(default_factory=dict)  # skill -> pass counts with and without it
    batch_ids: list[str] = field(default_factory=list)  # with --batch: what `--resume` takes after a restart
    note: str = ""  # said after the headline: where the report was saved, or that it is a saved baseline
    stopped: str = ""  # why its budget cap stopped it before its last run (runs.budget), else empty

    @property
    def cost_usd(self) -> float | None:
        """What its runs cost at the price table; None when none of them has a price."""
        priced = [r.cost_usd for r in self.records if r.cost_usd is not None]
        return sum(priced) if priced else None

    def _runs_of(self, category: str | None = None, errored: bool = False) -> list[tuple[EvalItem, RunRecord]]:
        """The counted runs, or the errored ones: an errored run is no evidence either way, so it is counted apart."""
        by_id = {i.id: i for i in self.items}
        return [(by_id[r.item], r) for r in self.records
                if bool(r.error) == errored and (category is None or by_id[r.item].category == category)]

    def errored(self, category: str | None = None) -> int:
        return len(self._runs_of(category, errored=True))

    def counts(self) -> dict[str, tuple[int, int]]:
        """(hits, counted runs) per measure: activation of direct and paraphrase prompts, false positives on
        negatives, wrong skills on positives, and overall the runs that did the right thing."""
        def tally(pairs, hit) -> tuple[int, int]:
            return sum(1 for i, r in pairs if hit(i, r)), len(pairs)

        runs = self._runs_of()
        table = {c: tally([(i, r) for i, r in self._runs_of(c) if i.expected], _activated_expected) for c in ("direct", "paraphrase")}
        table["negative"] = tally([(i, r) for i, r in runs if i.expect_none], lambda i, r: bool(r.activated))
        table["wrong_skill"] = tally([(i, r) for i, r in runs if i.expected], lambda i, r: bool(set(r.activated) - set(i.expected)))
        table["overall"] = tally([(i, r) for i, r in runs if i.expected or i.expect_none], _right)
        return table

    def rate(self, measure: str) -> float | None:
        hits, runs = self.counts()[measure]
        return hits / runs if runs else None

    def interval(self, measure: str) -> eval_stats.Interval | None:
        """The rate's Wilson 95% interval (None with no counted runs)."""
        return eval_stats.wilson(*self.counts()[measure])

    def activation_rate(self, category: str) -> float | None:
        return self.rate(category) if category in ("direct", "paraphrase") else None

    def false_positive_rate(self) -> float | None:
        return self.rate("negative")

    def wrong_skill_rate(self) -> float | None:
        return self.rate("wrong_skill")

    def per_skill(self) -> dict[str, dict[str, Any]]:
        skills = sorted({s for i in self.items for s in i.expected} | {s for r in self.records for s in r.activated})
        table = {}
        for skill in skills:
            tp = fp = fn = 0
            for item, record in self._runs_of():
                hit, wanted = skill in record.activated, skill in item.expected
                tp += hit and wanted
                fp += hit and not wanted
                fn += wanted and not hit
            table[skill] = {"tp": tp, "fp": fp, "fn": fn,
                            "precision": tp / (tp + fp) if tp + fp else None,
                            "recall": tp / (tp + fn) if tp + fn else None,
                            "precision_interval": eval_stats.wilson_list(tp, tp + fp),
                            "recall_interval": eval_stats.wilson_list(tp, tp + fn)}
        return table

    def per_prompt(self) -> list[dict[str, Any]]:
        """Per prompt: its counted runs, what they activated, its errored runs apart, and its rate (activation of
        a positive prompt, false positives of a negative one)."""
        rows = []
        for item in self.items:
            records = [r for r in self.records if r.item == item.id and not r.error]
            counts: dict[str, int] = {}
            for r in records:
                for s in r.activated:
                    counts[s] = counts.get(s, 0) + 1
            hits = sum(1 for r in records if (_activated_expected(item, r) if item.expected else bool(r.activated)))
            rows.append({"id": item.id, "category": item.category, "expected": list(item.expected),
                         "expect_none": item.expect_none, "runs": len(records), "activated": counts,
                         "errors": sum(1 for r in self.records if r.item == item.id and r.error),
                         "rate": hits / len(records) if records else None})
        return rows

    def spread(self) -> dict[str, dict[str, Any]]:
        """Per category, how far apart its prompts' rates are over their repeated runs."""
        rows = self.per_prompt()
        return {c: eval_stats.spread([r["rate"] for r in rows if r["category"] == c and r["rate"] is not None])
                for c in CATEGORIES}

    def compared_with(self, first: EvalReport) -> dict[str, eval_stats.Difference | None]:
        """This report against `first`, per category and overall: this rate minus the first's, interval, p-value."""
        mine, theirs = self.counts(), first.counts()
        return {m: eval_stats.difference(*theirs[m], *mine[m]) for m in COMPARED}

    def totals(self) -> dict[str, int]:
        return {"runs": len(self.records), "calls": sum(r.calls for r in self.records),
                "input_tokens": sum(r.input_tokens for r in self.records),
                "output_tokens": sum(r.output_tokens for r in self.records)}

    def summary(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "label": self.label,
            "activation": {c: self.activation_rate(c) for c in ("direct", "paraphrase")},
            "false_positive_rate": self.false_positive_rate(),
            "wrong_skill_rate": self.wrong_skill_rate(),
            "counts": {m: {"hits": k, "runs": n} for m, (k, n) in counts.items()},
            "intervals": {m: eval_stats.wilson_list(k, n) for m, (k, n) in counts.items()},
            "errored": {"total": self.errored(), **{c: self.errored(c) for c in CATEGORIES}},
            "spread": self.spread(),
            "per_skill": self.per_skill(), "per_prompt": self.per_prompt(), "behaviour": self.behaviour,
            "totals": self.totals(), "batch_ids": self.batch_ids, "runs_per_prompt": self.runs,
            "records": [dataclasses.asdict(r) for r in self.records],  # what `--against` rebuilds the report from
        }


def _activated_expected(item: EvalItem, record: RunRecord) -> bool:
    return bool(set(item.expected) & set(record.activated))


def _right(item: EvalItem, record: RunRecord) -> bool:
    """The run did what the prompt asks for: an expected skill activated, or on a negative nothing did."""
    return _activated_expected(item, record) if item.expected else not record.activated


def prompt_text(item: EvalItem, strategy: str) -> str:
    files = f"\n\nFiles: {', '.join(item.files)}" if item.files else ""
    return (FORCED_PREAMBLE if strategy == "forced" else "") + item.prompt + files


def check_options(strategy: str, runs: int) -> None:
    """Refuse a strategy other than plain or forced, or fewer than one run per prompt."""
    if strategy not in ("plain", "forced"):
        raise InvalidArgument(f"a strategy is plain or forced, not {strategy!r}")
    if runs < 1:
        raise InvalidArgument("at least one run per prompt")


def run_eval(skills: Sequence[Skill], client: ModelClient, model_id: str, items: Sequence[EvalItem], *,
             runs: int = DEFAULT_RUNS, strategy: str = "plain", label: str | None = None,
             show_path: Callable[[str], str] = os.path.basename, agent_options: dict[str, Any] | None = None,
             on_progress: Callable[[int, int], None] | None = None, run_log=None) -> EvalReport:
    """Run every prompt `runs` times through the agent loop, limited to its first turns; `run_log` gets a row each."""
    check_options(strategy, runs)
    report = EvalReport(label or strategy, list(items), runs=runs)
    total, done = len(items) * runs, 0
    for item in items:
        for run in range(1, runs + 1):
            kept = logged.capture(client, run_log)  # its exchanges, for the run log
            agent = loop_for(kept)(skills, kept, model_id, show_path=show_path, max_turns=FIRST_TURNS,
                                   **(agent_options or {}))
            result = logged.timed(agent.run, prompt_text(item, strategy))
            counted = activated_skills(result)
            logged.record_eval(run_log, result, kept, report.label, item, run, strategy, counted)
            capped = result.stop_reason == "max_cost"  # its cap stopped it: no evidence, counted as errored
            if result.turns or not capped:
                report.records.append(RunRecord(
                    item.id, run, counted, result.turns, result.usage["input_tokens"],
                    result.usage["output_tokens"], result.error or (result.note if capped else None), result.priced_usd))
            done += 1
            if on_progress is not None:
                on_progress(done, total)
            if capped:
                report.stopped = result.note
                return report
    return report


# --- behaviour evals ----------------------------------------------------------------------------------------------


class BehaviourJudgement(BaseModel):
    behavior: str
    passed: bool
    reason: str = Field(min_length=1)


class Judgement(BaseModel):
    results: list[BehaviourJudgement]


JUDGE_TOOL = {"name": JUDGE_TOOL_NAME, "description": "Record pass or fail for each expected behaviour.",
              "input_schema": Judgement.model_json_schema()}


def judge_prompt(item: EvalItem, transcript: str) -> str:
    lines = "\n".join(f"{n}. {b}" for n, b in enumerate(item.expected_behavior, 1))
    return (
        "## Judge the run of an agent against expected behaviours\n\n"
        f"## The request\n{item.prompt}\n\n## What the agent did\n{transcript}\n\n## Expected behaviours\n{lines}\n\n"
        f"For each expected behaviour, decide passed true or false with a short reason. Answer only by calling "
        f"{JUDGE_TOOL_NAME}."
    )


def transcript_of(result) -> str:
    parts = []
    for call in result.tool_calls:
        parts.append(f"- called {call.name} {json.dumps(call.input, ensure_ascii=False)[:200]}"
                     + (f" (error: {call.error})" if call.is_error else ""))
    parts.append(f"- final answer: {result.final_text.strip()[:2000] or '(none)'}")
    return "\n".join(parts)


def judge(client: ModelClient, model_id: str, item: EvalItem, result) -> list[BehaviourJudgement] | None:
    """The judge model's pass/fail per expected behaviour; None when its answer does not fit the schema."""
    request = {"model": model_id, "max_tokens": 1024, "tools": [JUDGE_TOOL],
               "tool_choice": {"type": "tool", "name": JUDGE_TOOL_NAME},
               "messages": [{"role": "user", "content": judge_prompt(item, transcript_of(result))}]}
    try:
        response = client.create(request)
    except ModelError:
        return None
    calls = [b for b in response.get("content", []) if b.get("type") == "tool_use" and b.get("name") == JUDGE_TOOL_NAME]
    try:
        return Judgement.model_validate(calls[0]["input"]).results if calls else None
    except ValueError:
        return None


def behaviour_evals(skills: Sequence[Skill], client: ModelClient, model_id: str, items: Sequence[EvalItem], *,
                    show_path: Callable[[str], str] = os.path.basename) -> dict[str, dict[str, Any]]:
    """For each item with expected behaviours: run it with its skills available and without them (the baseline),
    judge both; pass counts per skill."""
    table: dict[str, dict[str, Any]] = {}
    for item in items:
        if not item.expected_behavior:
            continue
        for available in (True, False):
            catalog = [s for s in skills if available or s.name not in item.expected]
            result = Agent(catalog, client, model_id, show_path=show_path, max_turns=BEHAVIOUR_TURNS).run(item.prompt)
            verdicts = judge(client, model_id, item, result)
            for skill in item.expected or ("(none)",):
                row = table.setdefault(skill, {"with": [0, 0], "without": [0, 0], "unjudged": 0, "reasons": []})
                key = "with" if available else "without"
                if verdicts is None:  # no usable judgement: counted apart, never as a pass or a fail
                    row["unjudged"] += 1
                    continue
                judged = verdicts[: len(item.expected_behavior)]
                row[key][0] += sum(v.passed for v in judged)
                row[key][1] += len(item.expected_behavior)  # a behaviour the judge skipped counts, as not passed
                row["reasons"] += [f"{item.id} {key}: {'pass' if v.passed else 'fail'}: {v.behavior}: {v.reason}" for v in verdicts]
    for row in table.values():
        for key in ("with", "without"):
            passed, total = row[key]
            row[f"{key}_rate"] = passed / total if total else None
    return table


def usage_total(response) -> tuple[int, int]:
    usage = usage_of(response)
    return usage["input_tokens"], usage["output_tokens"]
