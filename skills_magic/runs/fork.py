"""`context: fork`: a skill run as a sub-agent in a fresh context, whose final answer alone goes back to the caller.

When the model activates a fork skill, a child loop runs it instead of the body joining the conversation: same model
client, script runner, inline expander, Python functions and ledger tool, but a new conversation whose first user
message is the activation text and one line saying what the caller asked (the run's task: the model's own request
text is not available, and Claude Code gives a fork the skill's content plus its arguments). The child has no
catalog (no system prompt, no `activate_skill`); its skill's `model` and `effort` apply to its requests. Its final
answer is the parent's tool result; the skill is not active in the parent (its body never entered that context).
An explicit user run of a fork skill runs the child with the activation text and the task, and the parent makes no
model call of its own. Either way the child's RunResult is kept in `RunResult.forks`, its usage counts in the
parent's, and a `fork` row of the parent's trace says what it cost.
"""

from __future__ import annotations

from typing import Any

from skills_magic.runs.disclosure import ResourceError, activation_text
from skills_magic.runs.result import USAGE_KEYS, RunResult, TraceEvent
from skills_magic.runs.tools import ToolInputError, clean_text
from skills_magic.skills.skill import Skill

# a fork may run a fork skill of its own once more; deeper, skills that fork each other would recurse until every
# level had spent its turns, each level's cost hidden inside the one above
MAX_FORK_DEPTH = 2
FORK_RESULT = "Skill {name} ran in its own context; its result:"
CALLER_ASKED = "The caller asked: {task}"
FORK_FAILED = "Skill {name} ran in its own context and failed: {reason}"
TOO_DEEP = "Skill {name} runs in its own context, and forks may nest only {depth} deep: this one is not run."
AGENT_NOT_USED = "agent: {agent} (not used: one kind of sub-agent)"


def forks(skill: Skill) -> bool:
    """True when the skill's frontmatter says `context: fork`."""
    return skill.frontmatter.context == "fork"


def _agent_field(skill: Skill) -> Any:
    """The skill's `agent` (Claude Code's sub-agent type), wherever the frontmatter keeps it."""
    agent = getattr(skill.frontmatter, "agent", None)
    return agent if agent is not None else skill.frontmatter.extra.get("agent")


def _child(parent: Any, skill: Skill) -> Any:
    """A loop like the parent's (same client and tools) with no skills of its own, one fork deeper. The
    class is the parent's own (`runs.agent` imports this module, so this module cannot import it)."""
    child = type(parent)((), parent.model, parent.model_id, show_path=parent.show_path, session_id=parent.session_id,
                         max_turns=parent.max_turns, max_tokens=parent.max_tokens, run_script=parent.run_script,
                         expand_inline=parent.expand_inline, ledger=parent.ledger, python_tools=parent.python_tools,
                         model_fixed=parent.model_fixed)
    child.fork_depth = parent.fork_depth + 1
    child.cap = parent.cap  # a fork's calls count against the run's cap
    return child


def _run_child(parent: Any, skill: Skill, first: list[dict[str, Any]], activation: str, on_text=None,
               on_event=None) -> RunResult:
    """The child's run, its skill active from the start (the activation text is its first message), with the
    `activate` row a run of the skill by name would have."""
    child = _child(parent, skill)
    detail = child._apply_fields(skill)  # the skill's model and effort, from the child's first request
    result = child.run(first, on_text=on_text, on_event=on_event, activated={skill.name: skill})
    result.skill = skill.name
    result.trace.insert(1, TraceEvent("activate", skill.name, bytes=len(activation.encode("utf-8")), detail=detail))
    return result


def _counted(parent_result: RunResult, skill: Skill, child: RunResult, sent: str | None) -> None:
    """The child kept in the parent's result: its usage and ledger entries are this run's, and a `fork` row (the
    bytes: what went back to the parent's model, none for a run by name)."""
    for key in USAGE_KEYS:
        parent_result.usage[key] += child.usage.get(key, 0)
    if child.priced_usd is not None:
        parent_result.priced_usd = (parent_result.priced_usd or 0.0) + child.priced_usd
    parent_result.ledger_entries.extend(child.ledger_entries)
    parent_result.forks.append(child)
    u = child.usage
    said = [f"{child.turns} model call{'' if child.turns == 1 else 's'}",
            f"{u['input_tokens']:,} input + {u['output_tokens']:,} output tokens", f"stop: {child.stop_reason}"]
    if _agent_field(skill) is not None:
        said.append(AGENT_NOT_USED.format(agent=_agent_field(skill)))
    parent_result.trace.append(TraceEvent(
        "fork", skill.name, bytes=None if sent is None else len(sent.encode("utf-8")), input_tokens=u["input_tokens"],
        output_tokens=u["output_tokens"], cache_read_tokens=u["cache_read_input_tokens"],
        cache_write_tokens=u["cache_creation_input_tokens"], detail="; ".join(said)))


def _failure(child: RunResult) -> str | None:
    """Why the child gave no answer, in one line, or None when it answered."""
    if child.error is not None:
        return child.error.strip().splitlines()[0] if child.error.strip() else "the model call failed"
    if child.stop_reason == "max_turns":
        return child.note or "it stopped at the turn limit"
    if not child.final_text.strip():
        return f"it gave no answer (stop: {child.stop_reason})"
    return None


def _activation(parent: Any, skill: Skill, arguments: Any) -> str:
    """The activation text, as `activate_skill` would return it inline."""
    return activation_text(skill, parent.show_path(skill.folder), arguments, parent.session_id, parent.expand_inline)


def run_for_model(parent: Any, skill: Skill, arguments: Any, result: RunResult) -> str:
    """`activate_skill` of a fork skill: the tool result is the child's final answer alone, under one line saying
    so; a child that fails, or a fork nested too deep, is a ToolInputError (an `is_error` result: the run goes on)."""
    if parent.fork_depth >= MAX_FORK_DEPTH:
        result.trace.append(TraceEvent("fork", skill.name, detail=f"not run: forks nest at most {MAX_FORK_DEPTH} deep"))
        raise ToolInputError(TOO_DEEP.format(name=skill.name, depth=MAX_FORK_DEPTH))
    try:
        activation = _activation(parent, skill, arguments)
    except ResourceError as error:  # an inline command that stopped the activation: the model hears why
        raise ToolInputError(str(error)) from None
    first = [{"type": "text", "text": f"{activation}\n\n{CALLER_ASKED.format(task=clean_text(result.task))}"}]
    child = _run_child(parent, skill, first, activation)
    if child.interrupted:
        _counted(result, skill, child, None)
        raise KeyboardInterrupt  # the user stopped the child: the parent stops too, both traces kept
    failed = _failure(child)
    sent = FORK_FAILED.format(name=skill.name, reason=failed) if failed else \
        f"{FORK_RESULT.format(name=skill.name)}\n\n{child.final_text}"
    _counted(result, skill, child, sent)
    if failed:
        raise ToolInputError(sent)
    return sent


def run_by_name(parent: Any, skill: Skill, arguments: Any, blocks: list[dict[str, Any]],
                messages: list[dict[str, Any]], result: RunResult, on_text=None, on_event=None) -> RunResult:
    """`%%skill run NAME` of a fork skill: the child runs the activation text and the task; the parent's answer,
    stop and error are the child's, and its conversation holds the task and that answer (never the body)."""
    activation = _activation(parent, skill, arguments)
    child = _run_child(parent, skill, [{"type": "text", "text": activation}, *blocks], activation, on_text, on_event)
    _counted(result, skill, child, None)
    result.final_text, result.stop_reason, result.note = child.final_text, child.stop_reason, child.note
    result.error, result.interrupted, result.model = child.error, child.interrupted, child.model
    answer = [{"role": "assistant", "content": [{"type": "text", "text": child.final_text}]}] if child.final_text else []
    result.messages.extend([*messages, *answer])
    result.activated = list(parent.activated)
    return result
