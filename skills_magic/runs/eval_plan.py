"""An eval run's variants (the strategy, a compared strategy or a folder of other skill versions) and running
each, plain or through the Message Batches API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skills_magic.errors import InvalidArgument
from skills_magic.models.base import ModelClient, capabilities
from skills_magic.runs import evals
from skills_magic.runs.eval_cost import eval_budget
from skills_magic.skills.catalog import Catalog, Source

STRATEGIES = ("plain", "forced")
HARNESS = "harness"  # `--compare harness`: the same prompts through the other harness (native <-> claude-code)
WITHOUT = "without:"  # `--compare without:NAME`: the same catalog without that skill (does it help at all?)


def variants(strategy: str, compare: str | None, find: Callable[[str], str]) -> list[tuple[str, str | None]]:
    """(strategy, folder of other versions or None) per report: `compare` is a strategy, a folder (`find` resolves
    it: a path, or `learned:NAME@V`), `harness`, or `without:NAME` (kept as it is: the catalog without NAME)."""
    chosen = [(strategy, None)]
    if compare == HARNESS:
        chosen.append((strategy, None))
    elif compare and compare.startswith(WITHOUT):
        chosen.append((strategy, compare))
    elif compare:
        chosen.append((compare, None) if compare in STRATEGIES else (strategy, find(compare)))
    return chosen


def skills_with(skills: list, folder: str | None) -> list:
    """`skills`, with those found under `folder` taking precedence (another version of them)."""
    if folder is None:
        return list(skills)
    if folder.startswith(WITHOUT):
        left_out = folder[len(WITHOUT):]
        if not any(s.name == left_out for s in skills):
            raise InvalidArgument(f"--compare {folder}: there is no skill named {left_out!r} to leave out")
        return [s for s in skills if s.name != left_out]
    other = Catalog([Source("compare", folder, explicit=True)]).scan().skills
    names = {s.name for s in other}
    return list(other) + [s for s in skills if s.name not in names]


def resume_ids(batch: bool, resume: Any) -> Any:
    """The `--resume` value as run_batch_eval takes it (a list for several batches, retries too)."""
    if resume and not batch:
        raise InvalidArgument("--resume continues a batch run: add --batch")
    if isinstance(resume, str) and "," in resume:
        return [part.strip() for part in resume.split(",") if part.strip()]
    return resume


def other_harness(client: ModelClient) -> ModelClient:
    """The client of the other harness: Claude Code beside a native client, the default Claude client beside it."""
    from skills_magic.models.choice import for_harness

    other = "native" if capabilities(client).harness == "claude-code" else "claude-code"
    return for_harness(other, lambda: client)()


def check_batch_client(client: ModelClient, batch: bool) -> None:
    if batch and not capabilities(client).supports_batches:
        raise InvalidArgument(f"--batch sends requests through the Message Batches API: it needs the Anthropic client "
                              f"(ANTHROPIC_API_KEY, or %skills model anthropic), not {client.name!r}")


def run_variants(catalog_skills: list, client: ModelClient, model_id: str, items, chosen: list[tuple[str, str | None]],
                 *, runs: int, compare: str | None, behaviour: bool, batch: bool, resume: Any,
                 show_path: Callable[[str], str], on_progress=None, run_log=None, max_cost: float | None = None,
                 on_estimate=None, asker=None) -> list:
    """One report per variant (a side-by-side comparison when there are two). Every variant's catalog must hold the
    skills the prompt set expects: that is checked for all of them before the first model call, and so is the
    budget (runs.eval_cost: the estimate handed to `on_estimate`, the cap `max_cost` every run is checked against)."""
    catalogs = [skills_with(catalog_skills, folder) for _strategy, folder in chosen]
    for (strategy, folder), skills in zip(chosen, catalogs, strict=True):
        evals.check_options(strategy, runs)
        if not (folder or "").startswith(WITHOUT):  # left out on purpose: its prompts are expected to miss
            evals.check_expected(items, skills)
    clients = [client, other_harness(client)] if compare == HARNESS else [client] * len(chosen)
    if behaviour and any(capabilities(c).harness != "native" for c in clients):
        raise InvalidArgument("--behaviour has a model judge each transcript through the Messages API: run it with the "
                              "native harness, not claude-code")
    spending = eval_budget([(s, skills) for (s, _folder), skills in zip(chosen, catalogs, strict=True)], client, model_id,
                           items, runs=runs, batch=batch, behaviour=behaviour, max_cost=max_cost, show_path=show_path,
                           on_estimate=on_estimate, asker=asker)
    if on_progress is not None:
        on_progress(0, len(items) * runs)  # the run begins: a progress bar appears now, not before the checks
    reports = []
    for number, ((strategy, folder), skills) in enumerate(zip(chosen, catalogs, strict=True)):
        client = clients[number]
        if compare == HARNESS:
            label = capabilities(client).harness
        elif folder is not None and folder.startswith(WITHOUT):
            label = f"without {folder[len(WITHOUT):]}"
        elif folder is not None:
            label = show_path(folder)
        elif compare and compare not in STRATEGIES:
            label = "catalog"
        else:
            label = strategy
        options = dict(runs=runs, strategy=strategy, label=label, show_path=show_path, on_progress=on_progress,
                       run_log=run_log)  # a row per prompt run (records.runlog)
        if batch:
            from skills_magic.runs.batch_evals import run_batch_eval

            report = run_batch_eval(skills, client, model_id, items, batch_id=resume if number == 0 else None, **options)
        else:
            report = evals.run_eval(skills, client, model_id, items, agent_options={"cap": spending}, **options)
        if behaviour:
            report.behaviour = evals.behaviour_evals(skills, client, model_id, items, show_path=show_path)
        reports.append(report)
    return reports
