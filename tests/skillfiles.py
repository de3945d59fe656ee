"""Writing skill folders for tests (`from skillfiles import make_skill, write_file`)."""

from __future__ import annotations

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
