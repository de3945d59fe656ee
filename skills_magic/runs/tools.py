"""The tools a run offers the model, and what any tool input must be before a tool sees it.

The definitions are the Messages API's tool schemas: `activate_skill`, `read_skill_resource`, `run_skill_script` and,
with a ledger plan, `experiment` (and the user's Python functions, `runs.pytools`). Whatever the model sends as a tool's input (wrong types, NUL characters, lone
surrogates, huge strings, deep nesting) is refused here with a one-line reason (`ToolInputError`, which the loop
answers with an `is_error` tool result); text going back to the model has lone surrogates replaced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from skills_magic.errors import SkillsMagicError

MAX_INPUT_STRING_CHARS = 1_000_000  # a model writes at most ~128k tokens (~500 KB) a turn: longer is not model text
MAX_INPUT_DEPTH = 32  # the tools take flat objects; deeper nesting is garbage, refused before anything walks it
SHOWN_INPUT_CHARS = 80  # how much of a bad value an error result quotes back
EXPERIMENT_ACTIONS = ("hypothesis", "prediction", "verdict", "observation", "conclusion", "skip", "list")
# every tool a run may offer on its own: a Python function offered as a tool (runs.pytools) takes none of these names
BUILT_IN_TOOL_NAMES = ("activate_skill", "read_skill_resource", "run_skill_script", "experiment", "manage_skill")


def experiment_tool(plan: str) -> dict[str, Any]:
    """The `experiment` tool's definition: the model writes to the ledger plan `plan` through it."""
    return {
        "name": "experiment",
        "description": (
            f"The experiment ledger of plan {plan}: append-only. Record a hypothesis; a prediction (text, the exact "
            "check that would falsify it, and its hypothesis id); an observation; a verdict on a prediction "
            "(confirmed / refuted need evidence; one verdict per prediction); a skip (a prediction dropped, with a "
            "reason); a conclusion; or list the entries and open predictions."
        ),
        "input_schema": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": list(EXPERIMENT_ACTIONS)},
                "text": {"type": "string"},
                "falsified_by": {"type": "string", "description": "the exact check that would refute the prediction"},
                "hypothesis": {"type": "string", "description": "a hypothesis id such as H1"},
                "prediction": {"type": "string", "description": "a prediction id such as P1"},
                "outcome": {"type": "string", "enum": ["confirmed", "refuted", "inconclusive"]},
                "evidence": {"type": "string"},
                "reason": {"type": "string"},
            },
            "required": ["action"],
        },
    }


def tool_definitions(names: Sequence[str]) -> list[dict[str, Any]]:
    """The skill tools' definitions; `activate_skill` takes one of `names`, the skills the model sees."""
    return [
        {
            "name": "activate_skill",
            "description": "Load a skill's full instructions (and the list of its files) into the conversation.",
            "input_schema": {
                "type": "object",
                "properties": {"name": {"type": "string", "enum": list(names), "description": "the skill's name"}},
                "required": ["name"],
            },
        },
        {
            "name": "read_skill_resource",
            "description": "Read one text file of a skill, by its path relative to the skill's folder.",
            "input_schema": {
                "type": "object",
                "properties": {"skill": {"type": "string"}, "path": {"type": "string"}},
                "required": ["skill", "path"],
            },
        },
        {
            "name": "run_skill_script",
            "description": "Run one of a skill's scripts (subject to the user's permission policy).",
            "input_schema": {
                "type": "object",
                "properties": {
                    "skill": {"type": "string"},
                    "path": {"type": "string", "description": "relative to the skill's folder, e.g. scripts/check.py"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "stdin": {"type": "string"},
                },
                "required": ["skill", "path"],
            },
        },
    ]


class ToolInputError(SkillsMagicError):
    """A tool call whose input does not fit the tool; answered with `is_error`, the run goes on."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """The text with each lone surrogate (which UTF-8 cannot encode) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def clean(value: Any) -> Any:
    """A copy of a JSON-like value with every string `clean_text`ed; iterative, so any depth is safe."""
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (dict, list)):
        return value
    top: Any = {} if isinstance(value, dict) else [None] * len(value)
    pending = [(value, top)]
    while pending:
        source, target = pending.pop()
        for key, item in (source.items() if isinstance(source, dict) else enumerate(source)):
            if isinstance(item, (dict, list)):
                copied: Any = {} if isinstance(item, dict) else [None] * len(item)
                pending.append((item, copied))
            else:
                copied = clean_text(item) if isinstance(item, str) else item
            target[clean_text(key) if isinstance(key, str) else key] = copied
    return top


def quoted(value: Any) -> str:
    """A bad value quoted back to the model: its repr, cut short (a 10 MB name is not echoed)."""
    text = repr(value)
    return text if len(text) <= SHOWN_INPUT_CHARS else text[: SHOWN_INPUT_CHARS - 1] + "…"


def _where(path: tuple[Any, ...]) -> str:
    """`args[1]`, `metadata.key`, or "the input": where in a tool input a bad value is."""
    if not path:
        return "the input"
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")
    return f"`{text if len(text) <= SHOWN_INPUT_CHARS else text[: SHOWN_INPUT_CHARS - 1] + '…'}`"


def input_problem(data: Any) -> str | None:
    """Why a tool input cannot be used whatever the tool (a NUL, a lone surrogate, a huge string, deep nesting),
    and where it is."""
    pending: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            where = _where(path)
            if len(value) > MAX_INPUT_STRING_CHARS:
                return f"{where} has {len(value):,} characters, more than the {MAX_INPUT_STRING_CHARS:,} a tool input may hold"
            if "\x00" in value:
                return f"{where} contains a NUL character (\\u0000), which no tool input may contain"
            if clean_text(value) is not value:
                return f"{where} contains a lone surrogate (such as \\ud800), which is not valid Unicode text"
        elif isinstance(value, (dict, list)):
            if len(path) >= MAX_INPUT_DEPTH:
                return f"the input is nested more than {MAX_INPUT_DEPTH} levels deep"
            if isinstance(value, dict):
                for key, item in value.items():
                    pending += [(key, (*path, "<a key>")), (item, (*path, clean_text(str(key))))]
            else:
                pending += [(item, (*path, index)) for index, item in enumerate(value)]
    return None


def describe_input(value: Any, limit: int = 80) -> str:
    """A tool input as one line of JSON, cut at `limit` characters (a view lists tool calls with it)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"
