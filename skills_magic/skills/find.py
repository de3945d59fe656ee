"""Finding SKILL.md files: a bounded, loop-safe walk of a folder, remembered by folder mtimes.

The catalog, `validate_path` and `lint_path` all search through here, so a collection is walked the same way by
each, and none of them has to import another to find files.
"""

from __future__ import annotations

import os

from skills_magic.skills.skill import SKILL_FILENAMES, Diagnostic

MAX_SEARCH_DEPTH = 6  # folders below a source root; real collections nest skills 1-3 levels deep
SKIPPED_FOLDERS = frozenset(  # never skills, often huge: searching them would make a listing slow
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
     ".pytest_cache", ".ruff_cache", "site-packages", ".ipynb_checkpoints"}
)
VIRTUALENV_MARKER = "pyvenv.cfg"  # a folder holding this is a virtualenv, whatever its name


def _is_virtualenv(names: set[str]) -> bool:
    return VIRTUALENV_MARKER in names


def _list(folder: str) -> tuple[str | None, list[str]]:
    """A folder's SKILL.md (when it is a skill) or else its subfolders, names sorted."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return None, []
    names = {e.name for e in entries}
    skill_md = next((os.path.join(folder, n) for n in SKILL_FILENAMES if n in names), None)
    if skill_md is not None or _is_virtualenv(names):
        return skill_md, []
    subfolders = []
    for entry in entries:
        try:
            if entry.is_dir():
                subfolders.append(entry.name)
        except OSError:
            continue
    return None, subfolders


class Finder:
    """The folder walk, remembered: when no searched folder changed its mtime, the last result stands."""

    def __init__(self) -> None:
        # (root, include_hidden) -> the folders searched with their mtimes, the SKILL.md files, the diagnostics
        self.searches: dict[tuple[str, bool], tuple[list[tuple[str, int]], list[str], list[Diagnostic]]] = {}

    def forget(self, root: str, include_hidden: bool) -> None:
        self.searches.pop((root, include_hidden), None)

    def find(self, root: str, include_hidden: bool, diagnostics: list[Diagnostic]) -> list[str]:
        """Every SKILL.md under root, in a stable order (depth first, names sorted)."""
        cached = self.searches.get((root, include_hidden))
        if cached is not None:
            folders, found, walk_diagnostics = cached
            stat = os.stat
            try:
                # the warm path: one stat per folder searched last time, nothing listed or read
                if all(stat(folder).st_mtime_ns == mtime for folder, mtime in folders):
                    diagnostics.extend(walk_diagnostics)
                    return found
            except OSError:
                pass
        folders, found, walk_diagnostics = self._walk(root, include_hidden)
        self.searches[(root, include_hidden)] = (folders, found, walk_diagnostics)
        diagnostics.extend(walk_diagnostics)
        return found

    def _walk(self, root: str, include_hidden: bool) -> tuple[list[tuple[str, int]], list[str], list[Diagnostic]]:
        folders: list[tuple[str, int]] = []
        found: list[str] = []
        diagnostics: list[Diagnostic] = []
        ancestors: list[tuple[int, int]] = []

        def walk(folder: str, depth: int) -> None:
            try:
                st = os.stat(folder)
            except OSError:
                return
            identity = (st.st_dev, st.st_ino)
            if identity in ancestors:
                diagnostics.append(Diagnostic("symlink-loop", "a symlink leads back to a folder above it; not followed", folder))
                return
            skill_md, subfolders = _list(folder)
            if skill_md is not None:
                # a skill folder needs no stat of its own on the warm path: scan() stats its SKILL.md, and a
                # SKILL.md that vanished or was renamed makes scan() search this source again
                found.append(skill_md)
                return
            folders.append((folder, st.st_mtime_ns))
            if depth >= MAX_SEARCH_DEPTH:
                if subfolders:
                    diagnostics.append(Diagnostic("search-depth", f"not searched below depth {MAX_SEARCH_DEPTH}", folder))
                return
            ancestors.append(identity)
            for name in subfolders:
                if name in SKIPPED_FOLDERS or (name.startswith(".") and not include_hidden):
                    continue
                walk(os.path.join(folder, name), depth + 1)
            ancestors.pop()

        walk(root, 0)
        return folders, found, diagnostics


def find_skill_files(root: str | os.PathLike, include_hidden: bool = True) -> list[str]:
    """Every SKILL.md under a folder (the bounded, loop-safe search the catalog uses)."""
    return Finder().find(os.fspath(root), include_hidden, [])
