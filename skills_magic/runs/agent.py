"""The agent loop: a model that sees only the catalog until it activates a skill, and reads files only when needed.

The system prompt is short instructions plus the `<available_skills>` catalog (model-visible skills whose `paths`
match the run's files, under the budget, no locations), marked for prompt caching and byte-identical for the same
catalog. Tools (`runs.tools`): `activate_skill(name)`, `read_skill_resource(skill, path)`,
`run_skill_script(skill, path, args, stdin)`, and the user's Python functions (`runs.pytools`). With no skill
visible (and none active) the system prompt has neither catalog nor instructions, and no skill tool is offered.
An activated skill's `model` and `effort` apply to the requests after its activation (`runs.fields`). Every disclosure is a row of the load trace: discover (or continue, when a
run goes on with an earlier conversation), activate, reference, execute, call (a Python function), model call.

Whatever the model sends as a tool's input (wrong types, missing fields, NUL characters, lone surrogates, huge
strings) is answered with an `is_error` tool result saying why in one line, and the run goes on. Text going back to
the model, and the model's own turns echoed in the next request, have lone surrogates replaced, so the request can
always be encoded.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skills_magic.errors import DatabaseUnreadable
from skills_magic.models.base import ModelClient, ModelError, Response, TextCallback, capabilities, usage_of
from skills_magic.models.prices import cost_of
from skills_magic.runs import fields, fork
from skills_magic.runs.budget import STOP_REASON, Budget, CapReached, capped
from skills_magic.runs.disclosure import ResourceError, activation_text, deny_inline, read_resource
from skills_magic.runs.pytools import ToolRegistry
from skills_magic.runs.result import RunResult, ToolCall, TraceEvent  # re-exported: their home before the split
from skills_magic.runs.tools import (EXPERIMENT_ACTIONS, SHOWN_INPUT_CHARS, ToolInputError, clean, clean_text,
                                     experiment_tool, input_problem, quoted, tool_definitions)
# re-exported: its home before the split
from skills_magic.runs.tools import MAX_INPUT_DEPTH, MAX_INPUT_STRING_CHARS, describe_input  # noqa: F401
from skills_magic.skills.listing import DEFAULT_BUDGET_CHARS, listed_description, xml_listing
from skills_magic.skills.skill import Skill

DEFAULT_MAX_TURNS = 20  # model calls per run; a loop that needs more is usually stuck
DEFAULT_MAX_TOKENS = 4096  # per model call
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX: a longer `path` names no file
LAST_RESORT_CHARS = 300  # how much of an unexpected error's first line a tool result carries
SYSTEM_INSTRUCTIONS = (
    "You can use Agent Skills: folders of instructions, scripts and references for specific tasks. The skills "
    "available are listed below by name and description only. When a task matches a skill, call activate_skill "
    "with its name before doing the task, then follow its instructions. Read a skill's files with "
    "read_skill_resource only when its instructions point to them, and run its scripts only with run_skill_script. "
    "Do not guess what a skill says: activate it."
)
ALREADY_ACTIVE = "Skill {name!r} is already active: its instructions are earlier in this conversation."
NOT_PERMITTED = (
    "Execution is not permitted: no permission policy has approved running {path!r} of skill {skill!r}. "
    "Continue without running it, and say what you would have run."
)


ScriptRunner = Callable[[Skill, str, Sequence[str], str], tuple[str, bool, TraceEvent]]
LedgerTool = Callable[[dict[str, Any]], tuple[str, Any]]  # input -> (text for the model, the entry or None); raises on error


def _text_of(content: list[dict[str, Any]]) -> str:
    return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict) and block.get("type") == "text")


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _followed_by(messages: Sequence[dict[str, Any]], first: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation with the new user turn `first` after it: after the last assistant turn, or joining the user
    turn it ended on (tool results a run stopped after). Copies: the earlier run's result keeps its own list."""
    history = [dict(message) for message in messages]
    if history and history[-1].get("role") == "user":
        earlier = history[-1]["content"]
        history[-1] = {"role": "user", "content": [*([{"type": "text", "text": earlier}] if isinstance(earlier, str) else earlier), *first]}
    else:
        history.append({"role": "user", "content": first})
    return history


class Agent:
    """One run of the loop over a fixed catalog."""

    def __init__(self, skills: Sequence[Skill], model: ModelClient, model_id: str, *,
                 show_path: Callable[[str], str], session_id: str = "", budget: int | None = DEFAULT_BUDGET_CHARS,
                 max_turns: int = DEFAULT_MAX_TURNS, max_tokens: int = DEFAULT_MAX_TOKENS,
                 run_script: ScriptRunner | None = None, expand_inline: Callable[[Skill, str], str] = deny_inline,
                 ledger: tuple[str, LedgerTool] | None = None, python_tools: ToolRegistry | None = None,
                 files: Sequence[str] = (), model_fixed: bool = False, cap: Budget | None = None,
                 max_cost: float | None = None, learned=None):
        """`files`: the run's files, which a skill's `paths` must match for the model to see it; `model_fixed`: the
        user chose the model (--model), so an activated skill's own `model` does not change it."""
        self.all_skills = {s.name: s for s in skills}
        visible, self.left_out_by_paths = fields.visible_for_files([s for s in skills if s.model_visible], files)
        self.listing, self.catalog = xml_listing(visible, budget, describe=listed_description)
        self.visible = {e.name: e.skill for e in self.listing.entries()}
        self.model = model
        self.model_id = model_id
        self.model_fixed = model_fixed
        self.cap = cap or capped(max_cost)  # the budget (runs.budget) checked before each model call; None: no cap
        self.effort: str | None = None  # `output_config.effort` of the requests, set by an activated skill
        self.show_path = show_path
        self.session_id = session_id
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.run_script = run_script
        self.expand_inline = expand_inline
        self.system = f"{SYSTEM_INSTRUCTIONS}\n\n{self.catalog}" if self.visible else ""
        self.ledger = ledger
        self.python_tools = python_tools
        self.learned = learned  # the `manage_skill` tool (runs.learn.LearnTool), offered when learning is on
        self.activated: dict[str, Skill] = {}
        self.fork_depth = 0  # how many `context: fork` runs this loop is inside (runs.fork)
        self.tools = self._tools()
        placeholders = capabilities(model).placeholders
        if isinstance(placeholders, dict) and session_id:
            placeholders[session_id] = "${CLAUDE_SESSION_ID}"

    # --- the tools ----------------------------------------------------------------------------------------------

    def _tools(self) -> list[dict[str, Any]]:
        """The skill tools while any skill is visible or active (`activate_skill` only when one is visible), then
        the experiment tool and the user's Python functions."""
        tools = tool_definitions(list(self.visible)) if self.visible or self.activated else []
        if not self.visible:
            tools = [t for t in tools if t["name"] != "activate_skill"]
        if self.ledger is not None:
            tools.append(experiment_tool(self.ledger[0]))
        if self.learned is not None:
            tools.append(self.learned.definition())
        if self.python_tools is not None:
            tools.extend(self.python_tools.definitions())
        return tools

    def _skill(self, value: Any, field_name: str = "skill") -> Skill:
        if not isinstance(value, str) or not value:
            raise ToolInputError(f"`{field_name}` must be the name of a listed skill")
        found = self.visible.get(value) or self.activated.get(value)
        if found is None:
            # names are at most 64 characters: a long value is compared by its start only (difflib is quadratic)
            close = difflib.get_close_matches(value[:SHOWN_INPUT_CHARS], list(self.visible), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ToolInputError(f"no skill named {quoted(value)} is available{hint}")
        return found

    def _activate(self, skill: Skill, arguments: str | Sequence[str], result: RunResult) -> str:
        if skill.name in self.activated:
            return ALREADY_ACTIVE.format(name=skill.name)
        if fork.forks(skill):  # `context: fork`: a child loop runs it; only its answer comes back (runs.fork)
            return fork.run_for_model(self, skill, arguments, result)
        # SkillNotActivated when an inline command of the body is denied or fails: the skill stays inactive
        text = activation_text(skill, self.show_path(skill.folder), arguments, self.session_id, self.expand_inline)
        self.activated[skill.name] = skill
        result.trace.append(TraceEvent("activate", skill.name, bytes=_size(text), detail=self._apply_fields(skill)))
        return text

    def _apply_fields(self, skill: Skill) -> str:
        """The activated skill's `model` and `effort`, for the requests after this one; what changed, in words."""
        said = []
        wanted = fields.skill_model(skill)
        if wanted and wanted != self.model_id:
            said.append(f"model {wanted}: not used, --model chose {self.model_id}" if self.model_fixed else f"model {wanted}")
            self.model_id = self.model_id if self.model_fixed else wanted
        if skill.frontmatter.effort is not None:
            self.effort, words = fields.effort_setting(skill.frontmatter.effort, self.model_id)
            said.append(words)
        return "; ".join(said)

    def _call_tool(self, block: dict[str, Any], arguments: Sequence[str], result: RunResult) -> dict[str, Any]:
        name, data = block.get("name"), block.get("input")
        try:
            if not isinstance(data, dict):
                raise ToolInputError(f"the input of {name} must be a JSON object")
            problem = input_problem(data)
            if problem is not None:
                raise ToolInputError(f"the input of {name} cannot be used: {problem}")
            content = self._dispatch(name, data, arguments, result)
        except ToolInputError as error:
            message = clean_text(str(error))
        except DatabaseUnreadable:
            raise  # the project's file is broken: nothing may run, and the user (not the model) has to act
        except (ValueError, TypeError, LookupError, UnicodeError, OSError) as error:
            # a last resort, so that no input can end the run: the model hears what failed, in one line
            first = str(error).splitlines()[0][:LAST_RESORT_CHARS] if str(error) else ""
            message = clean_text(f"{name} failed on this input: {type(error).__name__}" + (f": {first}" if first else ""))
        else:
            content = clean_text(content)  # script output or a file could carry a lone surrogate: never sent raw
            result.tool_calls.append(ToolCall(block.get("id", ""), str(name), clean(data), _size(content), False))
            return {"type": "tool_result", "tool_use_id": block.get("id", ""), "content": content}
        result.tool_calls.append(ToolCall(block.get("id", ""), str(name), clean(data), _size(message), True, message))
        return {"type": "tool_result", "tool_use_id": block.get("id", ""), "content": message, "is_error": True}

    def _dispatch(self, name: Any, data: dict[str, Any], arguments: Sequence[str], result: RunResult) -> str:
        """The text a tool gives back; ToolInputError when the input does not fit it."""
        if name == "activate_skill":
            content = self._activate(self._skill(data.get("name"), "name"), arguments, result)
        elif name == "read_skill_resource":
            skill = self._skill(data.get("skill"))
            if isinstance(data.get("path"), str) and len(data["path"]) > MAX_PATH_CHARS:
                raise ToolInputError(f"read_skill_resource needs a `path` of at most {MAX_PATH_CHARS} characters")
            try:
                resource = read_resource(skill, data.get("path"))
            except ResourceError as error:
                raise ToolInputError(str(error)) from None
            content = resource.text
            result.trace.append(TraceEvent("reference", f"{skill.name}/{resource.path}", bytes=_size(content)))
        elif name == "run_skill_script":
            skill = self._skill(data.get("skill"))
            path, args, stdin = data.get("path"), data.get("args"), data.get("stdin")
            args = [] if args is None else args
            stdin = "" if stdin is None else stdin
            if not isinstance(path, str) or not isinstance(args, list) or not isinstance(stdin, str):
                raise ToolInputError("run_skill_script needs `path` (a string), `args` (a list) and `stdin` (a string)")
            if len(path) > MAX_PATH_CHARS:
                raise ToolInputError(f"run_skill_script needs a `path` of at most {MAX_PATH_CHARS} characters")
            # numbers are written out as the model meant them; a list, a mapping or null is not an argument
            if any(not isinstance(a, (str, int, float)) or isinstance(a, bool) for a in args):
                raise ToolInputError("run_skill_script needs `args` to be a list of strings")
            if self.run_script is None:
                result.trace.append(TraceEvent("execute", f"{skill.name}/{path}", detail="denied: no permission policy"))
                raise ToolInputError(NOT_PERMITTED.format(path=path, skill=skill.name))
            content, failed, event = self.run_script(skill, path, [str(a) for a in args], stdin)
            result.trace.append(event)
            if failed:
                raise ToolInputError(content)
        elif name == "experiment" and self.ledger is not None:
            self._check_experiment(data)
            try:
                content, entry = self.ledger[1](data)
            except DatabaseUnreadable:
                raise
            except Exception as error:  # the ledger's named errors go back to the model, which can correct them
                raise ToolInputError(str(error)) from None
            if entry is not None:
                result.ledger_entries.append(entry)
        elif name == "manage_skill" and self.learned is not None:
            content = self.learned.call(data, self.model_id)  # refused: ToolInputError `NameCollision: ...`
        elif self.python_tools is not None and name in self.python_tools:
            content = self._call_python(str(name), data, result)
        else:
            raise ToolInputError(f"there is no tool named {quoted(name)}")
        return content

    def _call_python(self, name: str, data: dict[str, Any], result: RunResult) -> str:
        """A Python function's call: announced before it runs (it may take a while), traced, refused with its reason."""
        self.notify("call", {"name": name, "input": clean(data)})
        outcome = self.python_tools.call(name, data)
        result.trace.append(TraceEvent("call", name, bytes=_size(outcome.text), detail=outcome.detail))
        if outcome.failed:
            raise ToolInputError(outcome.text)
        return outcome.text

    @staticmethod
    def _check_experiment(data: dict[str, Any]) -> None:
        """The action, whatever its type (a list is not hashable); the fields are the ledger's to judge, by name."""
        action = data.get("action")
        if not isinstance(action, str) or action not in EXPERIMENT_ACTIONS:
            raise ToolInputError(f"`action` must be one of {', '.join(EXPERIMENT_ACTIONS)}")

    # --- the loop -----------------------------------------------------------------------------------------------

    def request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model_id, "max_tokens": self.max_tokens}
        if self.system:  # an empty text block is refused by the API: no catalog, no system prompt
            # one cache breakpoint after the system prompt caches tools + system: identical on every call of a run
            request["system"] = [{"type": "text", "text": self.system, "cache_control": {"type": "ephemeral"}}]
        request["tools"] = self.tools
        request["messages"] = list(messages)  # a snapshot: the loop appends to its own list after the call
        if self.effort is not None:
            request["output_config"] = {"effort": self.effort}
        return request

    def _account(self, response: Response, result: RunResult, held: float = 0.0) -> None:
        usage = usage_of(response)
        reported = response.get("usage") or {}  # as the API sent it: 1-hour cache writes are priced apart
        cost = self.cap.settle(held, self.model_id, reported) if self.cap else cost_of(self.model_id, reported)
        result.priced_usd = result.priced_usd if cost is None else (result.priced_usd or 0.0) + cost
        for key, value in usage.items():
            result.usage[key] += value
        result.trace.append(TraceEvent(
            "model", f"call {result.turns}", input_tokens=usage["input_tokens"], output_tokens=usage["output_tokens"],
            cache_read_tokens=usage["cache_read_input_tokens"], cache_write_tokens=usage["cache_creation_input_tokens"],
            detail=str(response.get("stop_reason")),
        ))

    def run(self, task: str | list[dict[str, Any]], skill: str | None = None, arguments: Sequence[str] = (),
            on_text: TextCallback | None = None, on_event: Callable[[str, Any], None] | None = None, *,
            messages: Sequence[dict[str, Any]] = (), activated: Mapping[str, Skill] | None = None,
            system: str | None = None) -> RunResult:
        """Run the task (text, or content blocks: its text and what the kernel handed the run, images too). With
        `skill`, that skill is activated explicitly (no model decision). With `messages` (a conversation so far, as
        `runs.conversation` hands it on), `activated` (the skills it activated: not sent again) and `system` (the
        system prompt it was sent, so the cached prefix stays valid), the run continues that conversation."""
        self.activated = dict(activated or {})
        if system is not None:
            self.system = system
        blocks = [{"type": "text", "text": clean_text(task)}] if isinstance(task, str) else clean(list(task))
        # the task is the last text block (what the kernel handed the run comes before it)
        shown_task = task if isinstance(task, str) else next((b["text"] for b in reversed(blocks) if b.get("type") == "text"), "")
        result = RunResult(task=shown_task, skill=skill, client=self.model.name, model=self.model_id, system=self.system)
        if messages:
            active = f"; active, not sent again: {', '.join(self.activated)}" if self.activated else ""
            result.trace.append(TraceEvent("continue", "the conversation so far", detail=f"{len(messages)} earlier messages{active}"))
        else:
            left_out = f"{self.left_out_by_paths} left out by `paths` (no file of the run matches)" if self.left_out_by_paths else ""
            result.trace.append(TraceEvent("discover", f"catalog of {self.listing.shown} skill{'' if self.listing.shown == 1 else 's'}",
                                           bytes=_size(self.catalog) if self.visible else 0,
                                           detail="; ".join(d for d in (self.listing.marker(), left_out) if d)))
        notify = self.notify = on_event or (lambda kind, value: None)
        first: list[dict[str, Any]] = []
        if skill is not None:
            chosen = self.all_skills.get(skill)
            if chosen is None:
                raise ToolInputError(f"no skill named {skill!r}")
            if fork.forks(chosen):  # its own context runs it: this run makes no model call (runs.fork)
                return fork.run_by_name(self, chosen, arguments, blocks, _followed_by(messages, blocks), result,
                                        on_text, notify)
            first.append({"type": "text", "text": self._activate(chosen, arguments, result)})
        self.tools = self._tools()  # an explicit or continued skill brings its file tools, even with no catalog
        first.extend(blocks)
        result.messages.extend(_followed_by(messages, first))
        try:
            self._loop(result.messages, arguments, result, on_text, notify)
        except KeyboardInterrupt:
            result.interrupted = True
            result.stop_reason = "interrupted"
            result.note = "stopped by KeyboardInterrupt; the trace so far is kept"
        result.activated = list(self.activated)
        return result

    def _loop(self, messages, arguments, result: RunResult, on_text, notify) -> None:
        while True:
            if result.turns >= self.max_turns:
                result.stop_reason = "max_turns"
                result.note = f"stopped after {self.max_turns} model calls (--max-turns)"
                return
            request = self.request(messages)
            try:  # the cap is checked before the call: a call that would cross it is never made
                held = self.cap.reserve(self.model_id, request) if self.cap else 0.0
            except CapReached as stop:
                result.stop_reason, result.note = STOP_REASON, str(stop)
                return
            result.turns += 1
            try:
                response = self.model.create(request, on_text)
            except ModelError as error:
                if self.cap:
                    self.cap.settle(held, self.model_id, None)
                result.error = str(error)
                result.stop_reason = "context_window_exceeded" if error.kind == "context" else "error"
                return
            self._account(response, result, held)
            received = list(response.get("content") or [])
            stop = response.get("stop_reason") or "end_turn"
            result.stop_reason = stop
            # echoed in the next request, which must encode as UTF-8: a lone surrogate the model sent is replaced
            # there, while its tool calls are judged on what it really sent (and refused, with the reason)
            content = clean(received)
            messages.append({"role": "assistant", "content": content})
            text = _text_of(content)
            if text:
                result.final_text = text
                notify("text", text)
            calls = [b for b in received if isinstance(b, dict) and b.get("type") == "tool_use"]
            if stop == "tool_use":
                if not calls:
                    result.error = "the model stopped for tool use without calling a tool"
                    return
                # parallel calls are answered together, in order, in one user message
                answers = [self._call_tool(block, arguments, result) for block in calls]
                for call in result.tool_calls[-len(calls):]:
                    notify("tool", call)
                messages.append({"role": "user", "content": answers})
                continue
            if stop == "pause_turn":
                continue  # the API paused a long turn: send it back as-is and let the model go on
            if stop == "max_tokens":
                if calls and content and isinstance(content[-1], dict) and content[-1].get("type") == "tool_use":
                    result.note = "the answer hit max_tokens inside a tool call; the cut-off call was not run"
                else:
                    result.note = "the answer hit max_tokens and may be cut off"
            elif stop == "refusal":
                result.note = "the model refused; no tool call of that turn was run"
            elif stop == "model_context_window_exceeded":
                result.note = "the conversation no longer fits the model's context window"
            elif stop == "stop_sequence":
                result.note = f"stopped at the stop sequence {response.get('stop_sequence')!r}"
            elif stop != "end_turn":
                result.note = f"stopped for an unknown reason {stop!r}"
            return
