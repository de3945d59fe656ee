"""Progressive disclosure: what a model receives when it activates a skill or reads one of its files.

Activation returns the annotation line, the body verbatim after substitutions, and the list of the skill's resource
paths (never their contents). A resource is read only when asked for, only from inside the skill's folder, and
only when it is text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skills_magic.skill import SKILL_FILENAMES, Skill

MAX_RESOURCES_LISTED = 200  # a skill with more files lists this many and says how many more there are
MAX_RESOURCE_BYTES = 256 * 1024  # a reference larger than this is refused: it would crowd the context
RESOURCE_SKIPPED_FOLDERS = frozenset({".git", "__pycache__", "node_modules", ".venv", ".ipynb_checkpoints"})

_PLACEHOLDER = re.compile(r"\$\{(SKILL_DIR|CLAUDE_SKILL_DIR|CLAUDE_SESSION_ID)\}|\$ARGUMENTS\[(\d+)\]|\$ARGUMENTS\b|\$(\d+)\b")


class ResourceError(Exception):
    """A resource that cannot be given to the model; the message goes back as an `is_error` tool result."""


def substitute(body: str, arguments: Sequence[str], skill_dir: str, session_id: str, names: Sequence[str] = ()) -> str:
    """`$ARGUMENTS`, `$ARGUMENTS[N]` / `$N` (0-based), `${SKILL_DIR}` / `${CLAUDE_SKILL_DIR}`, `${CLAUDE_SESSION_ID}`,
    and `$name` for names the skill declares in `arguments`, in one pass (a substituted value is never read again).
    An index with no argument is left as written (a body's shell snippet such as `awk '{print $1}'` keeps its
    meaning). Arguments given to a body that uses no placeholder are appended as `ARGUMENTS: ...`, as Claude Code
    does."""
    pattern = _PLACEHOLDER
    declared = {name: position for position, name in enumerate(names) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name)}
    if declared:
        alternatives = "|".join(re.escape(n) for n in sorted(declared, key=len, reverse=True))
        pattern = re.compile(f"{_PLACEHOLDER.pattern}|\\$({alternatives})\\b")
    used = False

    def replace(match: re.Match) -> str:
        nonlocal used
        variable, indexed, positional = match.group(1), match.group(2), match.group(3)
        if variable in ("SKILL_DIR", "CLAUDE_SKILL_DIR"):
            return skill_dir
        if variable == "CLAUDE_SESSION_ID":
            return session_id
        if indexed is None and positional is None and match.group(0) != "$ARGUMENTS":
            index = declared[match.group(4)]  # a declared name
        elif indexed is None and positional is None:
            used = True
            return " ".join(arguments)
        else:
            index = int(indexed or positional)
        if index >= len(arguments):
            return match.group(0)
        used = True
        return arguments[index]

    text = pattern.sub(replace, body)
    if arguments and not used:
        text = text.rstrip("\n") + f"\n\nARGUMENTS: {' '.join(arguments)}\n"
    return text


def declared_argument_names(skill: Skill) -> list[str]:
    declared = skill.frontmatter.arguments
    if isinstance(declared, str):
        return declared.split()
    return [str(n) for n in declared or []]


def resources(skill: Skill) -> list[str]:
    """The skill's files other than SKILL.md, relative to its folder, sorted (never their contents)."""
    found = []
    folder = skill.folder
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in RESOURCE_SKIPPED_FOLDERS)
        for name in sorted(files):
            relative = os.path.relpath(os.path.join(root, name), folder)
            if relative not in SKILL_FILENAMES:
                found.append(relative.replace(os.sep, "/"))
        if len(found) > MAX_RESOURCES_LISTED:
            break
    return found


INLINE_SHELL = re.compile(r"!`([^`\n]+)`")  # Claude Code's inline command syntax in a SKILL.md body


def deny_inline(skill: Skill, body: str) -> str:
    """With no permission gate, every inline command becomes a visible marker; none runs."""
    return INLINE_SHELL.sub(lambda m: f"[denied: !`{m.group(1)}`: no permission policy]", body)


def activation_text(skill: Skill, shown_folder: str, arguments: Sequence[str], session_id: str,
                    expand_inline: Callable[[Skill, str], str] = deny_inline) -> str:
    """What `activate_skill` returns: the annotation line, the body after substitutions (inline shell commands
    decided by the permission policy), the resource list."""
    body = substitute(skill.body, arguments, shown_folder, session_id, declared_argument_names(skill))
    body = expand_inline(skill, body)
    files = resources(skill)
    listed = files[:MAX_RESOURCES_LISTED]
    lines = [f"- {path}" for path in listed]
    if len(files) > len(listed):
        lines.append(f"- ... and more files not listed (over {MAX_RESOURCES_LISTED})")
    tail = "\n".join(lines) if lines else "(none)"
    return (
        f"{skill.annotation(shown_folder)}\n{body}"
        f"\n\n[resources of {skill.name}: read with read_skill_resource, run scripts with run_skill_script]\n{tail}"
    )


@dataclass(frozen=True)
class Resource:
    path: str  # relative to the skill folder, as asked
    text: str


def read_resource(skill: Skill, path: str) -> Resource:
    """A text file from inside the skill's folder; anything else is a ResourceError saying why."""
    if not isinstance(path, str) or not path.strip():
        raise ResourceError("`path` must be a file path relative to the skill's folder")
    if os.path.isabs(path):
        raise ResourceError(f"{path!r} is absolute; give a path relative to the skill's folder")
    folder = os.path.realpath(skill.folder)
    target = os.path.realpath(os.path.join(folder, path))
    if not target.startswith(folder + os.sep):
        raise ResourceError(f"{path!r} is outside the folder of skill {skill.name!r}")
    if not os.path.isfile(target):
        raise ResourceError(f"{path!r} is not a file in skill {skill.name!r}")
    size = os.path.getsize(target)
    if size > MAX_RESOURCE_BYTES:
        raise ResourceError(f"{path!r} has {size} bytes; resources over {MAX_RESOURCE_BYTES} bytes are not sent")
    with open(target, "rb") as handle:
        raw = handle.read()
    if b"\x00" in raw[:8192]:
        raise ResourceError(f"{path!r} is a binary file; only text files are sent")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ResourceError(f"{path!r} is not UTF-8 text") from None
    return Resource(path, text)
