"""What a sandboxed run changed in the working folder, and applying it: the run wrote copy-on-write, the user applies.

A run sees the session's folder through an overlay: its writes land in the run's folder (`changes/`, the overlay's
upper layer, and `deleted`, the paths it removed) and the project on disk stays as it was. `run_changes` lists those
writes against the project as it is now (added, changed, deleted; copy-ups of unchanged files are not changes);
`apply_changes` copies the ones the user accepts into the project, one atomic write per file, refusing any that would
write a control file, leave the working folder, or overwrite a file changed on disk since the run started. What was
applied is recorded in the run's folder (`applied.json`), so applying twice says so. Nothing here imports IPython.
"""

from __future__ import annotations

import builtins
import difflib
import json
import os
import re
import stat
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from skills_magic.errors import ChangeError, UnknownChange

CHANGES_FOLDER = "changes"  # in the run's folder: the overlay's upper layer, each file at its path in the working folder
DELETED_FILE = "deleted"  # in the run's folder: NUL-separated paths the run deleted in the working folder
OPAQUE_ATTRIBUTE = "user.overlay.opaque"  # overlayfs (userxattr) marks a folder that replaced the lower one
RUN_FILE = "run.json"  # in the run's folder, written by the gate at the start: {"started_ns": ..., ...}
APPLIED_FILE = "applied.json"  # in the run's folder: what `apply_changes` copied into the project, and when
OWN_FOLDER = ".skills"  # our own folder (runs, database): never listed, never applied
CONTROL_NAMES = ("skills-policy.yaml", "skills.lock", OWN_FOLDER)  # protected even when the caller names none
GIT_FOLDER = ".git"  # git runs hooks and reads config from there: a run's write there would run code later
DIFF_MAX_BYTES = 64 * 1024  # each side of a diff: a larger file is data, and its diff would flood the cell
DIFF_MAX_LINES = 400  # a longer diff is cut (and says so): the file itself is one `read_text()` away
COMPARE_BLOCK_BYTES = 1024 * 1024  # files are compared in blocks of this size (a 1 GB output is never read whole)
TEMP_PREFIX = ".skills-apply-"  # the temporary file an atomic write renames into place
DEFAULT_UMASK = 0o022  # when the process's umask cannot be read
RUN_NAME = re.compile(r"run-[A-Za-z0-9_]{1,64}")  # the names the gate gives run folders (mkdtemp(prefix="run-"))

REFUSED_CONTROL = "a control file of the project (skills-policy.yaml, skills.lock, .skills/): a run never writes it"
REFUSED_GIT = "inside .git/ (git runs its hooks and reads its config from there): let git itself make such changes"
REFUSED_OUTSIDE = "outside the working folder"
REFUSED_LINK = "a symbolic link whose target leaves the working folder"
REFUSED_SINCE = "changed on disk since the run started"
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
            with open(self.file, "rb", opener=_no_follow) as handle:
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


def run_started_ns(run_folder: str) -> int:
    """When the run started: run.json's `started_ns` (written by the gate at the start), else the run folder's mtime
    (made at the start, but touched again when the run's results are copied in: later than the start, never earlier)."""
    try:
        with open(os.path.join(run_folder, RUN_FILE), encoding="utf-8") as handle:
            started = json.load(handle).get("started_ns")
        if isinstance(started, int) and not isinstance(started, bool) and started > 0:
            return started
    except (OSError, ValueError, AttributeError):
        pass
    return os.stat(run_folder).st_mtime_ns


def recent_runs(runs_root: str) -> list[str]:
    """The run folders' names under `runs_root`, newest first."""
    try:
        names = [n for n in os.listdir(runs_root) if RUN_NAME.fullmatch(n) and os.path.isdir(os.path.join(runs_root, n))]
    except OSError:
        return []
    return sorted(names, key=lambda n: (-os.stat(os.path.join(runs_root, n)).st_mtime_ns, n))


def run_facts(run_folder: str) -> dict[str, Any]:
    """run.json as a dict ({} when it is missing or unreadable)."""
    try:
        with open(os.path.join(run_folder, RUN_FILE), encoding="utf-8") as handle:
            facts = json.load(handle)
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def _applied_records(run_folder: str) -> dict[str, dict[str, Any]]:
    try:
        with open(os.path.join(run_folder, APPLIED_FILE), encoding="utf-8") as handle:
            records = json.load(handle).get("applied", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: v for k, v in records.items() if isinstance(k, str) and isinstance(v, dict)} if isinstance(records, dict) else {}


def _deleted_entries(run_folder: str, work: str | None = None) -> list[str]:
    """The paths the run deleted: its `deleted` list, and (with `work`) what an opaque folder hides: a folder the
    run removed and made again replaces the old one, so the old entries it no longer holds are deleted too."""
    try:
        with open(os.path.join(run_folder, DELETED_FILE), "rb") as handle:
            raw = handle.read()
    except OSError:
        raw = b""
    found = [os.fsdecode(p) for p in raw.split(b"\0") if p]
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
            if not os.path.isdir(old) or os.path.islink(old) or not _parent_inside(old, work):
                continue
            try:
                kept = set(os.listdir(folder))
                hidden += [f"{relative}/{entry}" for entry in sorted(os.listdir(old)) if entry not in kept]
            except OSError:
                continue
    return hidden


def _clean_relative(path: str) -> str | None:
    """The path relative to the working folder, with "/", or None when it is absolute or climbs out (`..`)."""
    if not path or "\0" in path or os.path.isabs(path) or path.startswith("/"):
        return None
    parts = [p for p in path.replace(os.sep, "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _parent_inside(path: str, work: str) -> bool:
    """Whether the folder holding `path` is really inside `work` (no symbolic link on the way leads out)."""
    return _under(os.path.realpath(os.path.dirname(path)), work)


def _ours(relative: str) -> bool:
    return relative == OWN_FOLDER or relative.startswith(OWN_FOLDER + "/")


def _walk_files(root: str) -> Iterable[str]:
    """Every regular file and symbolic link under `root`, relative to it with "/" (links are never followed)."""
    for folder, dirs, files in os.walk(root):
        for name in list(dirs):
            if os.path.islink(os.path.join(folder, name)):
                dirs.remove(name)
                files.append(name)
        for name in files:
            full = os.path.join(folder, name)
            try:
                mode = os.lstat(full).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                yield os.path.relpath(full, root).replace(os.sep, "/")


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))


def _same_bytes(a: str, b: str, size: int) -> bool:
    with open(a, "rb", opener=_no_follow) as first, open(b, "rb", opener=_no_follow) as second:
        while size > 0:
            block = first.read(COMPARE_BLOCK_BYTES)
            if block != second.read(COMPARE_BLOCK_BYTES):
                return False
            if not block:
                break
            size -= len(block)
        return True


def _text_of(path: str | None, size: int) -> str | None:
    """The file's text when it is small UTF-8 text ("" for no file), else None."""
    if path is None:
        return ""
    if size > DIFF_MAX_BYTES:
        return None
    try:
        with open(path, "rb", opener=_no_follow) as handle:
            data = handle.read(DIFF_MAX_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return None if "\0" in text or len(data) > DIFF_MAX_BYTES else text


def unified_diff(old: str, new: str, path: str, added: bool = False, deleted: bool = False) -> str:
    """A unified diff of two texts (`--- a/PATH`, `+++ b/PATH`), marking a last line with no newline as git does,
    cut at DIFF_MAX_LINES lines (and saying so)."""
    lines = []
    for line in difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                     "/dev/null" if added else f"a/{path}", "/dev/null" if deleted else f"b/{path}"):
        if line.endswith("\n"):
            lines.append(line)
        else:
            lines += [line + "\n", "\\ No newline at end of file\n"]
    if len(lines) > DIFF_MAX_LINES:
        lines = lines[:DIFF_MAX_LINES] + [f"[diff cut: {len(lines) - DIFF_MAX_LINES:,} more lines not shown]\n"]
    return "".join(lines)


def _diff(kind: str, path: str, old_file: str | None, old_size: int, new_file: str | None, new_size: int) -> str | None:
    old, new = _text_of(old_file, old_size), _text_of(new_file, new_size)
    if old is None or new is None:
        return None
    return unified_diff(old, new, path, added=kind == "added", deleted=kind == "deleted")


def _classify(relative: str, upper: str, work: str, run_id: str) -> Change | None:
    """The change one file of changes/ makes to the working folder as it is now; None when it makes none."""
    new = os.path.join(upper, *relative.split("/"))
    on_disk = os.path.join(work, *relative.split("/"))
    try:
        new_stat = os.lstat(new)
    except OSError:
        return None
    if not _parent_inside(on_disk, work):  # nothing outside the working folder is read; applying it is refused
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
        return Change(relative, "added", new_stat.st_size, new, _diff("added", relative, None, 0, new, new_stat.st_size),
                      executable=executable, run_id=run_id)
    if (stat.S_ISREG(disk_stat.st_mode) and disk_stat.st_size == new_stat.st_size
            and bool(disk_stat.st_mode & stat.S_IXUSR) == executable):
        try:
            if _same_bytes(new, on_disk, new_stat.st_size):
                return None  # copied up (opened for writing, touched) but not changed
        except OSError:
            pass
    old_file = on_disk if stat.S_ISREG(disk_stat.st_mode) else None
    diff = _diff("changed", relative, old_file, disk_stat.st_size, new, new_stat.st_size) if old_file else None
    return Change(relative, "changed", new_stat.st_size, new, diff, executable=executable, run_id=run_id)


def _deleted(entry: str, work: str, run_id: str) -> list[Change]:
    """The files a deleted entry removes from the working folder as it is now (a folder: each file under it)."""
    on_disk = os.path.join(work, *entry.split("/"))
    if not _parent_inside(on_disk, work):  # nothing outside the working folder is read; applying it is refused
        return [Change(entry, "deleted", 0, None, run_id=run_id)]
    try:
        mode = os.lstat(on_disk).st_mode
    except OSError:
        return []  # gone already: deleting it would change nothing
    if stat.S_ISDIR(mode):
        found = []
        for inner in sorted(_walk_files(on_disk)):
            found += _deleted(f"{entry}/{inner}", work, run_id)
        return found
    size = os.lstat(on_disk).st_size
    diff = _diff("deleted", entry, on_disk, size, None, 0) if stat.S_ISREG(mode) else None
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
    applied = _applied_records(run_folder)
    found: dict[str, Change] = {}
    if os.path.isdir(upper) and not os.path.islink(upper):
        for relative in _walk_files(upper):
            if _ours(relative):
                continue
            if relative in applied:
                found[relative] = _recorded(relative, applied[relative], os.path.join(upper, *relative.split("/")), run_id)
                continue
            change = _classify(relative, upper, work, run_id)
            if change is not None:
                found[relative] = change
    for raw in _deleted_entries(run_folder, work):
        entry = _clean_relative(raw)
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


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class _Guard:
    """Where a change may land: inside the working folder (real paths), never on a control file or in .git/."""

    def __init__(self, work: str, protected: Sequence[str]):
        self.work = work
        names = [os.path.join(work, name) for name in CONTROL_NAMES]
        self.protected = list(dict.fromkeys(
            form for p in [*names, *protected] for form in (os.path.abspath(p), os.path.realpath(p))))
        self.git = os.path.join(work, GIT_FOLDER)

    def destination(self, change: Change) -> tuple[str | None, str | None]:
        """(where the change lands on disk, None) or (None, why it may not)."""
        relative = _clean_relative(change.path)
        if relative is None or relative != change.path:
            return None, REFUSED_OUTSIDE
        lexical = os.path.join(self.work, *relative.split("/"))
        parent = os.path.realpath(os.path.dirname(lexical))
        if not _under(parent, self.work):
            return None, f"{REFUSED_OUTSIDE} (a folder on its way is a symbolic link leading out)"
        real = os.path.join(parent, os.path.basename(lexical))
        if real == self.work:
            return None, REFUSED_OUTSIDE
        if any(_under(form, p) for form in (lexical, real) for p in self.protected):
            return None, REFUSED_CONTROL
        if _under(lexical, self.git) or _under(real, self.git):
            return None, REFUSED_GIT
        if change.link is not None:
            target = change.link if os.path.isabs(change.link) else os.path.join(parent, change.link)
            if not _under(os.path.realpath(target), self.work):
                return None, f"{REFUSED_LINK} (to {change.link})"
        return real, None


def _changed_since(change: Change, destination: str, started_ns: int) -> str | None:
    try:
        disk = os.lstat(destination)
    except OSError:
        disk = None
    if change.kind == "added":
        return None if disk is None else f"{REFUSED_SINCE} (a file is there now)"
    if disk is None:
        return f"{REFUSED_SINCE} (it is no longer there)"
    if disk.st_mtime_ns > started_ns:
        return REFUSED_SINCE
    return None


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return DEFAULT_UMASK


def _mode(change: Change, destination: str) -> int:
    """The file's permissions as they are on disk (new: as the umask gives), with the run bit the run left on it."""
    try:
        disk = os.lstat(destination)
        base = stat.S_IMODE(disk.st_mode) if stat.S_ISREG(disk.st_mode) else 0o666 & ~_umask()
    except OSError:
        base = 0o666 & ~_umask()
    base &= 0o777
    return base | ((base & 0o444) >> 2) if change.executable else base & ~0o111


def _write(change: Change, destination: str, work: str) -> None:
    """Put the run's version at `destination` atomically: a temporary file in the same folder, then a rename."""
    parent = os.path.dirname(destination)
    os.makedirs(parent, exist_ok=True)
    if not _under(os.path.realpath(parent), work):  # a folder made on the way must not have led elsewhere
        raise ChangeError(f"{change.path} would be written outside the working folder")
    if change.link is not None:
        temporary = os.path.join(parent, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        os.symlink(change.link, temporary)
        try:
            os.replace(temporary, destination)
        except BaseException:
            _remove_quietly(temporary)
            raise
        return
    mode = _mode(change, destination)
    handle, temporary = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=parent)
    try:
        with os.fdopen(handle, "wb") as out, open(change.file or "", "rb", opener=_no_follow) as source:
            while block := source.read(COMPARE_BLOCK_BYTES):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, destination)
    except BaseException:
        _remove_quietly(temporary)
        raise


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def select(changes: list[Change], paths: Sequence[str] | None, work: str, run_id: str) -> list[Change]:
    """The changes `paths` name (a path, or a folder: every change under it); every change when `paths` is None."""
    if paths is None:
        return changes
    chosen: dict[str, Change] = {}
    for asked in paths:
        wanted = asked
        if os.path.isabs(asked) and _under(os.path.abspath(asked), work):
            wanted = os.path.relpath(os.path.abspath(asked), work)
        relative = _clean_relative(wanted) or asked
        matched = [c for c in changes if c.path == relative or c.path.startswith(relative + "/")]
        if not matched:
            raise UnknownChange(asked, run_id, [c.path for c in changes])
        chosen.update((c.path, c) for c in matched)
    return [chosen[p] for p in sorted(chosen)]


def _record_applied(run_folder: str, applied: list[Change]) -> None:
    records = _applied_records(run_folder)
    now = time.time_ns()
    for change in applied:
        record: dict[str, Any] = {"kind": change.kind, "bytes": change.bytes, "at_ns": now}
        if change.link is not None:
            record["link"] = change.link
        if change.executable:
            record["executable"] = True
        records[change.path] = record
    handle, temporary = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=run_folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump({"applied": records}, out, indent=1, sort_keys=True)
        os.replace(temporary, os.path.join(run_folder, APPLIED_FILE))
    except BaseException:
        _remove_quietly(temporary)
        raise


def _remove_emptied_folders(run_folder: str, guard: _Guard, deleted_paths: set[str]) -> None:
    """Folders the run deleted whole, once every file in them is gone: removed too (only when empty)."""
    entries = [e for e in map(_clean_relative, _deleted_entries(run_folder)) if e and not _ours(e)]
    for entry in sorted(entries, key=lambda e: -e.count("/")):
        if not any(p.startswith(entry + "/") for p in deleted_paths):
            continue
        destination, refusal = guard.destination(Change(entry, "deleted", 0, None))
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
    guard = _Guard(work, protected)
    report = ApplyReport(runs=[run_id])
    accepted: list[tuple[Change, str]] = []
    for change in select(run_changes(run_folder, work), paths, work, run_id):
        if change.applied:
            report.refused.append((change, REFUSED_AGAIN))
            continue
        destination, refusal = guard.destination(change)
        refusal = refusal or _changed_since(change, destination or "", started)
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
            _write(change, destination, work)
        except ChangeError as error:
            report.refused.append((change, str(error)))
        except OSError as error:
            report.refused.append((change, f"cannot write it: {error.strerror or error}"))
        else:
            report.applied.append(change)
    if report.applied:
        _record_applied(run_folder, report.applied)
    report.applied = sorted((replace(c, applied=True) for c in report.applied), key=lambda c: c.path)
    report.refused.sort(key=lambda item: item[0].path if isinstance(item[0], Change) else item[0])
    return report
