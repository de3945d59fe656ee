"""Touching the files of the working folder and of a run's folder without being led out of them: containment
(`under`, `clean_relative`, `parent_inside`), an opener that never follows a symbolic link, and a walk that lists
links as files instead of entering them. Reading a run's changes and applying them both go through these."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

TEMP_PREFIX = ".skills-apply-"  # the temporary file an atomic write renames into place


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def clean_relative(path: str) -> str | None:
    """The path relative to the working folder, with "/", or None when it is absolute or climbs out (`..`)."""
    if not path or "\0" in path or os.path.isabs(path) or path.startswith("/"):
        return None
    parts = [p for p in path.replace(os.sep, "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def parent_inside(path: str, work: str) -> bool:
    """Whether the folder holding `path` is really inside `work` (no symbolic link on the way leads out)."""
    return under(os.path.realpath(os.path.dirname(path)), work)


def no_follow(path: str, flags: int) -> int:
    """An opener for `open(..., opener=no_follow)`: a symbolic link at `path` is an error, never followed."""
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))


def walk_files(root: str) -> Iterable[str]:
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


def remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
