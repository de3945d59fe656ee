"""Running one of a skill's scripts on the kernel's machine: a child process, no shell, bounded in time and output.

This module only executes; deciding whether a script may run is the permission policy's job, and nothing calls
`run_script` without a decision. The child gets the kernel's Python for `.py` files, the skill's folder as working
directory, stdin as given, and an environment without API keys or other secrets.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_TIMEOUT_SECONDS = 60.0  # a helper script that runs longer is stuck, not thorough
MAX_OUTPUT_BYTES = 1024 * 1024  # per stream; more is cut (and said to be cut) so a chatty script cannot flood a cell
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
SECRET_PREFIXES = ("ANTHROPIC_", "OPENAI_", "AWS_", "AZURE_", "GOOGLE_", "GH_", "GITHUB_")


class ScriptError(Exception):
    """A script that cannot be started (outside the skill, missing, not runnable)."""


@dataclass(frozen=True)
class ScriptRun:
    script: str  # relative to the skill folder
    arguments: tuple[str, ...]
    exit_code: int | None  # None when killed by the timeout
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    truncated: bool
    sha256: str  # digest of the script's bytes as run
    stdin_bytes: int


def clean_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The kernel's environment without anything that looks like a credential."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in environ.items()
        if not SECRET_NAME.search(name) and not name.startswith(SECRET_PREFIXES)
    }


def resolve_script(folder: str, path: str) -> str:
    if not isinstance(path, str) or not path.strip():
        raise ScriptError("`path` must be a script path relative to the skill's folder")
    root = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(root, path))
    if os.path.isabs(path) or not target.startswith(root + os.sep):
        raise ScriptError(f"{path!r} is outside the skill's folder")
    if not os.path.isfile(target):
        raise ScriptError(f"{path!r} is not a file in the skill's folder")
    return target


def command_for(target: str, arguments: Sequence[str]) -> list[str]:
    if target.endswith(".py"):
        return [sys.executable, target, *arguments]
    if os.access(target, os.X_OK):
        return [target, *arguments]
    raise ScriptError(f"{os.path.basename(target)} is neither a .py file nor executable")


def _cut(data: bytes) -> tuple[str, bool]:
    cut = len(data) > MAX_OUTPUT_BYTES
    return data[:MAX_OUTPUT_BYTES].decode("utf-8", "replace") + ("\n[output cut]" if cut else ""), cut


def run_script(folder: str, path: str, arguments: Sequence[str] = (), stdin: str = "",
               timeout: float = DEFAULT_TIMEOUT_SECONDS, environ: Mapping[str, str] | None = None) -> ScriptRun:
    """Run `path` (relative to the skill folder) to completion or timeout; never through a shell."""
    target = resolve_script(folder, path)
    with open(target, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    command = command_for(target, [str(a) for a in arguments])
    data = stdin.encode("utf-8")
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        cwd=os.path.realpath(folder),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_environment(environ),
        start_new_session=True,  # its own process group, so a timeout kills the script's children too
    )
    timed_out = False
    try:
        out, err = process.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
    except BaseException:  # KeyboardInterrupt included: never leave the child running
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    seconds = time.perf_counter() - started
    stdout, cut_out = _cut(out)
    stderr, cut_err = _cut(err)
    return ScriptRun(
        script=path,
        arguments=tuple(arguments),
        exit_code=None if timed_out else process.returncode,
        stdout=stdout,
        stderr=stderr,
        seconds=seconds,
        timed_out=timed_out,
        truncated=cut_out or cut_err,
        sha256=digest,
        stdin_bytes=len(data),
    )
