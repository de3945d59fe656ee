"""skills.lock: the reviewed bytes of each skill. Only a confirmed review writes it; a reviewed skill whose files
differ is refused before anything runs, naming the file and both digests; nothing rewrites the lock to pass."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from notebook_setup import notebook_folder
from skillfiles import make_skill, reviewed_skill, write_file
from skills_magic.skills.catalog import Source
from skills_magic.safety.gate import unattended
from skills_magic.safety.manifest import LOCK_FILE, LOCK_HEADER, FileState, Manifest, ManifestMismatch, lock_path, skill_files
from skills_magic.session import SkillsSession

RUN = "print('ran')\n"


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    return notebook_folder(monkeypatch, tmp_path, lock=None)


@pytest.fixture
def folder(place) -> Path:
    """Skill `x` (version 2.1) with a script that leaves place/MARKER behind when it runs."""
    return reviewed_skill(place / "skills", f"open({str(place / 'MARKER')!r}, 'w').write('ran')\nprint('ran')\n")


def new_session(place: Path) -> SkillsSession:
    return SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))


def reviewed(place: Path) -> SkillsSession:
    session = new_session(place)
    _, _, written = session.review("x", confirm=lambda: True)
    assert written
    return session


# --- the files of a skill ---------------------------------------------------------------------------------------


def test_skill_files_lists_every_file_with_size_and_digest_sorted(folder):
    files = skill_files(str(folder))
    assert [f.path for f in files] == ["SKILL.md", "references/notes.md", "scripts/run.py"]
    notes = files[1]
    assert notes == FileState("references/notes.md", len(b"# Notes\n"), sha("# Notes\n"))


def test_skill_files_skips_caches_and_vcs_folders(folder):
    write_file(folder, "scripts/__pycache__/run.cpython-311.pyc", "cache")
    write_file(folder, ".git/HEAD", "ref: refs/heads/main\n")
    write_file(folder, ".ipynb_checkpoints/x.ipynb", "{}")
    write_file(folder, "scripts/old.pyc", "cache")
    assert [f.path for f in skill_files(str(folder))] == ["SKILL.md", "references/notes.md", "scripts/run.py"]


def test_a_symlink_is_recorded_as_what_it_points_to(folder):
    (folder / "data.txt").symlink_to("references/notes.md")  # inside the skill; a link leaving it is refused
    entry = {f.path: f for f in skill_files(str(folder))}["data.txt"]
    assert entry.sha256 == sha("# Notes\n") and entry.size == len("# Notes\n")


# --- where the lock lives ---------------------------------------------------------------------------------------


def test_the_lock_is_skills_lock_in_the_session_folder_unless_skills_magic_lock_says_otherwise(place, monkeypatch):
    assert lock_path(str(place), {}) == os.path.join(str(place), LOCK_FILE)
    assert lock_path(str(place), {"SKILLS_MAGIC_LOCK": ".scratch/skills.lock"}) == os.path.join(str(place), ".scratch/skills.lock")
    assert lock_path(str(place), {"SKILLS_MAGIC_LOCK": "/abs/elsewhere.lock"}) == "/abs/elsewhere.lock"
    assert new_session(place).manifest.path == os.path.join(str(place), LOCK_FILE)
    monkeypatch.setenv("SKILLS_MAGIC_LOCK", "pinned/my.lock")
    assert new_session(place).manifest.path == os.path.join(str(place), "pinned", "my.lock")


def test_a_review_writes_where_skills_magic_lock_points(folder, place, monkeypatch):
    monkeypatch.setenv("SKILLS_MAGIC_LOCK", ".scratch/skills.lock")
    reviewed(place)
    assert (place / ".scratch" / "skills.lock").is_file() and not (place / LOCK_FILE).exists()


# --- review -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("confirm", [None, lambda: False], ids=["no confirm", "confirm says no"])
def test_a_review_without_confirmation_writes_nothing(folder, place, confirm):
    session = new_session(place)
    skill, changes, written = session.review("x", confirm)
    assert skill.name == "x" and not written
    assert not (place / LOCK_FILE).exists()
    assert [(c.path, c.kind) for c in changes] == [
        ("SKILL.md", "added"), ("references/notes.md", "added"), ("scripts/run.py", "added")]
    assert not [r for r in session.audit() if r["event"] == "review"]


def test_a_confirmed_review_writes_a_readable_yaml_lock_with_the_header(folder, place):
    session = reviewed(place)
    text = (place / LOCK_FILE).read_text(encoding="utf-8")
    assert text.startswith(LOCK_HEADER)
    assert text.startswith("# skills.lock: the reviewed bytes of each skill")
    assert "%skills review NAME" in text.splitlines()[1]
    data = yaml.safe_load(text)
    entry = data["skills"]["x"]
    assert entry["version"] == "2.1"
    assert entry["reviewed"].endswith("Z") and "T" in entry["reviewed"]
    script = (folder / "scripts" / "run.py").read_bytes()
    assert entry["files"] == {
        "SKILL.md": {"sha256": sha((folder / "SKILL.md").read_bytes()), "bytes": (folder / "SKILL.md").stat().st_size},
        "references/notes.md": {"sha256": sha("# Notes\n"), "bytes": 8},
        "scripts/run.py": {"sha256": sha(script), "bytes": len(script)},
    }
    assert f"sha256: {sha(script)}" in text  # one line per digest: a person can read and diff it
    review, = [r for r in session.audit() if r["event"] == "review"]
    assert review["decided_by"] == "the reviewer" and review["detail"] == "3 files recorded in skills.lock"


def test_a_second_review_keeps_the_other_skills(folder, place):
    other = place / "skills" / "y"
    make_skill(other)
    session = reviewed(place)
    session.review("y", confirm=lambda: True)
    skills = yaml.safe_load((place / LOCK_FILE).read_text(encoding="utf-8"))["skills"]
    assert sorted(skills) == ["x", "y"]


def test_an_unchanged_review_asks_nothing_and_writes_nothing(folder, place):
    session = reviewed(place)
    before = (place / LOCK_FILE).read_bytes()
    asked = []
    _, changes, written = session.review("x", confirm=lambda: asked.append(1) or True)
    assert not written and asked == []
    assert {c.kind for c in changes} == {"unchanged"}
    assert (place / LOCK_FILE).read_bytes() == before


def test_a_review_shows_added_changed_removed_and_unchanged_files_with_both_digests(folder, place):
    session = reviewed(place)
    old_script = sha((folder / "scripts" / "run.py").read_bytes())
    old_notes = sha("# Notes\n")
    write_file(folder, "scripts/run.py", "print('new')\n")
    write_file(folder, "scripts/extra.sh", "echo extra\n")
    (folder / "references" / "notes.md").unlink()
    _, changes, written = session.review("x")
    assert not written
    by_path = {c.path: c for c in changes}
    assert [c.path for c in changes] == ["SKILL.md", "references/notes.md", "scripts/extra.sh", "scripts/run.py"]
    assert by_path["SKILL.md"].kind == "unchanged" and by_path["SKILL.md"].reviewed == by_path["SKILL.md"].current
    assert (by_path["references/notes.md"].kind, by_path["references/notes.md"].reviewed,
            by_path["references/notes.md"].current) == ("removed", old_notes, None)
    assert (by_path["scripts/extra.sh"].kind, by_path["scripts/extra.sh"].reviewed,
            by_path["scripts/extra.sh"].current) == ("added", None, sha("echo extra\n"))
    assert (by_path["scripts/run.py"].kind, by_path["scripts/run.py"].reviewed,
            by_path["scripts/run.py"].current) == ("changed", old_script, sha("print('new')\n"))


# --- checks before a run ----------------------------------------------------------------------------------------


def test_a_never_reviewed_skill_is_not_checked(folder, place):
    manifest = Manifest(str(place / LOCK_FILE))
    assert manifest.check("x", str(folder)) is False
    write_file(folder, "scripts/run.py", "print('anything')\n")
    assert manifest.check("x", str(folder)) is False
    session = new_session(place)
    session.add_rule("allow", "x:scripts/*", writable=[str(place)])  # its MARKER is written in the project
    assert session.gate().run_script(session.skill("x"), "scripts/run.py", [], "", unattended).run.exit_code == 0


def test_another_skills_review_does_not_check_this_one(folder, place):
    make_skill(place / "skills" / "y")
    session = new_session(place)
    session.review("y", confirm=lambda: True)
    write_file(folder, "scripts/run.py", "print('anything')\n")
    assert session.manifest.check("x", str(folder)) is False


def test_a_reviewed_skill_with_its_reviewed_bytes_runs(folder, place):
    session = reviewed(place)
    assert session.manifest.check("x", str(folder)) is True
    session.add_rule("allow", "x:scripts/*", writable=[str(place)])  # its MARKER is written in the project
    outcome = session.gate().run_script(session.skill("x"), "scripts/run.py", [], "", unattended)
    assert outcome.allowed and outcome.run.stdout == "ran\n" and (place / "MARKER").exists()


def test_a_script_changed_after_review_is_refused_naming_the_file_and_both_digests(folder, place):
    session = reviewed(place)
    session.add_rule("allow", "x:scripts/*", writable=[str(place)])  # its MARKER is written in the project
    lock_before = (place / LOCK_FILE).read_bytes()
    script = folder / "scripts" / "run.py"
    old = sha(script.read_bytes())
    with open(script, "a", encoding="utf-8") as handle:
        handle.write("# an unreviewed change\n")
    new = sha(script.read_bytes())
    outcome = session.gate().run_script(session.skill("x"), "scripts/run.py", [], "", unattended)
    assert not outcome.allowed and outcome.run is None and outcome.decided_by == "skills.lock"
    assert outcome.error == (f"refused: x/scripts/run.py is not the reviewed file: reviewed sha256 {old}, now {new}; "
                             "review it again with %skills review x")
    assert not (place / "MARKER").exists()
    assert (place / LOCK_FILE).read_bytes() == lock_before  # nothing recomputed the manifest to pass
    row, = [r for r in session.audit() if r["event"] == "decision"]
    assert (row["decision"], row["decided_by"], row["digest"]) == ("deny", "skills.lock", new)
    assert old in row["detail"] and new in row["detail"]
    assert not [r for r in session.audit() if r["event"] == "run"]


def test_a_changed_file_other_than_the_script_also_refuses_the_run(folder, place):
    session = reviewed(place)
    write_file(folder, "references/notes.md", "# Notes, edited\n")
    result = session.run_script("x", "scripts/run.py")  # even the user's own command
    assert result.stop_reason == "denied" and "x/references/notes.md is not the reviewed file" in result.error
    assert sha("# Notes\n") in result.error and sha("# Notes, edited\n") in result.error
    assert not (place / "MARKER").exists()


def test_a_file_added_after_review_is_refused(folder, place):
    session = reviewed(place)
    lock_before = (place / LOCK_FILE).read_bytes()
    write_file(folder, "scripts/helper.py", "print('helper')\n")
    with pytest.raises(ManifestMismatch, match=r"x/scripts/helper.py is new since the review \(sha256 "
                                               + sha("print('helper')\n")):
        session.manifest.check("x", str(folder))
    result = session.run_script("x", "scripts/run.py")
    assert result.stop_reason == "denied" and "is new since the review" in result.error
    assert not (place / "MARKER").exists()
    assert (place / LOCK_FILE).read_bytes() == lock_before


def test_a_file_removed_after_review_is_refused(folder, place):
    session = reviewed(place)
    lock_before = (place / LOCK_FILE).read_bytes()
    (folder / "references" / "notes.md").unlink()
    with pytest.raises(ManifestMismatch, match=r"x/references/notes.md was removed after the review \(sha256 "
                                               + sha("# Notes\n")):
        session.manifest.check("x", str(folder))
    assert session.run_script("x", "scripts/run.py").stop_reason == "denied"
    assert not (place / "MARKER").exists()
    assert (place / LOCK_FILE).read_bytes() == lock_before


def test_a_new_review_accepts_the_new_bytes(folder, place):
    session = reviewed(place)
    write_file(folder, "scripts/run.py", "print('reviewed again')\n")
    assert session.run_script("x", "scripts/run.py").stop_reason == "denied"
    _, _, written = session.review("x", confirm=lambda: True)
    assert written
    assert session.run_script("x", "scripts/run.py").final_text == "reviewed again\n"


def test_an_unreadable_lock_refuses_every_run(folder, place):
    (place / LOCK_FILE).write_text("skills: [\n", encoding="utf-8")
    session = new_session(place)
    result = session.run_script("x", "scripts/run.py")
    assert result.stop_reason == "denied" and "skills.lock cannot be read" in result.error
    assert not (place / "MARKER").exists()


def test_a_lock_without_a_skills_mapping_refuses(folder, place):
    (place / LOCK_FILE).write_text("just: text\n", encoding="utf-8")
    with pytest.raises(ManifestMismatch, match="has no `skills` mapping"):
        Manifest(str(place / LOCK_FILE)).check("x", str(folder))


def test_a_hand_edited_lock_entry_refuses_the_run_instead_of_crashing(folder, place):
    (place / LOCK_FILE).write_text("skills:\n  x:\n    files:\n      SKILL.md: abc\n", encoding="utf-8")
    session = new_session(place)
    result = session.run_script("x", "scripts/run.py")
    assert result.stop_reason == "denied"
    assert not (place / "MARKER").exists()


def test_an_unreviewed_script_in_a_skipped_folder_is_refused(folder, place):
    session = reviewed(place)
    write_file(folder, "scripts/__pycache__/payload.sh", f"touch {place / 'PAYLOAD'}\n")
    result = session.run_script("x", "scripts/__pycache__/payload.sh")
    assert result.stop_reason == "denied"
    assert not (place / "PAYLOAD").exists()


def test_the_lock_is_written_whole_never_half(folder, place):
    reviewed(place)
    leftovers = [p.name for p in place.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
