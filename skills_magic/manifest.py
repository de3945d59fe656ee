"""The reviewed manifest (`skills.lock`): the sha256 of every file of each reviewed skill, and its version.

Only `%skills review NAME` writes it, after a person confirms the bytes they were shown. Before a script of a
reviewed skill runs, every file of the skill is compared with the manifest; a difference refuses the run and names
the file and both digests. Nothing recomputes the manifest to make a check pass: a reviewer, not the code, accepts
new bytes.
"""

from __future__ import annotations

import datetime
import hashlib
import os
from dataclasses import dataclass
from typing import Any

import yaml

from skills_magic.errors import SkillsMagicError

LOCK_FILE = "skills.lock"  # in the session's folder
PATH_VARIABLE = "SKILLS_MAGIC_LOCK"
LOCK_HEADER = (
    "# skills.lock: the reviewed bytes of each skill (sha256 of every file).\n"
    "# Written only by `%skills review NAME` after confirmation; a script whose skill differs from this is refused.\n"
)
SKIPPED = frozenset({".git", "__pycache__", ".ipynb_checkpoints", ".DS_Store"})


class ManifestMismatch(SkillsMagicError):
    """A reviewed skill's files are not the reviewed bytes."""


@dataclass(frozen=True)
class FileState:
    path: str  # relative, `/`-separated
    size: int
    sha256: str


def digest(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            sha.update(block)
    return sha.hexdigest()


def skill_files(folder: str) -> list[FileState]:
    """Every file of a skill (symlinks recorded as what they point to), sorted by path."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        for name in sorted(files):
            if name in SKIPPED or name.endswith(".pyc"):
                continue
            full = os.path.join(root, name)
            relative = os.path.relpath(full, folder).replace(os.sep, "/")
            try:
                found.append(FileState(relative, os.path.getsize(full), digest(full)))
            except OSError:
                found.append(FileState(relative, -1, "unreadable"))
    return sorted(found, key=lambda f: f.path)


def lock_path(folder: str, environ=None) -> str:
    environ = os.environ if environ is None else environ
    return os.path.join(folder, os.path.expanduser(environ.get(PATH_VARIABLE) or LOCK_FILE))


@dataclass(frozen=True)
class Change:
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

    def compare(self, skill: str, folder: str) -> list[Change]:
        """What differs between the reviewed files and the folder now (everything `added` if never reviewed)."""
        entry = self.entry(skill) or {}
        reviewed = {path: str(info.get("sha256")) for path, info in (entry.get("files") or {}).items()}
        current = {f.path: f.sha256 for f in skill_files(folder)}
        changes = []
        for path in sorted(set(reviewed) | set(current)):
            old, new = reviewed.get(path), current.get(path)
            kind = "added" if old is None else "removed" if new is None else "unchanged" if old == new else "changed"
            changes.append(Change(path, kind, old, new))
        return changes

    def check(self, skill: str, folder: str) -> bool:
        """True when the skill is reviewed and its bytes match; False when it was never reviewed.

        Raises ManifestMismatch naming the first differing file and both digests.
        """
        if self.entry(skill) is None:
            return False
        for change in self.compare(skill, folder):
            if change.kind == "changed":
                raise ManifestMismatch(
                    f"{skill}/{change.path} is not the reviewed file: reviewed sha256 {change.reviewed}, now "
                    f"{change.current}; review it again with %skills review {skill}"
                )
            if change.kind in ("added", "removed"):
                state = "is new since" if change.kind == "added" else "was removed after"
                raise ManifestMismatch(f"{skill}/{change.path} {state} the review (sha256 "
                                       f"{change.current or change.reviewed}); review it again with %skills review {skill}")
        return True

    def write(self, skill: str, folder: str, version: str) -> None:
        """Record the skill's current bytes. Only called by a confirmed review."""
        skills = self.read()
        skills[skill] = {
            "version": version,
            "reviewed": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "files": {f.path: {"sha256": f.sha256, "bytes": f.size} for f in skill_files(folder)},
        }
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        text = LOCK_HEADER + yaml.safe_dump({"skills": dict(sorted(skills.items()))}, sort_keys=True, allow_unicode=True)
        temporary = self.path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, self.path)  # a reader never sees half a file
