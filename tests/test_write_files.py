"""`%%skill write NAME/scripts/FILE` (and references/, assets/): any file of a skill from a cell, through the real
IPython shell. Replacing a file says so (or `--no-overwrite` refuses), the whole skill is validated and linted after
every write, and a target outside the skill's folder (`..`, absolute, a symlink) is refused with one line, nothing
written."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics

from skills_magic.notebook.views import WrittenView
from skills_magic.session import WRITE_FOLDER

TEA = """---
name: tea-notes
description: Writes tasting notes for a tea - leaf, aroma, body and finish. Use when asked to describe or compare teas.
---

# Tea notes

Run scripts/brew.py for the steeping times, then write four short lines.
"""
VAGUE = "---\nname: tea-notes\ndescription: Helps with tea.\n---\n\n# Tea notes\n"
BREW = '#!/usr/bin/env python3\n"""Steeping times."""\nprint("green: 2 min, black: 4 min")'
BREW_V2 = 'print("green: 90 s, black: 5 min, oolong: 3 min")'
GUIDE = "# Green teas\n\nSencha, gyokuro, longjing."


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    with registered_magics(ip) as instance:
        yield instance


@pytest.fixture
def skill(tmp_path) -> Path:
    return tmp_path / WRITE_FOLDER / "tea-notes"


def write(ip, line: str, cell: str) -> WrittenView:
    return ip.run_cell_magic("skill", f"write {line}", cell)


def refused(ip, line: str, cell: str = BREW) -> str:
    """The one-line message a refused write shows."""
    with pytest.raises(UsageError) as raised:
        write(ip, line, cell)
    message = str(raised.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def files_under(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_script_cell_becomes_the_skills_script_and_the_whole_skill_is_checked(ip, magics, skill):
    write(ip, "tea-notes", TEA)

    view = write(ip, "tea-notes/scripts/brew.py", BREW)

    assert (skill / "scripts" / "brew.py").read_text(encoding="utf-8") == BREW + "\n"
    assert view.text() == "wrote .skills/written/tea-notes/scripts/brew.py; skill tea-notes: valid, 0 lint findings"
    assert view.data() == {"name": "tea-notes", "path": ".skills/written/tea-notes/scripts/brew.py", "valid": True,
                           "diagnostics": [], "lint": []}
    assert os.stat(skill / "scripts" / "brew.py").st_mode & stat.S_IXUSR  # `#!`: it gets its run bit
    assert magics.session.skill("tea-notes").folder == str(skill)


def test_references_and_assets_are_written_in_nested_folders_made_on_the_way(ip, magics, skill):
    write(ip, "tea-notes", TEA)

    write(ip, "tea-notes/references/guides/green.md", GUIDE)
    write(ip, "tea-notes/assets/template.txt", "leaf:\naroma:\nbody:\nfinish:\n")

    assert files_under(skill) == {"SKILL.md": TEA, "assets/template.txt": "leaf:\naroma:\nbody:\nfinish:\n",
                                  "references/guides/green.md": GUIDE + "\n"}
    assert not os.stat(skill / "assets" / "template.txt").st_mode & stat.S_IXUSR  # no `#!`: no run bit


def test_a_file_written_before_the_skill_md_shows_the_skill_invalid_until_it_comes(ip, magics):
    first = write(ip, "tea-notes/scripts/brew.py", BREW)

    assert first.data()["valid"] is False
    assert first.text().startswith("wrote .skills/written/tea-notes/scripts/brew.py; skill tea-notes: INVALID")
    assert "SKILL.md" in first.text().splitlines()[1]
    assert write(ip, "tea-notes", TEA).data()["valid"] is True


def test_the_view_shows_the_whole_skills_lint_after_writing_a_script(ip, magics):
    write(ip, "tea-notes", VAGUE)

    view = write(ip, "tea-notes/scripts/brew.py", BREW)

    rules = [f["rule"] for f in view.data()["lint"]]
    assert "too-short" in rules and "what-and-when" in rules
    lines = view.text().splitlines()
    assert lines[0] == f"wrote .skills/written/tea-notes/scripts/brew.py; skill tea-notes: valid, {len(rules)} lint findings"
    assert any(line.startswith("  warning [too-short]") for line in lines[1:])


def test_replacing_a_file_says_what_it_replaced(ip, magics, skill):
    write(ip, "tea-notes", TEA)
    write(ip, "tea-notes/scripts/brew.py", BREW)
    old_size = len((BREW + "\n").encode())

    view = write(ip, "tea-notes/scripts/brew.py", BREW_V2)

    assert (skill / "scripts" / "brew.py").read_text(encoding="utf-8") == BREW_V2 + "\n"
    lines = view.text().splitlines()
    assert lines[1] == (f"  ! replaced .skills/written/tea-notes/scripts/brew.py, which had {old_size} bytes "
                        "(--no-overwrite keeps an existing file)")
    assert view.data()["replaced"] == {"bytes": old_size, "unchanged": False}
    assert os.stat(skill / "scripts" / "brew.py").st_mode & stat.S_IXUSR  # the replaced file's mode is kept


def test_replacing_the_skill_md_says_so_too(ip, magics):
    write(ip, "tea-notes", VAGUE)

    view = write(ip, "tea-notes", TEA)

    assert view.text().splitlines()[:2] == [
        "wrote .skills/written/tea-notes/SKILL.md: valid, 0 lint findings",
        f"  ! replaced .skills/written/tea-notes/SKILL.md, which had {len(VAGUE.encode())} bytes "
        "(--no-overwrite keeps an existing file)"]


def test_writing_the_same_text_again_warns_of_nothing_and_shows_the_same_output(ip, magics):
    first = write(ip, "tea-notes", TEA)

    view = write(ip, "tea-notes", TEA)  # a notebook's Restart & Run All writes its cells again

    assert view.text() == "wrote .skills/written/tea-notes/SKILL.md: valid, 0 lint findings"
    assert view.data() == first.data() and "replaced" not in view.data()  # nbval sees the first run's output


def test_no_overwrite_refuses_to_replace_and_keeps_the_file(ip, magics, skill):
    write(ip, "tea-notes", TEA)
    write(ip, "tea-notes/scripts/brew.py", BREW)

    message = refused(ip, "tea-notes/scripts/brew.py --no-overwrite", BREW_V2)

    assert message == (f".skills/written/tea-notes/scripts/brew.py already exists ({len(BREW) + 1} bytes) and was "
                       "kept; without --no-overwrite it is replaced")
    assert (skill / "scripts" / "brew.py").read_text(encoding="utf-8") == BREW + "\n"
    assert refused(ip, "tea-notes --no-overwrite --dir .skills/written", VAGUE).startswith(
        ".skills/written/tea-notes/SKILL.md already exists")
    assert (skill / "SKILL.md").read_text(encoding="utf-8") == TEA


def test_no_overwrite_writes_a_new_file(ip, magics, skill, tmp_path):
    view = write(ip, "tea-notes --no-overwrite --dir drafts", TEA)

    assert view.data()["path"] == "drafts/tea-notes/SKILL.md" and "replaced" not in view.data()
    assert (tmp_path / "drafts" / "tea-notes" / "SKILL.md").read_text(encoding="utf-8") == TEA


@pytest.mark.needs_sandbox
def test_a_written_script_runs_as_the_skills_script(ip, magics):
    write(ip, "tea-notes", TEA)
    write(ip, "tea-notes/scripts/brew.py", BREW)

    data = ip.run_line_magic("skill", "run --no-model --script scripts/brew.py tea-notes").data()

    assert data["stop_reason"] == "no_model" and data["final_text"].strip() == "green: 2 min, black: 4 min"


# --- bad input: one line, nothing written -----------------------------------------------------------------------


@pytest.mark.parametrize("target, reason", [
    ("tea-notes/scripts/../../../escape.py", "'tea-notes/scripts/../../../escape.py' leaves the skill's folder ('..' is refused)"),
    ("tea-notes/../other", "'tea-notes/../other' leaves the skill's folder ('..' is refused)"),
    ("/tmp/escape.py", "'/tmp/escape.py' is an absolute path; write NAME, or NAME/scripts/FILE"),
    ("tea-notes/scripts", "'tea-notes/scripts' is a folder; name the file in it (tea-notes/scripts/FILE)"),
    ("tea-notes/notes/x.md", "'tea-notes/notes/x.md' is not a skill folder name, nor a file under tea-notes/scripts/"),
])
def test_a_target_outside_the_skills_files_is_refused_before_anything_is_written(ip, magics, tmp_path, target, reason):
    assert refused(ip, target).startswith(reason)

    assert not (tmp_path / ".skills").exists() and not (tmp_path / "escape.py").exists()


@pytest.mark.parametrize("line", ["tea-notes/scripts/x.py --no-overwrite --no-overwrite", "tea-notes --dir a --dir b",
                                  "tea-notes --dir --no-overwrite", "tea-notes --overwrite"])
def test_bad_options_are_usage_errors(ip, magics, tmp_path, line):
    assert refused(ip, line).startswith("usage: %%skill write NAME [--dir PATH] [--no-overwrite]")
    assert not (tmp_path / ".skills").exists()


def test_a_symlinked_target_file_is_refused_and_neither_end_changes(ip, magics, skill, tmp_path):
    write(ip, "tea-notes", TEA)
    outside = tmp_path / "outside.py"
    outside.write_text("# mine\n", encoding="utf-8")
    (skill / "scripts").mkdir()
    (skill / "scripts" / "brew.py").symlink_to(outside)

    message = refused(ip, "tea-notes/scripts/brew.py")

    assert message == ".skills/written/tea-notes/scripts/brew.py is a symlink, and a skill is never written through one"
    assert outside.read_text(encoding="utf-8") == "# mine\n"
    assert os.readlink(skill / "scripts" / "brew.py") == str(outside)
    assert sorted(p.name for p in (skill / "scripts").iterdir()) == ["brew.py"]  # no half-written file left behind


@pytest.mark.parametrize("link", ["tea-notes", "tea-notes/scripts"])
def test_a_symlinked_folder_on_the_way_is_refused_and_nothing_lands_outside(ip, magics, tmp_path, link):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / WRITE_FOLDER / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / WRITE_FOLDER / link).symlink_to(outside, target_is_directory=True)

    message = refused(ip, "tea-notes/scripts/brew.py")

    assert message == f".skills/written/{link} is a symlink, and a skill is never written through one"
    assert list(outside.iterdir()) == []
    if link == "tea-notes":
        assert refused(ip, "tea-notes", TEA) == message  # a SKILL.md is not written through one either
        assert list(outside.iterdir()) == []


def test_a_file_where_a_folder_belongs_is_refused(ip, magics, skill):
    write(ip, "tea-notes", TEA)
    (skill / "scripts").write_text("not a folder\n", encoding="utf-8")

    assert refused(ip, "tea-notes/scripts/brew.py") == ".skills/written/tea-notes/scripts is a file, not a folder"
    assert (skill / "scripts").read_text(encoding="utf-8") == "not a folder\n"


@contextlib.contextmanager
def as_nobody():
    """Permissions count: root ignores them, so a root test process writes as `nobody` for the block."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def test_an_unwritable_folder_is_one_line_and_nothing_is_written(ip, magics):
    base = Path(tempfile.mkdtemp(prefix="skills-magic-readonly-"))  # not under pytest's root-only folder
    try:
        os.chmod(base, 0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        os.chmod(locked, 0o555)

        with as_nobody():
            message = refused(ip, f"tea-notes --dir {locked}/skills", TEA)

        assert message.startswith("cannot write ") and message.endswith("tea-notes/SKILL.md: Permission denied")
        assert list(locked.iterdir()) == []
    finally:
        os.chmod(base / "locked", 0o755)
        for folder, _, _ in os.walk(base, topdown=False):
            os.rmdir(folder)
