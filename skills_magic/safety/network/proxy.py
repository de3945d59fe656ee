"""The network proxy: an HTTP proxy on a unix socket, in the kernel's process on the host's network, letting a
sandboxed run through to exactly the hosts its grant (`HostPatterns`) covers.

It speaks `CONNECT host:port` tunnels (HTTPS, anything else tunnelled) and absolute-form plain HTTP requests. A host
the grant does not cover is refused at once with 403 and one line naming the host and the grant that would allow it
(`refusal_line`); nothing is resolved or connected for it. A granted NAME that resolves only to addresses where a
name may not lead (`hosts.forbidden_kind`) is refused too; granting the address itself is the way to reach those.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import select
import selectors
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable

from skills_magic.errors import SkillsMagicError
from skills_magic.safety.network.hosts import HostPatterns, forbidden_kind, grant_for, parse_address
from skills_magic.safety.network.protocol import (
    Answer,
    ClientGone,
    absolute_target,
    connect_target,
    forwarded_head,
    parse_head,
    read_head,
    response,
)
from skills_magic.safety.network.relay import relay

MAX_CONNECTIONS = 64  # pip or a requests pool opens a handful at once; past this a runaway script gets 503, not threads
HEADER_TIMEOUT_SECONDS = 10.0  # a client that connects and stalls before its request is complete frees its slot
CONNECT_TIMEOUT_SECONDS = 10.0  # a granted host that does not answer gets 502 instead of hanging the script
IDLE_TIMEOUT_SECONDS = 300.0  # a tunnel silent both ways this long is closed; a flowing download never idles
CLOSE_JOIN_SECONDS = 2.0  # close() waits this long for connection threads; they are daemons, so none outlives the kernel
UNIX_PATH_MAX = 107  # sun_path is 108 bytes on Linux, one of them the terminating NUL


class NetworkProxyError(SkillsMagicError, OSError):
    """The proxy cannot listen on its unix socket."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"the network proxy cannot listen on {path}: {reason}")


def refusal_line(host: str, port: int | None = None) -> str:
    """The one line a refused request gets (403 reason, body and the run's result). `port` is given only when the host
    is granted on other ports, so the line names the port and the grant includes it."""
    if port is None:
        return f"skills_magic: host {host} is not granted to this run; allow it with --network {grant_for(host)}"
    return (f"skills_magic: host {host} port {port} is not granted to this run; "
            f"allow it with --network {grant_for(host, port)}")


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
                conn.send(response(503, "busy", f"skills_magic: over {self.max_connections} connections at once "
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
        except Answer as answer:
            self._answer(conn, answer)
        except (ClientGone, OSError):
            pass
        except Exception as error:  # a bug of ours: say so in the one line rather than hang up without a word
            if not held:
                self._answer(conn, Answer(500, "error", f"skills_magic: the network proxy failed on this request "
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
    def _answer(conn: socket.socket, answer: Answer) -> None:
        try:
            conn.settimeout(5)
            conn.sendall(response(answer.status, answer.kind, answer.line))
        except OSError:
            pass

    def _serve(self, conn: socket.socket, held: dict[str, socket.socket]) -> None:
        head, rest = read_head(conn, self.header_timeout)
        method, target, version, headers = parse_head(head)
        if method == "CONNECT":
            host, port = connect_target(target)
        else:
            host, port, origin_target, authority = absolute_target(target)
        self._check(host, port)
        upstream = held["upstream"] = self._connect(host, port)
        if self._closed:  # closed while connecting: say nothing more
            return
        if method == "CONNECT":
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            relay(conn, upstream, self.idle_timeout, self._wake_r, to_b=rest)
            return
        relay(conn, upstream, self.idle_timeout, self._wake_r,
              to_b=forwarded_head(method, origin_target, version, authority, headers) + rest, end_with_b=True)

    def _check(self, host: str, port: int) -> None:
        if self.patterns.match(host, port) is not None:
            return
        grant_port = port if self.patterns.granted_on_another_port(host) else None
        with self._lock:
            self._refused.setdefault(grant_for(host, grant_port))
        raise Answer(403, "refused", self.refusal(host, grant_port))

    def _unreachable_answer(self, host: str, port: int, status: int, kind: str, reason: str) -> Answer:
        with self._lock:
            self._unreachable.setdefault(host, reason)
        return Answer(status, kind, f"skills_magic: cannot reach {grant_for(host, port)}: {reason}")

    def _connect(self, host: str, port: int) -> socket.socket:
        """A TCP connection from the host's network to a granted host, resolved here (the sandbox has no DNS)."""
        is_address = parse_address(host) is not None
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
                kind = forbidden_kind(ipaddress.ip_address(info[4][0].partition("%")[0]))
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
