"""Writing skill folders for tests (`from skillfiles import make_skill`)."""

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
