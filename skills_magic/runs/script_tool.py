"""A skill's scripts as a run sees them: the model's `run_skill_script` tool and the user's `--no-model --script`
run, both through the gate, and the tool result a script's run becomes (its output, the files it wrote, what it
changed in the working folder pending `%skills apply`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from skills_magic.runs.agent import RunResult, TraceEvent
from skills_magic.runs.disclosure import InlineCommandError
from skills_magic.skills.skill import Skill

MAX_LISTED_OUTPUTS = 50  # files named in a tool result; the rest are counted (30,000 files must not make 8 MB)
MAX_TOOL_RESULT_CHARS = 1024 * 1024  # a script's whole tool result (output and file list) stays under this


class ScriptTool:
    """The model's script and inline-command runners for one model run, keeping what its scripts left.

    `placeholders`: the client's (a cassette writes a run id the tool result names as ${SKILLS_MAGIC_RUN_N}, so a
    replay matches though run ids differ)."""

    def __init__(self, gate, asker, placeholders: dict[str, str] | None = None):
        self.gate, self.asker, self.placeholders = gate, asker, placeholders
        self.outputs: list[dict[str, Any]] = []  # the files the run's scripts wrote, in run order
        self.changes: list[Any] = []  # changes.Change of the run's scripts, in run order
        self.run_ids: list[str] = []  # the run folders of the run's scripts
        self._named: list[str] = []  # the run ids the tool results named, in order

    def run_script(self, skill: Skill, path: str, arguments: Sequence[str], stdin: str):
        """(tool result text, is an error, trace event) for the model's `run_skill_script`."""
        outcome = self.gate.run_script(skill, path, arguments, stdin, self.asker)
        where = f"{skill.name}/{path}"
        if outcome.run is None:
            return outcome.error, True, TraceEvent("execute", where, bytes=len(stdin.encode("utf-8")), detail=outcome.error[:120])
        run = outcome.run
        event = TraceEvent("execute", where, bytes=run.stdin_bytes, detail=run.ending)
        files = outputs_of(run, where)
        self.outputs.extend(files)
        changes = changes_of(run)
        self.changes.extend(changes)
        if run.run_folder:
            self.run_ids.append(os.path.basename(run.run_folder))
        if changes and self.placeholders is not None and changes[0].run_id not in self._named:
            self._named.append(changes[0].run_id)
            self.placeholders.setdefault(changes[0].run_id, f"${{SKILLS_MAGIC_RUN_{len(self._named)}}}")
        listing = written_listing(files) + changes_listing(changes)
        hint = f"\n{run.hint}" if run.hint else ""  # the cause and its fix, last, where a model reads it
        if run.failed:
            return cap_tool_result(f"{path} {run.ending}\n{run.stderr}".rstrip() + hint, listing), True, event
        return cap_tool_result(run.stdout + hint, listing), False, event

    def expand_inline(self, skill: Skill, command: str) -> str:
        """An inline command's output for the activated body; InlineCommandError when it was denied or failed (the
        activation stops: disclosure.activation_body)."""
        outcome = self.gate.expand_inline(skill, command, self.asker)
        if outcome.error is not None or outcome.run is None:
            raise InlineCommandError(outcome.error or "it did not run")
        return outcome.run.stdout.rstrip("\n")

    def kept_in(self, result: RunResult) -> RunResult:
        """`result` with what the run's scripts left."""
        result.outputs, result.changes = list(self.outputs), list(self.changes)
        result.run_id = self.run_ids[-1] if self.run_ids else None
        return result


def run_directly(gate, skill: Skill, script: str, stdin: str, arguments: Sequence[str], asker) -> RunResult:
    """`--no-model --script`: the user runs one of a skill's scripts, with no model involved. It passes the same
    gate as a model's request (the manifest check, deny rules, the audit), except that the user typing the command
    answers the question a prompt would ask."""
    result = RunResult(task=stdin, skill=skill.name, client="none", model="-")
    outcome = gate.run_script(skill, script, arguments, stdin, asker, requested_by="user")
    where = f"{skill.name}/{script}"
    if outcome.run is None:
        result.error, result.stop_reason = outcome.error, "denied" if not outcome.allowed else "error"
        result.trace.append(TraceEvent("execute", where, bytes=len(stdin.encode("utf-8")), detail=(outcome.error or "")[:120]))
        return result
    run = outcome.run
    result.trace.append(TraceEvent("execute", where, bytes=run.stdin_bytes, detail=run.ending))
    result.final_text = run.stdout
    result.note = run.stderr.strip()
    result.outputs = outputs_of(run, where)
    result.changes = changes_of(run)
    result.run_id = os.path.basename(run.run_folder) if run.run_folder else None
    result.stop_reason = "script_failed" if run.failed else "no_model"
    if run.failed:
        result.error = f"{script} {run.ending}" + (f"\n{run.hint}" if run.hint else "")
    elif run.hint:  # it ended well but was refused something (a host): say what would allow it
        result.note = f"{result.note}\n{run.hint}".strip()
    return result


def written_listing(files: Sequence[dict[str, Any]]) -> str:
    """The lines that tell the model which files a run wrote: the first MAX_LISTED_OUTPUTS, then one line for the rest."""
    lines = [f"\n[wrote {o['path']} ({o['bytes']:,} bytes) in $SKILLS_MAGIC_OUTPUT]" for o in files[:MAX_LISTED_OUTPUTS]]
    rest = files[MAX_LISTED_OUTPUTS:]
    if rest:
        lines.append(f"\n[... and {len(rest):,} more files ({sum(o['bytes'] for o in rest):,} bytes) not listed]")
    return "".join(lines)


def changes_listing(changes: Sequence[Any]) -> str:
    """The lines that tell the model what a run changed in the working folder, pending the user's `%skills apply`:
    the first MAX_LISTED_OUTPUTS, then one line for the rest."""
    lines = [f"\n[{c.summary()} in the working folder: not applied; the user applies with %skills apply {c.run_id}]"
             for c in changes[:MAX_LISTED_OUTPUTS]]
    rest = changes[MAX_LISTED_OUTPUTS:]
    if rest:
        lines.append(f"\n[... and {len(rest):,} more changes ({sum(c.bytes for c in rest):,} bytes) in the working folder "
                     "not listed: not applied]")
    if changes:
        lines.append("\n[scripts run later see the working folder without these changes until the user applies them]")
    return "".join(lines)


def cap_tool_result(text: str, listing: str = "") -> str:
    """A script's tool result, output and file list together, cut to MAX_TOOL_RESULT_CHARS (and saying so)."""
    whole = text + listing
    if len(whole) <= MAX_TOOL_RESULT_CHARS:
        return whole
    room = max(0, MAX_TOOL_RESULT_CHARS - len(listing[:MAX_TOOL_RESULT_CHARS // 2]) - 100)
    return (text[:room] + f"\n[tool result cut: {len(whole) - room - len(listing[:MAX_TOOL_RESULT_CHARS // 2]):,} "
            "more characters not shown]" + listing[:MAX_TOOL_RESULT_CHARS // 2])


def outputs_of(run, script: str) -> list[dict[str, Any]]:
    """The files a sandboxed run left in its scratch folder: shown by name and size, kept by absolute path."""
    if not run.scratch:
        return []
    return [{"script": script, "path": path, "bytes": size, "file": os.path.join(run.scratch, path)}
            for path, size in run.outputs]


def changes_of(run) -> list[Any]:
    """What a sandboxed run changed in the working folder it saw copy-on-write (changes.Change, sorted by path)."""
    if not run.run_folder or not run.working_folder:
        return []
    from skills_magic.safety.working.changes import run_changes

    try:
        return run_changes(run.run_folder, run.working_folder)
    except OSError:  # the run's folder is unreadable: `%skills apply` says why
        return []
