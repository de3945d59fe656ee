"""Watching processes from a test, without sleeping on a clock (`from processes import gone, wait_until_gone`)."""

from __future__ import annotations

import os
import select


def gone(pid: int) -> bool:
    """True when `pid` no longer runs: no such process, or a zombie (dead, waiting for its reaper)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def wait_until_gone(pid: int, checks: int = 100) -> bool:
    """A bounded number of checks; between them, wait on the process itself (a pidfd), never on a clock."""
    for _ in range(checks):
        if gone(pid):
            return True
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return True
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.poll(100)  # returns as soon as the process exits
        finally:
            os.close(fd)
    return gone(pid)


def processes_running(marker: str) -> list[int]:
    """Live processes whose command line contains `marker` (seen from here, whatever PID namespace they are in)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read() and not gone(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found
