"""Skill folders and file trees for tests: writing them, and a snapshot of a tree to compare before and after
(`from skillfiles import make_skill, reviewed_skill, script_skill, tea_notes_skill, tree, write_file`)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def make_skill(folder: Path, frontmatter: str | None = None, body: str = "# Body\n\nDo the thing.\n", *, name: str | None = None,
               description: str = "Does a thing. Use when testing.", raw: bytes | None = None, filename: str = "SKILL.md") -> Path:
    """Write a skill folder; `raw` writes exact bytes, `frontmatter` exact YAML text, else name + description."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    if raw is not None:
        path.write_bytes(raw)
    else:
        if frontmatter is None:
            frontmatter = f"name: {name or folder.name}\ndescription: {description}\n"
        path.write_text(f"---\n{frontmatter}---\n{body}", encoding="utf-8")
    return path


def write_file(folder: Path, relative: str, text: str, mode: int | None = None) -> Path:
    """Write `text` to `folder/relative`, making its folders; `mode` sets the permission bits (e.g. 0o755)."""
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if mode is not None:
        path.chmod(mode)
    return path


def reviewed_skill(root: Path, script: str, mode: int | None = None) -> Path:
    """Skill `x` at version 2.1 in `root`: SKILL.md, `script` as scripts/run.py (permission bits `mode`), and
    references/notes.md; what a review records and a run checks against."""
    skill = root / "x"
    make_skill(skill, "name: x\ndescription: Does a thing. Use when testing.\nmetadata:\n  version: '2.1'\n")
    write_file(skill, "scripts/run.py", script, mode=mode)
    write_file(skill, "references/notes.md", "# Notes\n")
    return skill


def tree(root: Path, skip: str | None = ".skills") -> dict[str, str]:
    """Every file, link and folder under root (but `skip` at its top: our own runs and database): digest and mode,
    or link target."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (folder == str(root) and d == skip)]
        for name in dirs + files:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            if os.path.islink(path):
                found[relative] = "link " + os.readlink(path)
            elif os.path.isdir(path):
                found[relative] = "folder"
            else:
                found[relative] = hashlib.sha256(Path(path).read_bytes()).hexdigest() + oct(os.lstat(path).st_mode)
    return found


def script_skill(root: Path, script: str, text: str, name: str = "x") -> Path:
    """Skill `name` in `root` with `text` as scripts/`script` (added to the skill when it is already there)."""
    folder = root / name
    make_skill(folder, name=name)
    write_file(folder, f"scripts/{script}", text)
    return folder


def tea_notes_skill(folder: Path, body: str, style: str,
                    description: str = "Writes tasting notes for a tea. Use when asked about tea.") -> Path:
    """The tea-notes skill in `folder`: SKILL.md with `body`, and `style` as references/style.md (the reference a
    model's run reads)."""
    make_skill(folder, name="tea-notes", description=description, body=body)
    write_file(folder, "references/style.md", style)
    return folder
