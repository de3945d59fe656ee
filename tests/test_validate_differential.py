"""Our strict validator against the reference library skills-ref 0.1.1: the same valid/invalid verdict on every
skill of the real corpus and on crafted cases, except the deliberate differences of docs/validation.md, each of
which is pinned here by its own test (so a difference that disappears, or a new one, fails)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import skills_ref
from skills_ref.parser import read_properties

from skills_magic.skills.validate import validate_folder

# corpus folders where the verdicts differ on purpose -> the docs/validation.md section that explains why
CORPUS_DIVERGENCES = {
    "kdense-scientific-skills/markdown-mermaid-writing": "D4",  # metadata value is a list of maps
}


def reference_valid(folder: Path) -> bool:
    """skills-ref's verdict; a crash (it raises on non-UTF-8 and on a folder named SKILL.md) counts as invalid."""
    try:
        return not skills_ref.validate(folder)
    except Exception:
        return False


def write(tmp_path: Path, folder: str, content: bytes | str) -> Path:
    skill = tmp_path / folder
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_bytes(content.encode() if isinstance(content, str) else content)
    return skill


@pytest.mark.corpus
def test_same_verdict_as_skills_ref_on_the_whole_corpus(corpus, corpus_skill_folders):
    assert len(corpus_skill_folders) > 1000
    differences = {}
    valid = 0
    for folder in corpus_skill_folders:
        ours = validate_folder(folder).valid
        valid += ours
        if ours != reference_valid(folder):
            differences[folder.relative_to(corpus).as_posix()] = [str(d) for d in validate_folder(folder).problems]
    assert set(differences) == set(CORPUS_DIVERGENCES), differences
    assert 150 < valid < len(corpus_skill_folders)  # the corpus is a realistic mix, not all-pass or all-fail


@pytest.mark.corpus
def test_corpus_figures_match_the_corpus_readme(corpus):
    # corpus/README.md: anthropic-skills fails only claude-api; obra-superpowers and openai-skills all pass
    anthropic = {p.parent.name: validate_folder(p.parent).valid for p in (corpus / "anthropic-skills").rglob("SKILL.md")}
    assert [name for name, ok in anthropic.items() if not ok] == ["claude-api"]
    for collection in ("obra-superpowers", "openai-skills"):
        verdicts = [validate_folder(p.parent) for p in (corpus / collection).rglob("SKILL.md")]
        assert verdicts and all(v.valid for v in verdicts), [str(d) for v in verdicts for d in v.problems]


NAME_64 = "a" * 64
DESCRIPTION_1024 = "d" * 1024

# (case id, folder name, SKILL.md content, the verdict both libraries give)
AGREED = [
    ("minimal", "pdf", "---\nname: pdf\ndescription: Read PDFs.\n---\nbody\n", True),
    ("all-spec-fields", "pdf", "---\nname: pdf\ndescription: d\nlicense: MIT\ncompatibility: Python 3\nmetadata:\n  author: x\n  version: \"1.0\"\nallowed-tools: Read Bash(git:*)\n---\n", True),
    ("64-char-name", NAME_64, f"---\nname: {NAME_64}\ndescription: d\n---\n", True),
    ("65-char-name", "a" * 65, f"---\nname: {'a' * 65}\ndescription: d\n---\n", False),
    ("uppercase-name", "PDF", "---\nname: PDF\ndescription: d\n---\n", False),
    ("leading-hyphen", "-pdf", "---\nname: -pdf\ndescription: d\n---\n", False),
    ("trailing-hyphen", "pdf-", "---\nname: pdf-\ndescription: d\n---\n", False),
    ("double-hyphen", "pdf--x", "---\nname: pdf--x\ndescription: d\n---\n", False),
    ("underscore", "pdf_x", "---\nname: pdf_x\ndescription: d\n---\n", False),
    ("space-in-name", "pdf x", "---\nname: pdf x\ndescription: d\n---\n", False),
    ("name-mismatch", "other", "---\nname: pdf\ndescription: d\n---\n", False),
    ("missing-name", "pdf", "---\ndescription: d\n---\n", False),
    ("empty-name", "pdf", "---\nname: ''\ndescription: d\n---\n", False),
    ("unicode-lowercase-name", "café", "---\nname: café\ndescription: d\n---\n", True),
    ("cjk-name", "技能", "---\nname: 技能\ndescription: d\n---\n", True),
    ("nfkc-fullwidth-name", "pdf", "---\nname: ｐｄｆ\ndescription: d\n---\n", True),
    ("missing-description", "pdf", "---\nname: pdf\n---\n", False),
    ("empty-description", "pdf", "---\nname: pdf\ndescription: ''\n---\n", False),
    ("blank-description", "pdf", "---\nname: pdf\ndescription: '   '\n---\n", False),
    ("1024-char-description", "pdf", f"---\nname: pdf\ndescription: {DESCRIPTION_1024}\n---\n", True),
    ("1025-char-description", "pdf", f"---\nname: pdf\ndescription: {DESCRIPTION_1024}d\n---\n", False),
    ("yaml-1.1-boolean-word", "pdf", "---\nname: pdf\ndescription: yes\n---\n", True),
    ("folded-description", "pdf", "---\nname: pdf\ndescription: >\n  folded\n  text\n---\n", True),
    ("500-char-compatibility", "pdf", f"---\nname: pdf\ndescription: d\ncompatibility: {'c' * 500}\n---\n", True),
    ("501-char-compatibility", "pdf", f"---\nname: pdf\ndescription: d\ncompatibility: {'c' * 501}\n---\n", False),
    ("unknown-key", "pdf", "---\nname: pdf\ndescription: d\nauthor: me\n---\n", False),
    ("client-extension-key", "pdf", "---\nname: pdf\ndescription: d\nwhen_to_use: always\n---\n", False),
    ("empty-license", "pdf", "---\nname: pdf\ndescription: d\nlicense:\n---\n", True),
    ("empty-metadata", "pdf", "---\nname: pdf\ndescription: d\nmetadata:\n---\n", True),
    ("crlf-line-endings", "pdf", "---\r\nname: pdf\r\ndescription: d\r\n---\r\nbody\r\n", True),
    ("fence-with-trailing-spaces", "pdf", "---  \nname: pdf\ndescription: d\n---  \nbody", True),
    ("no-frontmatter", "pdf", "# just markdown\n", False),
    ("blank-line-before-fence", "pdf", "\n---\nname: pdf\ndescription: d\n---\n", False),
    ("four-dash-fence", "pdf", "----\nname: pdf\ndescription: d\n----\n", False),
    ("unclosed-frontmatter", "pdf", "---\nname: pdf\ndescription: d\n", False),
    ("yaml-syntax-error", "pdf", "---\nname: pdf\ndescription: Use this: when broken\n---\n", False),
    ("tab-indentation", "pdf", "---\nname: pdf\nmetadata:\n\tauthor: x\ndescription: d\n---\n", False),
    ("list-frontmatter", "pdf", "---\n- name: pdf\n---\n", False),
    ("scalar-frontmatter", "pdf", "---\njust text\n---\n", False),
    ("empty-frontmatter", "pdf", "---\n---\nbody\n", False),
    ("duplicate-key", "pdf", "---\nname: pdf\ndescription: d\ndescription: e\n---\n", False),
    ("utf8-bom", "pdf", b"\xef\xbb\xbf---\nname: pdf\ndescription: d\n---\n", False),
    ("empty-file", "pdf", "", False),
    ("non-utf8", "pdf", b"---\nname: pdf\ndescription: caf\xe9\n---\n", False),
]


@pytest.mark.parametrize("case, folder, content, expected", AGREED, ids=[c[0] for c in AGREED])
def test_same_verdict_as_skills_ref_on_crafted_cases(tmp_path, case, folder, content, expected):
    skill = write(tmp_path, folder, content)
    assert reference_valid(skill) is expected, "the reference changed its verdict"
    verdict = validate_folder(skill)
    assert verdict.valid is expected, [str(d) for d in verdict.problems]
    if not expected:
        assert verdict.problems, "an invalid verdict names at least one problem"


def test_folder_named_skill_md_is_invalid_in_both(tmp_path):
    (tmp_path / "pdf" / "SKILL.md").mkdir(parents=True)
    assert reference_valid(tmp_path / "pdf") is False
    assert [d.code for d in validate_folder(tmp_path / "pdf").problems] == ["not-a-file"]


# --- the deliberate differences (docs/validation.md), one test each -------------------------------------------


def test_d1_a_dashes_inside_a_value_do_not_end_the_frontmatter(tmp_path):
    skill = write(tmp_path, "pdf", "---\ndescription: Use --- carefully\nname: pdf\n---\nbody\n")
    assert reference_valid(skill) is False  # skills-ref cut the frontmatter at the first `---`: no name left
    assert validate_folder(skill).valid is True


def test_d1_b_skills_ref_cuts_the_value_where_we_keep_it_whole(tmp_path):
    from skills_magic.skills.validate import load_skill

    skill = write(tmp_path, "pdf", "---\nname: pdf\ndescription: before --- after\n---\nbody\n")
    assert read_properties(skill).description == "before"
    assert load_skill(skill / "SKILL.md").skill.description == "before --- after"


def test_d2_validate_dot_judges_the_real_folder_name(tmp_path, monkeypatch):
    skill = write(tmp_path, "pdf", "---\nname: pdf\ndescription: d\n---\n")
    monkeypatch.chdir(skill)
    assert skills_ref.validate(Path(".")) == ["Directory name '' must match skill name 'pdf'"]
    assert validate_folder(".").valid is True


@pytest.mark.parametrize(
    "content",
    [
        "---\nname: pdf\ndescription: d\nmetadata: {author: x}\n---\n",
        "---\nname: pdf\ndescription: &d hello\nlicense: *d\n---\n",
        "---\nname: pdf\ndescription: !!str hello\n---\n",
    ],
    ids=["flow-mapping", "anchor-and-alias", "explicit-tag"],
)
def test_d3_standard_yaml_that_strictyaml_refuses_is_valid(tmp_path, content):
    skill = write(tmp_path, "pdf", content)
    assert reference_valid(skill) is False
    assert validate_folder(skill).valid is True


@pytest.mark.parametrize(
    "folder, content, code",
    [
        ("pdf", "---\nname: pdf\ndescription: d\nmetadata:\n  version: 1.0\n---\n", "metadata-not-string"),
        ("pdf", "---\nname: pdf\ndescription: d\nmetadata:\n  released: 2024-01-01\n---\n", "metadata-not-string"),
        ("pdf", "---\nname: pdf\ndescription: d\nmetadata:\n  authors:\n    - name: a\n---\n", "metadata-not-string"),
        ("123", "---\nname: 123\ndescription: d\n---\n", "name-not-string"),
        ("pdf", "---\nname: pdf\ndescription: d\nallowed-tools:\n  - Read\n---\n", "allowed-tools-not-string"),
    ],
    ids=["float-version", "date", "nested-map", "integer-name", "allowed-tools-list"],
)
def test_d4_values_that_are_not_strings_are_invalid(tmp_path, folder, content, code):
    skill = write(tmp_path, folder, content)
    assert reference_valid(skill) is True  # StrictYAML reads every scalar as a string and str()s metadata
    assert [d.code for d in validate_folder(skill).problems] == [code]


@pytest.mark.corpus
def test_d4_the_corpus_skill_with_nested_metadata(corpus):
    folder = corpus / "kdense-scientific-skills" / "markdown-mermaid-writing"
    assert reference_valid(folder) is True
    assert [d.code for d in validate_folder(folder).problems] == ["metadata-not-string"]


@pytest.mark.parametrize("value", ['""', ""], ids=["empty-string", "null"])
def test_d5_empty_compatibility_is_invalid(tmp_path, value):
    skill = write(tmp_path, "pdf", f"---\nname: pdf\ndescription: d\ncompatibility: {value}\n---\n")
    assert reference_valid(skill) is True
    assert [d.code for d in validate_folder(skill).problems] == ["compatibility-length"]


def test_d6_undecodable_bytes_are_a_diagnostic_not_a_crash(tmp_path):
    skill = write(tmp_path, "pdf", b"---\nname: pdf\ndescription: caf\xe9\n---\n")
    with pytest.raises(UnicodeDecodeError):
        skills_ref.validate(skill)
    (problem,) = validate_folder(skill).problems
    assert (problem.code, problem.line, problem.column) == ("encoding-error", 3, 17)


def test_every_corpus_divergence_is_documented():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "validation.md").read_text(encoding="utf-8")
    for section in ("D1", "D2", "D3", "D4", "D5", "D6"):
        assert f"### {section}" in doc
    for folder, section in CORPUS_DIVERGENCES.items():
        assert folder in doc and section in doc


def test_validate_dot_from_the_cli_agrees_with_the_folder_name(tmp_path):
    import subprocess
    import sys

    skill = write(tmp_path, "pdf", "---\nname: pdf\ndescription: d\n---\n")
    run = subprocess.run([sys.executable, "-m", "skills_magic", "validate", "."], cwd=skill, capture_output=True, text=True, env={**os.environ})
    assert run.returncode == 0, run.stdout + run.stderr
