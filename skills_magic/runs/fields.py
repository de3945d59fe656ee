"""Frontmatter fields in runs: who may invoke a skill, when `paths` make it visible, and what `model` and `effort`
change in the requests after it is activated (docs/runs.md, "Frontmatter fields in runs").

- `user-invocable: false`: the user cannot name the skill in `%%skill run NAME`; the model may still choose it.
- `paths`: gitignore-style patterns (one string or a list); the skill is in the model's catalog only when one of the
  run's files matches: a `--with` input's file name, or a run argument that names an existing file.
- `model` / `effort`: the requests after the activation use the skill's model (unless --model fixed the run's) and
  send its effort as `output_config.effort`, only to models whose API has that setting.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from skills_magic.errors import SkillsMagicError
from skills_magic.models.choice import requested_model
from skills_magic.skills.skill import Skill

EFFORT_LEVELS = ("low", "medium", "high", "xhigh", "max")  # the Messages API's `output_config.effort` values
# the models whose Messages API takes `output_config.effort` (the API's effort page: Opus 4.5 and later, Sonnet 4.6
# and later, Mythos); any other model is sent no effort, and the trace says so
EFFORT_FAMILIES = {"opus": (4, 5), "sonnet": (4, 6)}
EFFORT_ANY_VERSION = ("claude-mythos",)
_MODEL_VERSION = re.compile(r"claude-(opus|sonnet|haiku)-(\d+)(?:-(\d{1,2}))?(?:-\d{8})?$")


class NotUserInvocable(SkillsMagicError):
    """`%%skill run NAME` of a skill whose frontmatter says `user-invocable: false`."""


def check_user_invocable(skill: Skill) -> None:
    if not skill.frontmatter.user_invocable:
        raise NotUserInvocable(f"skill {skill.name!r} is not user-invocable (user-invocable: false): run the task "
                               "without a NAME and the model may still choose it")


# --- paths --------------------------------------------------------------------------------------------------------


def path_patterns(skill: Skill) -> list[str]:
    """The skill's `paths` patterns (empty: the skill does not depend on files)."""
    declared = skill.frontmatter.paths
    patterns = declared.splitlines() if isinstance(declared, str) else [str(p) for p in declared or []]
    return [p.strip() for p in patterns if p.strip()]


def run_files(inputs: Iterable[Any], arguments: str | Sequence[str], cwd: str) -> list[str]:
    """The files a run is given, as paths `paths` patterns are matched against: each `--with` input's file name
    (`df.csv`), and each argument (a shell word of them, when they are the line as typed) that names an existing file
    (relative to the session's folder when inside it)."""
    files = [os.path.basename(i.path) for i in inputs]
    for argument in _argument_words(arguments) if isinstance(arguments, str) else arguments:
        path = os.path.join(cwd, os.path.expanduser(argument))
        if argument and os.path.isfile(path):
            inside = os.path.relpath(os.path.realpath(path), os.path.realpath(cwd))
            files.append(argument.lstrip("/") if inside.startswith("..") else inside)
    return [f.replace(os.sep, "/") for f in files]


def _argument_words(arguments: str) -> list[str]:
    try:
        return shlex.split(arguments)
    except ValueError:  # a quote left open: the words between blanks
        return arguments.split()


def matches_paths(skill: Skill, files: Sequence[str]) -> bool:
    """True when the skill has no `paths`, or one of `files` matches them (gitignore syntax)."""
    patterns = path_patterns(skill)
    if not patterns:
        return True
    import pathspec  # imported on first use: most runs have no `paths` skill

    spec = pathspec.GitIgnoreSpec.from_lines(patterns)
    return any(spec.match_file(f) for f in files)


def visible_for_files(skills: Sequence[Skill], files: Sequence[str]) -> tuple[list[Skill], int]:
    """The skills whose `paths` (if any) match one of `files`, and how many were left out by theirs."""
    kept = [s for s in skills if matches_paths(s, files)]
    return kept, len(skills) - len(kept)


# --- model and effort ---------------------------------------------------------------------------------------------


def skill_model(skill: Skill) -> str | None:
    """The model a skill asks for (its alias resolved), or None (`inherit` or no `model`)."""
    return requested_model(skill.frontmatter.model)


def effort_supported(model_id: str) -> bool:
    if model_id.startswith(EFFORT_ANY_VERSION):
        return True
    match = _MODEL_VERSION.match(model_id)
    if match is None or match.group(1) not in EFFORT_FAMILIES:
        return False
    return (int(match.group(2)), int(match.group(3) or 0)) >= EFFORT_FAMILIES[match.group(1)]


def effort_setting(effort: Any, model_id: str) -> tuple[str | None, str]:
    """The `output_config.effort` to send for a skill's `effort` (None: nothing sent), and the trace's words for it."""
    level = str(effort).strip().lower()
    if level not in EFFORT_LEVELS:
        return None, f"effort {effort}: not sent, the API's effort levels are {', '.join(EFFORT_LEVELS)}"
    if not effort_supported(model_id):
        return None, f"effort {level}: not sent, the API has no effort setting for {model_id}"
    return level, f"effort {level}"
