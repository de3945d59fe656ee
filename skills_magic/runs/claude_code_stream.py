"""Claude Code's messages as a run's result: the answer streamed as it arrives, the trace, the tool calls, the
conversation in Messages API form, the tokens and Claude Code's own `total_cost_usd`."""

from __future__ import annotations

import json
import os
from typing import Any

from skills_magic.models.prices import cost_of
from skills_magic.runs.result import USAGE_KEYS, ToolCall, TraceEvent

FORKED = "(forked execution)"  # how Claude Code's Skill result says a `context: fork` skill ran as a sub-agent
ACTIVATION_START = "Base directory for this skill: "  # how Claude Code begins an activated skill's text
STOP_REASONS = {"success": "end_turn", "error_max_turns": "max_turns", "error_max_budget_usd": "max_budget",
                "error_during_execution": "error"}  # Claude Code's result subtypes in this project's words


def _size(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return len(text.encode("utf-8"))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


class Stream:
    """What one Claude Code run's messages add to its `RunResult` (`run.result`)."""

    def __init__(self, run, on_text, notify):
        self.run, self.result, self.on_text, self.notify = run, run.result, on_text, notify
        self.calls: dict[str, dict[str, Any]] = {}  # tool_use id -> its block, until its result arrives
        self.model_calls: dict[str, TraceEvent] = {}  # message id -> its model call's trace row
        self.streamed_usage: dict[str, dict[str, Any]] = {}  # message id -> the usage its stream reported
        self.streaming: str | None = None  # the message id being streamed
        self.ended = False  # Claude Code's result message arrived

    async def consume(self, prompt: list[Any], options) -> None:
        """Send the user's turns (a string or content blocks each) and take every message Claude Code answers."""
        from claude_agent_sdk import ClaudeSDKError, query

        async def turns():
            for content in prompt:
                yield {"type": "user", "message": {"role": "user", "content": content}, "parent_tool_use_id": None}

        for content in prompt:
            self.result.messages.append({"role": "user", "content": content})
        try:
            async for message in query(prompt=turns(), options=options):
                self.take(message)
        except ClaudeSDKError as error:  # Claude Code ended with an error result (a budget, a failed start)
            if not self.ended:  # its result message said nothing: this is all there is
                self.result.error = f"Claude Code stopped: {str(error).splitlines()[0]}"
                self.result.stop_reason = "error"

    def take(self, message: Any) -> None:
        kind = type(message).__name__
        if kind == "SystemMessage" and getattr(message, "subtype", "") == "init":
            self._init(message.data)
        elif kind == "StreamEvent":
            self._partial(message.event)
        elif kind == "AssistantMessage":
            self._assistant(message)
        elif kind == "UserMessage":
            self._user(message)
        elif kind == "ResultMessage":
            self._end(message)

    def _init(self, data: dict[str, Any]) -> None:
        skills = [s for s in data.get("skills") or [] if s in self.run.all_skills]
        detail = f"Claude Code {data.get('claude_code_version', '?')}; skills: {', '.join(skills) or 'none'}"
        if self.run.left_out_by_paths:
            detail += f"; {self.run.left_out_by_paths} left out by `paths`"
        self.result.system = f"(Claude Code's own system prompt; skills listed: {', '.join(skills) or 'none'})"
        self.result.trace.append(TraceEvent("discover", f"catalog of {len(skills)} skill{'' if len(skills) == 1 else 's'}",
                                            detail=detail))

    def _partial(self, event: dict[str, Any]) -> None:
        """Text as it arrives; a model call's tokens from its stream (the whole message carries only the first)."""
        if event.get("type") == "message_start":
            started = event.get("message") or {}
            self.streamed_usage[started.get("id")] = dict(started.get("usage") or {})
            self.streaming = started.get("id")
        elif event.get("type") == "message_delta" and self.streaming in self.streamed_usage:
            self.streamed_usage[self.streaming].update(event.get("usage") or {})
            self._count(self.streaming)
        delta = event.get("delta") or {}
        if self.on_text is not None and event.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            self.on_text(delta.get("text", ""))

    def _assistant(self, message: Any) -> None:
        blocks = [self._block(b) for b in message.content]
        blocks = [b for b in blocks if b is not None]
        identifier = getattr(message, "message_id", None) or str(id(message))
        if identifier not in self.model_calls:
            self.result.turns += 1
            event = TraceEvent("model", f"call {self.result.turns}",
                               detail="sub-agent" if getattr(message, "parent_tool_use_id", None) else "")
            self.model_calls[identifier] = event
            self.result.trace.append(event)
            self.streamed_usage.setdefault(identifier, dict(getattr(message, "usage", None) or {}))
            self._count(identifier)
        last = self.result.messages[-1] if self.result.messages else None
        if last is not None and last.get("role") == "assistant" and last.get("id") == identifier:
            last["content"].extend(blocks)  # Claude Code sends a model call's blocks one message at a time
        else:
            self.result.messages.append({"role": "assistant", "id": identifier, "content": blocks})
        text = _text_of(blocks)
        if text:
            self.result.final_text = text
            self.notify("text", text)
        for block in blocks:
            if block["type"] == "tool_use":
                self._tool_use(block)

    def _count(self, identifier: str | None) -> None:
        """A model call's trace row with the tokens reported so far (its stream's last word wins)."""
        event, usage = self.model_calls.get(identifier), self.streamed_usage.get(identifier) or {}
        if event is not None:
            event.input_tokens = int(usage.get("input_tokens") or 0)
            event.output_tokens = int(usage.get("output_tokens") or 0)
            event.cache_read_tokens = int(usage.get("cache_read_input_tokens") or 0)
            event.cache_write_tokens = int(usage.get("cache_creation_input_tokens") or 0)

    def _block(self, block: Any) -> dict[str, Any] | None:
        kind = type(block).__name__
        if kind == "TextBlock":
            return {"type": "text", "text": block.text}
        if kind == "ToolUseBlock":
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        if kind == "ToolResultBlock":
            return {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": block.content,
                    **({"is_error": True} if block.is_error else {})}
        return None  # thinking: not kept

    def _tool_use(self, block: dict[str, Any]) -> None:
        self.calls[block["id"]] = block
        data = block.get("input") or {}
        if block["name"] == "Skill":
            name = str(data.get("skill", ""))
            skill = self.run.all_skills.get(name)
            if skill is not None:
                self.run.activated[name] = skill
            args = data.get("args")
            self.result.trace.append(TraceEvent("activate", name, detail=f"args: {args}" if args else ""))
        elif block["name"] in ("Read", "Glob", "Grep"):
            path = data.get("file_path") or data.get("pattern") or data.get("path") or ""
            self.result.trace.append(TraceEvent("reference", self._shown(str(path)), detail=block["name"]))

    def _shown(self, path: str) -> str:
        """A path in a skill's copy as `skill/relative`; any other path as given."""
        target = os.path.realpath(os.path.join(self.run.project, path))
        for folder, skill in self.run.copies.items():
            if target.startswith(folder + os.sep):
                return f"{skill.name}/{os.path.relpath(target, folder)}"
        return path

    def _user(self, message: Any) -> None:
        content = message.content if isinstance(message.content, list) else [message.content]
        blocks = []
        for block in content:
            shaped = self._block(block) if not isinstance(block, (str, dict)) else (
                {"type": "text", "text": block} if isinstance(block, str) else block)
            if shaped is None:
                continue
            blocks.append(shaped)
            if shaped.get("type") == "tool_result":
                called = self.calls.pop(shaped.get("tool_use_id"), {})
                text = _text_of(shaped.get("content")) or str(shaped.get("content") or "")
                if called.get("name") == "Skill" and FORKED in text:  # `context: fork`: Claude Code's sub-agent ran it
                    self.result.trace.append(TraceEvent("fork", str((called.get("input") or {}).get("skill", "?")),
                                                        bytes=_size(text), detail="run by Claude Code in a forked context; only its result returned"))
                error = bool(shaped.get("is_error"))
                call = ToolCall(str(shaped.get("tool_use_id")), str(called.get("name", "?")), called.get("input"),
                                _size(text), error, text.splitlines()[0][:200] if error and text else None)
                self.result.tool_calls.append(call)
                self.notify("tool", call)
        if blocks:
            self.result.messages.append({"role": "user", "content": blocks})
        for block in blocks:  # the activated body, in the turn after the Skill tool's result: its size, measured
            text = block.get("text") if block.get("type") == "text" else None
            if text and text.startswith(ACTIVATION_START):
                activations = [e for e in self.result.trace if e.stage == "activate" and e.bytes is None]
                if activations:
                    activations[-1].bytes = _size(text)

    def _end(self, message: Any) -> None:
        self.ended = True
        usage = getattr(message, "usage", None) or {}
        self.result.usage = {key: int(usage.get(key) or 0) for key in USAGE_KEYS}
        self.result.cost_usd = getattr(message, "total_cost_usd", None)
        self.result.priced_usd = cost_of(self.result.model, usage)  # beside Claude Code's own figure
        subtype = getattr(message, "subtype", "")
        self.result.stop_reason = getattr(message, "stop_reason", None) or STOP_REASONS.get(subtype, subtype)
        if subtype == "error_max_budget_usd" and self.run.cap is not None:
            from skills_magic.runs.budget import STOP_REASON, dollars

            self.result.stop_reason = STOP_REASON
            self.result.note = (f"stopped by Claude Code at the cap of {dollars(self.run.cap.cap)} (its max_budget_usd, "
                                f"checked after each call): it reported {dollars(self.result.cost_usd)}")
        if subtype == "error_max_turns":
            self.result.stop_reason = "max_turns"
            self.result.note = f"stopped after {self.run.max_turns} model calls (--max-turns)"
        if getattr(message, "is_error", False) and subtype not in ("error_max_turns", "error_max_budget_usd"):
            self.result.error = str(getattr(message, "result", None) or subtype or "Claude Code ended with an error")
        answer = getattr(message, "result", None)
        if isinstance(answer, str) and answer and not self.result.error:
            self.result.final_text = answer
        if self.result.cost_usd is not None:
            self.result.trace.append(TraceEvent("model", "Claude Code's total", detail=f"total_cost_usd {self.result.cost_usd:.6f}"))
