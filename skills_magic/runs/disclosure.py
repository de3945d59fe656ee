"""Progressive disclosure: what a model receives when it activates a skill or reads one of its files.

Activation returns the annotation line, the body verbatim after substitutions, and the list of the skill's resource
paths (never their contents). A resource is read only when asked for, only from inside the skill's folder, and
only when it is text.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skills_magic.errors import SkillsMagicError
from skills_magic.skills.skill import SKILL_FILENAMES, Skill

MAX_RESOURCES_LISTED = 200  # a skill with more files lists this many and says how many more there are
MAX_RESOURCE_BYTES = 256 * 1024  # a reference larger than this is refused: it would crowd the context
RESOURCE_SKIPPED_FOLDERS = frozenset({".git", "__pycache__", "node_modules", ".venv", ".ipynb_checkpoints"})

_PLACEHOLDER = re.compile(r"\$\{(SKILL_DIR|CLAUDE_SKILL_DIR|CLAUDE_SESSION_ID)\}|\$ARGUMENTS\[(\d+)\]|\$ARGUMENTS\b|\$(\d+)\b")


class ResourceError(SkillsMagicError):
    """A resource that cannot be given to the model; the message goes back as an `is_error` tool result."""


def substitute(body: str, arguments: Sequence[str], skill_dir: str, session_id: str, names: Sequence[str] = ()) -> str:
    """`$ARGUMENTS`, `$ARGUMENTS[N]` / `$N` (0-based), `${SKILL_DIR}` / `${CLAUDE_SKILL_DIR}`, `${CLAUDE_SESSION_ID}`,
    and `$name` for names the skill declares in `arguments`, in one pass (a substituted value is never read again).
    An index with no argument is left as written (a body's shell snippet such as `awk '{print $1}'` keeps its
    meaning). Arguments given to a body that uses no placeholder are appended as `ARGUMENTS: ...`, as Claude Code
    does."""
    substitution = _Substitution(arguments, session_id, names)
    return substitution.appended(substitution.text(body, skill_dir))


class InlineQuotingError(SkillsMagicError, ValueError):
    """A placeholder in an inline command at a place where no quoting can be sure to keep it one literal word."""


class _Substitution:
    """The placeholders of one body, filled in as prose (`text`) or as quoted shell words (`command`); `used` says
    whether any argument was used, so that unused ones are appended once for the whole body."""

    def __init__(self, arguments: Sequence[str], session_id: str, names: Sequence[str]):
        self.arguments = list(arguments)
        self.session_id = session_id
        self.declared = {n: i for i, n in enumerate(names) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", n)}
        self.pattern = _PLACEHOLDER
        if self.declared:
            alternatives = "|".join(re.escape(n) for n in sorted(self.declared, key=len, reverse=True))
            self.pattern = re.compile(f"{_PLACEHOLDER.pattern}|\\$({alternatives})\\b")
        self.used = False

    def value(self, match: re.Match, skill_dir: str) -> str | tuple[str, ...] | None:
        """What a placeholder stands for: one string, all the arguments (`$ARGUMENTS`), or None (left as written)."""
        variable, indexed, positional = match.group(1), match.group(2), match.group(3)
        if variable in ("SKILL_DIR", "CLAUDE_SKILL_DIR"):
            return skill_dir
        if variable == "CLAUDE_SESSION_ID":
            return self.session_id
        if indexed is None and positional is None and match.group(0) != "$ARGUMENTS":
            index = self.declared[match.group(4)]  # a declared name
        elif indexed is None and positional is None:
            self.used = True
            return tuple(self.arguments)
        else:
            index = int(indexed or positional)
        if index >= len(self.arguments):
            return None
        self.used = True
        return self.arguments[index]

    def text(self, prose: str, skill_dir: str) -> str:
        def replace(match: re.Match) -> str:
            value = self.value(match, skill_dir)
            return match.group(0) if value is None else value if isinstance(value, str) else " ".join(value)

        return self.pattern.sub(replace, prose)

    def command(self, command: str, skill_dir: str) -> str:
        """`command` with each placeholder replaced by its value as literal shell text, whatever quotes it sits in:
        bare, it becomes shlex-quoted words; inside "..." or '...' the quotes are closed around the quoted value and
        reopened, so it stays part of the same word. Only the command as written is read, never a value.
        Raises InlineQuotingError for a placeholder after a construct this reader does not follow."""
        out: list[str] = []
        stack = ["plain"]  # quoting contexts: plain (top level or inside $(...) / (...)), "...", '...', $'...'
        unsure = ""  # once set, the construct after which contexts are no longer followed
        i = 0
        while i < len(command):
            context, char = stack[-1], command[i]
            if char == "$":
                match = self.pattern.match(command, i)
                value = self.value(match, skill_dir) if match else None
                if value is not None:
                    if unsure:
                        raise InlineQuotingError(f"{match.group(0)} comes after {unsure}, where it cannot be quoted safely")
                    out.append(_shell_literal(value, context))
                    i = match.end()
                    continue
            step = 1
            if context == "'":
                if char == "'":
                    stack.pop()
            elif char == "\\":
                step = 2  # an escaped character (in "..." and $'...' too) is never a quote nor a placeholder
            elif context == "$'":
                if char == "'":
                    stack.pop()
            elif char == "$":
                simple = _SIMPLE_EXPANSION.match(command, i)
                if command.startswith("$'", i) and context != '"':
                    stack.append("$'")
                    step = 2
                elif command.startswith("$((", i) or (command.startswith("${", i) and not simple):
                    unsure = unsure or ("`$((`" if command.startswith("$((", i) else "`${`")
                elif command.startswith("$(", i):
                    stack.append("(")
                    step = 2
                elif simple:
                    step = simple.end() - i  # `$$0` is the PID then 0, not `$` then a placeholder
            elif context == '"':
                if char == '"':
                    stack.pop()
            elif char in "'\"":
                stack.append(char)
            elif char == "(":
                if command.startswith("((", i):
                    unsure = unsure or "`((`"
                stack.append("(")
            elif char == ")" and context == "(":
                stack.pop()
            elif i == 0 or command[i - 1] in _WORD_START:
                if char == "#":
                    unsure = unsure or "`#`"  # a comment: inside `$(`, it would swallow the `)`
                elif re.match(r"case(\s|$)", command[i:]):
                    unsure = unsure or "`case`"  # its `a)` would be taken for the end of a `$(`
            out.append(command[i:i + step])
            i += step
        return "".join(out)

    def appended(self, text: str) -> str:
        if self.arguments and not self.used:
            text = text.rstrip("\n") + f"\n\nARGUMENTS: {' '.join(self.arguments)}\n"
        return text


_WORD_START = " \t;|&()<>"  # characters after which a shell word begins
_SIMPLE_EXPANSION = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*|[0-9$?!#@*-])")


def _shell_literal(value: str | tuple[str, ...], context: str) -> str:
    """`value` as shell text that means exactly its characters, in the quoting context it is pasted into."""
    if isinstance(value, tuple):
        if context == "plain" or context == "(":
            return " ".join(shlex.quote(v) for v in value)  # each argument its own word
        value = " ".join(value)  # inside quotes the author wrote one word
    quoted = shlex.quote(value)
    if quoted == value or context in ("plain", "("):
        return quoted  # shlex leaves alone only characters no quoting context gives a meaning to
    return {'"': f'"{quoted}"', "'": f"'{quoted}'", "$'": f"'{quoted}$'"}[context]


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


def deny_inline(skill: Skill, command: str) -> str:
    """With no permission gate, every inline command becomes a visible marker; none runs."""
    return f"[denied: !`{command}`: no permission policy]"


def activation_body(skill: Skill, shown_folder: str, arguments: Sequence[str], session_id: str,
                    expand_inline: Callable[[Skill, str], str] = deny_inline) -> str:
    """The body after substitutions, each inline command replaced by what `expand_inline(skill, command)` returns.

    The commands are found in the body as written, so an argument can never add one, and neither a substituted
    value nor a command's output is scanned again. In prose a placeholder becomes its value as is, `${SKILL_DIR}` the
    shown folder; inside a command each value is one quoted shell word and `${SKILL_DIR}` the skill's real folder
    (the command runs on this machine, in that folder)."""
    substitution = _Substitution(arguments, session_id, declared_argument_names(skill))
    real_folder = os.path.realpath(skill.folder)
    body, pieces, end = skill.body, [], 0
    for match in INLINE_SHELL.finditer(body):
        pieces.append(substitution.text(body[end:match.start()], shown_folder))
        try:
            pieces.append(expand_inline(skill, substitution.command(match.group(1), real_folder)))
        except InlineQuotingError as error:
            pieces.append(f"[denied: !`{match.group(1)}`: {error}]")
        end = match.end()
    pieces.append(substitution.text(body[end:], shown_folder))
    return substitution.appended("".join(pieces))


def activation_text(skill: Skill, shown_folder: str, arguments: Sequence[str], session_id: str,
                    expand_inline: Callable[[Skill, str], str] = deny_inline) -> str:
    """What `activate_skill` returns: the annotation line, the body after substitutions (inline shell commands
    decided by the permission policy, one at a time), the resource list."""
    body = activation_body(skill, shown_folder, arguments, session_id, expand_inline)
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
