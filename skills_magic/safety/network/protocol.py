"""The HTTP proxy protocol as the proxy speaks it: a request head read within limits, its request line, headers and
target checked, the head forwarded upstream for plain HTTP, and the one closing answer a refused or failed request
gets (`Answer`, sent by `response`)."""

from __future__ import annotations

import re
import socket
import time

from skills_magic.errors import SkillsMagicError
from skills_magic.safety.network.hosts import normalise_host
from skills_magic.safety.network.relay import RELAY_CHUNK

MAX_HEADER_BYTES = 64 * 1024  # real request heads are under 8 KiB; anything bigger is a mistake or an attack

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE_BREAK = re.compile(r"\r?\n")
_HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "te",
               "trailer", "upgrade", "host"}  # Host is rewritten from the URL; the rest concern the client's hop only


class Answer(SkillsMagicError):
    """A script's request the proxy refuses or cannot serve: answered with `status` and `line`, then closed (the
    script sees the line; the run's hint names the grant)."""

    def __init__(self, status: int, kind: str, line: str):
        self.status, self.kind, self.line = status, kind, line
        super().__init__(line)


class ClientGone(SkillsMagicError):
    """A script closed its connection before sending a whole request: nothing to answer."""


def _printable(text: str) -> str:
    return "".join(ch if " " <= ch <= "~" else "?" for ch in text)


def response(status: int, kind: str, line: str) -> bytes:
    """A complete, closing response. The reason phrase is the line itself: clients show it when a CONNECT fails
    ('Tunnel connection failed: 403 skills_magic: host ...'), where a body would never be seen."""
    line = _printable(line)
    body = (line + "\n").encode("ascii")
    return (f"HTTP/1.1 {status} {line}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\nX-Skills-Magic: {kind}\r\n\r\n").encode("ascii") + body


def bad_request(why: str) -> Answer:
    """The 400 answer to a request the proxy cannot read, saying `why`."""
    return Answer(400, "bad-request", f"skills_magic: the network proxy cannot read this request: {why}")


def read_head(conn: socket.socket, timeout: float) -> tuple[bytes, bytes]:
    """The request head (without its blank line) and whatever followed it; Answer(400) on anything not HTTP."""
    deadline = time.monotonic() + timeout
    buf = bytearray()
    checked_line = False
    while True:
        end = _HEAD_END.search(buf)
        if end:
            return bytes(buf[:end.start()]), bytes(buf[end.end():])
        if len(buf) > MAX_HEADER_BYTES:
            raise bad_request(f"its head is over {MAX_HEADER_BYTES // 1024} KiB")
        newline = buf.find(b"\n")
        first = buf if newline < 0 else buf[:newline].rstrip(b"\r")
        if any(not 32 <= b <= 126 for b in first):  # answer TLS or other binary bytes at once, not at the timeout
            raise bad_request("it is not HTTP (binary bytes in the request line)")
        if newline >= 0 and not checked_line:
            _request_line(first.decode("ascii"))
            checked_line = True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise bad_request(f"it was not complete within {timeout:g} seconds")
        conn.settimeout(remaining)
        try:
            data = conn.recv(RELAY_CHUNK)
        except TimeoutError:
            raise bad_request(f"it was not complete within {timeout:g} seconds") from None
        if not data:
            raise ClientGone()
        buf += data


def _request_line(line: str) -> tuple[str, str, str]:
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise bad_request(f"the request line {line[:80]!r} is not 'METHOD TARGET HTTP/1.1'")
    if parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise bad_request(f"{parts[2][:20]!r} is not HTTP/1.0 or HTTP/1.1")
    return parts[0], parts[1], parts[2]


def parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """A request head -> (method, target, version, [(header name, value)]); Answer(400) on a malformed line."""
    lines = _LINE_BREAK.split(head.decode("latin-1"))
    method, target, version = _request_line(lines[0])
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise bad_request(f"the header line {line[:80]!r} is not 'Name: value'")
        value = value.strip(" \t")
        if any(ord(ch) < 32 and ch != "\t" or ord(ch) == 127 for ch in value):
            raise bad_request(f"the header {name} holds control characters")
        headers.append((name, value))
    return method, target, version, headers


def connect_target(text: str) -> tuple[str, int]:
    """A CONNECT target `host:port` or `[v6]:port` -> (canonical host, port)."""
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
    else:
        host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise bad_request(f"CONNECT needs host:port, not {text[:80]!r}")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise bad_request(f"{port[:20]!r} is not a port")
    try:
        return normalise_host(host), int(port)
    except ValueError:
        raise bad_request(f"{host[:80]!r} is not a host name or an address") from None


def absolute_target(target: str) -> tuple[str, int, str, str]:
    """An absolute-form target -> (canonical host, port, origin-form target, authority for Host)."""
    if target.startswith("/") or target == "*":
        raise bad_request("the request line has no host (a path alone); a proxy needs the absolute URL, "
                          "e.g. GET http://host/path")
    scheme, sep, rest = target.partition("://")
    if not sep:
        raise bad_request(f"{target[:80]!r} is not an absolute http:// URL")
    if scheme.lower() == "https":
        raise bad_request("https:// is tunnelled: send CONNECT host:443 first")
    if scheme.lower() != "http":
        raise bad_request(f"only http:// URLs and CONNECT are proxied, not {scheme[:20]}://")
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    authority = authority.rpartition("@")[2]
    if authority.startswith("["):
        host, _, port_text = authority[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = authority.partition(":")
    if port_text and not (port_text.isascii() and port_text.isdigit() and 1 <= int(port_text) <= 65535):
        raise bad_request(f"{port_text[:20]!r} is not a port")
    if not host:
        raise bad_request("the URL has no host")
    try:
        canonical = normalise_host(host)
    except ValueError:
        raise bad_request(f"{host[:80]!r} is not a host name or an address") from None
    path = path.partition("#")[0]
    if not path.startswith("/"):
        path = "/" + path
    return canonical, int(port_text or 80), path, authority


def forwarded_head(method: str, origin_target: str, version: str, authority: str,
                   headers: list[tuple[str, str]]) -> bytes:
    """The head a plain-HTTP request is sent upstream with: origin-form, Host from the URL, the client's hop-by-hop
    headers (and those its Connection header lists) left out, and `Connection: close`."""
    listed = {n.strip().lower() for name, value in headers if name.lower() == "connection" for n in value.split(",")}
    lines = [f"{method} {origin_target} {version}", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in headers
              if name.lower() not in _HOP_BY_HOP and name.lower() not in listed]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
