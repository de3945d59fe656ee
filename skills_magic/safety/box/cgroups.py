"""The run's cgroups, where this user may make them: a pids cgroup (the process limit for the run as a whole, and a
fork bomb seen at once) and a v1 memory cgroup (the memory limit for all the run's processes together). Elsewhere a
run still has its per-process limits (prlimit); what a cgroup adds is the total, and knowing which limit was hit."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

CGROUP_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")  # where a pids cgroup can be made (v1, then v2)
CGROUP_EMPTY_SECONDS = 1.0  # how long a finished run waits for its killed processes to leave its cgroups
CGROUP_SWEEP_AGE_SECONDS = 60  # a leftover cgroup of ours this old is removed by the next run
MEMORY_CGROUP_ROOT = "/sys/fs/cgroup/memory"  # v1: a child of the kernel's memory cgroup limits the run as a whole


def remove_cgroup(path: str, patience: float = 0.0) -> bool:
    """Remove a cgroup of ours once its last process is gone (killed processes take a moment to leave it)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


def sweep_cgroups(root: str) -> None:
    """Empty cgroups an earlier run of ours could not remove in time (older than a minute: never one being set up)."""
    try:
        names = [n for n in os.listdir(root) if n.startswith("skills-magic-")]
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            if time.time() - os.stat(path).st_mtime > CGROUP_SWEEP_AGE_SECONDS:
                remove_cgroup(path)
        except OSError:
            continue


def memory_cgroup(limit: int) -> str | None:
    """A memory cgroup of our own (v1) under the kernel's, with the run's memory limit for all its processes together,
    where this user may make one; None elsewhere (each process still has its RLIMIT_DATA)."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as handle:
            lines = [line.strip().split(":", 2) for line in handle]
    except OSError:
        return None
    own = next((path for _id, controllers, path in lines if "memory" in controllers.split(",")), None)
    root = os.path.join(MEMORY_CGROUP_ROOT, (own or "/").lstrip("/"))
    if own is None or not os.path.isfile(os.path.join(root, "memory.limit_in_bytes")) or not os.access(root, os.W_OK):
        return None
    # memory, then memory and swap (where swap is accounted)
    return new_cgroup(root, {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit},
                      optional=("memory.memsw.limit_in_bytes",))


def new_cgroup(root: str, settings: Mapping[str, int], optional: Sequence[str] = ()) -> str | None:
    """A cgroup of ours under `root` with each setting written (an `optional` one only where the file exists), or
    None, leaving nothing behind, where one cannot be made."""
    sweep_cgroups(root)
    try:
        path = tempfile.mkdtemp(prefix="skills-magic-", dir=root)
    except OSError:
        return None
    try:
        for name, value in settings.items():
            if name in optional and not os.path.exists(os.path.join(path, name)):
                continue
            with open(os.path.join(path, name), "w", encoding="ascii") as handle:
                handle.write(str(value))
        return path
    except OSError:
        remove_cgroup(path)
        return None


def pids_cgroup(limit: int) -> str | None:
    """A pids cgroup of our own with `pids.max` = limit, where this user may make one (root, or a delegated tree)."""
    for root in CGROUP_ROOTS:
        if not os.path.isfile(os.path.join(root, "cgroup.procs")) or not os.access(root, os.W_OK):
            continue
        if root == "/sys/fs/cgroup":
            try:
                with open(os.path.join(root, "cgroup.controllers"), encoding="ascii") as handle:
                    if "pids" not in handle.read().split():
                        continue
            except OSError:
                continue
        path = new_cgroup(root, {"pids.max": limit})
        if path:
            return path
    return None


def _read(cgroup: str | None, name: str, answer: Callable[[TextIO], Any]) -> Any:
    """`answer(the open file)` for one of the cgroup's files; None where there is no cgroup or it cannot be read."""
    if not cgroup:
        return None
    try:
        with open(os.path.join(cgroup, name), encoding="ascii") as handle:
            return answer(handle)
    except (OSError, IndexError):
        return None


def processes_limit_hit(cgroup: str | None) -> bool:
    """Whether a fork was refused at the pids cgroup's `pids.max`."""
    return bool(_read(cgroup, "pids.events", lambda h: any(line.split()[1] != "0" for line in h if line.startswith("max "))))


def memory_limit_hit(cgroup: str | None) -> bool:
    """Whether the memory cgroup ran out (its OOM killer ended a process of the run)."""
    killed = _read(cgroup, "memory.oom_control", lambda h: [line.split()[1] for line in h if line.startswith("oom_kill ")])
    if killed is None:  # no memory cgroup, or one that cannot be read
        return False
    if killed:  # a kernel that counts OOM kills
        return killed[0] != "0"
    return bool(_read(cgroup, "memory.failcnt", lambda h: h.read().strip() != "0"))
