"""The fast frontmatter constructor gives exactly what PyYAML's own constructor gives (it only skips work)."""

from __future__ import annotations

import datetime

import pytest
import yaml

from skills_magic.skills.frontmatter import _Loader, split_frontmatter as _split
from skills_magic.skills.skill import parse_frontmatter


def pyyaml(text: str):
    return yaml.load(text, Loader=_Loader)


@pytest.mark.parametrize(
    "text",
    [
        "name: pdf\ndescription: Reads PDFs.\nmetadata:\n  author: me\n  version: '1.0'\n",
        "a: &x hi\nb: *x\n",
        "base: &b {k: 1}\nm:\n  <<: *b\n  j: 2\n",
        "d: 2024-01-01\ni: 3\nf: 1.5\nn: null\nt: true\ny: yes\n",
        "l: [1, a, {x: y}]\nnested:\n  - - deep\n",
        "!!str 5: x\nx: !!int '5'\n",
        "1: one\n2.5: two\n",
        "description: |\n  line one\n  ---\n  line three\n",
    ],
    ids=["plain", "alias", "merge-key", "typed-scalars", "sequences", "tags", "non-string-keys", "block-scalar"],
)
def test_same_value_as_pyyaml(text):
    value = parse_frontmatter(text).data
    assert value == pyyaml(text)
    assert type(value) is type(pyyaml(text))


def test_typed_scalars_keep_their_types():
    value = parse_frontmatter("d: 2024-01-01\ni: 3\ny: yes\nt: true\n").data
    assert value == {"d": datetime.date(2024, 1, 1), "i": 3, "y": "yes", "t": True}


@pytest.mark.corpus
def test_same_value_as_pyyaml_on_every_corpus_frontmatter(corpus_skill_folders):
    checked = 0
    for folder in corpus_skill_folders:
        text = (folder / "SKILL.md").read_text(encoding="utf-8")
        frontmatter = _split(text)[0]
        try:
            expected = pyyaml(frontmatter)
        except yaml.YAMLError:
            assert parse_frontmatter(frontmatter).data is None
            continue
        assert parse_frontmatter(frontmatter).data == expected, folder
        checked += 1
    assert checked > 1000
