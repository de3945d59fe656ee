"""Progressive disclosure: what a model receives when it activates a skill or reads one of its files.

Activation returns the annotation line, the body verbatim after substitutions, and the list of the skill's resource
paths (never their contents). A resource is read only when asked for, only from inside the skill's folder, and
only when it is text. Substitutions and inline commands follow Claude Code's rules.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skills_magic.errors import SkillsMagicError
from skills_magic.runs.tools import ToolInputError
from skills_magic.skills.skill import SKILL_FILENAMES, Skill

MAX_RESOURCES_LISTED = 200  # a skill with more files lists this many and says how many more there are
MAX_RESOURCE_BYTES = 256 * 1024  # a reference larger than this is refused: it would crowd the context
RESOURCE_SKIPPED_FOLDERS = frozenset({".git", "__pycache__", "node_modules", ".venv", ".ipynb_checkpoints"})
MAX_DECLARED_NAMES = 64  # Claude Code reads at most this many `arguments` names ...
MAX_NAME_CHARS = 64  # ... each at most this long

_NOT_WORD = "(?![A-Za-z0-9_])"  # JavaScript's \w, as Claude Code's patterns mean it: a placeholder ends before one
_VARIABLE = r"\$\{(?P<variable>SKILL_DIR|CLAUDE_SKILL_DIR|CLAUDE_SESSION_ID)\}"
_NUMBERED = rf"\$ARGUMENTS\[(?P<indexed>\d+)\]|(?P<all>\$ARGUMENTS){_NOT_WORD}|\$(?P<positional>\d+){_NOT_WORD}"
_NONCHARACTERS = str.maketrans("\uffff\ufffe", "\ufffd\ufffd")  # Claude Code's own markers: a body's become U+FFFD


class ResourceError(SkillsMagicError):
    """A resource that cannot be given to the model; the message goes back as an `is_error` tool result."""


class InlineCommandError(SkillsMagicError):
    """Raised by an inline-command runner: the command was denied, could not run, or failed; the message says why."""


class InlineQuotingError(InlineCommandError, ValueError):
    """A placeholder in an inline command at a place where no quoting can be sure to keep it one literal word."""


class SkillNotActivated(ToolInputError):
    """An inline command of the body failed or was refused, so the skill is not activated (as in Claude Code): the
    model gets this as an `is_error` tool result, and an explicit run ends with it."""

    def __init__(self, pattern: str, reason: str):
        super().__init__(f'Shell command failed for pattern "{pattern}": {reason}')


def raw_arguments(arguments: str | Sequence[str] | None) -> str:
    """The arguments as the one string the user typed: a str as it is, a list (older callers) as shell words."""
    if arguments is None:
        return ""
    return arguments if isinstance(arguments, str) else shlex.join(str(a) for a in arguments)


def argument_words(raw: str) -> list[str]:
    """`raw` parsed as shell words (`"hello world" second` is two words); split on whitespace when that fails."""
    try:
        words = shlex.split(raw)
    except ValueError:  # an unclosed quote
        words = []
    return words or raw.split()


def substitute(body: str, arguments: str | Sequence[str] | None, skill_dir: str, session_id: str,
               names: Sequence[str] = ()) -> str:
    """`$ARGUMENTS` (the raw string), `$ARGUMENTS[N]` / `$N` (its 0-based shell words), `$name` for a name the skill
    declares in `arguments` (empty without a word), `${SKILL_DIR}` / `${CLAUDE_SKILL_DIR}`, `${CLAUDE_SESSION_ID}`,
    in one pass (a substituted value is never read again); `\\$1` is a literal `$1`. An index with no word is left
    as written (a body's shell snippet such as `awk '{print $1}'` keeps its meaning). Arguments given to a body that
    uses none are appended as `ARGUMENTS: ...`, as Claude Code does."""
    substitution = _Substitution(arguments, session_id, names)
    return substitution.appended(substitution.text(body.translate(_NONCHARACTERS), skill_dir))


@functools.lru_cache(maxsize=64)
def _placeholders(names: tuple[str, ...]) -> re.Pattern:
    """One pattern for an escape (`\\$1`) and every placeholder, declared names (longest first) before `$N`."""
    declared = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    after_name = r"(?![\[A-Za-z0-9_])"
    escapable = r"\d|ARGUMENTS" + (f"|(?:{declared}){after_name}" if names else "")
    parts = [rf"(?<!\\)(?P<escape>\\)\$(?={escapable})", _VARIABLE]
    if names:
        parts.append(rf"\$(?P<name>{declared}){after_name}")
    return re.compile("|".join([*parts, _NUMBERED]))


class _Substitution:
    """The placeholders of one body, filled in as prose (`text`) or as quoted shell words (`command`); `used` says
    whether any argument was used, so that unused ones are appended once for the whole body."""

    def __init__(self, arguments: str | Sequence[str] | None, session_id: str, names: Sequence[str]):
        self.raw = raw_arguments(arguments)
        self.arguments = argument_words(self.raw)
        self.session_id = session_id
        self.declared: dict[str, int] = {}  # name: the position of its word
        for i, name in enumerate(list(names)[:MAX_DECLARED_NAMES]):
            if name and len(name) <= MAX_NAME_CHARS and not re.search(r"\s", name):
                self.declared.setdefault(name, i)
        self.pattern = _placeholders(tuple(self.declared))
        self.used = False

    def value(self, match: re.Match, skill_dir: str) -> str | tuple[str, ...] | None:
        """What a match stands for: one string, all the words (`$ARGUMENTS`: `text` uses the raw string instead), or
        None (left as written)."""
        variable = match.group("variable")
        if match.group("escape"):
            return "$"  # the backslash goes, the placeholder stays as written
        if variable in ("SKILL_DIR", "CLAUDE_SKILL_DIR"):
            return skill_dir
        if variable == "CLAUDE_SESSION_ID":
            return self.session_id
        if match.group("all"):
            self.used = True  # even with no arguments
            return tuple(self.arguments)
        if match.groupdict().get("name"):
            self.used = True  # even when it has no word: it stands for the empty string
            index = self.declared[match.group("name")]
            return self.arguments[index] if index < len(self.arguments) else ""
        index = int(match.group("indexed") or match.group("positional"))
        if index >= len(self.arguments):
            return None
        self.used = True
        return self.arguments[index]

    def text(self, prose: str, skill_dir: str) -> str:
        def replace(match: re.Match) -> str:
            value = self.value(match, skill_dir)
            if match.group("all"):
                return self.raw  # verbatim, quotes and all
            return match.group(0) if value is None else value

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
                    if match.group("all") and context not in ("plain", "("):
                        value = self.raw  # inside quotes `$ARGUMENTS` is the text as typed, as Claude Code pastes it
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
        if self.raw and not self.used:  # as Claude Code: any non-empty string, even spaces alone
            text = f"{text}\n\nARGUMENTS: {self.raw}"  # as Claude Code appends it: the raw string, to the body as is
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


# Claude Code's two forms of inline command in a SKILL.md body: a fenced block opened with ```! runs its contents;
# !`cmd` runs only at a line start or after whitespace (`KEY=!`cmd`` does not), and not inside an ordinary code span
FENCED_SHELL = re.compile(r"```!\s*\n?([\s\S]*?)\n?```")
INLINE_SHELL = re.compile(r"(?:(?<=\s)|^)!`([^`]+)`", re.M)
_BACKTICKS = re.compile(r"`+")
_BLANK = "\uffff"  # stands for a hidden character while looking for commands: neither whitespace nor a backtick


@dataclass(frozen=True)
class InlineCommand:
    start: int  # where the pattern is in the body as written
    end: int
    command: str  # what runs (before substitution)


def _hidden(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """`text` with each (start, end) span hidden, its line breaks kept (so `^` still finds the lines after it)."""
    chars = list(text)
    for start, end in spans:
        chars[start:end] = [c if c == "\n" else _BLANK for c in chars[start:end]]
    return "".join(chars)


def _code_spans(text: str) -> list[tuple[int, int]]:
    """The ordinary code spans of `text`: a run of backticks up to the next run of the same length, paired left to
    right as Markdown pairs them; a span opened by one backtick right after `!` is not one (it may be a command), nor
    is a fence line's run of three or more."""
    runs = list(_BACKTICKS.finditer(text))
    next_same: list[int | None] = [None] * len(runs)
    last: dict[str, int] = {}
    for j in range(len(runs) - 1, -1, -1):
        next_same[j], last[runs[j].group()] = last.get(runs[j].group()), j
    spans, i = [], 0
    while i < len(runs):
        opening, closing = runs[i], next_same[i]
        line_start = opening.start()
        while line_start and text[line_start - 1] == " ":
            line_start -= 1
        fence = len(opening.group()) >= 3 and text[line_start - 1:line_start] in ("", "\n")
        if fence or closing is None:
            i += 1
            continue
        if not (opening.group() == "`" and text[opening.start() - 1:opening.start()] == "!"):
            spans.append((opening.start(), runs[closing].end()))
        i = closing + 1
    return spans


def inline_commands(body: str) -> list[InlineCommand]:
    """The inline commands of `body` as written, in order: found before any substitution, so an argument can never
    add one."""
    found = [InlineCommand(m.start(), m.end(), m.group(1).replace("\r\n", "\n").strip()) for m in FENCED_SHELL.finditer(body)]
    searched = _hidden(body, [(c.start, c.end) for c in found])
    searched = _hidden(searched, _code_spans(searched))
    found += [InlineCommand(m.start(), m.end(), body[m.start(1):m.end(1)]) for m in INLINE_SHELL.finditer(searched)]
    return sorted(found, key=lambda c: c.start)


def deny_inline(skill: Skill, command: str) -> str:
    """With no permission gate, no inline command runs: a body with one is not activated."""
    raise InlineCommandError("denied: no permission policy")


def activation_body(skill: Skill, shown_folder: str, arguments: str | Sequence[str] | None, session_id: str,
                    expand_inline: Callable[[Skill, str], str] = deny_inline) -> str:
    """The body after substitutions, each inline command replaced by what `expand_inline(skill, command)` returns.
    When it raises InlineCommandError (denied, failed), the activation stops: SkillNotActivated, as in Claude Code.

    The commands are found in the body as written, so an argument can never add one, and neither a substituted
    value nor a command's output is scanned again. In prose a placeholder becomes its value as is, `${SKILL_DIR}` the
    shown folder; inside a command each value is one quoted shell word and `${SKILL_DIR}` the skill's real folder
    (the command runs on this machine, in that folder)."""
    substitution = _Substitution(arguments, session_id, declared_argument_names(skill))
    real_folder = os.path.realpath(skill.folder)
    body, pieces, end = skill.body.translate(_NONCHARACTERS), [], 0
    for found in inline_commands(body):
        pieces.append(substitution.text(body[end:found.start], shown_folder))
        try:
            pieces.append(expand_inline(skill, substitution.command(found.command, real_folder)))
        except InlineCommandError as error:
            raise SkillNotActivated(body[found.start:found.end], str(error)) from None
        end = found.end
    pieces.append(substitution.text(body[end:], shown_folder))
    return substitution.appended("".join(pieces))


def activation_text(skill: Skill, shown_folder: str, arguments: str | Sequence[str] | None, session_id: str,
                    expand_inline: Callable[[Skill, str], str] = deny_inline) -> str:
    """What `activate_skill` returns: the annotation line, the body after substitutions (inline shell commands
    decided by the permission policy, one at a time), the resource list. Raises SkillNotActivated when an inline
    command is denied or fails."""
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
