"""The gate every script run and inline shell command passes: manifest check, policy decision, asking, execution,
and an audit row for each decision and run.

Order: the script must resolve inside the skill; a reviewed skill's bytes must match `skills.lock`; then deny rules,
allow rules, and finally a person is asked. Where nobody can answer (no stdin: nbclient, nbval, papermill, CI), the
answer is deny, and the message says which rule would pre-approve the run.
"""

from __future__ import annotations

import datetime
import glob
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from skills_magic import execute, sandbox
from skills_magic.disclosure import INLINE_SHELL
from skills_magic.execute import (
    ScriptError,
    ScriptRun,
    clean_environment,
    resolve_script,
    run_command,
    run_script,
)
from skills_magic.manifest import SKIPPED, Manifest, ManifestMismatch, digest
from skills_magic.policy import Policy, Rule, pre_approval_hint
from skills_magic.skill import Skill

INLINE_TIMEOUT_SECONDS = 10.0  # an inline command fills in a line of instructions; it should be quick
Answer = Literal["once", "always", "deny"]


@dataclass(frozen=True)
class PermissionRequest:
    """What a person sees before deciding: never less than this."""

    skill: str
    path: str  # script path in the skill, or `!command`
    digest: str | None
    arguments: tuple[str, ...]
    stdin_bytes: int
    allowed_tools: Any  # the skill's own `allowed-tools`: a request, shown, never a grant

    @property
    def rule(self) -> str:
        return f"{self.skill}:{self.path}"

    def describe(self) -> str:
        lines = [
            f"skill {self.skill} wants to run {self.path}",
            f"  sha256    {self.digest or '-'}",
            f"  arguments {list(self.arguments)}",
            f"  stdin     {self.stdin_bytes:,} bytes",
        ]
        ok, why = sandbox.availability()
        lines.append(f"  sandbox   {'yes: ' + why if ok else 'NONE: ' + why}")
        if self.allowed_tools:
            lines.append(f"  the skill requests allowed-tools: {self.allowed_tools} (a request, not a grant)")
        return "\n".join(lines)


class Unattended(Exception):
    """Nobody can answer a prompt here (the kernel takes no input)."""


def unattended(request: PermissionRequest) -> Answer:
    raise Unattended("nobody can answer a permission prompt here (the kernel does not accept input)")


Asker = Callable[[PermissionRequest], Answer]


@dataclass(frozen=True)
class Outcome:
    """What the gate did with one request: ran it (run), or refused it (error), and who decided."""

    allowed: bool
    decided_by: str
    run: ScriptRun | None = None
    error: str | None = None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Gate:
    def __init__(self, policy: Policy, manifest: Manifest, audit: Callable[[dict[str, Any]], None],
                 timeout: float | None = None, scratch_root: str | None = None, scratch_cap: int | None = None):
        self.policy = policy
        self.manifest = manifest
        self.audit = audit
        self.timeout = timeout if timeout is not None else execute.DEFAULT_TIMEOUT_SECONDS
        self.scratch_root = scratch_root or tempfile.gettempdir()
        self.scratch_cap = scratch_cap if scratch_cap is not None else sandbox.SCRATCH_CAP_BYTES

    def _sandbox(self, skill: str, subject: str, folder: str) -> tuple[Any, str | None]:
        """(the sandbox for run_command, None), or (None, None) for an allowed unsandboxed run, or (None, refusal)."""
        grants = self.policy.grants(skill, subject)
        ok, why = sandbox.availability()
        if ok:
            os.makedirs(self.scratch_root, exist_ok=True)
            scratch = tempfile.mkdtemp(prefix="run-", dir=self.scratch_root)
            return (lambda command: sandbox.wrap(command, folder, scratch, grants), scratch, self.scratch_cap), None
        if grants.unsandboxed:
            return None, None
        hint = pre_approval_hint(skill, subject).replace("%skills allow ", "")
        return None, (f"refused: no sandbox can be made here ({why}); to run it without one anyway: "
                      f"%skills allow {hint} --unsandboxed")

    def _decide(self, request: PermissionRequest, asker: Asker, requested_by: str) -> tuple[bool, str]:
        decision = self.policy.decide(request.skill, request.path)
        if decision.verdict != "ask":
            return decision.verdict == "allow", str(decision.rule)
        if requested_by == "user":
            return True, "the user's own command"  # typing the command is the answer; deny rules still win
        try:
            answer = asker(request)
        except (Unattended, EOFError, OSError) as error:
            reason = str(error) if isinstance(error, Unattended) else "nobody can answer a permission prompt here"
            return False, f"{reason}; to pre-approve: {pre_approval_hint(request.skill, request.path)}"
        except Exception as error:  # StdinNotImplementedError and friends: the same situation
            if type(error).__name__ == "StdinNotImplementedError":
                return False, ("nobody can answer a permission prompt here (the kernel does not accept input); "
                               f"to pre-approve: {pre_approval_hint(request.skill, request.path)}")
            raise
        if answer == "always":  # this path exactly: escaped, so `run[1].py` does not become a pattern
            self.policy.add(Rule("allow", request.skill, glob.escape(request.path), "asked: always"))
            return True, "the user: always for this skill and path"
        if answer == "once":
            return True, "the user: once"
        return False, "the user: deny"

    def _record(self, event: str, skill: str, path: str, **facts: Any) -> None:
        self.audit({"at": _now(), "event": event, "skill": skill, "path": path, **facts})

    def run_script(self, skill: Skill, path: str, arguments: Sequence[str], stdin: str, asker: Asker,
                   requested_by: str = "model") -> Outcome:
        """Check, decide, run and record one script of a skill."""
        try:
            target = resolve_script(skill.folder, path)
            # rules, prompts and the audit see the file that will really run, not the spelling that was asked for
            path = os.path.relpath(target, os.path.realpath(skill.folder)).replace(os.sep, "/")
            if any(part in SKIPPED for part in path.split("/")) or path.endswith(".pyc"):
                raise ScriptError(f"{path!r} is in a folder skills.lock does not pin ({', '.join(sorted(SKIPPED))}, *.pyc); "
                                  "it is not run")
            script_digest = digest(target)
        except (ScriptError, OSError) as error:
            message = str(error) if isinstance(error, ScriptError) else f"{path!r} cannot be read"
            self._record("decision", skill.name, path, decision="deny", decided_by="the executor", detail=message)
            return Outcome(False, "the executor", error=message)
        try:
            self.manifest.check(skill.name, skill.folder)
        except ManifestMismatch as error:
            self._record("decision", skill.name, path, digest=script_digest, decision="deny",
                         decided_by="skills.lock", detail=str(error))
            return Outcome(False, "skills.lock", error=f"refused: {error}")
        request = PermissionRequest(skill.name, path, script_digest, tuple(arguments), len(stdin.encode("utf-8")),
                                    skill.frontmatter.allowed_tools)
        allowed, decided_by = self._decide(request, asker, requested_by)
        self._record("decision", skill.name, path, digest=script_digest, decision="allow" if allowed else "deny",
                     decided_by=decided_by)
        if not allowed:
            return Outcome(False, decided_by, error=f"denied: {decided_by}")
        box, refusal = self._sandbox(skill.name, path, skill.folder)
        if refusal:
            self._record("decision", skill.name, path, digest=script_digest, decision="deny", decided_by="the sandbox",
                         detail=refusal)
            return Outcome(False, "the sandbox", error=refusal)
        try:
            run = run_script(skill.folder, path, arguments, stdin, timeout=self.timeout,
                             granted_env=self.policy.granted_env(skill.name, path), sandbox=box)
        except ScriptError as error:
            self._record("run", skill.name, path, digest=script_digest, detail=str(error))
            return Outcome(True, decided_by, error=str(error))
        self._record("run", skill.name, path, digest=run.sha256, exit_code=run.exit_code, seconds=round(run.seconds, 6),
                     detail=run.stopped or ("timed out" if run.timed_out else ("output cut" if run.truncated else None)))
        return Outcome(True, decided_by, run=run)

    def run_check(self, owner: str, command: str, folder: str, asker: Asker, timeout: float | None = None) -> Outcome:
        """A shell command that is not part of a skill (a ledger prediction's falsifying check): decided for the
        pseudo-skill `owner` and subject `!command` (so `%skills allow ledger:!pytest *` pre-approves it)."""
        subject = f"!{command}"
        request = PermissionRequest(owner, subject, None, (), 0, None)
        allowed, decided_by = self._decide(request, asker, "model")
        self._record("decision", owner, subject, decision="allow" if allowed else "deny", decided_by=decided_by)
        if not allowed:
            return Outcome(False, decided_by, error=f"denied: {decided_by}")
        box, refusal = self._sandbox(owner, subject, folder)
        if refusal:
            return Outcome(False, "the sandbox", error=refusal)
        try:
            run = run_command(["bash", "-c", command], folder, subject, (), "", timeout or self.timeout,
                              clean_environment(granted=self.policy.granted_env(owner, subject)), "-", box)
        except ScriptError as error:
            return Outcome(True, decided_by, error=str(error))
        self._record("run", owner, subject, exit_code=run.exit_code, seconds=round(run.seconds, 6),
                     detail="timed out" if run.timed_out else None)
        return Outcome(True, decided_by, run=run)

    def expand_inline(self, skill: Skill, body: str, asker: Asker) -> str:
        """Run each !`command` of an activated body through the policy; a denied one becomes a visible marker."""

        def replace(match: re.Match) -> str:
            command = match.group(1)
            subject = f"!{command}"
            request = PermissionRequest(skill.name, subject, None, (), 0, skill.frontmatter.allowed_tools)
            try:
                self.manifest.check(skill.name, skill.folder)
            except ManifestMismatch as error:
                self._record("decision", skill.name, subject, decision="deny", decided_by="skills.lock", detail=str(error))
                return f"[denied: !`{command}`: {error}]"
            allowed, decided_by = self._decide(request, asker, "model")
            self._record("decision", skill.name, subject, decision="allow" if allowed else "deny", decided_by=decided_by)
            if not allowed:
                return f"[denied: !`{command}`: {decided_by}]"
            box, refusal = self._sandbox(skill.name, subject, skill.folder)
            if refusal:
                return f"[denied: !`{command}`: {refusal}]"
            try:
                run = run_command(["bash", "-c", command], skill.folder, subject, (), "", INLINE_TIMEOUT_SECONDS,
                                  clean_environment(granted=self.policy.granted_env(skill.name, subject)), "-", box)
            except ScriptError as error:
                return f"[failed: !`{command}`: {error}]"
            self._record("run", skill.name, subject, exit_code=run.exit_code, seconds=round(run.seconds, 6))
            if run.exit_code != 0:
                return f"[failed: !`{command}` exited with {run.exit_code}: {run.stderr.strip()[:200]}]"
            return run.stdout.rstrip("\n")

        return INLINE_SHELL.sub(replace, body)
