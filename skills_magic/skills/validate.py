"""The field rules of the Agent Skills specification, and the two strictness levels that use them.

`validate_path` applies the specification exactly (the verdict agrees with skills-ref 0.1.1 wherever that library
is right; docs/validation.md lists where it is not). `load_skill` is lenient like real clients: a skill with a
fixable problem loads with a warning, one with no usable description or no parseable frontmatter is skipped.
Each rule is a small function returning diagnostics, so one run reports every problem at once.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from skills_magic.skills.find import find_skill_files
from skills_magic.skills.frontmatter import EXTENSION_FIELDS, SPEC_FIELDS, Frontmatter
from skills_magic.skills.skill import (
    Diagnostic,
    Skill,
    SkillFile,
    find_skill_md,
    is_blocking,
    is_spec_valid,
    read_skill_file,
)

MAX_NAME_LENGTH = 64  # the specification's limits
MAX_DESCRIPTION_LENGTH = 1024
MAX_COMPATIBILITY_LENGTH = 500

_NAME_SHAPE = re.compile(r"^[^\W_](?:[^\W_]|-(?!-))*(?<!-)$")  # letters/digits, single inner hyphens
_PLAIN_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # the common case, valid without further checks
_LENIENT_KEYS = SPEC_FIELDS | EXTENSION_FIELDS


def normalize_name(name: str) -> str:
    return unicodedata.normalize("NFKC", name.strip())


def is_valid_name(name: Any) -> bool:
    """A name the specification accepts (not checking the folder)."""
    if not isinstance(name, str):
        return False
    if _PLAIN_NAME.fullmatch(name):
        return len(name) <= MAX_NAME_LENGTH
    name = normalize_name(name)
    return 0 < len(name) <= MAX_NAME_LENGTH and name == name.lower() and bool(_NAME_SHAPE.match(name))


def _missing_or_not_string(sf: SkillFile, key: str, quoted: bool = False) -> list[Diagnostic]:
    """The problem of a required field that is absent or not a string (none when it is a string); `quoted`: the
    message quotes the value."""
    if key not in sf.frontmatter:
        return [Diagnostic(f"{key}-missing", f"required field `{key}` is missing", sf.path)]
    raw = sf.frontmatter[key]
    if not isinstance(raw, str):
        value = f" ({raw!r})" if quoted else ""
        return [Diagnostic(f"{key}-not-string", f"`{key}` must be a string, not {type(raw).__name__}{value}", sf.path,
                           sf.line_of(key))]
    return []


def _check_name(sf: SkillFile, folder: str) -> list[Diagnostic]:
    problems = _missing_or_not_string(sf, "name", quoted=True)
    if problems:
        return problems
    raw, path, line = sf.frontmatter["name"], sf.path, sf.line_of("name")
    if _PLAIN_NAME.fullmatch(raw) and len(raw) <= MAX_NAME_LENGTH:
        if raw == unicodedata.normalize("NFKC", os.path.basename(folder)):
            return []
        return [Diagnostic("name-mismatch", f"`name` {raw!r} differs from the folder name {os.path.basename(folder)!r}", path, line)]
    if not raw.strip():
        return [Diagnostic("name-empty", "`name` must not be empty", path, line)]
    name = normalize_name(raw)
    found = []
    if len(name) > MAX_NAME_LENGTH:
        found.append(Diagnostic("name-too-long", f"`name` has {len(name)} characters; at most {MAX_NAME_LENGTH} are allowed", path, line))
    if name != name.lower():
        found.append(Diagnostic("name-uppercase", f"`name` {name!r} must be lowercase", path, line))
    if name.startswith("-") or name.endswith("-"):
        found.append(Diagnostic("name-hyphen-edge", f"`name` {name!r} must not start or end with a hyphen", path, line))
    if "--" in name:
        found.append(Diagnostic("name-double-hyphen", f"`name` {name!r} must not contain `--`", path, line))
    bad = sorted({c for c in name if not (c.isalnum() or c == "-")})
    if bad:
        shown = "".join(bad).replace(" ", "␠")
        found.append(Diagnostic("name-invalid-chars", f"`name` {name!r} has characters other than letters, digits and hyphens: {shown!r}", path, line))
    folder_name = unicodedata.normalize("NFKC", os.path.basename(folder))
    if folder_name != name:
        found.append(Diagnostic("name-mismatch", f"`name` {name!r} differs from the folder name {os.path.basename(folder)!r}", path, line))
    return found


def _check_description(sf: SkillFile) -> list[Diagnostic]:
    problems = _missing_or_not_string(sf, "description")
    if problems:
        return problems
    raw, path, line = sf.frontmatter["description"], sf.path, sf.line_of("description")
    if not raw.strip():
        return [Diagnostic("description-empty", "`description` must not be empty", path, line)]
    if len(raw) > MAX_DESCRIPTION_LENGTH:
        return [Diagnostic("description-too-long", f"`description` has {len(raw)} characters; at most {MAX_DESCRIPTION_LENGTH} are allowed", path, line)]
    return []


def _check_compatibility(sf: SkillFile) -> list[Diagnostic]:
    data, path, line = sf.frontmatter, sf.path, sf.line_of("compatibility")
    if "compatibility" not in data:
        return []
    raw = data["compatibility"]
    if raw is not None and not isinstance(raw, str):
        return [Diagnostic("compatibility-not-string", f"`compatibility` must be a string, not {type(raw).__name__}", path, line)]
    length = len(raw or "")
    if not 1 <= length <= MAX_COMPATIBILITY_LENGTH:
        return [Diagnostic("compatibility-length", f"`compatibility` has {length} characters; it must have 1-{MAX_COMPATIBILITY_LENGTH}", path, line)]
    return []


def _check_string(sf: SkillFile, key: str, shape: str = "a string") -> list[Diagnostic]:
    """An optional field that must be a string when given (`license`, `allowed-tools`)."""
    raw = sf.frontmatter.get(key)
    if raw is not None and not isinstance(raw, str):
        return [Diagnostic(f"{key}-not-string", f"`{key}` must be {shape}, not {type(raw).__name__}", sf.path, sf.line_of(key))]
    return []


def _check_metadata(sf: SkillFile) -> list[Diagnostic]:
    if "metadata" not in sf.frontmatter or sf.frontmatter["metadata"] is None:
        return []
    raw, path, line = sf.frontmatter["metadata"], sf.path, sf.line_of("metadata")
    if not isinstance(raw, dict):
        return [Diagnostic("metadata-not-mapping", f"`metadata` must be a mapping of strings to strings, not {type(raw).__name__}", path, line)]
    bad = [k for k, v in raw.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        detail = ", ".join(f"{k!r}: {type(raw[k]).__name__}" for k in bad[:5])
        return [Diagnostic("metadata-not-string", f"`metadata` must map strings to strings; quote these values: {detail}", path, line)]
    return []


def _check_keys(sf: SkillFile, strict: bool) -> list[Diagnostic]:
    allowed = SPEC_FIELDS if strict else _LENIENT_KEYS
    found = []
    for key in sf.frontmatter:
        if key in allowed:
            continue
        why = " (a client extension, not in the specification)" if key in EXTENSION_FIELDS else ""
        found.append(Diagnostic("unknown-field", f"unknown frontmatter key {key!r}{why}", sf.path, sf.line_of(str(key))))
    return found


def check_fields(sf: SkillFile, folder: str, strict: bool) -> list[Diagnostic]:
    """Every field rule over a parsed frontmatter. `strict` also reports client-extension keys."""
    return [
        *_check_keys(sf, strict),
        *_check_name(sf, folder),
        *_check_description(sf),
        *_check_compatibility(sf),
        *_check_string(sf, "license"),
        *_check_metadata(sf),
        *_check_string(sf, "allowed-tools", "a space-delimited string"),
    ]


@dataclass(frozen=True)
class LoadResult:
    """A SKILL.md loaded leniently: the skill (None when skipped) and every diagnostic about it."""

    path: str
    skill: Skill | None
    diagnostics: tuple[Diagnostic, ...]


def _frontmatter_model(sf: SkillFile) -> tuple[Frontmatter, list[Diagnostic]]:
    """The pydantic model of the fields, dropping (with a diagnostic) extension fields of the wrong type."""
    data = dict(sf.frontmatter)
    # strings are what the spec promises; lenient loading reads `version: 1.10` as the author wrote it, not 1.1
    if isinstance(data.get("metadata"), dict):
        written = sf.metadata_text
        data["metadata"] = {
            str(k): v if isinstance(v, str) else written.get(str(k), str(v))
            for k, v in data["metadata"].items()
            if v is not None
        }
    elif "metadata" in data:
        data.pop("metadata")
    for key in ("name", "description", "license", "compatibility"):
        if key in data and not isinstance(data[key], str):
            data.pop(key)  # already reported by the field rules
    if isinstance(data.get("allowed-tools"), list):
        data["allowed-tools"] = [str(tool) for tool in data["allowed-tools"]]
    found = []
    for _ in range(len(data) + 1):
        try:
            return Frontmatter.model_validate(data), found
        except ValidationError as error:
            bad_keys = {e["loc"][0] for e in error.errors() if e["loc"]}
            for key in bad_keys:
                found.append(Diagnostic("field-type", f"{key!r} has the wrong type ({type(data.get(key)).__name__}); it is ignored", sf.path, sf.line_of(str(key))))
                data.pop(key, None)
            if not bad_keys:
                raise
    raise AssertionError("unreachable: every failing key is removed")


def load_skill_file(sf: SkillFile) -> LoadResult:
    """Lenient loading of a read SKILL.md: load with warnings where a client would, skip where it cannot."""
    diagnostics = list(sf.diagnostics)
    if sf.frontmatter is None:
        return LoadResult(sf.path, None, tuple(diagnostics))
    folder = os.path.dirname(sf.path)
    diagnostics.extend(check_fields(sf, folder, strict=False))
    if is_blocking(diagnostics):
        return LoadResult(sf.path, None, tuple(diagnostics))
    model, type_problems = _frontmatter_model(sf)
    diagnostics.extend(type_problems)
    folder_name = unicodedata.normalize("NFKC", os.path.basename(folder))
    raw_name = sf.frontmatter.get("name")
    # the listed name: the author's when the spec accepts it, else the folder's (what Claude Code uses); NFKC, as
    # the spec compares names, so `ｐｄｆ` and `pdf` are one skill
    name = normalize_name(raw_name) if is_valid_name(raw_name) else folder_name
    skill = Skill(
        name=name,
        description=model.description.strip(),
        path=sf.path,
        frontmatter=model,
        body=sf.body,
        diagnostics=tuple(diagnostics),
    )
    return LoadResult(sf.path, skill, tuple(diagnostics))


def load_skill(path: str | os.PathLike) -> LoadResult:
    return load_skill_file(read_skill_file(path))


@dataclass(frozen=True)
class Verdict:
    """The strict verdict on one skill folder."""

    folder: str
    skill_md: str | None
    diagnostics: tuple[Diagnostic, ...]

    @property
    def valid(self) -> bool:
        return is_spec_valid(self.diagnostics)

    @property
    def problems(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity != "info"]


def validate_folder(folder: str | os.PathLike) -> Verdict:
    """Apply the specification exactly to one skill folder (or its SKILL.md)."""
    folder = os.fspath(folder)
    if os.path.basename(folder).lower() == "skill.md" and os.path.isfile(folder):
        folder = os.path.dirname(folder) or "."
    # `validate .` must judge the folder's real name, not "." (skills-ref compares against "")
    folder = os.path.abspath(folder)
    if not os.path.exists(folder):
        return Verdict(folder, None, (Diagnostic("not-found", "no such file or folder", folder),))
    if not os.path.isdir(folder):
        return Verdict(folder, None, (Diagnostic("skill-md-missing", "not a skill folder (no SKILL.md)", folder),))
    skill_md = find_skill_md(folder)
    if skill_md is None:
        return Verdict(folder, None, (Diagnostic("skill-md-missing", "the folder has no SKILL.md", folder),))
    sf = read_skill_file(skill_md)
    diagnostics = list(sf.diagnostics)
    if sf.frontmatter is not None:
        diagnostics.extend(check_fields(sf, folder, strict=True))
    return Verdict(folder, skill_md, tuple(diagnostics))


def validate_path(path: str | os.PathLike) -> list[Verdict]:
    """Validate a skill folder, a SKILL.md, or every skill found under a collection folder."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return [validate_folder(path)]
    if os.path.isfile(path) or find_skill_md(path) is not None:
        return [validate_folder(path)]
    found = [validate_folder(os.path.dirname(p)) for p in find_skill_files(path, include_hidden=True)]
    return found or [validate_folder(path)]


__all__ = [
    "LoadResult",
    "Verdict",
    "check_fields",
    "is_blocking",
    "is_valid_name",
    "load_skill",
    "load_skill_file",
    "validate_folder",
    "validate_path",
]


def validate_target(scan, target: str | None, cwd: str, show_path) -> list[Verdict]:
    """Strict verdicts for `%skills validate`: a catalog name, a path (relative to `cwd`), or (no target) every
    skill in the scan, skipped ones included; an unknown target raises the scan's not-found error."""
    if target is None:
        return [validate_folder(f) for f in [s.folder for s in scan.skills] + [os.path.dirname(r.path) for r in scan.skipped]]
    folder = scan.folder_of(target)  # a listed skill's, or a skipped one's (its verdict says why)
    if folder is not None:
        return [validate_folder(folder)]
    path = os.path.join(cwd, os.path.expanduser(target))
    if not os.path.exists(path):
        raise scan.not_found(target, show_path)
    return validate_path(path)
