"""Saved evals: `%skills eval ... --save NAME` keeps a report's summary in the run log, and `--against NAME` compares
a later run with it (the saved report first, the new run second, as `--compare` shows two)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from skills_magic.errors import InvalidArgument, SkillsMagicError
from skills_magic.runs.evals import DEFAULT_RUNS, EvalItem, EvalReport, RunRecord

KIND = "eval"  # the run log's kind for an eval's record
SAVED = "saved"  # the outcome of a saved report's row (a per-run eval row has the model's stop reason)


class SavedEvalNotFound(SkillsMagicError, LookupError):
    """`--against NAME` names no eval the run log holds."""


class SavedEvalMismatch(SkillsMagicError, ValueError):
    """The saved eval ran on other prompts: a per-prompt comparison would pair unrelated prompts."""


def report_from_summary(summary: dict[str, Any], label: str | None = None) -> EvalReport:
    """A report rebuilt from its stored summary (its items without their prompt text, its run records)."""
    items = [EvalItem(row["id"], "", tuple(row["expected"]), bool(row.get("expect_none", not row["expected"])),
                      row["category"]) for row in summary["per_prompt"]]
    known = {f.name for f in dataclasses.fields(RunRecord)}  # a summary saved by another version may hold others
    records = [RunRecord(**{k: v for k, v in row.items() if k in known}) for row in summary.get("records", ())]
    return EvalReport(label or summary["label"], items, records, runs=summary.get("runs_per_prompt", DEFAULT_RUNS),
                      behaviour=summary.get("behaviour") or {})


def saved_row(log, name: str) -> dict[str, Any] | None:
    """The newest saved eval called `name`: a per-run eval row may share the label (a report is labelled plain,
    forced, a folder...), so only a row holding a report's summary counts."""
    row = log.latest(KIND, name)
    if row is not None and not _is_summary(row):
        row = next((r for r in log.rows(kind=KIND, label=name) if _is_summary(r)), None)
    return row


def _is_summary(row: dict[str, Any]) -> bool:
    return row.get("outcome") == SAVED and isinstance(row.get("data"), dict) and "per_prompt" in row["data"]


def baseline(log, against: str | None, items: Sequence[EvalItem], *, compare: str | None = None,
             save: str | None = None) -> EvalReport | None:
    """The saved report `against` names (None without it), checked before any model call."""
    if compare and (against or save):
        raise InvalidArgument(f"--{'against' if against else 'save'} takes one run: drop --compare")
    if not against:
        return None
    row = saved_row(log, against)
    if row is None:
        raise SavedEvalNotFound(f"no eval is saved as {against!r}: save one first with `%skills eval FILE --save {against}`")
    report = report_from_summary(row["data"], label=against)
    if [i.id for i in report.items] != [i.id for i in items]:
        raise SavedEvalMismatch(f"the eval saved as {against!r} ran on other prompts (their ids differ): "
                                "compare runs of the same prompt set")
    report.note = f"the result saved as {against!r}"
    return report


def keep(log, save: str | None, saved: EvalReport | None, reports: list[EvalReport], *, model: str | None = None,
         harness: str | None = None) -> list[EvalReport]:
    """Store the run under `save` (the run log never raises: a record it could not write is said on the report),
    and put the saved baseline first when there is one."""
    if save:
        [report] = reports
        totals = report.totals()
        run_id = log.record(KIND, label=save, data=report.summary(), model=model, harness=harness,
                            usage={"input_tokens": totals["input_tokens"], "output_tokens": totals["output_tokens"]},
                            outcome=SAVED)
        report.note = (f"saved as {save!r}" if run_id is not None
                       else f"not saved as {save!r}: the run log is off or could not be written")
    return [saved, *reports] if saved is not None else reports
