"""Rendering the catalog under a character budget: the text listing and the `<available_skills>` XML.

Over budget, in this order: descriptions are shortened (to the longest uniform length that fits, never under
MIN_DESCRIPTION_CHARS), then dropped from the lowest-precedence group first (from the end of each group), then
whole entries the same way. A final marker line says exactly how many skills were shown of how many and what was
dropped: a listing is never silently incomplete. The marker's own length is inside the budget.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence

from skills_magic.skills.skill import Skill

CHARS_PER_TOKEN = 4  # the usual estimate for English text
DEFAULT_BUDGET_CHARS = 8_000  # 1% of a 200k-token context window x 4 chars per token (DESIGN section 3)
MIN_DESCRIPTION_CHARS = 40  # shorter than this a description says nothing; drop it instead
ELLIPSIS = "…"


def budget_for_context(context_tokens: int, percent: float = 0.01) -> int:
    return int(context_tokens * percent * CHARS_PER_TOKEN)


def shorten(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + ELLIPSIS


@dataclass
class Entry:
    """One skill as it appears in a listing: the description shown (None when dropped)."""

    skill: Skill
    description: str | None

    @property
    def name(self) -> str:
        return self.skill.name

    @property
    def shortened(self) -> bool:
        return self.description is not None and self.description != self.skill.description


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

    @property
    def shown(self) -> int:
        return sum(len(entries) for _, entries in self.groups)

    @property
    def truncated(self) -> bool:
        return self.shown < self.total or self.shortened > 0 or self.dropped_descriptions > 0

    def entries(self) -> list[Entry]:
        return [e for _, entries in self.groups for e in entries]

    def marker(self) -> str | None:
        if not self.truncated:
            return None
        return _marker(self.shown, self.total, self.shortened, self.description_limit, self.dropped_descriptions, self.dropped_entries)


def _marker(shown: int, total: int, shortened: int, limit: int | None, dropped_descriptions: int, dropped_entries: dict[str, int]) -> str:
    dropped = sum(dropped_entries.values())
    where = ""
    if dropped:
        where = " (" + ", ".join(f"{label}: {n}" for label, n in dropped_entries.items()) + ")"
    short = f"shortened {_count(shortened, 'description')} to {limit} characters; " if shortened else ""
    return (
        f"[skills listing truncated: showed {shown} of {total} skills; {short}dropped "
        f"{_count(dropped_descriptions, 'description')} and {_count(dropped, 'entry', 'entries')}{where}; "
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


def plan_listing(skills: Sequence[Skill], budget: int | None, fmt: Format) -> Listing:
    """Fit skills (in precedence order) into `budget` characters of `fmt`; None or 0 means no budget."""
    grouped = _group(skills)
    listing = Listing([(label, [Entry(s, s.description) for s in group]) for label, group in grouped], len(skills), budget or None)
    if not budget:
        return listing
    entries = listing.entries()
    overhead = fmt.fixed + sum(fmt.group(label) for label, _ in grouped)

    def size(limit: int | None) -> int:
        return overhead + sum(fmt.entry(e.skill, shorten(e.skill.description, limit)) for e in entries)

    if size(None) <= budget:
        return listing
    # reserve room for the marker: its longest form, every count at its largest
    n = len(skills)
    reserve = len(_marker(n, n, n, 10**6, n, {label: n for label, _ in grouped})) + 1
    room = budget - reserve
    bare = [fmt.entry(e.skill, None) for e in entries]  # an entry without its description
    current = overhead + sum(bare)
    if current <= room and size(MIN_DESCRIPTION_CHARS) <= room:
        low, high = MIN_DESCRIPTION_CHARS, max(len(s.description) for s in skills)  # the largest uniform limit that fits
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if size(mid) <= room else (low, mid - 1)
        for e in entries:
            e.description = shorten(e.skill.description, low)
        listing.shortened = sum(e.shortened for e in entries)
        listing.description_limit = low
        return listing
    if current <= room:
        # shortest descriptions for all, then drop them from the lowest precedence group, from its end
        for e in entries:
            e.description = shorten(e.skill.description, MIN_DESCRIPTION_CHARS)
        costs = [fmt.entry(e.skill, e.description) - b for e, b in zip(entries, bare, strict=True)]
        current += sum(costs)
        for index in range(len(entries) - 1, -1, -1):
            if current <= room:
                break
            current -= costs[index]
            entries[index].description = None
            listing.dropped_descriptions += 1
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


def text_listing(skills: Sequence[Skill], budget: int | None = DEFAULT_BUDGET_CHARS) -> tuple[Listing, str]:
    listing = plan_listing(skills, budget, TEXT_FORMAT)
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
                name: NameOf = _listed_name) -> tuple[Listing, str]:
    """`<available_skills>` for these skills. The model's catalog has no `<location>` and the listed names; with
    `location` and `name=Skill.written_name` (as `skills-magic to-prompt` does) it is byte-identical to skills-ref's
    `to_prompt`."""
    listing = plan_listing(skills, budget, xml_format(location, name))
    return listing, render_xml(listing, location, name)
