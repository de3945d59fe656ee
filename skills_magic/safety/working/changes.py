"""What a sandboxed run changed in the working folder, and applying it: the run wrote copy-on-write, the user applies.

A run sees the session's folder through an overlay: its writes land in the run's folder (`changes/`, the overlay's
upper layer, and `deleted`, the paths it removed) and the project on disk stays as it was. `run_changes` lists those
writes against the project as it is now (added, changed, deleted; copy-ups of unchanged files are not changes);
`apply_changes` copies the ones the user accepts into the project, one atomic write per file, refusing any that would
write a control file, leave the working folder, or overwrite a file changed on disk since the run started. What was
applied is recorded in the run's folder (`applied.json`), so applying twice says so. Nothing here imports IPython.

The parts live beside it: runfolder.py (the run's folder and its records), diffs.py (comparing two versions),
writes.py (where a change may land, and the atomic write) and safefiles.py (paths that stay inside, no link followed).
"""

from __future__ import annotations

import builtins
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from skills_magic.errors import ChangeError, UnknownChange
# re-exported: its home before the split
from skills_magic.safety.working.diffs import COMPARE_BLOCK_BYTES, DIFF_MAX_BYTES, DIFF_MAX_LINES, unified_diff  # noqa: F401
from skills_magic.safety.working.diffs import file_diff, same_bytes
from skills_magic.safety.working.runfolder import applied_records, deleted_list, record_applied
# re-exported: its home before the split
from skills_magic.safety.working.runfolder import (  # noqa: F401
    APPLIED_FILE,
    CHANGES_FOLDER,
    DELETED_FILE,
    OWN_FOLDER,
    RUN_FILE,
    RUN_NAME,
    recent_runs,
    run_facts,
    run_started_ns,
)
from skills_magic.safety.working.safefiles import clean_relative, no_follow, parent_inside, under, walk_files
# re-exported: its home before the split
from skills_magic.safety.working.safefiles import TEMP_PREFIX  # noqa: F401
from skills_magic.safety.working.writes import Guard, changed_since, write_version
# re-exported: its home before the split
from skills_magic.safety.working.writes import (  # noqa: F401
    CONTROL_NAMES,
    DEFAULT_UMASK,
    GIT_FOLDER,
    REFUSED_CONTROL,
    REFUSED_GIT,
    REFUSED_LINK,
    REFUSED_OUTSIDE,
    REFUSED_SINCE,
)

OPAQUE_ATTRIBUTE = "user.overlay.opaque"  # overlayfs (userxattr) marks a folder that replaced the lower one
REFUSED_AGAIN = "already applied"

Kind = str  # "added" | "changed" | "deleted"


@dataclass(frozen=True)
class Change:
    """One file (or symbolic link) a run added, changed or deleted in the working folder, not yet in the project."""

    path: str  # relative to the working folder, with "/"
    kind: Kind  # added | changed | deleted
    bytes: int  # the new size; for a deleted file, its size on disk
    file: str | None  # the new bytes, in the run's changes/ (None for deleted)
    diff: str | None = None  # unified diff, only when both sides are UTF-8 text under DIFF_MAX_BYTES
    link: str | None = None  # the new version is a symbolic link to this target
    executable: bool = False  # the new version has its run bit
    run_id: str = ""  # the run's folder name (run-ab12cd34)
    applied: bool = False  # already copied into the project (applied.json)

    def read_bytes(self) -> builtins.bytes:
        """The run's version of the file (what applying would write)."""
        if self.kind == "deleted" or self.file is None:
            raise ChangeError(f"{self.path} was deleted by the run: there are no new bytes to read")
        if self.link is not None:
            raise ChangeError(f"{self.path} is a symbolic link to {self.link}, not a file: its target is `link`")
        try:
            with open(self.file, "rb", opener=no_follow) as handle:
                return handle.read()
        except OSError as error:
            raise ChangeError(f"cannot read the run's version of {self.path}: {error.strerror or error}") from None

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The run's version of the file as text (UTF-8 unless told otherwise)."""
        data = self.read_bytes()
        try:
            return data.decode(encoding, errors)
        except UnicodeDecodeError:
            raise ChangeError(f"the run's version of {self.path} is not {encoding} text: use read_bytes()") from None

    def summary(self) -> str:
        """`changed existing.txt (12 bytes)`: kind, path, size, and what else is special about it."""
        extra = f" -> {self.link}" if self.link is not None else (", executable" if self.executable else "")
        return f"{self.kind} {self.path} ({self.bytes:,} byte{'' if self.bytes == 1 else 's'}{extra})"

    def to_dict(self) -> dict[str, Any]:
        """The facts that are the same on every clone (no absolute path, no run id): for output data."""
        data: dict[str, Any] = {"path": self.path, "kind": self.kind, "bytes": self.bytes, "diff": self.diff}
        if self.link is not None:
            data["link"] = self.link
        if self.executable:
            data["executable"] = True
        return data


@dataclass
class ApplyReport:
    """What `apply_changes` did: the changes copied into the project, and those refused with the reason."""

    runs: list[str] = field(default_factory=list)  # the run ids applied from
    applied: list[Change] = field(default_factory=list)
    refused: list[tuple[Change | str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.refused

    def merge(self, other: ApplyReport) -> ApplyReport:
        return ApplyReport(self.runs + other.runs, self.applied + other.applied, self.refused + other.refused)


# --- reading a run's folder ----------------------------------------------------------------------------------------


def _deleted_entries(run_folder: str, work: str | None = None) -> list[str]:
    """The paths the run deleted: its `deleted` list, and (with `work`) what an opaque folder hides: a folder the
    run removed and made again replaces the old one, so the old entries it no longer holds are deleted too."""
    found = deleted_list(run_folder)
    if work is not None:
        found += [p for p in _opaque_hidden(os.path.join(run_folder, CHANGES_FOLDER), work) if p not in found]
    return found


def _opaque_hidden(changes: str, work: str) -> list[str]:
    """Entries of the working folder hidden by an opaque folder of the overlay's upper layer (marked by the
    `user.overlay.opaque` attribute the layer's copy keeps)."""
    hidden: list[str] = []
    for root, dirs, _files in os.walk(changes):
        for name in list(dirs):
            folder = os.path.join(root, name)
            try:
                opaque = os.getxattr(folder, OPAQUE_ATTRIBUTE, follow_symlinks=False) == b"y"
            except OSError:
                opaque = False
            if not opaque:
                continue
            relative = os.path.relpath(folder, changes).replace(os.sep, "/")
            old = os.path.join(work, relative)
            if not os.path.isdir(old) or os.path.islink(old) or not parent_inside(old, work):
                continue
            try:
                kept = set(os.listdir(folder))
                hidden += [f"{relative}/{entry}" for entry in sorted(os.listdir(old)) if entry not in kept]
            except OSError:
                continue
    return hidden


def _ours(relative: str) -> bool:
    return relative == OWN_FOLDER or relative.startswith(OWN_FOLDER + "/")


def _classify(relative: str, upper: str, work: str, run_id: str) -> Change | None:
    """The change one file of changes/ makes to the working folder as it is now; None when it makes none."""
    new = os.path.join(upper, *relative.split("/"))
    on_disk = os.path.join(work, *relative.split("/"))
    try:
        new_stat = os.lstat(new)
    except OSError:
        return None
    if not parent_inside(on_disk, work):  # nothing outside the working folder is read; applying it is refused
        link = os.readlink(new) if stat.S_ISLNK(new_stat.st_mode) else None
        return Change(relative, "added", new_stat.st_size, new, None, link=link, run_id=run_id)
    try:
        disk_stat = os.lstat(on_disk)
    except OSError:
        disk_stat = None
    if stat.S_ISLNK(new_stat.st_mode):
        target = os.readlink(new)
        if disk_stat is not None and stat.S_ISLNK(disk_stat.st_mode) and os.readlink(on_disk) == target:
            return None  # the same link: a copy-up, not a change
        kind = "added" if disk_stat is None else "changed"
        return Change(relative, kind, new_stat.st_size, new, None, link=target, run_id=run_id)
    executable = bool(new_stat.st_mode & stat.S_IXUSR)
    if disk_stat is None:
        return Change(relative, "added", new_stat.st_size, new, file_diff("added", relative, None, 0, new, new_stat.st_size),
                      executable=executable, run_id=run_id)
    if (stat.S_ISREG(disk_stat.st_mode) and disk_stat.st_size == new_stat.st_size
            and bool(disk_stat.st_mode & stat.S_IXUSR) == executable):
        try:
            if same_bytes(new, on_disk, new_stat.st_size):
                return None  # copied up (opened for writing, touched) but not changed
        except OSError:
            pass
    old_file = on_disk if stat.S_ISREG(disk_stat.st_mode) else None
    diff = file_diff("changed", relative, old_file, disk_stat.st_size, new, new_stat.st_size) if old_file else None
    return Change(relative, "changed", new_stat.st_size, new, diff, executable=executable, run_id=run_id)


def _deleted(entry: str, work: str, run_id: str) -> list[Change]:
    """The files a deleted entry removes from the working folder as it is now (a folder: each file under it)."""
    on_disk = os.path.join(work, *entry.split("/"))
    if not parent_inside(on_disk, work):  # nothing outside the working folder is read; applying it is refused
        return [Change(entry, "deleted", 0, None, run_id=run_id)]
    try:
        mode = os.lstat(on_disk).st_mode
    except OSError:
        return []  # gone already: deleting it would change nothing
    if stat.S_ISDIR(mode):
        found = []
        for inner in sorted(walk_files(on_disk)):
            found += _deleted(f"{entry}/{inner}", work, run_id)
        return found
    size = os.lstat(on_disk).st_size
    diff = file_diff("deleted", entry, on_disk, size, None, 0) if stat.S_ISREG(mode) else None
    return [Change(entry, "deleted", size, None, diff, run_id=run_id)]


def run_changes(run_folder: str, working_folder: str | None) -> list[Change]:
    """What the run in `run_folder` added, changed and deleted in `working_folder`, sorted by path: files and symbolic
    links only (folders are where they live), our own `.skills/` left out. A file the run rewrote with the bytes it
    already had is no change. Paths applied already (applied.json) keep the kind they had, marked `applied`."""
    if not working_folder:
        return []
    run_folder = os.path.abspath(run_folder)
    work = os.path.realpath(working_folder)
    run_id = os.path.basename(run_folder)
    upper = os.path.join(run_folder, CHANGES_FOLDER)
    applied = applied_records(run_folder)
    found: dict[str, Change] = {}
    if os.path.isdir(upper) and not os.path.islink(upper):
        for relative in walk_files(upper):
            if _ours(relative):
                continue
            if relative in applied:
                found[relative] = _recorded(relative, applied[relative], os.path.join(upper, *relative.split("/")), run_id)
                continue
            change = _classify(relative, upper, work, run_id)
            if change is not None:
                found[relative] = change
    for raw in _deleted_entries(run_folder, work):
        entry = clean_relative(raw)
        if entry is None:  # a path that climbs out: listed as it is written, and refused when applied
            found.setdefault(raw, Change(raw, "deleted", 0, None, run_id=run_id))
            continue
        if _ours(entry):
            continue
        done = {p: r for p, r in applied.items() if p == entry or p.startswith(entry + "/")}
        for path, record in done.items():
            found.setdefault(path, _recorded(path, record, None, run_id))
        for change in _deleted(entry, work, run_id):
            if change.path not in done:
                found.setdefault(change.path, change)
    return [found[p] for p in sorted(found)]


def _recorded(path: str, record: dict[str, Any], file: str | None, run_id: str) -> Change:
    kind = record.get("kind") if record.get("kind") in ("added", "changed", "deleted") else "changed"
    size = record.get("bytes") if isinstance(record.get("bytes"), int) else 0
    return Change(path, kind, size, None if kind == "deleted" else file, None, link=record.get("link"),
                  executable=bool(record.get("executable")), run_id=run_id, applied=True)


# --- applying ------------------------------------------------------------------------------------------------------


def select(changes: list[Change], paths: Sequence[str] | None, work: str, run_id: str) -> list[Change]:
    """The changes `paths` name (a path, or a folder: every change under it); every change when `paths` is None."""
    if paths is None:
        return changes
    chosen: dict[str, Change] = {}
    for asked in paths:
        wanted = asked
        if os.path.isabs(asked) and under(os.path.abspath(asked), work):
            wanted = os.path.relpath(os.path.abspath(asked), work)
        relative = clean_relative(wanted) or asked
        matched = [c for c in changes if c.path == relative or c.path.startswith(relative + "/")]
        if not matched:
            raise UnknownChange(asked, run_id, [c.path for c in changes])
        chosen.update((c.path, c) for c in matched)
    return [chosen[p] for p in sorted(chosen)]


def _applied_record(change: Change, at_ns: int) -> dict[str, Any]:
    """What applied.json keeps of an applied change: enough to list it again, marked applied, after the run."""
    record: dict[str, Any] = {"kind": change.kind, "bytes": change.bytes, "at_ns": at_ns}
    if change.link is not None:
        record["link"] = change.link
    if change.executable:
        record["executable"] = True
    return record


def _remove_emptied_folders(run_folder: str, guard: Guard, deleted_paths: set[str]) -> None:
    """Folders the run deleted whole, once every file in them is gone: removed too (only when empty)."""
    entries = [e for e in map(clean_relative, _deleted_entries(run_folder)) if e and not _ours(e)]
    for entry in sorted(entries, key=lambda e: -e.count("/")):
        if not any(p.startswith(entry + "/") for p in deleted_paths):
            continue
        destination, refusal = guard.destination(entry)
        if refusal or destination is None or not os.path.isdir(destination) or os.path.islink(destination):
            continue
        for folder, _dirs, _files in os.walk(destination, topdown=False):
            try:
                os.rmdir(folder)
            except OSError:
                pass


def apply_changes(run_folder: str, working_folder: str, paths: Sequence[str] | None = None,
                  protected: Sequence[str] = ()) -> ApplyReport:
    """Copy the run's changes (all, or those `paths` name) into `working_folder`; returns what was applied and what
    was refused, with why. `protected`: the project's control files (skills-policy.yaml, skills.lock and .skills/
    are protected whatever is passed). Raises UnknownChange for a path that names no change of the run."""
    run_folder = os.path.abspath(run_folder)
    work = os.path.realpath(working_folder)
    run_id = os.path.basename(run_folder)
    started = run_started_ns(run_folder)
    guard = Guard(work, protected)
    report = ApplyReport(runs=[run_id])
    accepted: list[tuple[Change, str]] = []
    for change in select(run_changes(run_folder, work), paths, work, run_id):
        if change.applied:
            report.refused.append((change, REFUSED_AGAIN))
            continue
        destination, refusal = guard.destination(change.path, change.link)
        refusal = refusal or changed_since(change.kind, destination or "", started)
        if refusal:
            report.refused.append((change, refusal))
        else:
            accepted.append((change, destination or ""))
    deletes = [(c, d) for c, d in accepted if c.kind == "deleted"]
    writes = [(c, d) for c, d in accepted if c.kind != "deleted"]
    for change, destination in deletes:  # first: a file the run deleted may be where it made a folder
        try:
            os.remove(destination)
        except FileNotFoundError:
            report.refused.append((change, f"{REFUSED_SINCE} (it is no longer there)"))
        except OSError as error:
            report.refused.append((change, f"cannot delete it: {error.strerror or error}"))
        else:
            report.applied.append(change)
    if deletes:
        _remove_emptied_folders(run_folder, guard, {c.path for c in report.applied})
    for change, destination in writes:
        try:
            write_version(destination, work, change.path, change.file, change.link, change.executable)
        except ChangeError as error:
            report.refused.append((change, str(error)))
        except OSError as error:
            report.refused.append((change, f"cannot write it: {error.strerror or error}"))
        else:
            report.applied.append(change)
    if report.applied:
        now = time.time_ns()
        record_applied(run_folder, {c.path: _applied_record(c, now) for c in report.applied})
    report.applied = sorted((replace(c, applied=True) for c in report.applied), key=lambda c: c.path)
    report.refused.sort(key=lambda item: item[0].path if isinstance(item[0], Change) else item[0])
    return report
