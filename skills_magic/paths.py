"""Paths as outputs show them: relative to the notebook's folder, or inside a source's label, so a notebook's
outputs are the same on every machine and clone."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

MAX_PARENT_HOPS = 3  # shown paths may climb this many folders from the cwd before we fall back to ~ or absolute
APP_NAME = "skills-magic"  # the folder name under the platform's config folder (~/.config/skills-magic on Linux)
CONFIG_DIR_ENV = "SKILLS_MAGIC_CONFIG_DIR"  # moves the whole config folder: tests and CI never touch the real one


def config_dir() -> str:
    """The user's config folder for skills-magic: $SKILLS_MAGIC_CONFIG_DIR, else the platform's (platformdirs).
    Trusted policy digests, the user's own policy and price overrides all live here, outside every project."""
    chosen = os.environ.get(CONFIG_DIR_ENV)
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    from platformdirs import user_config_dir

    return user_config_dir(APP_NAME)


def display_path(path: str, cwd: str | None = None) -> str:
    """A path as shown in outputs: relative to the notebook's folder, so outputs are the same on every clone; a path
    in the home folder that the notebook's folder shares no folder inside home with (`~/.agents/skills` seen from
    a project elsewhere, or from another project in home) as `~/...`, never as `../../../root/...`."""
    if not path:
        return path
    cwd = os.path.abspath(cwd or os.getcwd())
    absolute = os.path.abspath(path)
    home = os.path.expanduser("~")
    in_home = home not in ("", os.sep) and is_under(absolute, home)
    if in_home and not is_under(absolute, cwd) and not _meet_inside(absolute, cwd, home):
        return "~" + absolute[len(home) :]
    try:
        relative = os.path.relpath(absolute, cwd)
    except ValueError:  # another drive on Windows
        relative = absolute
    if relative.split(os.sep)[: MAX_PARENT_HOPS + 1].count(os.pardir) <= MAX_PARENT_HOPS:
        return relative
    return "~" + absolute[len(home) :] if in_home else absolute


def _meet_inside(path: str, cwd: str, home: str) -> bool:
    """Whether `path` and `cwd` meet in a folder inside `home` (one project's folders): then a relative path reads
    the same on every clone of it, wherever it sits."""
    try:
        common = os.path.commonpath([path, cwd])
    except ValueError:  # another drive on Windows
        return False
    return common != home and is_under(common, home)


def is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _inside(label: str, path: str, root: str) -> str:
    relative = os.path.relpath(path, root)
    return label if relative == os.curdir else f"{label}/{relative}"


def shown_path(path: str, cwd: str, sources: Sequence[Any]) -> str:
    """A path for outputs, given the catalog's sources (each with `label` and `root`).

    Bundled skills are shown inside `<bundled>` (wherever the package is installed); other paths relative to the
    notebook's folder when that is near, or in the home folder as `~/...`, else relative to their source
    (`<session>/collection/skill`).
    """
    if not path:
        return path
    absolute = os.path.abspath(path)
    ordered = sorted(sources, key=lambda s: s.label != "bundled")
    for source in ordered:
        if source.label == "bundled" and is_under(absolute, source.root):
            return _inside(f"<{source.label}>", absolute, source.root)
    shown = display_path(absolute, cwd)
    if not os.path.isabs(shown):  # relative to the notebook, or `~/...`: the same on every clone
        return shown
    for source in ordered:
        if is_under(absolute, source.root):
            return _inside(f"<{source.label}>", absolute, os.path.dirname(source.root))
    return shown
