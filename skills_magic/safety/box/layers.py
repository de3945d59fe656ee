"""The layers around bubblewrap, outermost first: the run's cgroups joined, then a mount namespace of our own
(util-linux `unshare`) holding one size-limited tmpfs for every write of the run, the working folder's overlay
(copy-on-write) and the network forwarder; bwrap runs inside. When bwrap exits, the layer copies the scratch folder
and the overlay's changes out to the run's folder."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

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


def layer_argv(live: str, run: str, size: int, cgroups: Sequence[str | None] = (), work: str | None = None,
               forward: str | None = None) -> list[str]:
    """The argv prefix that runs a command inside the layers: `live` the tmpfs mount point, `run` the run's folder,
    `size` the write limit, `cgroups` those to join, `work` the working folder to overlay, `forward` the line that
    starts the network forwarder (and with it, a network namespace of the run's own)."""
    network = ["--net"] if forward else []  # a network namespace of the run's own: the forwarder is its only way out
    layer = [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", *network, "--propagation",
             "private", "sh", "-c", _LAYER_SCRIPT, "sh", live, run, str(size), work or "", forward or ""]
    joined = [c for c in cgroups if c]
    if joined:
        return ["sh", "-c", _CGROUP_SCRIPT, "sh", *joined, "--", *layer]
    return layer


def bwrap() -> str:
    return shutil.which("bwrap") or "bwrap"


def live_root() -> str | None:
    """Where the run's tmpfs mount points go: /tmp, which every sandbox replaces with a fresh one (so the sandbox
    never sees them), else the default temp folder."""
    return "/tmp" if os.path.isdir("/tmp") else None
