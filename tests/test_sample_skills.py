"""Every bundled sample skill passes strict validation (and its scripts, if any, are not run by loading it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skills_magic.skills.validate import validate_folder

SAMPLES = sorted(p for p in (Path(__file__).resolve().parent.parent / "sample-skills").iterdir() if (p / "SKILL.md").is_file())


def test_the_samples_include_the_chapter_and_the_two_halves_of_the_project():
    assert {"source-verification", "scientific-method", "claim-verification"} <= {p.name for p in SAMPLES}


@pytest.mark.parametrize("folder", SAMPLES, ids=[p.name for p in SAMPLES])
def test_every_sample_skill_is_valid_under_the_specification(folder):
    verdict = validate_folder(folder)
    assert verdict.valid, [str(d) for d in verdict.problems]
    assert not verdict.diagnostics  # not even advice
