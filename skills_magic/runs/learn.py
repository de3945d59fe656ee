"""Learned skills: the `manage_skill` tool a model writes skills with, and what the person does with them.

The tool is offered only when the person turned learning on (`%skills learn on`; off by default). Its constraints
are the point (docs/learned.md): a model never creates a name another source holds (`NameCollision`), never changes
a bundled skill (`BuiltInImmutable`) or a file a person wrote (`FileSkillImmutable`), every write is validated and
linted before it is kept (`InvalidSkill`, with the findings, so the model can fix it) and audited, and each version
is kept (records/learned.py), so a bad edit is reverted rather than lost. A learned skill is never reviewed for it:
its scripts meet the policy like any other skill's.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skills_magic.clock import utc_now
from skills_magic.errors import InvalidArgument, SkillsMagicError
from skills_magic.records.learned import USER, LearnedStore, LearnedVersion, write_folder
from skills_magic.runs.tools import ToolInputError
from skills_magic.skills.catalog import LEARNED_LABEL, CatalogScan
from skills_magic.skills.lint import lint_path
from skills_magic.skills.validate import is_valid_name, validate_folder
from skills_magic.skills.writing import RESOURCE_FOLDERS, SKILL_FILE

TOOL_NAME = "manage_skill"
TOOL_ACTIONS = ("create", "update", "delete", "lint", "history")
PROMOTE_FOLDER = "skills"  # `%skills promote NAME`: ./skills/NAME, a project source, so the copy wins at once
SHOWN_FINDINGS = 20  # findings an InvalidSkill names; more are counted


class LearnedError(SkillsMagicError):
    """A refused learned-skill operation; `code` starts the tool result the model reads (`NameCollision: ...`)."""

    code = "LearnedError"

    def for_model(self) -> str:
        return f"{self.code}: {self}"


class NameCollision(LearnedError):
    code = "NameCollision"


class BuiltInImmutable(LearnedError):
    code = "BuiltInImmutable"


class FileSkillImmutable(LearnedError):
    code = "FileSkillImmutable"


class InvalidSkill(LearnedError):
    code = "InvalidSkill"


class LearnedNotFound(LearnedError, LookupError):
    code = "NotFound"


class PromoteRefused(LearnedError):
    code = "PromoteRefused"


class ManageSkillInput(BaseModel):
    """The `manage_skill` tool's input."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["create", "update", "delete", "lint", "history"]
    name: str = Field(description="the skill's name (lowercase letters, digits and hyphens)")
    content: str | None = Field(None, description="the whole SKILL.md: frontmatter (name, description) and body")
    files: dict[str, str] | None = Field(None, description="other files by relative path, under scripts/ or references/")
    reason: str | None = Field(None, description="why this change: kept in the skill's history")


def tool_definition() -> dict[str, Any]:
    schema = ManageSkillInput.model_json_schema()
    schema.pop("title", None)
    schema.pop("description", None)
    for value in schema["properties"].values():
        value.pop("title", None)
    return {
        "name": TOOL_NAME,
        "description": (
            "Write your own skills (the 'learned' group, listed last): create a new one, update or delete one you "
            "wrote, lint one, or list its history. Every version is kept and shown to the user. You cannot create a "
            "name another skill has, nor change a skill you did not write. A write is validated and linted first: "
            "an invalid skill is refused with the findings to fix."),
        "input_schema": schema,
    }


def _resource_path(path: str) -> str:
    """A file's path inside the skill, or InvalidSkill: relative, no `..`, under scripts/, references/ or assets/."""
    parts = path.replace("\\", "/").split("/")
    if os.path.isabs(path) or any(p in ("", ".", "..") for p in parts) or len(parts) < 2 or parts[0] not in RESOURCE_FOLDERS:
        raise InvalidSkill(f"the file path {path!r} must be relative and under {', '.join(RESOURCE_FOLDERS)}/")
    return "/".join(parts)


def check_files(name: str, files: dict[str, str]) -> list[str]:
    """InvalidSkill (with every finding) unless `files` make a valid skill named `name` with no lint error; the lint
    warnings otherwise. Judged in a temporary folder named like the skill, by the same checks as `%skills validate`."""
    with tempfile.TemporaryDirectory(prefix="learned-") as scratch:
        folder = os.path.join(scratch, name)
        write_folder(folder, files)
        verdict = validate_folder(folder)
        findings = [f"[{d.code}] {d.message}" for d in verdict.problems] if not verdict.valid else []
        linted = [f for _, found in lint_path(folder) for f in found] if verdict.valid else []
    findings += [f"[{f.rule}] {f.message}" for f in linted if f.severity == "error"]
    if findings:
        more = f" (and {len(findings) - SHOWN_FINDINGS} more)" if len(findings) > SHOWN_FINDINGS else ""
        raise InvalidSkill(f"skill {name!r} was not written: {'; '.join(findings[:SHOWN_FINDINGS])}{more}")
    return [f"[{f.rule}] {f.message}" for f in linted]


class LearnTool:
    """`manage_skill` for one run: the catalog the run saw, who writes (the model id) and in which run."""

    def __init__(self, store: LearnedStore, scan: CatalogScan, author: str = "", run_id: str | None = None,
                 audit=None):
        self.store, self.scan, self.author, self.run_id = store, scan, author, run_id
        self.audit = audit or (lambda row: None)

    def definition(self) -> dict[str, Any]:
        return tool_definition()

    def call(self, data: dict[str, Any], author: str | None = None) -> str:
        """The text for the model; ToolInputError (`Code: why`) when the action is refused. `author`: the model id
        the loop is asking now (an activated skill may have changed it), else the one the tool was made for."""
        self.author = author or self.author
        try:
            request = ManageSkillInput.model_validate(data)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in error.errors())
            raise ToolInputError(f"manage_skill input: {problems}") from None
        try:
            return getattr(self, "_" + request.action)(request)
        except LearnedError as error:
            raise ToolInputError(error.for_model()) from None

    # --- the actions ----------------------------------------------------------------------------------------

    def _holder(self, name: str) -> str | None:
        """The source label of a skill (listed or skipped) of another source that holds `name`, else None."""
        found = self.scan.get(name)
        if found is not None and found.source != LEARNED_LABEL:
            return found.source
        skipped = self.scan.skipped_named(name)
        return "a skipped" if skipped is not None and not skipped.path.startswith(self.store.root + os.sep) else None

    def _writable(self, name: str) -> LearnedVersion:
        """The current version of the learned skill `name`, or why it may not be changed."""
        holder = self._holder(name)
        if holder == "bundled":
            raise BuiltInImmutable(f"{name!r} is a bundled skill: it cannot be changed or deleted")
        if holder is not None:
            raise FileSkillImmutable(f"{name!r} is a {holder} skill a person wrote: only they change or delete it")
        current = self.store.current().get(name)
        if current is None:
            raise LearnedNotFound(f"there is no learned skill named {name!r}: create it first")
        return current

    def _files(self, request: ManageSkillInput, base: dict[str, str]) -> dict[str, str]:
        content = request.content if request.content is not None else base.get(SKILL_FILE)
        if not content:
            raise InvalidSkill("`content` (the whole SKILL.md) is required")
        kept = {p: t for p, t in base.items() if p != SKILL_FILE} if request.files is None else {}
        added = {_resource_path(p): t for p, t in (request.files or {}).items()}
        return {SKILL_FILE: content, **kept, **added}

    def _write(self, request: ManageSkillInput, action: str, files: dict[str, str]) -> str:
        warnings = check_files(request.name, files) if action != "delete" else []
        written = self.store.write(request.name, action, files, self.author, self.run_id, request.reason or "")
        self.audit({"at": utc_now(), "event": "learned", "skill": request.name, "path": SKILL_FILE,
                    "detail": f"{action} version {written.version} by {self.author}: {request.reason or '(no reason)'}"})
        said = f"{action}d learned skill {request.name!r}: version {written.version}"
        listed = "; it is listed from the next run" if action != "delete" else ""
        return said + listed + (f". Lint warnings: {'; '.join(warnings)}" if warnings else "")

    def _create(self, request: ManageSkillInput) -> str:
        name = request.name
        if not is_valid_name(name):
            raise InvalidSkill(f"{name!r} is not a skill name: lowercase letters, digits and hyphens")
        holder = self._holder(name)
        if holder is not None:
            raise NameCollision(f"a {holder} skill is named {name!r}: choose another name")
        if name in self.store.current():
            raise NameCollision(f"you already wrote a learned skill {name!r}: use action update")
        return self._write(request, "create", self._files(request, {}))

    def _update(self, request: ManageSkillInput) -> str:
        current = self._writable(request.name)
        return self._write(request, "update", self._files(request, current.files))

    def _delete(self, request: ManageSkillInput) -> str:
        self._writable(request.name)
        return self._write(request, "delete", {})

    def _lint(self, request: ManageSkillInput) -> str:
        current = self.store.current().get(request.name)
        if current is None:
            raise LearnedNotFound(f"there is no learned skill named {request.name!r}")
        try:
            warnings = check_files(request.name, current.files)
        except InvalidSkill as error:
            return str(error)
        return "; ".join(warnings) if warnings else f"no lint findings for {request.name!r}"

    def _history(self, request: ManageSkillInput) -> str:
        versions = self.store.versions(request.name)
        if not versions:
            raise LearnedNotFound(f"there is no learned skill named {request.name!r}")
        return "\n".join(f"v{v.version} {v.at} {v.action} by {v.author}: {v.reason or '(no reason)'}" for v in versions)


LEARNED_COMPARE = "learned:"  # `--compare learned:NAME@V`: an earlier version of a learned skill
VERSIONS_FOLDER = os.path.join(".skills", "learned", "versions")  # where such a version is written out to compare


class Learning:
    """A session's learned skills: whether the model may write them, and the person's operations on them."""

    def __init__(self, session):
        self.session = session  # only its database, folder, id, catalog and audit are used
        self.enabled = False  # `%skills learn on`: offer `manage_skill` in runs

    @property
    def store(self) -> LearnedStore:
        store = self.__dict__.get("_store")
        if store is None:
            store = self.__dict__["_store"] = LearnedStore(self.session.database, self.session.cwd, self.session.session_id)
            store.materialise()  # the database is the truth: the folder as it says, before anything reads it
        return store

    def turn(self, on: bool) -> bool:
        self.enabled = on
        return on

    def tool_for(self, model_id: str = "", run_id: str | None = None) -> LearnTool | None:
        """The tool for a run (its author: the model the loop asks, `LearnTool.call`), when learning is on."""
        if not self.enabled:
            return None
        return LearnTool(self.store, self.session.scan(), model_id, run_id, self.session._audit)

    def summary(self) -> list[dict[str, Any]]:
        """Each learned name: versions, the last author and change, and whether it is current, deleted or hidden."""
        scan = self.session.scan()
        used = self.session.skill_usage()  # from the run log: every source's skills, learned ones among them
        rows = []
        for name in self.store.names():
            versions = self.store.versions(name)
            last = versions[-1]
            winner = scan.get(name)
            state = ("deleted" if last.deleted else
                     f"hidden by {winner.source}" if winner is not None and winner.source != LEARNED_LABEL else "listed")
            usage = used.get(name)
            rows.append({"name": name, "versions": len(versions), "author": last.author, "action": last.action,
                         "at": last.at, "state": state, "activations": usage.activations if usage else 0,
                         "reads": usage.reads if usage else 0, "last_used": usage.last_used if usage else None})
        return rows

    def history(self, name: str) -> list[LearnedVersion]:
        versions = self.store.versions(name)
        if not versions:
            raise LearnedNotFound(f"no learned skill named {name!r}; `%skills learned` lists them")
        return versions

    def _version(self, name: str, n: int) -> LearnedVersion:
        found = self.store.version(name, n)
        if found is None:
            raise LearnedNotFound(f"learned skill {name!r} has no version {n}; `%skills history {name}` lists them")
        return found

    def diff(self, name: str, first: int, second: int) -> list[tuple[str, list[str]]]:
        """(file, unified diff lines) for each file that differs between two versions."""
        old, new = self._version(name, first), self._version(name, second)
        changed = []
        for path in sorted(set(old.files) | set(new.files)):
            lines = list(difflib.unified_diff(old.files.get(path, "").splitlines(keepends=True),
                                              new.files.get(path, "").splitlines(keepends=True),
                                              f"v{first}/{path}", f"v{second}/{path}"))
            if lines:
                changed.append((path, lines))
        return changed

    def revert(self, name: str, n: int) -> LearnedVersion:
        """A new version whose files are version `n`'s, written by the user."""
        old = self._version(name, n)
        if old.deleted:
            raise LearnedNotFound(f"version {n} of {name!r} is its deletion: revert to a version before it")
        written = self.store.write(name, "revert", old.files, USER, None, f"revert to version {n}")
        self.session._audit({"at": utc_now(), "event": "learned", "skill": name, "path": SKILL_FILE,
                             "detail": f"revert version {written.version} by {USER}: the files of version {n}"})
        return written

    def find(self, value: str) -> str:
        """A folder `%skills eval --compare` can take: `learned:NAME@V` is version V of a learned skill, written out
        under `.skills/learned/versions/` (the comparison with an earlier version of what the model wrote); anything
        else is a path the user typed."""
        if not value.startswith(LEARNED_COMPARE):
            return self.session._path(value)
        name, _, number = value[len(LEARNED_COMPARE):].partition("@")
        if not number.isdigit():
            raise InvalidArgument(f"--compare {LEARNED_COMPARE}NAME@V names a version by its number, not {value!r}")
        version = self._version(name, int(number))
        if version.deleted:
            raise LearnedNotFound(f"version {number} of {name!r} is its deletion: compare with a version before it")
        folder = os.path.join(self.session.cwd, VERSIONS_FOLDER, f"{name}@{number}")
        write_folder(os.path.join(folder, name), version.files)
        return folder

    def promote(self, name: str, path: str | None = None) -> str:
        """Copy the current version into `path` (default ./skills/NAME) as a normal skill folder; never overwrites."""
        current = self.store.current().get(name)
        if current is None:
            raise LearnedNotFound(f"no current learned skill named {name!r}; `%skills learned` lists them")
        target = os.path.abspath(os.path.join(self.session.cwd, os.path.expanduser(path or os.path.join(PROMOTE_FOLDER, name))))
        if os.path.lexists(target):
            raise PromoteRefused(f"{self.session.show_path(target)} already exists: promote into a new folder")
        write_folder(target, current.files)
        self.session._audit({"at": utc_now(), "event": "learned", "skill": name, "path": SKILL_FILE,
                             "detail": f"promote version {current.version} to {self.session.show_path(target)}"})
        return target
