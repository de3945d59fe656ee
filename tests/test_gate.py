"""The gate every script run and inline shell command passes: the script resolves inside its skill, the reviewed
bytes match, deny beats allow beats ask, nobody-to-ask means deny, the environment holds no secrets, time and output
are bounded, and a failure is an `is_error` tool result while the run goes on."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from processes import gone, processes_running, wait_until_gone
from IPython.core.error import StdinNotImplementedError

from notebook_setup import notebook_folder
from skillfiles import make_skill, write_file
from skills_magic.skills.catalog import Source
from skills_magic.safety.execute import DEFAULT_TIMEOUT_SECONDS, MAX_OUTPUT_BYTES
from skills_magic.safety.gate import Gate, PermissionRequest, Unattended, unattended
from skills_magic.models.scripted import ScriptedModel
from skills_magic.runs.disclosure import SkillNotActivated
from skills_magic.session import SkillsSession

# --- helpers -----------------------------------------------------------------------------------------------------

RUN = "print('ran')\n"
ENV_DUMP = "import json, os\nprint(json.dumps(dict(os.environ)))\n"
SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-secret-value-1",
    "OPENAI_API_KEY": "sk-openai-secret-value-2",
    "GITHUB_TOKEN": "ghp_secret_value_3",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value-4",
    "MY_PASSWORD": "hunter2-secret-value-5",
}


def build_skill(root: Path, name: str = "x", scripts: dict[str, str] | None = None, *, frontmatter: str | None = None,
                body: str = "# Body\n\nRun the scripts.\n") -> Path:
    folder = root / name
    make_skill(folder, frontmatter, body, name=name)
    for relative, text in (scripts if scripts is not None else {"scripts/run.py": RUN}).items():
        write_file(folder, relative, text)
    return folder


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    """tmp_path as the notebook's folder, with its own audit database and lock file."""
    notebook_folder(monkeypatch, tmp_path)
    (tmp_path / "skills").mkdir()
    return tmp_path


def new_session(place: Path) -> SkillsSession:
    return SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))


class Asker:
    """Answers permission requests with a fixed answer (or raises), counting the calls."""

    def __init__(self, answer="once"):
        self.answer = answer
        self.requests: list[PermissionRequest] = []

    def __call__(self, request: PermissionRequest):
        self.requests.append(request)
        if isinstance(self.answer, BaseException) or (isinstance(self.answer, type) and issubclass(self.answer, BaseException)):
            raise self.answer
        return self.answer


def script_call(path: str, skill: str = "x", args=(), stdin: str = "") -> dict:
    return {"name": "run_skill_script", "input": {"skill": skill, "path": path, "args": list(args), "stdin": stdin}}


def agent_run(session: SkillsSession, *calls, asker=None, turns=None):
    """A scripted model asking for each tool call in its own turn, then answering "done"."""
    session.model_client = ScriptedModel(turns if turns is not None else [{"tool_use": [c]} for c in calls] + ["done"])
    return session.run("Do the task.", asker=asker)


def allowed_agent_run(place: Path, *paths: str):
    """A model run asking for each of skill x's `paths` in turn, a rule allowing its scripts: (session, result)."""
    session = new_session(place)
    session.add_rule("allow", "x:scripts/*")
    return session, agent_run(session, *(script_call(path) for path in paths))


def assert_run_went_on(result) -> None:
    assert result.error is None and result.stop_reason == "end_turn" and result.final_text == "done"


# --- the script must stay inside its skill -----------------------------------------------------------------------

@pytest.fixture
def outside(place) -> Path:
    """A script outside every skill that would leave place/MARKER behind if it ever ran."""
    folder = place / "outside"
    write_file(folder, "evil.py", f"import pathlib\npathlib.Path({str(place / 'MARKER')!r}).write_text('ran')\n")
    write_file(folder, "evil.sh", f"touch {place / 'MARKER'}\n")
    return folder


@pytest.mark.parametrize("kind", ["dotdot", "dotdot-inside-scripts", "absolute"])
def test_a_path_leaving_the_skill_is_refused_and_nothing_runs(place, outside, kind):
    build_skill(place / "skills")
    path = {"dotdot": "../../outside/evil.py", "dotdot-inside-scripts": "scripts/../../../outside/evil.py",
            "absolute": str(outside / "evil.py")}[kind]
    session = new_session(place)
    session.add_rule("allow", "*")  # even an allow-everything rule does not let a path out of the skill
    result = agent_run(session, script_call(path), asker=Asker("once"))
    call = result.tool_calls[-1]
    assert call.is_error and "outside the skill's folder" in call.error
    assert not (place / "MARKER").exists()
    assert_run_went_on(result)
    # the user's own --no-model command is refused the same way
    direct = session.run_script("x", path)
    assert direct.stop_reason == "denied" and "outside the skill's folder" in direct.error
    assert not (place / "MARKER").exists()
    rows = [r for r in session.audit() if r["path"] == path]
    assert rows and all(r["decision"] == "deny" and r["decided_by"] == "the executor" for r in rows)
    assert not any(r["event"] == "run" for r in session.audit())


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_symlink_inside_the_skill_pointing_outside_is_refused(place, outside, link):
    folder = build_skill(place / "skills", scripts={})
    if link == "file":
        (folder / "scripts").mkdir()
        (folder / "scripts" / "run.py").symlink_to(outside / "evil.py")
    else:
        (folder / "scripts").symlink_to(outside, target_is_directory=True)
    path = "scripts/run.py" if link == "file" else "scripts/evil.py"
    session = new_session(place)
    session.add_rule("allow", "x:*")
    asker = Asker("once")
    result = agent_run(session, script_call(path), asker=asker)
    call = result.tool_calls[-1]
    assert call.is_error and "outside the skill's folder" in call.error
    assert asker.requests == []  # refused before anybody is asked
    assert not (place / "MARKER").exists()
    assert_run_went_on(result)
    assert session.run_script("x", path).stop_reason == "denied"
    assert not (place / "MARKER").exists()


def test_a_symlink_inside_the_skill_to_a_file_inside_it_runs(place):
    folder = build_skill(place / "skills")
    (folder / "scripts" / "alias.py").symlink_to(folder / "scripts" / "run.py")
    session = new_session(place)
    result = session.run_script("x", "scripts/alias.py")
    assert result.stop_reason == "no_model" and result.final_text == "ran\n"


def test_a_deny_rule_cannot_be_sidestepped_by_spelling_the_path_differently(place):
    build_skill(place / "skills", scripts={"scripts/run.py": f"open({str(place / 'MARKER')!r}, 'w').write('ran')\n"})
    session = new_session(place)
    session.add_rule("deny", "x:scripts/*")
    session.add_rule("allow", "x:*")
    gate, skill = session.gate(), session.skill("x")
    for spelling in ("scripts/run.py", "./scripts/run.py", "scripts/./run.py"):
        outcome = gate.run_script(skill, spelling, [], "", unattended)
        assert not outcome.allowed, f"{spelling!r} was allowed by {outcome.decided_by}"
    assert not (place / "MARKER").exists()


# --- the environment --------------------------------------------------------------------------------------------


@pytest.fixture
def secrets(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return SECRETS


def seen_environment(outcome_or_text) -> dict:
    text = outcome_or_text if isinstance(outcome_or_text, str) else outcome_or_text.run.stdout
    return json.loads(text)


def test_a_script_sees_no_secret_names_or_values_but_does_see_path(place, secrets):
    build_skill(place / "skills", scripts={"scripts/env.py": ENV_DUMP})
    session, result = allowed_agent_run(place, "scripts/env.py")
    call = result.tool_calls[-1]
    assert not call.is_error
    content = result.messages[2]["content"][0]["content"]
    seen = json.loads(content)
    assert not set(secrets) & set(seen)
    assert not any(value in content for value in secrets.values())
    assert seen["PATH"] == os.environ["PATH"]
    # the user's own --no-model run gets the same clean environment
    direct = seen_environment(session.run_script("x", "scripts/env.py").final_text)
    assert not set(secrets) & set(direct) and "PATH" in direct


def test_an_allow_rule_with_env_lets_exactly_that_variable_through(place, secrets):
    build_skill(place / "skills", scripts={"scripts/env.py": ENV_DUMP})
    session = new_session(place)
    session.add_rule("allow", "x:scripts/*", env=["GITHUB_TOKEN"])
    outcome = session.gate().run_script(session.skill("x"), "scripts/env.py", [], "", unattended)
    seen = seen_environment(outcome)
    assert seen["GITHUB_TOKEN"] == "***"  # it reached the script; what the script printed of it is masked
    assert {n for n in secrets if n in seen} == {"GITHUB_TOKEN"}
    others = [v for n, v in secrets.items() if n != "GITHUB_TOKEN"]
    assert not any(value in outcome.run.stdout for value in others)


def test_a_policy_file_entry_with_env_lets_exactly_that_variable_through(place, secrets):
    from skills_magic.safety.trust import user_policy_path

    build_skill(place / "skills", scripts={"scripts/env.py": ENV_DUMP})
    # the user's own file in their config folder: a project's skills-policy.yaml never grants `env` (test_trust.py)
    Path(user_policy_path()).write_text("allow:\n  - rule: x:scripts/env.py\n    env: [GITHUB_TOKEN]\n",
                                        encoding="utf-8")
    session = new_session(place)
    assert session.policy.problems == []
    outcome = session.gate().run_script(session.skill("x"), "scripts/env.py", [], "", unattended)
    assert outcome.allowed and outcome.decided_by.endswith("[your skills-policy.yaml]")
    seen = seen_environment(outcome)
    assert {n for n in secrets if n in seen} == {"GITHUB_TOKEN"}


def test_an_env_grant_applies_only_to_the_rule_that_allowed_the_run(place, secrets):
    build_skill(place / "skills", scripts={"scripts/env.py": ENV_DUMP, "tools/env.py": ENV_DUMP})
    session = new_session(place)
    session.add_rule("allow", "x:scripts/*", env=["GITHUB_TOKEN"])
    session.add_rule("allow", "x:tools/*")
    gate, skill = session.gate(), session.skill("x")
    assert "GITHUB_TOKEN" in seen_environment(gate.run_script(skill, "scripts/env.py", [], "", unattended))
    assert "GITHUB_TOKEN" not in seen_environment(gate.run_script(skill, "tools/env.py", [], "", unattended))


def test_a_run_the_user_typed_gets_no_granted_secret(place, secrets):
    build_skill(place / "skills", scripts={"scripts/env.py": ENV_DUMP})
    session = new_session(place)  # no rule: the user's command decides, and grants nothing
    seen = seen_environment(session.run_script("x", "scripts/env.py").final_text)
    assert not set(secrets) & set(seen)


# --- time -------------------------------------------------------------------------------------------------------

SLEEPER = """\
import os, sys, time
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        time.sleep(3600)
with open(sys.argv[1], "w") as handle:
    handle.write(f"{os.getpid()} {pid}")
print("started", flush=True)
while True:
    time.sleep(3600)
"""


def test_the_session_gate_uses_the_executors_default_timeout(place):
    assert new_session(place).gate().timeout == DEFAULT_TIMEOUT_SECONDS


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs os.pidfd_open (Linux)")
def test_a_script_that_sleeps_forever_is_killed_with_its_grandchild_at_the_timeout(place, monkeypatch):
    build_skill(place / "skills", scripts={"scripts/slow.py": SLEEPER})
    session = new_session(place)
    session.add_rule("allow", "x:scripts/*", writable=[str(place)])  # the pid file is written outside the scratch
    monkeypatch.setattr(session, "gate", lambda: Gate(session.policy, session.manifest, session._audit, timeout=2.0))
    pids_file = place / "pids"
    result = agent_run(session, script_call("scripts/slow.py", args=[str(pids_file)]))
    call = result.tool_calls[-1]
    assert call.is_error and "timed out" in call.error
    assert_run_went_on(result)
    assert len(pids_file.read_text().split()) == 2  # the script did fork its child before the timeout
    # inside the sandbox's PID namespace the pids it wrote are its own: find both processes from here by their
    # command line (the script's path, unique to this test), and wait until every one is gone
    survivors = processes_running(str(place / "skills" / "x" / "scripts" / "slow.py"))
    try:
        for pid in survivors:
            assert wait_until_gone(pid), f"process {pid} of the script survived the timeout"
    finally:
        for pid in survivors:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
    run_rows = [r for r in session.audit() if r["event"] == "run"]
    assert len(run_rows) == 1 and run_rows[0]["exit_code"] is None and run_rows[0]["detail"] == "timed out"
    assert result.trace[-2].stage == "execute" and result.trace[-2].detail == "timed out"


# --- output -----------------------------------------------------------------------------------------------------


def test_fifty_megabytes_of_output_are_cut_at_the_cap_and_the_run_completes(place):
    total = 50 * 1024 * 1024
    build_skill(place / "skills", scripts={"scripts/loud.py": (
        "import sys\nblock = b'a' * (1 << 20)\nfor _ in range(50):\n    sys.stdout.buffer.write(block)\n"
        "print('finished', file=sys.stderr)\n")})
    session = new_session(place)
    session.add_rule("allow", "x:scripts/*")
    outcome = session.gate().run_script(session.skill("x"), "scripts/loud.py", [], "", unattended)
    run = outcome.run
    assert run.exit_code == 0 and not run.timed_out and run.truncated
    note = f"\n[output cut: {total - MAX_OUTPUT_BYTES:,} more bytes not shown]"
    assert run.stdout.endswith(note)
    kept = run.stdout[: -len(note)]
    assert kept == "a" * MAX_OUTPUT_BYTES  # the kept bytes are the cap, not 50 MB
    assert run.stderr == "finished\n"
    assert [r["detail"] for r in session.audit() if r["event"] == "run"] == ["output cut"]


def test_binary_output_is_decoded_with_replacement(place):
    build_skill(place / "skills", scripts={"scripts/noise.py": (
        "import os, sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\x00' + os.urandom(200000))\n"
        "sys.stderr.buffer.write(os.urandom(5000))\n")})
    _session, result = allowed_agent_run(place, "scripts/noise.py")
    call = result.tool_calls[-1]
    assert not call.is_error
    content = result.messages[2]["content"][0]["content"]
    assert isinstance(content, str) and content.startswith("\ufffd\ufffd\x00")
    content.encode("utf-8")  # valid text: every undecodable byte became U+FFFD
    assert_run_went_on(result)


# --- scripts that cannot run ------------------------------------------------------------------------------------


def test_a_missing_interpreter_is_a_clear_error_and_an_is_error_tool_result(place):
    folder = build_skill(place / "skills", scripts={})
    write_file(folder, "scripts/tool", "#!/nonexistent/interpreter\nprint('never')\n", mode=0o755)
    session, result = allowed_agent_run(place, "scripts/tool")
    call = result.tool_calls[-1]
    assert call.is_error and call.error == "scripts/tool cannot be started: No such file or directory"
    assert_run_went_on(result)
    direct = session.run_script("x", "scripts/tool")
    assert direct.stop_reason == "error" and "cannot be started" in direct.error
    runs = [r for r in session.audit() if r["event"] == "run"]
    assert runs and all("cannot be started" in r["detail"] and r["exit_code"] is None for r in runs)


def test_a_script_deleted_after_the_skill_was_listed_is_a_clear_error(place):
    folder = build_skill(place / "skills")
    session = new_session(place)
    session.add_rule("allow", "x:scripts/*")
    session.scan()

    def delete_then_call(request):
        activation = request["messages"][-1]["content"][0]["content"]
        assert "- scripts/run.py" in activation  # the model was told the script exists
        (folder / "scripts" / "run.py").unlink()
        return {"tool_use": [script_call("scripts/run.py")]}

    turns = [{"tool_use": [{"name": "activate_skill", "input": {"name": "x"}}]}, delete_then_call, "done"]
    result = agent_run(session, turns=turns)
    call = result.tool_calls[-1]
    assert call.is_error and "'scripts/run.py' is not a file in the skill's folder" in call.error
    assert_run_went_on(result)


# --- nobody to ask, and the answers ------------------------------------------------------------------------------


def test_unattended_with_no_rule_is_denied_and_names_the_rule_that_would_allow(place):
    build_skill(place / "skills", scripts={"scripts/run.py": f"open({str(place / 'MARKER')!r}, 'w')\n"})
    session = new_session(place)
    assert session.asker is unattended
    result = agent_run(session, script_call("scripts/run.py"))
    call = result.tool_calls[-1]
    assert call.is_error and "nobody can answer" in call.error and "%skills allow x:scripts/run.py" in call.error
    assert call.error.startswith("denied: ")
    assert not (place / "MARKER").exists()
    assert_run_went_on(result)


@pytest.mark.parametrize("error", [EOFError, OSError("reading from stdin while output is captured"),
                                   StdinNotImplementedError("raw_input was called, but this frontend does not support input requests."),
                                   Unattended("nobody can answer a permission prompt here")],
                         ids=["EOFError", "OSError", "StdinNotImplementedError", "Unattended"])
def test_an_asker_that_cannot_ask_denies_with_the_pre_approval_hint(place, error):
    build_skill(place / "skills", scripts={"scripts/run.py": f"open({str(place / 'MARKER')!r}, 'w')\n"})
    session = new_session(place)
    asker = Asker(error)
    result = agent_run(session, script_call("scripts/run.py"), asker=asker)
    call = result.tool_calls[-1]
    assert len(asker.requests) == 1
    assert call.is_error and "nobody can answer" in call.error and "%skills allow x:scripts/run.py" in call.error
    assert not (place / "MARKER").exists()
    assert_run_went_on(result)
    decision, = [r for r in session.audit() if r["event"] == "decision"]
    assert decision["decision"] == "deny" and "%skills allow x:scripts/run.py" in decision["decided_by"]


def test_any_other_asker_error_is_not_taken_as_an_answer(place):
    build_skill(place / "skills")
    session = new_session(place)
    with pytest.raises(ZeroDivisionError):
        session.gate().run_script(session.skill("x"), "scripts/run.py", [], "", Asker(ZeroDivisionError))


def run_twice_answering(place: Path, answer: str):
    """A model run asking for skill x's scripts/run.py twice, the user answering `answer`: (session, asker, result)."""
    build_skill(place / "skills")
    session = new_session(place)
    asker = Asker(answer)
    return session, asker, agent_run(session, script_call("scripts/run.py"), script_call("scripts/run.py"), asker=asker)


def test_once_runs_without_adding_a_rule_and_asks_again_next_time(place):
    session, asker, result = run_twice_answering(place, "once")
    assert [c.is_error for c in result.tool_calls] == [False, False]
    assert len(asker.requests) == 2
    assert session.policy.rules == []
    assert [r["decided_by"] for r in session.audit() if r["event"] == "decision"] == ["the user: once"] * 2


def test_always_runs_adds_an_allow_rule_and_the_next_run_is_not_asked(place):
    session, asker, result = run_twice_answering(place, "always")
    assert [c.is_error for c in result.tool_calls] == [False, False]
    assert len(asker.requests) == 1
    rule, = session.policy.rules
    assert (rule.kind, rule.skill, rule.pattern, rule.origin) == ("allow", "x", "scripts/run.py", "asked: always")
    decided = [r["decided_by"] for r in session.audit() if r["event"] == "decision"]
    assert decided == ["the user: always for this skill and path", "allow x:scripts/run.py  [asked: always]"]
    # a later run in the same session is not asked either
    agent_run(session, script_call("scripts/run.py"), asker=asker)
    assert len(asker.requests) == 1


def test_always_for_a_path_with_pattern_characters_means_that_path_exactly(place):
    build_skill(place / "skills", scripts={"scripts/run[1].py": RUN, "scripts/run1.py": RUN})
    session = new_session(place)
    asker = Asker("always")
    gate, skill = session.gate(), session.skill("x")
    assert gate.run_script(skill, "scripts/run[1].py", [], "", asker).allowed
    assert gate.run_script(skill, "scripts/run[1].py", [], "", asker).allowed
    assert len(asker.requests) == 1, "the second run of the same path was asked again"
    assert session.policy.decide("x", "scripts/run1.py").verdict == "ask"


@pytest.mark.parametrize("answer", ["deny", "d", "", "whatever"])
def test_any_answer_but_once_or_always_denies(place, answer):
    build_skill(place / "skills", scripts={"scripts/run.py": f"open({str(place / 'MARKER')!r}, 'w')\n"})
    session = new_session(place)
    result = agent_run(session, script_call("scripts/run.py"), asker=Asker(answer))
    call = result.tool_calls[-1]
    assert call.is_error and call.error == "denied: the user: deny"
    assert not (place / "MARKER").exists() and session.policy.rules == []
    assert_run_went_on(result)


def test_a_deny_rule_beats_an_allow_rule_in_the_gate(place):
    build_skill(place / "skills", scripts={"scripts/run.py": f"open({str(place / 'MARKER')!r}, 'w')\n"})
    session = new_session(place)
    session.add_rule("allow", "x:scripts/run.py")
    session.add_rule("deny", "x:scripts/*")
    asker = Asker("once")
    result = agent_run(session, script_call("scripts/run.py"), asker=asker)
    assert result.tool_calls[-1].error == "denied: deny x:scripts/*  [%skills deny]"
    assert asker.requests == []
    # the user's own command does not override a deny rule either
    direct = session.run_script("x", "scripts/run.py")
    assert direct.stop_reason == "denied" and "deny x:scripts/*" in direct.error
    assert not (place / "MARKER").exists()


def test_an_allow_rule_runs_without_asking(place):
    build_skill(place / "skills")
    session = new_session(place)
    session.add_rule("allow", "x:scripts/run.py")
    asker = Asker(AssertionError("must not be asked"))
    result = agent_run(session, script_call("scripts/run.py"), asker=asker)
    assert not result.tool_calls[-1].is_error and asker.requests == []
    assert result.messages[2]["content"][0]["content"] == "ran\n"


def test_the_users_own_command_is_its_own_answer(place):
    build_skill(place / "skills")
    session = new_session(place)
    session.asker = Asker(AssertionError("must not be asked"))
    result = session.run_script("x", "scripts/run.py")
    assert result.stop_reason == "no_model" and result.final_text == "ran\n"
    decision = next(r for r in session.audit() if r["event"] == "decision")
    assert decision["decided_by"] == "the user's own command"


# --- allowed-tools is a request, never a grant --------------------------------------------------------------------


def test_allowed_tools_is_shown_in_the_request_and_grants_nothing(place):
    frontmatter = "name: x\ndescription: Does a thing. Use when testing.\nallowed-tools: Bash(*) run_skill_script\n"
    build_skill(place / "skills", frontmatter=frontmatter,
                scripts={"scripts/run.py": f"open({str(place / 'MARKER')!r}, 'w')\n"})
    session = new_session(place)
    result = agent_run(session, script_call("scripts/run.py", args=["a", "b"], stdin="héllo"))
    call = result.tool_calls[-1]
    assert call.is_error and "nobody can answer" in call.error
    assert not (place / "MARKER").exists()
    asker = Asker("deny")
    agent_run(session, script_call("scripts/run.py", args=["a", "b"], stdin="héllo"), asker=asker)
    request, = asker.requests
    assert request.allowed_tools == "Bash(*) run_skill_script"
    text = request.describe()
    assert "skill x wants to run scripts/run.py" in text
    assert "the skill requests allowed-tools: Bash(*) run_skill_script (a request, not a grant)" in text
    assert request.digest in text and "['a', 'b']" in text and "6 bytes" in text
    assert request.rule == "x:scripts/run.py"
    assert not (place / "MARKER").exists()


def test_a_request_without_allowed_tools_does_not_mention_them():
    request = PermissionRequest("x", "scripts/run.py", None, (), 0, None)
    assert "allowed-tools" not in request.describe() and "sha256    -" in request.describe()


# --- failures are results, and the run goes on -------------------------------------------------------------------


def test_a_non_zero_exit_is_an_is_error_result_with_stderr_and_the_run_goes_on(place):
    build_skill(place / "skills", scripts={
        "scripts/fail.py": "import sys\nprint('partial')\nsys.stderr.write('it broke\\n')\nsys.exit(3)\n",
        "scripts/run.py": RUN})
    session, result = allowed_agent_run(place, "scripts/fail.py", "scripts/run.py")
    failed, succeeded = result.tool_calls
    assert failed.is_error and failed.error == "scripts/fail.py exit code 3\nit broke"
    assert not succeeded.is_error
    assert_run_went_on(result)
    executes = [e for e in result.trace if e.stage == "execute"]
    assert [(e.object, e.detail) for e in executes] == [("x/scripts/fail.py", "exit code 3"), ("x/scripts/run.py", "exit code 0")]
    assert [r["exit_code"] for r in session.audit() if r["event"] == "run"] == [3, 0]


# --- inline shell in a SKILL.md body -----------------------------------------------------------------------------


def inline_skill(place: Path, command: str, scripts: dict[str, str] | None = None) -> Path:
    return build_skill(place / "skills", scripts=scripts if scripts is not None else {},
                       body=f"# Body\n\nToday: !`{command}`\n\nThen continue.\n")


def activation(session: SkillsSession, asker=None) -> str:
    session.model_client = ScriptedModel(["done"])
    result = session.run("Do the task.", skill="x", asker=asker)
    return result.messages[0]["content"][0]["text"]


def test_an_inline_command_without_a_rule_is_denied_stops_the_activation_and_does_not_run(place):
    marker = place / "INLINE"
    inline_skill(place, f"touch {marker}")
    session = new_session(place)
    with pytest.raises(SkillNotActivated) as stopped:
        activation(session)
    text = str(stopped.value)
    assert text.startswith(f'Shell command failed for pattern "!`touch {marker}`": denied: nobody can answer')
    assert f'%skills allow "x:!touch {marker}"' in text  # quoted: the rule has a space
    assert not marker.exists()
    decision, = [r for r in session.audit() if r["event"] == "decision"]
    assert decision["path"] == f"!touch {marker}" and decision["decision"] == "deny"


def test_an_allowed_inline_command_is_replaced_by_its_output(place):
    inline_skill(place, "date -u -d @0 +%Y")
    session = new_session(place)
    session.add_rule("allow", "x:!date*")
    text = activation(session)
    assert "Today: 1970\n" in text and "!`" not in text
    run, = [r for r in session.audit() if r["event"] == "run"]
    assert run["path"] == "!date -u -d @0 +%Y" and run["exit_code"] == 0


def test_an_inline_command_answered_once_runs(place):
    inline_skill(place, 'touch "$TMPDIR/INLINE" && echo made')  # in the sandbox, the run's scratch is writable
    session = new_session(place)
    asker = Asker("once")
    assert "Today: made\n" in activation(session, asker)
    assert list(place.glob(".skills/runs/*/output/INLINE")), "the command ran, in its scratch folder"
    assert len(asker.requests) == 1 and asker.requests[0].path == '!touch "$TMPDIR/INLINE" && echo made'


def test_a_failing_inline_command_stops_the_activation(place):
    inline_skill(place, "echo oops >&2; exit 3")
    session = new_session(place)
    session.add_rule("allow", "x:!echo*")
    with pytest.raises(SkillNotActivated, match=r'^Shell command failed for pattern "!`echo oops >&2; exit 3`": '
                                                 r"exited with 3: oops$"):
        activation(session)


def test_an_inline_command_of_a_changed_reviewed_skill_is_denied(place):
    marker = place / "INLINE"
    folder = inline_skill(place, f"touch {marker}", scripts={"scripts/run.py": RUN})
    session = new_session(place)
    session.add_rule("allow", "x:!touch*")
    session.review("x", confirm=lambda: True)
    (folder / "scripts" / "run.py").write_text(RUN + "# changed\n", encoding="utf-8")
    with pytest.raises(SkillNotActivated) as stopped:
        activation(session)
    assert f'"!`touch {marker}`": refused: x/scripts/run.py is not the reviewed file' in str(stopped.value)
    assert not marker.exists()
    decision = [r for r in session.audit() if r["event"] == "decision"][-1]
    assert decision["decided_by"] == "skills.lock"


def test_inline_commands_do_not_see_secrets(place, secrets):
    inline_skill(place, "env")
    session = new_session(place)
    session.add_rule("allow", "x:!env")
    text = activation(session)
    assert "PATH=" in text
    assert not any(name in text or value in text for name, value in secrets.items())


def test_the_executor_runs_a_python_script_with_the_kernels_python(place):
    build_skill(place / "skills", scripts={"scripts/which.py": "import sys\nprint(sys.executable)\n"})
    session = new_session(place)
    result = session.run_script("x", "scripts/which.py")
    assert os.path.realpath(result.final_text.strip()) == os.path.realpath(sys.executable)
