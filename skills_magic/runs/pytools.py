"""Python functions as tools: the user's own functions (a notebook's, `%skills tool add NAME`; or
`session.tools.add(fn)`) offered to the model beside the skill tools.

A function's JSON schema is built by pydantic from its signature (annotations, defaults, `Annotated[..., Field()]`)
and its docstring (the summary becomes the tool's description; Google `Args:`, NumPy `Parameters` and Sphinx
`:param x:` lines describe the parameters). When the model calls it, the arguments are validated first (a bad call
is an `is_error` result carrying pydantic's reasons on one line, and the function does not run), then the function
runs in the kernel's process, in the thread the run runs in; its return value goes back as JSON where it can be (a
str as it is, else its repr), masked as script output is and capped. An exception becomes an `is_error` result and
the run goes on. Registering a function is the user's consent to its calls; every call is still audited.
"""

from __future__ import annotations

import inspect
import json
import re
import time
import typing
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from skills_magic.clock import utc_now
from skills_magic.errors import SkillsMagicError
from skills_magic.runs.tools import BUILT_IN_TOOL_NAMES, describe_input

MAX_RESULT_CHARS = 100_000  # ~25k tokens: a return value bigger than this is data for a file, not for the model to read
MAX_ERROR_CHARS = 2_000  # an exception's message as the model hears it: the start says what went wrong
SHOWN_ARGUMENTS_CHARS = 200  # the arguments an audit row keeps (masked by the audit log)
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # the Messages API's pattern for a tool's name
CONSENT = "registered by the user"  # an audit row's decided_by: adding the function was the decision
# the docstring sections that name the parameters, and the others a summary ends at (Google: `Args:`; NumPy: the
# name over a line of dashes)
_PARAMETER_SECTIONS = ("args", "arguments", "parameters", "params", "keyword arguments", "other parameters")
_SECTIONS = re.compile(r"(?i)(args|arguments|parameters|params|keyword arguments|other parameters|returns?|yields?|"
                       r"raises|examples?|notes?|see also|references|attributes|warnings?):?")
_PARAMETER = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*(?::\s*(.*))?$")  # `n: text`, `n (int): text`, `n : int`
_SPHINX_PARAM = re.compile(r":param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)")
_UNDERLINE = re.compile(r"-{3,}")


class PythonToolError(SkillsMagicError):
    """A function that cannot be offered as a tool (or a tool name that is not registered)."""


@dataclass(frozen=True)
class PythonTool:
    """One registered function: its tool name, what the model is told, and the model of its arguments."""

    name: str
    function: Callable[..., Any]
    description: str
    input_schema: dict[str, Any]
    signature: str
    arguments: Any  # the pydantic model validating a call's input (each parameter a field aliased by its name)
    parameters: tuple[inspect.Parameter, ...]

    def definition(self) -> dict[str, Any]:
        """The tool as the Messages API takes it."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass(frozen=True)
class PythonCall:
    """What one call gave back: the text for the model, whether it failed, and the trace's one-word account."""

    text: str
    failed: bool
    detail: str


def _docstring(function: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """(the summary before any section, {parameter: its description}) from Google, NumPy or Sphinx docstrings."""
    lines = (inspect.getdoc(function) or "").splitlines()
    summary: list[str] = []
    described: dict[str, str] = {}
    section, style, current, indent = None, "", None, None  # section: None (the summary), "params", "other"
    for number, line in enumerate(lines):
        stripped = line.strip()
        following = lines[number + 1].strip() if number + 1 < len(lines) else ""
        depth = len(line) - len(line.lstrip())
        header = _SECTIONS.fullmatch(stripped)
        sphinx = _SPHINX_PARAM.match(stripped)
        if header and (stripped.endswith(":") or _UNDERLINE.fullmatch(following)):
            section = "params" if header.group(1).lower() in _PARAMETER_SECTIONS else "other"
            style, current, indent = ("google" if stripped.endswith(":") else "numpy"), None, None
        elif sphinx:
            section, style, current, indent = "params", "sphinx", sphinx.group(1), 0
            described[current] = sphinx.group(2).strip()
        elif _UNDERLINE.fullmatch(stripped) or not stripped and section is not None:
            continue
        elif section is None and not stripped.startswith(":"):
            summary.append(line)
        elif stripped.startswith(":"):  # :returns:, :raises: ...
            section, current = "other", None
        elif section == "params":
            indent = depth if indent is None else indent
            named = _PARAMETER.match(stripped)
            if depth == indent and named and style != "sphinx":
                current = named.group(1)
                described[current] = named.group(2).strip() if style == "google" else ""
            elif depth > indent and current is not None:
                described[current] = f"{described[current]} {stripped}".strip()
            else:
                section, current = "other", None
    return "\n".join(summary).strip(), {name: text for name, text in described.items() if text}


def _annotations(function: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function, include_extras=True)
    except Exception:  # a forward reference the function's module cannot resolve: such a parameter takes any value
        return {}


def _shown_signature(function: Callable[..., Any]) -> inspect.Signature:
    """The signature with its annotations resolved (`tea: str`, not `tea: 'str'` under `from __future__ import annotations`)."""
    signature, hints = inspect.signature(function), _annotations(function)
    parameters = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
    return signature.replace(parameters=parameters, return_annotation=hints.get("return", signature.return_annotation))


def _arguments_model(name: str, function: Callable[..., Any], described: dict[str, str]):
    """(the pydantic model of the arguments, their JSON schema, the parameters in order)."""
    from pydantic import ConfigDict, Field, create_model
    from pydantic.errors import PydanticUserError
    from pydantic.json_schema import PydanticJsonSchemaWarning

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        raise PythonToolError(f"{name} has no signature Python can read, so no schema can describe its arguments") from None
    hints = _annotations(function)
    parameters = tuple(signature.parameters.values())
    fields: dict[str, Any] = {}
    for index, parameter in enumerate(parameters):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise PythonToolError(f"{name} takes *{parameter.name}: a tool's arguments are named, so a model cannot "
                                  "send those; give the function named parameters")
        annotation = hints.get(parameter.name, parameter.annotation)
        annotation = Any if annotation is parameter.empty or isinstance(annotation, str) else annotation
        default = ... if parameter.default is parameter.empty else parameter.default
        # aliased fields: a parameter may be called anything (`json`, `_x`, `model_config`) without clashing with pydantic
        # (a description only where the docstring has one: `Annotated[x, Field(description=...)]` keeps its own)
        documented = {"description": described[parameter.name]} if parameter.name in described else {}
        fields[f"p{index}"] = (annotation, Field(default, alias=parameter.name, **documented))
    try:
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True), **fields)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PydanticJsonSchemaWarning)  # a default with no JSON form is left out
            schema = model.model_json_schema()
    except (PydanticUserError, TypeError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PythonToolError(f"the arguments of {name} have no JSON Schema (a model sends JSON values: take a name or a path instead): {first}") from None
    schema.pop("title", None)
    for property_schema in schema.get("properties", {}).values():
        property_schema.pop("title", None)
    return model, schema, parameters


def serialised(value: Any) -> str:
    """A return value as the model reads it: a str as it is, else JSON where it can be, else its repr; capped."""
    from pydantic_core import PydanticSerializationError, to_jsonable_python

    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(to_jsonable_python(value), ensure_ascii=False)
        except (PydanticSerializationError, TypeError, ValueError):
            text = repr(value)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[result cut: {len(text) - MAX_RESULT_CHARS:,} more characters not shown]"
    return text


def _reasons(error) -> str:
    """pydantic's reasons on one line: `n: Input should be a valid integer; extra: Extra inputs are not permitted`."""
    parts = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem.get("loc", ())) or "the input"
        parts.append(f"{where}: {problem.get('msg', 'invalid')}")
    return "; ".join(parts).replace("\n", " ")


class ToolRegistry:
    """The Python functions a session offers its runs, by tool name, in the order they were added."""

    def __init__(self, audit: Callable[[dict[str, Any]], None] | None = None):
        self.audit = audit  # the session's audit log: one row per call
        self._tools: dict[str, PythonTool] = {}

    def add(self, function: Callable[..., Any], name: str | None = None) -> PythonTool:
        """Offer `function` to the model as the tool `name` (default: its `__name__`); the same name again replaces it."""
        name = name or getattr(function, "__name__", "")
        if not callable(function):
            raise PythonToolError(f"{name or repr(function)} is not callable ({type(function).__name__}): only a function can be a tool")
        if not TOOL_NAME.fullmatch(name):
            raise PythonToolError(f"{name!r} cannot be a tool's name: 1 to 64 letters, digits, _ or -")
        if name in BUILT_IN_TOOL_NAMES:
            raise PythonToolError(f"{name} is a built-in tool of every run ({', '.join(BUILT_IN_TOOL_NAMES)}): "
                                  "give the function another name")
        summary, described = _docstring(function)
        model, schema, parameters = _arguments_model(name, function, described)
        signature = f"{name}{_shown_signature(function)}"
        tool = PythonTool(name, function, summary or f"The Python function {signature}.", schema, signature, model, parameters)
        self._tools[name] = tool
        return tool

    def remove(self, name: str) -> PythonTool:
        if name not in self._tools:
            known = f"the tools are {', '.join(self._tools)}" if self._tools else "no function is registered"
            raise PythonToolError(f"no tool named {name!r}: {known}")
        return self._tools.pop(name)

    def list(self) -> list[PythonTool]:
        return list(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[PythonTool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def definitions(self) -> list[dict[str, Any]]:
        return [tool.definition() for tool in self._tools.values()]

    def call(self, name: str, data: dict[str, Any]) -> PythonCall:
        """Validate the model's input, run the function, and say what happened (audited whatever happens)."""
        from pydantic import ValidationError

        from skills_magic.redact import mask

        tool = self._tools[name]
        try:
            values = tool.arguments.model_validate(data)
        except ValidationError as error:
            reasons = _reasons(error)
            self._record(tool, data, "deny", "argument validation", 0.0, f"invalid arguments: {reasons}")
            return PythonCall(f"invalid arguments for {name}: {reasons}", True, "invalid arguments")
        positional, keyword = self._arguments(tool, values)
        started = time.perf_counter()
        try:
            value = tool.function(*positional, **keyword)
        except KeyboardInterrupt:
            self._record(tool, data, "allow", CONSENT, time.perf_counter() - started, "interrupted")
            raise
        except Exception as error:  # the function's own failure: the model hears it, the run goes on
            message = str(error)[:MAX_ERROR_CHARS]
            kind = type(error).__name__
            self._record(tool, data, "allow", CONSENT, time.perf_counter() - started, f"raised {kind}: {message}")
            return PythonCall(mask(f"{name} raised {kind}" + (f": {message}" if message else "")), True, f"raised {kind}")
        seconds = time.perf_counter() - started
        text = mask(serialised(value))
        self._record(tool, data, "allow", CONSENT, seconds, f"returned {type(value).__name__}")
        return PythonCall(text, False, f"returned {type(value).__name__}")

    @staticmethod
    def _arguments(tool: PythonTool, values) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments: what the model sent (a parameter it left out keeps the function's own default)."""
        sent = values.model_fields_set
        positional_only = [i for i, p in enumerate(tool.parameters) if p.kind is p.POSITIONAL_ONLY]
        last = max((i for i in positional_only if f"p{i}" in sent), default=-1)
        positional = [getattr(values, f"p{i}") for i in positional_only if i <= last]
        keyword = {p.name: getattr(values, f"p{i}") for i, p in enumerate(tool.parameters)
                   if p.kind is not p.POSITIONAL_ONLY and f"p{i}" in sent}
        return positional, keyword

    def _record(self, tool: PythonTool, data: Any, decision: str, decided_by: str, seconds: float, detail: str) -> None:
        if self.audit is not None:
            self.audit({"at": utc_now(), "event": "tool", "skill": "*", "path": tool.name, "decision": decision,
                        "decided_by": decided_by, "seconds": round(seconds, 6),
                        "detail": f"{detail}; arguments {describe_input(data, SHOWN_ARGUMENTS_CHARS)}"})
