"""Claude Code as a second harness: the client `%skills model claude-code [MODEL]` chooses.

Claude Code runs its own agent loop (its system prompt, its `Skill` tool, its Read and Bash), so this client is no
Messages API client: `runs.claude_code` drives it through `claude-agent-sdk` (the optional extra
`skills-magic[claude-code]`, which bundles the Claude Code CLI). This module only names the harness and finds the
CLI; importing it imports nothing heavy.
"""

from __future__ import annotations

import importlib.util
import os

from skills_magic.errors import SkillsMagicError
from skills_magic.models.base import ModelError, Request, Response

CLI_VARIABLE = "SKILLS_MAGIC_CLAUDE_CODE_CLI"  # another Claude Code CLI than the bundled one (a newer release, say)
INSTALL_HINT = 'pip install "skills-magic[claude-code]"'


class ClaudeCodeMissing(SkillsMagicError):
    """The claude-code extra is not installed, or its CLI is not where it should be."""


class ClaudeCodeHarness:
    """The model client of a Claude Code run: a name, the model id it asks for, and where its CLI is."""

    name = "claude-code"
    harness = "claude-code"
    supports_batches = False
    placeholders = None
    recorded_model = None

    def __init__(self, model: str | None = None):
        self.model = model
        self.source = f"Claude Code {cli_version() or '(version unknown)'}"

    def create(self, request: Request, on_text=None) -> Response:
        raise ModelError("Claude Code runs its own loop: it answers whole runs (runs.claude_code), not single "
                         "Messages API requests", kind="harness")

    async def acreate(self, request: Request) -> Response:
        return self.create(request)

    def for_new_loop(self) -> ClaudeCodeHarness:
        return self


def sdk_installed() -> bool:
    return importlib.util.find_spec("claude_agent_sdk") is not None


def bundled_cli() -> str:
    """The Claude Code CLI a run starts: $SKILLS_MAGIC_CLAUDE_CODE_CLI, else the one claude-agent-sdk bundles."""
    chosen = os.environ.get(CLI_VARIABLE)
    if chosen:
        if not os.access(chosen, os.X_OK):
            raise ClaudeCodeMissing(f"{CLI_VARIABLE}={chosen} is not an executable file")
        return chosen
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or not spec.submodule_search_locations:
        raise ClaudeCodeMissing(f"the Claude Code harness needs claude-agent-sdk: {INSTALL_HINT}")
    cli = os.path.join(list(spec.submodule_search_locations)[0], "_bundled", "claude")
    if not os.access(cli, os.X_OK):
        raise ClaudeCodeMissing(f"claude-agent-sdk is installed without its bundled CLI ({cli}); reinstall it: {INSTALL_HINT}")
    return cli


def cli_version() -> str | None:
    """The bundled CLI's version as its package records it (`2.1.332`), without starting it."""
    try:
        cli = bundled_cli()
    except ClaudeCodeMissing:
        return None
    recorded = os.path.join(os.path.dirname(cli), "claude.version")
    try:
        with open(recorded, encoding="utf-8") as handle:
            return handle.read().split()[0]
    except (OSError, IndexError):
        return None
