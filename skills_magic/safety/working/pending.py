"""A run's pending changes to the working folder: which run folders a name means (`last`, or a run id), what
they changed, and applying them into the session's folder with an audit row for each file."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from skills_magic.clock import utc_now
from skills_magic.errors import ChangeError, RunNotFound, UnknownChange
from skills_magic.safety.working.changes import ApplyReport, apply_changes, run_changes, select
from skills_magic.safety.working.runfolder import RUN_NAME, recent_runs, run_facts
from skills_magic.safety.skill_scan import digest


def run_folders(root: str, run: str, last_run, work: str, show_path: Callable[[str], str]) -> list[str]:
    """The run folders under `root` that `run` names: a run id, or `last`: every script run of `last_run` (a
    RunResult or None). A run that worked in another folder than `work` is refused."""
    if run == "last":
        ids = [c.run_id for c in last_run.changes if c.run_id] + [last_run.run_id] if last_run is not None else []
        ids = [i for i in dict.fromkeys(ids) if i]
        if not ids:
            raise RunNotFound(run, recent_runs(root), why="no script of this session has run in a sandbox yet")
    else:
        ids = [run]
    folders = []
    for run_id in ids:
        folder = os.path.join(root, run_id)
        if not RUN_NAME.fullmatch(run_id) or os.path.islink(folder) or not os.path.isdir(folder):
            raise RunNotFound(run_id, recent_runs(root))
        seen = run_facts(folder).get("working_folder")
        if isinstance(seen, str) and os.path.realpath(seen) != os.path.realpath(work):
            raise ChangeError(f"{run_id} ran in {show_path(seen)}, not in this session's folder: "
                              "apply it from a session there")
        folders.append(folder)
    return folders


def pending_changes(folders: Sequence[str], work: str) -> list:
    """What the runs in `folders` changed in `work` and has not been applied (changes.Change)."""
    return [c for folder in folders for c in run_changes(folder, work)]


def _chosen_paths(folders: Sequence[str], work: str, paths: Sequence[str], run: str) -> dict[str, list[str] | None]:
    """Each run folder -> the paths asked for that it changed (None: every change); an unknown path is refused."""
    if not paths:
        return {folder: None for folder in folders}
    changed = {folder: run_changes(folder, work) for folder in folders}
    chosen: dict[str, list[str] | None] = {folder: [] for folder in folders}
    for path in paths:
        found = False
        for folder in folders:
            try:
                select(changed[folder], [path], work, os.path.basename(folder))
            except UnknownChange:
                continue
            chosen[folder].append(path)
            found = True
        if not found:
            raise UnknownChange(path, run if len(folders) > 1 else os.path.basename(folders[0]),
                                sorted({c.path for cs in changed.values() for c in cs}))
    return chosen


def apply_runs(folders: Sequence[str], work: str, paths: Sequence[str], run: str, protected: Sequence[str],
               audit: Callable[[dict[str, Any]], None]) -> ApplyReport:
    """Copy what the runs changed (every change, or those under `paths`) into `work`; the user typing the command is
    the decision. Control files, paths leaving the folder and files changed on disk since the run started are
    refused, with why."""
    report = ApplyReport()
    for folder, wanted in _chosen_paths(folders, work, paths, run).items():
        if wanted == []:
            continue
        part = apply_changes(folder, work, wanted, protected=protected)
        skill = str(run_facts(folder).get("skill") or "*")
        for change in part.applied:
            try:
                sha = digest(change.file) if change.file and change.link is None else None
            except OSError:
                sha = None
            audit({"at": utc_now(), "event": "apply", "skill": skill, "path": change.path, "digest": sha,
                   "decision": "allow", "decided_by": "the user: %skills apply",
                   "detail": f"{change.summary()} from {change.run_id}"})
        for change, reason in part.refused:
            shown = change.path if hasattr(change, "path") else str(change)
            audit({"at": utc_now(), "event": "apply", "skill": skill, "path": shown, "decision": "deny",
                   "decided_by": "the apply checks", "detail": f"refused from {os.path.basename(folder)}: {reason}"})
        report = report.merge(part)
    return report
