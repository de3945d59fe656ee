"""Python functions as tools: the schema pydantic builds from a signature and a docstring, a call validated before it
runs, its value serialised, its exception an `is_error` result, every call in the trace, through `on_event` and in
the audit log (real SQLite); `%skills tool add | list | remove` through the real IPython shell."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Annotated, Literal

import pytest
from IPython.core.error import UsageError
from pydantic import Field

from fake_anthropic import forget_machine_setup
from notebook_setup import registered_magics
from skillfiles import tea_notes_skill
from skills_magic.models.scripted import ScriptedModel
from skills_magic.runs.pytools import MAX_RESULT_CHARS, PythonToolError, ToolRegistry, serialised
from skills_magic.session import SkillsSession
from skills_magic.skills.catalog import Source


@pytest.fixture(autouse=True)
def environment(monkeypatch, tmp_path):
    forget_machine_setup(monkeypatch, tmp_path)
    monkeypatch.delenv("SKILLS_MAGIC_PATH", raising=False)
    monkeypatch.setenv("SKILLS_MAGIC_DB", str(tmp_path / "audit.sqlite"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def project(tmp_path) -> Path:
    tea_notes_skill(tmp_path / "skills" / "tea-notes", "# Tea notes\n", "Three lines.\n")
    return tmp_path


def new_session(project: Path, turns) -> SkillsSession:
    session = SkillsSession(sources=[Source("project", str(project / "skills"))], cwd=str(project))
    session.model_client = ScriptedModel(list(turns))
    return session


def calling(name: str, **arguments):
    return {"tool_use": [{"name": name, "input": arguments, "id": f"toolu_{name}"}]}


def steep(tea: str, minutes: float = 3.0, *, style: Literal["western", "gongfu"] = "western") -> dict:
    """How to steep a tea.

    Args:
        tea: the tea's name
        minutes: how long, in minutes
            (fractions allowed)
    """
    return {"tea": tea, "minutes": minutes, "style": style}


# --- the schema -----------------------------------------------------------------------------------------------


def test_the_schema_comes_from_the_signature_and_the_google_docstring():
    tool = ToolRegistry().add(steep)

    assert tool.definition() == {
        "name": "steep",
        "description": "How to steep a tea.",
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "tea": {"type": "string", "description": "the tea's name"},
                "minutes": {"type": "number", "default": 3.0, "description": "how long, in minutes (fractions allowed)"},
                "style": {"type": "string", "enum": ["western", "gongfu"], "default": "western"},
            },
            "required": ["tea"],
        },
    }
    assert tool.signature == "steep(tea: str, minutes: float = 3.0, *, style: Literal['western', 'gongfu'] = 'western') -> dict"


def test_numpy_and_sphinx_docstrings_and_annotated_fields_describe_parameters():
    def numpy_style(n: int, label: str = "x"):
        """Count.

        Parameters
        ----------
        n : int
            how many
        label : str
            what to call it
        """

    def sphinx_style(n: int, weight: Annotated[float, Field(description="grams", ge=0)] = 1.0):
        """Weigh.

        :param n: how many
        :returns: nothing
        """

    registry = ToolRegistry()
    numpy_properties = registry.add(numpy_style).input_schema["properties"]
    sphinx_tool = registry.add(sphinx_style)
    assert {k: v.get("description") for k, v in numpy_properties.items()} == {"n": "how many", "label": "what to call it"}
    assert sphinx_tool.description == "Weigh."
    assert sphinx_tool.input_schema["properties"]["n"]["description"] == "how many"
    assert sphinx_tool.input_schema["properties"]["weight"] == {"type": "number", "minimum": 0, "default": 1.0, "description": "grams"}


def test_a_function_without_docstring_or_annotations_is_described_by_its_signature():
    def plain(a, b=2):
        return a

    tool = ToolRegistry().add(plain)
    assert tool.description == "The Python function plain(a, b=2)."
    assert tool.input_schema["properties"] == {"a": {}, "b": {"default": 2}} and tool.input_schema["required"] == ["a"]


@pytest.mark.parametrize("function, name, message", [
    (lambda *values: 1, "spread", "takes *values"),
    (lambda **options: 1, "options", "takes *options"),
    (42, "answer", "is not callable (int)"),
    (steep, "run_skill_script", "is a built-in tool of every run"),
    (steep, "has space", "cannot be a tool's name"),
    (lambda: 1, None, "'<lambda>' cannot be a tool's name"),
])
def test_what_cannot_be_a_tool_is_refused_in_one_sentence(function, name, message):
    with pytest.raises(PythonToolError) as caught:
        ToolRegistry().add(function, name)
    assert message in str(caught.value) and "\n" not in str(caught.value)


class Frame:
    """A type pydantic can check but not describe as JSON (a DataFrame, a figure)."""


def test_a_parameter_with_no_json_form_is_refused_when_added():
    def profile(frame: Frame) -> str:
        return ""

    with pytest.raises(PythonToolError) as caught:
        ToolRegistry().add(profile)
    assert "the arguments of profile have no JSON Schema" in str(caught.value) and "take a name or a path" in str(caught.value)


def test_adding_a_name_again_replaces_it_and_remove_says_what_is_there():
    registry = ToolRegistry()
    registry.add(steep)
    registry.add(lambda tea: tea, "steep")
    assert len(registry) == 1 and registry.list()[0].signature == "steep(tea)"
    with pytest.raises(PythonToolError) as caught:
        registry.remove("brew")
    assert str(caught.value) == "no tool named 'brew': the tools are steep"
    registry.remove("steep")
    assert "steep" not in registry and registry.definitions() == []


# --- a call ---------------------------------------------------------------------------------------------------


def test_a_call_runs_the_function_in_the_run_s_thread_and_its_value_goes_back_as_json(project):
    threads = []

    def weigh(grams: int) -> dict:
        threads.append(threading.get_ident())
        return {"grams": grams, "ok": True}

    session = new_session(project, [calling("weigh", grams="7"), "Seven grams."])
    session.tools.add(weigh)
    events = []
    result = session.run("Weigh it.", on_event=lambda kind, value: events.append((kind, value)))

    assert threads == [threading.get_ident()]  # the kernel's (here: the test's) thread
    assert result.final_text == "Seven grams." and result.error is None
    answer = session.model_client.requests[1]["messages"][2]["content"][0]
    assert answer == {"type": "tool_result", "tool_use_id": "toolu_weigh", "content": '{"grams": 7, "ok": true}'}
    (call,) = result.tool_calls
    assert (call.name, call.input, call.is_error, call.result_bytes) == ("weigh", {"grams": "7"}, False, 24)
    assert [e.to_dict() for e in result.trace if e.stage == "call"] == [
        {"stage": "call", "object": "weigh", "bytes": 24, "detail": "returned dict"}]
    assert [k for k, _ in events] == ["call", "tool", "text"] and events[0][1] == {"name": "weigh", "input": {"grams": "7"}}
    tool_definition = session.model_client.requests[0]["tools"][-1]
    assert tool_definition["name"] == "weigh" and tool_definition["input_schema"]["required"] == ["grams"]


def test_on_event_announces_the_call_before_the_function_runs(project):
    seen_while_running = []
    events = []

    def slow() -> str:
        seen_while_running.extend(kind for kind, _ in events)
        return "done"

    session = new_session(project, [calling("slow"), "Done."])
    session.tools.add(slow)
    session.run("Go.", on_event=lambda kind, value: events.append((kind, value)))

    assert seen_while_running == ["call"]


def test_a_bad_call_is_an_is_error_result_with_pydantic_s_reasons_and_the_function_does_not_run(project):
    ran = []

    def weigh(grams: int, unit: Literal["g", "oz"] = "g") -> int:
        ran.append(grams)
        return grams

    session = new_session(project, [calling("weigh", grams="lots", unit="kg", extra=1), "Sorry."])
    session.tools.add(weigh)
    result = session.run("Weigh it.")

    assert ran == [] and result.final_text == "Sorry."  # the run went on
    (call,) = result.tool_calls
    assert call.is_error and "\n" not in call.error
    assert call.error == ("invalid arguments for weigh: grams: Input should be a valid integer, unable to parse string as "
                          "an integer; unit: Input should be 'g' or 'oz'; extra: Extra inputs are not permitted")
    answer = session.model_client.requests[1]["messages"][2]["content"][0]
    assert answer["is_error"] is True and answer["content"] == call.error
    assert [e.detail for e in result.trace if e.stage == "call"] == ["invalid arguments"]


def test_an_exception_becomes_an_is_error_result_and_the_run_goes_on(project):
    def brew(tea: str) -> str:
        raise LookupError(f"no {tea} in the cupboard")

    session = new_session(project, [calling("brew", tea="sencha"), calling("brew", tea="oolong"), "None left."])
    session.tools.add(brew)
    result = session.run("Brew.")

    assert [c.error for c in result.tool_calls] == ["brew raised LookupError: no sencha in the cupboard",
                                                    "brew raised LookupError: no oolong in the cupboard"]
    assert result.final_text == "None left." and result.turns == 3 and result.stop_reason == "end_turn"


def test_a_keyboard_interrupt_in_the_function_stops_the_run_and_keeps_the_trace(project):
    def wait() -> None:
        raise KeyboardInterrupt

    session = new_session(project, [calling("wait"), "never"])
    session.tools.add(wait)
    result = session.run("Wait.")

    assert result.interrupted and result.stop_reason == "interrupted" and len(session.model_client.requests) == 1
    assert session.audit()[-1]["detail"].startswith("interrupted")


def test_every_call_is_audited_in_the_database(project):
    def weigh(grams: int) -> int:
        return grams

    session = new_session(project, [calling("weigh", grams=3), calling("weigh", grams="x"), "Done."])
    session.tools.add(weigh)
    session.run("Weigh.")

    rows = [r for r in session.audit() if r["event"] == "tool"]
    assert [(r["skill"], r["path"], r["decision"], r["decided_by"]) for r in rows] == [
        ("*", "weigh", "allow", "registered by the user"), ("*", "weigh", "deny", "argument validation")]
    assert rows[0]["detail"] == 'returned int; arguments {"grams": 3}' and rows[0]["seconds"] >= 0
    assert rows[1]["detail"].startswith("invalid arguments: grams: Input should be a valid integer")


def test_a_returned_secret_is_masked_before_the_model_sees_it(project, monkeypatch):
    monkeypatch.setenv("TEA_API_TOKEN", "tok-DISTINCTIVE-1234567890")

    def leak() -> str:
        return "the token is tok-DISTINCTIVE-1234567890"

    session = new_session(project, [calling("leak"), "ok"])
    session.tools.add(leak)
    session.run("Leak.")

    content = session.model_client.requests[1]["messages"][2]["content"][0]["content"]
    assert "DISTINCTIVE" not in content and content.startswith("the token is ")


def test_return_values_are_json_where_they_can_be_else_repr_and_capped():
    class Opaque:
        def __repr__(self):
            return "<opaque>"

    assert serialised("plain text") == "plain text"
    assert serialised({"a": (1, 2), "b": None}) == '{"a": [1, 2], "b": null}'
    assert serialised(Opaque()) == "<opaque>"
    big = serialised("x" * (MAX_RESULT_CHARS + 10))
    assert big.startswith("x" * MAX_RESULT_CHARS) and big.endswith("[result cut: 10 more characters not shown]")


def test_positional_only_parameters_and_left_out_defaults_are_the_function_s_own(project):
    seen = []

    def mix(a: int, b: int = 5, /, c: int = 7, *, d: object = None) -> str:
        seen.append((a, b, c, d))
        return "ok"

    registry = ToolRegistry()
    registry.add(mix)
    assert registry.call("mix", {"a": 1, "c": 2}).failed is False
    assert seen == [(1, 5, 2, None)]


# --- the magics -----------------------------------------------------------------------------------------------


@pytest.fixture
def magics(ip, project, monkeypatch):
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "project")
    (project / "turns.json").write_text(json.dumps({"turns": [calling("steep", tea="sencha", minutes=1), "One minute."]}),
                                        encoding="utf-8")
    with registered_magics(ip) as instance:
        ip.run_line_magic("skills", "model scripted turns.json")
        yield instance
    ip.user_ns.pop("steep", None)


def test_tool_add_offers_the_notebook_s_function_and_the_run_view_shows_the_call(ip, magics):
    ip.user_ns["steep"] = steep
    added = ip.run_line_magic("skills", "tool add steep")
    assert added.text().splitlines()[0] == "offered steep; 1 Python function offered to the model"
    assert added.data()["tools"][0]["name"] == "steep" and added.data()["tools"][0]["input_schema"]["required"] == ["tea"]

    run = ip.run_cell_magic("skill", "run", "Steep a sencha.\n")

    assert run.final_text == "One minute."
    returned = json.dumps({"tea": "sencha", "minutes": 1.0, "style": "western"})
    assert f'steep {{"minutes": 1, "tea": "sencha"}} -> {len(returned)} bytes' in run.text()
    assert [row["stage"] for row in run.data()["trace"]] == ["discover", "model", "call", "model"]
    assert magics.session.model_client.requests[0]["tools"][-1]["name"] == "steep"


def test_tool_list_and_remove(ip, magics):
    assert ip.run_line_magic("skills", "tool list").text().startswith("no Python functions offered to the model")
    ip.user_ns["steep"] = steep
    ip.run_line_magic("skills", "tool add steep")
    listed = ip.run_line_magic("skills", "tool list")
    assert listed.text().splitlines()[2].split() == ["tool", "signature", "description"]
    assert listed.text().splitlines()[3:] == [
        "steep  steep(tea: str, minutes: float = 3.0, *, style: Literal['western', 'gongfu'] = 'western') -> dict  How to steep a tea."]
    again = ip.run_line_magic("skills", "tool add steep")
    assert again.text().startswith("offered steep (replacing the earlier steep)")

    removed = ip.run_line_magic("skills", "tool remove steep")
    assert removed.text().startswith("removed steep; no Python functions") and removed.data() == {"tools": []}


@pytest.mark.parametrize("line, message", [
    ("tool add missing_function", "no 'missing_function' in the notebook: define it first"),
    ("tool add", "`%skills tool add` needs at least one NAME"),
    ("tool list steep", "`%skills tool list` takes no NAME"),
    ("tool remove steep", "no tool named 'steep': no function is registered"),
    ("tool add ip_number", "ip_number is not callable (int)"),
    ("tool wipe", "invalid choice"),
])
def test_tool_errors_are_one_line(ip, magics, line, message):
    ip.user_ns["ip_number"] = 3
    try:
        with pytest.raises(UsageError) as caught:
            ip.run_line_magic("skills", line)
    finally:
        ip.user_ns.pop("ip_number", None)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert len(magics.session.tools) == 0
