"""The permission policy: deny rules, then allow rules, then ask (and where nobody can answer, deny).

A rule names a skill and a path pattern inside it: `source-verification:scripts/verify.py`,
`source-verification:scripts/*`, or `source-verification:!date *` for an inline shell command of its body. A `*` for
the skill matches every skill, and is accepted only where the user typed it (`%skills allow`, IPython config), never
from a project's `skills-policy.yaml`, which arrives with a cloned repository. A skill's own `allowed-tools` is
shown as a request and never taken as a grant.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from skills_magic.errors import SkillsMagicError

POLICY_FILE = "skills-policy.yaml"  # in the session's folder
Verdict = Literal["allow", "deny", "ask"]


class RuleError(SkillsMagicError, ValueError):
    """A rule that cannot be understood or is not allowed from where it came."""


@dataclass(frozen=True)
class Rule:
    """`allow` or `deny` for a skill (or `*`) and a path pattern (fnmatch, `/`-separated)."""

    kind: Literal["allow", "deny"]
    skill: str
    pattern: str
    origin: str  # where it came from: "%skills allow", "skills-policy.yaml", "IPython config", "asked: always"
    env: tuple[str, ...] = ()  # secret-looking variables an allow rule lets through to the script
    network: bool = False  # the sandbox keeps its network namespace off unless a rule grants it
    writable: tuple[str, ...] = ()  # absolute paths the script may write besides its scratch folder
    unsandboxed: bool = False  # run even where no sandbox can be made (only ever typed by the user)

    @property
    def text(self) -> str:
        return f"{self.skill}:{self.pattern}"

    def matches(self, skill: str, path: str) -> bool:
        return (self.skill == "*" or self.skill == skill) and fnmatch.fnmatchcase(path, self.pattern)

    def __str__(self) -> str:
        grants = [f"env: {', '.join(self.env)}"] if self.env else []
        grants += ["network"] if self.network else []
        grants += [f"write: {p}" for p in self.writable]
        grants += ["unsandboxed"] if self.unsandboxed else []
        shown = f" ({'; '.join(grants)})" if grants else ""
        return f"{self.kind} {self.text}{shown}  [{self.origin}]"


def parse_rule(kind: str, text: str, origin: str, env: Sequence[str] = (), user_typed: bool = True, *,
               network: bool = False, writable: Sequence[str] = (), unsandboxed: bool = False) -> Rule:
    if kind not in ("allow", "deny"):
        raise RuleError(f"a rule is `allow` or `deny`, not {kind!r}")
    skill, separator, pattern = str(text).strip().partition(":")
    if not separator:
        if skill == "*" and user_typed:  # `%skills allow *`: everything, typed by the user
            return Rule(kind, "*", "*", origin, tuple(env), network, tuple(writable), unsandboxed)
        raise RuleError(f"{text!r} is not a rule: write SKILL:PATH, e.g. source-verification:scripts/verify.py")
    skill, pattern = skill.strip(), pattern.strip()
    if not skill or not pattern:
        raise RuleError(f"{text!r} needs both a skill and a path pattern")
    if "*" in skill and (skill != "*" or not user_typed):
        raise RuleError(f"{text!r}: a wildcard skill is accepted only from %skills {kind} or IPython config, "
                        f"not from {origin}")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise RuleError(f"{text!r}: a path pattern is relative to the skill's folder and stays inside it")
    if unsandboxed and not user_typed:
        raise RuleError(f"{text!r}: running unsandboxed is accepted only from %skills allow or IPython config, not from {origin}")
    if kind == "deny" and (env or network or writable or unsandboxed):
        raise RuleError(f"{text!r}: a deny rule grants nothing")
    return Rule(kind, skill, pattern, origin, tuple(env), network, tuple(os.path.abspath(p) for p in writable), unsandboxed)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    rule: Rule | None = None

    @property
    def reason(self) -> str:
        return str(self.rule) if self.rule else "no rule matches"


@dataclass
class Policy:
    """Rules in the order they were added, with the problems met while reading them."""

    rules: list[Rule] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _file: tuple[str, tuple[int, int] | None, list[Rule], list[str]] | None = field(default=None, repr=False)

    def refresh(self) -> None:
        """Re-read the project's policy file when it changed on disk (edited, created or removed)."""
        if self._file is None:
            return
        path, signature, rules, problems = self._file
        if _signature(path) == signature:
            return
        self.rules = [r for r in self.rules if r not in rules]
        self.problems = [p for p in self.problems if p not in problems]
        self.load_file(path)

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
        from skills_magic.sandbox import Grants

        if self.decide(skill, path).verdict != "allow":
            return Grants()
        matching = [r for r in self.rules if r.kind == "allow" and r.matches(skill, path)]
        return Grants(env=self.granted_env(skill, path), network=any(r.network for r in matching),
                      writable=tuple(dict.fromkeys(p for r in matching for p in r.writable)),
                      unsandboxed=any(r.unsandboxed for r in matching))

    def granted_env(self, skill: str, path: str) -> tuple[str, ...]:
        """Variables every matching allow rule grants (none when a deny rule matches)."""
        if self.decide(skill, path).verdict != "allow":
            return ()
        granted: list[str] = []
        for rule in self.rules:
            if rule.kind == "allow" and rule.matches(skill, path):
                granted += [name for name in rule.env if name not in granted]
        return tuple(granted)

    def load_file(self, path: str) -> None:
        """Rules from a project's `skills-policy.yaml`: `allow:` and `deny:` lists of `SKILL:PATH` strings, or of
        mappings `{rule: SKILL:PATH, env: [VAR, ...]}`. Bad entries are reported, never fatal. The file is read
        again whenever it changes."""
        rules_before, problems_before = list(self.rules), list(self.problems)
        try:
            self._load_file(path)
        finally:
            added = [r for r in self.rules if r not in rules_before]
            reported = [p for p in self.problems if p not in problems_before]
            self._file = (path, _signature(path), added, reported)

    def _load_file(self, path: str) -> None:
        if not os.path.isfile(path):
            return
        import yaml

        origin = os.path.basename(path)
        try:
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            self.problems.append(f"{origin}: cannot be read ({error})")
            return
        if not isinstance(data, dict):
            self.problems.append(f"{origin}: expected a mapping with `allow` and `deny` lists")
            return
        for kind in ("deny", "allow"):
            for entry in data.get(kind) or []:
                text, env = (entry.get("rule"), entry.get("env") or []) if isinstance(entry, dict) else (entry, [])
                env = [env] if isinstance(env, str) else env
                if not isinstance(env, list):
                    self.problems.append(f"{origin}: `env` of {text!r} must be a list of variable names")
                    continue
                extra = entry if isinstance(entry, dict) else {}
                writable = extra.get("write") or []
                writable = [writable] if isinstance(writable, str) else writable
                try:
                    self.add(parse_rule(kind, text, origin, [str(v) for v in env], user_typed=False,
                                        network=bool(extra.get("network")), unsandboxed=bool(extra.get("unsandboxed")),
                                        writable=[os.path.join(os.path.dirname(os.path.abspath(path)), str(w)) for w in writable]))
                except RuleError as error:
                    self.problems.append(str(error))

    def extend(self, kind: str, texts: Iterable[str], origin: str) -> None:
        for text in texts:
            try:
                self.add(parse_rule(kind, text, origin))
            except RuleError as error:
                self.problems.append(str(error))


def _signature(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def pre_approval_hint(skill: str, path: str) -> str:
    """The command that pre-approves exactly this path, quoted so that it can be pasted as is."""
    rule = f"{skill}:{glob.escape(path)}"
    if re.fullmatch(r"[\w.:/*?\[\]!-]+", rule):
        return f"%skills allow {rule}"
    return f'%skills allow "{rule}"' if '"' not in rule and "\\" not in rule else f"%skills allow {shlex.quote(rule)}"
