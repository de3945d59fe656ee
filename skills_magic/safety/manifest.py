"""The reviewed manifest (`skills.lock`): the sha256 of every file of each reviewed skill, and its version.

Only `%skills review NAME` writes it, after a person confirms the bytes they were shown. Before a script of a
reviewed skill runs, every file of the skill is compared with the manifest; a difference refuses the run and names
the file and both digests. Nothing recomputes the manifest to make a check pass: a reviewer, not the code, accepts
new bytes.

A skill's files are read as `skill_scan` reads them, never opening anything but a regular file; a run does not use
the skill's folder but its `private_copy`, whose bytes are checked against the manifest as they are copied.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import yaml

from skills_magic.clock import utc_now
from skills_magic.errors import ManifestMismatch, SkillsMagicError
from skills_magic.safety.private_copy import PrivateCopy, private_copy
from skills_magic.safety.skill_scan import FileState, UnsafeFile, skill_files
# re-exported: their home before the split
from skills_magic.safety.private_copy import COPY_FILE_MODE, COPY_FLAGS, COPY_FOLDER_MODE  # noqa: F401
from skills_magic.safety.skill_scan import (FOLDER_FLAGS, NEVER_READ, OPEN_FLAGS, READ_BLOCK, SKIPPED,  # noqa: F401
                                            SPECIAL, digest)

LOCK_FILE = "skills.lock"  # in the session's folder
PATH_VARIABLE = "SKILLS_MAGIC_LOCK"
LOCK_HEADER = (
    "# skills.lock: the reviewed bytes of each skill (sha256 of every file).\n"
    "# Written only by `%skills review NAME` after confirmation; a script whose skill differs from this is refused.\n"
)


class ReviewRefused(SkillsMagicError):
    """A skill holding something never read cannot be reviewed; nothing is recorded."""

    def __init__(self, cause: UnsafeFile):
        self.cause = cause
        super().__init__(f"{cause}; nothing was recorded in {LOCK_FILE}")


def lock_path(folder: str, environ=None) -> str:
    """The manifest of the session's folder: skills.lock there, or $SKILLS_MAGIC_LOCK (relative to the folder)."""
    environ = os.environ if environ is None else environ
    return os.path.join(folder, os.path.expanduser(environ.get(PATH_VARIABLE) or LOCK_FILE))


@dataclass(frozen=True)
class Change:
    """How one file of a skill stands against the manifest."""

    path: str
    kind: str  # added | removed | changed | unchanged
    reviewed: str | None  # the digest in the manifest
    current: str | None  # the digest on disk


class Manifest:
    """skills.lock, read fresh for every check (another kernel or a reviewer may have changed it)."""

    def __init__(self, path: str):
        self.path = path

    def read(self) -> dict[str, Any]:
        if not os.path.isfile(self.path):
            return {}
        with open(self.path, encoding="utf-8") as handle:
            try:
                data = yaml.safe_load(handle) or {}
            except yaml.YAMLError as error:
                raise ManifestMismatch(f"{os.path.basename(self.path)} cannot be read: {error}") from None
        skills = data.get("skills") if isinstance(data, dict) else None
        name = os.path.basename(self.path)
        if not isinstance(skills, dict):
            raise ManifestMismatch(f"{name} has no `skills` mapping")
        for skill, entry in skills.items():
            files = entry.get("files") if isinstance(entry, dict) else None
            if not isinstance(files, dict) or not all(isinstance(i, dict) and isinstance(i.get("sha256"), str) for i in files.values()):
                raise ManifestMismatch(f"{name}: the entry of {skill!r} is not a reviewed file list (files with sha256); "
                                       f"review it again with %skills review {skill}")
        return skills

    def entry(self, skill: str) -> dict[str, Any] | None:
        return self.read().get(skill)

    def pinned(self, skill: str) -> dict[str, str] | None:
        """The reviewed {relative path: sha256} of a skill, None when it was never reviewed."""
        entry = self.entry(skill)
        if entry is None:
            return None
        return {path: str(info.get("sha256")) for path, info in (entry.get("files") or {}).items()}

    def compare(self, skill: str, folder: str, files: list[FileState] | None = None) -> list[Change]:
        """What differs between the reviewed files and the folder now (everything `added` if never reviewed);
        `files` is a scan already made (a review compares and records one scan, never two)."""
        reviewed = self.pinned(skill) or {}
        try:
            current = {f.path: f.sha256 for f in (skill_files(folder) if files is None else files)}
        except UnsafeFile as error:
            raise error.of(skill) from None
        changes = []
        for path in sorted(set(reviewed) | set(current)):
            old, new = reviewed.get(path), current.get(path)
            kind = "added" if old is None else "removed" if new is None else "unchanged" if old == new else "changed"
            changes.append(Change(path, kind, old, new))
        return changes

    def check(self, skill: str, folder: str) -> bool:
        """True when the skill is reviewed and its bytes match; False when it was never reviewed.

        Raises ManifestMismatch naming the first differing file and both digests (UnsafeFile for a file never read).
        """
        if self.entry(skill) is None:
            return False
        for change in self.compare(skill, folder):
            if change.kind == "changed":
                raise ManifestMismatch.changed(skill, change.path, change.reviewed, change.current)
            if change.kind in ("added", "removed"):
                raise ManifestMismatch.added_or_removed(skill, change.path, change.kind == "added", change.current or change.reviewed)
        return True

    def copy(self, skill: str, folder: str, destination: str) -> PrivateCopy:
        """`private_copy` of the skill against what skills.lock pins for it now."""
        return private_copy(skill, folder, destination, self.pinned(skill))

    def write(self, skill: str, folder: str, version: str, files: list[FileState] | None = None) -> None:
        """Record the skill's bytes: `files`, the scan the reviewer was shown, else a scan now. Only called by a
        confirmed review."""
        if files is None:
            try:
                files = skill_files(folder)
            except UnsafeFile as error:
                raise ReviewRefused(error.of(skill)) from None
        skills = self.read()
        skills[skill] = {
            "version": version,
            "reviewed": utc_now(whole_seconds=True),
            "files": {f.path: {"sha256": f.sha256, "bytes": f.size} for f in files},
        }
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        text = LOCK_HEADER + yaml.safe_dump({"skills": dict(sorted(skills.items()))}, sort_keys=True, allow_unicode=True)
        temporary = self.path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, self.path)  # a reader never sees half a file

