"""What a sandboxed run may do and use: the grants an allow rule gives (`Grants`) and the limits it may raise
(`Limits`), with sizes as a user types them (`4G`) and as outputs show them (`4 GiB`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from skills_magic.errors import InvalidArgument

MiB = 1024 * 1024
DEFAULT_MEMORY_BYTES = 2048 * MiB  # per process (RLIMIT_DATA): far above a helper script, far below the machine
DEFAULT_PROCESSES = 256  # processes and threads together: a build or a pool fits, a fork bomb does not
DEFAULT_CPU_SECONDS = 120  # per process: two cores busy for the whole default timeout
DEFAULT_WRITE_BYTES = 256 * MiB  # everything a run writes together (outputs, /tmp, /dev/shm, unlinked files)
DEFAULT_FILE_BYTES = 1024 * MiB  # the largest single file (RLIMIT_FSIZE): matters on paths a rule made writable


@dataclass(frozen=True)
class Limits:
    """What a run may use; each can be raised by a rule (`--memory 4G`, `--processes 512`, `--cpu 600`,
    `--max-writes 1G`, `--max-file 1G`, `--timeout 300`)."""

    memory: int = DEFAULT_MEMORY_BYTES
    processes: int = DEFAULT_PROCESSES
    cpu_seconds: int = DEFAULT_CPU_SECONDS
    write_bytes: int = DEFAULT_WRITE_BYTES
    file_bytes: int = DEFAULT_FILE_BYTES
    wall_seconds: int | None = None  # None: the gate's timeout (60 s unless changed); `--timeout 300` sets it

    def describe(self) -> str:
        wall = f", {self.wall_seconds} s in all" if self.wall_seconds else ""
        return (f"memory {size_text(self.memory)} a process, {self.processes} processes, {self.cpu_seconds} s CPU, "
                f"writes {size_text(self.write_bytes)} in all, files up to {size_text(self.file_bytes)}{wall}")


@dataclass(frozen=True)
class Grants:
    """What a run may do beyond the sandbox's defaults; only allow rules grant these, never a skill's frontmatter."""

    env: tuple[str, ...] = ()
    network: bool = False  # the whole network
    writable: tuple[str, ...] = ()
    unsandboxed: bool = False
    limits: Limits = field(default_factory=Limits)
    hosts: tuple[str, ...] = ()  # host patterns reached through the proxy (HTTP and HTTPS)

    def describe(self) -> str:
        parts = []
        if self.unsandboxed:
            parts.append("UNSANDBOXED")
        if self.network:
            parts.append("network")
        elif self.hosts:
            parts.append(f"network to {','.join(self.hosts)} (HTTP/HTTPS through the proxy)")
        parts += [f"write {p}" for p in self.writable]
        parts += [f"env {v}" for v in self.env]
        if self.limits != Limits():
            parts.append(f"limits: {self.limits.describe()}")
        return ", ".join(parts) or "nothing beyond the sandbox (no network, writes only to its scratch folder)"


def size_text(n: int) -> str:
    for unit, size in (("G", 1024 * MiB), ("M", MiB), ("K", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}iB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n:,} bytes"


def grant_size(n: int) -> str:
    """A size as a grant is typed: `4G`, `512M`."""
    return size_text(n).replace(" ", "").replace("iB", "").replace("bytes", "").replace(",", "")


def parse_size(text: str | int) -> int:
    """`512M`, `4G`, `1.5G`, `100000` -> bytes; a clear InvalidArgument (a ValueError) otherwise."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not match or float(match.group(1)) <= 0:
        raise InvalidArgument(f"{text!r} is not a size: write e.g. 512M or 4G")
    scale = {"": 1, "K": 1024, "M": MiB, "G": 1024 * MiB, "T": 1024 * 1024 * MiB}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)
