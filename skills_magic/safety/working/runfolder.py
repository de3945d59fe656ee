"""A run's folder under .skills/runs/: what the gate writes there at the start (`run.json`), what the sandbox's layer
copies there at the end (`changes/`, the overlay's upper layer, and `deleted`), and the record of what `%skills apply`
copied into the project (`applied.json`), so applying twice says so."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

from skills_magic.safety.working.safefiles import TEMP_PREFIX, remove_quietly

CHANGES_FOLDER = "changes"  # in the run's folder: the overlay's upper layer, each file at its path in the working folder
DELETED_FILE = "deleted"  # in the run's folder: NUL-separated paths the run deleted in the working folder
RUN_FILE = "run.json"  # in the run's folder, written by the gate at the start: {"started_ns": ..., ...}
APPLIED_FILE = "applied.json"  # in the run's folder: what `apply_changes` copied into the project, and when
OWN_FOLDER = ".skills"  # our own folder (runs, database): never listed, never applied
RUN_NAME = re.compile(r"run-[A-Za-z0-9_]{1,64}")  # the names the gate gives run folders (mkdtemp(prefix="run-"))


def run_started_ns(run_folder: str) -> int:
    """When the run started: run.json's `started_ns` (written by the gate at the start), else the run folder's mtime
    (made at the start, but touched again when the run's results are copied in: later than the start, never earlier)."""
    try:
        with open(os.path.join(run_folder, RUN_FILE), encoding="utf-8") as handle:
            started = json.load(handle).get("started_ns")
        if isinstance(started, int) and not isinstance(started, bool) and started > 0:
            return started
    except (OSError, ValueError, AttributeError):
        pass
    return os.stat(run_folder).st_mtime_ns


def recent_runs(runs_root: str) -> list[str]:
    """The run folders' names under `runs_root`, newest first."""
    try:
        names = [n for n in os.listdir(runs_root) if RUN_NAME.fullmatch(n) and os.path.isdir(os.path.join(runs_root, n))]
    except OSError:
        return []
    return sorted(names, key=lambda n: (-os.stat(os.path.join(runs_root, n)).st_mtime_ns, n))


def run_facts(run_folder: str) -> dict[str, Any]:
    """run.json as a dict ({} when it is missing or unreadable)."""
    try:
        with open(os.path.join(run_folder, RUN_FILE), encoding="utf-8") as handle:
            facts = json.load(handle)
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def deleted_list(run_folder: str) -> list[str]:
    """The paths the layer found deleted in the overlay (its `deleted` file), as written there."""
    try:
        with open(os.path.join(run_folder, DELETED_FILE), "rb") as handle:
            raw = handle.read()
    except OSError:
        raw = b""
    return [os.fsdecode(p) for p in raw.split(b"\0") if p]


def applied_records(run_folder: str) -> dict[str, dict[str, Any]]:
    """applied.json: each path applied from this run -> its record (kind, bytes, when; {} when there is none)."""
    try:
        with open(os.path.join(run_folder, APPLIED_FILE), encoding="utf-8") as handle:
            records = json.load(handle).get("applied", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: v for k, v in records.items() if isinstance(k, str) and isinstance(v, dict)} if isinstance(records, dict) else {}


def record_applied(run_folder: str, records: Mapping[str, dict[str, Any]]) -> None:
    """Add `records` (path -> record) to applied.json, written atomically (a temporary file, then a rename)."""
    merged = {**applied_records(run_folder), **records}
    handle, temporary = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=run_folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump({"applied": merged}, out, indent=1, sort_keys=True)
        os.replace(temporary, os.path.join(run_folder, APPLIED_FILE))
    except BaseException:
        remove_quietly(temporary)
        raise
