"""The reviewed manifest (`skills.lock`): the sha256 of every file of each reviewed skill, and its version.

Only `%skills review NAME` writes it, after a person confirms the bytes they were shown. Before a script of a
reviewed skill runs, every file of the skill is compared with the manifest; a difference refuses the run and names
the file and both digests. Nothing recomputes the manifest to make a check pass: a reviewer, not the code, accepts
new bytes.

Reading a skill never opens anything but a regular file: every entry is lstat'ed first, opened without following a
link and without blocking, and fstat'ed once open. A special file (FIFO, device, socket) or a symlink that leaves the
skill, dangles or leads to a special file is refused with one line naming it; a symlink to a regular file inside the
skill is pinned as that file's bytes; a symlinked folder is neither followed nor pinned. A run does not use the
skill's folder but `private_copy`: bytes read once, hashed and written as read, so what runs is what was checked.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import yaml

from skills_magic.clock import utc_now
from skills_magic.errors import SkillsMagicError

LOCK_FILE = "skills.lock"  # in the session's folder
PATH_VARIABLE = "SKILLS_MAGIC_LOCK"
LOCK_HEADER = (
    "# skills.lock: the reviewed bytes of each skill (sha256 of every file).\n"
    "# Written only by `%skills review NAME` after confirmation; a script whose skill differs from this is refused.\n"
)
SKIPPED = frozenset({".git", "__pycache__", ".ipynb_checkpoints", ".DS_Store", ".skills"})  # .skills: our runs, never a skill's
READ_BLOCK = 1 << 16  # a skill's files are small; a big one is hashed and copied without being held whole
# a file swapped for a link after its lstat is not followed, and one swapped for a FIFO does not block the open
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FOLDER_FLAGS = OPEN_FLAGS | os.O_DIRECTORY  # a folder swapped for a link after its lstat is not entered
COPY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC  # only new files, never via a link
COPY_FOLDER_MODE = 0o700  # the private copy is the kernel user's alone
COPY_FILE_MODE = 0o444  # nothing edits the bytes that were checked; the run bits of the original are added
# what a refusal calls each special file: opening one can block (a FIFO) and reading one may never end (/dev/zero)
SPECIAL = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
           stat.S_IFSOCK: "a socket"}
NEVER_READ = "special files are never read; remove it"


class ManifestMismatch(SkillsMagicError):
    """A reviewed skill's files are not the reviewed bytes."""


class UnsafeFile(ManifestMismatch):
    """A skill holds something never read: a special file, or a symlink that leaves the skill, dangles or loops."""

    def __init__(self, path: str, what: str, skill: str | None = None):
        self.path, self.what, self.skill = path, what, skill
        super().__init__(f"{skill + '/' if skill else ''}{path} is {what}")

    def of(self, skill: str) -> UnsafeFile:
        """The same refusal, naming the file as `skill/path`."""
        return UnsafeFile(self.path, self.what, skill)


class ReviewRefused(SkillsMagicError):
    """A skill holding something never read cannot be reviewed; nothing is recorded."""

    def __init__(self, cause: UnsafeFile):
        self.cause = cause
        super().__init__(f"{cause}; nothing was recorded in {LOCK_FILE}")


@dataclass(frozen=True)
class FileState:
    path: str  # relative, `/`-separated
    size: int
    sha256: str


def _kind(mode: int) -> str:
    return SPECIAL.get(stat.S_IFMT(mode), "not a regular file")


def _read(fd: int, size: int, sink: Callable[[bytes], Any] | None = None) -> tuple[str, int]:
    """(sha256, bytes) of an open file, each block handed to `sink` as it is hashed. At most `size` bytes (its size
    when opened): a file someone keeps appending to cannot keep the read going."""
    sha, done = hashlib.sha256(), 0
    while done < size:
        block = os.read(fd, min(READ_BLOCK, size - done))
        if not block:
            break
        sha.update(block)
        if sink is not None:
            sink(block)
        done += len(block)
    return sha.hexdigest(), done


def digest(path: str) -> str:
    """sha256 of the regular file at `path` (links followed); OSError for anything else, which is never read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"{_kind(info.st_mode)}: {NEVER_READ}", path)
        return _read(fd, info.st_size)[0]
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _Found:
    """A regular file of a skill, open for reading (fd), or one that cannot be read (fd None, error)."""

    path: str  # relative, `/`-separated
    fd: int | None
    mode: int = 0  # fstat of the open fd
    size: int = 0
    error: OSError | None = None


def _opened(path: str, relative: str, dir_fd: int | None = None) -> _Found | None:
    """Open a file lstat said is regular; fstat confirms it (it may have been swapped since). None if it is gone."""
    try:
        fd = os.open(path, OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:  # ELOOP: swapped for a link since its lstat; EACCES: not ours to read
        return _Found(relative, None, error=error)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFile(relative, f"{_kind(info.st_mode)}: {NEVER_READ}")
    return _Found(relative, fd, info.st_mode, info.st_size)


def _through_link(root: str, dir_fd: int, name: str, relative: str) -> _Found | None:
    """What an in-skill symlink leads to: a regular file inside the skill (opened), a folder (None: not followed),
    or a refusal."""
    try:
        text = os.readlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:  # EINVAL: no longer a link since its lstat
        return _Found(relative, None, error=error)
    try:
        target = os.path.realpath(os.path.join(root, relative), strict=True)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeFile(relative, f"a symlink loop ({text}): links are never followed round; remove it") from None
        raise UnsafeFile(relative, f"a symlink to {text}, which does not exist: a dangling link is never followed; "
                                   "remove it") from None
    if not target.startswith(root + os.sep) and target != root:
        raise UnsafeFile(relative, f"a symlink to {target}, outside the skill folder: links leaving the skill are never "
                                   "followed; copy what it points to into the skill instead")
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return None  # gone since it was resolved
    if stat.S_ISDIR(info.st_mode):
        return None
    if not stat.S_ISREG(info.st_mode):
        inside = os.path.relpath(target, root).replace(os.sep, "/")
        raise UnsafeFile(relative, f"a symlink to {inside}, {_kind(info.st_mode)}: {NEVER_READ}")
    return _opened(target, relative)


def _entry(root: str, dir_fd: int, name: str, relative: str, mode: int) -> _Found | None:
    """A file of the skill as its lstat `mode` says it is: opened, skipped (None) or refused."""
    if name.endswith(".pyc"):
        return None
    if stat.S_ISLNK(mode):
        return _through_link(root, dir_fd, name, relative)
    if stat.S_ISREG(mode):
        return _opened(name, relative, dir_fd)
    raise UnsafeFile(relative, f"{_kind(mode)}: {NEVER_READ}")


def _subfolder(root: str, dir_fd: int, name: str, relative: str) -> Iterator[_Found]:
    try:
        sub = os.open(name, FOLDER_FLAGS, dir_fd=dir_fd)
    except OSError:
        return  # unreadable, or swapped for a link since its lstat: not entered (os.walk did not either)
    try:
        yield from _scan_folder(root, sub, relative + "/")
    finally:
        os.close(sub)


def _scan_folder(root: str, dir_fd: int, prefix: str) -> Iterator[_Found]:
    with os.scandir(dir_fd) as listing:
        names = sorted(entry.name for entry in listing)
    for name in names:
        if name in SKIPPED:
            continue
        relative = prefix + name
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue  # gone since the listing
        except OSError as error:
            found = None if name.endswith(".pyc") else _Found(relative, None, error=error)
        else:
            if stat.S_ISDIR(mode):
                yield from _subfolder(root, dir_fd, name, relative)
                continue
            found = _entry(root, dir_fd, name, relative, mode)
        if found is None:
            continue
        try:
            yield found
        finally:
            if found.fd is not None:
                os.close(found.fd)


def _scan(folder: str) -> Iterator[_Found]:
    """Every file of a skill that is read: regular files and in-skill symlinks to them, each open while it is the
    current one. Skips SKIPPED names, *.pyc and symlinked folders; raises UnsafeFile (path relative to the skill)."""
    root = os.path.realpath(folder)
    try:
        top = os.open(root, FOLDER_FLAGS)
    except OSError:
        return  # no folder: no files (a pinned skill then shows every file removed)
    try:
        yield from _scan_folder(root, top, "")
    finally:
        os.close(top)


def skill_files(folder: str) -> list[FileState]:
    """Every file of a skill (an in-skill symlink recorded as the file it points to), sorted by path.

    Raises UnsafeFile for a special file or a symlink that leaves the skill, dangles or leads to a special file.
    """
    found = []
    with closing(_scan(folder)) as entries:
        for entry in entries:
            try:
                sha, size = _read(entry.fd, entry.size) if entry.fd is not None else ("unreadable", -1)
            except OSError:
                sha, size = "unreadable", -1
            found.append(FileState(entry.path, size, sha))
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


def _again(skill: str) -> str:
    return f"review it again with %skills review {skill}"


def _changed(skill: str, path: str, reviewed: str, current: str) -> ManifestMismatch:
    return ManifestMismatch(f"{skill}/{path} is not the reviewed file: reviewed sha256 {reviewed}, now {current}; "
                            f"{_again(skill)}")


def _added_or_removed(skill: str, path: str, added: bool, sha: str) -> ManifestMismatch:
    state = "is new since" if added else "was removed after"
    return ManifestMismatch(f"{skill}/{path} {state} the review (sha256 {sha}); {_again(skill)}")


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
                raise _changed(skill, change.path, change.reviewed, change.current)
            if change.kind in ("added", "removed"):
                raise _added_or_removed(skill, change.path, change.kind == "added", change.current or change.reviewed)
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


# --- the private copy a run uses ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrivateCopy:
    """A skill's files copied for one run, read-only: each file's bytes were hashed as they were copied."""

    folder: str  # the destination: run from here, not from the skill's folder
    files: dict[str, str]  # relative path -> sha256 of the bytes in the copy
    reviewed: bool  # the bytes matched skills.lock; False: a never-reviewed skill, copied as found


def _write_all(fd: int, block: bytes) -> None:
    view = memoryview(block)
    while view:
        view = view[os.write(fd, view):]


def _copy_file(entry: _Found, target: str) -> str:
    """Copy an open source file to `target`, hashing exactly the bytes written; the source is read once."""
    out = os.open(target, COPY_FLAGS, 0o600)
    try:
        sha, _ = _read(entry.fd, entry.size, lambda block: _write_all(out, block))
        os.fchmod(out, COPY_FILE_MODE | (entry.mode & 0o111))
    finally:
        os.close(out)
    return sha


def _make_folder(destination: str, relative: str, made: set[str]) -> None:
    if relative in made:
        return
    _make_folder(destination, os.path.dirname(relative), made)
    os.mkdir(os.path.join(destination, relative), COPY_FOLDER_MODE)
    made.add(relative)


def _copy_into(skill: str, folder: str, destination: str, pinned: Mapping[str, str] | None) -> dict[str, str]:
    copied: dict[str, str] = {}
    made = {""}  # folders of the copy already made
    with closing(_scan(folder)) as entries:
        for entry in entries:
            if pinned is not None and entry.path not in pinned:
                sha = _read(entry.fd, entry.size)[0] if entry.fd is not None else "unreadable"
                raise _added_or_removed(skill, entry.path, True, sha)
            if entry.fd is None:
                if pinned is not None:
                    raise _changed(skill, entry.path, pinned[entry.path], "unreadable")
                raise ManifestMismatch(f"{skill}/{entry.path} cannot be read ({entry.error.strerror}); it is not run")
            _make_folder(destination, os.path.dirname(entry.path), made)
            sha = _copy_file(entry, os.path.join(destination, entry.path))
            if pinned is not None and sha != pinned[entry.path]:
                raise _changed(skill, entry.path, pinned[entry.path], sha)
            copied[entry.path] = sha
    missing = sorted(set(pinned or ()) - set(copied))
    if missing:
        raise _added_or_removed(skill, missing[0], False, pinned[missing[0]])
    return copied


def private_copy(skill: str, folder: str, destination: str, pinned: Mapping[str, str] | None) -> PrivateCopy:
    """Copy the files of `skill` (its folder `folder`) into `destination`, which must not exist or be empty.

    `pinned` is the skill's reviewed {relative path: sha256} (`Manifest.pinned`), None for a never-reviewed skill.
    Each regular file (and in-skill symlink to one) is read once, hashed and written as read; SKIPPED folders, *.pyc
    and symlinked folders are not copied. For a reviewed skill the copy must be exactly the pinned files with their
    pinned digests. The copy's files are read-only and keep their run bits. Raises ManifestMismatch (UnsafeFile for a
    file never read) and then leaves no copy behind; OSError only for a destination that cannot be written.
    """
    created = not os.path.lexists(destination)
    os.makedirs(destination, mode=COPY_FOLDER_MODE, exist_ok=True)
    if os.listdir(destination):
        raise FileExistsError(errno.EEXIST, "the destination of a private copy must be empty", destination)
    try:
        files = _copy_into(skill, folder, destination, pinned)
    except UnsafeFile as error:
        _discard(destination, created)
        raise error.of(skill) from None
    except BaseException:
        _discard(destination, created)
        raise
    return PrivateCopy(destination, files, pinned is not None)


def _discard(destination: str, created: bool) -> None:
    """Remove a copy that failed (its files are read-only, its folders are not, so rmtree can)."""
    if created:
        shutil.rmtree(destination, ignore_errors=True)
        return
    for name in os.listdir(destination):
        path = os.path.join(destination, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
