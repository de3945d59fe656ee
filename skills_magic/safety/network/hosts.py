"""Host patterns (what a `--network` grant names) and the address checks made on the hosts they grant.

Pattern semantics (`parse_pattern`):
- `pypi.org`: that host exactly; case-insensitive, a trailing dot ignored, international names compared in their
  IDNA (punycode) form, so `bücher.example` and `xn--bcher-kva.example` are one host.
- `*.example.org`: any subdomain at any depth (`a.example.org`, `a.b.example.org`) but NOT `example.org` itself, as
  in Claude Code's sandbox; grant both to get both. A wildcard needs a domain of two labels or more (`*.org` refused).
- `127.0.0.1`, `::1`, `[::1]`: that address exactly (no ranges); a host name never matches an address pattern.
- any of these with `:PORT` (IPv6 as `[::1]:443`): that port only; without a port, any port.
`REFUSED_PATTERNS` lists what is refused, with an example of each.

A granted host NAME must not lead to this machine or its cloud: `forbidden_kind` says which addresses it may not
resolve to (loopback, link-local such as the cloud metadata service at 169.254.169.254, unspecified, multicast).
"""

from __future__ import annotations

import encodings.idna
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

from skills_magic.errors import SkillsMagicError

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
_DOTS = ("\u3002", "\uff0e", "\uff61")  # ideographic and full-width full stops separate labels in IDNA


class InvalidHostPattern(SkillsMagicError, ValueError):
    """A `--network` host pattern that is not a host, a `*.domain` wildcard or an address, with an optional port."""

    def __init__(self, pattern: str, why: str):
        self.pattern = pattern
        self.why = why
        super().__init__(f"invalid network host pattern {pattern!r}: {why}")



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


def parse_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address `text` spells (an IPv4 one may end in a dot), or None when it is not one."""
    try:
        return ipaddress.ip_address(text[:-1] if text.endswith(".") and ":" not in text else text)
    except ValueError:
        return None


def normalise_host(host: str) -> str:
    """The canonical form of a host (an address in `ipaddress` form, a name as lower-case punycode without trailing
    dot) as patterns compare it; ValueError (InvalidHostPattern) when it is neither."""
    if host.startswith("[") and host.endswith("]"):
        address = parse_address(host[1:-1])
        if not isinstance(address, ipaddress.IPv6Address):
            raise InvalidHostPattern(host, "brackets hold an IPv6 address only")
        return str(address)
    address = parse_address(host)
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
        if not isinstance(parse_address(host), ipaddress.IPv6Address):
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
            return host.endswith("." + self.host) and parse_address(host) is None
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
    address = parse_address(host)
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


def forbidden_kind(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Which of FORBIDDEN_FOR_NAMES `address` is (an IPv4-mapped IPv6 address judged as its IPv4 too), or None."""
    mapped = getattr(address, "ipv4_mapped", None)
    for candidate in (address, mapped) if mapped else (address,):
        for kind in FORBIDDEN_FOR_NAMES:
            if getattr(candidate, "is_" + kind.replace("-", "_")):
                return kind
    return None
