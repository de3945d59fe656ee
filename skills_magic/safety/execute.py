"""Running one of a skill's scripts on the kernel's machine: a child process, no shell, bounded in time and output.

This module only executes; deciding whether a script may run is the permission policy's job, and nothing calls
`run_script` without a decision. The child gets the kernel's Python for `.py` files, the skill's folder as working
directory, stdin as given, and a minimal, allowlisted environment (a rule's `--env` grant, typed by the user, passes
more).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from skills_magic.errors import SkillsMagicError
from skills_magic.safety.sandbox import Box, explain_stop, outputs

DEFAULT_TIMEOUT_SECONDS = 60.0  # a helper script that runs longer is stuck, not thorough
LIMIT_CHECK_SECONDS = 0.02  # how often a sandboxed run's process count is checked against its limit
STOP_GRACE_SECONDS = 5.0  # a stopped sandbox gets this long to copy its outputs out before everything is killed
MAX_OUTPUT_BYTES = 1024 * 1024  # per stream; more is cut (and said to be cut) so a chatty script cannot flood a cell
# The environment is an allowlist: a script sees these and nothing else unless a rule grants it (`--env NAME`).
# DATABASE_URL, HTTPS_PROXY with a password, SENTRY_DSN, webhook URLs: nothing outside this list reaches a script.
ALLOWED_ENVIRONMENT = frozenset({
    "PATH",  # to find interpreters and tools
    "HOME", "USER", "LOGNAME", "SHELL",  # who runs it and where ~ is: many tools read them
    "LANG", "LANGUAGE",  # the locale (with LC_* below), so text is decoded and printed as in the user's terminal
    "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES",  # how the output may be formatted
    "TZ",  # the user's time zone, for timestamps a script prints
    "TMPDIR",  # where temporary files go (the sandbox sets its own scratch folder)
    "PYTHONIOENCODING", "PYTHONUTF8",  # how the kernel's Python encodes a script's output
    "VIRTUAL_ENV", "CONDA_PREFIX",  # which Python environment PATH points into
    "SYSTEMROOT", "PATHEXT",  # Windows: a process cannot start its runtime without them
})
ALLOWED_ENVIRONMENT_PREFIXES = (
    "LC_",  # the locale's parts (LC_ALL, LC_CTYPE, ...)
    "SKILLS_MAGIC_",  # this project's own settings (but never one that is named or shaped like a credential)
)


class ScriptError(SkillsMagicError):
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
    run_folder: str | None = None  # the run's folder under .skills/runs/ (output/, changes/, deleted), sandboxed only
    working_folder: str | None = None  # the folder the run saw copy-on-write, when it did
    refused_hosts: tuple[str, ...] = ()  # hosts the network proxy refused (not granted to this run)
    hint: str | None = None  # when it failed: one line naming the likely cause and the grant or command that fixes it
    stopped: str | None = None  # the limit that ended the run and the grant that raises it, if one did

    @property
    def failed(self) -> bool:
        return bool(self.stopped or self.timed_out or self.exit_code != 0)

    @property
    def ending(self) -> str:
        """How it ended, in a few words: the limit's line, `timed out`, or `exit code N`."""
        return self.stopped or ("timed out" if self.timed_out else f"exit code {self.exit_code}")


def clean_environment(environ: Mapping[str, str] | None = None, granted: Sequence[str] = ()) -> dict[str, str]:
    """The allowlisted part of the kernel's environment (ALLOWED_ENVIRONMENT), plus what a rule `granted`.

    An allowlisted variable is still dropped when its name or value looks like a credential (SKILLS_MAGIC_TOKEN, a
    proxy URL with a password); a granted one passes as it is: the user asked for it by name."""
    from skills_magic.redact import is_secret_name, looks_like_credential

    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in environ.items()
        if name in granted or ((name in ALLOWED_ENVIRONMENT or name.startswith(ALLOWED_ENVIRONMENT_PREFIXES))
                               and not is_secret_name(name) and not looks_like_credential(value))
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
               granted_env: Sequence[str] = (), sandbox: Box | None = None, target: str | None = None,
               digest: str | None = None, import_root: str | None = None,
               extra_env: Mapping[str, str] | None = None) -> ScriptRun:
    """Run `path` (relative to the skill folder) to completion or timeout, in `folder`; never through a shell.
    `target` and `digest`: the file that really runs (a private copy of the reviewed bytes) and the digest of those
    bytes; `import_root`: the skill's folder as the script sees it, importable (`from scripts import helper`);
    `extra_env`: variables the run itself sets (where its inputs are), on top of the cleaned environment."""
    if target is None:
        target = resolve_script(folder, path)
    if digest is None:
        try:
            digest = _digest(target)
        except OSError as error:  # deleted or made unreadable since it was listed
            raise ScriptError(f"{path!r} cannot be read: {error.strerror or error}") from None
    _check_interpreter(target, path)
    env = {**clean_environment(environ, granted_env), **(extra_env or {})}
    if import_root:
        env["PYTHONPATH"] = import_root
    return run_command(command_for(target, [str(a) for a in arguments]), folder, path, tuple(arguments), stdin,
                       timeout, env, digest, sandbox)


def run_command(command: list[str], folder: str, label: str, arguments: tuple[str, ...], stdin: str, timeout: float,
                env: dict[str, str], digest: str, sandbox: Box | None = None) -> ScriptRun:
    """Run argv to completion or timeout. With `sandbox` (a prepared `Box`), the argv runs inside it, its process
    limit is watched, and a limit that ends the run is named in `stopped`."""
    data = stdin.encode("utf-8", "replace")  # a lone surrogate from Python is not a crash
    box = sandbox
    if box is not None:
        command = box.argv(command)
    started = time.perf_counter()
    try:
        process = subprocess.Popen(command, cwd=os.path.realpath(folder), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                   pass_fds=box.pass_fds if box is not None else (),
                                   start_new_session=True)  # its own process group: a timeout kills its children too
    except (OSError, ValueError) as error:  # a missing interpreter, a bad shebang, no permission, a NUL in argv
        if box is not None:
            box.close()
        raise ScriptError(f"{label} cannot be started: {getattr(error, 'strerror', None) or error}") from None
    if box is not None and box.seccomp_fd is not None:
        os.close(box.seccomp_fd)  # the child has its copy
        box.seccomp_fd = None
    out, err = _Capped(process.stdout), _Capped(process.stderr)
    stopped: list[str] = []
    watching = _watch_limits(process, box, stopped) if box is not None else None
    finished, expired = threading.Event(), threading.Event()

    def on_timeout() -> None:  # a timer, not wait(timeout=): that polls in sleeps of up to 50 ms
        expired.set()
        _kill_inside(process, box)
        if not finished.wait(STOP_GRACE_SECONDS):
            _kill_group(process)

    timer = threading.Timer(timeout, on_timeout)
    timer.daemon = True
    timer.start()
    try:
        try:
            process.stdin.write(data)
            process.stdin.close()
        except BrokenPipeError:
            pass  # the script did not read its input (or was stopped): not an error of ours
        process.wait()
    except BaseException:  # KeyboardInterrupt included: never leave the script running
        timer.cancel()
        _stop(process, box)
        raise
    finally:
        finished.set()
        timer.cancel()
        if watching is not None:
            watching.set()
    timed_out = expired.is_set()
    _kill_group(process)  # a child the script left behind does not outlive it
    stdout, cut_out = out.text()
    stderr, cut_err = err.text()
    exit_code = None if timed_out else process.returncode
    scratch, files, run_folder, working_folder, refused_hosts = None, (), None, None, ()
    if box is not None:
        if not stopped and not timed_out:
            reason = explain_stop(box, exit_code, stderr)
            if reason:
                stopped.append(reason)
        scratch, files = box.scratch, tuple(outputs(box.scratch))
        refused_hosts = box.refused_hosts
        box.close()
        run_folder, working_folder = box.run, box.working
    return ScriptRun(
        script=label,
        arguments=arguments,
        exit_code=exit_code,
        stdout=stdout,
        stderr=stderr,
        seconds=time.perf_counter() - started,
        timed_out=timed_out,
        truncated=cut_out or cut_err,
        sha256=digest,
        stdin_bytes=len(data),
        sandboxed=box is not None,
        scratch=scratch,
        outputs=files,
        stopped=stopped[0] if stopped else None,
        run_folder=run_folder,
        working_folder=working_folder,
        refused_hosts=refused_hosts,
    )


def _watch_limits(process: subprocess.Popen, box: Box, stopped: list[str]) -> threading.Event:
    """Stop the run as soon as its process limit is hit (a fork bomb would otherwise spin until the timeout). The
    watcher never polls the process itself (a second waiter makes Popen.wait sleep in steps); set the returned
    event when the run is over."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(LIMIT_CHECK_SECONDS):
            if box.processes_limit_hit():
                stopped.append(explain_stop(box, None, "") or "stopped: process limit reached")
                _kill_inside(process, box)
                return

    threading.Thread(target=watch, name="skills-magic-limits", daemon=True).start()
    return done


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(p) for p in handle.read().split()]
    except (OSError, ValueError):
        return []


def _kill_inside(process: subprocess.Popen, box: Box | None) -> None:
    """In a sandbox, kill what runs inside the outer layer (so that the layer still copies the run's outputs out);
    without one, the whole process group."""
    if box is None:
        _kill_group(process)
        return
    for child in _children(process.pid):
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _stop(process: subprocess.Popen, box: Box | None) -> None:
    """End a run now: what runs inside first, then (if the layer does not finish in time) the whole group."""
    _kill_inside(process, box)
    try:
        process.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    _kill(process)


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
