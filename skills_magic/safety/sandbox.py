"""The sandbox every script run and inline command runs in on Linux: bubblewrap (`bwrap`) inside a mount namespace
of our own (util-linux `unshare`), as coding agents do it.

Inside: a new network namespace (no network at all, loopback included) unless a rule grants `network`; the whole
filesystem read-only, except a per-run scratch folder (the script's `$TMPDIR` and `$SKILLS_MAGIC_OUTPUT`) and the
paths a rule grants; fresh `/tmp`, `/run`, `/var/tmp` and `/dev/shm`; every write of the run (the scratch folder,
those fresh folders, unlinked files) lands on one size-limited tmpfs, so the write limit is a real limit; the mask
list (`MASKS`, below) applied after every grant, and the project's control files read-only whatever is granted; no
capabilities, no new user namespaces, and (seccomp) no unix-domain sockets, so no path-based socket of the host (a
Jupyter kernel on the `ipc` transport, a Docker socket) is reachable; a new PID namespace, so a daemon the script
forks dies with the run; and limits on memory, processes, CPU time and file size, each of which names itself when hit.
The scratch folder's contents are copied out to the run's folder when the run ends (the tmpfs then disappears).

Where no sandbox can be made (bwrap or unshare missing, user namespaces disabled, not Linux), a run is refused
unless a rule typed by the user allows it unsandboxed.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from skills_magic.errors import InvalidArgument

MiB = 1024 * 1024
DEFAULT_MEMORY_BYTES = 2048 * MiB  # per process (RLIMIT_DATA): far above a helper script, far below the machine
DEFAULT_PROCESSES = 256  # processes and threads together: a build or a pool fits, a fork bomb does not
DEFAULT_CPU_SECONDS = 120  # per process: two cores busy for the whole default timeout
DEFAULT_WRITE_BYTES = 256 * MiB  # everything a run writes together (outputs, /tmp, /dev/shm, unlinked files)
DEFAULT_FILE_BYTES = 1024 * MiB  # the largest single file (RLIMIT_FSIZE): matters on paths a rule made writable
CPU_GRACE_SECONDS = 5  # SIGXCPU at the limit (it names itself), SIGKILL only this much later
LIMIT_CHECK_SECONDS = 0.02  # how often the process count is read while a run goes on (a fork bomb is stopped fast)
CGROUP_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")  # where a pids cgroup can be made (v1, then v2)
CGROUP_EMPTY_SECONDS = 1.0  # how long a finished run waits for its killed processes to leave its cgroups
CGROUP_SWEEP_AGE_SECONDS = 60  # a leftover cgroup of ours this old is removed by the next run
MEMORY_CGROUP_ROOT = "/sys/fs/cgroup/memory"  # v1: a child of the kernel's memory cgroup limits the run as a whole
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"

# The mask list: hidden whatever a rule grants (applied after every writable bind). One entry a line, with why.
# Paths starting with ~ are in the user's home; a folder becomes an empty read-only folder, a file reads as empty.
MASKS: tuple[tuple[str, str], ...] = (
    ("~/.ssh", "SSH keys and known hosts"),
    ("~/.gnupg", "GPG private keys"),
    ("~/.aws", "AWS credentials"),
    ("~/.azure", "Azure credentials"),
    ("~/.config", "most tools' tokens (gh, gcloud, ...); our own trust store and user policy live here too"),
    ("~/.docker", "registry credentials"),
    ("~/.kube", "cluster credentials"),
    ("~/.netrc", "passwords for hosts (curl, git, pip)"),
    ("~/.git-credentials", "git's stored passwords"),
    ("~/.pypirc", "PyPI upload tokens"),
    ("~/.npmrc", "npm tokens"),
    ("~/.yarnrc", "yarn tokens"),
    ("~/.pgpass", "PostgreSQL passwords"),
    ("~/.my.cnf", "MySQL passwords"),
    ("~/.password-store", "pass's password store"),
    ("~/.local/share/keyrings", "the desktop keyring"),
    ("~/.cache/huggingface", "the Hugging Face token"),
    ("~/.huggingface", "the Hugging Face token (old place)"),
    ("~/.kaggle", "the Kaggle API key"),
    ("~/.cargo/credentials", "crates.io token"),
    ("~/.cargo/credentials.toml", "crates.io token"),
    ("~/.terraform.d", "Terraform Cloud tokens"),
    ("~/.databrickscfg", "Databricks tokens"),
    ("~/.claude", "Claude Code's credentials and transcripts"),
    ("~/.claude.json", "Claude Code's account state"),
    ("~/.anthropic", "Anthropic credentials"),
    ("~/.jupyter", "Jupyter server configuration (passwords, tokens)"),
    ("~/.local/share/jupyter/runtime", "kernel connection files (their HMAC key drives the kernel) and server tokens"),
    ("~/.ipython", "IPython's history of every cell typed (keys pasted into a cell stay there)"),
    ("~/.bash_history", "shell history"),
    ("~/.zsh_history", "shell history"),
    ("~/.sh_history", "shell history"),
    ("~/.history", "shell history"),
    ("~/.local/share/fish", "shell history"),
    ("~/.python_history", "Python REPL history"),
    ("~/.node_repl_history", "Node REPL history"),
    ("~/.psql_history", "psql history"),
    ("~/.mysql_history", "MySQL history"),
    ("~/.sqlite_history", "SQLite shell history"),
    ("~/.lesshst", "less's search history"),
    ("~/.viminfo", "vim's registers and history"),
    ("$JUPYTER_RUNTIME_DIR", "kernel connection files where Jupyter was told to keep them"),
    ("$XDG_RUNTIME_DIR", "the session's sockets and runtime secrets (dbus, keyring, ssh-agent)"),
    ("$SSH_AUTH_SOCK", "the SSH agent"),
    ("$SKILLS_MAGIC_CONFIG_DIR", "our trust store and the user's own policy file, where they were moved"),
)
ENV_FILE = re.compile(r"^\.env(rc)?($|\.)")  # .env, .env.local, .envrc ...: in every folder from the session up
# tools write caches under the home, which is read-only in the sandbox: point them at the run's fresh /tmp (counted in
# the write limit, gone with the run) instead of failing with EROFS
CACHE_ENVIRONMENT = (("XDG_CACHE_HOME", "/tmp/.cache"), ("npm_config_cache", "/tmp/.npm"),
                     ("MPLCONFIGDIR", "/tmp/.matplotlib"), ("PIP_CACHE_DIR", "/tmp/.cache/pip"))
FRESH_FOLDERS = ("/tmp", "/var/tmp", "/run", "/dev/shm")  # fresh and empty: host sockets and temp files are not there
HOST_SYMLINKED = ("/var/run", "/var/lock")  # usually links into /run: covered by the fresh /run

# seccomp: the syscalls a sandboxed process may not make. socket(AF_UNIX) reaches host sockets by path (a new network
# namespace does not cover the filesystem); io_uring can open sockets without the socket syscall.
_SECCOMP_ARCH = {  # machine: (AUDIT_ARCH, socket, io_uring_setup)
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}
AF_UNIX = 1
_EPERM = 1


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
        probe = subprocess.run(_layers(os.path.join(probe_dir, "live"), os.path.join(probe_dir, "run"), 1024 * 1024)
                               + [_bwrap(), "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
                                  "--proc", "/proc", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["unknown error"])[-1]
        return False, f"bwrap cannot create namespaces here ({reason}); user namespaces may be disabled"
    return True, ("bubblewrap: no network but granted hosts, read-only files but the working folder (copy-on-write) "
                  "and a scratch folder, secrets hidden, no host sockets, own PID namespace, limits on memory, "
                  "processes, CPU and writes")


def _bwrap() -> str:
    return shutil.which("bwrap") or "bwrap"


# The outer layer, run by `sh` inside `unshare --user --map-root-user --mount`: one tmpfs of the write limit's size
# holds the scratch folder, the fresh folders and the upper layer of the working folder's overlay (copy-on-write);
# after bwrap exits, the scratch folder and the overlay's changes are copied out to the run's folder, through a bind
# mount made before the overlay hides the host's view. Arguments: $1 the tmpfs mount point, $2 the run's folder on
# the host, $3 the size, $4 the working folder ("" for none), $5 the line that starts the network forwarder ("" for
# none), then the command line to run.
_LAYER_SCRIPT = r"""
set -e
live="$1"; run="$2"; size="$3"; work="$4"; forward="$5"; shift 5
holds() { for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do [ -e "$f" ] || [ -L "$f" ] && return 0; done; return 1; }
mount -t tmpfs -o "size=$size,mode=0755" skills-magic-run "$live"
mkdir "$live/scratch" "$live/run" "$live/host" && mkdir -m 1777 "$live/tmp" "$live/vartmp" "$live/shm"
mount --bind "$run" "$live/host"
if [ -n "$work" ]; then
    mkdir "$live/upper" "$live/overlay-work" "$live/lower"
    mount --bind "$work" "$live/lower"  # the host's view, for the paths a rule made writable
    mount -t overlay skills-magic-work -o "lowerdir=$live/lower,upperdir=$live/upper,workdir=$live/overlay-work,userxattr" "$work"
fi
if [ -n "$forward" ]; then eval "$forward"; fi  # the network forwarder, listening before the sandbox starts
set +e
"$@"
code=$?
if holds "$live/scratch"; then cp -a "$live/scratch/." "$live/host/output/" 2>/dev/null; fi
if [ -n "$work" ]; then
    find "$live/upper" -mindepth 1 -type c -printf '%P\0' > "$live/host/deleted" 2>/dev/null
    if holds "$live/upper"; then
        mkdir -p "$live/host/changes" && cp -a "$live/upper/." "$live/host/changes/" 2>/dev/null  # xattrs kept: the opaque marks
        find "$live/host/changes" -type c -delete 2>/dev/null
    fi
fi
exit $code
"""

# The outermost layer: join the run's cgroups (pids, memory: those that could be made) before the namespaces are made.
_CGROUP_SCRIPT = 'while [ "$1" != "--" ]; do echo $$ > "$1/cgroup.procs" || exit 125; shift; done; shift; exec "$@"'


def _layers(live: str, run: str, size: int, cgroups: Sequence[str | None] = (), work: str | None = None,
            forward: str | None = None) -> list[str]:
    network = ["--net"] if forward else []  # a network namespace of the run's own: the forwarder is its only way out
    layer = [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", *network, "--propagation",
             "private", "sh", "-c", _LAYER_SCRIPT, "sh", live, run, str(size), work or "", forward or ""]
    joined = [c for c in cgroups if c]
    if joined:
        return ["sh", "-c", _CGROUP_SCRIPT, "sh", *joined, "--", *layer]
    return layer


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
        live = tempfile.mkdtemp(prefix="skills-magic-live-", dir=_live_root())
        try:
            probe = subprocess.run(_layers(live, run, 1024 * 1024, work=lower) + ["sh", "-c", f"echo x > {lower}/new"],
                                   capture_output=True, text=True)
        finally:
            os.rmdir(live)
        made = os.path.exists(os.path.join(run, "changes", "new")) and not os.path.exists(os.path.join(lower, "new"))
    if probe.returncode != 0 or not made:
        reason = (probe.stderr.strip().splitlines() or ["the change did not arrive"])[-1]
        return False, (f"read-only in runs: no overlayfs in a user namespace here ({reason}); a Linux kernel 5.11 "
                       "or newer with unprivileged overlayfs makes it copy-on-write")
    return True, "copy-on-write: a run's writes land in its folder under .skills/runs/ until %skills apply"


def _live_root() -> str | None:
    """Where the run's tmpfs mount points go: /tmp, which every sandbox replaces with a fresh one (so the sandbox
    never sees them), else the default temp folder."""
    return "/tmp" if os.path.isdir("/tmp") else None


def seccomp_program(machine: str | None = None) -> bytes | None:
    """A classic BPF program (struct sock_filter[]) refusing socket(AF_UNIX, ...) and io_uring_setup with EPERM, and
    every syscall of a foreign ABI (x32, i386); None on a machine we have no numbers for."""
    numbers = _SECCOMP_ARCH.get(machine or platform.machine())
    if numbers is None:
        return None
    arch, socket_nr, io_uring_nr = numbers
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | _EPERM

    def op(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("<HBBI", code, jt, jf, k)

    program = [
        op(ld_w_abs, 0, 0, 4),  # 0: seccomp_data.arch
        op(jeq_k, 1, 0, arch),  # 1: our ABI: go on; else refuse
        op(ret_k, 0, 0, deny),  # 2
        op(ld_w_abs, 0, 0, 0),  # 3: seccomp_data.nr
        op(jge_k, 6, 0, 0x40000000),  # 4: x32 syscall numbers: refuse (jump to 11)
        op(jeq_k, 5, 0, io_uring_nr),  # 5: io_uring_setup: refuse (jump to 11)
        op(jeq_k, 1, 0, socket_nr),  # 6: socket: check its family
        op(ret_k, 0, 0, allow),  # 7
        op(ld_w_abs, 0, 0, 16),  # 8: args[0], low 32 bits (little-endian)
        op(jeq_k, 1, 0, AF_UNIX),  # 9: AF_UNIX: refuse
        op(ret_k, 0, 0, allow),  # 10
        op(ret_k, 0, 0, deny),  # 11
    ]
    return b"".join(program)


def home_masks(home: str, environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(absolute path, reason) for every entry of MASKS that exists here (both the path and, if it is a link, its
    target); environment-named entries only when the variable is set."""
    found: list[tuple[str, str]] = []
    for entry, reason in MASKS:
        if entry.startswith("$"):
            path = environ.get(entry[1:], "")
            if not path or not os.path.isabs(path):
                continue
        else:
            path = os.path.join(home, entry[2:])
        for candidate in dict.fromkeys((path, os.path.realpath(path))):
            if os.path.lexists(candidate) and candidate not in ("/", home):
                found.append((candidate, reason))
    runtime = os.path.join(environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "jupyter", "runtime")
    if os.path.isdir(runtime):
        found.append((runtime, "kernel connection files and server tokens"))
    return found


def env_files(folders: Sequence[str]) -> list[str]:
    """Every `.env*` and `.envrc` in each folder and its parents up to the repository root (the first folder with a
    `.git`), or the folder alone when it is in no repository."""
    found: list[str] = []
    for start in folders:
        chain, here = [], os.path.realpath(start)
        while True:
            chain.append(here)
            if os.path.exists(os.path.join(here, ".git")):
                break
            parent = os.path.dirname(here)
            if parent == here:
                chain = chain[:1]  # no repository: only the folder itself
                break
            here = parent
        for place in chain:
            try:
                names = os.listdir(place)
            except OSError:
                continue
            found += [os.path.join(place, n) for n in sorted(names) if ENV_FILE.match(n)]
    return list(dict.fromkeys(found))


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
        if not self.cgroup:
            return False
        try:
            with open(os.path.join(self.cgroup, "pids.events"), encoding="ascii") as handle:
                return any(line.split()[1] != "0" for line in handle if line.startswith("max "))
        except (OSError, IndexError):
            return False

    def memory_limit_hit(self) -> bool:
        """Whether the run's memory cgroup ran out (its OOM killer ended a process of the run)."""
        if not self.memory_cgroup:
            return False
        try:
            with open(os.path.join(self.memory_cgroup, "memory.oom_control"), encoding="ascii") as handle:
                killed = [line.split()[1] for line in handle if line.startswith("oom_kill ")]
            if killed:
                return killed[0] != "0"
            with open(os.path.join(self.memory_cgroup, "memory.failcnt"), encoding="ascii") as handle:
                return handle.read().strip() != "0"
        except (OSError, IndexError):
            return False

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
                _remove_cgroup(cgroup, CGROUP_EMPTY_SECONDS)


def _remove_cgroup(path: str, patience: float = 0.0) -> bool:
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


def _sweep_cgroups(root: str) -> None:
    """Empty cgroups an earlier run of ours could not remove in time (older than a minute: never one being set up)."""
    try:
        names = [n for n in os.listdir(root) if n.startswith("skills-magic-")]
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            if time.time() - os.stat(path).st_mtime > CGROUP_SWEEP_AGE_SECONDS:
                _remove_cgroup(path)
        except OSError:
            continue


def _memory_cgroup(limit: int) -> str | None:
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
    return _new_cgroup(root, {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit},
                       optional=("memory.memsw.limit_in_bytes",))


def _new_cgroup(root: str, settings: Mapping[str, int], optional: Sequence[str] = ()) -> str | None:
    """A cgroup of ours under `root` with each setting written (an `optional` one only where the file exists), or
    None, leaving nothing behind, where one cannot be made."""
    _sweep_cgroups(root)
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
        _remove_cgroup(path)
        return None


def _make_cgroup(limit: int) -> str | None:
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
        path = _new_cgroup(root, {"pids.max": limit})
        if path:
            return path
    return None


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
            working: bool = False, refusal=None) -> Box:
    """The sandbox for one run in `folder`, its outputs and changes kept in `run` (`run`/output is the scratch folder,
    `run`/changes and `run`/deleted what the run changed in `folder`). `working`: `folder` is the working folder,
    seen copy-on-write where that is possible (else read-only). `protected`: the project's control files (read-only
    whatever is granted); `skill_copy`: (private copy, the skill's real folder): the copy is what the process sees at
    the skill's path."""
    environ = os.environ if environ is None else environ
    home = os.path.realpath(home or os.path.expanduser("~"))
    limits = grants.limits
    scratch = os.path.join(run, "output")
    os.makedirs(scratch, exist_ok=True)
    work = os.path.realpath(folder) if working and overlay_availability()[0] else None
    live = tempfile.mkdtemp(prefix="skills-magic-live-", dir=_live_root())
    cgroup = _make_cgroup(limits.processes)
    memory_cgroup = _memory_cgroup(limits.memory)
    program = seccomp_program()
    seccomp_fd = None
    if program is not None:
        reader, writer = os.pipe()
        os.write(writer, program)  # a few hundred bytes: fits the pipe's buffer
        os.close(writer)
        seccomp_fd = reader
    proxy, forward = None, None
    if grants.hosts and not grants.network:
        from skills_magic.safety import netproxy

        socket_folder = tempfile.mkdtemp(prefix="skills-magic-proxy-", dir=_live_root())
        proxy = netproxy.NetworkProxy(netproxy.HostPatterns.parse(",".join(grants.hosts)),
                                      os.path.join(socket_folder, "proxy.sock"), refusal=refusal or netproxy.refusal_line)
        proxy.start()
        forward = netproxy.forwarder_shell(proxy.socket_path, port=netproxy.SANDBOX_PROXY_PORT)
    args = _layers(live, run, limits.write_bytes, (cgroup, memory_cgroup), work, forward)
    args += [shutil.which("prlimit") or "prlimit", f"--data={limits.memory}", f"--nproc={limits.processes}",
             f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + CPU_GRACE_SECONDS}", f"--fsize={limits.file_bytes}", "--core=0", "--"]
    args += [_bwrap(), "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--die-with-parent",
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
    hidden = [path for path, _reason in home_masks(home, environ)]
    hidden += env_files([folder, os.getcwd(), *([skill_copy[1]] if skill_copy else [])])
    for path in dict.fromkeys(hidden):
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in protected:  # last: no grant makes the project's control files writable
        if os.path.exists(path):
            args += ["--ro-bind", os.path.realpath(path), os.path.realpath(path)]
    args += ["--bind", os.path.join(live, "scratch"), os.path.realpath(scratch)]  # inside .skills/, after it
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--setenv", "TMPDIR", os.path.realpath(scratch), "--setenv", "SKILLS_MAGIC_OUTPUT", os.path.realpath(scratch),
             *[item for name, value in proxy_env(proxy, grants.hosts) for item in ("--setenv", name, value)],
             *[item for name, value in CACHE_ENVIRONMENT for item in ("--setenv", name, value)],
             "--setenv", "PYTHONDONTWRITEBYTECODE", "1",  # and the skill is its private copy: no __pycache__ there
             "--chdir", os.path.realpath(folder)]
    return Box(folder, scratch, grants, live, cgroup, seccomp_fd, args, run, work, proxy, memory_cgroup)


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
