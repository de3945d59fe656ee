"""The sandbox every script run and inline command runs in on Linux: bubblewrap (`bwrap`), as coding agents use it.

Inside: a new network namespace (no network at all, loopback included) unless a rule grants `network`; the whole
filesystem read-only, except a per-run scratch folder (the script's `$TMPDIR` and `$SKILLS_MAGIC_OUTPUT`) and the
paths a rule grants; the user's secrets (`~/.ssh`, `~/.aws`, `~/.config`, ... and `.env` files of the project and the
skill) hidden; a new PID namespace, so a daemon the script forks dies with the run. Where no sandbox can be made
(bwrap missing, user namespaces disabled, not Linux), a run is refused unless a rule explicitly allows it unsandboxed.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

SCRATCH_CAP_BYTES = 64 * 1024 * 1024  # a helper's outputs (a report, a plot) are small; a full disk is not an output
HIDDEN_IN_HOME = (".ssh", ".aws", ".azure", ".gnupg", ".config", ".docker", ".kube", ".netrc", ".git-credentials",
                  ".pypirc", ".npmrc", ".password-store", ".local/share/keyrings")  # where credentials live
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


@dataclass(frozen=True)
class Grants:
    """What a run may do beyond the sandbox's defaults; only allow rules grant these, never a skill's frontmatter."""

    env: tuple[str, ...] = ()
    network: bool = False
    writable: tuple[str, ...] = ()
    unsandboxed: bool = False

    def describe(self) -> str:
        parts = []
        if self.unsandboxed:
            parts.append("UNSANDBOXED")
        if self.network:
            parts.append("network")
        parts += [f"write {p}" for p in self.writable]
        parts += [f"env {v}" for v in self.env]
        return ", ".join(parts) or "nothing beyond the sandbox (no network, writes only to its scratch folder)"


@functools.lru_cache(maxsize=1)
def availability() -> tuple[bool, str]:
    """(True, what) when a bwrap sandbox can be made here; else (False, why not and how to fix it)."""
    if not sys.platform.startswith("linux"):
        return False, f"no sandbox on {sys.platform}: bubblewrap needs Linux"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False, f"bwrap is not installed; {INSTALL_HINT}"
    probe = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
                            "--proc", "/proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["unknown error"])[-1]
        return False, f"bwrap cannot create namespaces here ({reason}); user namespaces may be disabled"
    return True, "bubblewrap: no network, read-only files but a scratch folder, secrets hidden, own PID namespace"


def _hidden(folder: str, home: str) -> list[str]:
    """bwrap arguments that hide credentials: folders become empty tmpfs, files read as empty."""
    args: list[str] = []
    for relative in HIDDEN_IN_HOME:
        path = os.path.join(home, relative)
        if os.path.isdir(path):
            args += ["--tmpfs", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    for place in {folder, os.getcwd()}:
        try:
            names = os.listdir(place)
        except OSError:
            continue
        for name in names:
            if name == ".env" or name.startswith(".env."):
                args += ["--ro-bind", "/dev/null", os.path.join(place, name)]
    return args


def wrap(command: list[str], folder: str, scratch: str, grants: Grants, home: str | None = None) -> list[str]:
    """The bwrap command line that runs `command` in `folder` inside the sandbox."""
    home = home or os.path.expanduser("~")
    args = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]  # /tmp stays read-only: $TMPDIR is the scratch
    if grants.network:
        args.append("--share-net")
    args += _hidden(folder, home)
    args += ["--bind", scratch, scratch]
    for path in grants.writable:
        if os.path.exists(path):
            args += ["--bind", path, path]
    args += ["--setenv", "TMPDIR", scratch, "--setenv", "SKILLS_MAGIC_OUTPUT", scratch, "--chdir", os.path.realpath(folder)]
    return [*args, "--", *command]


def folder_size(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


def outputs(scratch: str) -> list[tuple[str, int]]:
    """The files a run left in its scratch folder: (path relative to it, size)."""
    found = []
    for root, _, files in os.walk(scratch):
        for name in sorted(files):
            full = os.path.join(root, name)
            try:
                found.append((os.path.relpath(full, scratch), os.lstat(full).st_size))
            except OSError:
                continue
    return sorted(found)
