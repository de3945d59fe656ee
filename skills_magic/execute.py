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
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_TIMEOUT_SECONDS = 60.0  # a helper script that runs longer is stuck, not thorough
SCRATCH_CHECK_SECONDS = 0.02  # how often a sandboxed run's scratch folder is measured against its cap
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
    sandboxed: bool = False
    scratch: str | None = None  # the run's scratch folder ($SKILLS_MAGIC_OUTPUT), when it had one
    outputs: tuple[tuple[str, int], ...] = ()  # files left in the scratch folder: (relative path, size)
    stopped: str | None = None  # why the run was stopped early (the scratch cap), if it was


def clean_environment(environ: Mapping[str, str] | None = None, granted: Sequence[str] = ()) -> dict[str, str]:
    """The kernel's environment without anything that looks like a credential, except what a rule `granted`."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in environ.items()
        if name in granted or not (SECRET_NAME.search(name) or name.startswith(SECRET_PREFIXES))
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
    """argv for a script: `.py` with the kernel's Python, `.sh` with bash, anything else only with its run bit."""
    if target.endswith(".py"):
        return [sys.executable, target, *arguments]
    if target.endswith(".sh"):
        return ["bash", target, *arguments]
    if os.access(target, os.X_OK):
        return [target, *arguments]
    raise ScriptError(f"{os.path.basename(target)} is not a .py or .sh file and has no run bit")


def _check_interpreter(target: str, label: str) -> None:
    """A script whose #! names a missing interpreter cannot start: say so before starting (inside a sandbox the
    failure would only be the sandbox's exit code)."""
    if target.endswith((".py", ".sh")):
        return
    try:
        with open(target, "rb") as handle:
            first = handle.readline(256)
    except OSError:
        return
    if first.startswith(b"#!"):
        parts = first[2:].decode("utf-8", "replace").split()
        if parts and os.path.isabs(parts[0]) and not os.path.exists(parts[0]):
            raise ScriptError(f"{label} cannot be started: No such file or directory")


class _Capped:
    """Reads a pipe to its end in a thread, keeping the first MAX_OUTPUT_BYTES (the rest is counted, not kept)."""

    def __init__(self, pipe):
        self.kept = bytearray()
        self.dropped = 0
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe) -> None:
        with pipe:
            for block in iter(lambda: pipe.read(65536), b""):
                room = MAX_OUTPUT_BYTES - len(self.kept)
                self.kept += block[:room]
                self.dropped += max(0, len(block) - room)

    def text(self) -> tuple[str, bool]:
        self.thread.join()
        text = self.kept.decode("utf-8", "replace")
        if self.dropped:
            text += f"\n[output cut: {self.dropped:,} more bytes not shown]"
        return text, self.dropped > 0


def run_script(folder: str, path: str, arguments: Sequence[str] = (), stdin: str = "",
               timeout: float = DEFAULT_TIMEOUT_SECONDS, environ: Mapping[str, str] | None = None,
               granted_env: Sequence[str] = (), sandbox: tuple[Any, str, int] | None = None) -> ScriptRun:
    """Run `path` (relative to the skill folder) to completion or timeout; never through a shell."""
    target = resolve_script(folder, path)
    try:
        digest = _digest(target)
    except OSError as error:  # deleted or made unreadable since it was listed
        raise ScriptError(f"{path!r} cannot be read: {error.strerror or error}") from None
    _check_interpreter(target, path)
    return run_command(command_for(target, [str(a) for a in arguments]), folder, path, tuple(arguments), stdin,
                       timeout, clean_environment(environ, granted_env), digest, sandbox)


def run_command(command: list[str], folder: str, label: str, arguments: tuple[str, ...], stdin: str, timeout: float,
                env: dict[str, str], digest: str, sandbox: tuple[Any, str, int] | None = None) -> ScriptRun:
    """Run argv to completion or timeout. With `sandbox` = (wrap, scratch, cap), the argv is wrapped in the sandbox,
    the scratch folder is watched, and a run that fills it past `cap` bytes is stopped."""
    data = stdin.encode("utf-8")
    if sandbox is not None:
        wrap, scratch, cap = sandbox
        command = wrap(command)
    started = time.perf_counter()
    try:
        process = subprocess.Popen(command, cwd=os.path.realpath(folder), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                   start_new_session=True)  # its own process group: a timeout kills its children too
    except OSError as error:  # a missing interpreter, a bad shebang, no permission
        raise ScriptError(f"{label} cannot be started: {error.strerror or error}") from None
    out, err = _Capped(process.stdout), _Capped(process.stderr)
    timed_out = False
    stopped: list[str] = []
    if sandbox is not None:
        _watch_scratch(process, scratch, cap, stopped)
    try:
        try:
            process.stdin.write(data)
            process.stdin.close()
        except BrokenPipeError:
            pass  # the script did not read its input: not an error of ours
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(process)
    except BaseException:  # KeyboardInterrupt included: never leave the script running
        _kill(process)
        raise
    _kill_group(process)  # a child the script left behind does not outlive it
    stdout, cut_out = out.text()
    stderr, cut_err = err.text()
    from skills_magic.sandbox import outputs

    return ScriptRun(
        script=label,
        arguments=arguments,
        exit_code=None if timed_out else process.returncode,
        stdout=stdout,
        stderr=stderr,
        seconds=time.perf_counter() - started,
        timed_out=timed_out,
        truncated=cut_out or cut_err,
        sha256=digest,
        stdin_bytes=len(data),
        sandboxed=sandbox is not None,
        scratch=scratch if sandbox is not None else None,
        outputs=tuple(outputs(scratch)) if sandbox is not None else (),
        stopped=stopped[0] if stopped else None,
    )


def _watch_scratch(process: subprocess.Popen, scratch: str, cap: int, stopped: list[str]) -> None:
    """Stop the run when its scratch folder grows past `cap` bytes (checked every few milliseconds)."""
    from skills_magic.sandbox import folder_size

    def watch() -> None:
        while process.poll() is None:
            if folder_size(scratch) > cap:
                stopped.append(f"stopped: the scratch folder grew past its cap of {cap:,} bytes")
                _kill_group(process)
                return
            time.sleep(SCRATCH_CHECK_SECONDS)

    threading.Thread(target=watch, name="skills-magic-scratch-cap", daemon=True).start()


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(process: subprocess.Popen) -> None:
    _kill_group(process)
    process.wait()


def _digest(target: str) -> str:
    with open(target, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()
