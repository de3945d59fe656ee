"""What the user decides about safety, each decision audited: a rule typed (`%skills allow/deny`), a project's
policy file trusted or revoked, a skill's files reviewed into skills.lock, and the control files no sandbox may
write."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from skills_magic.clock import utc_now
from skills_magic.safety.manifest import Manifest
from skills_magic.safety.policy import POLICY_FILE, Policy
from skills_magic.safety.rules import RuleError, parse_rule
from skills_magic.skills.skill import Skill

Audit = Callable[[dict[str, Any]], None]


def control_files(folder: str, manifest: Manifest, database: str) -> list[str]:
    """The project's own control files: read-only inside every sandbox, whatever a rule grants."""
    return [os.path.join(folder, POLICY_FILE), manifest.path, os.path.join(folder, ".skills"), database,
            database + "-wal", database + "-shm"]


def add_rule(policy: Policy, folder: str, kind: str, text: str, env: Sequence[str] = (), *, network: bool = False,
             writable: Sequence[str] = (), unsandboxed: bool = False, limits=None, save: bool = False):
    """A rule the user typed; `writable` paths are relative to `folder`; `save` also keeps it in the user's own
    policy file."""
    writable = [writable_folder(os.path.join(folder, os.path.expanduser(p))) for p in writable]
    rule = policy.add(parse_rule(kind, text, f"%skills {kind}", env, network=network, writable=writable,
                                 unsandboxed=unsandboxed, limits=limits))
    if save:
        policy.save_rule(rule)
    return rule


def writable_folder(path: str) -> str:
    """A `--write` path as the sandbox can bind it: an existing file or folder, or a folder created now (a grant is
    never dropped silently); a file that does not exist yet is refused with what to grant instead."""
    if os.path.lexists(path):
        return path
    if os.path.splitext(path)[1]:
        raise RuleError(f"--write {path}: no such file; a grant binds an existing file or folder: grant its folder "
                        f"(--write {os.path.dirname(path) or '.'}) or create the file first")
    try:
        os.makedirs(path)
    except OSError as error:
        raise RuleError(f"--write {path}: it does not exist and cannot be created ({error.strerror or error})") from None
    return path


def trust(policy: Policy, target: str, revoke: bool, audit: Audit, show_path: Callable[[str], str]):
    """Record the sha256 of the policy file `target` in the user's trust store, so its allow rules apply until one
    byte of it changes (or, with `revoke`, forget it); returns the report of every rule those bytes hold."""
    report = policy.trust_file(target, revoke=revoke)
    if not revoke or report.sha256:
        audit({"at": utc_now(), "event": "revoke" if revoke else "trust", "skill": "*",
               "path": show_path(report.path), "digest": report.sha256,
               "decision": "deny" if revoke else "allow", "decided_by": "the user: %skills trust",
               "detail": f"{len(report.rules)} rules, {len(report.problems)} refused or dropped"
                         if not revoke else "its allow rules are inert again"})
    return report


def review(manifest: Manifest, skill: Skill, confirm: Callable[[], bool] | None, audit: Audit):
    """(changes, written): the skill's files with their digests and what changed since the last review; writes
    skills.lock only when `confirm()` says yes. Raises ReviewRefused, recording nothing, for a skill holding a file
    that is never read (a FIFO, a device, a symlink leaving the skill)."""
    from skills_magic.safety.manifest import ReviewRefused
    from skills_magic.safety.skill_scan import UnsafeFile, skill_files

    try:
        files = skill_files(skill.folder)  # one scan, shown and recorded: the lock holds the bytes confirmed
    except UnsafeFile as error:
        raise ReviewRefused(error.of(skill.name)) from None
    changes = manifest.compare(skill.name, skill.folder, files)
    needed = any(c.kind != "unchanged" for c in changes) or manifest.entry(skill.name) is None
    written = bool(needed and confirm is not None and confirm())
    if written:
        manifest.write(skill.name, skill.folder, skill.version, files)
        audit({"at": utc_now(), "event": "review", "skill": skill.name, "path": "*", "decision": "allow",
               "decided_by": "the reviewer", "detail": f"{len(changes)} files recorded in skills.lock"})
    return changes, written
