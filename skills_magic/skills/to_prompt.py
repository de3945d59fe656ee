"""`skills-magic to-prompt`: the <available_skills> XML of skill folders, byte for byte as skills-ref writes it,
after every skill is validated."""

from __future__ import annotations

import os
from collections.abc import Sequence

from skills_magic.skills.find import find_skill_files
from skills_magic.skills.listing import xml_listing
from skills_magic.skills.skill import find_skill_md
from skills_magic.skills.validate import Verdict, load_skill, validate_folder


def skill_folders(paths: Sequence[str]) -> list[str]:
    """The skill folders that paths name: a SKILL.md's folder, a skill folder, or every skill under a collection."""
    folders = []
    for p in paths:
        if os.path.isfile(p):
            folders.append(os.path.dirname(os.path.abspath(p)))
        elif find_skill_md(p) is not None:
            folders.append(os.path.abspath(p))
        else:
            folders += [os.path.dirname(f) for f in find_skill_files(p)]
    return folders


def prompt_listing(paths: Sequence[str]) -> str | list[Verdict]:
    """The XML for the skills under `paths`, or the verdicts of the invalid ones (then nothing is listed)."""
    folders = skill_folders(paths)
    invalid = [v for v in map(validate_folder, folders) if not v.valid]
    if invalid:
        return invalid
    skills = [load_skill(find_skill_md(f)).skill for f in folders]

    def location(skill) -> str:
        return os.path.join(os.path.realpath(skill.folder), os.path.basename(skill.path))

    return xml_listing(skills, None, location, name=lambda skill: skill.written_name)[1]
