"""Network by host name (issue 13): a sandboxed run reaches exactly the hosts it was granted, over HTTP and HTTPS.

The run's network namespace has only a loopback interface. In it, before bubblewrap starts, the FORWARDER
(`forwarder_command`, the stdlib program `network/forwarder.py`) brings `lo` up, listens on 127.0.0.1:PORT and relays
every connection byte-for-byte to a unix socket on the host filesystem, where the PROXY (`NetworkProxy`, threads in
the kernel's process, on the host's network) lets through only what the grant (`HostPatterns`) covers and refuses
the rest with one line naming the grant that would allow it (`refusal_line`). The script is pointed at the forwarder
by `proxy_environment(port)`.

This module wires a run to its grant: the forwarder's command line and the script's proxy variables. The parts live
in `skills_magic.safety.network`: `hosts` (patterns and address checks), `protocol`, `relay` and `proxy`.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import shlex
import sys

from skills_magic.safety import network
# re-exported: its home before the split
from skills_magic.safety.network.hosts import (  # noqa: F401
    FORBIDDEN_FOR_NAMES,
    REFUSED_PATTERNS,
    HostPattern,
    HostPatterns,
    InvalidHostPattern,
    grant_for,
    host_allowed,
    normalise_host,
    parse_pattern,
)
# re-exported: its home before the split
from skills_magic.safety.network.protocol import MAX_HEADER_BYTES  # noqa: F401
# re-exported: its home before the split
from skills_magic.safety.network.proxy import (  # noqa: F401
    CLOSE_JOIN_SECONDS,
    CONNECT_TIMEOUT_SECONDS,
    HEADER_TIMEOUT_SECONDS,
    IDLE_TIMEOUT_SECONDS,
    MAX_CONNECTIONS,
    UNIX_PATH_MAX,
    NetworkProxy,
    NetworkProxyError,
    refusal_line,
)
# re-exported: its home before the split
from skills_magic.safety.network.relay import RELAY_CHUNK  # noqa: F401

SANDBOX_PROXY_PORT = 3128  # the forwarder's port in a run's own fresh network namespace, where every port is free

# The forwarder's program text, passed with `-c`: it runs by itself in the run's namespace, not as an import.
FORWARDER_SOURCE = importlib.resources.files(network).joinpath("forwarder.py").read_text(encoding="utf-8")


def proxy_environment(port: int) -> dict[str, str]:
    """The variables pointing a sandboxed script at the forwarder on 127.0.0.1:`port`. ALL_PROXY too: a tool that
    honours only it (curl for other schemes, git) then gets the proxy's clear answer instead of 'network unreachable';
    NO_PROXY empty, so a NO_PROXY inherited from the host cannot send a client around the proxy into no route."""
    url = f"http://127.0.0.1:{port}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    env = {name: url for name in names} | {name.lower(): url for name in names}
    return env | {"NO_PROXY": "", "no_proxy": ""}


def forwarder_command(port: int, socket_path: str | os.PathLike, watch_pid: int | None = None,
                      python: str | None = None) -> list[str]:
    """The forwarder's argv: it listens on 127.0.0.1:`port` (0: any free port) and relays to `socket_path`, prints the
    port on stdout once listening, then runs on as a daemon until SIGTERM/SIGINT/SIGHUP or until `watch_pid` ends."""
    argv = [python or sys.executable, "-I", "-S", "-c", FORWARDER_SOURCE, str(int(port)), os.fspath(socket_path)]
    return argv + ([str(int(watch_pid))] if watch_pid else [])


def forwarder_shell(socket_path: str | os.PathLike, variable: str = "proxy_port", port: int = 0,
                    python: str | None = None) -> str:
    """A line of `sh` starting the forwarder, watching the shell running it (`$$`), with the port in `$variable`;
    the shell exits 1 (the forwarder's reason on stderr) if it cannot start."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", variable):
        raise ValueError(f"{variable!r} is not a shell variable name")
    argv = " ".join(shlex.quote(part) for part in forwarder_command(port, socket_path, python=python))
    return f'{variable}=$({argv} "$$") || exit 1'
