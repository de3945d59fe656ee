"""`%skills allow / deny / policy / review / audit` and the stdin asker, through a real IPython shell."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
import yaml
from IPython.core.error import StdinNotImplementedError, UsageError
from traitlets.config import Config

from notebook_setup import no_input, registered_magics
from skillfiles import make_skill, write_file
from skills_magic.skills.catalog import Source
from skills_magic.notebook.views import AuditView, PolicyView, ReviewView
from skills_magic.safety.gate import PermissionRequest
from skills_magic.safety.manifest import LOCK_HEADER
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import SkillsSession

ENV_DUMP = "import json, os\nprint(json.dumps(dict(os.environ)))\n"
SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-v1", "OPENAI_API_KEY": "sk-o-v2", "GITHUB_TOKEN": "ghp_v3",
           "AWS_SECRET_ACCESS_KEY": "aws-v4", "MY_PASSWORD": "pw-v5"}



def ran(place) -> bool:
    """Whether scripts/run.py ran: its MARKER is in a run's scratch folder (sandboxed) or next to the test."""
    return (place / "MARKER").exists() or bool(list(place.glob(".skills/runs/*/output/MARKER")))

@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    """The notebook's folder: skills x and y on SKILLS_MAGIC_PATH, the lock and the audit database beside them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "path")
    monkeypatch.setenv("SKILLS_MAGIC_PATH", str(tmp_path / "skills"))
    monkeypatch.setenv("SKILLS_MAGIC_DB", ".scratch/skills.sqlite")
    monkeypatch.setenv("SKILLS_MAGIC_LOCK", ".scratch/skills.lock")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("SKILLS_MAGIC_MODEL", raising=False)
    x = tmp_path / "skills" / "x"
    make_skill(x, "name: x\ndescription: Does a thing. Use when testing.\nmetadata:\n  version: '1.0'\n")
    # MARKER goes to the run's scratch folder inside the sandbox (the only place it may write), else next to the test
    write_file(x, "scripts/run.py", "import os\nopen(os.path.join(os.environ.get('SKILLS_MAGIC_OUTPUT', "
          f"{str(tmp_path)!r}), 'MARKER'), 'w')\nprint('ran')\n")
    write_file(x, "scripts/env.py", ENV_DUMP)
    make_skill(tmp_path / "skills" / "y")
    return tmp_path


@pytest.fixture
def magics(ip, place):
    with registered_magics(ip) as instance:
        yield instance


def skills(ip, line: str):
    return ip.run_line_magic("skills", line)


def model_run(ip, magics, path="scripts/run.py"):
    call = {"name": "run_skill_script", "input": {"skill": "x", "path": path}}
    magics.session.model_client = ScriptedModel([{"tool_use": [call]}, "done"])
    return ip.run_cell_magic("skill", "run", "Do the task.")


# --- allow, deny, policy ----------------------------------------------------------------------------------------


def test_allow_adds_a_rule_and_shows_the_policy(ip, magics):
    view = skills(ip, "allow x:scripts/run.py")
    assert isinstance(view, PolicyView)
    data = view.data()
    assert set(data.pop("sandbox")) == {"available", "detail", "working_folder"}  # machine-specific: whether bwrap works here
    assert data == {
        "rules": [{"kind": "allow", "rule": "x:scripts/run.py", "origin": "%skills allow", "env": []}],
        "problems": [],
        "manifest": {"x": "not reviewed", "y": "not reviewed"},
    }
    assert view.text().splitlines()[-1].startswith("sandbox: ")
    assert view.text().splitlines()[:-1] == [
        "rules (deny first, then allow, then ask):",
        "  allow x:scripts/run.py  [%skills allow]",
        "skills.lock:",
        "  x: not reviewed",
        "  y: not reviewed",
    ]


def test_a_model_run_unattended_is_denied_then_allowed_by_the_rule(ip, magics, place):
    first = model_run(ip, magics).data()["tool_calls"][-1]
    assert first["is_error"] and "%skills allow x:scripts/run.py" in first["error"]
    assert not ran(place)
    skills(ip, "allow x:scripts/run.py")
    second = model_run(ip, magics).data()["tool_calls"][-1]
    assert not second["is_error"] and ran(place)


def test_deny_is_listed_before_allow_and_wins(ip, magics, place):
    skills(ip, "allow x:scripts/run.py")
    view = skills(ip, "deny x:scripts/*")
    assert [r["kind"] for r in view.data()["rules"]] == ["allow", "deny"]  # in the order they were added
    lines = view.text().splitlines()
    assert lines[1] == "  deny x:scripts/*  [%skills deny]" and lines[2] == "  allow x:scripts/run.py  [%skills allow]"
    result = ip.run_cell_magic("skill", "run --no-model --script scripts/run.py x", "stdin\n")
    assert result.data()["stop_reason"] == "denied" and "deny x:scripts/*" in result.data()["error"]
    assert not ran(place)


def test_allow_with_env_lets_exactly_that_variable_through(ip, magics, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    view = skills(ip, "allow x:scripts/* --env GITHUB_TOKEN")
    assert view.data()["rules"] == [{"kind": "allow", "rule": "x:scripts/*", "origin": "%skills allow", "env": ["GITHUB_TOKEN"]}]
    assert "allow x:scripts/* (env: GITHUB_TOKEN)  [%skills allow]" in view.text()
    text = model_run(ip, magics, "scripts/env.py").result.messages[2]["content"][0]["content"]
    seen = json.loads(text)
    assert seen["GITHUB_TOKEN"] == "***"  # it reached the script; what the script printed of it is masked
    assert {n for n in SECRETS if n in seen} == {"GITHUB_TOKEN"}
    assert "PATH" in seen


def test_a_wildcard_skill_typed_by_the_user_is_accepted(ip, magics):
    view = skills(ip, "allow *:scripts/*")
    assert view.data()["rules"] == [{"kind": "allow", "rule": "*:scripts/*", "origin": "%skills allow", "env": []}]
    assert view.data()["problems"] == []


@pytest.mark.parametrize("line", [
    "allow no-colon", "allow x:", "allow :y", "allow x:../y", "allow x:/abs", "deny no-colon", "deny x:/abs",
    "allow x*:scripts/*", "allow", "deny", "deny x:y --env GITHUB_TOKEN", "review", "allow 'x:unclosed",
    "audit --everything",
])
def test_bad_rules_and_lines_are_usage_errors_and_add_nothing(ip, magics, line):
    with pytest.raises(UsageError):
        skills(ip, line)
    assert magics.session.policy.rules == []
    assert skills(ip, "policy").data()["rules"] == []


def test_ipython_config_rules_may_use_a_wildcard_skill(ip, place):
    config = Config()
    config.SkillsMagics.allow = ["*:scripts/*"]
    config.SkillsMagics.deny = ["x:scripts/env.py"]
    with registered_magics(ip, config):
        data = skills(ip, "policy").data()
    assert data["rules"] == [
        {"kind": "deny", "rule": "x:scripts/env.py", "origin": "IPython config", "env": []},
        {"kind": "allow", "rule": "*:scripts/*", "origin": "IPython config", "env": []},
    ]
    assert data["problems"] == []


def test_a_wildcard_skill_from_skills_policy_yaml_is_refused_and_shown(ip, place):
    (place / "skills-policy.yaml").write_text("allow:\n  - '*:scripts/*'\n  - x:scripts/run.py\n", encoding="utf-8")
    with registered_magics(ip):
        skills(ip, "trust")  # even trusted, a project's file names its skills
        view = skills(ip, "policy")
    data = view.data()
    assert data["rules"] == [{"kind": "allow", "rule": "x:scripts/run.py", "origin": "skills-policy.yaml", "env": []}]
    problem, = data["problems"]
    assert "'*:scripts/*'" in problem and "wildcard skill" in problem and "skills-policy.yaml" in problem
    text = view.text()
    assert "rules not accepted:" in text and f"  ! {problem}" in text


def test_policy_without_rules_says_every_run_is_asked(ip, magics):
    text = skills(ip, "policy").text()
    assert "(none: every script run is asked; unattended, denied)" in text


def test_policy_shows_review_state_per_skill_including_a_mismatch(ip, magics, place, monkeypatch):
    no_input(monkeypatch)
    skills(ip, "review x --yes")
    assert skills(ip, "policy").data()["manifest"] == {"x": "reviewed (version 1.0), bytes match", "y": "not reviewed"}
    with open(place / "skills" / "x" / "scripts" / "run.py", "a", encoding="utf-8") as handle:
        handle.write("# an unreviewed change\n")
    view = skills(ip, "policy")
    state = view.data()["manifest"]["x"]
    assert state.startswith("MISMATCH: x/scripts/run.py is not the reviewed file: reviewed sha256 ")
    assert "  x: MISMATCH: x/scripts/run.py" in view.text()


# --- review -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("refusal", [EOFError, OSError, StdinNotImplementedError, "n", "", "no"])
def test_review_without_confirmation_writes_nothing(ip, magics, place, monkeypatch, refusal):
    if isinstance(refusal, str):
        monkeypatch.setattr(builtins, "input", lambda prompt="": refusal)
    else:
        no_input(monkeypatch, refusal)
    view = skills(ip, "review x")
    assert isinstance(view, ReviewView)
    assert view.data()["written"] is False
    assert not (place / ".scratch" / "skills.lock").exists()
    assert "not written: nobody confirmed (accept these bytes with %skills review x --yes)" in view.text()
    assert skills(ip, "audit").data() == {"audit": []}


@pytest.mark.parametrize("answer", ["y", "yes", " Y "])
def test_review_confirmed_at_the_prompt_writes(ip, magics, place, monkeypatch, answer):
    prompts = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": prompts.append(prompt) or answer)
    view = skills(ip, "review x")
    assert view.data()["written"] is True and prompts == ["Write these digests to skills.lock? [y/N]: "]
    assert (place / ".scratch" / "skills.lock").is_file()


def test_review_yes_writes_without_asking_and_shows_every_file(ip, magics, place, monkeypatch):
    no_input(monkeypatch, AssertionError("--yes must not prompt"))
    view = skills(ip, "review x --yes")
    lock = place / ".scratch" / "skills.lock"
    text = lock.read_text(encoding="utf-8")
    assert text.startswith(LOCK_HEADER)
    assert sorted(yaml.safe_load(text)["skills"]["x"]["files"]) == ["SKILL.md", "scripts/env.py", "scripts/run.py"]
    data = view.data()
    assert data["skill"] == "x" and data["version"] == "1.0" and data["written"] is True
    folder = place / "skills" / "x"
    for entry in data["files"]:
        assert entry["change"] == "added" and entry["reviewed_sha256"] is None
        assert entry["bytes"] == (folder / entry["path"]).stat().st_size
    lines = view.text().splitlines()
    assert lines[0] == "review of x (version 1.0):"
    assert lines[-1] == "written to .scratch/skills.lock: these bytes are now the reviewed ones"
    assert any(line.split()[:2] == ["added", "scripts/run.py"] and "sha256 " + data["files"][2]["sha256"][:16] in line
               for line in lines)
    again = skills(ip, "review x")
    assert again.data()["written"] is False
    assert again.text().splitlines()[-1] == "unchanged since the last review in .scratch/skills.lock"
    assert {f["change"] for f in again.data()["files"]} == {"unchanged"}


def test_review_after_changes_shows_each_kind_of_change(ip, magics, place, monkeypatch):
    no_input(monkeypatch)
    skills(ip, "review x --yes")
    lock_before = (place / ".scratch" / "skills.lock").read_bytes()
    folder = place / "skills" / "x"
    (folder / "scripts" / "env.py").unlink()
    write_file(folder, "scripts/run.py", "print('changed')\n")
    write_file(folder, "scripts/new.sh", "echo new\n")
    view = skills(ip, "review x")
    files = {f["path"]: f for f in view.data()["files"]}
    assert {p: f["change"] for p, f in files.items()} == {
        "SKILL.md": "unchanged", "scripts/env.py": "removed", "scripts/new.sh": "added", "scripts/run.py": "changed"}
    assert files["scripts/env.py"]["bytes"] is None and files["scripts/env.py"]["sha256"] is None
    assert files["scripts/run.py"]["bytes"] == len("print('changed')\n")
    assert files["scripts/run.py"]["reviewed_sha256"] != files["scripts/run.py"]["sha256"]
    text = view.text()
    for kind in ("unchanged", "removed", "added", "changed"):
        assert f"  {kind}" in text
    assert (place / ".scratch" / "skills.lock").read_bytes() == lock_before  # nobody confirmed


def test_review_of_an_unknown_skill_is_a_usage_error(ip, magics):
    with pytest.raises(UsageError, match="no-such"):
        skills(ip, "review no-such")


def test_a_changed_reviewed_script_is_refused_in_a_model_run(ip, magics, place, monkeypatch):
    no_input(monkeypatch)
    skills(ip, "allow x:scripts/*")
    skills(ip, "review x --yes")
    lock_before = (place / ".scratch" / "skills.lock").read_bytes()
    with open(place / "skills" / "x" / "scripts" / "run.py", "a", encoding="utf-8") as handle:
        handle.write("# an unreviewed change\n")
    call = model_run(ip, magics).data()["tool_calls"][-1]
    assert call["is_error"] and call["error"].startswith("refused: x/scripts/run.py is not the reviewed file")
    assert not ran(place)
    assert (place / ".scratch" / "skills.lock").read_bytes() == lock_before


# --- audit ------------------------------------------------------------------------------------------------------


def test_audit_shows_this_sessions_rows_and_all_shows_every_sessions(ip, magics, place):
    skills(ip, "allow x:scripts/run.py")
    model_run(ip, magics)
    other = SkillsSession(sources=[Source("session", str(place / "skills"), True)], cwd=str(place))
    other.run_script("x", "scripts/env.py")
    view = skills(ip, "audit")
    assert isinstance(view, AuditView)
    mine = view.data()["audit"]
    assert [(r["event"], r["path"], r["decision"]) for r in mine] == [
        ("decision", "scripts/run.py", "allow"), ("run", "scripts/run.py", None)]
    assert mine[0]["decided_by"] == "allow x:scripts/run.py  [%skills allow]" and mine[1]["exit_code"] == 0
    everything = skills(ip, "audit --all").data()["audit"]
    assert len(everything) == 4 and [r["path"] for r in everything[2:]] == ["scripts/env.py"] * 2
    assert (place / ".scratch" / "skills.sqlite").is_file()
    _, metadata = view._repr_mimebundle_()
    times = metadata["application/vnd.skills-magic.audit+json"]
    assert len(times["at"]) == 2 and times["seconds"][0] is None and times["seconds"][1] >= 0


def test_audit_before_anything_happened(ip, magics):
    view = skills(ip, "audit")
    assert view.data() == {"audit": []} and view.text() == "no decisions or runs recorded in this session"


# --- the stdin asker --------------------------------------------------------------------------------------------


REQUEST = PermissionRequest("x", "scripts/run.py", "ab" * 32, ("--flag",), 12, "Bash(*)")


@pytest.mark.parametrize("typed, answer", [
    ("o", "once"), ("once", "once"), (" O ", "once"), ("ONCE", "once"),
    ("a", "always"), ("always", "always"), ("A\n", "always"),
    ("d", "deny"), ("deny", "deny"), ("", "deny"), ("y", "deny"), ("yes", "deny"), ("on", "deny"), ("al", "deny"),
])
def test_the_stdin_asker_maps_answers(magics, monkeypatch, typed, answer):
    prompts = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": prompts.append(prompt) or typed)
    assert magics._ask(REQUEST) == answer
    prompt, = prompts
    assert prompt.startswith(REQUEST.describe())
    assert "skill x wants to run scripts/run.py" in prompt and "allowed-tools: Bash(*)" in prompt
    assert prompt.endswith("Allow? [o]nce / [a]lways for this skill and path / [d]eny: ")


def test_the_session_asks_through_the_stdin_asker(magics):
    assert magics.session.asker == magics._ask


@pytest.mark.parametrize("error", [EOFError, OSError, StdinNotImplementedError])
def test_where_input_is_impossible_a_model_run_is_denied_with_the_hint(ip, magics, place, monkeypatch, error):
    no_input(monkeypatch, error)
    call = model_run(ip, magics).data()["tool_calls"][-1]
    assert call["is_error"] and "nobody can answer" in call["error"] and "%skills allow x:scripts/run.py" in call["error"]
    assert not ran(place)


def test_answering_always_at_the_prompt_adds_the_rule_shown_by_policy(ip, magics, place, monkeypatch):
    answers = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": answers.append(prompt) or "a")
    assert not model_run(ip, magics).data()["tool_calls"][-1]["is_error"]
    assert not model_run(ip, magics).data()["tool_calls"][-1]["is_error"]
    assert len(answers) == 1
    assert skills(ip, "policy").data()["rules"] == [
        {"kind": "allow", "rule": "x:scripts/run.py", "origin": "asked: always", "env": []}]
    assert ran(place)
