"""The description linter: deterministic checks that a skill's description can do its one job, getting it chosen.

A model sees only a skill's name and description until it decides to load the body, and measurements of real
sessions found that activation behaves like keyword matching: a description written in the third person, saying
what the skill does and when to use it, with its key terms first, is the one that gets picked. Validation
(`validate.py`) says whether a skill is allowed; this module says whether its description is likely to work. Each
rule is a small function returning findings; no model is called, so the same text always gets the same findings.
docs/lint.md explains every rule and its source.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Literal

from skills_magic.skills.find import find_skill_files
from skills_magic.skills.skill import Skill, find_skill_md
from skills_magic.skills.validate import MAX_DESCRIPTION_LENGTH, load_skill

MIN_DESCRIPTION_LENGTH = 40  # under this there is too little for a model to choose on ("Helps with documents")
LISTING_CUT = 250  # Claude Code caps a listing entry's description near here (2.1.86); the rest may never be seen
RESERVED_WORDS = ("anthropic", "claude")  # the authoring guide: a name "cannot contain reserved words"
PRONOUNS_SHOWN = 3  # a third-person finding quotes at most this many of the offending words

Severity = Literal["error", "warning"]

# Every rule id, in the order findings are reported, with a one-line explanation. Ids are stable: tests, docs and
# users' filters refer to them.
RULES: dict[str, str] = {
    "empty": "the description is missing or blank: the model could never choose the skill",
    "too-long": f"the description is over {MAX_DESCRIPTION_LENGTH} characters, the specification's limit",
    "too-short": f"the description is under {MIN_DESCRIPTION_LENGTH} characters: too little for a model to choose on",
    "xml-tags": "the description contains an XML/HTML tag, which the format forbids",
    "reserved-word": "the name contains a reserved word (anthropic, claude), which the format forbids",
    "third-person": "the description speaks in the first or second person (I, we, you...): write in the third person",
    "what-and-when": "the description does not say when to use the skill (no 'Use when ...' clause)",
    "boilerplate-opener": "the description opens with boilerplate ('This skill ...') instead of its key terms",
    "listing-length": f"over {LISTING_CUT} characters and nothing before the cut says when to use the skill",
    "unloadable": "the SKILL.md cannot be loaded, so its description cannot be linted",
}


@dataclass(frozen=True)
class Finding:
    """One problem with one description: a stable rule id, a severity, and one sentence saying how to fix it."""

    rule: str
    severity: Severity
    message: str

    def __str__(self) -> str:
        return f"{self.severity} [{self.rule}] {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "message": self.message}


def _phrases(*patterns: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive alternatives; a space in a pattern matches any run of whitespace."""
    alternatives = "|".join(p.replace(" ", r"\s+") for p in patterns)
    return re.compile(rf"\b(?:{alternatives})\b", re.IGNORECASE)


# The when-clauses of seed 004's linter ("WHEN TO USE", "USE WHEN", ..., "AFTER "), as whole words, then the
# variants real descriptions use for the same thing ("Use this skill when", "This skill should be used when", ...).
WHEN_CLAUSES = _phrases(
    "when to use", "use when", "use this when", "use for", "when the user", "when an?", "whenever", "before", "after",
    r"use (?:it|this|this skill|the skill|them) (?:when|whenever|for|if)", "use if",
    r"(?:should|can|may) be used (?:when|whenever|for|if)", r"appl(?:y|ies) when", r"trigger(?:s|ed)? (?:when|on|by)",
    r"when users?", r"when \w+ing",
)

# First and second person. The capital I only (a lowercase "i" is "i.e." or an index), never the capitals "US"
# (the country); never a part of a longer token: `my-app`, `I/O`, `us.anthropic`, `mypy`, "some", "your" vs "you".
_PERSON = re.compile(
    r"(?<![\w'’/.-])(?:"
    r"i['’](?:m|ll|ve|d)|i|me|my|mine|myself|we|we['’](?:re|ll|ve|d)|our|ours|ourselves|us"
    r"|you|you['’](?:re|ll|ve|d)|your|yours|yourself|yourselves"
    r")(?![\w'’/-]|\.\w)",
    re.IGNORECASE,
)
_ROMAN_ONE = re.compile(r"\b(?:phase|type|part|class|stage|grade|level|tier|chapter|section|schedule|title|war)\s+$", re.IGNORECASE)

# Quoted text is someone else's voice, usually the user's words a description should match ("make me a GIF"):
# double quotes, curly quotes, backticks, and single quotes that open after a non-letter (not an apostrophe).
_QUOTED = re.compile(r'"[^"]*"|“[^”]*”|‘[^’]*’|`[^`]*`|(?<!\w)\'[^\'\n]*\'(?!\w)')

# Openers that talk about the skill instead of naming what it does; the key terms should come first.
_BOILERPLATE = re.compile(
    r"^[\s\"'“*_#>-]*(?:this skill|the skill|an? (?:agent )?skill|skill (?:that|to|for|which)|this is (?:an?|the)"
    r"|helps|helper (?:for|to|that)|an? helper|use this skill|this tool|an? tool (?:that|to|for))\b".replace(" ", r"\s+"),
    re.IGNORECASE,
)

# An opening or closing tag, `<example>`, `</b>`, `<br/>`, `<a href="x">`; never `a < b`, `<=`, `<-` or `<3`.
_TAG = re.compile(r"</?[A-Za-z][\w.:-]*(?:\s+[^<>]*)?/?>")


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _check_length(text: str) -> list[Finding]:
    """Counted on the stripped text as written, as the specification and `validate.py` count it."""
    if len(text) > MAX_DESCRIPTION_LENGTH:
        return [Finding("too-long", "error", f"the description has {len(text)} characters, over the specification's limit of {MAX_DESCRIPTION_LENGTH}; cut what restates the body, which the model reads once the skill is chosen")]
    if len(text) < MIN_DESCRIPTION_LENGTH:
        return [Finding("too-short", "warning", f"the description has only {len(text)} characters; say what the skill does with its key terms and when to use it (at least {MIN_DESCRIPTION_LENGTH} characters)")]
    return []


def _check_xml_tags(text: str) -> list[Finding]:
    tag = _TAG.search(text)
    if tag is None:
        return []
    return [Finding("xml-tags", "error", f"the description contains the tag {tag.group(0)!r}, and descriptions cannot contain XML tags; write the word without angle brackets")]


def _check_reserved_name(name: str | None) -> list[Finding]:
    if not name:
        return []
    parts = [p for p in re.split(r"[^a-z0-9]+", name.lower()) if p]
    reserved = [p for p in parts if p in RESERVED_WORDS]
    if not reserved:
        return []
    return [Finding("reserved-word", "error", f"the name {name!r} contains the reserved word {reserved[0]!r}, which skill names cannot contain; rename the skill (and its folder) to say what it does without that word")]


def _unquoted(text: str) -> str:
    return _QUOTED.sub(lambda m: " " * len(m.group(0)), text)


def _check_third_person(text: str) -> list[Finding]:
    plain = _unquoted(text)
    found: list[str] = []
    for match in _PERSON.finditer(plain):
        word = match.group(0)
        if word[0] == "i" or word == "US":
            continue  # a lowercase "i" is not the pronoun; the capitals "US" are the country
        if word == "I" and _ROMAN_ONE.search(plain, 0, match.start()):
            continue  # "Phase I", "Type I": a numeral
        if word.lower() not in (w.lower() for w in found):
            found.append(word)
    if not found:
        return []
    shown = ", ".join(f'"{w}"' for w in found[:PRONOUNS_SHOWN])
    return [Finding("third-person", "warning", f'the description speaks in the first or second person ({shown}); write in the third person, e.g. "Processes Excel files" rather than "I can help you process Excel files" (quoted user phrases are fine)')]


def _check_what_and_when(text: str) -> list[Finding]:
    if WHEN_CLAUSES.search(text):
        return []
    return [Finding("what-and-when", "warning", "the description says what the skill does but not when to use it; add a clause such as \"Use when the user asks to ...\" naming the situations and the words a user would type")]


def _check_boilerplate_opener(text: str) -> list[Finding]:
    opener = _BOILERPLATE.match(text)
    if opener is None:
        return []
    words = _collapse(opener.group(0).strip(" \"'“*_#>-"))
    return [Finding("boilerplate-opener", "warning", f"the description opens with {words!r}, which tells the model nothing; start with what the skill does and its key terms (\"Extracts tables from PDF files ...\")")]


def _check_listing_length(text: str) -> list[Finding]:
    if len(text) <= LISTING_CUT:
        return []
    when = WHEN_CLAUSES.search(text)
    if when is not None and when.end() <= LISTING_CUT:
        return []
    where = f"its when-clause starts at character {when.start() + 1}" if when else "it has no when-clause"
    return [Finding("listing-length", "warning", f"the description has {len(text)} characters and {where}, but skill listings may cut an entry at about {LISTING_CUT}; move the key terms and the \"Use when ...\" clause into the first {LISTING_CUT} characters")]


def lint_description(description: str, name: str | None = None) -> list[Finding]:
    """Every finding for one description (and the skill's name, for the reserved-word rule), in `RULES` order."""
    written = description.strip() if isinstance(description, str) else ""
    if not written:
        return [Finding("empty", "error", "the description is missing or blank; write one sentence on what the skill does and one on when to use it")]
    text = _collapse(written)  # the phrase rules see one line, as a listing shows it
    return [
        *_check_length(written),
        *_check_xml_tags(text),
        *_check_reserved_name(name),
        *_check_third_person(text),
        *_check_what_and_when(text),
        *_check_boilerplate_opener(text),
        *_check_listing_length(text),
    ]


def lint_skill(skill: Skill) -> list[Finding]:
    """The findings for a loaded skill: its listed name and its description."""
    return lint_description(skill.description, skill.name)


_EMPTY_CODES = ("description-missing", "description-empty")  # the loader's refusals that are the `empty` rule


def _lint_file(path: str) -> list[Finding]:
    result = load_skill(path)
    if result.skill is not None:
        return lint_skill(result.skill)
    first = next((d for d in result.diagnostics if d.severity == "error"), None)
    if first is None:  # pragma: no cover - the loader skips a skill only for an error
        return [Finding("unloadable", "error", "the SKILL.md could not be loaded; run `skills-magic validate` on it")]
    if first.code in _EMPTY_CODES:
        return [Finding("empty", "error", f"{first.message}; write one sentence on what the skill does and one on when to use it")]
    where = f" (line {first.line})" if first.line is not None else ""
    return [Finding("unloadable", "error", f"the SKILL.md cannot be loaded: [{first.code}] {first.message}{where}; fix that first (`skills-magic validate` lists every problem)")]


def lint_path(path: str | os.PathLike) -> list[tuple[str, list[Finding]]]:
    """(SKILL.md path, findings) for a skill folder, a SKILL.md, or every skill under a collection folder.

    Paths are as found (not resolved), in the catalog's stable search order. A path with no skill at all is one
    `unloadable` entry, so a mistyped folder is never a silent success.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        return [(path, _lint_file(path))]
    skill_md = find_skill_md(path)
    if skill_md is not None:
        return [(skill_md, _lint_file(skill_md))]
    found = find_skill_files(path, include_hidden=True)
    if not found:
        return [(path, [Finding("unloadable", "error", "no SKILL.md in this folder or below it; point at a skill folder, a SKILL.md or a collection of skills")])]
    return [(p, _lint_file(p)) for p in found]


def has_findings(results: list[tuple[str, list[Finding]]]) -> bool:
    return any(findings for _, findings in results)


def exit_code(results: list[tuple[str, list[Finding]]]) -> int:
    """The proposed exit status of `skills-magic lint`: 0 when nothing was found, 1 for any error or warning."""
    return 1 if has_findings(results) else 0


def count_by_rule(results: list[tuple[str, list[Finding]]]) -> dict[str, int]:
    """How many skills have at least one finding of each rule (every rule present, in `RULES` order)."""
    counts = dict.fromkeys(RULES, 0)
    for _, findings in results:
        for rule in {f.rule for f in findings}:
            counts[rule] += 1
    return counts


__all__ = [
    "LISTING_CUT",
    "MIN_DESCRIPTION_LENGTH",
    "RESERVED_WORDS",
    "RULES",
    "WHEN_CLAUSES",
    "Finding",
    "count_by_rule",
    "exit_code",
    "lint_description",
    "lint_path",
    "lint_skill",
]
