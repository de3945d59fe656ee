"""The description linter: each rule fires on a crafted description and stays silent on its near misses, the sample
skills pass every rule, and the counts over the shared corpus are the ones docs/lint.md publishes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from skills_magic.skills.lint import (
    LISTING_CUT,
    MIN_DESCRIPTION_LENGTH,
    RULES,
    Finding,
    count_by_rule,
    exit_code,
    lint_description,
    lint_path,
    lint_skill,
)
from skills_magic.skills.validate import MAX_DESCRIPTION_LENGTH, load_skill

REPO = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (REPO / "sample-skills").iterdir() if (p / "SKILL.md").is_file())

# A description that passes every rule; the crafted cases below change one thing about it.
GOOD = "Extracts text and tables from PDF files and fills forms. Use when the user mentions PDFs, forms or document extraction."

# The corpus on 2026-11-30: skills with at least one finding of each rule, out of CORPUS_SKILLS. docs/lint.md
# prints the same table (a test below compares them).
CORPUS_SKILLS = 1025
CORPUS_COUNTS = {
    "empty": 0,
    "too-long": 2,
    "too-short": 0,
    "xml-tags": 0,
    "reserved-word": 3,
    "third-person": 33,
    "what-and-when": 895,
    "boilerplate-opener": 8,
    "listing-length": 29,
    "unloadable": 0,
}


def rules(description: str, name: str | None = None) -> list[str]:
    return [f.rule for f in lint_description(description, name)]


def write_skill(folder: Path, frontmatter: str, body: str = "# Body\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    path.write_text(f"---\n{frontmatter}\n---\n{body}", encoding="utf-8")
    return path


# --- the good description and the shape of a finding ---


def test_a_good_description_has_no_findings():
    assert lint_description(GOOD) == []
    assert lint_description(GOOD, "pdf-processing") == []


def test_a_finding_is_a_frozen_rule_severity_message_with_a_fix():
    (finding,) = lint_description("Helps with documents and other files of many kinds. Use when asked.")
    assert finding == Finding("boilerplate-opener", "warning", finding.message)
    assert str(finding).startswith("warning [boilerplate-opener] ")
    assert finding.to_dict() == {"rule": "boilerplate-opener", "severity": "warning", "message": finding.message}
    with pytest.raises(AttributeError):
        finding.rule = "other"  # type: ignore[misc]


def test_every_rule_has_a_one_line_explanation():
    assert list(RULES) == ["empty", "too-long", "too-short", "xml-tags", "reserved-word", "third-person",
                           "what-and-when", "boilerplate-opener", "listing-length", "unloadable"]
    assert all(text and "\n" not in text for text in RULES.values())


# --- empty ---


@pytest.mark.parametrize("description", ["", "   ", "\n\t\n", None])
def test_empty_is_the_only_finding_for_a_blank_description(description):
    findings = lint_description(description, "claude-tools")  # type: ignore[arg-type]
    assert [(f.rule, f.severity) for f in findings] == [("empty", "error")]


# --- too-long, too-short ---


def test_too_long_is_an_error_above_the_specifications_limit():
    base = GOOD + " "
    at_limit = base + "x" * (MAX_DESCRIPTION_LENGTH - len(base))
    assert len(at_limit) == MAX_DESCRIPTION_LENGTH
    assert "too-long" not in rules(at_limit)
    findings = lint_description(at_limit + "x")
    assert ("too-long", "error") in [(f.rule, f.severity) for f in findings]
    assert "1025 characters" in next(f.message for f in findings if f.rule == "too-long")


def test_too_short_is_a_warning_under_forty_characters():
    short = "Use when merging PDFs."
    assert len(short) < MIN_DESCRIPTION_LENGTH
    assert rules(short) == ["too-short"]
    exactly = "Merges PDF files. Use when merging PDFs!"
    assert len(exactly) == MIN_DESCRIPTION_LENGTH
    assert rules(exactly) == []


def test_lengths_ignore_surrounding_whitespace():
    assert rules("   " + GOOD + "\n\n") == []


# --- xml-tags ---


@pytest.mark.parametrize("tag", ["<example>", "</b>", "<br/>", "<br />", '<a href="https://x.org">', "<skill-name>"])
def test_xml_tags_are_an_error(tag):
    findings = lint_description(f"{GOOD} See {tag} for details.")
    assert [(f.rule, f.severity) for f in findings] == [("xml-tags", "error")]
    assert tag in findings[0].message


@pytest.mark.parametrize("text", ["when a < b", "when x <= y", "arrows like <- and ->", "scores <3 or >5",
                                  "a << b", "links like <https://example.org>"])
def test_a_bare_angle_bracket_is_not_a_tag(text):
    assert rules(f"{GOOD} Handles {text}.") == []


# --- reserved-word ---


@pytest.mark.parametrize("name", ["claude-tools", "anthropic-helper", "my-claude", "claude", "Claude-Tools",
                                  "anthropic_administrator-automation", "tools-anthropic-x"])
def test_reserved_words_in_the_name_are_an_error(name):
    findings = lint_description(GOOD, name)
    assert [(f.rule, f.severity) for f in findings] == [("reserved-word", "error")]
    assert repr(name) in findings[0].message


@pytest.mark.parametrize("name", ["claudette", "anthropics-fan", "claude3-notes", "pdf-processing", None, ""])
def test_names_that_only_contain_the_letters_pass(name):
    assert rules(GOOD, name) == []


def test_the_reserved_words_in_the_description_are_not_a_finding():
    assert rules("Formats prompts for Claude and the Anthropic API. Use when the user asks for a prompt review.") == []


# --- third-person ---


@pytest.mark.parametrize("text", [
    "I can help you process Excel files. Use when the user mentions spreadsheets.",
    "I'm a helper for Excel files and reports. Use when the user mentions spreadsheets.",
    "Processes Excel files. I'll make reports when a spreadsheet is uploaded by anyone.",
    "Processes the files of my team and reports on them. Use when the user mentions spreadsheets.",
    "Processes Excel files as we like them. Use when the user mentions spreadsheets.",
    "Processes Excel files in our format. Use when the user mentions spreadsheets.",
    "Processes Excel files for us and reports. Use when the user mentions spreadsheets.",
    "Processes Excel files and sends them to me. Use when the user mentions spreadsheets.",
    "You can use this to process Excel files. Use when the user mentions spreadsheets.",
    "Processes Excel files. Use when your spreadsheet needs a summary report for the team.",
    "Processes Excel files. You'll get a report; use when the user mentions spreadsheets.",
    "Processes Excel files and reports. YOU must use it when a spreadsheet arrives anywhere.",
])
def test_first_and_second_person_is_a_warning(text):
    findings = lint_description(text)
    assert [(f.rule, f.severity) for f in findings] == [("third-person", "warning")]


def test_the_finding_quotes_the_words_it_found():
    (finding,) = lint_description("Processes your files for you and me. Use when the user mentions spreadsheets.")
    assert '"your", "you", "me"' in finding.message


@pytest.mark.parametrize("text", [
    "Manages SOME API keys and some secrets",  # "me" inside "some", "I" inside "API"
    "Runs mypy, MySQL dumps and myriad checks",  # "my" inside words
    "Scaffolds a my-app project and an our_module package",  # a name, not a pronoun
    "Profiles disk I/O and ME/CFS datasets",  # "I/O" is not "I"
    "Deploys to us-east-1 and reads us.anthropic model ids",
    "Queries US Census and US Treasury data",  # the country, in capitals
    "Designs Phase I trials and Type I error checks",  # a numeral
    "Summarizes results, i.e. means and medians",  # a lowercase i is not the pronoun
    "Welcomes users to the menu of the web app for four hours",  # we, me, our, you inside words
    "Writes YouTube and Yourls summaries",
    'Finds GIFs when the user says "make me a GIF" or \'help me think\'',  # the user's words, quoted
    "Runs the `you-get` and `my_tool` commands",
])
def test_pronouns_inside_other_words_or_quotes_are_not_a_finding(text):
    assert "third-person" not in rules(f"{text}. Use when the user mentions it.")


def test_an_apostrophe_is_not_a_quote():
    assert "third-person" in rules("Processes the team's files, and you don't need to ask. Use when the user mentions it.")


# --- what-and-when ---


@pytest.mark.parametrize("text", [
    "Extracts text and tables from PDF files and fills forms.",
    "Automate Zeplin tasks via Rube MCP (Composio). Always search tools first for current schemas.",
    "Reports the root cause for failing builds beforehand and afterwards, thereafter summarizing.",
    "Detects API misuse when rate limits are hit and flags when APIs change.",
])
def test_a_description_without_a_when_clause_is_a_warning(text):
    findings = lint_description(text)
    assert [(f.rule, f.severity) for f in findings] == [("what-and-when", "warning")]
    assert "Use when" in findings[0].message


@pytest.mark.parametrize("clause", [
    "When to use: merging reports.", "Use when merging reports.", "USE THIS WHEN merging reports.",
    "Use for merging reports.", "Applies when the user asks to merge.", "Needed when a report arrives.",
    "Needed when an invoice arrives.", "Runs whenever reports arrive.", "Runs before a release.",
    "Runs after a failed build.", "Use this skill when merging.", "Use this skill for merging.", "Use it when merging.",
    "This should be used when merging.", "Triggers on merge requests.", "Helpful when users merge reports.",
    "Helpful when merging reports.", "Use\nwhen merging reports.",
])
def test_every_when_clause_satisfies_the_rule(clause):
    assert "what-and-when" not in rules(f"Extracts text and tables from PDF files. {clause}")


# --- boilerplate-opener ---


@pytest.mark.parametrize("opener", [
    "This skill extracts", "A skill that extracts", "Skill that extracts", "Skill to extract", "Skill for extracting",
    "This is a tool that extracts", "This is an extractor that pulls", "Helps extract", "Helper for extracting",
    "Use this skill to extract", "The skill extracts", "This tool extracts", "  **This skill** extracts",
    "this  skill extracts",
])
def test_a_boilerplate_opener_is_a_warning(opener):
    findings = lint_description(f"{opener} tables from PDF files. Use when the user mentions PDFs or forms.")
    assert [(f.rule, f.severity) for f in findings] == [("boilerplate-opener", "warning")]


@pytest.mark.parametrize("opener", [
    "Skillfully extracts", "Helpscout tickets: extracts", "This isotope tool extracts", "Thistle-style extraction of",
    "Extracts, with this skill,", "Use when the user mentions PDFs: extracts",
])
def test_near_miss_openers_are_not_boilerplate(opener):
    assert "boilerplate-opener" not in rules(f"{opener} tables from PDF files. Use when the user mentions PDFs or forms.")


# --- listing-length ---


def pad(text: str, length: int) -> str:
    return text + " " + "x" * (length - len(text) - 1)


def test_a_long_description_with_its_when_clause_first_passes():
    text = pad("Extracts text from PDF files. Use when the user mentions PDFs. Details:", 600)
    assert len(text) == 600 and rules(text) == []


def test_a_long_description_whose_when_clause_comes_after_the_cut_is_a_warning():
    text = pad("Extracts text from PDF files and tables:", LISTING_CUT + 10) + " Use when the user mentions PDFs."
    findings = lint_description(text)
    assert [(f.rule, f.severity) for f in findings] == [("listing-length", "warning")]
    assert f"starts at character {LISTING_CUT + 12}" in findings[0].message


def test_a_when_phrase_cut_in_the_middle_counts_as_cut():
    head = pad("Extracts text from PDF files:", LISTING_CUT - 5)
    assert rules(head + " Use when merging.") == ["listing-length"]


def test_a_long_description_without_a_when_clause_gets_both_warnings():
    assert rules(pad("Extracts text from PDF files:", LISTING_CUT + 1)) == ["what-and-when", "listing-length"]


def test_a_description_at_the_cut_is_not_long():
    assert rules(pad("Extracts text from PDF files:", LISTING_CUT)) == ["what-and-when"]


# --- several rules at once, determinism ---


def test_findings_come_in_rules_order():
    text = "This skill helps you with <b>files</b>."
    assert rules(text, "claude-files") == ["too-short", "xml-tags", "reserved-word", "third-person", "what-and-when",
                                           "boilerplate-opener"]


def test_the_same_text_always_gets_the_same_findings():
    text = "This skill helps you with <b>files</b>. " * 40
    assert lint_description(text, "claude-x") == lint_description(text, "claude-x")


# --- skills and paths ---


def test_lint_skill_uses_the_listed_name_and_the_description(tmp_path):
    path = write_skill(tmp_path / "claude-tools", f"name: claude-tools\ndescription: {GOOD}")
    skill = load_skill(path).skill
    assert [f.rule for f in lint_skill(skill)] == ["reserved-word"]


def test_lint_path_takes_a_folder_a_skill_md_or_a_collection(tmp_path):
    good = write_skill(tmp_path / "pdf-processing", f"name: pdf-processing\ndescription: {GOOD}")
    bad = write_skill(tmp_path / "nested" / "helper", "name: helper\ndescription: Helps with documents")
    assert lint_path(tmp_path / "pdf-processing") == [(str(good), [])]
    assert lint_path(good) == [(str(good), [])]
    results = lint_path(tmp_path)
    assert [p for p, _ in results] == [str(bad), str(good)]  # the catalog's order: depth first, names sorted
    assert [f.rule for f in results[0][1]] == ["too-short", "what-and-when", "boilerplate-opener"]
    assert count_by_rule(results)["too-short"] == 1 and exit_code(results) == 1
    assert exit_code(lint_path(good)) == 0


def test_a_skill_that_cannot_load_is_unloadable_with_the_loaders_first_error(tmp_path):
    path = write_skill(tmp_path / "broken", "name: broken\ndescription: [unclosed")
    ((where, findings),) = lint_path(tmp_path / "broken")
    assert where == str(path)
    assert [(f.rule, f.severity) for f in findings] == [("unloadable", "error")]
    assert "[yaml-error]" in findings[0].message and "line" in findings[0].message


@pytest.mark.parametrize("frontmatter", ["name: blank", "name: blank\ndescription: '   '"])
def test_a_missing_or_blank_description_in_a_file_is_the_empty_rule(tmp_path, frontmatter):
    write_skill(tmp_path / "blank", frontmatter)
    ((_, findings),) = lint_path(tmp_path / "blank")
    assert [(f.rule, f.severity) for f in findings] == [("empty", "error")]


def test_a_path_without_any_skill_is_reported_not_silent(tmp_path):
    (tmp_path / "empty-folder").mkdir()
    assert [f.rule for _, fs in lint_path(tmp_path / "empty-folder") for f in fs] == ["unloadable"]
    ((where, findings),) = lint_path(tmp_path / "missing")
    assert where == str(tmp_path / "missing") and findings[0].rule == "unloadable" and "not-found" in findings[0].message


# --- the sample skills and the corpus ---


@pytest.mark.parametrize("folder", SAMPLES, ids=[p.name for p in SAMPLES])
def test_every_sample_skill_has_no_findings(folder):
    ((_, findings),) = lint_path(folder)
    assert findings == [], [str(f) for f in findings]


def test_the_corpus_counts_are_the_documented_ones(corpus, corpus_skill_folders):
    results = lint_path(corpus)
    assert len(results) == len(corpus_skill_folders) == CORPUS_SKILLS
    assert all(f.rule in RULES and f.severity in ("error", "warning") for _, fs in results for f in fs)
    assert count_by_rule(results) == CORPUS_COUNTS


def test_docs_print_the_same_corpus_table():
    text = (REPO / "docs" / "lint.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| `([a-z-]+)` \| (\d+) \|", text, re.MULTILINE))
    assert {rule: int(count) for rule, count in table.items()} == CORPUS_COUNTS
    assert f"{CORPUS_SKILLS:,} skills" in text and "2026-11-30" in text


# --- the authoring guide's own examples ---

GUIDE_EFFECTIVE = [
    "Extract text and tables from PDF files, fill forms, merge documents. Use when working with PDF files or when the user mentions PDFs, forms, or document extraction.",
    "Analyze Excel spreadsheets, create pivot tables, generate charts. Use when analyzing Excel files, spreadsheets, tabular data, or .xlsx files.",
    "Generate descriptive commit messages by analyzing git diffs. Use when the user asks for help writing commit messages or reviewing staged changes.",
]


@pytest.mark.parametrize("description", GUIDE_EFFECTIVE)
def test_the_guides_effective_examples_pass(description):
    assert lint_description(description) == []


@pytest.mark.parametrize("description, expected", [
    ("I can help you process Excel files", "third-person"),
    ("You can use this to process Excel files", "third-person"),
    ("Helps with documents", "boilerplate-opener"),
    ("Processes data", "too-short"),
    ("Does stuff with files", "what-and-when"),
])
def test_the_guides_examples_to_avoid_fail(description, expected):
    assert expected in rules(description)
