"""Network by host name (issue 13): a sandboxed run reaches exactly the hosts it was granted, over HTTP and HTTPS.

The run's network namespace has only a loopback interface. In it, before bubblewrap starts, the FORWARDER
(`forwarder_command`, a stdlib program) brings `lo` up, listens on 127.0.0.1:PORT and relays every connection
byte-for-byte to a unix socket on the host filesystem, where the PROXY (`NetworkProxy`, threads in the kernel's
process, on the host's network) speaks the HTTP proxy protocol: `CONNECT host:port` tunnels (HTTPS, anything else
tunnelled) and absolute-form plain HTTP requests. A host the grant (`HostPatterns`) does not cover is refused at once
with 403 and one line naming the host and the grant that would allow it (`refusal_line`); nothing is resolved or
connected for it. The script is pointed at the forwarder by `proxy_environment(port)`.

Pattern semantics (`parse_pattern`):
- `pypi.org`: that host exactly; case-insensitive, a trailing dot ignored, international names compared in their
  IDNA (punycode) form, so `bücher.example` and `xn--bcher-kva.example` are one host.
- `*.example.org`: any subdomain at any depth (`a.example.org`, `a.b.example.org`) but NOT `example.org` itself, as
  in Claude Code's sandbox; grant both to get both. A wildcard needs a domain of two labels or more (`*.org` refused).
- `127.0.0.1`, `::1`, `[::1]`: that address exactly (no ranges); a host name never matches an address pattern.
- any of these with `:PORT` (IPv6 as `[::1]:443`): that port only; without a port, any port.
`REFUSED_PATTERNS` lists what is refused, with an example of each.

A granted host NAME must not lead to this machine or its cloud: if it resolves only to loopback, link-local (the
cloud metadata service at 169.254.169.254), unspecified or multicast addresses, the request is refused; granting
the address itself (and using it in the URL) is the way to reach those on purpose.
"""

from __future__ import annotations

import encodings.idna
import errno
import ipaddress
import os
import re
import select
import selectors
import shlex
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from skills_magic.errors import SkillsMagicError

# --- tuning -----------------------------------------------------------------------------------------------------------
MAX_CONNECTIONS = 64  # pip or a requests pool opens a handful at once; past this a runaway script gets 503, not threads
HEADER_TIMEOUT_SECONDS = 10.0  # a client that connects and stalls before its request is complete frees its slot
MAX_HEADER_BYTES = 64 * 1024  # real request heads are under 8 KiB; anything bigger is a mistake or an attack
CONNECT_TIMEOUT_SECONDS = 10.0  # a granted host that does not answer gets 502 instead of hanging the script
IDLE_TIMEOUT_SECONDS = 300.0  # a tunnel silent both ways this long is closed; a flowing download never idles
RELAY_CHUNK = 64 * 1024  # bytes per recv, and the most held per direction, so a slow reader slows its writer
CLOSE_JOIN_SECONDS = 2.0  # close() waits this long for connection threads; they are daemons, so none outlives the kernel
SANDBOX_PROXY_PORT = 3128  # the forwarder's port in a run's own fresh network namespace, where every port is free
UNIX_PATH_MAX = 107  # sun_path is 108 bytes on Linux, one of them the terminating NUL

# Where a granted host NAME may not lead (checked on every address it resolves to); an address grant may.
FORBIDDEN_FOR_NAMES = ("loopback", "link-local", "unspecified", "multicast")

# What `parse_pattern` refuses: (an example, why). Tests check every one.
REFUSED_PATTERNS = (
    ("", "an empty pattern (a doubled or trailing comma)"),
    ("*", "'*' alone would grant every host"),
    ("*foo.org", "'*' must be a whole first label followed by a dot, as in *.example.org"),
    ("foo.*.org", "'*' may only be the first label"),
    ("*.org", "a wildcard over a top-level domain"),
    ("*.127.0.0.1", "a wildcard over an address"),
    ("https://pypi.org/", "a URL instead of a host"),
    ("pypi.org/simple", "a path after the host"),
    ("user@pypi.org", "user information"),
    ("pypi .org", "whitespace inside a pattern"),
    ("pypi.org:", "an empty port"),
    ("pypi.org:0", "a port outside 1-65535"),
    ("pypi.org:https", "a port that is not a number"),
    ("-pypi.org", "a label starting or ending with a hyphen"),
    ("pypi..org", "an empty label"),
    ("127.1", "a name ending in a number (an abbreviated address)"),
    ("[pypi.org]:443", "brackets around something that is not an IPv6 address"),
)

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE_BREAK = re.compile(r"\r?\n")
_DOTS = ("\u3002", "\uff0e", "\uff61")  # ideographic and full-width full stops separate labels in IDNA
_HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "te",
               "trailer", "upgrade", "host"}  # Host is rewritten from the URL; the rest concern the client's hop only


class InvalidHostPattern(SkillsMagicError, ValueError):
    """A `--network` host pattern that is not a host, a `*.domain` wildcard or an address, with an optional port."""

    def __init__(self, pattern: str, why: str):
        self.pattern = pattern
        self.why = why
        super().__init__(f"invalid network host pattern {pattern!r}: {why}")


class NetworkProxyError(SkillsMagicError, OSError):
    """The proxy cannot listen on its unix socket."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"the network proxy cannot listen on {path}: {reason}")


# --- host names and patterns ------------------------------------------------------------------------------------------
def _name(text: str, pattern: str) -> str:
    """The canonical form of a host name (lower-case IDNA A-labels, no trailing dot); InvalidHostPattern if none."""
    for dot in _DOTS:
        text = text.replace(dot, ".")
    text = text.removesuffix(".")
    if not text:
        raise InvalidHostPattern(pattern, "no host name")
    labels = []
    for label in text.split("."):
        if not label:
            raise InvalidHostPattern(pattern, "an empty label (two dots in a row, or a leading dot)")
        if label.isascii():
            ascii_label = label.lower()
        else:
            try:
                ascii_label = encodings.idna.ToASCII(label).decode("ascii").lower()
            except UnicodeError as error:
                raise InvalidHostPattern(pattern, f"{label!r} is not a valid international label ({error})") from None
        if not _LABEL.fullmatch(ascii_label):
            raise InvalidHostPattern(pattern, f"{label!r} is not a host name label (letters, digits, hyphens and "
                                              "underscores, 1 to 63 of them, not starting or ending with a hyphen)")
        labels.append(ascii_label)
    if labels[-1].isdigit():
        raise InvalidHostPattern(pattern, "a host name cannot end in a number; write an address in full "
                                          "(e.g. 127.0.0.1)")
    name = ".".join(labels)
    if len(name) > 253:
        raise InvalidHostPattern(pattern, "a host name is at most 253 characters")
    return name


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text[:-1] if text.endswith(".") and ":" not in text else text)
    except ValueError:
        return None


def normalise_host(host: str) -> str:
    """The canonical form of a host (an address in `ipaddress` form, a name as lower-case punycode without trailing
    dot) as patterns compare it; ValueError (InvalidHostPattern) when it is neither."""
    if host.startswith("[") and host.endswith("]"):
        address = _address(host[1:-1])
        if not isinstance(address, ipaddress.IPv6Address):
            raise InvalidHostPattern(host, "brackets hold an IPv6 address only")
        return str(address)
    address = _address(host)
    if address is not None:
        return str(address)
    if any(ch.isspace() for ch in host) or any(ch in host for ch in "/:@[]*?#%\\"):
        raise InvalidHostPattern(host, "not a host name or an address")
    return _name(host, host)


def _split_port(text: str, pattern: str) -> tuple[str, int | None]:
    """`host[:port]`, `[v6][:port]` or a bare IPv6 address -> (host, port or None)."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise InvalidHostPattern(pattern, "an unclosed '['")
        host, rest = text[1:close], text[close + 1:]
        if not isinstance(_address(host), ipaddress.IPv6Address):
            raise InvalidHostPattern(pattern, "brackets hold an IPv6 address only")
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise InvalidHostPattern(pattern, "after ']' only ':PORT' may follow")
        return host, _port(rest[1:], pattern)
    if text.count(":") > 1:  # a bare IPv6 address; give it a port in brackets
        return text, None
    if ":" in text:
        host, port = text.split(":")
        return host, _port(port, pattern)
    return text, None


def _port(text: str, pattern: str) -> int:
    if not text:
        raise InvalidHostPattern(pattern, "an empty port after ':'")
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 65535:
        raise InvalidHostPattern(pattern, f"port {text!r} is not a number from 1 to 65535")
    return int(text)


@dataclass(frozen=True)
class HostPattern:
    """One granted pattern, canonical: `host` is a name (the domain after `*.` for a wildcard) or an address."""

    host: str
    wildcard: bool = False
    port: int | None = None
    is_address: bool = False

    def matches(self, host: str, port: int | None) -> bool:
        """`host` canonical (`normalise_host`); `port` None means 'on any port', which only a port-less pattern grants."""
        if self.port is not None and self.port != port:
            return False
        if self.is_address:
            return host == self.host
        if self.wildcard:
            return host.endswith("." + self.host) and _address(host) is None
        return host == self.host

    def __str__(self) -> str:
        host = f"*.{self.host}" if self.wildcard else self.host
        return host if self.port is None else grant_for(host, self.port)


def parse_pattern(text: str) -> HostPattern:
    """One pattern (see the module's docstring); InvalidHostPattern (a ValueError) saying what is wrong."""
    pattern = text
    text = text.strip()
    if not text:
        raise InvalidHostPattern(pattern, "empty (a doubled or trailing comma?)")
    if any(ch.isspace() for ch in text):
        raise InvalidHostPattern(pattern, "whitespace inside a pattern; separate patterns with commas only")
    if "://" in text:
        host = text.split("://", 1)[1].split("/", 1)[0]
        raise InvalidHostPattern(pattern, f"a URL, not a host; give the host alone: {host}")
    for ch, what in (("/", "a path"), ("?", "a query"), ("#", "a fragment")):
        if ch in text:
            raise InvalidHostPattern(pattern, f"{what} after the host; give the host alone: {text.split(ch, 1)[0]}")
    if "@" in text:
        raise InvalidHostPattern(pattern, "user information ('@'); give the host alone")
    host, port = _split_port(text, pattern)
    if host == "*" or host == "*.":
        raise InvalidHostPattern(pattern, "'*' alone would grant every host; name the hosts, or use *.DOMAIN")
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if "*" in host:
        raise InvalidHostPattern(pattern, "'*' may only be the whole first label, followed by a dot, as in "
                                          "*.example.org")
    address = _address(host)
    if address is not None:
        if wildcard:
            raise InvalidHostPattern(pattern, "a wildcard covers names, not addresses; give the address alone")
        return HostPattern(str(address), port=port, is_address=True)
    name = _name(host, pattern)
    if wildcard and "." not in name:
        raise InvalidHostPattern(pattern, f"*.{name} would grant a whole top-level domain; name the domain, "
                                          f"e.g. *.example.{name}")
    return HostPattern(name, wildcard=wildcard, port=port)


class HostPatterns:
    """The hosts a run may reach: the union of its grants' patterns (`HostPatterns.parse("pypi.org,*.crossref.org")`)."""

    def __init__(self, patterns: Iterable[HostPattern] = ()):
        self.patterns = tuple(dict.fromkeys(patterns))

    @classmethod
    def parse(cls, grants: str | Iterable[str]) -> HostPatterns:
        """One grant ("a,b,*.c") or several; InvalidHostPattern on the first invalid pattern."""
        if isinstance(grants, str):
            grants = [grants]
        return cls(parse_pattern(part) for grant in grants for part in grant.split(","))

    def match(self, host: str, port: int | None = None) -> HostPattern | None:
        """The first pattern granting `host` (canonical) on `port` (None: on any port), or None."""
        return next((p for p in self.patterns if p.matches(host, port)), None)

    def allows(self, host: str, port: int | None = None) -> bool:
        """`host` in any form (normalised here; one that is not a host is not allowed)."""
        try:
            return self.match(normalise_host(host), port) is not None
        except ValueError:
            return False

    def granted_on_another_port(self, host: str) -> bool:
        """`host` (canonical) is granted, but only on ports named in its patterns."""
        return any(p.port is not None and p.matches(host, p.port) for p in self.patterns)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def __iter__(self):
        return iter(self.patterns)

    def __len__(self) -> int:
        return len(self.patterns)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostPatterns) and set(self.patterns) == set(other.patterns)

    def __hash__(self) -> int:
        return hash(frozenset(self.patterns))

    def __str__(self) -> str:
        return ",".join(str(p) for p in self.patterns)

    def __repr__(self) -> str:
        return f"HostPatterns({str(self)!r})"


def host_allowed(host: str, patterns: HostPatterns | str | Iterable[str], port: int | None = None) -> bool:
    """Whether `patterns` (parsed if given as grant text) grant `host` on `port` (None: on any port)."""
    if not isinstance(patterns, HostPatterns):
        patterns = HostPatterns.parse(patterns)
    return patterns.allows(host, port)


def grant_for(host: str, port: int | None = None) -> str:
    """The `--network` pattern granting exactly `host` (on `port`, when given)."""
    if port is None:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def refusal_line(host: str, port: int | None = None) -> str:
    """The one line a refused request gets (403 reason, body and the run's result). `port` is given only when the host
    is granted on other ports, so the line names the port and the grant includes it."""
    if port is None:
        return f"skills_magic: host {host} is not granted to this run; allow it with --network {grant_for(host)}"
    return (f"skills_magic: host {host} port {port} is not granted to this run; "
            f"allow it with --network {grant_for(host, port)}")


def proxy_environment(port: int) -> dict[str, str]:
    """The variables pointing a sandboxed script at the forwarder on 127.0.0.1:`port`. ALL_PROXY too: a tool that
    honours only it (curl for other schemes, git) then gets the proxy's clear answer instead of 'network unreachable';
    NO_PROXY empty, so a NO_PROXY inherited from the host cannot send a client around the proxy into no route."""
    url = f"http://127.0.0.1:{port}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    env = {name: url for name in names} | {name.lower(): url for name in names}
    return env | {"NO_PROXY": "", "no_proxy": ""}


# --- the proxy --------------------------------------------------------------------------------------------------------
class _Answer(Exception):
    """Stop handling this connection after answering it with `status`."""

    def __init__(self, status: int, kind: str, line: str):
        self.status, self.kind, self.line = status, kind, line
        super().__init__(line)


class _ClientGone(Exception):
    """The client closed before sending a whole request: nothing to answer."""


def _printable(text: str) -> str:
    return "".join(ch if " " <= ch <= "~" else "?" for ch in text)


def _response(status: int, kind: str, line: str) -> bytes:
    """A complete, closing response. The reason phrase is the line itself: clients show it when a CONNECT fails
    ('Tunnel connection failed: 403 skills_magic: host ...'), where a body would never be seen."""
    line = _printable(line)
    body = (line + "\n").encode("ascii")
    return (f"HTTP/1.1 {status} {line}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\nX-Skills-Magic: {kind}\r\n\r\n").encode("ascii") + body


def _bad(why: str) -> _Answer:
    return _Answer(400, "bad-request", f"skills_magic: the network proxy cannot read this request: {why}")


def _read_head(conn: socket.socket, timeout: float) -> tuple[bytes, bytes]:
    """The request head (without its blank line) and whatever followed it; _Answer(400) on anything not HTTP."""
    deadline = time.monotonic() + timeout
    buf = bytearray()
    checked_line = False
    while True:
        end = _HEAD_END.search(buf)
        if end:
            return bytes(buf[:end.start()]), bytes(buf[end.end():])
        if len(buf) > MAX_HEADER_BYTES:
            raise _bad(f"its head is over {MAX_HEADER_BYTES // 1024} KiB")
        newline = buf.find(b"\n")
        first = buf if newline < 0 else buf[:newline].rstrip(b"\r")
        if any(not 32 <= b <= 126 for b in first):  # answer TLS or other binary bytes at once, not at the timeout
            raise _bad("it is not HTTP (binary bytes in the request line)")
        if newline >= 0 and not checked_line:
            _request_line(first.decode("ascii"))
            checked_line = True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _bad(f"it was not complete within {timeout:g} seconds")
        conn.settimeout(remaining)
        try:
            data = conn.recv(RELAY_CHUNK)
        except TimeoutError:
            raise _bad(f"it was not complete within {timeout:g} seconds") from None
        if not data:
            raise _ClientGone()
        buf += data


def _request_line(line: str) -> tuple[str, str, str]:
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise _bad(f"the request line {line[:80]!r} is not 'METHOD TARGET HTTP/1.1'")
    if parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise _bad(f"{parts[2][:20]!r} is not HTTP/1.0 or HTTP/1.1")
    return parts[0], parts[1], parts[2]


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    lines = _LINE_BREAK.split(head.decode("latin-1"))
    method, target, version = _request_line(lines[0])
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise _bad(f"the header line {line[:80]!r} is not 'Name: value'")
        value = value.strip(" \t")
        if any(ord(ch) < 32 and ch != "\t" or ord(ch) == 127 for ch in value):
            raise _bad(f"the header {name} holds control characters")
        headers.append((name, value))
    return method, target, version, headers


def _authority(text: str) -> tuple[str, int]:
    """A CONNECT target `host:port` or `[v6]:port` -> (canonical host, port)."""
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise _bad(f"CONNECT needs host:port, not {text[:80]!r}")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise _bad(f"{port[:20]!r} is not a port")
    try:
        return normalise_host(host), int(port)
    except ValueError:
        raise _bad(f"{host[:80]!r} is not a host name or an address") from None


def _forbidden_kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    mapped = getattr(address, "ipv4_mapped", None)
    for candidate in (address, mapped) if mapped else (address,):
        for kind in FORBIDDEN_FOR_NAMES:
            if getattr(candidate, "is_" + kind.replace("-", "_")):
                return kind
    return None


def _relay(a: socket.socket, b: socket.socket, idle: float, wake_fd: int, to_b: bytes = b"",
           end_with_b: bool = False) -> None:
    """Copy bytes both ways until both sides have finished (each end-of-file passed on as a half-close), `idle`
    seconds pass with no byte either way, either side fails, or `wake_fd` becomes readable (the proxy closes).
    `end_with_b`: stop as soon as b has finished and its bytes are delivered (a plain-HTTP response)."""
    a.setblocking(False)
    b.setblocking(False)
    peer = {a: b, b: a}
    out = {a: bytearray(), b: bytearray(to_b)}  # bytes waiting to be written TO that socket
    eof = {a: False, b: False}
    shut = {a: False, b: False}
    interest = {a: 0, b: 0}
    selector = selectors.DefaultSelector()
    selector.register(wake_fd, selectors.EVENT_READ, None)
    last = time.monotonic()
    try:
        while True:
            for s in (a, b):
                if eof[peer[s]] and not out[s] and not shut[s]:
                    try:
                        s.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    shut[s] = True
            if eof[a] and eof[b] and not out[a] and not out[b]:
                return
            if end_with_b and eof[b] and not out[a]:
                return
            for s in (a, b):
                events = (selectors.EVENT_READ if not eof[s] and len(out[peer[s]]) < RELAY_CHUNK else 0) | (
                    selectors.EVENT_WRITE if out[s] else 0)
                if events != interest[s]:
                    if not interest[s]:
                        selector.register(s, events)
                    elif not events:
                        selector.unregister(s)
                    else:
                        selector.modify(s, events)
                    interest[s] = events
            remaining = last + idle - time.monotonic()
            if remaining <= 0:
                return
            for key, mask in selector.select(remaining):
                if key.data is None and key.fileobj == wake_fd:
                    return
                s = key.fileobj
                if mask & selectors.EVENT_READ:
                    try:
                        data = s.recv(RELAY_CHUNK)
                    except (BlockingIOError, InterruptedError):
                        data = None
                    if data is not None:
                        if data:
                            out[peer[s]] += data
                            last = time.monotonic()
                        else:
                            eof[s] = True
                if mask & selectors.EVENT_WRITE and out[s]:
                    try:
                        sent = s.send(out[s])
                    except (BlockingIOError, InterruptedError):
                        sent = 0
                    del out[s][:sent]
                    last = time.monotonic()
    except OSError:  # a reset or a broken pipe on either side ends the relay; the caller closes both
        return
    finally:
        selector.close()


class NetworkProxy:
    """An HTTP proxy on the unix socket `socket_path` letting through only the hosts `patterns` grant.

    `start()` (or `with`) listens; `close()` stops it, ends open tunnels and removes the socket file. Thread-safe
    records for the run's result: `refused` (the `--network` grants that would have allowed what was refused, first
    seen first), `reached` (the hosts connected), `unreachable` (granted hosts that could not be reached: reason).
    Nothing a client sends makes it raise: bad input gets 400 and the connection is closed."""

    def __init__(self, patterns: HostPatterns | str | Iterable[str], socket_path: str | os.PathLike, *,
                 refusal: Callable[[str, int | None], str] = refusal_line, max_connections: int = MAX_CONNECTIONS,
                 header_timeout: float = HEADER_TIMEOUT_SECONDS, connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
                 idle_timeout: float = IDLE_TIMEOUT_SECONDS):
        self.patterns = patterns if isinstance(patterns, HostPatterns) else HostPatterns.parse(patterns)
        self.socket_path = os.fspath(socket_path)
        self.refusal = refusal
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._refused: dict[str, None] = {}
        self._reached: dict[str, None] = {}
        self._unreachable: dict[str, str] = {}
        self._connections: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._wake_r = self._wake_w = -1
        self._acceptor: threading.Thread | None = None
        self._closed = False

    # records
    @property
    def refused(self) -> list[str]:
        with self._lock:
            return list(self._refused)

    @property
    def reached(self) -> list[str]:
        with self._lock:
            return list(self._reached)

    @property
    def unreachable(self) -> dict[str, str]:
        with self._lock:
            return dict(self._unreachable)

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def suggested_grant(self) -> str:
        """The `--network` value allowing everything refused so far ('' when nothing was)."""
        return ",".join(self.refused)

    # life cycle
    def start(self) -> NetworkProxy:
        if self._listener is not None:
            return self
        if self._closed:
            raise NetworkProxyError(self.socket_path, "this proxy was closed; make a new one")
        if len(os.fsencode(self.socket_path)) > UNIX_PATH_MAX:
            raise NetworkProxyError(self.socket_path, f"the path is over the {UNIX_PATH_MAX} bytes a unix socket "
                                                      "allows; use a shorter folder")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            os.fchmod(listener.fileno(), 0o600)  # Linux: the mode the socket file gets at bind, so no window
            listener.bind(self.socket_path)
            os.chmod(self.socket_path, 0o600)
            info = os.stat(self.socket_path)
            self._inode = (info.st_dev, info.st_ino)
            listener.listen(128)
            listener.setblocking(False)
        except OSError as error:
            listener.close()
            raise NetworkProxyError(self.socket_path, error.strerror or str(error)) from None
        self._listener = listener
        self._wake_r, self._wake_w = os.pipe()
        self._acceptor = threading.Thread(target=self._accept_loop, name="skills-magic-proxy", daemon=True)
        self._acceptor.start()
        return self

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._listener is None:
            return
        os.write(self._wake_w, b"x")  # wakes the accept loop and every relay; nobody reads it, so it stays readable
        self._acceptor.join(CLOSE_JOIN_SECONDS)
        self._listener.close()
        with self._lock:  # after the accept loop ended: no connection can be added any more
            connections = list(self._connections)
        try:
            info = os.stat(self.socket_path)
            if (info.st_dev, info.st_ino) == self._inode and stat.S_ISSOCK(info.st_mode):
                os.unlink(self.socket_path)
        except OSError:
            pass
        for conn in connections:  # wakes threads blocked reading a request head
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + CLOSE_JOIN_SECONDS
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if not any(thread.is_alive() for thread in threads):  # else a straggler may still select on the pipe
            os.close(self._wake_r)
            os.close(self._wake_w)

    def __enter__(self) -> NetworkProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # serving
    def _accept_loop(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._closed:
                ready = [key.fileobj for key, _ in selector.select()]
                if self._wake_r in ready or self._closed:
                    return
                try:
                    conn, _ = self._listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as error:
                    if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        select.select([self._wake_r], [], [], 0.05)  # out of descriptors: let connections end
                    continue
                self._admit(conn)
        except Exception:  # never let the kernel's thread die with a traceback; the socket just stops answering
            return
        finally:
            selector.close()

    def _admit(self, conn: socket.socket) -> None:
        with self._lock:
            full = len(self._connections) >= self.max_connections
            if not full:
                self._connections.add(conn)
        if full:
            try:
                conn.setblocking(False)
                conn.send(_response(503, "busy", f"skills_magic: over {self.max_connections} connections at once "
                                                 "through the network proxy; retry when some have finished"))
            except OSError:
                pass
            conn.close()
            return
        thread = threading.Thread(target=self._handle, args=(conn,), name="skills-magic-proxy-conn", daemon=True)
        with self._lock:
            self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError:  # no more threads: answer like a full proxy
            with self._lock:
                self._threads.discard(thread)
                self._connections.discard(conn)
            conn.close()

    def _handle(self, conn: socket.socket) -> None:
        held: dict[str, socket.socket] = {}  # the upstream, once connected: bytes may flow, so no answer may follow
        try:
            self._serve(conn, held)
        except _Answer as answer:
            self._answer(conn, answer)
        except (_ClientGone, OSError):
            pass
        except Exception as error:  # a bug of ours: say so in the one line rather than hang up without a word
            if not held:
                self._answer(conn, _Answer(500, "error", f"skills_magic: the network proxy failed on this request "
                                                         f"({type(error).__name__})"))
        finally:
            for s in (conn, held.get("upstream")):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass
            with self._lock:
                self._connections.discard(conn)
                self._threads.discard(threading.current_thread())

    @staticmethod
    def _answer(conn: socket.socket, answer: _Answer) -> None:
        try:
            conn.settimeout(5)
            conn.sendall(_response(answer.status, answer.kind, answer.line))
        except OSError:
            pass

    def _serve(self, conn: socket.socket, held: dict[str, socket.socket]) -> None:
        head, rest = _read_head(conn, self.header_timeout)
        method, target, version, headers = _parse_head(head)
        if method == "CONNECT":
            host, port = _authority(target)
        else:
            host, port, origin_target, authority = self._absolute(target)
        self._check(host, port)
        upstream = held["upstream"] = self._connect(host, port)
        if self._closed:  # closed while connecting: say nothing more
            return
        if method == "CONNECT":
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            _relay(conn, upstream, self.idle_timeout, self._wake_r, to_b=rest)
            return
        listed = {n.strip().lower() for name, value in headers if name.lower() == "connection" for n in value.split(",")}
        lines = [f"{method} {origin_target} {version}", f"Host: {authority}"]
        lines += [f"{name}: {value}" for name, value in headers
                  if name.lower() not in _HOP_BY_HOP and name.lower() not in listed]
        lines.append("Connection: close")
        _relay(conn, upstream, self.idle_timeout, self._wake_r,
               to_b=("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + rest, end_with_b=True)

    @staticmethod
    def _absolute(target: str) -> tuple[str, int, str, str]:
        """An absolute-form target -> (canonical host, port, origin-form target, authority for Host)."""
        if target.startswith("/") or target == "*":
            raise _bad("the request line has no host (a path alone); a proxy needs the absolute URL, "
                       "e.g. GET http://host/path")
        scheme, sep, rest = target.partition("://")
        if not sep:
            raise _bad(f"{target[:80]!r} is not an absolute http:// URL")
        if scheme.lower() == "https":
            raise _bad("https:// is tunnelled: send CONNECT host:443 first")
        if scheme.lower() != "http":
            raise _bad(f"only http:// URLs and CONNECT are proxied, not {scheme[:20]}://")
        cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
        authority, path = rest[:cut], rest[cut:]
        authority = authority.rpartition("@")[2]
        if authority.startswith("["):
            host, _, port_text = authority[1:].partition("]")
            port_text = port_text.removeprefix(":")
        else:
            host, _, port_text = authority.partition(":")
        if port_text and not (port_text.isascii() and port_text.isdigit() and 1 <= int(port_text) <= 65535):
            raise _bad(f"{port_text[:20]!r} is not a port")
        if not host:
            raise _bad("the URL has no host")
        try:
            canonical = normalise_host(host)
        except ValueError:
            raise _bad(f"{host[:80]!r} is not a host name or an address") from None
        path = path.partition("#")[0]
        if not path.startswith("/"):
            path = "/" + path
        return canonical, int(port_text or 80), path, authority

    def _check(self, host: str, port: int) -> None:
        if self.patterns.match(host, port) is not None:
            return
        grant_port = port if self.patterns.granted_on_another_port(host) else None
        with self._lock:
            self._refused.setdefault(grant_for(host, grant_port))
        raise _Answer(403, "refused", self.refusal(host, grant_port))

    def _unreachable_answer(self, host: str, port: int, status: int, kind: str, reason: str) -> _Answer:
        with self._lock:
            self._unreachable.setdefault(host, reason)
        return _Answer(status, kind, f"skills_magic: cannot reach {grant_for(host, port)}: {reason}")

    def _connect(self, host: str, port: int) -> socket.socket:
        """A TCP connection from the host's network to a granted host, resolved here (the sandbox has no DNS)."""
        is_address = _address(host) is not None
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_NUMERICHOST if is_address else 0)
        except socket.gaierror as error:
            raise self._unreachable_answer(host, port, 502, "unreachable",
                                           f"no such host ({error.strerror})") from None
        if not infos:
            raise self._unreachable_answer(host, port, 502, "unreachable", "the name has no address")
        if not is_address:
            allowed, forbidden = [], ("", "")
            for info in infos:
                kind = _forbidden_kind(ipaddress.ip_address(info[4][0].partition("%")[0]))
                if kind is None:
                    allowed.append(info)
                else:
                    forbidden = (info[4][0], kind)
            if not allowed:
                address, kind = forbidden
                raise self._unreachable_answer(
                    host, port, 403, "refused",
                    f"the name resolves to {address}, a {kind} address, where a granted name may not lead; "
                    f"to reach it on purpose, grant --network {grant_for(address, port)} and use the address")
            infos = allowed
        last_error: OSError | None = None
        for family, type_, proto, _name_, address in infos:
            upstream = socket.socket(family, type_, proto)
            upstream.settimeout(self.connect_timeout)
            try:
                upstream.connect(address)
            except OSError as error:
                upstream.close()
                last_error = error
                continue
            upstream.settimeout(None)
            with self._lock:
                self._reached.setdefault(host)
            return upstream
        if isinstance(last_error, TimeoutError) or (last_error and last_error.errno == errno.ETIMEDOUT):
            reason = f"no answer within {self.connect_timeout:g} seconds"
        else:
            reason = (last_error.strerror or str(last_error)).lower() if last_error else "no address"
        raise self._unreachable_answer(host, port, 502, "unreachable", reason)


# --- the forwarder ----------------------------------------------------------------------------------------------------
# A stdlib program run with `python -I -S -c FORWARDER_SOURCE PORT SOCKET_PATH [WATCH_PID]` in the run's network
# namespace, outside bubblewrap and its seccomp filter. It never imports skills_magic, so it starts in milliseconds.
# One thread, one selector loop: it counts as one process against the run's pids limit, however many connections.
FORWARDER_SOURCE = r'''
"""skills_magic network forwarder: 127.0.0.1:PORT in this network namespace <-> the proxy's unix socket.

argv: PORT (0: pick one) SOCKET_PATH [WATCH_PID]. Brings lo up, listens, prints the port on stdout, and daemonises:
the parent exits 0 once the child listens, so `port=$(python ...)` returns ready. The child exits on SIGTERM or
SIGINT, or when WATCH_PID (0: none) is gone.
"""
import errno, fcntl, os, selectors, signal, socket, struct, sys, time

MAX_CONNECTIONS = 256  # above the proxy's own limit, so the proxy's clear 503 is what a client sees
CHUNK = 65536  # bytes per recv, and the most held per direction
IDLE_SECONDS = 900.0  # the proxy closes idle tunnels sooner; this only sweeps pairs whose other end vanished
POLL_SECONDS = 0.2  # how often WATCH_PID is checked when no pidfd can be had
CONNECT_SECONDS = 5.0  # the proxy's socket is local: a longer wait means it is gone or stuck
R, W = selectors.EVENT_READ, selectors.EVENT_WRITE


def fail(message):
    sys.stderr.write("skills_magic network forwarder: " + message + "\n")
    sys.stderr.flush()
    os._exit(1)


def loopback_up():
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        flags = struct.unpack_from("16sH", fcntl.ioctl(probe, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0)))[1]
        if flags & IFF_UP:
            return
        try:
            fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
        except OSError as error:
            fail("cannot bring the loopback interface up: " + (error.strerror or str(error)))
    finally:
        probe.close()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Side:
    __slots__ = ("sock", "peer", "out", "eof", "shut", "events", "pair")

    def __init__(self, sock, pair):
        self.sock, self.pair = sock, pair
        self.peer, self.out, self.eof, self.shut, self.events = None, bytearray(), False, False, 0


class Pair:
    __slots__ = ("a", "b", "last")

    def __init__(self, tcp, unix):
        self.a, self.b = Side(tcp, self), Side(unix, self)
        self.a.peer, self.b.peer = self.b, self.a
        self.last = time.monotonic()


def serve(listener, path, watch, watch_fd):
    selector = selectors.DefaultSelector()
    selector.register(listener, R, "listen")
    if watch_fd is not None:
        selector.register(watch_fd, R, "watch")
    pairs = set()
    listening = True

    def close(pair):
        for side in (pair.a, pair.b):
            if side.events:
                selector.unregister(side.sock)
                side.events = 0
            side.sock.close()
        pairs.discard(pair)

    def refresh(pair):
        for side in (pair.a, pair.b):
            if side.peer.eof and not side.out and not side.shut:
                try:
                    side.sock.shutdown(socket.SHUT_WR)  # pass the other side's end-of-file on: a half-close
                except OSError:
                    pass
                side.shut = True
        if pair.a.eof and pair.b.eof and not pair.a.out and not pair.b.out:
            return close(pair)
        for side in (pair.a, pair.b):
            events = (R if not side.eof and len(side.peer.out) < CHUNK else 0) | (W if side.out else 0)
            if events != side.events:
                if not side.events:
                    selector.register(side.sock, events, side)
                elif not events:
                    selector.unregister(side.sock)
                else:
                    selector.modify(side.sock, events, side)
                side.events = events

    def accept():
        while len(pairs) < MAX_CONNECTIONS:
            try:
                tcp, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: the backlog keeps the client until a pair closes
                return
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.settimeout(CONNECT_SECONDS)
            try:
                unix.connect(path)
            except OSError:
                unix.close()
                try:
                    tcp.setblocking(False)
                    tcp.send(b"HTTP/1.1 502 skills_magic: the network proxy is not running\r\n"
                             b"Content-Length: 0\r\nConnection: close\r\nX-Skills-Magic: unreachable\r\n\r\n")
                except OSError:
                    pass
                tcp.close()
                continue
            tcp.setblocking(False)
            unix.setblocking(False)
            pair = Pair(tcp, unix)
            pairs.add(pair)
            refresh(pair)

    last_sweep = time.monotonic()
    while True:
        timeout = POLL_SECONDS if watch and watch_fd is None else 1.0
        for key, mask in selector.select(timeout):
            if key.data == "watch":
                os._exit(0)
            if key.data == "listen":
                accept()
                continue
            side = key.data
            pair = side.pair
            if pair not in pairs:
                continue
            try:
                if mask & R:
                    try:
                        data = side.sock.recv(CHUNK)
                    except (BlockingIOError, InterruptedError):
                        data = None
                    if data:
                        side.peer.out += data
                        pair.last = time.monotonic()
                    elif data is not None:
                        side.eof = True
                if mask & W and side.out:
                    try:
                        sent = side.sock.send(side.out)
                    except (BlockingIOError, InterruptedError):
                        sent = 0
                    del side.out[:sent]
                    pair.last = time.monotonic()
                refresh(pair)
            except OSError:  # a reset or a broken pipe ends the pair
                close(pair)
        if watch and watch_fd is None and not alive(watch):
            os._exit(0)
        now = time.monotonic()
        if now - last_sweep > 1.0:
            last_sweep = now
            for pair in [p for p in pairs if now - p.last > IDLE_SECONDS]:
                close(pair)
        if listening != (len(pairs) < MAX_CONNECTIONS):  # full: leave new clients in the backlog until one ends
            listening = not listening
            if listening:
                selector.register(listener, R, "listen")
                accept()
            else:
                selector.unregister(listener)


def main(argv):
    if len(argv) not in (2, 3):
        fail("usage: PORT SOCKET_PATH [WATCH_PID]")
    try:
        port, path, watch = int(argv[0]), argv[1], int(argv[2]) if len(argv) == 3 else 0
    except ValueError:
        fail("PORT and WATCH_PID must be numbers")
    loopback_up()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
        listener.setblocking(False)
    except OSError as error:
        fail("cannot listen on 127.0.0.1:%d: %s" % (port, error.strerror or error))
    watch_fd = None
    if watch:
        try:
            watch_fd = os.pidfd_open(watch)  # readable the moment that process ends; no polling, no pid reuse
        except ProcessLookupError:
            fail("process %d, which it should outlive no longer than, is already gone" % watch)
        except (AttributeError, OSError):
            watch_fd = None
            if not alive(watch):
                fail("process %d, which it should outlive no longer than, is already gone" % watch)
    chosen = listener.getsockname()[1]
    if os.fork():
        sys.stdout.write("%d\n" % chosen)
        sys.stdout.flush()
        os._exit(0)
    # the daemon: hold no pipe of the caller's open (a `$(...)` would wait for it), stop on a signal
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: os._exit(0))
    try:
        serve(listener, path, watch, watch_fd)
    finally:
        os._exit(0)


main(sys.argv[1:])
'''


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
