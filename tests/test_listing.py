"""The budgeted listing: shorten, then drop descriptions, then entries (lowest precedence first), never silently;
and the `<available_skills>` XML, byte-identical to skills-ref's `to_prompt` for valid skills."""

from __future__ import annotations

import os
import random
import re
from pathlib import Path

import pytest
from skills_ref import to_prompt

from skills_magic.skills.catalog import Catalog, Source
from skills_magic.skills.listing import (
    DEFAULT_BUDGET_CHARS,
    ELLIPSIS,
    MIN_DESCRIPTION_CHARS,
    budget_for_context,
    text_listing,
    xml_listing,
)
from skills_magic.skills.skill import Frontmatter, Skill
from skills_magic.skills.validate import validate_folder
from skillfiles import make_skill

MARKER = re.compile(
    r"^\[skills listing truncated: showed (\d+) of (\d+) skills; (?:shortened (\d+) descriptions? to (\d+) characters; )?"
    r"dropped (\d+) descriptions? and (\d+) entr(?:y|ies)(?: \(([^)]*)\))?; the full catalog: %skills list --budget 0\]$"
)


def skill(name: str, description: str, source: str) -> Skill:
    return Skill(name, description, f"/x/{name}/SKILL.md", Frontmatter(name=name, description=description), "", source=source)


def catalog_of(groups: dict[str, int], description_length: int = 120, seed: int = 1) -> list[Skill]:
    rng = random.Random(seed)
    out = []
    for label, count in groups.items():
        for i in range(count):
            length = rng.randint(description_length // 2, description_length)
            out.append(skill(f"{label}-skill-{i}", ("word " * length)[:length].strip() + ".", label))
    return out


def shown_entries(text: str) -> list[tuple[str, str | None]]:
    entries = []
    for line in text.splitlines():
        if line.startswith("- "):
            name, _, description = line[2:].partition(": ")
            entries.append((name, description or None))
    return entries


def test_no_budget_shows_everything_without_a_marker():
    skills = catalog_of({"session": 3, "bundled": 4})
    listing, text = text_listing(skills, None)
    assert listing.shown == 7 and listing.marker() is None
    assert text.splitlines()[0] == "## session" and "## bundled" in text
    assert [n for n, _ in shown_entries(text)] == [s.name for s in skills]


def test_a_budget_that_fits_changes_nothing():
    skills = catalog_of({"session": 3, "bundled": 4})
    assert text_listing(skills, 100_000)[1] == text_listing(skills, None)[1]


def test_over_budget_descriptions_are_shortened_first_to_one_uniform_length():
    skills = catalog_of({"session": 5, "bundled": 5}, description_length=200)
    full = len(text_listing(skills, None)[1])
    budget = full - 300
    listing, text = text_listing(skills, budget)
    assert len(text) <= budget
    assert listing.shown == 10 and listing.dropped_descriptions == 0
    limit = listing.description_limit
    assert MIN_DESCRIPTION_CHARS <= limit < 200
    for e in listing.entries():
        assert len(e.description) <= limit
        assert e.description == e.skill.description or e.description.endswith(ELLIPSIS)
    shown, total, shortened, marker_limit, dropped_d, dropped_e, _ = MARKER.match(text.splitlines()[-1]).groups()
    assert (int(shown), int(total), int(shortened), int(marker_limit), int(dropped_d), int(dropped_e)) == (
        10, 10, listing.shortened, limit, 0, 0)


def test_then_descriptions_are_dropped_from_the_lowest_precedence_group_first():
    skills = catalog_of({"session": 6, "project": 6, "bundled": 6}, description_length=100)
    names_only = sum(len(f"- {s.name}\n") for s in skills) + 3 * len("## session\n")
    listing, text = text_listing(skills, names_only + 600)
    assert listing.shown == 18 and listing.dropped_descriptions > 0
    entries = shown_entries(text)
    dropped = [n for n, d in entries if d is None]
    # all dropped descriptions are at the end of the precedence order: bundled first, from its end
    assert [n for n, _ in entries][-len(dropped):] == dropped
    assert any(n.startswith("bundled") for n in dropped)
    assert all(d is not None for n, d in entries if n.startswith("session"))
    groups = MARKER.match(text.splitlines()[-1]).groups()
    assert int(groups[4]) == len(dropped) and int(groups[5]) == 0


def test_then_whole_entries_are_dropped_lowest_precedence_first_and_counted_per_source():
    skills = catalog_of({"session": 10, "user": 10, "bundled": 10})
    listing, text = text_listing(skills, 500)
    assert len(text) <= 500
    assert all(e.description is None for e in listing.entries())
    assert listing.dropped_entries.get("bundled") == 10  # the lowest group goes first, whole
    assert "session" not in listing.dropped_entries  # the highest group is kept longest
    shown, total, _, _, dropped_d, dropped_e, where = MARKER.match(text.splitlines()[-1]).groups()
    assert int(shown) == listing.shown == len(shown_entries(text))
    assert int(total) == 30 and int(dropped_e) == 30 - listing.shown
    assert int(dropped_d) == 30  # every description went before any entry
    assert "bundled: 10" in where
    kept = [n for n, _ in shown_entries(text)]
    assert kept == [s.name for s in skills][: len(kept)]  # what remains is a prefix of the precedence order


@pytest.mark.parametrize("seed", range(5))
def test_the_listing_is_never_silently_incomplete_at_any_budget(seed):
    rng = random.Random(seed)
    skills = catalog_of({"session": rng.randint(0, 8), "project": rng.randint(1, 8), "user": rng.randint(0, 8), "bundled": rng.randint(1, 8)}, seed=seed)
    full = len(text_listing(skills, None)[1])
    for budget in sorted({rng.randint(260, full + 50) for _ in range(40)}):
        listing, text = text_listing(skills, budget)
        assert len(text) <= budget, budget
        entries = shown_entries(text)
        complete = len(entries) == len(skills) and all(d == " ".join(s.description.split()) for (_, d), s in zip(entries, skills))
        last = text.splitlines()[-1]
        if complete:
            assert not last.startswith("[skills listing truncated")
        else:
            shown, total, *_ = MARKER.match(last).groups()
            assert (int(shown), int(total)) == (len(entries), len(skills))


def test_a_budget_smaller_than_the_marker_still_says_what_was_dropped():
    skills = catalog_of({"bundled": 3})
    listing, text = text_listing(skills, 10)
    assert listing.shown == 0
    assert MARKER.match(text).group(1, 2) == ("0", "3")


def test_default_budget_is_one_percent_of_a_200k_context_in_characters():
    assert budget_for_context(200_000) == DEFAULT_BUDGET_CHARS == 8_000


# --- <available_skills> --------------------------------------------------------------------------------------------


def location(s: Skill) -> str:
    return os.path.join(os.path.realpath(s.folder), os.path.basename(s.path))


def scan_of(*roots: Path):
    return Catalog([Source("session", str(r), explicit=True) for r in roots]).scan()


def test_xml_is_byte_identical_to_skills_ref_for_the_sample_skills(sample_skills):
    scan = scan_of(sample_skills)
    folders = [Path(s.folder) for s in scan.skills]
    assert len(folders) == len([p for p in sample_skills.iterdir() if (p / "SKILL.md").is_file()]) >= 5
    assert xml_listing(scan.skills, None, location)[1] == to_prompt(folders)


def test_xml_escapes_like_skills_ref(tmp_path):
    make_skill(tmp_path / "amp", description='Tom & Jerry <b>"quoted"</b> \'single\' > done')
    make_skill(tmp_path / "plain", description="Plain.")
    scan = scan_of(tmp_path)
    assert xml_listing(scan.skills, None, location)[1] == to_prompt([Path(s.folder) for s in scan.skills])


def test_xml_with_no_skills_matches_skills_ref():
    assert xml_listing([], None)[1] == to_prompt([])


@pytest.mark.corpus
def test_xml_is_byte_identical_to_skills_ref_for_every_valid_corpus_skill(corpus, corpus_skill_folders):
    valid = [f for f in corpus_skill_folders if validate_folder(f).valid]
    assert len(valid) > 150
    scan = Catalog([Source("session", str(f), explicit=True) for f in valid]).scan()
    assert len(scan.skills) + len(scan.shadowed) == len(valid)
    by_folder = {s.folder: s for s in scan.skills}
    visible = [f for f in valid if str(f) in by_folder]
    assert xml_listing([by_folder[str(f)] for f in visible], None, location)[1] == to_prompt(visible)


def test_xml_follows_the_same_budget_rule_and_marker(sample_skills, messy_skills):
    scan = scan_of(messy_skills, sample_skills)
    full = xml_listing(scan.skills, None, location)[1]
    listing, xml = xml_listing(scan.skills, len(full) - 50, location)
    assert len(xml) <= len(full) - 50
    assert xml.splitlines()[-2] == "</available_skills>"
    assert MARKER.match(xml.splitlines()[-1])
    listing, xml = xml_listing(scan.skills, 700)  # the model's catalog: no <location>
    assert len(xml) <= 700 and "<location>" not in xml
    shown, total, *_ = MARKER.match(xml.splitlines()[-1]).groups()
    assert int(shown) == xml.count("<skill>") and int(total) == len(scan.skills)
