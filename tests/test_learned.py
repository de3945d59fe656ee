"""Learned skills (issue 18): the append-only store, the `learned` source (last, never hiding another), the
`manage_skill` tool through the real agent loop on the scripted model, the person's magics, and the gate."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill

from skills_magic.models.scripted import ScriptedModel
from skills_magic.records.learned import LearnedStore
from skills_magic.session import SkillsSession

LEARNED = os.path.join(".skills", "learned", "skills")
DESCRIPTION = "Summarises the columns of a CSV file. Use when the user asks what a CSV file holds."
SKILL = f"---\nname: tidy-notes\ndescription: {DESCRIPTION}\n---\n# Tidy notes\n\nSort the notes by date.\n"
UPDATED = SKILL.replace("Sort the notes by date.", "Sort the notes by date, newest first.")
SCRIPT = "#!/usr/bin/env python3\nprint('tidied')\n"


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    notebook_folder(monkeypatch, tmp_path, sources="project,bundled,learned")
    make_skill(tmp_path / "skills" / "mine")  # a project skill a person wrote
    return tmp_path


def new_session(place: Path) -> SkillsSession:
    return SkillsSession(cwd=str(place))


def manage(action: str, name: str, **fields) -> dict:
    return {"name": "manage_skill", "input": {"action": action, "name": name, **fields}}


def run_calls(session: SkillsSession, *calls: dict):
    """One run whose model makes `calls` (one turn each), then ends; the run's tool calls."""
    session.model_client = ScriptedModel([*({"tool_use": [call]} for call in calls), "done"])
    return session.run("Keep what you learned.").tool_calls


# --- the store ----------------------------------------------------------------------------------------------


def test_versions_are_appended_kept_and_written_as_a_folder(place):
    session = new_session(place)
    store = session.learning.store
    first = store.write("tidy-notes", "create", {"SKILL.md": SKILL, "scripts/tidy.py": SCRIPT}, "model-x", "run-1", "why")
    second = store.write("tidy-notes", "update", {"SKILL.md": UPDATED}, "model-x", None, "newest first")
    assert (first.version, second.version) == (1, 2)
    assert [(v.version, v.action, v.author, v.run, v.reason) for v in store.versions("tidy-notes")] == [
        (1, "create", "model-x", "run-1", "why"), (2, "update", "model-x", None, "newest first")]
    assert store.version("tidy-notes", 1).files == {"SKILL.md": SKILL, "scripts/tidy.py": SCRIPT}
    folder = place / LEARNED / "tidy-notes"
    assert (folder / "SKILL.md").read_text() == UPDATED and not (folder / "scripts" / "tidy.py").exists()
    for statement in ("UPDATE learned_versions SET author = 'user'", "DELETE FROM learned_versions"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            session.database.connect().execute(statement)
    store.write("tidy-notes", "delete", {}, "model-x")
    assert not folder.exists() and store.names() == ["tidy-notes"] and store.current() == {}


def test_learned_skills_survive_a_restart_and_the_database_is_the_truth(place):
    new_session(place).learning.store.write("tidy-notes", "create", {"SKILL.md": SKILL}, "model-x")
    (place / LEARNED / "tidy-notes" / "SKILL.md").write_text("hand-edited", encoding="utf-8")
    (place / LEARNED / "stray").mkdir()
    again = new_session(place)  # a new kernel in the same folder
    assert again.learning.store.current()["tidy-notes"].version == 1
    assert (place / LEARNED / "tidy-notes" / "SKILL.md").read_text() == SKILL and not (place / LEARNED / "stray").exists()
    found = again.skill("tidy-notes")
    assert found.source == "learned"


# --- the source: last, and never hiding another -------------------------------------------------------------


def test_a_learned_skill_named_like_another_is_the_one_hidden(place):
    store = LearnedStore(new_session(place).database, str(place))
    for name in ("csv-profile", "mine"):  # a bundled and a project skill's names, written past the tool
        store.write(name, "create", {"SKILL.md": SKILL.replace("tidy-notes", name)}, "model-x")
    store.write("tidy-notes", "create", {"SKILL.md": SKILL}, "model-x")
    session = new_session(place)
    scan = session.scan()
    assert scan.get("csv-profile").source == "bundled" and scan.get("mine").source == "project"
    shadowed = {s.skill.name: s.skill.source for s in scan.shadowed}
    assert shadowed == {"csv-profile": "learned", "mine": "learned"}
    collisions = [d for d in scan.diagnostics if d.code == "collision"]
    assert {os.path.basename(os.path.dirname(d.path)) for d in collisions} >= {"csv-profile", "mine"}
    labels = [s.source for s in scan.skills]
    assert labels[-1] == "learned" and labels.index("learned") > max(i for i, label in enumerate(labels) if label != "learned")
    _, listing, text = session.listing(budget=0)
    assert [label for label, _ in listing.groups][-1] == "learned" and text.rindex("## learned") > text.rindex("## bundled")


# --- the tool, through the agent loop -----------------------------------------------------------------------


def test_the_tool_is_offered_only_when_learning_is_on(place):
    session = new_session(place)
    offered = []

    def turn(request):
        offered.append([t["name"] for t in request["tools"]])
        return "done"

    session.model_client = ScriptedModel([turn, turn])
    session.run("task")
    session.learning.turn(True)
    session.run("task")
    assert "manage_skill" not in offered[0] and "manage_skill" in offered[1]


@pytest.mark.parametrize("call, code, words", [
    (manage("create", "csv-profile", content=SKILL.replace("tidy-notes", "csv-profile")), "NameCollision", "bundled"),
    (manage("create", "mine", content=SKILL.replace("tidy-notes", "mine")), "NameCollision", "project"),
    (manage("update", "csv-profile", content=SKILL), "BuiltInImmutable", "bundled"),
    (manage("delete", "csv-profile"), "BuiltInImmutable", "bundled"),
    (manage("update", "mine", content=SKILL), "FileSkillImmutable", "project"),
    (manage("delete", "mine"), "FileSkillImmutable", "project"),
    (manage("create", "tidy-notes", content="---\nname: tidy-notes\n---\nbody\n"), "InvalidSkill", "description"),
    (manage("create", "tidy-notes", content=SKILL.replace("name: tidy-notes", "name: other-name")), "InvalidSkill",
     "name"),
    (manage("create", "tidy-notes", content=SKILL, files={"../escape.py": SCRIPT}), "InvalidSkill", "relative"),
    (manage("update", "nothing-here", content=SKILL), "NotFound", "nothing-here"),
    (manage("history", "nothing-here"), "NotFound", "nothing-here"),
    (manage("lint", "nothing-here"), "NotFound", "nothing-here"),
])
def test_each_refusal_reaches_the_model_named_first(place, call, code, words):
    session = new_session(place)
    session.learning.turn(True)
    (refused,) = run_calls(session, call)
    assert refused.is_error and refused.error.startswith(f"{code}: ") and words in refused.error
    assert session.learning.store.names() == [] and not any(r["event"] == "learned" for r in session.audit())


def test_an_invalid_skill_is_refused_with_its_lint_findings(place):
    session = new_session(place)
    session.learning.turn(True)
    vague = SKILL.replace(DESCRIPTION, "<b>I can help you</b>")
    (refused,) = run_calls(session, manage("create", "tidy-notes", content=vague))
    assert refused.error.startswith("InvalidSkill: ") and "[xml-tags]" in refused.error


def test_a_model_creates_updates_and_deletes_its_skill_audited_and_versioned(place):
    session = new_session(place)
    session.learning.turn(True)
    calls = run_calls(session, manage("create", "tidy-notes", content=SKILL, files={"scripts/tidy.py": SCRIPT},
                                      reason="notes keep coming unsorted"),
                      manage("create", "tidy-notes", content=SKILL),
                      manage("update", "tidy-notes", content=UPDATED, reason="newest first"),
                      manage("lint", "tidy-notes"), manage("history", "tidy-notes"))
    assert [c.is_error for c in calls] == [False, True, False, False, False]
    assert calls[1].error.startswith("NameCollision: ") and "update" in calls[1].error
    model = session.last_run.model
    versions = session.learning.history("tidy-notes")
    assert [(v.action, v.author, v.reason) for v in versions] == [
        ("create", model, "notes keep coming unsorted"), ("update", model, "newest first")]
    assert versions[1].files == {"SKILL.md": UPDATED, "scripts/tidy.py": SCRIPT}  # files kept when none are given
    assert session.skill("tidy-notes").source == "learned"
    (deleted,) = run_calls(session, manage("delete", "tidy-notes", reason="not useful"))
    assert not deleted.is_error and session.scan().get("tidy-notes") is None
    audited = [(r["skill"], r["detail"].split(" by ")[0]) for r in session.audit() if r["event"] == "learned"]
    assert audited == [("tidy-notes", "create version 1"), ("tidy-notes", "update version 2"),
                       ("tidy-notes", "delete version 3")]


def test_a_learned_skills_script_is_denied_unattended_and_never_reviewed(place):
    session = new_session(place)
    session.learning.turn(True)
    run_calls(session, manage("create", "tidy-notes", content=SKILL, files={"scripts/tidy.py": SCRIPT}))
    (call,) = run_calls(session, {"name": "run_skill_script", "input": {"skill": "tidy-notes", "path": "scripts/tidy.py"}})
    assert call.is_error and "tidied" not in call.error
    decisions = [r for r in session.audit() if r["event"] == "decision"]
    assert [(r["skill"], r["path"], r["decision"]) for r in decisions] == [("tidy-notes", "scripts/tidy.py", "deny")]
    assert not session.manifest.path or not os.path.exists(session.manifest.path)  # skills.lock untouched


# --- the person's commands ----------------------------------------------------------------------------------


def test_history_diff_revert_and_promote_through_the_shell(ip, place):
    with registered_magics(ip) as magics:
        assert ip.run_line_magic("skills", "learn on").data()["enabled"] is True
        session = magics.session
        run_calls(session, manage("create", "tidy-notes", content=SKILL, reason="first"),
                  manage("update", "tidy-notes", content=UPDATED, reason="newest first"))
        listed = ip.run_line_magic("skills", "learned").data()["skills"]
        assert [(r["name"], r["versions"], r["action"], r["state"]) for r in listed] == [("tidy-notes", 2, "update", "listed")]
        history = ip.run_line_magic("skills", "history tidy-notes")
        assert [v["version"] for v in history.data()["versions"]] == [1, 2] and "newest first" in history.text()
        assert "turns" in ip.run_line_magic("skills", "history").data()  # no NAME: still the conversation
        diff = ip.run_line_magic("skills", "diff tidy-notes 1 2")
        assert "-Sort the notes by date." in diff.text() and "+Sort the notes by date, newest first." in diff.text()
        reverted = ip.run_line_magic("skills", "revert tidy-notes 1").data()
        assert reverted["version"] == 3 and session.learning.history("tidy-notes")[-1].author == "user"
        assert (place / LEARNED / "tidy-notes" / "SKILL.md").read_text() == SKILL
        promoted = ip.run_line_magic("skills", "promote tidy-notes")
        assert promoted.data()["path"] == os.path.join("skills", "tidy-notes")
        assert (place / "skills" / "tidy-notes" / "SKILL.md").read_text() == SKILL
        assert session.skill("tidy-notes").source == "project"  # a file skill now; the learned one is hidden
        assert ip.run_line_magic("skills", "learned").data()["skills"][0]["state"] == "hidden by project"
        from IPython.core.error import UsageError

        with pytest.raises(UsageError, match="already exists"):
            ip.run_line_magic("skills", "promote tidy-notes")
        with pytest.raises(UsageError, match="has no version 9"):
            ip.run_line_magic("skills", "diff tidy-notes 1 9")
        with pytest.raises(UsageError, match="no learned skill named 'nope'"):
            ip.run_line_magic("skills", "history nope")


def test_eval_compares_with_an_earlier_learned_version_and_without_the_skill(ip, tmp_path, monkeypatch):
    """Issue 18, point 5: `--compare learned:NAME@V` and `--compare without:NAME`, with clear errors for bad values."""
    from IPython.core.error import UsageError
    from notebook_setup import notebook_folder, registered_magics

    from skills_magic.records.learned import USER

    notebook_folder(monkeypatch, tmp_path, sources="bundled,learned")
    (tmp_path / "set.yaml").write_text(
        "prompts:\n  - {id: D1, category: direct, expected: [tidy-columns], prompt: Rename columns with spaces to snake_case.}\n"
        "  - {id: P1, category: paraphrase, expected: [tidy-columns], prompt: Tidy the spreadsheet export header.}\n"
        "  - {id: N1, category: negative, expect_none: true, prompt: Write a haiku about the sea.}\n", encoding="utf-8")
    first = "---\nname: tidy-columns\ndescription: Rename columns to snake_case. Use when columns have spaces.\n---\nBody.\n"
    second = ("---\nname: tidy-columns\ndescription: Rename columns to snake_case. Use when columns have spaces or a "
              "spreadsheet export header needs tidying.\n---\nBody.\n")
    with registered_magics(ip) as magics:
        store = magics.session.learning.store
        store.write("tidy-columns", "create", {"SKILL.md": first}, USER, None, "first")
        store.write("tidy-columns", "update", {"SKILL.md": second}, USER, None, "second")
        store.materialise()
        ip.run_line_magic("skills", "model keywords")
        older = ip.run_line_magic("skills", "eval set.yaml --runs 1 --compare learned:tidy-columns@1").data()
        assert [r["label"] for r in older["reports"]] == ["catalog", ".skills/learned/versions/tidy-columns@1"]
        assert older["differences"] == ["P1"]  # the update's words catch the paraphrase; version 1 does not
        without = ip.run_line_magic("skills", "eval set.yaml --runs 1 --compare without:tidy-columns").data()
        assert without["reports"][1]["label"] == "without tidy-columns" and set(without["differences"]) == {"D1", "P1"}
        for bad in ("learned:tidy-columns@9", "learned:tidy-columns@one", "without:no-such-skill"):
            with pytest.raises(UsageError):
                ip.run_line_magic("skills", f"eval set.yaml --runs 1 --compare {bad}")
