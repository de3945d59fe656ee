"""`%%skill write`: a cell's text becomes NAME/SKILL.md in a folder of skills, created or replaced."""

from __future__ import annotations

import os

from skills_magic.errors import SkillNotWritten

WRITE_FOLDER = os.path.join(".skills", "written")  # where `%%skill write` puts skills unless told otherwise


def write_skill_file(root: str, name: str, text: str, cwd: str) -> str:
    """Write `text` as root/NAME/SKILL.md (a final newline added); returns the skill's folder."""
    target = os.path.join(root, name)
    try:
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "SKILL.md"), "w", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")
    except OSError as error:
        raise SkillNotWritten(f"cannot write {os.path.relpath(target, cwd)}/SKILL.md: {error.strerror or error}") from None
    return target
