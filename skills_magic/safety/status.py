"""The state of the permission machinery as values a front end shows: the policy in force, each skill's review state
in skills.lock, what a review leaves, and the sandbox scripts would run in. Worked out here, so that views only
render values and never probe bubblewrap or read skills.lock while rendering."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from skills_magic.errors import SkillsMagicError
from skills_magic.safety import sandbox


@dataclass(frozen=True)
class SandboxState:
    """Whether a bubblewrap sandbox can be made here (`detail`: what it confines, or why not and how to fix it), and
    how a run sees the working folder (copy-on-write, or read-only and why)."""

    available: bool
    detail: str
    copy_on_write: bool
    working_folder: str

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.available, "detail": self.detail,
                "working_folder": {"copy_on_write": self.copy_on_write, "detail": self.working_folder}}


@dataclass(frozen=True)
class PolicyState:
    """What `%skills policy` shows: the rules in force with the problems met, the policy files read, each skill's
    review state (name, state) and the sandbox."""

    rules: list
    problems: list[str]
    files: list
    reviews: list[tuple[str, str]]
    sandbox: SandboxState


@dataclass(frozen=True)
class ReviewState:
    """What `%skills review` shows beside the changes: each file's size, whether skills.lock holds the skill, and
    skills.lock's path relative to the notebook's folder."""

    sizes: dict[str, int]
    in_lock: bool
    lock: str


def sandbox_state() -> SandboxState:
    """Probed once per process (the probes are cached); through the module, so a test's stand-in is what answers."""
    available, detail = sandbox.availability()
    copy_on_write, working_folder = sandbox.overlay_availability()
    return SandboxState(available, detail, copy_on_write, working_folder)


def review_states(skills: Sequence, manifest) -> list[tuple[str, str]]:
    """Each skill's state in skills.lock: not reviewed, reviewed with matching bytes, or the mismatch found."""
    states = []
    for skill in skills:
        entry = manifest.entry(skill.name)
        if entry is None:
            states.append((skill.name, "not reviewed"))
            continue
        try:
            manifest.check(skill.name, skill.folder)
            states.append((skill.name, f"reviewed (version {entry.get('version')}), bytes match"))
        except SkillsMagicError as error:
            states.append((skill.name, f"MISMATCH: {error}"))
    return states


def policy_state(policy, skills: Sequence, manifest) -> PolicyState:
    """The policy as it stands now: a policy file changed on disk is read again first."""
    policy.refresh()
    return PolicyState(policy.rules, policy.problems, policy.files, review_states(skills, manifest), sandbox_state())


def review_state(skill, manifest, cwd: str) -> ReviewState:
    from skills_magic.safety.manifest import skill_files

    sizes = {f.path: f.size for f in skill_files(skill.folder)}
    return ReviewState(sizes, manifest.entry(skill.name) is not None, os.path.relpath(manifest.path, cwd))
