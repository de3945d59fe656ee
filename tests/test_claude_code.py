"""Claude Code as a second harness: the real CLI (bundled in claude-agent-sdk) against the local fake Messages API.

What it is given (exactly the session's visible skills, nothing of the user's own Claude Code setup), what it may do
(every tool use through this project's gate: unattended means deny; a listed skill's script runs in our sandbox;
nothing else runs), and what a run returns (trace, tokens, Claude Code's own cost)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from claude_code_fake import FAKE_MODEL, listing_entries, loop_replies, needs_claude_code, sent_texts, system_text
from fake_anthropic import FakeAnthropicServer, forget_machine_setup, message, text_block, tool_message, usage
from skillfiles import make_skill, write_file

needs_claude_code()

from skills_magic.session import SkillsSession  # noqa: E402

FAKE_KEY = "sk-ant-api03-fake-claude-code-key-0123456789"
PLANTED = "planted-secret-value-4242"
SCRIPT = """import os, sys
print("script ran with", sys.argv[1:])
print("key seen:", os.environ.get("ANTHROPIC_API_KEY"), "planted seen:", os.environ.get("PLANTED_TOKEN"))
"""


@pytest.fixture
def project(monkeypatch, tmp_path):
    """A notebook folder with two skills of its own, a machine with a user's Claude Code setup that must not leak."""
    forget_machine_setup(monkeypatch, tmp_path)
    home = tmp_path / "home"
    make_skill(home / ".claude" / "skills" / "users-own-skill", name="users-own-skill",
               description="A skill from the user's own Claude Code folder. Use always.")
    write_file(home / ".claude", "CLAUDE.md", "USER-MEMORY-MARKER: always answer in French.\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("PLANTED_TOKEN", PLANTED)
    folder = tmp_path / "notebook"
    skills = folder / "skills"
    make_skill(skills / "csv-peek", name="csv-peek", description="Peek at a CSV file. Use when asked what a CSV holds.",
               body="# CSV peek\n\nRun `python3 ${CLAUDE_SKILL_DIR}/scripts/peek.py FILE`.\nSee references/notes.md.\n")
    write_file(skills / "csv-peek", "scripts/peek.py", SCRIPT)
    write_file(skills / "csv-peek", "references/notes.md", "NOTES-MARKER\n")
    make_skill(skills / "inline-cmd", name="inline-cmd", description="Has an inline command. Use when asked to mark.",
               body=f"Marked: !`touch {folder}/inline-ran; echo yes`\n")
    monkeypatch.setenv("SKILLS_MAGIC_PATH", str(skills))
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "path")
    monkeypatch.chdir(folder)
    return folder


def session_at(folder: Path, server: FakeAnthropicServer) -> SkillsSession:
    os.environ["ANTHROPIC_BASE_URL"] = server.url
    session = SkillsSession(cwd=str(folder))
    session.choose_model("claude-code", FAKE_MODEL)
    return session


def test_claude_code_sees_exactly_the_sessions_skills_and_nothing_of_the_users_setup(project, monkeypatch):
    log: list = []
    with FakeAnthropicServer(loop_replies([message([text_block("Nothing to do.")], usage=usage(900, 12))], log)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = session_at(project, server).run("Say hello.")
    assert result.ok and result.final_text == "Nothing to do."
    assert set(listing_entries(log[0])) == {"csv-peek", "inline-cmd"}  # no bundled skill, not the user's own
    sent = system_text(log[0])
    assert "users-own-skill" not in sent and "USER-MEMORY-MARKER" not in sent
    assert "Peek at a CSV file" in listing_entries(log[0])["csv-peek"]
    assert {t["name"] for t in log[0]["tools"]} <= {"Skill", "Read", "Glob", "Grep", "Bash", "DeferredToolPlaceholder"}
    assert result.client == "claude-code" and result.model == FAKE_MODEL
    assert result.trace[0].stage == "discover" and "csv-peek" in result.trace[0].detail
    model_rows = [e for e in result.trace if e.stage == "model" and e.object.startswith("call")]
    assert [(e.input_tokens, e.output_tokens) for e in model_rows] == [(900, 12)]
    assert result.usage["input_tokens"] == 900 and result.cost_usd is not None and result.cost_usd > 0


def test_a_skill_script_the_model_runs_through_bash_is_denied_unattended_and_audited(project, monkeypatch):
    command = f"python3 {project}/skills/csv-peek/scripts/peek.py data.csv"
    script = [
        tool_message("Skill", {"skill": "csv-peek"}),
        tool_message("Bash", {"command": ".claude/skills/csv-peek/scripts/peek.py data.csv", "description": "peek"}),
        tool_message("Bash", {"command": command, "description": "peek, outside"}),
        message([text_block("Could not run it.")]),
    ]
    log: list = []
    with FakeAnthropicServer(loop_replies(script, log)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        session = session_at(project, server)
        result = session.run("What is in data.csv?")
    assert result.activated == ["csv-peek"]
    assert any("# CSV peek" in text for text in sent_texts(log[1]))  # Claude Code's activation reached the model
    answers = [c for c in result.tool_calls if c.name == "Bash"]
    assert all(c.is_error for c in answers) and "nobody can answer" in answers[0].error
    assert "no file of a listed skill" in answers[1].error  # the original folder is no listed skill's copy
    rows = [r for r in session.audit() if r["event"] == "decision"]
    assert rows and rows[-1]["skill"] == "csv-peek" and rows[-1]["decision"] == "deny"
    assert not any("script ran" in text for text in sent_texts(log[-1]))


def test_an_allowed_script_runs_in_our_sandbox_without_the_key_and_its_output_reaches_the_model(project, monkeypatch):
    script = [
        tool_message("Skill", {"skill": "csv-peek"}),
        tool_message("Bash", {"command": "cd .claude/skills/csv-peek && python3 scripts/peek.py 'a b.csv'",
                              "description": "peek"}),
        message([text_block("Done.")]),
    ]
    log: list = []
    with FakeAnthropicServer(loop_replies(script, log)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        session = session_at(project, server)
        session.add_rule("allow", "csv-peek:scripts/peek.py")
        result = session.run("What is in data.csv?")
    printed = next(t for t in sent_texts(log[-1]) if "script ran" in t)
    assert "script ran with ['a b.csv']" in printed
    assert "key seen: None" in printed and "planted seen: None" in printed and FAKE_KEY not in printed
    assert [r["event"] for r in session.audit()][-2:] == ["decision", "run"]
    assert any(e.stage == "execute" and e.object == "csv-peek/scripts/peek.py" for e in result.trace)


def test_commands_reads_and_inline_commands_outside_the_skills_do_not_happen(project, monkeypatch, tmp_path):
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    write_file(secret.parent, "id_rsa", "PRIVATE-KEY-MARKER\n")
    script = [
        tool_message("Skill", {"skill": "inline-cmd"}),
        tool_message("Bash", {"command": f"cat {secret}", "description": "read it"}),
        tool_message("Read", {"file_path": str(secret)}),
        tool_message("Read", {"file_path": ".claude/skills/csv-peek/references/notes.md"}),
        tool_message("Write", {"file_path": str(project / "planted.txt"), "content": "x"}),
        message([text_block("Done.")]),
    ]
    log: list = []
    with FakeAnthropicServer(loop_replies(script, log)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = session_at(project, server).run("Mark it.")
    texts = "\n".join(sent_texts(log[-1]))
    assert "PRIVATE-KEY-MARKER" not in texts
    assert not (project / "inline-ran").exists()  # Claude Code's inline `!` commands never run here
    assert not (project / "planted.txt").exists()
    assert "NOTES-MARKER" in texts  # the skills' own files can be read
    errors = {c.name: c.error for c in result.tool_calls if c.is_error}
    assert "Bash" in errors and "Read" in errors
    denied = [e for e in result.trace if "denied" in (e.detail or "")]
    assert len(denied) >= 2


def test_the_launcher_passes_claude_code_only_the_variables_it_needs(tmp_path, monkeypatch):
    from skills_magic.runs import claude_code

    launcher = tmp_path / "launcher"
    launcher.write_text(claude_code.LAUNCHER.format(python=sys.executable, keep=claude_code.PASSED_VARIABLES,
                                                    prefixes=claude_code.PASSED_PREFIXES, fixed={"HOME": "/nowhere"},
                                                    cli="/usr/bin/env"), encoding="utf-8")
    launcher.chmod(0o700)
    environment = {"PATH": os.environ["PATH"], "ANTHROPIC_API_KEY": FAKE_KEY, "AWS_SECRET_ACCESS_KEY": PLANTED,
                   "GITHUB_TOKEN": PLANTED, "CLAUDE_CODE_ENTRYPOINT": "sdk-py", "HOME": "/root/real-home"}
    printed = subprocess.run([str(launcher)], env=environment, capture_output=True, text=True, check=True).stdout
    seen = dict(line.split("=", 1) for line in printed.splitlines())
    assert seen["ANTHROPIC_API_KEY"] == FAKE_KEY and seen["HOME"] == "/nowhere" and seen["CLAUDE_CODE_ENTRYPOINT"] == "sdk-py"
    assert PLANTED not in printed


def test_an_explicit_skill_is_claude_codes_own_invocation_with_the_arguments_verbatim(project, monkeypatch):
    make_skill(project / "skills" / "echo-args", name="echo-args", description="Echo. Use when asked to echo.",
               body="ARGS=[$ARGUMENTS] FIRST=[$0]\n")
    log: list = []
    with FakeAnthropicServer(loop_replies([message([text_block("echoed")])], log)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = session_at(project, server).run("", skill="echo-args", arguments='"hello world" second --dry-run')
    assert result.ok and result.activated == ["echo-args"]
    assert any('ARGS=["hello world" second --dry-run] FIRST=[hello world]' in t for t in sent_texts(log[0]))


def test_without_the_extra_or_a_key_the_choice_says_what_to_do(project, monkeypatch):
    from skills_magic.models.base import NoModelConfigured
    from skills_magic.models.claude_code import CLI_VARIABLE, ClaudeCodeMissing

    monkeypatch.setenv(CLI_VARIABLE, str(project / "no-such-cli"))
    with pytest.raises(ClaudeCodeMissing, match="not an executable"):
        SkillsSession(cwd=str(project)).choose_model("claude-code")
    monkeypatch.delenv(CLI_VARIABLE)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    session = SkillsSession(cwd=str(project))
    session.choose_model("claude-code", FAKE_MODEL)
    with pytest.raises(NoModelConfigured):
        session.run("Say hello.")


def test_a_fork_skill_runs_as_claude_codes_sub_agent_and_only_its_result_returns(project, monkeypatch):
    make_skill(project / "skills" / "forky", "name: forky\ndescription: Runs apart. Use when asked to fork.\n"
                                             "context: fork\n", "FORK-BODY: summarise $ARGUMENTS\n")

    def script(body):
        sent = "\n".join(sent_texts(body))
        if "FORK-BODY" in sent and not any(m["role"] == "assistant" for m in body["messages"]):
            return message([text_block("CHILD-ANSWER")])  # the sub-agent's first (and only) call
        if not any(m["role"] == "assistant" for m in body["messages"]):
            return tool_message("Skill", {"skill": "forky", "args": "the notes"})
        return message([text_block("Parent done.")])

    log: list = []
    with FakeAnthropicServer(loop_replies(script, log)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = session_at(project, server).run("Fork it.")
    child = next(b for b in log if "FORK-BODY" in "\n".join(sent_texts(b)))
    assert "plugin-authoring" not in system_text(child)  # Claude Code's built-in plugins are off, sub-agents too
    parent_last = "\n".join(sent_texts(log[-1]))
    assert "CHILD-ANSWER" in parent_last and "FORK-BODY" not in parent_last  # the result alone came back
    assert any(e.stage == "fork" and e.object == "forky" for e in result.trace)
    assert result.final_text == "Parent done."


def test_behaviour_evals_and_batches_are_refused_with_the_claude_code_harness(project):
    from skills_magic.errors import InvalidArgument

    prompts = project / "prompts.yaml"
    prompts.write_text("prompts:\n  - {id: D1, category: direct, expected: [csv-peek], prompt: Peek at data.csv.}\n",
                       encoding="utf-8")
    session = SkillsSession(cwd=str(project))
    session.choose_model("claude-code", FAKE_MODEL)
    with pytest.raises(InvalidArgument, match="native harness"):
        session.eval(str(prompts), behaviour=True)
    with pytest.raises(InvalidArgument, match="Message Batches"):
        session.eval(str(prompts), batch=True)


def test_a_skill_with_a_link_leaving_it_is_not_given_to_claude_code(project, monkeypatch, tmp_path):
    """A cloned skill whose reference is a symlink to the user's key: Claude Code reads files inside its workspace
    without asking, so such a skill is not copied there at all (the run's note says why)."""
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    write_file(secret.parent, "id_rsa", "PRIVATE-KEY-MARKER\n")
    folder = project / "skills" / "linky"
    make_skill(folder, name="linky", description="Has a linked reference. Use when asked about links.")
    (folder / "references").mkdir()
    (folder / "references" / "key.md").symlink_to(secret)
    script = [tool_message("Read", {"file_path": ".claude/skills/linky/references/key.md"}), message([text_block("ok")])]
    log: list = []
    with FakeAnthropicServer(loop_replies(script, log)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = session_at(project, server).run("Read the linked reference.")
    assert "linky" not in listing_entries(log[0]) and "linky not given to Claude Code" in result.note
    assert "PRIVATE-KEY-MARKER" not in "\n".join(sent_texts(log[-1]))


def test_a_cap_becomes_claude_codes_max_budget_and_its_stop_is_said(project, monkeypatch):
    """Claude Code keeps a cap itself (`max_budget_usd`, checked after each call): a run over it stops as max_cost."""
    script = [tool_message("Skill", {"skill": "csv-peek"}, usage=usage(400_000, 1000)),
              tool_message("Skill", {"skill": "inline-cmd"}, usage=usage(400_000, 1000)),
              message([text_block("never reached")])]
    log: list = []
    with FakeAnthropicServer(loop_replies(script, log)) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        result = session_at(project, server).run("Peek.", max_cost=0.5)
    assert result.stop_reason == "max_cost" and "max_budget_usd" in result.note
    assert len(log) < len(script)  # it stopped before the loop ran out
