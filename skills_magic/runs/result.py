"""What a run returns: `RunResult` (the answer, the tool calls, the load trace, the usage, the files its scripts
wrote or changed, the messages), with its parts `ToolCall` and `TraceEvent`.

These are values: a cell's `%%skill run` returns the RunResult itself (`result = _`, `--as r`), `session.run(...)`
returns the same kind of object, and a view renders one without calling anything. docs/runs.md documents every
attribute.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


@dataclass
class TraceEvent:
    """One disclosure or call: what was sent to (or done for) the model, measured, never estimated."""

    stage: str  # discover | continue | activate | fork | reference | execute | call | model
    object: str
    bytes: int | None = None  # UTF-8 size of what was actually sent
    input_tokens: int | None = None  # as the API reported them
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


@dataclass
class ToolCall:
    """One tool call of the model: its input as sent, and how big its result was (or why it failed)."""

    id: str
    name: str
    input: Any
    result_bytes: int
    is_error: bool
    error: str | None = None


@dataclass
class RunResult:
    """Everything a run did. `final_text` is the last answer; `trace` the load trace; `messages` the conversation
    (all of it, when the run continued an earlier one)."""

    task: str
    skill: str | None
    client: str
    model: str
    final_text: str = ""
    stop_reason: str = ""
    note: str = ""
    turns: int = 0
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=lambda: dict.fromkeys(USAGE_KEYS, 0))
    trace: list[TraceEvent] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    interrupted: bool = False
    system: str = ""
    ledger_entries: list[Any] = field(default_factory=list)  # entries the model wrote through the experiment tool
    outputs: list[dict[str, Any]] = field(default_factory=list)  # files scripts left in their scratch folders
    changes: list[Any] = field(default_factory=list)  # changes.Change: what scripts wrote in the working folder, not applied
    run_id: str | None = None  # the last script run's folder name under .skills/runs/ (run-ab12cd34)
    inputs: list[Any] = field(default_factory=list)  # inputs.KernelInput: the kernel objects handed to the run (--with)
    activated: list[str] = field(default_factory=list)  # the skills active when the run ended, earlier turns' too
    seconds: float | None = None  # how long the run took (wall clock); a view puts it in metadata, never in data
    cost_usd: float | None = None  # what the harness reported the run cost (Claude Code's total_cost_usd)
    priced_usd: float | None = None  # what its tokens cost at the price table (models.prices); None: no price
    forks: list[RunResult] = field(default_factory=list)  # the nested runs of `context: fork` skills, in order

    @property
    def ok(self) -> bool:
        return self.error is None and not self.interrupted and self.stop_reason in ("end_turn", "stop_sequence", "no_model")
