"""The permission policy: deny rules, then allow rules, then ask (and where nobody can answer, deny).

A rule (`skills_magic.safety.rules`) names a skill and a path pattern inside it:
`source-verification:scripts/verify.py`, `source-verification:scripts/*`, or `source-verification:!date *` for an
inline shell command of its body. A `*` for the skill matches every skill, and is accepted only where the user typed
it (`%skills allow`, IPython config), never from a project's `skills-policy.yaml`, which arrives with a cloned
repository: its allow rules are inert until the user trusts its exact bytes (`skills_magic.safety.trust`), and even
then it grants no secrets, no unsandboxed runs and no writes outside its folder. A skill's own `allowed-tools` is shown
as a request and never taken as a grant.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from skills_magic.safety.rules import LIMIT_GRANTS, Rule, RuleError, parse_rule
# re-exported: its home before the split
from skills_magic.safety.rules import (USER_ONLY, escape_pattern, parse_limits, pattern_matches,  # noqa: F401
                                       pre_approval_hint)
from skills_magic.safety.trust import (NothingToTrust, TrustError, TrustReport, TrustStore, sha256_of, short, user_policy_path,
                                write_atomically)

POLICY_FILE = "skills-policy.yaml"  # in the session's folder
MAX_POLICY_FILE_BYTES = 256 * 1024  # a policy is a few dozen rules; a bigger file is refused, never parsed
USER_ORIGIN = "your skills-policy.yaml"  # the origin of rules from the user's own file in their config folder
Verdict = Literal["allow", "deny", "ask"]


@dataclass(frozen=True)
class Decision:
    """What the policy says about one request: the verdict and the rule behind it (None: no rule matches)."""

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
        return self._judge(skill, path)[0]

    def grants(self, skill: str, path: str):
        """Everything every matching allow rule grants (nothing when a deny rule matches)."""
        from skills_magic.safety.box.grants import Grants, Limits

        decision, matching = self._judge(skill, path)
        if decision.verdict != "allow":
            return Grants()
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

    def _judge(self, skill: str, path: str) -> tuple[Decision, list[Rule]]:
        """The decision and every allow rule that matches (none when a deny rule does), from one pass over the rules
        as they are after re-reading any changed policy file."""
        self.refresh()
        matching = [rule for rule in self.rules if rule.matches(skill, path)]
        deny = next((rule for rule in matching if rule.kind == "deny"), None)
        if deny is not None:
            return Decision("deny", deny), []
        allows = [rule for rule in matching if rule.kind == "allow"]
        return (Decision("allow", allows[0]), allows) if allows else (Decision("ask"), [])

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
    limits = {name: extra[name] for name in LIMIT_GRANTS if name in extra}
    try:
        # what a project's file may not grant is dropped there (reported in `problems`), the rest of the entry kept
        return parse_rule(kind, text, origin, env, user_typed=owner == "user", network=extra.get("network"),
                          writable=writable, unsandboxed=extra.get("unsandboxed") is True, inside=folder, limits=limits,
                          dropped=problems)
    except RuleError as error:
        problems.append(str(error))
        return None

