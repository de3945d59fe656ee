"""Copy-on-write runs and `%skills apply`: a sandboxed script changes, adds and deletes files in the notebook's folder,
the project stays byte for byte as it was, the run's result and view list the changes with sizes and diffs, and only
the user's `%skills apply` copies them in, refusing control files, escapes and files changed on disk since the run.
Also: everything after `%%skill run --no-model --script PATH NAME` belongs to the script. Real sandboxed runs throughout."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill, tree, write_file

from skills_magic.safety.working import changes as changes_module
from skills_magic.skills.catalog import Source
from skills_magic.safety.working.changes import (
    REFUSED_AGAIN,
    REFUSED_CONTROL,
    REFUSED_GIT,
    REFUSED_LINK,
    REFUSED_OUTSIDE,
    REFUSED_SINCE,
    apply_changes,
    run_changes,
)
from skills_magic.cli import main
from skills_magic.notebook.views import ApplyView, RunView
from skills_magic.errors import ChangeError, RunNotFound, UnknownChange
from skills_magic.models.scripted import ScriptedModel
from skills_magic.safety.sandbox import overlay_availability
from skills_magic.session import MAX_LISTED_OUTPUTS, SkillsSession

OVERLAY, WHY_NOT = overlay_availability()
needs_overlay = pytest.mark.skipif(not OVERLAY, reason=f"runs see the working folder read-only here: {WHY_NOT}")
RUN_MIME = "application/vnd.skills-magic.run+json"

CHANGE = """import os
open("new.txt", "w").write("brand <b>new</b>\\n")
with open("existing.txt", "a") as handle:
    handle.write("appended\\n")
os.remove("gone.txt")
open("same.txt", "w").write("same\\n")  # the bytes it already had: a copy-up, not a change
print("done")
"""
ARGV = "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    """The notebook's folder: a few project files, the skill x (inside it, as a project's skills often are)."""
    notebook_folder(monkeypatch, tmp_path, db=None, lock=None, sources="path", path=tmp_path / "skills")
    (tmp_path / "existing.txt").write_text("line one\n")
    (tmp_path / "gone.txt").write_text("goodbye\n")
    (tmp_path / "same.txt").write_text("same\n")
    x = tmp_path / "skills" / "x"
    make_skill(x, name="x")
    write_file(x, "scripts/change.py", CHANGE)
    write_file(x, "scripts/with_server.py", ARGV)
    write_file(x, "scripts/format_bibtex.py", ARGV)
    return tmp_path


def session_in(place: Path) -> SkillsSession:
    session = SkillsSession(sources=[Source("session", str(place / "skills"), True)], cwd=str(place))
    session.add_rule("allow", "x:scripts/*")
    return session


def script_at(place: Path, name: str, body: str) -> str:
    write_file(place / "skills" / "x", f"scripts/{name}", body)
    return f"scripts/{name}"


@pytest.fixture
def magics(ip, place):
    with registered_magics(ip) as instance:
        yield instance


def by_path(changes) -> dict[str, object]:
    return {c.path: c for c in changes}


# --- the run: copy-on-write, listed, shown ---------------------------------------------------------------------


@needs_overlay
def test_a_run_leaves_the_project_untouched_and_lists_what_it_added_changed_and_deleted(place):
    session = session_in(place)
    before = tree(place)
    result = session.run_script("x", "scripts/change.py")
    assert result.stop_reason == "no_model", result.error
    assert tree(place) == before  # byte for byte, modes too: nothing reached the project
    assert result.run_id and result.run_id.startswith("run-")
    found = by_path(result.changes)
    assert [(c.kind, c.path, c.bytes) for c in result.changes] == [
        ("changed", "existing.txt", 18), ("deleted", "gone.txt", 8), ("added", "new.txt", 17)]  # same.txt: no change
    assert found["existing.txt"].diff == ("--- a/existing.txt\n+++ b/existing.txt\n@@ -1 +1,2 @@\n line one\n+appended\n")
    assert found["gone.txt"].diff.endswith("-goodbye\n") and found["gone.txt"].file is None
    assert found["new.txt"].read_text() == "brand <b>new</b>\n" and found["new.txt"].read_bytes() == b"brand <b>new</b>\n"
    assert all(c.run_id == result.run_id for c in result.changes)
    with pytest.raises(ChangeError, match="deleted by the run"):
        found["gone.txt"].read_bytes()


@needs_overlay
def test_the_run_view_shows_the_changes_with_diffs_escaped_and_the_run_id_only_in_metadata(place):
    session = session_in(place)
    result = session.run_script("x", "scripts/change.py")
    bundle, metadata = RunView(result, 0.5)._repr_mimebundle_()
    text, html, data = bundle["text/plain"], bundle["text/html"], bundle[RUN_MIME]
    assert "changes in the working folder (not applied: %skills apply last):" in text
    assert "  changed  existing.txt (18 bytes)" in text and "      +appended" in text
    assert "  deleted  gone.txt (8 bytes)" in text and "  added    new.txt (17 bytes)" in text
    assert "<pre>" in html and "+brand &lt;b&gt;new&lt;/b&gt;" in html and "<b>new</b>" not in html
    assert data["changes"] == [c.to_dict() for c in result.changes]
    assert {k: data["changes"][0][k] for k in ("kind", "path", "bytes")} == {"kind": "changed", "path": "existing.txt",
                                                                           "bytes": 18}
    for shown in (text, html, json.dumps(data)):  # the same on every run and clone: no run id, no absolute path
        assert result.run_id not in shown and str(place) not in shown
    meta = metadata[RUN_MIME]
    assert meta["runs"] == [result.run_id] and meta["apply"] == [f"%skills apply {result.run_id}"]
    assert meta["change_files"]["new.txt"] == os.path.join(place, ".skills", "runs", result.run_id, "changes", "new.txt")


def test_a_run_that_changes_nothing_keeps_its_view_as_before(place):
    session = session_in(place)
    result = session.run_script("x", "scripts/with_server.py")
    data = RunView(result).data()
    assert result.changes == [] and "changes" not in data and "changes in the working folder" not in RunView(result).text()


@needs_overlay
def test_a_model_is_told_its_writes_are_pending_with_the_run_to_apply(place):
    session = session_in(place)
    call = {"name": "run_skill_script", "input": {"skill": "x", "path": "scripts/change.py"}}
    session.model_client = ScriptedModel([{"tool_use": [call]}, "done"])
    result = session.run("Change the files.", "x")
    tool_result = next(block["content"] for m in result.messages if m["role"] == "user" for block in m["content"]
                       if block.get("type") == "tool_result")
    apply = f"the user applies with %skills apply {result.run_id}]"
    assert tool_result.startswith("done\n")
    assert f"\n[changed existing.txt (18 bytes) in the working folder: not applied; {apply}" in tool_result
    assert f"\n[deleted gone.txt (8 bytes) in the working folder: not applied; {apply}" in tool_result
    assert f"\n[added new.txt (17 bytes) in the working folder: not applied; {apply}" in tool_result
    assert "scripts run later see the working folder without these changes" in tool_result
    assert [c.path for c in result.changes] == ["existing.txt", "gone.txt", "new.txt"]
    assert session.apply("last").applied and (place / "new.txt").exists()


@needs_overlay
def test_apply_last_applies_every_script_run_of_a_model_run_and_refuses_their_conflicts(place):
    session = session_in(place)
    first = script_at(place, "first.py", "open('a.txt', 'w').write('first\\n')\n")
    second = script_at(place, "second.py", "open('a.txt', 'w').write('second\\n')\nopen('b.txt', 'w').write('b\\n')\n")
    calls = [{"name": "run_skill_script", "input": {"skill": "x", "path": p}} for p in (first, second)]
    session.model_client = ScriptedModel([{"tool_use": calls}, "done"])
    result = session.run("Write a and b.", "x")
    runs = list(dict.fromkeys(c.run_id for c in result.changes))
    assert len(runs) == 2 and result.run_id == runs[1]
    assert [(c.run_id, c.path) for c in session.changes("last")] == [(runs[0], "a.txt"), (runs[1], "a.txt"), (runs[1], "b.txt")]
    report = session.apply("last")
    assert report.runs == runs
    assert [(c.run_id, c.path) for c in report.applied] == [(runs[0], "a.txt"), (runs[1], "b.txt")]
    assert [(c.run_id, c.path, why) for c, why in report.refused] == [(runs[1], "a.txt", REFUSED_SINCE)]
    assert (place / "a.txt").read_text() == "first\n"  # the runs did not see each other: the second never overwrites


@needs_overlay
def test_a_model_told_of_many_changes_gets_the_first_ones_and_a_count(place):
    session = session_in(place)
    path = script_at(place, "many.py", "for n in range(53):\n    open(f'file{n:02}.txt', 'w').write('x' * n)\n")
    session.model_client = ScriptedModel([{"tool_use": [{"name": "run_skill_script", "input": {"skill": "x", "path": path}}]},
                                          "done"])
    result = session.run("Write many files.", "x")
    tool_result = next(block["content"] for m in result.messages if m["role"] == "user" for block in m["content"]
                       if block.get("type") == "tool_result")
    assert tool_result.count("in the working folder: not applied; the user applies") == MAX_LISTED_OUTPUTS
    assert "[... and 3 more changes (153 bytes) in the working folder not listed: not applied]" in tool_result
    assert len(result.changes) == 53


@needs_overlay
def test_a_recorded_run_replays_though_its_run_id_differs(place):
    session = session_in(place)
    call = {"name": "run_skill_script", "input": {"skill": "x", "path": "scripts/change.py"}}
    session.model_client = ScriptedModel([{"tool_use": [call]}, "done"])
    first = session.run("Change the files.", "x", record="run.json")
    cassette = (place / "run.json").read_text()
    assert "${SKILLS_MAGIC_RUN_1}" in cassette and first.run_id not in cassette
    second = session.run("Change the files.", "x", replay="run.json")
    assert second.ok and second.run_id != first.run_id and len(second.changes) == 3


# --- %skills apply ---------------------------------------------------------------------------------------------


@needs_overlay
def test_skills_apply_copies_every_change_into_the_project_and_audits_each(ip, magics, place):
    ip.run_cell_magic("skill", "run --no-model --script scripts/change.py x", "\n")
    view = ip.run_line_magic("skills", "apply last")
    assert isinstance(view, ApplyView)
    assert view.text().splitlines() == [
        "applied 3 changes to the working folder",
        "  applied  changed  existing.txt (18 bytes)",
        "  applied  deleted  gone.txt (8 bytes)",
        "  applied  added    new.txt (17 bytes)",
    ]
    assert (place / "existing.txt").read_text() == "line one\nappended\n"
    assert not (place / "gone.txt").exists() and (place / "new.txt").read_text() == "brand <b>new</b>\n"
    assert (place / "same.txt").read_text() == "same\n"
    rows = [r for r in magics.session.audit() if r["event"] == "apply"]
    assert [(r["path"], r["decision"], r["decided_by"]) for r in rows] == [
        (p, "allow", "the user: %skills apply") for p in ("existing.txt", "gone.txt", "new.txt")]
    assert rows[-1]["digest"] == hashlib.sha256(b"brand <b>new</b>\n").hexdigest()
    run_id = magics.session.last_run.run_id
    assert run_id not in json.dumps(view.data()) and view._repr_mimebundle_()[1] == {
        "application/vnd.skills-magic.apply+json": {"runs": [run_id]}}


@needs_overlay
def test_applying_twice_says_already_applied(ip, magics, place):
    ip.run_cell_magic("skill", "run --no-model --script scripts/change.py x", "\n")
    run_id = magics.session.last_run.run_id
    ip.run_line_magic("skills", f"apply {run_id}")
    after = tree(place)
    again = ip.run_line_magic("skills", f"apply {run_id}")
    assert not again.report.applied
    assert [(c.path, why) for c, why in again.report.refused] == [
        ("existing.txt", REFUSED_AGAIN), ("gone.txt", REFUSED_AGAIN), ("new.txt", REFUSED_AGAIN)]
    assert "  refused  added    new.txt: already applied" in again.text()
    assert tree(place) == after
    assert [c.applied for c in magics.session.changes(run_id)] == [True, True, True]


@needs_overlay
def test_skills_apply_with_a_path_applies_only_that_one(ip, magics, place):
    ip.run_cell_magic("skill", "run --no-model --script scripts/change.py x", "\n")
    run_id = magics.session.last_run.run_id
    view = ip.run_line_magic("skills", f"apply {run_id} new.txt")
    assert [c.path for c in view.report.applied] == ["new.txt"] and not view.report.refused
    assert (place / "new.txt").exists() and (place / "gone.txt").exists()
    assert (place / "existing.txt").read_text() == "line one\n"
    rest = ip.run_line_magic("skills", f"apply {run_id}")
    assert [c.path for c in rest.report.applied] == ["existing.txt", "gone.txt"]
    assert [(c.path, why) for c, why in rest.report.refused] == [("new.txt", REFUSED_AGAIN)]


@needs_overlay
def test_a_path_the_run_did_not_change_is_a_clear_error_naming_the_changed_ones(ip, magics, place):
    ip.run_cell_magic("skill", "run --no-model --script scripts/change.py x", "\n")
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("skills", "apply last same.txt")
    message = str(caught.value)
    assert "did not change 'same.txt'" in message and "existing.txt, gone.txt, new.txt" in message
    assert "\n" not in message and (place / "existing.txt").read_text() == "line one\n"


@needs_overlay
def test_an_unknown_run_id_is_a_one_line_error_listing_recent_runs(ip, magics, place):
    with pytest.raises(UsageError, match="no script of this session has run in a sandbox yet; there are no runs yet"):
        ip.run_line_magic("skills", "apply last")
    ip.run_cell_magic("skill", "run --no-model --script scripts/change.py x", "\n")
    run_id = magics.session.last_run.run_id
    for asked in ("run-nope1234", "../../etc", "run-../x"):
        with pytest.raises(UsageError) as caught:
            ip.run_line_magic("skills", f"apply {asked}")
        assert str(caught.value) == f"no run named {asked!r} in .skills/runs; recent runs: {run_id}"


@needs_overlay
def test_a_file_changed_on_disk_after_the_run_started_is_refused(place):
    session = session_in(place)
    result = session.run_script("x", "scripts/change.py")
    (place / "existing.txt").write_text("the user's own edit\n")  # after the run: the run's version is stale
    (place / "new.txt").write_text("made by hand meanwhile\n")
    report = session.apply(result.run_id)
    refused = {c.path: why for c, why in report.refused}
    assert refused == {"existing.txt": REFUSED_SINCE, "new.txt": REFUSED_SINCE}
    assert [c.path for c in report.applied] == ["gone.txt"]
    assert (place / "existing.txt").read_text() == "the user's own edit\n"
    assert (place / "new.txt").read_text() == "made by hand meanwhile\n"
    rows = [r for r in session.audit() if r["event"] == "apply" and r["decision"] == "deny"]
    assert {r["path"] for r in rows} == {"existing.txt", "new.txt"} and REFUSED_SINCE in rows[0]["detail"]


@needs_overlay
def test_a_deleted_file_edited_on_disk_since_is_kept(place):
    session = session_in(place)
    result = session.run_script("x", "scripts/change.py")
    (place / "gone.txt").write_text("still needed\n")
    report = session.apply(result.run_id, ["gone.txt"])
    assert [(c.path, why) for c, why in report.refused] == [("gone.txt", REFUSED_SINCE)]
    assert (place / "gone.txt").read_text() == "still needed\n"


@needs_overlay
def test_control_files_planted_in_the_runs_changes_are_refused(place, monkeypatch):
    """The sandbox keeps them read-only; an attacker who can write the run's folder plants them by hand instead."""
    monkeypatch.setenv("SKILLS_MAGIC_DB", ".scratch/skills.sqlite")  # the database, wherever it is, is protected
    session = session_in(place)
    result = session.run_script("x", "scripts/change.py")
    upper = place / ".skills" / "runs" / result.run_id / "changes"
    for planted in ("skills-policy.yaml", "skills.lock", ".skills/evil.txt", ".scratch/skills.sqlite",
                    ".git/hooks/pre-commit"):
        write_file(upper, planted, "allow: ['*:*']\n")
    with open(place / ".skills" / "runs" / result.run_id / "deleted", "ab") as handle:
        handle.write(b"skills.lock\0")
    (place / "skills.lock").write_text("reviewed\n")
    listed = [c.path for c in session.changes(result.run_id)]
    assert ".skills/evil.txt" not in listed and "skills-policy.yaml" in listed
    report = session.apply(result.run_id)
    refused = {c.path: why for c, why in report.refused}
    assert refused == {"skills-policy.yaml": REFUSED_CONTROL, "skills.lock": REFUSED_CONTROL,
                       ".scratch/skills.sqlite": REFUSED_CONTROL, ".git/hooks/pre-commit": REFUSED_GIT}
    assert [c.path for c in report.applied] == ["existing.txt", "gone.txt", "new.txt"]
    assert not (place / "skills-policy.yaml").exists() and (place / "skills.lock").read_text() == "reviewed\n"
    assert not (place / ".skills" / "evil.txt").exists() and not (place / ".git").exists()
    assert (place / ".scratch" / "skills.sqlite").read_bytes().startswith(b"SQLite format 3\0")  # still the database


@needs_overlay
def test_apply_changes_protects_the_control_files_even_when_the_caller_names_none(place):
    session = session_in(place)
    result = session.run_script("x", "scripts/change.py")
    run_folder = place / ".skills" / "runs" / result.run_id
    write_file(run_folder / "changes", "skills-policy.yaml", "allow: ['*:*']\n")
    report = apply_changes(str(run_folder), str(place), ["skills-policy.yaml"])
    assert [(c.path, why) for c, why in report.refused] == [("skills-policy.yaml", REFUSED_CONTROL)]
    assert not (place / "skills-policy.yaml").exists()


@needs_overlay
def test_symbolic_links_that_escape_the_folder_are_refused(place, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "victim.txt").write_text("keep me\n")
    os.symlink(outside, place / "out")  # a folder of the project that leads elsewhere
    session = session_in(place)
    path = script_at(place, "links.py", "import os\nos.symlink('/etc', 'etc-link')\nos.symlink('existing.txt', 'inside-link')\n")
    result = session.run_script("x", path)
    run_folder = place / ".skills" / "runs" / result.run_id
    write_file(run_folder / "changes", "out/planted.txt", "planted\n")  # through the link: lands outside
    with open(run_folder / "deleted", "ab") as handle:
        handle.write(f"../{outside.name}/victim.txt\0out/victim.txt\0".encode())
    report = session.apply(result.run_id)
    refused = {c.path: why for c, why in report.refused}
    assert refused["etc-link"] == f"{REFUSED_LINK} (to /etc)"
    assert refused["out/planted.txt"].startswith(REFUSED_OUTSIDE) and refused["out/victim.txt"].startswith(REFUSED_OUTSIDE)
    assert refused[f"../{outside.name}/victim.txt"] == REFUSED_OUTSIDE
    assert [c.path for c in report.applied] == ["inside-link"] and os.readlink(place / "inside-link") == "existing.txt"
    assert not (place / "etc-link").exists() and not os.path.lexists(place / "etc-link")
    assert sorted(os.listdir(outside)) == ["victim.txt"] and (outside / "victim.txt").read_text() == "keep me\n"


@needs_overlay
def test_applied_files_keep_their_run_bit_and_land_in_new_folders(place):
    (place / "tool.sh").write_text("echo hi\n")
    session = session_in(place)
    path = script_at(place, "modes.py", "import os\nos.chmod('tool.sh', 0o755)\nos.makedirs('out/deep')\n"
                                        "open('out/deep/run.sh', 'w').write('echo new\\n')\nos.chmod('out/deep/run.sh', 0o700)\n"
                                        "open('existing.txt', 'w').write('rewritten\\n')\nos.chmod('existing.txt', 0o644)\n")
    result = session.run_script("x", path)
    assert [c.summary() for c in result.changes] == [
        "changed existing.txt (10 bytes)", "added out/deep/run.sh (9 bytes, executable)", "changed tool.sh (8 bytes, executable)"]
    (place / "existing.txt").chmod(0o600)  # the user tightens it after the run: a chmod leaves the mtime alone
    report = session.apply(result.run_id)
    assert not report.refused
    assert os.stat(place / "tool.sh").st_mode & 0o777 == 0o755
    assert os.stat(place / "out" / "deep" / "run.sh").st_mode & 0o111
    assert os.stat(place / "existing.txt").st_mode & 0o777 == 0o600  # the user's permissions stay
    assert (place / "out" / "deep" / "run.sh").read_text() == "echo new\n"
    assert not [n for n in os.listdir(place) if n.startswith(changes_module.TEMP_PREFIX)]


@needs_overlay
def test_a_folder_the_run_deleted_is_listed_file_by_file_and_removed_when_applied(place):
    (place / "old" / "inner").mkdir(parents=True)
    (place / "old" / "a.txt").write_text("a\n")
    (place / "old" / "inner" / "b.bin").write_bytes(b"\0\1\2")
    session = session_in(place)
    result = session.run_script("x", script_at(place, "rmtree.py", "import shutil\nshutil.rmtree('old')\n"))
    assert [(c.kind, c.path, c.bytes, c.diff is None) for c in result.changes] == [
        ("deleted", "old/a.txt", 2, False), ("deleted", "old/inner/b.bin", 3, True)]
    session.apply("last")
    assert not (place / "old").exists()


@needs_overlay
def test_a_folder_deleted_and_made_again_lists_the_old_files_as_deleted(place):
    (place / "old").mkdir()
    (place / "old" / "a.txt").write_text("a\n")
    (place / "old" / "b.txt").write_text("b\n")
    session = session_in(place)
    result = session.run_script("x", script_at(place, "remake.py", "import os, shutil\nshutil.rmtree('old')\n"
                                                                   "os.mkdir('old')\nopen('old/b.txt', 'w').write('new b')\n"))
    assert [(c.kind, c.path) for c in result.changes] == [("deleted", "old/a.txt"), ("changed", "old/b.txt")]
    session.apply("last")
    assert sorted(p.name for p in (place / "old").iterdir()) == ["b.txt"] and (place / "old" / "b.txt").read_text() == "new b"


@needs_overlay
def test_the_cli_applies_a_run_by_its_id(place, capsys):
    session = session_in(place)
    result = session.run_script("x", "scripts/change.py")
    assert main(["apply", "run-nope"]) == 2 and "no run named 'run-nope'" in capsys.readouterr().err
    assert main(["apply", result.run_id, "new.txt"]) == 0
    assert capsys.readouterr().out.splitlines() == ["applied 1 change to the working folder",
                                                    "  applied  added    new.txt (17 bytes)"]
    assert main(["apply", result.run_id]) == 1  # new.txt: already applied
    assert (place / "existing.txt").read_text() == "line one\nappended\n"


@needs_overlay
def test_run_changes_of_a_run_that_saw_no_working_folder_are_none(place):
    session = session_in(place)
    result = session.run_script("x", "scripts/change.py")
    assert run_changes(str(place / ".skills" / "runs" / result.run_id), None) == []


def test_an_unknown_change_error_names_the_known_paths():
    error = UnknownChange("x.txt", "run-ab12cd34", [f"f{n}" for n in range(12)])
    assert str(error) == "run-ab12cd34 did not change 'x.txt'; its changes are: f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 and 2 more"
    assert str(RunNotFound("run-x", [])) == "no run named 'run-x' in .skills/runs; there are no runs yet"


# --- everything after NAME is the script's --------------------------------------------------------------------


@pytest.mark.parametrize("line, expected", [
    # webapp-testing's with_server.py: its `--` is the script's own
    ('--no-model --script scripts/with_server.py x --server "python -m http.server 8765" --port 8765 -- python check.py',
     ["--server", "python -m http.server 8765", "--port", "8765", "--", "python", "check.py"]),
    ("--no-model --script scripts/format_bibtex.py x refs.bib --deduplicate --sort year",
     ["refs.bib", "--deduplicate", "--sort", "year"]),
    ("--no-model --script scripts/format_bibtex.py x --help", ["--help"]),
    ("--no-model --script scripts/format_bibtex.py x --model x --max-turns 3 --no-model",
     ["--model", "x", "--max-turns", "3", "--no-model"]),
    ("--no-model --script=scripts/format_bibtex.py -- x -v", ["-v"]),
    # NAME OPTIONS -- ARGS: the magic's options between the name and `--`
    ('x --no-model --script scripts/format_bibtex.py -- a "b c" --', ["a", "b c", "--"]),
])
def test_every_word_after_the_name_reaches_the_script(ip, magics, line, expected):
    view = ip.run_cell_magic("skill", f"run {line}", "\n")
    assert json.loads(view.result.final_text) == expected


def test_no_model_after_the_name_is_the_skills_and_the_error_says_what_is_missing(ip, magics):
    with pytest.raises(UsageError, match="--script runs a script without a model: add --no-model"):
        ip.run_cell_magic("skill", "run --script scripts/with_server.py x --no-model", "\n")
