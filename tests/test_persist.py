"""State that persists where a user expects it: skills written with `%%skill write` are a source (`written`) in every
later session started in the same folder, without `%skills add`, with the precedence they had when written; and a
scripted turns file used up says how to start it again. Through the real IPython shell (a new session registered
as after a kernel restart), and across two real kernels driven by nbclient."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from notebook_setup import notebook_folder, registered_magics
from test_skill_write import TEA  # the skill every %%skill write test writes

from skills_magic.models.base import ModelError
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import WRITE_FOLDER, SkillsSession

LISTING_MIME = "application/vnd.skills-magic.listing+json"
PROJECT_TEA = TEA.replace("Writes tasting notes for a tea", "Writes the project's tasting notes")
ONE_TURN = "turns:\n  - The answer.\n"


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A notebook's folder searched with the default sources (no SKILLS_MAGIC_SOURCES), and a home of its own, so
    that the machine's ~/.agents/skills does not show."""
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SKILLS_MAGIC_SOURCES", raising=False)
    monkeypatch.delenv("SKILLS_MAGIC_PATH", raising=False)
    return notebook_folder(monkeypatch, notebook, db="skills.sqlite", lock=None)


def skills(ip, line: str):
    return ip.run_line_magic("skills", line)


def write(ip, line: str, cell: str):
    return ip.run_cell_magic("skill", f"write {line}", cell)


def source_rows(ip) -> list[tuple[str, str, int]]:
    return [(s["label"], s["folder"], s["skills"]) for s in skills(ip, "sources").data()["sources"] if s["exists"]]


def test_a_written_skill_is_listed_after_a_restart_without_skills_add(ip, folder):
    with registered_magics(ip):
        write(ip, "tea-notes", TEA)
        write(ip, "tea-notes/scripts/brew.py", "print('4 min')")

    with registered_magics(ip) as restarted:  # a new session in the same folder, as after a kernel restart
        skill = restarted.session.skill("tea-notes")
        listing = skills(ip, "list").text()
        rows = source_rows(ip)

    assert skill.source == "written" and skill.folder == str(folder / WRITE_FOLDER / "tea-notes")
    assert listing.index("## written") < listing.index("- tea-notes: Writes tasting notes") < listing.index("## bundled")
    assert rows[0] == ("written", ".skills/written", 1)
    assert (folder / WRITE_FOLDER / "tea-notes" / "scripts" / "brew.py").is_file()


def test_in_the_writing_session_the_skill_is_written_already_and_listed_once(ip, folder):
    with registered_magics(ip) as instance:
        write(ip, "tea-notes", TEA)

        assert instance.session.skill("tea-notes").source == "written"
        assert [row for row in source_rows(ip) if row[1] == ".skills/written"] == [("written", ".skills/written", 1)]
        assert [d for d in instance.session.diagnostics() if d.code == "duplicate"] == []


def test_a_written_skill_wins_over_the_projects_before_and_after_a_restart(ip, folder):
    (folder / "skills" / "tea-notes").mkdir(parents=True)
    (folder / "skills" / "tea-notes" / "SKILL.md").write_text(PROJECT_TEA, encoding="utf-8")
    with registered_magics(ip) as instance:
        write(ip, "tea-notes", TEA)
        before = instance.session.skill("tea-notes")

    with registered_magics(ip) as restarted:
        after = restarted.session.skill("tea-notes")
        collisions = [d.message for d in restarted.session.diagnostics() if d.code == "collision"]

    assert before.folder == after.folder == str(folder / WRITE_FOLDER / "tea-notes")
    assert after.description.startswith("Writes tasting notes for a tea")
    assert collisions == ["skill 'tea-notes' from project is hidden by the one from written (written/tea-notes)"]


def test_a_session_added_folder_still_comes_first(ip, folder):
    (folder / "mine" / "tea-notes").mkdir(parents=True)
    (folder / "mine" / "tea-notes" / "SKILL.md").write_text(PROJECT_TEA, encoding="utf-8")
    with registered_magics(ip):
        write(ip, "tea-notes", TEA)
    with registered_magics(ip) as restarted:
        skills(ip, "add mine")
        labels = [label for label, _, _ in source_rows(ip)]

        assert restarted.session.skill("tea-notes").source == "session"
    assert labels[:2] == ["session", "written"]


def test_sources_named_in_skills_magic_sources_leave_written_out_unless_named(ip, folder, monkeypatch):
    with registered_magics(ip):
        write(ip, "tea-notes", TEA)

    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "project,bundled")  # what a notebook that must re-run anywhere says
    with registered_magics(ip) as restarted:
        assert "tea-notes" not in restarted.session.scan().names()
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "written,bundled")
    with registered_magics(ip) as restarted:
        assert restarted.session.skill("tea-notes").source == "written"


def test_a_skill_written_with_dir_is_a_source_for_its_session_only(ip, folder):
    with registered_magics(ip) as instance:
        write(ip, "tea-notes --dir drafts", TEA)
        assert instance.session.skill("tea-notes").source == "session"

    with registered_magics(ip) as restarted:
        assert "tea-notes" not in restarted.session.scan().names()
        skills(ip, "add drafts")
        assert restarted.session.skill("tea-notes").source == "session"


def test_the_python_api_finds_written_skills_in_a_new_session(tmp_path, monkeypatch):
    monkeypatch.delenv("SKILLS_MAGIC_SOURCES", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    SkillsSession(cwd=str(tmp_path)).write_skill("tea-notes", TEA)

    assert SkillsSession(cwd=str(tmp_path)).skill("tea-notes").source == "written"


# --- a scripted turns file, used up ------------------------------------------------------------------------------


def test_a_used_up_turns_file_says_how_to_start_it_again_and_that_starts_it(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    (tmp_path / "turns").mkdir()
    (tmp_path / "turns" / "one.yaml").write_text(ONE_TURN, encoding="utf-8")
    with registered_magics(ip):
        skills(ip, "model scripted turns/one.yaml")
        first = ip.run_cell_magic("skill", "run", "A question.").data()

        again = ip.run_cell_magic("skill", "run", "A question.")

        skills(ip, "model scripted turns/one.yaml")  # what the message says to do
        restarted = ip.run_cell_magic("skill", "run", "A question.").data()

    assert first["final_text"] == "The answer." and first["stop_reason"] == "end_turn"
    assert again.data()["stop_reason"] == "error"
    assert again.data()["error"] == ("the script has no turn left for request 2 (1 turns declared); "
                                     "`%skills model scripted turns/one.yaml` starts the file again")
    assert "`%skills model scripted turns/one.yaml` starts the file again" in again.text()
    assert restarted["final_text"] == "The answer." and restarted["stop_reason"] == "end_turn"


def test_a_turns_file_goes_on_across_runs_until_used_up(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    (tmp_path / "turns.yaml").write_text("turns:\n  - First answer.\n  - Second answer.\n", encoding="utf-8")
    with registered_magics(ip):
        skills(ip, "model scripted turns.yaml")
        answers = [ip.run_cell_magic("skill", "run", "A question.").data()["final_text"] for _ in range(2)]

    assert answers == ["First answer.", "Second answer."]  # never started over by itself


def test_rewind_starts_python_turns_again_and_the_message_says_so():
    model = ScriptedModel(["Only answer."])
    model.create({"messages": []})

    with pytest.raises(ModelError) as used_up:
        model.create({"messages": []})
    assert str(used_up.value) == ("the script has no turn left for request 2 (1 turns declared); "
                                  "`model.rewind()` starts its turns again")
    model.rewind()
    assert model.create({"messages": []})["content"][0]["text"] == "Only answer."
    with pytest.raises(ModelError, match="no turn left for request 2 "):
        model.create({"messages": []})


# --- across two real kernels ---------------------------------------------------------------------------------------


def run_notebook(folder: Path, *sources: str) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


def plain_text(cell) -> str:
    return "".join(o.get("data", {}).get("text/plain", "") + o.get("text", "") for o in cell.outputs)


SETUP = "%env SKILLS_MAGIC_SOURCES=written,bundled\n%env SKILLS_MAGIC_DB=.skills/test.sqlite\n%load_ext skills_magic"


def test_a_skill_written_in_one_kernel_is_found_by_a_fresh_kernel_in_the_same_folder(tmp_path):
    written = run_notebook(tmp_path, SETUP, f"%%skill write tea-notes\n{TEA}")
    assert plain_text(written.cells[1]) == "wrote .skills/written/tea-notes/SKILL.md: valid, 0 lint findings"

    fresh = run_notebook(tmp_path, SETUP, "%skills list", "%skills sources")

    groups = next(o for o in fresh.cells[1].outputs if LISTING_MIME in o.get("data", {}))["data"][LISTING_MIME]["groups"]
    assert [(g["source"], [s["name"] for s in g["skills"]]) for g in groups][0] == ("written", ["tea-notes"])
    assert plain_text(fresh.cells[2]).splitlines()[1].split() == ["1", "written", "1", ".skills/written"]
