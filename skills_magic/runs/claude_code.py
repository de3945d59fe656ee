"""A run through the real Claude Code (`%skills model claude-code`, `--harness claude-code`), with the same gate.

Claude Code runs in an isolated workspace made for the run: its own HOME (the user's Claude Code settings, skills
and memory stay out), a project folder holding private copies of exactly the run's visible skills (so Claude Code
lists those and no others; its bundled skills are switched off), and an environment cut down to what Claude Code
needs to reach the API. Every tool use it asks for goes through `can_use_tool` here:

- `Skill`: allowed (an activation runs nothing: Claude Code's inline `!` commands are switched off with its own
  `disableSkillShellExecution`, because Claude Code runs them without asking `can_use_tool`);
- `Bash`: allowed only when the command runs one of a listed skill's bundled scripts. The script then runs through
  this project's gate (policy, prompt or deny, sandbox, audit) right here, and Claude Code's command is replaced by
  one that prints what the sandboxed run printed. Any other command is denied;
- `Read`, `Glob`, `Grep`: allowed inside the workspace (the skills' files), denied outside;
- anything else (writes, the web, sub-agents' tools outside these) is denied.

The trace is built from Claude Code's messages: its catalog, each model call with its tokens, each Skill
activation, file read and command, and Claude Code's own `total_cost_usd`.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from skills_magic.errors import SkillsMagicError
from skills_magic.models.base import ModelClient, NoModelConfigured, capabilities
from skills_magic.models.claude_code import bundled_cli, cli_version
from skills_magic.runs import fields
from skills_magic.runs.budget import capped
from skills_magic.runs.orchestrate import run as in_own_loop
from skills_magic.runs.result import RunResult, ToolCall, TraceEvent
from skills_magic.safety.private_copy import private_copy
from skills_magic.skills.listing import DEFAULT_BUDGET_CHARS
from skills_magic.skills.skill import Skill

DEFAULT_MAX_TURNS = 20  # as the native loop: model calls per run
INTERPRETERS = frozenset({"python", "python3", "bash", "sh", "node"})  # what may stand before a script's path
# Claude Code's settings for a run: no inline `!` commands (they would bypass can_use_tool), no bundled skills or
# built-in plugins, no hooks, no auto memory
BUILTIN_PLUGINS = ("cc-plugin-agents-md@builtin", "cc-plugin-privacy@builtin", "cc-plugin-plugin-authoring@builtin")
RUN_SETTINGS = {"disableSkillShellExecution": True, "disableBundledSkills": True, "disableAllHooks": True,
                "autoMemoryEnabled": False, "includeCoAuthoredBy": False,
                # the plugins Claude Code builds in bring a skill of their own, which a sub-agent's listing shows
                "enabledPlugins": dict.fromkeys(BUILTIN_PLUGINS, False)}
RUN_ENVIRONMENT = {"CLAUDE_CODE_DISABLE_BUNDLED_SKILLS": "1", "CLAUDE_CODE_DISABLE_CLAUDE_API_SKILL": "1",
                   "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1", "CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1",
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                   "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK": "1"}
PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")
PASSED_PREFIXES = ("CLAUDE_CODE_", "CLAUDE_AGENT_SDK_", "DISABLE_")  # the SDK's and ours; never the user's others
TOOLS = ["Skill", "Read", "Glob", "Grep", "Bash"]  # Claude Code's built-in tools a run is offered
DENIED_COMMAND = ("not run: {why}; this harness runs only a listed skill's bundled scripts (python/bash/sh/node "
                  "SCRIPT ARGS), through the permission policy")

# the launcher Claude Code is started through: a fresh environment holding only the variables named, so nothing
# else of the kernel's environment (other keys, tokens) reaches Claude Code or the commands it starts
LAUNCHER = '''#!{python} -I
import os, sys
keep = {keep!r}
prefixes = {prefixes!r}
env = {{k: v for k, v in os.environ.items() if k in keep or k.startswith(prefixes)}}
env.update({fixed!r})
os.execve({cli!r}, [{cli!r}, *sys.argv[1:]], env)
'''


class ClaudeCodeError(SkillsMagicError):
    """A Claude Code run could not start or ended in a way that has no answer."""


class ClaudeCodeRun:
    """One run of a task through Claude Code, with the arguments the native `Agent` takes."""

    def __init__(self, skills: Sequence[Skill], model: ModelClient, model_id: str, *,
                 show_path: Callable[[str], str], session_id: str = "", budget: int | None = DEFAULT_BUDGET_CHARS,
                 max_turns: int = DEFAULT_MAX_TURNS, run_script=None, files: Sequence[str] = (), **ignored: Any):
        self.all_skills = {s.name: s for s in skills}
        visible, self.left_out_by_paths = fields.visible_for_files([s for s in skills if s.model_visible], files)
        self.visible = {s.name: s for s in visible}
        self.model, self.model_id, self.show_path = model, model_id, show_path
        self.session_id, self.max_turns, self.run_script = session_id, max_turns, run_script
        self.not_offered = sorted(k for k in ("ledger", "python_tools", "learned") if ignored.get(k))
        self.cap = ignored.get("cap") or capped(ignored.get("max_cost"))  # kept by Claude Code's own max_budget_usd
        self.activated: dict[str, Skill] = {}
        self.copies: dict[str, Skill] = {}  # the private copy's folder -> the skill it is a copy of

    # --- the workspace --------------------------------------------------------------------------------------------

    def _workspace(self, root: str, explicit: Skill | None) -> tuple[str, dict[str, str]]:
        """The project folder Claude Code starts in, with copies of the run's skills, and its environment."""
        home, project = os.path.join(root, "home"), os.path.join(root, "project")
        skills_folder = os.path.join(project, ".claude", "skills")
        os.makedirs(os.path.join(home, ".claude"))
        os.makedirs(skills_folder)
        os.makedirs(os.path.join(root, "results"))
        given = dict(self.visible)
        if explicit is not None:
            given[explicit.name] = explicit
        for name, skill in sorted(given.items()):
            copy = os.path.join(skills_folder, name)
            try:
                private_copy(name, skill.folder, copy, None)
            except (SkillsMagicError, OSError) as error:  # a skill whose files cannot be copied is not given
                self.notes.append(f"{name} not given to Claude Code: {error}")
                continue
            self.copies[os.path.realpath(copy)] = skill
        environment = {**RUN_ENVIRONMENT, "HOME": home, "CLAUDE_CONFIG_DIR": os.path.join(home, ".claude"),
                       "TMPDIR": os.path.join(root, "tmp")}
        os.makedirs(environment["TMPDIR"])
        launcher = os.path.join(root, "claude")
        with open(launcher, "w", encoding="utf-8") as handle:
            handle.write(LAUNCHER.format(python=sys.executable, keep=PASSED_VARIABLES, prefixes=PASSED_PREFIXES,
                                         fixed=environment, cli=bundled_cli()))
        os.chmod(launcher, 0o700)
        return project, environment

    # --- permissions -----------------------------------------------------------------------------------------------

    def _inside_workspace(self, path: Any) -> bool:
        if not isinstance(path, str) or not path:
            return True  # Glob/Grep with no path search the project folder, the workspace
        target = os.path.realpath(os.path.join(self.project, path))
        return target == self.root or target.startswith(self.root + os.sep)

    def _script_of(self, command: str) -> tuple[Skill, str, list[str]] | str:
        """The skill, script and arguments a Bash command runs; else why it is not one."""
        try:
            words = shlex.split(command)
        except ValueError as error:
            return f"the command cannot be read ({error})"
        base = self.project
        if len(words) > 3 and words[0] == "cd" and words[2] == "&&":
            base, words = os.path.join(self.project, words[1]), words[3:]
        if any(w in ("&&", "||", ";", "|", ">", ">>", "<", "&") for w in words):
            return "it runs more than one script"
        if words and os.path.basename(words[0]) in INTERPRETERS:
            words = words[1:]
            while words and words[0].startswith("-") and words[0] in ("-u", "-B", "-E", "-s"):
                words = words[1:]
        if not words:
            return "it names no script"
        target = os.path.realpath(os.path.join(base, os.path.expanduser(words[0])))
        for folder, skill in self.copies.items():
            if target.startswith(folder + os.sep):
                return skill, os.path.relpath(target, folder).replace(os.sep, "/"), words[1:]
        return f"{words[0]!r} is no file of a listed skill"

    async def _can_use_tool(self, name: str, data: dict[str, Any], context: Any):
        from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny

        if name == "Skill":
            return PermissionResultAllow()
        if name in ("Read", "Glob", "Grep"):
            path = data.get("file_path", data.get("path"))
            if self._inside_workspace(path):
                return PermissionResultAllow()
            for event in reversed(self.result.trace):  # the row the request made says it was refused
                if event.stage == "reference":
                    event.detail = "denied: outside the skills' folders"
                    break
            return PermissionResultDeny(message=f"{path} is outside the skills' folders: only their files can be read")
        if name != "Bash":
            self.result.trace.append(TraceEvent("execute", name, detail="denied: not offered by this harness"))
            return PermissionResultDeny(message=f"{name} is not permitted in this run")
        found = self._script_of(str(data.get("command", "")))
        if isinstance(found, str) or self.run_script is None:
            why = found if isinstance(found, str) else "no permission policy runs scripts in this run"
            self.result.trace.append(TraceEvent("execute", str(data.get("command", ""))[:80], detail=f"denied: {why}"))
            return PermissionResultDeny(message=DENIED_COMMAND.format(why=why))
        skill, path, arguments = found
        # the gate may ask the user (a prompt, or the widget's buttons): not on the event loop's thread
        content, failed, event = await asyncio.to_thread(self.run_script, skill, path, arguments, "")
        self.result.trace.append(event)
        if failed and (event.detail or "").startswith("denied"):
            return PermissionResultDeny(message=content)
        self.printed += 1
        printed = os.path.join(self.root, "results", f"{self.printed}.txt")
        with open(printed, "w", encoding="utf-8") as handle:
            handle.write(content)
        command = f"cat {shlex.quote(printed)}" + ("; exit 1" if failed else "")
        return PermissionResultAllow(updated_input={**data, "command": command})

    # --- the run ----------------------------------------------------------------------------------------------------

    def run(self, task: str | list[dict[str, Any]], skill: str | None = None, arguments: str | Sequence[str] = "",
            on_text=None, on_event=None, *, messages: Sequence[dict[str, Any]] = (), activated=None,
            system: str | None = None) -> RunResult:
        if messages:
            raise ClaudeCodeError("--continue is not available with the claude-code harness yet: start a new run")
        if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
            raise NoModelConfigured()
        chosen = self.all_skills.get(skill) if skill else None
        if skill and chosen is None:
            raise ClaudeCodeError(f"no skill named {skill!r}")
        text = task if isinstance(task, str) else next((b["text"] for b in reversed(task) if b.get("type") == "text"), "")
        self.result = RunResult(task=text, skill=skill, client="claude-code", model=self.model_id)
        self.notes: list[str] = [f"not offered through Claude Code: {', '.join(self.not_offered)}"] if self.not_offered else []
        self.printed = 0
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="skills-magic-claude-code-"))
        try:
            self.project, environment = self._workspace(self.root, chosen)
            words = arguments if isinstance(arguments, str) else shlex.join(arguments)
            prompt = self._prompt(task, chosen, words)
            if chosen is not None:  # Claude Code expands `/name args` itself: no Skill tool use says so
                self.activated[chosen.name] = chosen
                self.result.trace.append(TraceEvent("activate", chosen.name, detail=f"/{chosen.name} {words}".rstrip()))
            from skills_magic.runs.claude_code_stream import Stream

            stream = Stream(self, on_text, on_event or (lambda kind, value: None))
            options = self._options(environment)
            in_own_loop(stream.consume(prompt, options))
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
        self.result.note = "; ".join(n for n in [*self.notes, self.result.note] if n)
        self.result.activated = list(self.activated)
        return self.result

    def _prompt(self, task, chosen: Skill | None, arguments: str) -> list[Any]:
        """The user's turns: for an explicit skill Claude Code's own invocation `/name args` first (a string, as a
        user types it: the rest of that line is its arguments, verbatim), then the task as the next turn."""
        blocks = [{"type": "text", "text": task}] if isinstance(task, str) else list(task)
        blocks = [b for b in blocks if b.get("type") != "text" or b.get("text")]
        turns: list[Any] = [f"/{chosen.name} {arguments}".rstrip()] if chosen is not None else []
        return [*turns, blocks] if blocks else turns

    def _options(self, environment: dict[str, str]):
        import json

        from claude_agent_sdk import ClaudeAgentOptions

        return ClaudeAgentOptions(
            cwd=self.project, cli_path=os.path.join(self.root, "claude"), env=environment,
            model=self.model_id or None, max_turns=self.max_turns, tools=list(TOOLS),
            can_use_tool=self._can_use_tool, setting_sources=["project"], skills=sorted(
                {self.copies[c].name for c in self.copies}), settings=json.dumps(RUN_SETTINGS),
            include_partial_messages=True, stderr=self._stderr, max_budget_usd=self._budget_left())

    def _budget_left(self) -> float | None:
        """What the cap leaves for Claude Code's own `max_budget_usd` (it checks after each call, not before)."""
        if self.cap is None or self.cap.cap is None:
            return None
        return max(self.cap.cap - self.cap.spent, 0.0)

    def _stderr(self, line: str) -> None:
        self.stderr_lines = getattr(self, "stderr_lines", [])[-20:] + [line]


def loop_for(client: ModelClient):
    """The class whose `run` drives a run with this client: Claude Code's, or the native `Agent`."""
    from skills_magic.runs.agent import Agent

    return ClaudeCodeRun if capabilities(client).harness == "claude-code" else Agent


def version_line() -> str:
    return f"Claude Code {cli_version() or '(version unknown)'}"


__all__ = ["ClaudeCodeError", "ClaudeCodeRun", "ToolCall", "version_line"]
