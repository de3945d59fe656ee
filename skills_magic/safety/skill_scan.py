"""A skill's files read without ever opening anything but a regular file: what the review pins and a run copies.

Every entry is lstat'ed first, opened without following a link and without blocking, and fstat'ed once open. A
special file (FIFO, device, socket) or a symlink that leaves the skill, dangles or leads to a special file is refused
with one line naming it (`UnsafeFile`); a symlink to a regular file inside the skill is read as that file's bytes; a
symlinked folder is neither followed nor read.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

from skills_magic.errors import ManifestMismatch

SKIPPED = frozenset({".git", "__pycache__", ".ipynb_checkpoints", ".DS_Store", ".skills"})  # .skills: our runs, never a skill's
READ_BLOCK = 1 << 16  # a skill's files are small; a big one is hashed and copied without being held whole
# a file swapped for a link after its lstat is not followed, and one swapped for a FIFO does not block the open
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FOLDER_FLAGS = OPEN_FLAGS | os.O_DIRECTORY  # a folder swapped for a link after its lstat is not entered
# what a refusal calls each special file: opening one can block (a FIFO) and reading one may never end (/dev/zero)
SPECIAL = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
           stat.S_IFSOCK: "a socket"}
NEVER_READ = "special files are never read; remove it"


class UnsafeFile(ManifestMismatch):
    """A skill holds something never read: a special file, or a symlink that leaves the skill, dangles or loops."""

    def __init__(self, path: str, what: str, skill: str | None = None):
        self.path, self.what, self.skill = path, what, skill
        super().__init__(f"{skill + '/' if skill else ''}{path} is {what}")

    def of(self, skill: str) -> UnsafeFile:
        """The same refusal, naming the file as `skill/path`."""
        return UnsafeFile(self.path, self.what, skill)


@dataclass(frozen=True)
class FileState:
    """One file of a skill as read: its size and the sha256 of its bytes ("unreadable" and -1 when it could not be)."""

    path: str  # relative, `/`-separated
    size: int
    sha256: str


def _kind(mode: int) -> str:
    return SPECIAL.get(stat.S_IFMT(mode), "not a regular file")


def read_hashed(fd: int, size: int, sink: Callable[[bytes], Any] | None = None) -> tuple[str, int]:
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
        return read_hashed(fd, info.st_size)[0]
    finally:
        os.close(fd)


@dataclass(frozen=True)
class ScannedFile:
    """A regular file of a skill, open for reading (fd), or one that cannot be read (fd None, error)."""

    path: str  # relative, `/`-separated
    fd: int | None
    mode: int = 0  # fstat of the open fd
    size: int = 0
    error: OSError | None = None


def _opened(path: str, relative: str, dir_fd: int | None = None) -> ScannedFile | None:
    """Open a file lstat said is regular; fstat confirms it (it may have been swapped since). None if it is gone."""
    try:
        fd = os.open(path, OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:  # ELOOP: swapped for a link since its lstat; EACCES: not ours to read
        return ScannedFile(relative, None, error=error)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFile(relative, f"{_kind(info.st_mode)}: {NEVER_READ}")
    return ScannedFile(relative, fd, info.st_mode, info.st_size)


def _through_link(root: str, dir_fd: int, name: str, relative: str) -> ScannedFile | None:
    """What an in-skill symlink leads to: a regular file inside the skill (opened), a folder (None: not followed),
    or a refusal."""
    try:
        text = os.readlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:  # EINVAL: no longer a link since its lstat
        return ScannedFile(relative, None, error=error)
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


def _entry(root: str, dir_fd: int, name: str, relative: str, mode: int) -> ScannedFile | None:
    """A file of the skill as its lstat `mode` says it is: opened, skipped (None) or refused."""
    if name.endswith(".pyc"):
        return None
    if stat.S_ISLNK(mode):
        return _through_link(root, dir_fd, name, relative)
    if stat.S_ISREG(mode):
        return _opened(name, relative, dir_fd)
    raise UnsafeFile(relative, f"{_kind(mode)}: {NEVER_READ}")


def _subfolder(root: str, dir_fd: int, name: str, relative: str) -> Iterator[ScannedFile]:
    try:
        sub = os.open(name, FOLDER_FLAGS, dir_fd=dir_fd)
    except OSError:
        return  # unreadable, or swapped for a link since its lstat: not entered (os.walk did not either)
    try:
        yield from _scan_folder(root, sub, relative + "/")
    finally:
        os.close(sub)


def _scan_folder(root: str, dir_fd: int, prefix: str) -> Iterator[ScannedFile]:
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
            found = None if name.endswith(".pyc") else ScannedFile(relative, None, error=error)
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


def scan_skill(folder: str) -> Iterator[ScannedFile]:
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
    with closing(scan_skill(folder)) as entries:
        for entry in entries:
            try:
                sha, size = read_hashed(entry.fd, entry.size) if entry.fd is not None else ("unreadable", -1)
            except OSError:
                sha, size = "unreadable", -1
            found.append(FileState(entry.path, size, sha))
    return sorted(found, key=lambda f: f.path)
