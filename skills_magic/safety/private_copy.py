"""The private copy a run uses instead of the skill's folder: each file read once, hashed and written as read, so
what runs is exactly what was checked against skills.lock."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass

from skills_magic.errors import ManifestMismatch
from skills_magic.safety.skill_scan import ScannedFile, UnsafeFile, read_hashed, scan_skill

COPY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC  # only new files, never via a link
COPY_FOLDER_MODE = 0o700  # the private copy is the kernel user's alone
COPY_FILE_MODE = 0o444  # nothing edits the bytes that were checked; the run bits of the original are added


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


def _copy_file(entry: ScannedFile, target: str) -> str:
    """Copy an open source file to `target`, hashing exactly the bytes written; the source is read once."""
    out = os.open(target, COPY_FLAGS, 0o600)
    try:
        sha, _ = read_hashed(entry.fd, entry.size, lambda block: _write_all(out, block))
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
    with closing(scan_skill(folder)) as entries:
        for entry in entries:
            if pinned is not None and entry.path not in pinned:
                sha = read_hashed(entry.fd, entry.size)[0] if entry.fd is not None else "unreadable"
                raise ManifestMismatch.added_or_removed(skill, entry.path, True, sha)
            if entry.fd is None:
                if pinned is not None:
                    raise ManifestMismatch.changed(skill, entry.path, pinned[entry.path], "unreadable")
                raise ManifestMismatch(f"{skill}/{entry.path} cannot be read ({entry.error.strerror}); it is not run")
            _make_folder(destination, os.path.dirname(entry.path), made)
            sha = _copy_file(entry, os.path.join(destination, entry.path))
            if pinned is not None and sha != pinned[entry.path]:
                raise ManifestMismatch.changed(skill, entry.path, pinned[entry.path], sha)
            copied[entry.path] = sha
    missing = sorted(set(pinned or ()) - set(copied))
    if missing:
        raise ManifestMismatch.added_or_removed(skill, missing[0], False, pinned[missing[0]])
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
