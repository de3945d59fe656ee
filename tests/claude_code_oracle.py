"""The differential oracle: what the real Claude Code CLI sends the model for a set of skills, observed against the
local fake Messages API (`observe`), to compare with this project's own listing and activation.

One CLI run serves a whole case set: every case's skill is in one project folder, and the scripted model calls the
`Skill` tool once per case, with that case's arguments; each activated text (or the error that stopped it) is read
back from the requests Claude Code sends next. (`from claude_code_oracle import Case, observe`)
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from claude_code_fake import FAKE_MODEL, listing_entries, loop_replies
from fake_anthropic import FakeAnthropicServer, text_message, tool_message

ACTIVATION_HEADER = "Base directory for this skill: "
CLI_TIMEOUT_SECONDS = 300  # one run of the CLI for a whole case set


@dataclass
class Case:
    """A skill (`name`, its whole SKILL.md text, other files) and the arguments it is activated with (None: the
    model sends no `args` at all)."""

    name: str
    skill_md: str
    arguments: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    activate: bool = True


@dataclass
class Observation:
    listing: dict[str, str]  # name -> the listing entry Claude Code sent
    bodies: dict[str, str]  # name -> the activated text after the header line (what the model read)
    errors: dict[str, str]  # name -> the Skill tool's error, where activation stopped
    folders: dict[str, str]  # name -> the skill's folder as Claude Code named it
    session_id: str
    requests: list[dict]


def cli_path() -> str:
    from skills_magic.models.claude_code import bundled_cli

    return bundled_cli()


def write_cases(project: Path, cases: Sequence[Case]) -> None:
    for case in cases:
        folder = project / ".claude" / "skills" / case.name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(case.skill_md, encoding="utf-8")
        for relative, text in case.files.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_text(text, encoding="utf-8")


def observe(cases: Sequence[Case], *, environment: dict[str, str] | None = None, allowed: str = "Skill,Bash(echo *)",
            settings: dict | None = None, user_cases: Sequence[Case] = ()) -> Observation:
    """Run the real CLI over `cases` (the project's skills; `user_cases`: the user's own, in ~/.claude/skills) and
    read back what it sent the model."""
    activations = [c for c in [*cases, *user_cases] if c.activate]
    script = [tool_message("Skill", {"skill": c.name, **({} if c.arguments is None else {"args": c.arguments})})
              for c in activations] + [text_message("done")]
    log: list = []
    with tempfile.TemporaryDirectory(prefix="claude-code-oracle-") as root:
        project, home = Path(root) / "project", Path(root) / "home"
        home.mkdir()
        write_cases(project, cases)
        write_cases(home, user_cases)
        with FakeAnthropicServer(loop_replies(script, log)) as server:
            env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": server.url,
                   "ANTHROPIC_API_KEY": "sk-ant-oracle-fake", "CLAUDE_CODE_DISABLE_BUNDLED_SKILLS": "1",
                   "CLAUDE_CODE_DISABLE_CLAUDE_API_SKILL": "1", "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
                   "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **(environment or {})}
            command = [cli_path(), "-p", "go", "--output-format", "stream-json", "--verbose", "--model", FAKE_MODEL,
                       "--allowedTools", allowed, "--max-turns", str(len(activations) + 2)]
            if settings:
                command += ["--settings", json.dumps(settings)]
            done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True,
                                  timeout=CLI_TIMEOUT_SECONDS)
        if not log:
            raise AssertionError(f"Claude Code sent no request: {done.stderr[-2000:]}")
        return _read(log, activations, str(project))


def _read(log: list[dict], activations: Sequence[Case], project: str) -> Observation:
    last = log[-1]
    by_id: dict[str, str] = {}
    bodies, errors, folders = {}, {}, {}
    pending: str | None = None
    for message in last["messages"]:
        content = message["content"] if isinstance(message["content"], list) else [{"type": "text", "text": message["content"]}]
        for block in content:
            if block.get("type") == "tool_use" and block.get("name") == "Skill":
                by_id[block["id"]] = block["input"]["skill"]
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in by_id:
                name = by_id[block["tool_use_id"]]
                if block.get("is_error"):
                    inner = block.get("content")
                    errors[name] = inner if isinstance(inner, str) else json.dumps(inner)
                else:
                    pending = name
            elif block.get("type") == "text" and pending and block.get("text", "").startswith(ACTIVATION_HEADER):
                header, _, body = block["text"].partition("\n\n")
                folders[pending] = header[len(ACTIVATION_HEADER):]
                bodies[pending] = body
                pending = None
    session = json.loads(log[0].get("metadata", {}).get("user_id", "{}")).get("session_id", "")
    return Observation(listing_entries(log[0]), bodies, errors, folders, session, log)
