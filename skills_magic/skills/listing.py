"""Rendering the catalog under a character budget: the text listing and the `<available_skills>` XML.

Over budget, in this order: descriptions are shortened (to the longest uniform length that fits, never under
MIN_DESCRIPTION_CHARS), then dropped from the lowest-precedence group first (from the end of each group), then
whole entries the same way. Given `drop_first` (names: `%skills list --by-usage` gives the least used first),
descriptions are dropped in that order instead, and the marker says so. A final marker line says exactly how many
skills were shown of how many and what was dropped: a listing is never silently incomplete. The marker's own
length is inside the budget.

An entry's text is its description with its `when_to_use` after it (`listed_description`), cut at
ENTRY_CAP_CHARS under any budget, as Claude Code does (with no budget, `--budget 0`, everything is shown whole).
`skills-magic to-prompt` keeps `xml_listing`'s default,
`raw_description`: skills-ref knows neither the field nor the cap, and its output stays byte-identical.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence
from typing import Any

from skills_magic.skills.skill import Skill

CHARS_PER_TOKEN = 4  # the usual estimate for English text
DEFAULT_BUDGET_CHARS = 8_000  # 1% of a 200k-token context window x 4 chars per token (DESIGN section 3)
MIN_DESCRIPTION_CHARS = 40  # shorter than this a description says nothing; drop it instead
ELLIPSIS = "…"
ENTRY_CAP_CHARS = 1_536  # Claude Code's cap on one listing entry's description (with its when_to_use)
WHEN_TO_USE_SEPARATOR = " - "  # between the description and `when_to_use`, as Claude Code joins them
BY_USAGE_NOTE = " (least used first)"  # the marker's word that `drop_first` chose which descriptions went


def budget_for_context(context_tokens: int, percent: float = 0.01) -> int:
    return int(context_tokens * percent * CHARS_PER_TOKEN)


def shorten(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + ELLIPSIS


def capped(text: str) -> str:
    """An entry cut at ENTRY_CAP_CHARS as Claude Code cuts it: the first ENTRY_CAP_CHARS - 1 characters as they are
    (a space before the cut kept), then the ellipsis."""
    return text if len(text) <= ENTRY_CAP_CHARS else text[:ENTRY_CAP_CHARS - 1] + ELLIPSIS


def raw_description(skill: Skill) -> str:
    """The description alone, as skills-ref lists it."""
    return skill.description


def listed_description(skill: Skill) -> str:
    """What a listing says of a skill: its description, then its `when_to_use` (uncapped)."""
    when = " ".join((skill.frontmatter.when_to_use or "").split())
    return f"{skill.description}{WHEN_TO_USE_SEPARATOR}{when}" if when else skill.description


Describe = Callable[[Skill], str]


@dataclass
class Entry:
    """One skill as it appears in a listing: its full text (`listed`, after the per-entry cap) and the description
    shown (None when dropped)."""

    skill: Skill
    description: str | None
    listed: str = ""

    @property
    def name(self) -> str:
        return self.skill.name

    @property
    def shortened(self) -> bool:
        return self.description is not None and self.description != self.listed


@dataclass
class Listing:
    """The plan of a listing: groups in precedence order, and what the budget took away."""

    groups: list[tuple[str, list[Entry]]]
    total: int
    budget: int | None
    shortened: int = 0
    description_limit: int | None = None
    dropped_descriptions: int = 0
    dropped_entries: dict[str, int] = field(default_factory=dict)  # source label -> entries dropped
    capped: int = 0  # entries cut at ENTRY_CAP_CHARS before any budget
    by_usage: bool = False  # descriptions were dropped in a given order (`drop_first`), not from the end

    @property
    def shown(self) -> int:
        return sum(len(entries) for _, entries in self.groups)

    @property
    def truncated(self) -> bool:
        return self.shown < self.total or self.shortened > 0 or self.dropped_descriptions > 0 or self.capped > 0

    def entries(self) -> list[Entry]:
        return [e for _, entries in self.groups for e in entries]

    def marker(self) -> str | None:
        if not self.truncated:
            return None
        return _marker(self.shown, self.total, self.shortened, self.description_limit, self.dropped_descriptions,
                       self.dropped_entries, self.capped, self.by_usage)


def _marker(shown: int, total: int, shortened: int, limit: int | None, dropped_descriptions: int,
            dropped_entries: dict[str, int], capped: int = 0, by_usage: bool = False) -> str:
    dropped = sum(dropped_entries.values())
    where = ""
    if dropped:
        where = " (" + ", ".join(f"{label}: {n}" for label, n in dropped_entries.items()) + ")"
    cap = f"capped {_count(capped, 'entry', 'entries')} at {ENTRY_CAP_CHARS:,} characters; " if capped else ""
    short = f"shortened {_count(shortened, 'description')} to {limit} characters; " if shortened else ""
    return (
        f"[skills listing truncated: showed {shown} of {total} skills; {cap}{short}dropped "
        f"{_count(dropped_descriptions, 'description')}{BY_USAGE_NOTE if by_usage else ''} and "
        f"{_count(dropped, 'entry', 'entries')}{where}; "
        f"the full catalog: %skills list --budget 0]"
    )


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _group(skills: Sequence[Skill]) -> list[tuple[str, list[Skill]]]:
    groups: dict[str, list[Skill]] = {}
    for skill in skills:
        groups.setdefault(skill.source, []).append(skill)
    return list(groups.items())


@dataclass(frozen=True)
class Format:
    """How a rendering measures: fixed overhead, a group's header, one entry (name, description or None)."""

    fixed: int
    group: Callable[[str], int]
    entry: Callable[[Skill, str | None], int]


def _capped_entry(skill: Skill, describe: Describe, cap: bool) -> Entry:
    text = describe(skill)
    listed = capped(text) if cap else text
    return Entry(skill, listed, listed)


def _drop_order(entries: list[Entry], drop_first: Sequence[str]) -> list[int]:
    """The entries' indexes in the order their descriptions go: `drop_first`'s names first, the rest from the end."""
    rank = {name: n for n, name in enumerate(drop_first)}
    from_end = range(len(entries) - 1, -1, -1)
    return sorted(from_end, key=lambda i: rank.get(entries[i].name, len(rank))) if rank else list(from_end)


def plan_listing(skills: Sequence[Skill], budget: int | None, fmt: Format, describe: Describe = listed_description,
                 drop_first: Sequence[str] = ()) -> Listing:
    """Fit skills (in precedence order) into `budget` characters of `fmt`; None or 0 means no budget. Each entry says
    `describe(skill)`, cut at ENTRY_CAP_CHARS under a budget (no budget: everything, whole) unless `describe` is
    `raw_description` (skills-ref's listing). `drop_first`: the names whose descriptions go first, in that order."""
    grouped = _group(skills)
    cap = bool(budget) and describe is not raw_description
    listing = Listing([(label, [_capped_entry(s, describe, cap) for s in group]) for label, group in grouped], len(skills),
                      budget or None)
    listing.capped = sum(e.listed != describe(e.skill) for e in listing.entries())
    if not budget:
        return listing
    entries = listing.entries()
    overhead = fmt.fixed + sum(fmt.group(label) for label, _ in grouped)

    def size(limit: int | None) -> int:
        return overhead + sum(fmt.entry(e.skill, shorten(e.listed, limit)) for e in entries)

    if size(None) <= budget:
        return listing
    # reserve room for the marker: its longest form, every count at its largest (the capped count is already known)
    n = len(skills)
    reserve = len(_marker(n, n, n, 10**6, n, {label: n for label, _ in grouped}, listing.capped, bool(drop_first))) + 1
    room = budget - reserve
    bare = [fmt.entry(e.skill, None) for e in entries]  # an entry without its description
    current = overhead + sum(bare)
    if current <= room and size(MIN_DESCRIPTION_CHARS) <= room:
        low, high = MIN_DESCRIPTION_CHARS, max(len(e.listed) for e in entries)  # the largest uniform limit that fits
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if size(mid) <= room else (low, mid - 1)
        for e in entries:
            e.description = shorten(e.listed, low)
        listing.shortened = sum(e.shortened for e in entries)
        listing.description_limit = low
        return listing
    if current <= room:
        # shortest descriptions for all, then drop them from the lowest precedence group, from its end
        for e in entries:
            e.description = shorten(e.listed, MIN_DESCRIPTION_CHARS)
        costs = [fmt.entry(e.skill, e.description) - b for e, b in zip(entries, bare, strict=True)]
        current += sum(costs)
        for index in _drop_order(entries, drop_first):
            if current <= room:
                break
            current -= costs[index]
            entries[index].description = None
            listing.dropped_descriptions += 1
        listing.by_usage = bool(drop_first) and listing.dropped_descriptions > 0
    else:
        # even names alone do not fit: every description goes before any entry does
        for e in entries:
            e.description = None
        listing.dropped_descriptions = len(entries)
    # then whole entries, the same way
    for label, group in reversed(listing.groups):
        while group and current > room:
            e = group.pop()
            current -= fmt.entry(e.skill, None)
            if not group:
                current -= fmt.group(label)
            listing.dropped_entries[label] = listing.dropped_entries.get(label, 0) + 1
    listing.groups = [(label, group) for label, group in listing.groups if group]
    listing.shortened = sum(e.shortened for e in listing.entries())
    listing.description_limit = MIN_DESCRIPTION_CHARS if listing.shortened else None
    return listing


# --- the text listing -------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split())


TEXT_FORMAT = Format(
    fixed=0,
    group=lambda label: len(f"## {label}\n"),
    entry=lambda s, d: len(f"- {s.name}\n") if d is None else len(f"- {s.name}: {_one_line(d)}\n"),
)


def render_text(listing: Listing) -> str:
    lines = []
    for label, entries in listing.groups:
        lines.append(f"## {label}")
        for e in entries:
            lines.append(f"- {e.name}" if e.description is None else f"- {e.name}: {_one_line(e.description)}")
    marker = listing.marker()
    if marker:
        lines.append(marker)
    return "\n".join(lines)


def text_listing(skills: Sequence[Skill], budget: int | None = DEFAULT_BUDGET_CHARS,
                 drop_first: Sequence[str] = ()) -> tuple[Listing, str]:
    listing = plan_listing(skills, budget, TEXT_FORMAT, listed_description, drop_first)
    return listing, render_text(listing)


# --- the <available_skills> XML -----------------------------------------------------------------------------------


def _xml_entry_lines(name: str, description: str | None, location: str | None) -> list[str]:
    # one element per line, exactly as skills-ref's to_prompt writes them
    lines = ["<skill>", "<name>", html.escape(name), "</name>"]
    if description is not None:
        lines += ["<description>", html.escape(description), "</description>"]
    if location is not None:
        lines += ["<location>", location, "</location>"]
    lines.append("</skill>")
    return lines


NameOf = Callable[[Skill], str]
LocationOf = Callable[[Skill], "str | None"]


def _no_location(skill: Skill) -> None:
    return None


def _listed_name(skill: Skill) -> str:
    return skill.name


def xml_format(location: LocationOf, name: NameOf) -> Format:
    def entry(skill: Skill, description: str | None) -> int:
        lines = _xml_entry_lines(name(skill), description, location(skill))
        return sum(len(line) + 1 for line in lines)

    return Format(fixed=len("<available_skills>\n</available_skills>"), group=lambda label: 0, entry=entry)


def render_xml(listing: Listing, location: LocationOf, name: NameOf = _listed_name) -> str:
    lines = ["<available_skills>"]
    for e in listing.entries():
        lines += _xml_entry_lines(name(e.skill), e.description, location(e.skill))
    lines.append("</available_skills>")
    marker = listing.marker()
    if marker:
        lines.append(marker)
    return "\n".join(lines)


def xml_listing(skills: Sequence[Skill], budget: int | None = None, location: LocationOf = _no_location,
                name: NameOf = _listed_name, describe: Describe = raw_description) -> tuple[Listing, str]:
    """`<available_skills>` for these skills. The model's catalog has no `<location>`, the listed names and
    `describe=listed_description` (with `when_to_use`, capped); with `location`, `name=Skill.written_name` and the
    raw descriptions (as `skills-magic to-prompt` asks) it is byte-identical to skills-ref's `to_prompt`."""
    listing = plan_listing(skills, budget, xml_format(location, name), describe)
    return listing, render_xml(listing, location, name)


class ListingCache:
    """The text listing of a scan per (budget, source, drop order), made again only when the scan changed (a new scan
    object)."""

    def __init__(self):
        self._made: dict[tuple[int | None, str | None, tuple[str, ...]], tuple[Any, Listing, str]] = {}

    def get(self, scan, budget: int | None, source: str | None = None,
            drop_first: Sequence[str] = ()) -> tuple[Any, Listing, str]:
        if budget is not None and budget < 0:
            from skills_magic.errors import InvalidArgument

            raise InvalidArgument(f"a budget is a number of characters, not {budget}")
        key = (budget, source, tuple(drop_first))
        cached = self._made.get(key)
        if cached is not None and cached[0] is scan:  # nothing changed on disk: the same listing
            return cached
        skills = [s for s in scan.skills if source is None or s.source == source]
        listing, text = text_listing(skills, budget, drop_first)
        self._made[key] = (scan, listing, text)
        return scan, listing, text
