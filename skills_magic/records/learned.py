"""Learned skills: every version of a skill the model (or the user) wrote through `manage_skill`, in the database.

The database is the truth: each write is one append-only row of `learned_versions` (who, when, why, which run, the
files as {relative path: text}), and `materialise()` rewrites `<project>/.skills/learned/skills/` from it, the
latest version of each name that is not deleted as an ordinary skill folder. So a restarted kernel, or a folder
someone edited by hand, always shows what the history says; a bad edit is undone by a new version (`revert`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from skills_magic.clock import utc_now
from skills_magic.records.db import Database
from skills_magic.skills.catalog import LEARNED_FOLDER  # relative to the project: the `learned` source

ACTIONS = ("create", "update", "delete", "revert")
USER = "user"  # the author of a version the person wrote (a revert); a model's versions carry its model id


@dataclass(frozen=True)
class LearnedVersion:
    """One version of one learned skill, as stored."""

    name: str
    version: int
    action: str
    author: str
    at: str
    session: str
    run: str | None
    reason: str
    digest: str
    files: dict[str, str] = field(default_factory=dict)

    @property
    def deleted(self) -> bool:
        return self.action == "delete"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "action": self.action, "author": self.author,
                "at": self.at, "run": self.run, "reason": self.reason, "digest": self.digest, "files": sorted(self.files)}


def digest_of(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _version(row) -> LearnedVersion:
    return LearnedVersion(row["name"], row["version"], row["action"], row["author"], row["at"], row["session"],
                          row["run"], row["reason"] or "", row["digest"], json.loads(row["files"]))


class LearnedStore:
    """The learned skills of the project whose folder is `folder`, kept in `database`."""

    def __init__(self, database: Database, folder: str, session_id: str = ""):
        self.database, self.folder, self.session_id = database, folder, session_id

    @property
    def root(self) -> str:
        """The folder the `learned` source reads: one subfolder per learned skill."""
        return os.path.join(self.folder, LEARNED_FOLDER)

    def write(self, name: str, action: str, files: dict[str, str], author: str, run: str | None = None,
              reason: str = "") -> LearnedVersion:
        """Append the next version of `name` (its number chosen inside the INSERT: two kernels never share one) and
        rewrite the folder; returns the version written."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}")  # a bug: the tool and the magics pass known actions
        files = {} if action == "delete" else dict(files)
        self.database.connect().execute(
            "INSERT INTO learned_versions (at, session, name, version, action, author, run, reason, files, digest) "
            "SELECT ?, ?, ?, COALESCE(MAX(version), 0) + 1, ?, ?, ?, ?, ?, ? FROM learned_versions WHERE name = ?",
            (utc_now(), self.session_id, name, action, author, run, reason,
             json.dumps(files, sort_keys=True, ensure_ascii=False), digest_of(files), name))
        self.materialise()
        return self.versions(name)[-1]

    def versions(self, name: str) -> list[LearnedVersion]:
        rows = self.database.connect().execute(
            "SELECT * FROM learned_versions WHERE name = ? ORDER BY version", (name,)).fetchall()
        return [_version(r) for r in rows]

    def version(self, name: str, n: int) -> LearnedVersion | None:
        row = self.database.connect().execute(
            "SELECT * FROM learned_versions WHERE name = ? AND version = ?", (name, n)).fetchone()
        return _version(row) if row is not None else None

    def latest(self, name: str) -> LearnedVersion | None:
        row = self.database.connect().execute(
            "SELECT * FROM learned_versions WHERE name = ? ORDER BY version DESC LIMIT 1", (name,)).fetchone()
        return _version(row) if row is not None else None

    def names(self) -> list[str]:
        """Every name with a version, deleted ones included, in name order."""
        rows = self.database.connect().execute("SELECT DISTINCT name FROM learned_versions ORDER BY name").fetchall()
        return [r["name"] for r in rows]

    def current(self) -> dict[str, LearnedVersion]:
        """The latest version of each name that is not deleted."""
        latest = (self.latest(name) for name in self.names())
        return {v.name: v for v in latest if v is not None and not v.deleted}

    def materialise(self) -> list[str]:
        """Rewrite the learned folder from the database: each current skill as a folder of its files, nothing else
        (a deleted skill's folder goes). Returns the names written."""
        current = self.current()
        os.makedirs(self.root, exist_ok=True)
        for entry in os.listdir(self.root):
            path = os.path.join(self.root, entry)
            if entry not in current and os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
        for name, version in current.items():
            write_folder(os.path.join(self.root, name), version.files)
        return sorted(current)


def write_folder(folder: str, files: dict[str, str]) -> None:
    """`folder` holding exactly `files` (paths checked when the version was written: inside the skill's folder).
    Unchanged files are left alone, so the catalog's stat cache does not read them again."""
    wanted = {os.path.normpath(path) for path in files}
    if os.path.isdir(folder):
        for parent, _, names in os.walk(folder):
            for file_name in names:
                path = os.path.join(parent, file_name)
                if os.path.relpath(path, folder) not in wanted:
                    os.remove(path)
    for relative, text in files.items():
        path = os.path.join(folder, os.path.normpath(relative))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = text.encode("utf-8")
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as existing:
                if existing.read() == data:
                    continue
        with open(path, "wb") as handle:
            handle.write(data)
        if text.startswith("#!"):
            os.chmod(path, 0o755)  # a script keeps its run bit, as `%%skill write` gives it
