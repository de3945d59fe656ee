"""The sandbox every script run and inline command runs in on Linux: bubblewrap (`bwrap`) inside a mount namespace
of our own (util-linux `unshare`), as coding agents do it.

Inside: a new network namespace (no network at all, loopback included) unless a rule grants `network`; the whole
filesystem read-only, except a per-run scratch folder (the script's `$TMPDIR` and `$SKILLS_MAGIC_OUTPUT`) and the
paths a rule grants; fresh `/tmp`, `/run`, `/var/tmp` and `/dev/shm`; every write of the run (the scratch folder,
those fresh folders, unlinked files) lands on one size-limited tmpfs, so the write limit is a real limit; the mask
list (`MASKS`, masks.py) applied after every grant, and the project's control files read-only whatever is granted; no
capabilities, no new user namespaces, and (seccomp) no unix-domain sockets, so no path-based socket of the host (a
Jupyter kernel on the `ipc` transport, a Docker socket) is reachable; a new PID namespace, so a daemon the script
forks dies with the run; and limits on memory, processes, CPU time and file size, each of which names itself when hit.
The scratch folder's contents are copied out to the run's folder when the run ends (the tmpfs then disappears).

Where no sandbox can be made (bwrap or unshare missing, user namespaces disabled, not Linux), a run is refused
unless a rule typed by the user allows it unsandboxed.

This module probes what can be made here (`availability`, `overlay_availability`) and assembles one run's sandbox
(`prepare`, a `Box`); its parts live beside it: grants.py (what a rule grants and the limits), layers.py (the mount
namespace around bwrap), masks.py, seccomp.py and cgroups.py.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from skills_magic.safety.box import cgroups
# re-exported: its home before the split
from skills_magic.safety.box.cgroups import (  # noqa: F401
    CGROUP_EMPTY_SECONDS,
    CGROUP_ROOTS,
    CGROUP_SWEEP_AGE_SECONDS,
    MEMORY_CGROUP_ROOT,
)
# re-exported: its home before the split
from skills_magic.safety.box.grants import (  # noqa: F401
    DEFAULT_CPU_SECONDS,
    DEFAULT_FILE_BYTES,
    DEFAULT_MEMORY_BYTES,
    DEFAULT_PROCESSES,
    DEFAULT_WRITE_BYTES,
    MiB,
    Grants,
    Limits,
    grant_size,
    parse_size,
    size_text,
)
from skills_magic.safety.box.layers import bwrap, layer_argv, live_root
from skills_magic.safety.box.masks import mask_arguments
# re-exported: its home before the split
from skills_magic.safety.box.masks import ENV_FILE, MASKS, env_files, home_masks  # noqa: F401
from skills_magic.safety.box.seccomp import seccomp_fd
# re-exported: its home before the split
from skills_magic.safety.box.seccomp import AF_UNIX, seccomp_program  # noqa: F401

_memory_cgroup = cgroups.memory_cgroup  # re-exported under its name before the split: a test probes cgroups with it

CPU_GRACE_SECONDS = 5  # SIGXCPU at the limit (it names itself), SIGKILL only this much later
LIMIT_CHECK_SECONDS = 0.02  # how often the process count is read while a run goes on (a fork bomb is stopped fast)
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
# tools write caches under the home, which is read-only in the sandbox: point them at the run's fresh /tmp (counted in
# the write limit, gone with the run) instead of failing with EROFS
CACHE_ENVIRONMENT = (("XDG_CACHE_HOME", "/tmp/.cache"), ("npm_config_cache", "/tmp/.npm"),
                     ("MPLCONFIGDIR", "/tmp/.matplotlib"), ("PIP_CACHE_DIR", "/tmp/.cache/pip"))
FRESH_FOLDERS = ("/tmp", "/var/tmp", "/run", "/dev/shm")  # fresh and empty: host sockets and temp files are not there
HOST_SYMLINKED = ("/var/run", "/var/lock")  # usually links into /run: covered by the fresh /run


@functools.lru_cache(maxsize=1)
def availability() -> tuple[bool, str]:
    """(True, what) when a sandbox can be made here; else (False, why not and how to fix it)."""
    if not sys.platform.startswith("linux"):
        return False, f"no sandbox on {sys.platform}: bubblewrap needs Linux"
    if shutil.which("bwrap") is None:
        return False, f"bwrap is not installed; {INSTALL_HINT}"
    for program in ("unshare", "prlimit"):
        if shutil.which(program) is None:
            return False, f"{program} (util-linux) is not installed; install util-linux"
    with tempfile.TemporaryDirectory(prefix="skills-magic-probe-") as probe_dir:
        os.makedirs(os.path.join(probe_dir, "run", "output"))
        os.makedirs(os.path.join(probe_dir, "live"))
        probe = subprocess.run(layer_argv(os.path.join(probe_dir, "live"), os.path.join(probe_dir, "run"), 1024 * 1024)
                               + [bwrap(), "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
                                  "--proc", "/proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["unknown error"])[-1]
        return False, f"bwrap cannot create namespaces here ({reason}); user namespaces may be disabled"
    return True, ("bubblewrap: no network but granted hosts, read-only files but the working folder (copy-on-write) "
                  "and a scratch folder, secrets hidden, no host sockets, own PID namespace, limits on memory, "
                  "processes, CPU and writes")


@functools.lru_cache(maxsize=1)
def overlay_availability() -> tuple[bool, str]:
    """(True, what) when the working folder can be seen copy-on-write (a kernel overlayfs mounted in our own user
    namespace); else (False, why, and that runs then see it read-only)."""
    if not availability()[0]:
        return False, "no sandbox here"
    with tempfile.TemporaryDirectory(prefix="skills-magic-probe-") as probe_dir:
        lower, run = os.path.join(probe_dir, "lower"), os.path.join(probe_dir, "run")
        os.makedirs(os.path.join(run, "output"))
        os.makedirs(lower)
        live = tempfile.mkdtemp(prefix="skills-magic-live-", dir=live_root())
        try:
            probe = subprocess.run(layer_argv(live, run, 1024 * 1024, work=lower)
                                   + ["sh", "-c", f"echo x > {lower}/new"], capture_output=True, text=True)
        finally:
            os.rmdir(live)
        made = os.path.exists(os.path.join(run, "changes", "new")) and not os.path.exists(os.path.join(lower, "new"))
    if probe.returncode != 0 or not made:
        reason = (probe.stderr.strip().splitlines() or ["the change did not arrive"])[-1]
        return False, (f"read-only in runs: no overlayfs in a user namespace here ({reason}); a Linux kernel 5.11 "
                       "or newer with unprivileged overlayfs makes it copy-on-write")
    return True, "copy-on-write: a run's writes land in its folder under .skills/runs/ until %skills apply"


@dataclass
class Box:
    """One prepared sandbox: the argv prefix for a command, the fds it needs, and what to clean up after."""

    folder: str
    scratch: str
    grants: Grants
    live: str
    cgroup: str | None
    seccomp_fd: int | None
    args: list[str]
    run: str = ""  # the run's folder: output/ (the scratch folder), changes/ and deleted (the working folder's)
    working: str | None = None  # the working folder seen copy-on-write, None when it is not
    proxy: object | None = None  # the run's netproxy.NetworkProxy, when it was granted hosts
    memory_cgroup: str | None = None  # the run's memory cgroup, when one could be made (the limit for all processes)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.seccomp_fd,) if self.seccomp_fd is not None else ()

    @property
    def limits(self) -> Limits:
        return self.grants.limits

    def argv(self, command: Sequence[str]) -> list[str]:
        return [*self.args, "--", *command]

    def processes_limit_hit(self) -> bool:
        return cgroups.processes_limit_hit(self.cgroup)

    def memory_limit_hit(self) -> bool:
        """Whether the run's memory cgroup ran out (its OOM killer ended a process of the run)."""
        return cgroups.memory_limit_hit(self.memory_cgroup)

    def written_bytes(self) -> int:
        """What the run left in its scratch folder (what it wrote elsewhere is gone with the tmpfs)."""
        return folder_size(self.scratch)

    @property
    def refused_hosts(self) -> tuple[str, ...]:
        return tuple(self.proxy.refused) if self.proxy is not None else ()

    def close(self) -> None:
        if self.proxy is not None:
            folder = os.path.dirname(self.proxy.socket_path)
            self.proxy.close()
            try:
                os.rmdir(folder)
            except OSError:
                pass
        if self.seccomp_fd is not None:
            try:
                os.close(self.seccomp_fd)
            except OSError:
                pass
            self.seccomp_fd = None
        try:
            os.rmdir(self.live)
        except OSError:
            pass
        for cgroup in (self.cgroup, self.memory_cgroup):
            if cgroup:
                cgroups.remove_cgroup(cgroup, CGROUP_EMPTY_SECONDS)


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")  # the sandbox's own loopback: a server a script starts itself


def proxy_env(proxy, hosts: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The variables that point a sandboxed run's HTTP clients at the forwarder (and so at the proxy). The run's own
    loopback stays direct (a script's own test server), unless loopback itself is granted: then it means the host's."""
    if proxy is None:
        return []
    from skills_magic.safety import netproxy

    environment = netproxy.proxy_environment(netproxy.SANDBOX_PROXY_PORT)
    if not any(h.split(":")[0].strip("[]") in LOOPBACK_NAMES or h.startswith("127.") for h in hosts):
        environment.update(NO_PROXY=",".join(LOOPBACK_NAMES), no_proxy=",".join(LOOPBACK_NAMES))
    return sorted(environment.items())


def _needed_paths(folder: str, skill_folder: str | None, home: str) -> list[str]:
    """Folders a run sees as on the machine even when they lie under a folder made fresh (a project, a home or a
    virtualenv in /tmp): the run's folder, the session's, the skill's, the home (masked as always), the interpreter's."""
    wanted = [folder, os.getcwd(), skill_folder, home, sys.prefix, sys.base_prefix, sys.exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable)), *[p for p in sys.path if p and os.path.isdir(p)]]
    return list(dict.fromkeys(os.path.realpath(p) for p in wanted if p))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def prepare(folder: str, run: str, grants: Grants, *, home: str | None = None, protected: Sequence[str] = (),
            skill_copy: tuple[str, str] | None = None, environ: Mapping[str, str] | None = None,
            working: bool = False, refusal: Callable[[str, int | None], str] | None = None) -> Box:
    """The sandbox for one run in `folder`, its outputs and changes kept in `run` (`run`/output is the scratch folder,
    `run`/changes and `run`/deleted what the run changed in `folder`). `working`: `folder` is the working folder,
    seen copy-on-write where that is possible (else read-only). `protected`: the project's control files (read-only
    whatever is granted); `skill_copy`: (private copy, the skill's real folder): the copy is what the process sees at
    the skill's path. `refusal`: what the network proxy answers for a host not granted (host, port -> line)."""
    environ = os.environ if environ is None else environ
    home = os.path.realpath(home or os.path.expanduser("~"))
    limits = grants.limits
    scratch = os.path.join(run, "output")
    os.makedirs(scratch, exist_ok=True)
    work = os.path.realpath(folder) if working and overlay_availability()[0] else None
    live = tempfile.mkdtemp(prefix="skills-magic-live-", dir=live_root())
    cgroup = cgroups.pids_cgroup(limits.processes)
    memory_cgroup = cgroups.memory_cgroup(limits.memory)
    seccomp = seccomp_fd()
    proxy, forward = None, None
    if grants.hosts and not grants.network:
        from skills_magic.safety import netproxy

        socket_folder = tempfile.mkdtemp(prefix="skills-magic-proxy-", dir=live_root())
        proxy = netproxy.NetworkProxy(netproxy.HostPatterns.parse(",".join(grants.hosts)),
                                      os.path.join(socket_folder, "proxy.sock"), refusal=refusal or netproxy.refusal_line)
        proxy.start()
        forward = netproxy.forwarder_shell(proxy.socket_path, port=netproxy.SANDBOX_PROXY_PORT)
    args = layer_argv(live, run, limits.write_bytes, (cgroup, memory_cgroup), work, forward)
    args += [shutil.which("prlimit") or "prlimit", f"--data={limits.memory}", f"--nproc={limits.processes}",
             f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + CPU_GRACE_SECONDS}", f"--fsize={limits.file_bytes}", "--core=0", "--"]
    args += [bwrap(), "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--die-with-parent",
             "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if grants.network or proxy is not None:
        args.append("--share-net")  # the host's network, or (with a proxy) the layer's own namespace
    fresh = [(f, inside) for f, inside in zip(FRESH_FOLDERS, ("tmp", "vartmp", "run", "shm"))
             if os.path.isdir(f) and not os.path.islink(f)]
    for path, inside in fresh:
        args += ["--bind", os.path.join(live, inside), path]
    for path in _needed_paths(folder, skill_copy[1] if skill_copy else None, home):  # read-only again, under a fresh folder
        if any(_under(path, f) for f, _ in fresh) and os.path.isdir(path):
            args += ["--ro-bind", path, path]
    if work:
        args += ["--bind", work, work]  # the overlay the layer mounted there: writes land in its upper layer
    for path in grants.writable:  # grants first: the skill's copy and every mask below are applied over them
        real = os.path.realpath(path)
        if os.path.exists(real):  # a granted path is written for real: under the overlay, its host view
            source = os.path.join(live, "lower", os.path.relpath(real, work)) if work and _under(real, work) else real
            args += ["--bind", source, real]
    if skill_copy is not None:
        copy, real = skill_copy
        args += ["--ro-bind", copy, os.path.realpath(real)]
    args += mask_arguments(home, environ, [folder, os.getcwd(), *([skill_copy[1]] if skill_copy else [])])
    for path in protected:  # last: no grant makes the project's control files writable
        if os.path.exists(path):
            args += ["--ro-bind", os.path.realpath(path), os.path.realpath(path)]
    args += ["--bind", os.path.join(live, "scratch"), os.path.realpath(scratch)]  # inside .skills/, after it
    if seccomp is not None:
        args += ["--seccomp", str(seccomp)]
    args += ["--setenv", "TMPDIR", os.path.realpath(scratch), "--setenv", "SKILLS_MAGIC_OUTPUT", os.path.realpath(scratch),
             *[item for name, value in proxy_env(proxy, grants.hosts) for item in ("--setenv", name, value)],
             *[item for name, value in CACHE_ENVIRONMENT for item in ("--setenv", name, value)],
             "--setenv", "PYTHONDONTWRITEBYTECODE", "1",  # and the skill is its private copy: no __pycache__ there
             "--chdir", os.path.realpath(folder)]
    return Box(folder, scratch, grants, live, cgroup, seccomp, args, run, work, proxy, memory_cgroup)


def explain_stop(box: Box, exit_code: int | None, stderr: str) -> str | None:
    """One line naming the limit a run hit and the grant that raises it, or None when no limit explains the end."""
    limits = box.limits
    if box.processes_limit_hit():
        return (f"stopped: process limit {limits.processes} reached (processes and threads together); "
                f"allow more with --processes {limits.processes * 2}")
    if exit_code in (None, 0):
        return None
    if box.memory_limit_hit():
        return (f"stopped: memory limit {size_text(limits.memory)} reached (all the run's processes together); "
                f"allow more with --memory {grant_size(limits.memory * 2)}")
    tail = stderr[-4000:]
    if (re.search(r"No space left on device|\[Errno 28\]|ENOSPC", tail)
            or box.written_bytes() >= limits.write_bytes - 64 * 1024):
        return (f"stopped: write limit {size_text(limits.write_bytes)} reached (everything the run writes together); "
                f"allow more with --max-writes {grant_size(limits.write_bytes * 4)}")
    if exit_code == 128 + 25 or re.search(r"File too large|\[Errno 27\]|EFBIG", tail):
        return (f"stopped: file size limit {size_text(limits.file_bytes)} reached; "
                f"allow more with --max-file {grant_size(limits.file_bytes * 4)}")
    if exit_code == 128 + 24:
        return f"stopped: CPU time limit {limits.cpu_seconds} s reached; allow more with --cpu {limits.cpu_seconds * 4}"
    if re.search(r"MemoryError|Cannot allocate memory|out of memory|bad_alloc|\[Errno 12\]|ENOMEM", tail):
        return (f"stopped: memory limit {size_text(limits.memory)} reached; "
                f"allow more with --memory {grant_size(limits.memory * 2)}")
    if re.search(r"Resource temporarily unavailable|can't fork|fork: retry|BlockingIOError: \[Errno 11\]", tail):
        return (f"stopped: process limit {limits.processes} reached (processes and threads together); "
                f"allow more with --processes {limits.processes * 2}")
    if exit_code == 128 + 9:
        return (f"stopped: killed (SIGKILL), most likely at the memory limit {size_text(limits.memory)}; "
                f"allow more with --memory {grant_size(limits.memory * 2)}")
    return None


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
