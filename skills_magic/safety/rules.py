"""The rule language of the permission policy: `allow` or `deny`, a skill and a path pattern inside it, and what an
allow rule grants (secrets, the network or some hosts, writable paths, an unsandboxed run, raised limits).

A rule names a skill and a pattern: `source-verification:scripts/verify.py`, `source-verification:scripts/*`, or
`source-verification:!date *` for an inline shell command of its body. Where a rule comes from decides what it may
grant: the user (typed, IPython config, their own config folder's file) may grant everything; a project's file (which
arrives with a cloned repository) no wildcard skill, no secrets, no whole network, no unsandboxed run, and writes only
inside its own folder. Each of those is decided once, in `parse_rule`.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from skills_magic.errors import SkillsMagicError
from skills_magic.safety.trust import USER_POLICY_FILE

USER_ONLY = "%skills allow, IPython config or your own config folder's skills-policy.yaml"  # powers a project lacks
NAME_THE_HOSTS = "name the hosts instead, e.g. network: [pypi.org]"  # what a project file may grant instead
LIMIT_GRANTS = {  # the grant's name (as typed: --memory 4G) -> the sandbox.Limits field it raises
    "memory": "memory", "processes": "processes", "cpu": "cpu_seconds", "max-writes": "write_bytes",
    "max-file": "file_bytes", "timeout": "wall_seconds",
}
_COUNTED_LIMITS = ("processes", "cpu", "timeout")  # whole numbers; the others are sizes (512M, 4G)


class RuleError(SkillsMagicError, ValueError):
    """A rule that cannot be understood or is not allowed from where it came."""


@dataclass(frozen=True)
class Rule:
    """`allow` or `deny` for a skill (or `*`) and a path pattern (`/`-separated; `*` and `?` wildcards, `\\` escapes them)."""

    kind: Literal["allow", "deny"]
    skill: str
    pattern: str
    origin: str  # where it came from: "%skills allow", "skills-policy.yaml", "IPython config", "asked: always"
    env: tuple[str, ...] = ()  # secret-looking variables an allow rule lets through to the script
    network: bool = False  # the whole network (typed by the user only); else none, or the `hosts` below
    writable: tuple[str, ...] = ()  # absolute paths the script may write besides its scratch folder
    unsandboxed: bool = False  # run even where no sandbox can be made (only ever typed by the user)
    limits: tuple[tuple[str, int], ...] = ()  # raised limits: (name in LIMIT_GRANTS, value), e.g. ("memory", 4 GiB)
    hosts: tuple[str, ...] = ()  # host patterns reached through the proxy outside the sandbox (`--network pypi.org`)

    @property
    def text(self) -> str:
        return f"{self.skill}:{self.pattern}"

    def matches(self, skill: str, path: str) -> bool:
        """Names compared after NFC (a name typed as `café` is the file named `cafe\u0301` on disk); in the pattern
        only `*` and `?` are wildcards (see `pattern_matches`)."""
        return (self.skill == "*" or _nfc(self.skill) == _nfc(skill)) and pattern_matches(self.pattern, path)

    def __str__(self) -> str:
        grants = [f"env: {', '.join(self.env)}"] if self.env else []
        grants += ["network"] if self.network else []
        grants += [f"network: {','.join(self.hosts)}"] if self.hosts else []
        grants += [f"write: {p}" for p in self.writable]
        grants += ["unsandboxed"] if self.unsandboxed else []
        grants += [f"{name}: {_limit_text(name, value)}" for name, value in self.limits]
        shown = f" ({'; '.join(grants)})" if grants else ""
        return f"{self.kind} {self.text}{shown}  [{self.origin}]"


def parse_limits(values) -> tuple[tuple[str, int], ...]:
    """{"memory": "4G", "processes": 512} -> (("memory", 4294967296), ("processes", 512)); RuleError when off."""
    from skills_magic.safety.box.grants import parse_size

    parsed = []
    for name, value in (dict(values or {})).items():
        if name not in LIMIT_GRANTS:
            raise RuleError(f"{name!r} is not a limit: use one of {', '.join(LIMIT_GRANTS)}")
        try:
            number = int(str(value)) if name in _COUNTED_LIMITS else parse_size(value)
        except ValueError:
            number = 0
        if isinstance(value, bool) or number <= 0:
            raise RuleError(f"--{name} {value!r}: expected " + ("a whole number above 0" if name in _COUNTED_LIMITS
                                                                  else "a size such as 512M or 4G"))
        parsed.append((name, number))
    return tuple(parsed)


def _limit_text(name: str, value: int) -> str:
    from skills_magic.safety.box.grants import size_text

    return str(value) + (" s" if name in ("cpu", "timeout") else "") if name in _COUNTED_LIMITS else size_text(value)


def parse_rule(kind: str, text: str, origin: str, env: Sequence[str] = (), user_typed: bool = True, *,
               network: bool = False, writable: Sequence[str] = (), unsandboxed: bool = False,
               inside: str | None = None, limits=None, dropped: list[str] | None = None) -> Rule:
    """A rule from text. `user_typed` (the user: typed, IPython config, their own config folder's file) may do
    everything, its `write` paths relative to `inside` when given (their file's folder), else as given; otherwise (a
    project's file) no wildcard skill, no secrets, no whole network, no unsandboxed runs, and `write` paths only
    relative to and inside `inside`, the file's folder.

    A grant beyond those powers refuses the rule; with `dropped` (an entry of a project's file read from `inside`) it
    is dropped from an allow rule instead, its reason appended to `dropped`, and the rest of the rule stays."""
    if kind not in ("allow", "deny"):
        raise RuleError(f"a rule is `allow` or `deny`, not {kind!r}")
    confined = None  # the write paths once resolved inside `inside`
    if dropped is not None and kind == "allow" and not user_typed and inside is not None:
        # reported in the order the entry gives them, before the rule itself is judged
        env, network, unsandboxed, confined = _keep_project_grants(text, origin, inside, env, network, unsandboxed,
                                                                   writable, dropped)
    skill, separator, pattern = str(text).strip().partition(":")
    if not separator:
        if skill == "*" and user_typed:  # `%skills allow *`: everything, typed by the user
            whole, hosts = _network_grant(text, network, user_typed, origin)
            return Rule(kind, "*", "*", origin, tuple(env), whole, tuple(_relative_to(inside, p) for p in writable),
                        unsandboxed, parse_limits(limits), hosts)
        raise RuleError(f"{text!r} is not a rule: write SKILL:PATH, e.g. source-verification:scripts/verify.py")
    skill, pattern = skill.strip(), pattern.strip()
    if not skill or not pattern:
        raise RuleError(f"{text!r} needs both a skill and a path pattern")
    if "*" in skill and (skill != "*" or not user_typed):
        raise RuleError(f"{text!r}: a wildcard skill is accepted only from %skills {kind}, IPython config or your "
                        f"own config folder's {USER_POLICY_FILE}, not from {origin}")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise RuleError(f"{text!r}: a path pattern is relative to the skill's folder and stays inside it")
    if kind == "deny" and (env or network or writable or unsandboxed or limits):
        raise RuleError(f"{text!r}: a deny rule grants nothing")
    network, hosts = _network_grant(text, network, user_typed, origin)
    limits = parse_limits(limits)
    if unsandboxed and not user_typed:
        raise RuleError(_user_only(text, origin, "running unsandboxed is accepted"))
    if env and not user_typed:
        raise RuleError(_user_only(text, origin, f"secrets (`env: {', '.join(env)}`) are granted"))
    if confined is None:
        confined = _write_paths(text, writable, user_typed, inside, origin)
    return Rule(kind, skill, pattern, origin, tuple(env), network, confined, unsandboxed, limits, hosts)


def _user_only(text, origin: str, what: str, dropped: str | None = None, then: str = "") -> str:
    """Why a grant is refused (or, naming it as `dropped`, dropped): `what` only the user may grant."""
    if dropped is None:
        return f"{text!r}: {what} only from {USER_ONLY}, not from {origin}{then}"
    return f"{text!r}: `{dropped}` dropped: {what} only from {USER_ONLY}, never from {origin}{then}"


def _keep_project_grants(text, origin: str, folder: str, env, network, unsandboxed: bool, writable,
                         dropped: list[str]) -> tuple:
    """What a project file's allow entry keeps of its grants: (env, network, unsandboxed, write paths resolved inside
    `folder`); each grant it may not give is dropped, with its reason appended to `dropped`."""
    if network is True:
        dropped.append(_user_only(text, origin, "the whole network is granted", "network: true", f"; {NAME_THE_HOSTS}"))
        network = None
    if env:
        dropped.append(_user_only(text, origin, "secrets are granted", f"env: {', '.join(env)}"))
        env = []
    if unsandboxed:
        dropped.append(_user_only(text, origin, "running unsandboxed is accepted", "unsandboxed"))
        unsandboxed = False
    kept = []
    for path in writable:
        try:
            kept.append(_confined(folder, path))
        except RuleError as reason:
            dropped.append(_write_refusal(text, path, reason, origin, "dropped"))
    return env, network, unsandboxed, tuple(kept)


def _relative_to(folder: str | None, path: str) -> str:
    """A `write` path of the user's own policy file as written there: relative to (and `~` of) its folder."""
    return path if folder is None else os.path.join(folder, os.path.expanduser(path))


def _write_paths(text, writable, user_typed: bool, inside: str | None, origin: str) -> tuple[str, ...]:
    """The rule's `write` paths, each made absolute once: the user's against `inside` (else the working folder), a
    project file's resolved inside its folder (RuleError for one that leaves it)."""
    if user_typed:
        return tuple(os.path.abspath(_relative_to(inside, p)) for p in writable)
    if writable and inside is None:
        raise RuleError(f"{text!r}: `write` paths from {origin} need the folder they are relative to")
    confined = []
    for path in writable:
        try:
            confined.append(_confined(inside, path))
        except RuleError as reason:
            raise RuleError(_write_refusal(text, path, reason, origin, "refused")) from None
    return tuple(confined)


def _network_grant(text, network, user_typed: bool, origin: str) -> tuple[bool, tuple[str, ...]]:
    """`network`: True / "*" (everything: typed by the user only), False / None / "" (nothing), or host patterns as
    "pypi.org,*.crossref.org" or a list of them -> (whole network, host patterns)."""
    if network in (None, False, "", ()):
        return False, ()
    if network is True or network == "*":
        if not user_typed:
            raise RuleError(_user_only(text, origin, "the whole network is granted", then=f"; {NAME_THE_HOSTS}"))
        return True, ()
    from skills_magic.safety.network.hosts import HostPatterns

    grants = [network] if isinstance(network, str) else list(network)
    if not all(isinstance(g, str) for g in grants):
        raise RuleError(f"{text!r}: `network` is true or a list of host names, e.g. [pypi.org, '*.crossref.org']")
    try:
        return False, tuple(str(HostPatterns.parse(grants)).split(","))
    except ValueError as error:
        raise RuleError(f"{text!r}: {error}") from None


def _confined(folder: str, path: str) -> str:
    """A `write` path from a project file, resolved (real path, symlinks followed) against the file's folder; an
    absolute path, or one that leaves the folder (`..`, a symlink pointing out), raises RuleError with the reason."""
    if os.path.isabs(path) or path.startswith("~"):
        raise RuleError("an absolute path, not one inside the project folder")
    root = os.path.realpath(folder)
    resolved = os.path.realpath(os.path.join(root, path))
    if resolved != root and not resolved.startswith(root.rstrip(os.sep) + os.sep):
        raise RuleError(f"it leaves the project folder (it resolves to {resolved})")
    return resolved


def _write_refusal(text, path: str, reason: RuleError, origin: str, verb: str) -> str:
    return (f"{text!r}: `write: {path}` {verb}: {reason}; {origin} may grant writes only inside its own folder, other "
            f"paths come only from {USER_ONLY}")


def _nfc(text: str) -> str:
    from unicodedata import normalize

    return normalize("NFC", text)


_PATTERN_PIECE = re.compile(r"\\[*?\\]|[*?]|[^*?\\]+|\\")  # an escape, a wildcard, a literal run, a lone backslash
_compiled_patterns: dict[str, re.Pattern] = {}  # decide() matches every rule against every request: compile once


def _pattern_regex(pattern: str) -> re.Pattern:
    found = _compiled_patterns.get(pattern)
    if found is None:
        parts = []
        for piece in _PATTERN_PIECE.findall(_nfc(pattern)):
            if piece == "*":
                parts.append(".*")  # as fnmatch: crosses `/`, so `x:scripts/*` covers subfolders
            elif piece == "?":
                parts.append(".")
            else:
                parts.append(re.escape(piece[1] if len(piece) == 2 and piece[0] == "\\" else piece))
        found = _compiled_patterns[pattern] = re.compile("".join(parts), re.DOTALL)
    return found


def pattern_matches(pattern: str, path: str) -> bool:
    """Whether a rule's path pattern covers `path` (a script path or `!command`): `*` is any run of characters
    (`/` included), `?` one character, `\\*` `\\?` `\\\\` those characters literally, everything else (`[`, `]`
    too) itself; both sides compared after NFC."""
    return _pattern_regex(pattern).fullmatch(_nfc(path)) is not None


def escape_pattern(path: str) -> str:
    """The pattern that matches exactly `path` and nothing else."""
    return re.sub(r"([*?\\])", r"\\\1", path)


def pre_approval_hint(skill: str, path: str) -> str:
    """The command that pre-approves exactly this path, quoted so that it can be pasted as is."""
    rule = f"{skill}:{escape_pattern(path)}"
    if re.fullmatch(r"[\w.:/*?\[\]!-]+", rule):
        return f"%skills allow {rule}"
    return f'%skills allow "{rule}"' if '"' not in rule and "\\" not in rule else f"%skills allow {shlex.quote(rule)}"
