"""`%%skill write NAME [--dir PATH]`: the cell becomes NAME/SKILL.md, validated, linted and listed at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics

from skills_magic.notebook.views import WrittenView
from skills_magic.session import WRITE_FOLDER

WRITTEN_MIME = "application/vnd.skills-magic.written+json"
TEA = """---
name: tea-notes
description: Writes tasting notes for a tea - leaf, aroma, body and finish. Use when asked to describe or compare teas.
---

# Tea notes

Write four short lines: leaf, aroma, body, finish.
"""
TEA_V2 = """---
name: tea-notes
description: Writes structured tasting notes for oolong, green and black teas. Use when the user asks how a tea tastes.
---

# Tea notes, second version

Write a table with one row per infusion.
"""
VAGUE = """---
name: csv-profile
description: Helps with data files.
---

# CSV profile

Report the shape, the column types and the missing values.
"""
GOOD = """---
name: csv-profile
description: Profiles a CSV, TSV or spreadsheet export before analysis - row and column counts, column types, empty cells and odd columns. Use when the user asks what is inside a table or data file.
---

# CSV profile

Report the shape, the column types and the missing values.
"""


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    with registered_magics(ip) as instance:
        yield instance


def write(ip, line: str, cell: str) -> WrittenView:
    return ip.run_cell_magic("skill", f"write {line}", cell)


def listed(ip) -> str:
    return ip.run_line_magic("skills", "list").text()


def test_the_cell_becomes_skill_md_in_the_written_folder(ip, magics, tmp_path):
    view = write(ip, "tea-notes", TEA)

    path = tmp_path / WRITE_FOLDER / "tea-notes" / "SKILL.md"
    assert Path(WRITE_FOLDER) == Path(".skills", "written")
    assert path.read_text(encoding="utf-8") == TEA
    assert isinstance(view, WrittenView)
    assert view.text() == "wrote .skills/written/tea-notes/SKILL.md: valid, 0 lint findings"
    bundle, _ = view._repr_mimebundle_()
    assert {"text/plain", "text/html", WRITTEN_MIME} <= set(bundle)
    assert bundle[WRITTEN_MIME] == {"name": "tea-notes", "path": ".skills/written/tea-notes/SKILL.md", "valid": True,
                                    "diagnostics": [], "lint": []}


def test_a_cell_without_a_final_newline_gets_one(ip, magics, tmp_path):
    write(ip, "tea-notes", TEA.rstrip("\n"))

    assert (tmp_path / WRITE_FOLDER / "tea-notes" / "SKILL.md").read_text(encoding="utf-8") == TEA


def test_the_catalog_lists_the_new_skill_at_once(ip, magics):
    assert "tea-notes" not in listed(ip)

    write(ip, "tea-notes", TEA)

    text = listed(ip)
    assert text.index("## session") < text.index("- tea-notes: Writes tasting notes for a tea") < text.index("## bundled")
    shown = ip.run_line_magic("skills", "show tea-notes")
    assert "Write four short lines" in shown.text()
    assert magics.session.skill("tea-notes").source == "session"


def test_a_second_write_replaces_the_first(ip, magics, tmp_path):
    write(ip, "tea-notes", TEA)
    assert "Writes tasting notes for a tea" in listed(ip)

    view = write(ip, "tea-notes", TEA_V2)

    folder = tmp_path / WRITE_FOLDER / "tea-notes"
    assert (folder / "SKILL.md").read_text(encoding="utf-8") == TEA_V2
    assert [p.name for p in folder.iterdir()] == ["SKILL.md"]
    assert view.data()["valid"] is True
    text = listed(ip)
    assert "- tea-notes: Writes structured tasting notes" in text and "Writes tasting notes for a tea" not in text
    assert text.count("- tea-notes:") == 1
    assert "one row per infusion" in ip.run_line_magic("skills", "show tea-notes").text()


def test_dir_puts_the_skill_in_another_folder(ip, magics, tmp_path):
    view = write(ip, "tea-notes --dir drafts/v1", TEA)

    assert (tmp_path / "drafts" / "v1" / "tea-notes" / "SKILL.md").read_text(encoding="utf-8") == TEA
    assert not (tmp_path / WRITE_FOLDER).exists()
    assert view.data()["path"] == "drafts/v1/tea-notes/SKILL.md"
    assert "- tea-notes:" in listed(ip)
    assert magics.session.skill("tea-notes").folder == str(tmp_path / "drafts" / "v1" / "tea-notes")


def test_a_written_skill_shadows_a_bundled_one_of_the_same_name(ip, magics):
    write(ip, "csv-profile", GOOD)

    skill = magics.session.skill("csv-profile")
    assert skill.source == "session" and skill.description.startswith("Profiles a CSV, TSV or spreadsheet export")
    assert any(d.code == "collision" for d in magics.session.diagnostics())


def test_an_invalid_name_is_written_but_shown_invalid_with_the_diagnostic(ip, magics, tmp_path):
    cell = "---\nname: Tea_Notes\ndescription: Writes tasting notes for a tea. Use when asked about tea.\n---\nBody.\n"

    view = write(ip, "Tea_Notes", cell)

    assert (tmp_path / WRITE_FOLDER / "Tea_Notes" / "SKILL.md").is_file()
    data = view.data()
    assert data["valid"] is False
    assert {d["code"] for d in data["diagnostics"]} >= {"name-uppercase", "name-invalid-chars"}
    lines = view.text().splitlines()
    assert lines[0].startswith("wrote .skills/written/Tea_Notes/SKILL.md: INVALID")
    assert any("[name-uppercase]" in line and "Tea_Notes" in line for line in lines[1:])


def test_a_name_that_differs_from_the_folder_is_invalid(ip, magics):
    view = write(ip, "tea-notes", TEA.replace("name: tea-notes", "name: tea-journal"))

    assert view.data()["valid"] is False
    assert "[name-mismatch]" in view.text() and "INVALID" in view.text().splitlines()[0]


def test_frontmatter_that_does_not_parse_is_invalid_with_the_yaml_error_and_not_listed(ip, magics):
    view = write(ip, "tea-notes", "---\nname: [tea-notes\n---\nBody.\n")

    data = view.data()
    assert data["valid"] is False and data["lint"] == []
    assert [d["code"] for d in data["diagnostics"]] == ["yaml-error"]
    assert view.text().startswith("wrote .skills/written/tea-notes/SKILL.md: INVALID, 0 lint findings\n  ✗ ")
    assert "- tea-notes:" not in listed(ip)


def test_lint_findings_are_shown_with_the_write(ip, magics):
    cell = "---\nname: data-helper\ndescription: I help you with data.\n---\nBody.\n"

    view = write(ip, "data-helper", cell)

    data = view.data()
    assert data["valid"] is True
    assert [f["rule"] for f in data["lint"]] == ["too-short", "third-person", "what-and-when"]
    lines = view.text().splitlines()
    assert lines[0] == "wrote .skills/written/data-helper/SKILL.md: valid, 3 lint findings"
    assert lines[1].startswith("  warning [too-short]") and lines[2].startswith("  warning [third-person]")
    lint = ip.run_line_magic("skills", "lint data-helper")
    assert [f["rule"] for f in lint.data()["skills"]["data-helper"]] == ["too-short", "third-person", "what-and-when"]


@pytest.mark.parametrize("first, second, second_rules", [
    (VAGUE, GOOD, []),
    (GOOD, VAGUE, ["too-short", "what-and-when", "boilerplate-opener"]),
])
def test_a_second_version_in_another_dir_shows_its_own_lint_not_the_catalog_winners(ip, magics, first, second,
                                                                                     second_rules):
    write(ip, "csv-profile --dir v1", first)

    view = write(ip, "csv-profile --dir v2", second)

    assert [f["rule"] for f in view.data()["lint"]] == second_rules
    assert view.data()["path"] == "v2/csv-profile/SKILL.md"
    winner = magics.session.skill("csv-profile")
    assert winner.folder.endswith("v1/csv-profile")  # the first version, added first, still wins in the catalog
    winner_rules = [f["rule"] for f in ip.run_line_magic("skills", "lint csv-profile").data()["skills"]["csv-profile"]]
    assert winner_rules != second_rules


@pytest.mark.parametrize("line", ["write", "write ../x", "write a/b", "write .", "write ..", "write tea-notes extra",
                                  "write tea-notes --dir", "write tea-notes --dir a b", "write --dir drafts tea-notes",
                                  "write tea-notes --folder drafts", "write 'unclosed"])
def test_bad_lines_are_usage_errors_and_write_nothing(ip, magics, tmp_path, line):
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("skill", line, TEA)

    assert "usage: %%skill write NAME [--dir PATH]" in str(raised.value) or "not a skill folder name" in str(raised.value) \
        or "No closing quotation" in str(raised.value)
    assert not (tmp_path / ".skills").exists() and not (tmp_path / "drafts").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "skills.sqlite") == []


def test_a_path_in_the_name_is_refused_with_the_reason(ip, magics):
    with pytest.raises(UsageError, match="'../x' is not a skill folder name"):
        ip.run_cell_magic("skill", "write ../x", TEA)


def test_a_dir_that_is_a_file_is_a_usage_error(ip, magics, tmp_path):
    (tmp_path / "notes.txt").write_text("not a folder\n", encoding="utf-8")

    with pytest.raises(UsageError):
        write(ip, "tea-notes --dir notes.txt", TEA)


def test_a_folder_that_is_both_a_session_and_a_project_source_counts_its_skill_once_per_source(ip, tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "project")
    monkeypatch.chdir(tmp_path)
    with registered_magics(ip):
        ip.run_cell_magic("skill", "write only-one --dir skills",
                          "---\nname: only-one\ndescription: Does one thing. Use when testing source counts.\n---\nbody\n")
        rows = {(r["label"], r["folder"]): r["skills"] for r in ip.run_line_magic("skills", "sources").data()["sources"]}
    assert rows[("session", "skills")] == 1 and rows[("project", "skills")] == 1
