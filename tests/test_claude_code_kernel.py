"""Issue 16's "done when", in a real kernel: `%skills model claude-code` runs notebook 02's task through the real
Claude Code CLI against the local fake server (no key, no network) and shows its trace and cost; an eval runs
through both harnesses and is compared prompt by prompt; `--harness` switches one run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from claude_code_fake import FAKE_MODEL, side_request
from fake_anthropic import FakeAnthropicServer, forget_machine_setup, message, text_block, text_message, tool_message, usage
from kernels import bundle, execute, plain

from claude_code_fake import needs_claude_code

needs_claude_code()

RUN_MIME = "application/vnd.skills-magic.run+json"
EVAL_MIME = "application/vnd.skills-magic.eval+json"
TASK = "What is in ../examples/data/weather.csv? Is it ready for a monthly mean?"  # notebook 02's task
PROMPT_SET = Path(__file__).resolve().parents[1] / "notebooks" / "evals" / "activation.yaml"
# which skill a prompt's words call for; Claude Code's loop also takes the paraphrase of P1 (a difference to show)
ROUTES = {"CSV": "csv-profile", "lab-notebook": "lab-notebook-entry", "travel-policy": "source-verification",
          "adversarial votes": "claim-verification", "falsifying": "scientific-method"}
CLAUDE_CODE_ONLY = {"spreadsheet": "csv-profile"}


def _prompt_of(body: dict) -> str:
    for message_ in body["messages"]:
        content = message_["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for block in blocks:
            text = block.get("text", "") if block.get("type") == "text" else ""
            if text and not text.startswith("<system-reminder>") and "# Environment" not in text:
                return text
    return ""


def router(recorded):
    """The fake model of both harnesses: a keyword router that activates with whichever tool the request offers."""
    body = recorded.body
    if side_request(body):
        return text_message("A title")
    names = {t["name"] for t in body["tools"]}
    if any(m["role"] == "assistant" for m in body["messages"]):
        return text_message("Done.")
    prompt = _prompt_of(body)
    routes = dict(ROUTES, **(CLAUDE_CODE_ONLY if "Skill" in names else {}))
    skill = next((s for word, s in routes.items() if word.lower() in prompt.lower()), None)
    if skill is None:
        return text_message("No skill needed.")
    if "Skill" in names:
        return tool_message("Skill", {"skill": skill})
    return tool_message("activate_skill", {"name": skill})


def notebook02_task(recorded):
    """Notebook 02's run through Claude Code: activate csv-profile, read its reference, ask for its profiler
    (denied: nobody can answer a prompt in an unattended kernel), answer."""
    body = recorded.body
    if side_request(body):
        return text_message("A title")
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    script = [
        tool_message("Skill", {"skill": "csv-profile"}, usage=usage(1200, 30)),
        tool_message("Read", {"file_path": ".claude/skills/csv-profile/references/REFERENCE.md"}, usage=usage(1500, 20)),
        tool_message("Bash", {"command": "python3 .claude/skills/csv-profile/scripts/profile_csv.py ../examples/data/weather.csv",
                              "description": "profile"}, usage=usage(1700, 25)),
        message([text_block("It has a date, a station, temperatures and rain; check the missing values first.")],
                usage=usage(1900, 40)),
    ]
    return script[min(turn, len(script) - 1)]


@pytest.fixture
def kernel_env(monkeypatch, tmp_path):
    forget_machine_setup(monkeypatch, tmp_path)
    for name in ("SKILLS_MAGIC_PATH", "SKILLS_MAGIC_SOURCES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-fake-kernel-key-000")
    monkeypatch.setenv("SKILLS_MAGIC_DB", str(tmp_path / "audit.sqlite"))
    return monkeypatch


def test_notebook_02s_task_runs_through_claude_code_with_its_trace_and_cost(kernel_env, tmp_path):
    with FakeAnthropicServer([notebook02_task] * 100) as server:
        kernel_env.setenv("ANTHROPIC_BASE_URL", server.url)
        nb = execute(tmp_path, [
            "%env SKILLS_MAGIC_SOURCES=bundled",
            "%load_ext skills_magic",
            f"%skills model claude-code {FAKE_MODEL}",
            f"%%skill run\n{TASK}",
            "%skills trace",
            "%skills audit",
        ])
    assert "claude-code" in plain(nb.cells[2])
    run = bundle(nb.cells[3], RUN_MIME)
    assert run["client"] == "claude-code" and run["model"] == FAKE_MODEL and run["stop_reason"] == "end_turn"
    assert run["final_text"].startswith("It has a date")
    assert run["cost_usd"] > 0 and "cost $" in plain(nb.cells[3])
    stages = [(e["stage"], e["object"]) for e in run["trace"]]
    assert stages[0] == ("discover", "catalog of 6 skills")
    assert ("activate", "csv-profile") in stages and ("reference", "csv-profile/references/REFERENCE.md") in stages
    assert ("execute", "csv-profile/scripts/profile_csv.py") in stages
    calls = [e for e in run["trace"] if e["stage"] == "model" and e["object"].startswith("call")]
    assert [(e["input_tokens"], e["output_tokens"]) for e in calls] == [(1200, 30), (1500, 20), (1700, 25), (1900, 40)]
    assert run["usage"]["input_tokens"] == 1200 + 1500 + 1700 + 1900
    bash = next(c for c in run["tool_calls"] if c["name"] == "Bash")
    assert bash["is_error"] and "nobody can answer" in bash["error"]  # unattended: deny
    assert "csv-profile" in plain(nb.cells[4]) and "deny" in plain(nb.cells[5])


def test_an_eval_runs_through_both_harnesses_and_says_where_activation_differs(kernel_env, tmp_path):
    (tmp_path / "evals").mkdir()
    shutil.copy(PROMPT_SET, tmp_path / "evals" / "activation.yaml")
    with FakeAnthropicServer([router] * 400) as server:
        kernel_env.setenv("ANTHROPIC_BASE_URL", server.url)
        nb = execute(tmp_path, [
            "%env SKILLS_MAGIC_SOURCES=bundled",
            "%load_ext skills_magic",
            f"%skills model {FAKE_MODEL}",
            "%skills eval evals/activation.yaml --runs 1 --compare harness",
            "%skills eval evals/activation.yaml --runs 1 --harness claude-code",
            f"%%skill run --harness claude-code csv-profile\n{TASK}",
        ])
    compared = bundle(nb.cells[3], EVAL_MIME)
    assert [r["label"] for r in compared["reports"]] == ["native", "claude-code"]
    assert compared["differences"] == ["P1"]  # only the paraphrase the fake Claude Code loop takes differs
    assert "activation differs between native and claude-code on 1 of 15 prompts: P1" in plain(nb.cells[3])
    alone = bundle(nb.cells[4], EVAL_MIME)
    assert [r["label"] for r in alone["reports"]] == ["plain"]
    run = bundle(nb.cells[5], RUN_MIME)
    assert run["client"] == "claude-code" and run["skill"] == "csv-profile"
