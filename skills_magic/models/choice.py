"""Which model client a run uses and which model id it asks for: `%skills model`, the environment, a skill's own
`model` field, and the defaults, decided in one place."""

from __future__ import annotations

import os
from collections.abc import Callable

from skills_magic.errors import InvalidArgument
from skills_magic.models.base import ModelClient, NoModelConfigured, capabilities

KEYWORD_OVERLAP = 2  # the keyword router's default: words a prompt must share with a description to activate it

Chosen = tuple[ModelClient | None, str | None]  # (the client, the model id) a choice leaves; None: decided at run time


def choose(kind: str | None, value: str | None, current: Chosen, find: Callable[[str], str]) -> Chosen:
    """`%skills model`: `anthropic [ID]`, `claude-code [ID]`, `scripted FILE`, `keywords [N]`, `replay CASSETTE`, a model id, or `auto`.

    `find` turns a path the user typed into an existing absolute path (or raises SourceNotFound)."""
    client, model_id = current
    if kind in (None, "auto"):
        return None, None
    if kind == "anthropic":
        from skills_magic.models.anthropic import AnthropicModel, warm_up

        warm_up()
        return AnthropicModel(value), value
    if kind == "claude-code":  # Claude Code's own loop (the claude-code extra), VALUE the model id it asks for
        from skills_magic.models.claude_code import ClaudeCodeHarness, bundled_cli

        bundled_cli()  # a missing extra is said now, not at the first run
        return ClaudeCodeHarness(value), value
    if kind == "scripted":
        from skills_magic.models.scripted import ScriptedModel

        return ScriptedModel.from_file(find(_required(value, "scripted FILE"))), model_id
    if kind == "keywords":  # offline: activates by keyword overlap, as measurements say models largely do
        from skills_magic.models.scripted import ScriptedModel, keyword_router

        overlap = _whole_number(value, "keywords [N]") if value else KEYWORD_OVERLAP
        return ScriptedModel(responder=keyword_router(overlap), source="keyword router"), model_id
    if kind == "replay":
        from skills_magic.models.replay import ReplayModel

        return ReplayModel(find(_required(value, "replay CASSETTE"))), model_id
    return client, kind  # a model id for whichever client runs


HARNESSES = ("native", "claude-code")  # whose agent loop a run may go through (`--harness`)


def for_harness(harness: str | None, chosen: Callable[[], ModelClient]) -> Callable[[], ModelClient]:
    """The client a run with `--harness H` uses: the chosen one when it already runs in H (or no H was given),
    Claude Code for `claude-code` (asking for the chosen model id), the default Claude client for `native`."""
    if harness is None:
        return chosen
    if harness not in HARNESSES:
        raise InvalidArgument(f"--harness is one of {', '.join(HARNESSES)}, not {harness!r}")

    def client() -> ModelClient:
        if harness == "claude-code":
            from skills_magic.models.claude_code import ClaudeCodeHarness, bundled_cli

            bundled_cli()
            return ClaudeCodeHarness()
        current = chosen()
        return current if capabilities(current).harness == "native" else default_client(None)

    return client


def default_client(model_id: str | None) -> ModelClient:
    """Claude when ANTHROPIC_API_KEY is set; else a clear NoModelConfigured."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        from skills_magic.models.anthropic import AnthropicModel

        return AnthropicModel(model_id)
    raise NoModelConfigured()


def model_id_for(client: ModelClient, explicit: str | None, skill_model: str | None, chosen_id: str | None) -> str:
    """--model, else the explicitly run skill's own `model`, else `%skills model ID`, a cassette's recorded model,
    SKILLS_MAGIC_MODEL, the default."""
    from skills_magic.models.anthropic import resolve_model

    if explicit:
        return resolve_model(explicit)
    asked = requested_model(skill_model)
    if asked:
        return asked
    return resolve_model(chosen_id or capabilities(client).recorded_model)


def requested_model(field: str | None) -> str | None:
    """What a skill's `model` field asks for, its alias resolved; None for no field or `inherit`."""
    from skills_magic.models.anthropic import resolve_model

    return resolve_model(field) if field and field != "inherit" else None


def _required(value: str | None, usage: str) -> str:
    if not value:
        raise InvalidArgument(f"usage: %skills model {usage}")
    return value


def _whole_number(value: str, usage: str) -> int:
    if not value.isdigit():
        raise InvalidArgument(f"usage: %skills model {usage} (N a whole number), not {value!r}")
    return int(value)
