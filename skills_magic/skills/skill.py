"""The Skill value: one SKILL.md read, split and parsed, and the diagnostics found on the way.

Reading never raises for bad input: every problem becomes a `Diagnostic` with a stable code, so one broken file
cannot stop a catalog from loading the others. The field rules (what the specification allows) live in
`validate.py` and the YAML reading in `frontmatter.py`; this module turns bytes into a frontmatter mapping and a body.
"""

from __future__ import annotations

import codecs
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from skills_magic.skills.frontmatter import (MAX_ALIAS_NODES, Frontmatter, TooManyAliases, is_frontmatter_fence,
                                             load_frontmatter, split_frontmatter, top_level_keys)
# re-exported: its home before the split
from skills_magic.skills.frontmatter import EXTENSION_FIELDS, SPEC_FIELDS, construct  # noqa: F401

SKILL_FILENAMES = ("SKILL.md", "skill.md")  # the spec's name first; lowercase is accepted like skills-ref does
MAX_SKILL_FILE_BYTES = 16 * 1024 * 1024  # larger files are refused unread: no real skill is that big
BINARY_SNIFF_BYTES = 8192  # a NUL byte in the first 8 KiB means a binary file, as git decides it
ADVISED_BODY_LINES = 500  # the spec's authoring advice: keep SKILL.md under 500 lines

Severity = Literal["error", "warning", "info"]

# Every diagnostic code, its severity when loading, and what it means. "error": the skill cannot be loaded and is
# skipped; "warning": it breaks the specification but loads (lenient, like real clients); "info": worth knowing,
# not a violation. Codes are stable: tests, docs and users' filters refer to them.
CODES: dict[str, tuple[Severity, str]] = {
    "not-found": ("error", "the path does not exist"),
    "skill-md-missing": ("error", "the folder has no SKILL.md"),
    "not-a-file": ("error", "SKILL.md is not a regular file (a folder, a socket, ...)"),
    "unreadable": ("error", "SKILL.md could not be read (permissions, a dangling symlink, an I/O error)"),
    "too-large": ("error", f"SKILL.md is larger than {MAX_SKILL_FILE_BYTES} bytes"),
    "empty-file": ("error", "SKILL.md is empty"),
    "binary-file": ("error", "SKILL.md contains NUL bytes: it is not text"),
    "encoding-error": ("error", "SKILL.md is not valid UTF-8"),
    "bom": ("warning", "SKILL.md starts with a UTF-8 byte-order mark"),
    "no-frontmatter": ("error", "SKILL.md does not start with a `---` line"),
    "frontmatter-unclosed": ("error", "the frontmatter has no closing `---` line"),
    "yaml-error": ("error", "the frontmatter is not valid YAML"),
    "yaml-aliases": ("error", f"the frontmatter's aliases expand it by more than {MAX_ALIAS_NODES} nodes, or endlessly"),
    "frontmatter-not-mapping": ("error", "the frontmatter is a list or a scalar, not a mapping"),
    "duplicate-key": ("warning", "a key appears twice in one mapping (the last value is used)"),
    "name-missing": ("warning", "no `name` (the folder name is used)"),
    "name-not-string": ("warning", "`name` is not a string"),
    "name-empty": ("warning", "`name` is empty"),
    "name-too-long": ("warning", "`name` is longer than 64 characters"),
    "name-uppercase": ("warning", "`name` has uppercase letters"),
    "name-hyphen-edge": ("warning", "`name` starts or ends with a hyphen"),
    "name-double-hyphen": ("warning", "`name` contains `--`"),
    "name-invalid-chars": ("warning", "`name` has characters other than letters, digits and hyphens"),
    "name-mismatch": ("warning", "`name` differs from the folder name"),
    "description-missing": ("error", "no `description`: the model could never choose the skill"),
    "description-not-string": ("error", "`description` is not a string"),
    "description-empty": ("error", "`description` is empty"),
    "description-too-long": ("warning", "`description` is longer than 1024 characters"),
    "compatibility-not-string": ("warning", "`compatibility` is not a string"),
    "compatibility-length": ("warning", "`compatibility` is not 1-500 characters"),
    "license-not-string": ("warning", "`license` is not a string"),
    "metadata-not-mapping": ("warning", "`metadata` is not a mapping"),
    "metadata-not-string": ("warning", "`metadata` has a key or value that is not a string"),
    "allowed-tools-not-string": ("warning", "`allowed-tools` is not a space-delimited string"),
    "unknown-field": ("warning", "a frontmatter key the specification does not define"),
    "field-type": ("warning", "a client-extension field has the wrong type and is ignored"),
    "body-long": ("info", f"the body is over {ADVISED_BODY_LINES} lines (the spec advises splitting it)"),
    "collision": ("warning", "another skill with the same name takes precedence; this one is hidden"),
    "duplicate": ("info", "the same SKILL.md reached twice (a symlink); listed once"),
    "symlink-loop": ("info", "a symlink leads back to a folder being searched; not followed again"),
    "search-depth": ("info", "a folder deeper than the search depth was not searched"),
}


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in one file, with a stable code."""

    code: str
    message: str
    path: str
    line: int | None = None
    column: int | None = None

    @property
    def severity(self) -> Severity:
        return CODES[self.code][0]

    def location(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where

    def __str__(self) -> str:
        return f"{self.location()}: {self.severity} [{self.code}] {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "column": self.column,
        }


def is_blocking(diagnostics) -> bool:
    """True when a skill with these diagnostics cannot be loaded."""
    return any(d.severity == "error" for d in diagnostics)


def is_spec_valid(diagnostics) -> bool:
    """True when nothing breaks the specification (infos are advice, not violations)."""
    return all(d.severity == "info" for d in diagnostics)


@dataclass(frozen=True)
class SkillFile:
    """What reading one SKILL.md gave: the raw frontmatter mapping (None when unusable), the body, problems."""

    path: str
    frontmatter: dict[str, Any] | None
    body: str = ""
    body_line: int = 1  # 1-based line of the body's first line in the file
    diagnostics: tuple[Diagnostic, ...] = ()
    size: int = 0
    key_lines: dict[str, int] = field(default_factory=dict)  # top-level key -> 1-based line in SKILL.md
    metadata_text: dict[str, str] = field(default_factory=dict)  # metadata scalars as written (`1.10`, not 1.1)

    def line_of(self, key: str) -> int | None:
        return self.key_lines.get(key)


@dataclass(frozen=True)
class Skill:
    """A loaded skill: its name as listed and activated, the parsed frontmatter, the body verbatim."""

    name: str
    description: str
    path: str  # the SKILL.md file as found (not resolved: the folder name is what the spec compares)
    frontmatter: Frontmatter
    body: str
    diagnostics: tuple[Diagnostic, ...] = ()
    source: str = ""
    source_root: str = ""

    @property
    def folder(self) -> str:
        return os.path.dirname(self.path)

    @property
    def version(self) -> str:
        version = self.frontmatter.version or self.frontmatter.metadata.get("version")
        return str(version) if version else "-"

    @property
    def written_name(self) -> str:
        """The `name` exactly as the author wrote it (stripped), which skills-ref's XML prints."""
        return self.frontmatter.name.strip() if self.frontmatter.name else self.name

    @property
    def model_visible(self) -> bool:
        return not self.frontmatter.disable_model_invocation

    def with_source(self, source: str, root: str) -> Skill:
        return dataclasses.replace(self, source=source, source_root=root)

    def annotation(self, folder: str | None = None) -> str:
        """`[skill NAME | source | version | folder]`: which copy of a procedure this is."""
        return f"[skill {self.name} | {self.source or '-'} | {self.version} | {folder or self.folder}]"


def find_skill_md(folder: str | os.PathLike) -> str | None:
    """The SKILL.md (or skill.md) path in a folder, or None."""
    for name in SKILL_FILENAMES:
        candidate = os.path.join(folder, name)
        if os.path.lexists(candidate):
            return candidate
    return None


def _problem(path: str, code: str, message: str, line: int | None = None, column: int | None = None) -> SkillFile:
    return SkillFile(path=path, frontmatter=None, diagnostics=(Diagnostic(code, message, path, line, column),))


def _read_bytes(path: str) -> bytes:
    with open(path, "rb", buffering=0) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > MAX_SKILL_FILE_BYTES:
            raise _TooLarge(size)
        return handle.read()


class _TooLarge(Exception):
    """Raised inside `_read_bytes` for a file over MAX_SKILL_FILE_BYTES: it becomes the `too-large` diagnostic."""

    def __init__(self, size: int):
        self.size = size


def _yaml_problem(path: str, error: yaml.YAMLError, text: str, fence_lines: int = 1) -> Diagnostic:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    message = f"{context}, {problem}" if context else str(problem)
    if mark is not None:
        lines = text.splitlines()
        if mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1]:
            message += " (a tab: YAML allows only spaces for indentation)"
    if mark is None:
        return Diagnostic("yaml-error", message, path)
    return Diagnostic("yaml-error", message, path, mark.line + 1 + fence_lines, mark.column + 1)


@dataclass(frozen=True)
class ParsedFrontmatter:
    """A frontmatter's value (None when unusable), its diagnostics, and where its keys and metadata stand."""

    data: Any
    diagnostics: list[Diagnostic]
    key_lines: dict[str, int]
    metadata_text: dict[str, str]


def parse_frontmatter(text: str, path: str = "<string>") -> ParsedFrontmatter:
    """YAML frontmatter text to a Python value, with the duplicate keys found, the line of each top-level key and
    the metadata scalars as written. Line numbers are those of SKILL.md (the frontmatter starts on line 2).
    """
    try:
        data, node = load_frontmatter(text)
    except TooManyAliases:
        return ParsedFrontmatter(None, [Diagnostic(
            "yaml-aliases", f"the frontmatter's aliases expand it by more than {MAX_ALIAS_NODES:,} nodes (or endlessly), "
            "as an alias bomb does; write the values out instead", path)], {}, {})
    except yaml.YAMLError as error:
        return ParsedFrontmatter(None, [_yaml_problem(path, error, text)], {}, {})
    except RecursionError:
        return ParsedFrontmatter(None, [Diagnostic("yaml-error", "the frontmatter is nested too deeply", path)], {}, {})
    keys = top_level_keys(node)
    diagnostics = [
        Diagnostic("duplicate-key", f"key {key!r} appears more than once; the last value is used", path, line + 2, col + 1)
        for key, line, col in keys.duplicates
    ]
    return ParsedFrontmatter(data, diagnostics, {key: line + 2 for key, line in keys.lines.items()}, keys.metadata_text)


def read_skill_file(path: str | os.PathLike) -> SkillFile:
    """Read one SKILL.md into a `SkillFile`. Never raises for bad content: problems become diagnostics."""
    path = os.fspath(path)
    try:
        raw = _read_bytes(path)
    except IsADirectoryError:
        return _problem(path, "not-a-file", "SKILL.md is a folder, not a file")
    except FileNotFoundError:
        if os.path.islink(path):
            return _problem(path, "unreadable", "SKILL.md is a symlink to a file that does not exist")
        return _problem(path, "not-found", "no such file")
    except _TooLarge as big:
        return _problem(path, "too-large", f"{big.size} bytes is more than the {MAX_SKILL_FILE_BYTES} allowed")
    except OSError as error:
        return _problem(path, "unreadable", f"cannot read: {error.strerror or error}")
    found: list[Diagnostic] = []
    if raw.startswith(codecs.BOM_UTF8):
        found.append(Diagnostic("bom", "the file starts with a UTF-8 byte-order mark; save it without one", path, 1, 1))
        raw = raw[len(codecs.BOM_UTF8) :]
    if not raw or raw.isspace():
        return _problem(path, "empty-file", "the file is empty")
    if b"\x00" in raw[:BINARY_SNIFF_BYTES]:
        return _problem(path, "binary-file", "the file contains NUL bytes; it is not a text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        line_start = raw.rfind(b"\n", 0, error.start) + 1
        column = len(raw[line_start : error.start].decode("utf-8", "replace")) + 1  # in characters, as editors count
        return _problem(path, "encoding-error", f"not UTF-8: byte 0x{raw[error.start]:02x} cannot be decoded", line, column)
    first_line_end = text.find("\n")
    if not is_frontmatter_fence(text if first_line_end < 0 else text[:first_line_end]):
        found.append(Diagnostic("no-frontmatter", "the file must start with a `---` line opening YAML frontmatter", path, 1, 1))
        return SkillFile(path, None, text, 1, tuple(found), len(raw))
    split = split_frontmatter(text)
    if split is None:
        found.append(Diagnostic("frontmatter-unclosed", "no closing `---` line after the frontmatter", path, 1, 1))
        return SkillFile(path, None, "", 1, tuple(found), len(raw))
    frontmatter_text, body, body_line = split
    parsed = parse_frontmatter(frontmatter_text, path)
    data = parsed.data
    found.extend(parsed.diagnostics)
    if any(d.code in ("yaml-error", "yaml-aliases") for d in parsed.diagnostics):
        return SkillFile(path, None, body, body_line, tuple(found), len(raw))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a scalar ({type(data).__name__})"
        found.append(Diagnostic("frontmatter-not-mapping", f"the frontmatter is {kind}, not a mapping of fields", path, 2, 1))
        return SkillFile(path, None, body, body_line, tuple(found), len(raw))
    body_lines = body.count("\n")
    if body_lines > ADVISED_BODY_LINES:
        found.append(Diagnostic("body-long", f"the body has {body_lines} lines; the spec advises under {ADVISED_BODY_LINES}", path))
    return SkillFile(path, data, body, body_line, tuple(found), len(raw), parsed.key_lines, parsed.metadata_text)
