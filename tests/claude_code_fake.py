"""The real Claude Code CLI (bundled in claude-agent-sdk) against `FakeAnthropicServer`: what tests need to script it.

Claude Code sends more than its agent loop's requests (a session title, say): `side_request` tells them apart (no
tools offered), and `loop_replies` answers those with a short text and the loop's requests from a script, by how
many assistant turns the request already holds (so a side request never shifts the script).
(`from claude_code_fake import needs_claude_code, loop_replies, system_text, sent_texts`)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from fake_anthropic import text_message

FAKE_MODEL = "claude-fake-1"
SPARE_REPLIES = 200  # replies queued per server: Claude Code's side requests take some


def needs_claude_code():
    """Skip (a failure under .ci/run) where the claude-code extra is not installed."""
    return pytest.importorskip("claude_agent_sdk", reason='the claude-code extra is not installed: pip install -e ".[test,claude-code]"')


def side_request(body: dict[str, Any]) -> bool:
    return not body.get("tools")


def assistant_turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def loop_replies(script: Sequence[Any] | Callable[[dict[str, Any]], Any], log: list | None = None) -> list:
    """Replies for a FakeAnthropicServer: the loop's n-th request (n assistant turns in it) gets `script[n]` (the
    last one again past the end), or `script(body)`; side requests get a title. `log` collects the loop's bodies."""
    def reply(recorded):
        body = recorded.body
        if side_request(body):
            return text_message("A title")
        if log is not None:
            log.append(body)
        if callable(script):
            return script(body)
        return script[min(assistant_turns(body), len(script) - 1)]

    return [reply] * SPARE_REPLIES


def system_text(body: dict[str, Any]) -> str:
    """Everything Claude Code sent as instructions: its system blocks and the system-like turns in its messages."""
    parts = [b.get("text", "") for b in body.get("system") or [] if isinstance(b, dict)]
    for message in body.get("messages", []):
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        parts.extend(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    return "\n".join(parts)


def sent_texts(body: dict[str, Any]) -> list[str]:
    """The text of every block of every message, tool results included, in order."""
    found = []
    for message in body.get("messages", []):
        content = message.get("content")
        for block in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                inner = block.get("content")
                found.append(inner if isinstance(inner, str) else json.dumps(inner))
            elif block.get("type") == "text":
                found.append(block.get("text", ""))
    return found


def listing_entries(body: dict[str, Any]) -> dict[str, str]:
    """Claude Code's skill listing as {name: entry text}: the lines after "The following skills are available"."""
    text = system_text(body)
    start = text.find("The following skills are available for use with the Skill tool:")
    if start < 0:
        return {}
    entries: dict[str, str] = {}
    name = None
    for line in text[start:].splitlines()[1:]:
        if line.startswith("- ") and ":" in line:
            name, _, entry = line[2:].partition(": ")
            entries[name] = entry
        elif name is not None and line and not line.startswith("- ") and entries:
            if line.startswith("#") or line.startswith("<"):
                break
            entries[name] += "\n" + line
        elif not line and entries:
            break
    return entries
