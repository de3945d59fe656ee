"""The permission policy: deny rules, then allow rules, then ask (and where nobody can answer, deny).

A rule names a skill and a path pattern inside it: `source-verification:scripts/verify.py`,
`source-verification:scripts/*`, or `source-verification:!date *` for an inline shell command of its body. A `*` for
the skill matches every skill, and is accepted only where the user typed it (`%skills allow`, IPython config), never
from a project's `skills-policy.yaml`, which arrives with a cloned repository: its allow rules are inert until the
user trusts its exact bytes (`skills_magic.safety.trust`), and even then it grants no secrets, no unsandboxed runs and no
writes outside its folder. A skill's own `allowed-tools` is shown as a request and never taken as a grant.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from skills_magic.errors import SkillsMagicError
from skills_magic.safety.trust import (NothingToTrust, TrustError, TrustReport, TrustStore, sha256_of, short, user_policy_path,
                                write_atomically)

POLICY_FILE = "skills-policy.yaml"  # in the session's folder
USER_ONLY = "%skills allow, IPython config or your own config folder's skills-policy.yaml"  # powers a project lacks
MAX_POLICY_FILE_BYTES = 256 * 1024  # a policy is a few dozen rules; a bigger file is refused, never parsed
USER_ORIGIN = "your skills-policy.yaml"  # the origin of rules from the user's own file in their config folder
Verdict = Literal["allow", "deny", "ask"]


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


LIMIT_GRANTS = {  # the grant's name (as typed: --memory 4G) -> the sandbox.Limits field it raises
    "memory": "memory", "processes": "processes", "cpu": "cpu_seconds", "max-writes": "write_bytes",
    "max-file": "file_bytes", "timeout": "wall_seconds",
}
_COUNTED_LIMITS = ("processes", "cpu", "timeout")  # whole numbers; the others are sizes (512M, 4G)


def parse_limits(values) -> tuple[tuple[str, int], ...]:
    """{"memory": "4G", "processes": 512} -> (("memory", 4294967296), ("processes", 512)); RuleError when off."""
    from skills_magic.safety.sandbox import parse_size

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
    from skills_magic.safety.sandbox import size_text

    return str(value) + (" s" if name in ("cpu", "timeout") else "") if name in _COUNTED_LIMITS else size_text(value)


def parse_rule(kind: str, text: str, origin: str, env: Sequence[str] = (), user_typed: bool = True, *,
               network: bool = False, writable: Sequence[str] = (), unsandboxed: bool = False,
               inside: str | None = None, limits=None) -> Rule:
    """A rule from text. `user_typed` (the user: typed, IPython config, their own config folder's file) may do
    everything; otherwise (a project's file) no wildcard skill, no secrets, no unsandboxed runs, and `write` paths
    only relative to and inside `inside`, the file's folder."""
    if kind not in ("allow", "deny"):
        raise RuleError(f"a rule is `allow` or `deny`, not {kind!r}")
    skill, separator, pattern = str(text).strip().partition(":")
    if not separator:
        if skill == "*" and user_typed:  # `%skills allow *`: everything, typed by the user
            whole, hosts = _network_grant(text, network, user_typed, origin)
            return Rule(kind, "*", "*", origin, tuple(env), whole, tuple(writable), unsandboxed,
                        parse_limits(limits), hosts)
        raise RuleError(f"{text!r} is not a rule: write SKILL:PATH, e.g. source-verification:scripts/verify.py")
    skill, pattern = skill.strip(), pattern.strip()
    if not skill or not pattern:
        raise RuleError(f"{text!r} needs both a skill and a path pattern")
    if "*" in skill and (skill != "*" or not user_typed):
        raise RuleError(f"{text!r}: a wildcard skill is accepted only from %skills {kind}, IPython config or your "
                        f"own config folder's {POLICY_FILE}, not from {origin}")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise RuleError(f"{text!r}: a path pattern is relative to the skill's folder and stays inside it")
    if kind == "deny" and (env or network or writable or unsandboxed or limits):
        raise RuleError(f"{text!r}: a deny rule grants nothing")
    network, hosts = _network_grant(text, network, user_typed, origin)
    limits = parse_limits(limits)
    if unsandboxed and not user_typed:
        raise RuleError(f"{text!r}: running unsandboxed is accepted only from {USER_ONLY}, not from {origin}")
    if env and not user_typed:
        raise RuleError(f"{text!r}: secrets (`env: {', '.join(env)}`) are granted only from {USER_ONLY}, not from {origin}")
    if user_typed:
        writable = [os.path.abspath(p) for p in writable]
    elif writable and inside is None:
        raise RuleError(f"{text!r}: `write` paths from {origin} need the folder they are relative to")
    else:
        confined = []
        for path in writable:
            try:
                confined.append(_confined(inside, path))
            except RuleError as reason:
                raise RuleError(_write_refusal(text, path, reason, origin, "refused")) from None
        writable = confined
    return Rule(kind, skill, pattern, origin, tuple(env), network, tuple(writable), unsandboxed, limits, hosts)


def _network_grant(text, network, user_typed: bool, origin: str) -> tuple[bool, tuple[str, ...]]:
    """`network`: True / "*" (everything: typed by the user only), False / None / "" (nothing), or host patterns as
    "pypi.org,*.crossref.org" or a list of them -> (whole network, host patterns)."""
    if network in (None, False, "", ()):
        return False, ()
    if network is True or network == "*":
        if not user_typed:
            raise RuleError(f"{text!r}: the whole network is granted only from {USER_ONLY}, not from {origin}; name "
                            "the hosts instead, e.g. network: [pypi.org]")
        return True, ()
    from skills_magic.safety.netproxy import HostPatterns

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


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    rule: Rule | None = None

    @property
    def reason(self) -> str:
        return str(self.rule) if self.rule else "no rule matches"


FileState = Literal["missing", "unreadable", "user", "trusted", "untrusted", "changed"]


@dataclass(frozen=True)
class PolicyFile:
    """One policy file as last read: whose it is, whether its bytes are the trusted ones, and what it holds."""

    path: str  # absolute
    owner: Literal["project", "user"]
    state: FileState
    sha256: str | None = None  # of the bytes read
    trusted_sha256: str | None = None  # what the trust store recorded for this path (a project's file)
    rules: tuple[Rule, ...] = ()  # every rule accepted from the bytes, in force or inert
    inert: tuple[Rule, ...] = ()  # those not in force: an untrusted or changed project file's allow rules
    problems: tuple[str, ...] = ()  # entries refused and grants dropped, each with its reason

    def summary(self, name: str) -> str:
        """One line: whether the file's rules are in force, and if not, why and what to do."""
        denies = sum(r.kind == "deny" for r in self.rules)
        allows = "allow rule" if denies else "rule"
        still = (f" (its {_count(denies, 'deny rule')} still appl{'ies' if denies == 1 else 'y'}: deny rules only "
                 "restrict)") if denies else ""
        if self.state == "user":
            return f"{name}: your own policy file: {_count(len(self.rules), 'rule')} in force, with your full powers"
        if self.state == "trusted":
            return (f"{name}: trusted (sha256 {short(self.sha256)}): {_count(len(self.rules), 'rule')} in force, within "
                    "what a project file may grant")
        if self.state == "changed":
            return (f"{name} changed since you trusted it (sha256 {short(self.trusted_sha256)} now {short(self.sha256)}): "
                    f"its {allows}s are inert; review them with %skills trust{still}")
        if self.state == "untrusted":
            if not self.inert:
                return f"{name}: not trusted, and it holds no allow rule{still}"
            verb = "is" if len(self.inert) == 1 else "are"
            return (f"{name}: not trusted: its {_count(len(self.inert), allows)} {verb} inert; %skills trust shows them "
                    f"and trusts these bytes{still}")
        if self.state == "unreadable":
            return f"{name}: cannot be read: no rule from it is in force"
        return f"{name}: none"


@dataclass(frozen=True)
class _Loaded:
    file: PolicyFile
    signature: tuple  # Policy._signature when it was read: a different one means read it again
    added: tuple[Rule, ...]  # the rules it put in force (taken out again before a re-read)
    reported: tuple[str, ...]  # the problems it reported


def _count(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@dataclass
class Policy:
    """Rules in the order they were added, with the problems met while reading them."""

    rules: list[Rule] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    trust: TrustStore | None = None  # where trusted project files are recorded (None: the user's config folder's)
    _loaded: dict[str, _Loaded] = field(default_factory=dict, repr=False)  # by absolute path, in the order read

    @property
    def files(self) -> list[PolicyFile]:
        """Every policy file read (the user's, the project's), as last read: whose, trusted or not, what it holds."""
        return [loaded.file for loaded in self._loaded.values()]

    def file(self, path: str) -> PolicyFile | None:
        loaded = self._loaded.get(os.path.abspath(path))
        return loaded.file if loaded else None

    def refresh(self) -> None:
        """Re-read a policy file whose bytes changed on disk (edited, created or removed, by anything), or whose
        trust record changed: a trusted file rewritten by a script loses its grants here, before the next decision."""
        for path, loaded in list(self._loaded.items()):
            owner = loaded.file.owner
            # a granted write path inside the project that now resolves elsewhere (made a symlink): judged again
            moved = owner == "project" and any(os.path.realpath(p) != p for r in loaded.file.rules for p in r.writable)
            if moved or self._signature(path, owner) != loaded.signature:
                self.load_file(path, owner)

    def add(self, rule: Rule) -> Rule:
        if rule not in self.rules:
            self.rules.append(rule)
        return rule

    def decide(self, skill: str, path: str) -> Decision:
        """Deny first, then allow, then ask."""
        self.refresh()
        for kind in ("deny", "allow"):
            for rule in self.rules:
                if rule.kind == kind and rule.matches(skill, path):
                    return Decision(kind, rule)
        return Decision("ask")

    def grants(self, skill: str, path: str):
        """Everything every matching allow rule grants (nothing when a deny rule matches)."""
        from skills_magic.safety.sandbox import Grants, Limits

        if self.decide(skill, path).verdict != "allow":
            return Grants()
        matching = [r for r in self.rules if r.kind == "allow" and r.matches(skill, path)]
        granted: dict[str, int] = {}
        for rule in matching:  # a limit a rule names replaces the default; of several rules, the highest counts
            for name, value in rule.limits:
                granted[LIMIT_GRANTS[name]] = max(granted.get(LIMIT_GRANTS[name]) or 0, value)
        limits = Limits(**granted)
        env = tuple(dict.fromkeys(name for r in matching for name in r.env))
        return Grants(env=env, network=any(r.network for r in matching),
                      hosts=tuple(dict.fromkeys(h for r in matching for h in r.hosts)),
                      writable=tuple(dict.fromkeys(p for r in matching for p in r.writable)),
                      unsandboxed=any(r.unsandboxed for r in matching), limits=limits)

    def granted_env(self, skill: str, path: str) -> tuple[str, ...]:
        """Variables every matching allow rule grants (none when a deny rule matches)."""
        return self.grants(skill, path).env

    def load_file(self, path: str, owner: Literal["project", "user"] = "project") -> PolicyFile:
        """Rules from a `skills-policy.yaml`: `allow:` and `deny:` lists of `SKILL:PATH` strings, or of mappings
        `{rule: SKILL:PATH, network: true, write: [PATH], env: [VAR], unsandboxed: true}`. Bad entries are reported,
        never fatal. The file is read again whenever its bytes (or, for a project's, its trust record) change.

        `owner="user"`: the user's own file in their config folder, with the powers of a typed rule. `"project"`: a
        file that arrives with a repository. Its deny rules always apply (they only restrict); its allow rules are
        inert until the user trusts these exact bytes (`trust_file`), and even then it grants no secrets, no
        unsandboxed runs, no wildcard skill, and writes only inside its own folder: such grants are dropped and
        reported, the rest of the entry stays."""
        path = os.path.abspath(path)
        signature = self._signature(path, owner)  # before reading: a change while reading is seen at the next refresh
        previous = self._loaded.get(path)
        if previous is not None:
            self.rules = [r for r in self.rules if r not in previous.added]
            self.problems = [p for p in self.problems if p not in previous.reported]
        if owner == "project" and any(f.owner == "user" and os.path.realpath(f.path) == os.path.realpath(path)
                                      for f in self.files if f.path != path):
            file = PolicyFile(path, owner, "missing")  # the user's own file, already read with their powers
        else:
            file = self._load_file(path, owner)
        added = [self.add(r) for r in file.rules if r not in file.inert and r not in self.rules]
        reported = [p for p in dict.fromkeys(file.problems) if p not in self.problems]
        self.problems += reported
        self._loaded[path] = _Loaded(file, signature, tuple(added), tuple(reported))
        return file

    def trust_file(self, path: str, revoke: bool = False) -> TrustReport:
        """Trust a project's policy file: read its bytes once, parse what is shown from exactly those bytes, and
        record their sha256 in the trust store; or, with `revoke`, forget it (its allow rules are inert again)."""
        path = os.path.abspath(path)
        if any(f.owner == "user" and os.path.realpath(f.path) == os.path.realpath(path) for f in self.files):
            raise TrustError(f"{path} is your own policy file (in your config folder): its rules apply without trust")
        store = self._store()
        if revoke:
            removed = store.revoke(path)
            self.refresh()
            return TrustReport(path, removed, removed, revoked=True, now=self.file(path), store=store.path)
        try:
            data = _read_capped(path)
        except OSError as error:
            raise NothingToTrust(path) if isinstance(error, FileNotFoundError) else TrustError(
                f"{path} cannot be read ({error.strerror or error}): nothing was trusted") from None
        if data is None:
            raise TrustError(f"{path} is larger than {MAX_POLICY_FILE_BYTES:,} bytes: nothing was trusted")
        shown = self._parse(path, "project", data, trusted=True)
        previous = store.trust(path, shown.sha256)
        self.refresh()
        return TrustReport(path, shown.sha256, previous, rules=shown.rules, problems=shown.problems,
                           now=self.file(path), store=store.path)

    def save_rule(self, rule: Rule, path: str | None = None) -> PolicyFile:
        """`%skills allow ... --save`: append the rule to the user's own policy file (`path`, else the one read, else
        the config folder's), rewritten atomically (its comments are not kept), so that every later session has it;
        the session's typed copy gives way to the file's."""
        import yaml

        path = path or next((f.path for f in self.files if f.owner == "user"), None) or user_policy_path()
        try:
            data = _read_capped(path) if os.path.isfile(path) else b""
            content = yaml.safe_load((data or b"").decode("utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            raise RuleError(f"cannot add the rule to {path}: it cannot be read ({error}); it applies to this session "
                            "only") from None
        if data is None or not isinstance(content, dict) or not isinstance(content.get(rule.kind) or [], list):
            raise RuleError(f"cannot add the rule to {path}: it is not a mapping with `allow` and `deny` lists; it "
                            "applies to this session only")
        grants = {"env": list(rule.env), "network": rule.network or list(rule.hosts), "write": list(rule.writable),
                  "unsandboxed": rule.unsandboxed, **dict(rule.limits)}
        entry = {"rule": rule.text, **{k: v for k, v in grants.items() if v}} if any(grants.values()) else rule.text
        entries = content.get(rule.kind) or []
        if entry not in entries:
            entries.append(entry)
        content[rule.kind] = entries
        write_atomically(path, yaml.safe_dump(content, sort_keys=False, allow_unicode=True))
        self.rules = [r for r in self.rules if r != rule]
        return self.load_file(path, owner="user")

    def _store(self) -> TrustStore:
        return self.trust or TrustStore.default()

    def _signature(self, path: str, owner: str) -> tuple:
        """What a read depends on: the file's bytes (their digest: any byte, whatever its size and times) and, for a
        project's file, the trust store's version."""
        store = self._store().signature() if owner == "project" else None
        if not os.path.isfile(path):
            return None, store
        try:
            data = _read_capped(path)
        except OSError as error:
            return f"unreadable: {error}", store
        return (sha256_of(data) if data is not None else "too big"), store

    def _load_file(self, path: str, owner: Literal["project", "user"]) -> PolicyFile:
        if not os.path.isfile(path):
            return PolicyFile(path, owner, "missing")
        origin = os.path.basename(path) if owner == "project" else USER_ORIGIN
        try:
            data = _read_capped(path)
        except OSError as error:
            return PolicyFile(path, owner, "unreadable", problems=(f"{origin}: cannot be read ({error})",))
        if data is None:
            return PolicyFile(path, owner, "unreadable", problems=(
                f"{origin}: larger than {MAX_POLICY_FILE_BYTES:,} bytes, not read (a policy is a few rules)",))
        return self._parse(path, owner, data)

    def _parse(self, path: str, owner: Literal["project", "user"], data: bytes, trusted: bool | None = None) -> PolicyFile:
        """The rules and problems these bytes hold, and (a project's file) whether they are the trusted ones;
        `trusted=True`: as they will be once trusted (what `%skills trust` shows)."""
        import yaml

        digest = sha256_of(data)
        folder = os.path.dirname(path)
        origin = os.path.basename(path) if owner == "project" else USER_ORIGIN
        rules: list[Rule] = []
        problems: list[str] = []
        try:
            content = yaml.safe_load(data.decode("utf-8")) or {}
        except (UnicodeDecodeError, yaml.YAMLError) as error:
            problems.append(f"{origin}: cannot be read ({error})")
            content = {}
        if not isinstance(content, dict):
            problems.append(f"{origin}: expected a mapping with `allow` and `deny` lists")
            content = {}
        for kind in ("deny", "allow"):
            entries = content.get(kind) or []
            if not isinstance(entries, list):
                problems.append(f"{origin}: `{kind}` must be a list of rules")
                continue
            for entry in entries:
                rule = _entry_rule(kind, entry, origin, owner, folder, problems)
                if rule is not None and rule not in rules:
                    rules.append(rule)
        if owner == "user":
            return PolicyFile(path, owner, "user", digest, rules=tuple(rules), problems=tuple(problems))
        if trusted:
            state, recorded = "trusted", digest
        else:
            try:
                found = self._store().state(path, digest)
                state, recorded = found.status, found.trusted_sha256
            except TrustError as error:
                state, recorded = "untrusted", None
                problems.append(str(error))
        inert = () if state == "trusted" else tuple(r for r in rules if r.kind == "allow")
        return PolicyFile(path, owner, state, digest, recorded, tuple(rules), inert, tuple(problems))

    def extend(self, kind: str, texts: Iterable[str], origin: str) -> None:
        for text in texts:
            try:
                self.add(parse_rule(kind, text, origin))
            except RuleError as error:
                self.problems.append(str(error))


def _read_capped(path: str) -> bytes | None:
    """A policy file's bytes, or None when it is larger than MAX_POLICY_FILE_BYTES (raises OSError)."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_POLICY_FILE_BYTES + 1)
    return None if len(data) > MAX_POLICY_FILE_BYTES else data


def _entry_rule(kind: str, entry, origin: str, owner: str, folder: str, problems: list[str]) -> Rule | None:
    """One entry of a policy file as a rule. From a project's file, a grant it may not give (secrets, unsandboxed,
    a write outside its folder) is dropped and reported, and the rest of the entry stays; an entry that cannot be a
    rule from there (a wildcard skill, a bad pattern) is refused and reported."""
    extra = entry if isinstance(entry, dict) else {}
    text = extra.get("rule") if isinstance(entry, dict) else entry
    if not isinstance(text, str):  # checked before anything formats it: a YAML alias bomb must not be printed
        problems.append(f"{origin}: an entry of `{kind}` is not a rule: write SKILL:PATH or {{rule: SKILL:PATH, ...}}")
        return None
    env, writable = extra.get("env") or [], extra.get("write") or []
    env = [env] if isinstance(env, str) else env
    writable = [writable] if isinstance(writable, str) else writable
    if not isinstance(env, list) or not all(isinstance(v, str) for v in env):
        problems.append(f"{origin}: `env` of {text!r} must be a list of variable names")
        return None
    if not isinstance(writable, list) or not all(isinstance(w, str) for w in writable):
        problems.append(f"{origin}: `write` of {text!r} must be a list of paths")
        return None
    network, unsandboxed = extra.get("network"), extra.get("unsandboxed") is True
    if owner == "project" and kind == "allow" and network is True:
        problems.append(f"{text!r}: `network: true` dropped: the whole network is granted only from {USER_ONLY}, never "
                        f"from {origin}; name the hosts instead, e.g. network: [pypi.org]")
        network = None
    limits = {name: extra[name] for name in LIMIT_GRANTS if name in extra}
    if owner == "project" and kind == "allow":
        if env:
            problems.append(f"{text!r}: `env: {', '.join(env)}` dropped: secrets are granted only from {USER_ONLY}, "
                            f"never from {origin}")
            env = []
        if unsandboxed:
            problems.append(f"{text!r}: `unsandboxed` dropped: running unsandboxed is accepted only from {USER_ONLY}, "
                            f"never from {origin}")
            unsandboxed = False
        kept = []
        for path in writable:
            try:
                _confined(folder, path)
                kept.append(path)
            except RuleError as reason:
                problems.append(_write_refusal(text, path, reason, origin, "dropped"))
        writable = kept
    elif owner == "user":
        writable = [os.path.join(folder, os.path.expanduser(w)) for w in writable]
    try:
        return parse_rule(kind, text, origin, env, user_typed=owner == "user", network=network, writable=writable,
                          unsandboxed=unsandboxed, inside=folder if owner == "project" else None, limits=limits)
    except RuleError as error:
        problems.append(str(error))
        return None


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
