"""The gate every script run and inline shell command passes: manifest check, policy decision, asking, execution,
and an audit row for each decision and run.

Order: the script must resolve inside the skill; a reviewed skill's bytes must match `skills.lock`; then deny rules,
allow rules, and finally a person is asked. Where nobody can answer (no stdin: nbclient, nbval, papermill, CI), the
answer is deny, and the message says which rule would pre-approve the run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from skills_magic.safety import execute, hints, sandbox
from skills_magic.clock import utc_now
from skills_magic.safety.execute import (
    ScriptError,
    ScriptRun,
    clean_environment,
    resolve_script,
    run_command,
    run_script,
)
from skills_magic.safety.box.grants import Grants
from skills_magic.safety.manifest import SKIPPED, Manifest, ManifestMismatch, PrivateCopy, digest
from skills_magic.safety.policy import Policy, Rule, escape_pattern, pre_approval_hint
from skills_magic.redact import redactor
from skills_magic.safety.requests import Answer, Asker, PermissionRequest, Unattended, unattended  # noqa: F401  (re-exported)
from skills_magic.skills.skill import Skill

INPUTS_VARIABLE = "SKILLS_MAGIC_INPUTS"  # where a run's scripts find the kernel objects handed to it (`--with`)
INLINE_TIMEOUT_SECONDS = 10.0  # an inline command fills in a line of instructions; it should be quick
@dataclass(frozen=True)
class Outcome:
    """What the gate did with one request: ran it (run), or refused it (error), and who decided."""

    allowed: bool
    decided_by: str
    run: ScriptRun | None = None
    error: str | None = None


def sandbox_line() -> str:
    """What a run asked about now would be confined by, as the permission prompt shows it."""
    ok, why = sandbox.availability()
    return f"yes: {why}" if ok else f"NONE: {why}"


def masked(run: ScriptRun) -> ScriptRun:
    """The run with credential-looking values masked in what it printed: everything downstream (tool results,
    cassettes, the audit, the cell) stores only this."""
    m = redactor()
    return dataclasses.replace(run, stdout=m.mask(run.stdout), stderr=m.mask(run.stderr))


@dataclass(frozen=True)
class SandboxDecision:
    """Where an allowed run goes: into a prepared sandbox (`box`), unsandboxed (no box and no refusal: a rule the
    user typed allows it), or nowhere (`refusal`: why, and the rule that would allow it)."""

    box: sandbox.Box | None = None
    refusal: str | None = None
    folder: str = ""  # where the run starts: the working folder
    skill_folder: str = ""  # a run from a private copy: the skill's folder as the process sees it ("" otherwise)


def _copy_mount(copy: str, skill_folder: str, working: str) -> tuple[str, str]:
    """(the private copy, where the sandbox shows it): at the skill's own folder, so `${SKILL_DIR}` and `__file__`
    paths work; but where the notebook sits inside the skill's folder, mounting there would hide the working folder,
    so the copy is shown at its own path."""
    if working == skill_folder or working.startswith(skill_folder.rstrip("/") + "/"):
        return copy, copy
    return copy, skill_folder


def _digest_or_none(path: str) -> str | None:
    """The digest of a file on disk for the audit of a refusal (never blocks: special files are not read)."""
    try:
        return digest(path)
    except OSError:
        return None


class Gate:
    def __init__(self, policy: Policy, manifest: Manifest, audit: Callable[[dict[str, Any]], None],
                 timeout: float | None = None, scratch_root: str | None = None, scratch_cap: int | None = None,
                 protected: Sequence[str] = (), working_folder: str | None = None):
        self.policy = policy
        self.manifest = manifest
        self.audit = audit
        self.timeout = timeout if timeout is not None else execute.DEFAULT_TIMEOUT_SECONDS
        self.scratch_root = scratch_root or tempfile.gettempdir()
        self.scratch_cap = scratch_cap  # None: the write limit of the rule's grants (or the default)
        self.protected = tuple(protected)  # the project's control files: read-only in every sandbox
        # where scripts and inline commands run: the session's (the notebook's) folder, seen copy-on-write
        self.working_folder = os.path.realpath(working_folder) if working_folder else None
        self.run_env: dict[str, str] = {}  # variables every run of this gate gets (`with_inputs`)

    def with_inputs(self, folder: str | None) -> Gate:
        """This gate, its runs handed the kernel objects in `folder` (`--with`): scripts find it in $SKILLS_MAGIC_INPUTS."""
        self.run_env = {INPUTS_VARIABLE: os.path.realpath(folder)} if folder else {}
        return self

    def _sandbox(self, skill: str, subject: str, folder: str, grants: Grants,
                 skill_copy: tuple[str, str] | None = None) -> SandboxDecision:
        """A prepared sandbox for a run in `folder`, or no box for an allowed unsandboxed run, or a refusal."""
        ok, why = sandbox.availability()
        if ok:
            if self.scratch_cap is not None:
                grants = dataclasses.replace(grants, limits=dataclasses.replace(grants.limits, write_bytes=self.scratch_cap))
            os.makedirs(self.scratch_root, exist_ok=True)
            run = tempfile.mkdtemp(prefix="run-", dir=self.scratch_root)
            with open(os.path.join(run, "run.json"), "w", encoding="utf-8") as handle:  # what apply checks against
                json.dump({"started_ns": time.time_ns(), "working_folder": folder, "skill": skill, "subject": subject},
                          handle)
            box = sandbox.prepare(folder, run, grants, protected=self.protected, skill_copy=skill_copy,
                                  working=folder == self.working_folder,
                                  refusal=hints.HostRefusal(skill, subject, grants.hosts))
            return SandboxDecision(box, folder=folder)
        if grants.unsandboxed:
            return SandboxDecision(folder=folder)
        hint = pre_approval_hint(skill, subject).replace("%skills allow ", "")
        return SandboxDecision(refusal=(f"refused: no sandbox can be made here ({why}); to run it without one anyway: "
                                        f"%skills allow {hint} --unsandboxed"), folder=folder)

    def _copied_sandbox(self, skill: Skill, subject: str, grants: Grants, copy: PrivateCopy) -> SandboxDecision:
        """The sandbox decision for a run from `copy`, in the working folder, with the skill's folder as the process
        sees it."""
        real_folder = os.path.realpath(skill.folder)
        working = self.working_folder or real_folder
        mount = _copy_mount(copy.folder, real_folder, working)
        decision = self._sandbox(skill.name, subject, working, grants, mount)
        # in the sandbox the copy is shown where `mount` says; without one, the copy's own path is used
        return dataclasses.replace(decision, skill_folder=mount[1] if decision.box is not None else copy.folder)

    def _timeout(self, grants: Grants, default: float | None = None) -> float:
        """A `--timeout` grant, else the gate's own timeout."""
        granted = grants.limits.wall_seconds
        return float(granted) if granted else (default if default is not None else self.timeout)

    def _explained(self, run: ScriptRun, skill: str, subject: str, grants: Grants) -> ScriptRun:
        """The run with a hint line when it failed for a reason the user can fix (a grant, a missing program)."""
        if not run.failed and not run.refused_hosts:
            return run
        hint = hints.failure_hint(run.stderr, run.exit_code, run.timed_out, skill=skill, subject=subject,
                                  network=grants.network, hosts=grants.hosts, refused_hosts=run.refused_hosts,
                                  working_folder=self.working_folder,
                                  working_copy_on_write=run.working_folder is not None, stdout=run.stdout)
        if run.stopped and hint and not hint.startswith("hint: the sandbox refused"):
            hint = None  # the limit's own line already says what to do
        return dataclasses.replace(run, hint=hint) if hint else run

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
            self.policy.add(Rule("allow", request.skill, escape_pattern(request.path), "asked: always"))
            return True, "the user: always for this skill and path"
        if answer == "once":
            return True, "the user: once"
        return False, "the user: deny"

    def _record(self, event: str, skill: str, path: str, **facts: Any) -> None:
        self.audit({"at": utc_now(), "event": event, "skill": skill, "path": path, **facts})

    def _private_copy(self, skill: Skill) -> PrivateCopy:
        """The skill's files copied aside (the reviewed bytes, for a reviewed skill), hashed as they were copied:
        what runs is what was checked. Raises ManifestMismatch (a changed, unpinned or special file)."""
        destination = tempfile.mkdtemp(prefix="skills-magic-copy-")
        try:
            return self.manifest.copy(skill.name, skill.folder, destination)
        except BaseException:
            shutil.rmtree(destination, ignore_errors=True)
            raise

    def run_script(self, skill: Skill, path: str, arguments: Sequence[str], stdin: str, asker: Asker,
                   requested_by: str = "model") -> Outcome:
        """Check, decide, run and record one script of a skill, run from a private copy of the skill's files."""
        try:
            target = resolve_script(skill.folder, path)
            # rules, prompts and the audit see the file that will really run, not the spelling that was asked for
            path = os.path.relpath(target, os.path.realpath(skill.folder)).replace(os.sep, "/")
            if any(part in SKIPPED for part in path.split("/")) or path.endswith(".pyc"):
                raise ScriptError(f"{path!r} is in a folder skills.lock does not pin ({', '.join(sorted(SKIPPED))}, *.pyc); "
                                  "it is not run")
        except (ScriptError, OSError) as error:
            message = str(error) if isinstance(error, ScriptError) else f"{path!r} cannot be read"
            self._record("decision", skill.name, path, decision="deny", decided_by="the executor", detail=message)
            return Outcome(False, "the executor", error=message)
        try:
            copy = self._private_copy(skill)
        except ManifestMismatch as error:
            self._record("decision", skill.name, path, digest=_digest_or_none(target), decision="deny",
                         decided_by="skills.lock", detail=str(error))
            return Outcome(False, "skills.lock", error=f"refused: {error}")
        except OSError as error:
            message = f"refused: the skill's files could not be copied aside to run ({error.strerror or error})"
            self._record("decision", skill.name, path, decision="deny", decided_by="the executor", detail=message)
            return Outcome(False, "the executor", error=message)
        try:
            return self._run_copied(skill, path, arguments, stdin, asker, requested_by, copy)
        finally:
            shutil.rmtree(copy.folder, ignore_errors=True)

    def _run_copied(self, skill: Skill, path: str, arguments: Sequence[str], stdin: str, asker: Asker,
                    requested_by: str, copy: PrivateCopy) -> Outcome:
        script_digest = copy.files.get(path)
        if script_digest is None:  # a file the copy leaves out (not pinned, not a regular file) never runs
            message = f"{path!r} is not among the skill's {'reviewed ' if copy.reviewed else ''}files; it is not run"
            self._record("decision", skill.name, path, decision="deny", decided_by="the executor", detail=message)
            return Outcome(False, "the executor", error=message)
        request = PermissionRequest(skill.name, path, script_digest, tuple(arguments), len(stdin.encode("utf-8", "replace")),
                                    skill.frontmatter.allowed_tools, sandbox_line())
        allowed, decided_by = self._decide(request, asker, requested_by)
        self._record("decision", skill.name, path, digest=script_digest, decision="allow" if allowed else "deny",
                     decided_by=decided_by)
        if not allowed:
            return Outcome(False, decided_by, error=f"denied: {decided_by}")
        grants = self.policy.grants(skill.name, path)  # once: the sandbox, the timeout and the hint read the same
        placed = self._copied_sandbox(skill, path, grants, copy)
        if placed.refusal:
            self._record("decision", skill.name, path, digest=script_digest, decision="deny", decided_by="the sandbox",
                         detail=placed.refusal)
            return Outcome(False, "the sandbox", error=placed.refusal)
        try:
            run = run_script(placed.folder, path, arguments, stdin, timeout=self._timeout(grants),
                             granted_env=grants.env, extra_env=self.run_env, sandbox=placed.box,
                             target=os.path.join(placed.skill_folder, *path.split("/")), digest=script_digest,
                             import_root=placed.skill_folder)
        except ScriptError as error:
            if placed.box is not None:
                placed.box.close()
            self._record("run", skill.name, path, digest=script_digest, detail=str(error))
            return Outcome(True, decided_by, error=str(error))
        run = self._explained(masked(run), skill.name, path, grants)
        self._record("run", skill.name, path, digest=run.sha256, exit_code=run.exit_code, seconds=round(run.seconds, 6),
                     detail=run.stopped or ("timed out" if run.timed_out else ("output cut" if run.truncated else None)))
        return Outcome(True, decided_by, run=run)

    def run_check(self, owner: str, command: str, folder: str, asker: Asker, timeout: float | None = None) -> Outcome:
        """A shell command that is not part of a skill (a ledger prediction's falsifying check): decided for the
        pseudo-skill `owner` and subject `!command` (so `%skills allow ledger:!pytest *` pre-approves it)."""
        subject = f"!{command}"
        request = PermissionRequest(owner, subject, None, (), 0, None, sandbox_line())
        allowed, decided_by = self._decide(request, asker, "model")
        self._record("decision", owner, subject, decision="allow" if allowed else "deny", decided_by=decided_by)
        if not allowed:
            return Outcome(False, decided_by, error=f"denied: {decided_by}")
        grants = self.policy.grants(owner, subject)
        placed = self._sandbox(owner, subject, folder, grants)
        if placed.refusal:
            return Outcome(False, "the sandbox", error=placed.refusal)
        try:
            run = masked(run_command(["bash", "-c", command], placed.folder, subject, (), "",
                                     self._timeout(grants, timeout), clean_environment(granted=grants.env) | self.run_env, "-",
                                     placed.box))
            run = self._explained(run, owner, subject, grants)
        except ScriptError as error:
            return Outcome(True, decided_by, error=str(error))
        self._record("run", owner, subject, exit_code=run.exit_code, seconds=round(run.seconds, 6),
                     detail="timed out" if run.timed_out else None)
        return Outcome(True, decided_by, run=run)

    def expand_inline(self, skill: Skill, command: str, asker: Asker) -> Outcome:
        """Run one inline command of an activated body through the policy: an Outcome whose `run` printed the output,
        or whose `error` says why it was denied or failed (the activation stops on it, as Claude Code's does).
        `command` is the one that runs, its arguments already quoted (disclosure.activation_text finds the commands
        in the body as written and never scans their output again)."""
        subject = f"!{command}"
        request = PermissionRequest(skill.name, subject, None, (), 0, skill.frontmatter.allowed_tools, sandbox_line())
        try:
            copy = self._private_copy(skill)
        except ManifestMismatch as error:
            self._record("decision", skill.name, subject, decision="deny", decided_by="skills.lock", detail=str(error))
            return Outcome(False, "skills.lock", error=f"refused: {error}")
        except OSError as error:
            return Outcome(False, "the executor",
                           error=f"refused: the skill's files could not be copied aside ({error.strerror or error})")
        try:
            allowed, decided_by = self._decide(request, asker, "model")
            self._record("decision", skill.name, subject, decision="allow" if allowed else "deny", decided_by=decided_by)
            if not allowed:
                return Outcome(False, decided_by, error=f"denied: {decided_by}")
            grants = self.policy.grants(skill.name, subject)
            placed = self._copied_sandbox(skill, subject, grants, copy)
            if placed.refusal:
                return Outcome(False, "the sandbox", error=placed.refusal)
            env = clean_environment(granted=grants.env) | self.run_env
            # importable here too: `!`python -m scripts.report`` works as a script does
            env["PYTHONPATH"] = placed.skill_folder
            try:
                run = masked(run_command(["bash", "-c", command], placed.folder, subject, (), "",
                                         INLINE_TIMEOUT_SECONDS, env, "-", placed.box))
            except ScriptError as error:
                return Outcome(True, decided_by, error=str(error))
        finally:
            shutil.rmtree(copy.folder, ignore_errors=True)
        self._record("run", skill.name, subject, exit_code=run.exit_code, seconds=round(run.seconds, 6))
        if run.stopped or run.timed_out:
            return Outcome(True, decided_by, run, run.stopped or f"timed out after {INLINE_TIMEOUT_SECONDS:g} s")
        if run.exit_code != 0:
            run = self._explained(run, skill.name, subject, grants)
            stderr = run.stderr.strip()[:200]  # its first lines: enough to say why
            said = f"exited with {run.exit_code}" + (f": {stderr}" if stderr else "") + (f" ({run.hint})" if run.hint else "")
            return Outcome(True, decided_by, run, said)
        return Outcome(True, decided_by, run)
