"""First-turn activation evals through the Message Batches API: one request per (prompt, run), 50% cheaper, for
large prompt sets. Only the first turn is measured (did the model call activate_skill for the right skill?);
interactive tool loops stay on the Messages API. A run can be resumed from its batch ids after a kernel restart."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from skills_magic.runs import logged
from skills_magic.runs.agent import Agent
from skills_magic.runs.evals import EvalItem, EvalReport, RunRecord, prompt_text
from skills_magic.models.prices import cost_of
from skills_magic.models.base import usage_of
from skills_magic.skills.skill import Skill


def custom_id(index: int, run: int) -> str:
    return f"p{index}-r{run}"  # the API's pattern is [a-zA-Z0-9_-]{1,64}; prompt ids may hold anything


def run_batch_eval(skills: Sequence[Skill], client, model_id: str, items: Sequence[EvalItem], *, runs: int = 3,
                   strategy: str = "plain", label: str | None = None, show_path: Callable[[str], str] = str,
                   batch_id=None, on_progress: Callable[[int, int], None] | None = None,
                   poll_seconds: float | None = None, sleep=None, run_log=None) -> EvalReport:
    """One first-turn request per (prompt, run) in Message Batches; `run_log` gets a `batch` row per request."""
    from skills_magic.models.batch import POLL_SECONDS, run_batch

    agent = Agent(skills, client, model_id, show_path=show_path, max_turns=1)
    requests = {}
    for index, item in enumerate(items):
        for run in range(1, runs + 1):
            requests[custom_id(index, run)] = agent.request([{"role": "user", "content": [{"type": "text", "text": prompt_text(item, strategy)}]}])
    total = len(requests)

    shown = [0]

    def progress(counts: dict) -> None:
        if on_progress is not None:
            done = sum(int(counts.get(k) or 0) for k in ("succeeded", "errored", "canceled", "expired"))
            shown[0] = max(shown[0], min(done, total))  # a retry round counts from 0 again: the bar never goes back
            on_progress(shown[0], total)

    options = {"batch_id": batch_id, "on_progress": progress, "poll_seconds": POLL_SECONDS if poll_seconds is None else poll_seconds}
    if sleep is not None:
        options["sleep"] = sleep
    outcome = run_batch(client, requests, **options)
    report = EvalReport(label or f"{strategy} (batch)", list(items), runs=runs)
    report.batch_ids = list(outcome.batch_ids)
    for index, item in enumerate(items):
        for run in range(1, runs + 1):
            key = custom_id(index, run)
            message = outcome.results.get(key)
            if run_log is not None:
                run_log.record("batch", **logged.batch_fields(model_id, report.label, item, run, key, requests[key],
                                                              message, outcome.errors.get(key), outcome.batch_ids))
            if message is None:
                report.records.append(RunRecord(item.id, run, [], 0, 0, 0, outcome.errors.get(key, "no result")))
                continue
            activated = []
            for block in message.get("content", []):
                name = block.get("input", {}).get("name") if block.get("type") == "tool_use" and block.get("name") == "activate_skill" else None
                if isinstance(name, str) and name in agent.visible and name not in activated:
                    activated.append(name)
            usage = usage_of(message)
            report.records.append(RunRecord(item.id, run, activated, 1, usage["input_tokens"], usage["output_tokens"],
                                            cost_usd=cost_of(model_id, message.get("usage") or {}, batch=True)))
    if on_progress is not None:
        on_progress(total, total)
    return report
