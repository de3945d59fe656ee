"""A conversation across cells: what `%%skill run --continue` (`session.run(..., continue_conversation=True)`) goes
on with.

The session holds one `Conversation`: the messages of its runs so far, the skills they activated (not sent again),
the system prompt they were sent (kept, so the cached prefix stays valid), and how far each cassette they recorded
or replayed has got (so a conversation recorded across cells is one cassette, and replaying the cells in order
serves each its own exchanges). A run without `--continue` starts a new conversation. A run that fails with an
error (a refused replay, a failed model call) does not move the conversation on: running the cell again retries
that turn. `history()` lists the turns; `reset()` starts over.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skills_magic.errors import SkillsMagicError
from skills_magic.models.base import ModelClient
from skills_magic.models.replay import RecordingModel, ReplayModel
from skills_magic.runs.result import RunResult
from skills_magic.skills.skill import Skill

NOT_RUN = "not run: the run stopped before this call"  # the answer to a tool call an interrupted run left unanswered


class NothingToContinue(SkillsMagicError):
    """`--continue` before any run (or after `%skills reset`)."""

    def __init__(self) -> None:
        super().__init__("there is no conversation to continue: run `%%skill run` without --continue first "
                         "(`%skills history` shows the conversation)")


@dataclass(frozen=True)
class Turn:
    """One run of the conversation: the task it was given and what came of it."""

    number: int
    task: str
    answer: str
    skills: tuple[str, ...]  # the skills active by the end of this turn
    tool_calls: tuple[str, ...]  # the tools called, in order
    model_calls: int
    stop_reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.number, "task": self.task, "answer": self.answer, "skills": list(self.skills),
                "tool_calls": list(self.tool_calls), "model_calls": self.model_calls, "stop_reason": self.stop_reason}


def _answered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages, with every tool call of a last assistant turn that was never answered (the run was interrupted
    or cut off inside it) answered as not run: the Messages API takes a new user turn only after those."""
    last = messages[-1] if messages else None
    calls = [b for b in (last or {}).get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_use"]
    if last is None or last.get("role") != "assistant" or not calls:
        return list(messages)
    answers = [{"type": "tool_result", "tool_use_id": b.get("id", ""), "content": NOT_RUN, "is_error": True} for b in calls]
    return [*messages, {"role": "user", "content": answers}]


@dataclass(frozen=True)
class Start:
    """Where a run begins: a new conversation (`continuing` False), or after the turns so far."""

    continuing: bool
    messages: tuple[dict[str, Any], ...] = ()
    activated: Mapping[str, Skill] = field(default_factory=dict)
    system: str | None = None
    cassettes: Mapping[str, int] = field(default_factory=dict)  # absolute path -> exchanges the conversation used

    def options(self) -> dict[str, Any]:
        """The keyword arguments of `Agent.run` that continue the conversation (none for a new one)."""
        if not self.continuing:
            return {}
        return {"messages": _answered(list(self.messages)), "activated": dict(self.activated), "system": self.system}

    def client(self, replay: str | None, record: str | None, default: Callable[[], ModelClient]) -> ModelClient:
        """The run's model: the cassette `replay` (from where the conversation's earlier cells left it), or
        `default()`, recording into `record` (after the earlier cells' exchanges, when they recorded into it)."""
        if replay:
            return ReplayModel(replay, start=self.cassettes.get(os.path.abspath(replay), 0))
        client = default()
        if record:
            client = RecordingModel(client, record, keep=self.cassettes.get(os.path.abspath(record), 0))
        return client


def _used(client: ModelClient) -> dict[str, int]:
    """How far the run's cassette (if it had one) has got: {its absolute path: exchanges recorded or served}."""
    position = getattr(client, "cassette_position", None)  # RecordingModel and ReplayModel say; other clients have none
    return {} if position is None else {os.path.abspath(position[0]): position[1]}


class Conversation:
    """The conversation of a session: its turns, messages, activated skills, system prompt and cassettes."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> int:
        """Start over: the next run begins a new conversation; the number of turns forgotten."""
        forgotten = len(getattr(self, "turns", []))
        self.turns: list[Turn] = []
        self.messages: list[dict[str, Any]] = []
        self.activated: dict[str, Skill] = {}
        self.system: str | None = None
        self.cassettes: dict[str, int] = {}
        return forgotten

    def history(self) -> list[Turn]:
        return list(self.turns)

    def start(self, continuing: bool = False) -> Start:
        """Where the next run begins; NothingToContinue when it should continue and there is nothing yet."""
        if not continuing:
            return Start(False)
        if not self.turns:
            raise NothingToContinue()
        return Start(True, tuple(self.messages), dict(self.activated), self.system, dict(self.cassettes))

    def advance(self, start: Start, result: RunResult, activated: Mapping[str, Skill], client: ModelClient) -> None:
        """The run `result` (begun at `start`) is the conversation's latest turn, unless it failed with an error."""
        if result.error is not None:
            if not start.continuing:
                self.reset()  # a new conversation was begun, and it failed: nothing is left to continue
            return
        if not start.continuing:
            self.reset()
        self.messages = list(result.messages)
        self.activated = dict(activated)
        self.system = result.system
        self.cassettes = {**start.cassettes, **_used(client)}
        self.turns.append(Turn(len(self.turns) + 1, result.task, result.final_text, tuple(result.activated),
                               tuple(call.name for call in result.tool_calls), result.turns, result.stop_reason))
