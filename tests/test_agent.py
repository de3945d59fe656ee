"""The agent loop, driven by the scripted model (which goes through the same loop as the real client).

What the model is sent (system prompt, tools, activation text, tool results), what the loop does with every stop
reason, and the load trace: every disclosure measured in bytes actually sent, every model call with the usage the
model reported (never estimated).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from skillfiles import make_skill

import skills_magic.runs.disclosure as disclosure
from skills_magic.runs.agent import (
    ALREADY_ACTIVE,
    DEFAULT_MAX_TOKENS,
    NOT_PERMITTED,
    SYSTEM_INSTRUCTIONS,
    Agent,
    RunResult,
    ToolCall,
    ToolInputError,
    TraceEvent,
    tool_definitions,
)
from skills_magic.skills.catalog import Catalog, Source
from skills_magic.runs.disclosure import activation_text
from skills_magic.skills.listing import xml_listing
from skills_magic.models.anthropic import ALIASES, DEFAULT_MODEL, MODEL_VARIABLE
from skills_magic.models.base import NoModelConfigured
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import SkillsSession

PDF_BODY = (
    "# PDF tools \u00e9\u4e2d\n\n"
    "Run `python ${SKILL_DIR}/scripts/extract.py $ARGUMENTS` and log to /tmp/${CLAUDE_SESSION_ID}.log.\n"
    "Read references/guide.md for the details. `awk '{print $1}'` stays.\n"
)
GUIDE = "# Guide \u00e9t\u00e9\n\nThe details.\n"


def build(root: Path) -> Path:
    """Three skills: pdf-tools (with files), csv-clean, and secret-op (hidden from the model)."""
    pdf = root / "pdf-tools"
    make_skill(pdf, "name: pdf-tools\ndescription: Extract text from PDF files. Use when a PDF is mentioned.\n"
                    "metadata:\n  version: \"1.0\"\n", PDF_BODY)
    (pdf / "references").mkdir()
    (pdf / "references" / "guide.md").write_text(GUIDE, encoding="utf-8")
    (pdf / "scripts").mkdir()
    (pdf / "scripts" / "extract.py").write_text(
        "import sys\nprint('extracted', sys.argv[1:], sys.stdin.read())\n", encoding="utf-8")
    (pdf / "scripts" / "fail.py").write_text("import sys\nsys.stderr.write('bad pdf\\n')\nsys.exit(2)\n")
    make_skill(root / "csv-clean", description="Clean CSV files & <tables>. Use when a CSV is messy.",
               body="Clean it.\n")
    make_skill(root / "secret-op", "name: secret-op\ndescription: Internal operation. Use only explicitly.\n"
                                   "disable-model-invocation: true\n", "Secret steps.\n")
    return root


@pytest.fixture
def root(tmp_path) -> Path:
    return build(tmp_path / "skills")


def load(root: Path):
    return Catalog([Source("session", str(root), explicit=True)]).scan().skills


class Snapshots(ScriptedModel):
    """The scripted model, keeping a deep copy of each request as it was at the moment it was sent."""

    def create(self, request, on_text=None):
        return super().create(copy.deepcopy(request), on_text)


def make_agent(root: Path, turns, **options) -> tuple[Agent, ScriptedModel]:
    model = Snapshots(turns)
    agent = Agent(load(root), model, "model-x", show_path=lambda p: os.path.relpath(p, root), session_id="sess-1",
                  **options)
    return agent, model


def call(name: str, data: Any, id: str | None = None) -> dict[str, Any]:
    block = {"name": name, "input": data}
    if id is not None:
        block["id"] = id
    return block


def tools_turn(*calls, **extra) -> dict[str, Any]:
    return {"tool_use": list(calls), **extra}


def last_user(request) -> list[dict[str, Any]]:
    message = request["messages"][-1]
    assert message["role"] == "user"
    return message["content"]


def only_result(request) -> dict[str, Any]:
    content = last_user(request)
    assert len(content) == 1 and content[0]["type"] == "tool_result"
    return content[0]


def stages(result: RunResult) -> list[str]:
    return [e.stage for e in result.trace]


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def visible_catalog(root: Path) -> str:
    return xml_listing([s for s in load(root) if s.model_visible])[1]


# --- the system prompt and the tools -----------------------------------------------------------------------------


def test_system_prompt_is_instructions_and_catalog_marked_for_caching(root):
    agent, model = make_agent(root, ["hi"])
    result = agent.run("hello")
    request = model.requests[0]
    catalog = visible_catalog(root)
    assert request["system"] == [
        {"type": "text", "text": f"{SYSTEM_INSTRUCTIONS}\n\n{catalog}", "cache_control": {"type": "ephemeral"}}
    ]
    assert result.system == request["system"][0]["text"]
    assert catalog.startswith("<available_skills>\n") and catalog.endswith("</available_skills>")
    text = request["system"][0]["text"]
    assert "<location>" not in text and str(root) not in text
    assert "<name>\npdf-tools\n</name>" in text and "<name>\ncsv-clean\n</name>" in text
    assert "Clean CSV files &amp; &lt;tables&gt;." in text
    assert "secret-op" not in text and "Internal operation" not in text
    assert request["model"] == "model-x"
    assert request["max_tokens"] == DEFAULT_MAX_TOKENS
    assert request["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]


def test_tools_and_the_activate_enum(root):
    agent, model = make_agent(root, ["hi"])
    agent.run("hello")
    tools = model.requests[0]["tools"]
    assert [t["name"] for t in tools] == ["activate_skill", "read_skill_resource", "run_skill_script"]
    assert tools[0]["input_schema"]["properties"]["name"]["enum"] == ["csv-clean", "pdf-tools"]
    assert tools == tool_definitions(["csv-clean", "pdf-tools"])
    for tool in tools:
        assert tool["input_schema"]["type"] == "object"


def test_system_and_tools_are_byte_identical_across_agents_runs_and_folders(root, tmp_path):
    other = tmp_path / "elsewhere" / "deeper" / "copy"
    shutil.copytree(root, other, symlinks=True)
    seen = []
    for folder in (root, root, other):
        agent, model = make_agent(folder, ["one", "two"])
        agent.run("first")
        agent.run("second")
        for request in model.requests:
            seen.append(json.dumps({"system": request["system"], "tools": request["tools"]}, sort_keys=True).encode())
    assert len(seen) == 6
    assert len(set(seen)) == 1
    assert str(root).encode() not in seen[0] and str(other).encode() not in seen[0]


def test_system_does_not_depend_on_the_session_id(root):
    skills = load(root)
    one = Agent(skills, ScriptedModel([]), "m", show_path=str, session_id="a")
    two = Agent(skills, ScriptedModel([]), "m", show_path=str, session_id="b")
    assert one.system == two.system and one.tools == two.tools


def test_over_the_budget_the_catalog_is_marked_and_the_enum_has_only_the_shown_skills(tmp_path):
    root = tmp_path / "many"
    for i in range(6):
        make_skill(root / f"skill-{i}", description=f"Skill number {i} does a long thing with many words. Use when {i}.")
    agent, model = make_agent(root, [tools_turn(call("activate_skill", {"name": "skill-5"})), "done"], budget=400)
    result = agent.run("task")
    shown = agent.listing.shown
    assert 0 < shown < 6
    names = [f"skill-{i}" for i in range(shown)]
    request = model.requests[0]
    text = request["system"][0]["text"]
    marker = agent.listing.marker()
    assert marker is not None and text.endswith("\n" + marker)
    assert f"showed {shown} of 6 skills" in marker
    assert request["tools"][0]["input_schema"]["properties"]["name"]["enum"] == names
    for i in range(shown, 6):
        assert f"skill-{i}\n" not in text
    # a skill the budget left out cannot be activated by the model
    answer = only_result(model.requests[1])
    assert answer["is_error"] is True and "no skill named 'skill-5'" in answer["content"]
    assert result.trace[0].stage == "discover" and result.trace[0].detail == marker
    assert result.trace[0].bytes == size(agent.catalog)


def test_the_catalog_without_budget_lists_everything(tmp_path):
    root = tmp_path / "many"
    for i in range(6):
        make_skill(root / f"skill-{i}", description="x" * 900)
    agent, _ = make_agent(root, [], budget=None)
    assert agent.listing.shown == 6 and agent.listing.marker() is None
    assert list(agent.visible) == [f"skill-{i}" for i in range(6)]


# --- explicit activation -----------------------------------------------------------------------------------------


def test_explicit_activation_puts_the_skill_before_the_task(root):
    usage = {"input_tokens": 120, "output_tokens": 7, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 3}
    agent, model = make_agent(root, [{"text": "Done.", "usage": usage}])
    result = agent.run("extract it", skill="pdf-tools", arguments=["in.pdf"])
    assert result.ok and result.final_text == "Done." and result.stop_reason == "end_turn"
    assert len(model.requests) == 1
    first = model.requests[0]["messages"]
    assert len(first) == 1 and first[0]["role"] == "user"
    activation, task = first[0]["content"]
    assert task == {"type": "text", "text": "extract it"}
    text = activation["text"]
    skill = {s.name: s for s in load(root)}["pdf-tools"]
    assert text == activation_text(skill, "pdf-tools", ["in.pdf"], "sess-1")
    lines = text.split("\n")
    assert lines[0] == "[skill pdf-tools | session | 1.0 | pdf-tools]"
    body = PDF_BODY.replace("${SKILL_DIR}", "pdf-tools").replace("$ARGUMENTS", "in.pdf")
    body = body.replace("${CLAUDE_SESSION_ID}", "sess-1")
    assert text == (
        "[skill pdf-tools | session | 1.0 | pdf-tools]\n" + body
        + "\n\n[resources of pdf-tools: read with read_skill_resource, run scripts with run_skill_script]\n"
        "- references/guide.md\n- scripts/extract.py\n- scripts/fail.py"
    )
    assert "The details." not in text  # paths, never contents
    assert "awk '{print $1}'" in text  # `$1` has no argument (0-based): left as written
    # the model never had to call activate_skill
    assert result.tool_calls == []
    assert stages(result) == ["discover", "activate", "model"]
    discover, activate, model_row = result.trace
    assert discover.bytes == size(agent.catalog) == size(visible_catalog(root))
    assert discover.object == "catalog of 2 skills"
    assert activate.object == "pdf-tools" and activate.bytes == size(text) and activate.bytes > len(text)
    assert model_row.to_dict() == {"stage": "model", "object": "call 1", "input_tokens": 120, "output_tokens": 7,
                                   "cache_read_tokens": 3, "cache_write_tokens": 100, "detail": "end_turn"}
    assert result.usage == usage


def test_a_hidden_skill_can_be_run_explicitly(root):
    agent, model = make_agent(root, [tools_turn(call("activate_skill", {"name": "secret-op"})), "ok"])
    result = agent.run("do the secret thing", skill="secret-op")
    first = model.requests[0]["messages"][0]["content"][0]["text"]
    assert first.startswith("[skill secret-op | session | - | secret-op]\nSecret steps.\n")
    assert "secret-op" not in model.requests[0]["system"][0]["text"]
    # once active, it is active (the note, not an unknown-skill error)
    assert only_result(model.requests[1])["content"] == ALREADY_ACTIVE.format(name="secret-op")
    assert result.ok


def test_a_hidden_skill_cannot_be_activated_by_the_model(root):
    agent, model = make_agent(root, [
        tools_turn(call("activate_skill", {"name": "secret-op"}),
                   call("read_skill_resource", {"skill": "secret-op", "path": "SKILL.md"})),
        "ok"])
    result = agent.run("task")
    answers = last_user(model.requests[1])
    assert all(a["is_error"] for a in answers)
    assert "no skill named 'secret-op'" in answers[0]["content"]
    assert "activate" not in stages(result)


def test_explicit_activation_of_an_unknown_skill_raises(root):
    agent, model = make_agent(root, ["x"])
    with pytest.raises(ToolInputError, match="no skill named 'nope'"):
        agent.run("task", skill="nope")
    assert model.requests == []


# --- activation by the model -------------------------------------------------------------------------------------


def test_model_chosen_activation_and_the_already_active_note(root):
    agent, model = make_agent(root, [
        tools_turn(call("activate_skill", {"name": "pdf-tools"}, id="t1")),
        tools_turn(call("activate_skill", {"name": "pdf-tools"}, id="t2")),
        "finished",
    ])
    result = agent.run("read a.pdf")
    assert result.ok and result.final_text == "finished" and result.turns == 3
    first = only_result(model.requests[1])
    skill = {s.name: s for s in load(root)}["pdf-tools"]
    assert first == {"type": "tool_result", "tool_use_id": "t1",
                     "content": activation_text(skill, "pdf-tools", [], "sess-1")}
    second = only_result(model.requests[2])
    assert second == {"type": "tool_result", "tool_use_id": "t2",
                      "content": ALREADY_ACTIVE.format(name="pdf-tools")}
    assert "already active" in second["content"] and "PDF tools" not in second["content"]
    assert stages(result).count("activate") == 1
    activate = next(e for e in result.trace if e.stage == "activate")
    assert activate.bytes == size(first["content"])
    assert [(c.name, c.is_error, c.result_bytes) for c in result.tool_calls] == [
        ("activate_skill", False, size(first["content"])), ("activate_skill", False, size(second["content"]))]


def test_explicitly_activated_skill_is_already_active_for_the_model(root):
    agent, model = make_agent(root, [tools_turn(call("activate_skill", {"name": "pdf-tools"})), "ok"])
    result = agent.run("task", skill="pdf-tools")
    assert only_result(model.requests[1])["content"] == ALREADY_ACTIVE.format(name="pdf-tools")
    assert stages(result).count("activate") == 1


def test_each_run_starts_with_nothing_active(root):
    agent, model = make_agent(root, [tools_turn(call("activate_skill", {"name": "csv-clean"})), "one",
                                     tools_turn(call("activate_skill", {"name": "csv-clean"})), "two"])
    agent.run("first")
    second = agent.run("second")
    assert only_result(model.requests[3])["content"].startswith("[skill csv-clean | session")
    assert stages(second).count("activate") == 1


def test_arguments_reach_a_model_chosen_activation(root):
    agent, model = make_agent(root, [tools_turn(call("activate_skill", {"name": "csv-clean"})), "ok"])
    agent.run("task", arguments=["data.csv"])
    assert "Clean it.\n\n\nARGUMENTS: data.csv\n" in only_result(model.requests[1])["content"]


# --- read_skill_resource -----------------------------------------------------------------------------------------


def test_read_a_resource(root):
    agent, model = make_agent(root, [
        tools_turn(call("read_skill_resource", {"skill": "pdf-tools", "path": "references/guide.md"}, id="r1")),
        "read it",
    ])
    result = agent.run("task")
    assert only_result(model.requests[1]) == {"type": "tool_result", "tool_use_id": "r1", "content": GUIDE}
    reference = [e for e in result.trace if e.stage == "reference"]
    assert len(reference) == 1
    assert reference[0].object == "pdf-tools/references/guide.md"
    assert reference[0].bytes == size(GUIDE) > len(GUIDE)
    assert result.tool_calls == [ToolCall("r1", "read_skill_resource", {"skill": "pdf-tools", "path": "references/guide.md"},
                                          size(GUIDE), False)]
    assert result.ok


def _bad_resources(root: Path, outside: Path) -> None:
    folder = root / "pdf-tools"
    outside.write_text("outside secret\n")
    (folder / "escape.md").symlink_to(outside)
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (folder / "latin1.txt").write_bytes("caf\u00e9\n".encode("latin-1"))


@pytest.mark.parametrize("path, message", [
    ("../csv-clean/SKILL.md", "outside the folder"),
    ("../../outside.txt", "outside the folder"),
    ("/etc/passwd", "absolute"),
    ("escape.md", "outside the folder"),
    ("missing.md", "is not a file"),
    ("references", "is not a file"),
    ("image.png", "binary file"),
    ("latin1.txt", "not UTF-8"),
    ("", "must be a file path"),
    (None, "must be a file path"),
])
def test_a_refused_resource_is_an_error_result_and_the_run_goes_on(root, tmp_path, path, message):
    _bad_resources(root, tmp_path / "outside.txt")
    agent, model = make_agent(root, [
        tools_turn(call("read_skill_resource", {"skill": "pdf-tools", "path": path}, id="bad")),
        "carried on",
    ])
    result = agent.run("task")
    answer = only_result(model.requests[1])
    assert answer["tool_use_id"] == "bad" and answer["is_error"] is True
    assert message in answer["content"]
    assert "outside secret" not in answer["content"] and "root:" not in answer["content"]
    assert "reference" not in stages(result)
    assert result.ok and result.final_text == "carried on" and result.turns == 2
    assert result.tool_calls[0].is_error and result.tool_calls[0].error == answer["content"]


def test_an_oversize_resource_is_refused(root, monkeypatch):
    monkeypatch.setattr(disclosure, "MAX_RESOURCE_BYTES", 10)
    agent, model = make_agent(root, [
        tools_turn(call("read_skill_resource", {"skill": "pdf-tools", "path": "references/guide.md"})),
        "carried on",
    ])
    result = agent.run("task")
    answer = only_result(model.requests[1])
    assert answer["is_error"] is True
    assert f"has {size(GUIDE)} bytes; resources over 10 bytes are not sent" in answer["content"]
    assert "The details" not in answer["content"]
    assert result.ok and "reference" not in stages(result)


def test_reading_a_resource_of_an_unknown_skill(root):
    agent, model = make_agent(root, [
        tools_turn(call("read_skill_resource", {"skill": "pdf-tool", "path": "references/guide.md"})), "ok"])
    agent.run("task")
    answer = only_result(model.requests[1])
    assert answer["is_error"] and "no skill named 'pdf-tool' is available (did you mean pdf-tools?)" == answer["content"]


# --- run_skill_script --------------------------------------------------------------------------------------------


def test_run_skill_script_without_a_hook_is_not_permitted(root):
    agent, model = make_agent(root, [
        tools_turn(call("run_skill_script", {"skill": "pdf-tools", "path": "scripts/extract.py", "args": ["a"]}, id="x1")),
        "I would have run it",
    ])
    result = agent.run("task")
    answer = only_result(model.requests[1])
    assert answer == {"type": "tool_result", "tool_use_id": "x1", "is_error": True,
                      "content": NOT_PERMITTED.format(path="scripts/extract.py", skill="pdf-tools")}
    assert "not permitted" in answer["content"]
    execute = [e for e in result.trace if e.stage == "execute"]
    assert len(execute) == 1
    assert execute[0].object == "pdf-tools/scripts/extract.py" and "denied" in execute[0].detail
    assert result.ok and result.final_text == "I would have run it"


def test_run_skill_script_goes_through_the_hook(root):
    calls = []

    def hook(skill, path, args, stdin):
        calls.append((skill.name, skill.folder, path, list(args), stdin))
        return "script output\n", False, TraceEvent("execute", f"{skill.name}/{path}", bytes=size(stdin), detail="exit code 0")

    agent, model = make_agent(root, [
        tools_turn(call("run_skill_script", {"skill": "pdf-tools", "path": "scripts/extract.py", "args": ["a b", 3],
                                             "stdin": "\u00e9"}, id="x1")),
        "used it",
    ], run_script=hook)
    result = agent.run("task")
    assert calls == [("pdf-tools", str(root / "pdf-tools"), "scripts/extract.py", ["a b", "3"], "\u00e9")]
    assert only_result(model.requests[1]) == {"type": "tool_result", "tool_use_id": "x1", "content": "script output\n"}
    assert TraceEvent("execute", "pdf-tools/scripts/extract.py", bytes=2, detail="exit code 0") in result.trace
    assert result.ok


def test_a_failed_script_is_an_error_result(root):
    def hook(skill, path, args, stdin):
        return "exit code 2: bad pdf", True, TraceEvent("execute", f"{skill.name}/{path}", detail="exit code 2")

    agent, model = make_agent(root, [
        tools_turn(call("run_skill_script", {"skill": "pdf-tools", "path": "scripts/fail.py"})), "it failed"],
        run_script=hook)
    result = agent.run("task")
    answer = only_result(model.requests[1])
    assert answer["is_error"] is True and answer["content"] == "exit code 2: bad pdf"
    assert [e.detail for e in result.trace if e.stage == "execute"] == ["exit code 2"]
    assert result.ok and result.final_text == "it failed"


@pytest.mark.parametrize("data", [
    {"skill": "pdf-tools"},
    {"skill": "pdf-tools", "path": 3},
    {"skill": "pdf-tools", "path": "scripts/extract.py", "args": "a b"},
    {"skill": "pdf-tools", "path": "scripts/extract.py", "stdin": 5},
])
def test_run_skill_script_with_bad_input_never_calls_the_hook(root, data):
    hook_calls = []
    agent, model = make_agent(root, [tools_turn(call("run_skill_script", data)), "ok"],
                              run_script=lambda *a: hook_calls.append(a))
    result = agent.run("task")
    answer = only_result(model.requests[1])
    assert answer["is_error"] is True and "run_skill_script needs" in answer["content"]
    assert hook_calls == [] and result.ok


# --- parallel calls ----------------------------------------------------------------------------------------------


def test_parallel_calls_are_answered_together_in_order(root):
    events = []
    agent, model = make_agent(root, [
        {"text": "Let me look.", "tool_use": [
            call("read_skill_resource", {"skill": "pdf-tools", "path": "references/guide.md"}, id="c"),
            call("activate_skill", {"name": "csv-clean"}, id="a"),
            call("no_such_tool", {}, id="b"),
            call("activate_skill", {"name": "pdf-tools"}, id="z"),
        ]},
        "all done",
    ])
    result = agent.run("task", on_event=lambda kind, value: events.append((kind, value)))
    messages = model.requests[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    answers = messages[2]["content"]
    assert [a["tool_use_id"] for a in answers] == ["c", "a", "b", "z"]
    assert [a.get("is_error", False) for a in answers] == [False, False, True, False]
    assert answers[0]["content"] == GUIDE
    assert answers[1]["content"].startswith("[skill csv-clean |")
    assert answers[3]["content"].startswith("[skill pdf-tools |")
    assert [c.id for c in result.tool_calls] == ["c", "a", "b", "z"]
    assert stages(result) == ["discover", "model", "reference", "activate", "activate", "model"]
    assert [kind for kind, _ in events] == ["text", "tool", "tool", "tool", "tool", "text"]
    assert [value.id for kind, value in events if kind == "tool"] == ["c", "a", "b", "z"]


# --- malformed tool calls ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, data, message", [
    ("activate_skill", "pdf-tools", "the input of activate_skill must be a JSON object"),
    ("activate_skill", ["pdf-tools"], "must be a JSON object"),
    ("activate_skill", None, "must be a JSON object"),
    ("activate_skill", {}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": 3}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": ["pdf-tools"]}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": ""}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": "pdf-tool"}, "no skill named 'pdf-tool' is available (did you mean pdf-tools?)"),
    ("activate_skill", {"name": "zzzzzz"}, "no skill named 'zzzzzz' is available"),
    ("read_skill_resource", {"path": "references/guide.md"}, "`skill` must be the name of a listed skill"),
    ("read_skill_resource", {"skill": {"n": 1}, "path": "x"}, "`skill` must be the name of a listed skill"),
    ("fly", {"to": "moon"}, "there is no tool named 'fly'"),
])
def test_malformed_tool_input_is_an_error_result_and_the_run_goes_on(root, name, data, message):
    agent, model = make_agent(root, [{"content": [{"type": "tool_use", "id": "m1", "name": name, "input": data}],
                                      "stop_reason": "tool_use"}, "next turn"])
    result = agent.run("task")
    answer = only_result(model.requests[1])
    assert answer["tool_use_id"] == "m1" and answer["is_error"] is True
    assert message in answer["content"]
    if message.startswith("no skill named 'zzzzzz'"):
        assert "did you mean" not in answer["content"]
    assert result.ok and result.final_text == "next turn" and len(model.requests) == 2
    assert result.tool_calls[0].is_error and result.tool_calls[0].result_bytes == size(answer["content"])
    assert "activate" not in stages(result)


# --- stop reasons ------------------------------------------------------------------------------------------------


def test_end_turn(root):
    agent, model = make_agent(root, ["The answer."])
    result = agent.run("q")
    assert (result.stop_reason, result.note, result.final_text, result.turns, result.ok) == (
        "end_turn", "", "The answer.", 1, True)
    assert result.messages[-1] == {"role": "assistant", "content": [{"type": "text", "text": "The answer."}]}


def test_max_tokens_plain(root):
    agent, _ = make_agent(root, [{"text": "a long answer that got", "stop_reason": "max_tokens"}])
    result = agent.run("q")
    assert result.stop_reason == "max_tokens" and not result.ok
    assert result.note == "the answer hit max_tokens and may be cut off"
    assert result.final_text == "a long answer that got"


def test_max_tokens_inside_a_tool_call_does_not_run_it(root):
    hook_calls = []
    agent, model = make_agent(root, [
        {"text": "Running:", "tool_use": [call("activate_skill", {"name": "pdf-tools"}),
                                          call("run_skill_script", {"skill": "pdf-tools", "path": "scripts/extract.py"})],
         "stop_reason": "max_tokens"},
        "never asked",
    ], run_script=lambda *a: hook_calls.append(a))
    result = agent.run("q")
    assert result.stop_reason == "max_tokens"
    assert "not run" in result.note and "tool call" in result.note
    assert result.tool_calls == [] and hook_calls == []
    assert stages(result) == ["discover", "model"]
    assert len(model.requests) == 1


def test_max_tokens_with_a_tool_call_before_text_is_plain(root):
    agent, _ = make_agent(root, [{"content": [
        {"type": "tool_use", "id": "t", "name": "activate_skill", "input": {"name": "pdf-tools"}},
        {"type": "text", "text": "and then"}], "stop_reason": "max_tokens"}])
    result = agent.run("q")
    assert result.note == "the answer hit max_tokens and may be cut off"
    assert result.tool_calls == []


def test_pause_turn_sends_the_conversation_back_and_goes_on(root):
    paused = [{"type": "text", "text": "Searching..."}, {"type": "server_tool_use", "id": "s1", "name": "web_search",
                                                          "input": {"query": "pdf"}}]
    agent, model = make_agent(root, [
        {"content": paused, "stop_reason": "pause_turn", "usage": {"input_tokens": 10, "output_tokens": 2}},
        {"text": "Resumed and done.", "usage": {"input_tokens": 12, "output_tokens": 3}},
    ])
    result = agent.run("find it")
    first, second = model.requests
    assert second["messages"] == first["messages"] + [{"role": "assistant", "content": paused}]
    assert second["messages"][-1]["role"] == "assistant"
    assert second["system"] == first["system"] and second["tools"] == first["tools"]
    assert result.ok and result.final_text == "Resumed and done." and result.turns == 2
    assert result.usage["input_tokens"] == 22 and result.usage["output_tokens"] == 5
    assert [e.detail for e in result.trace if e.stage == "model"] == ["pause_turn", "end_turn"]


def test_refusal_runs_none_of_its_tool_calls(root):
    hook_calls = []
    agent, model = make_agent(root, [
        {"text": "I can't help with that.", "tool_use": [
            call("activate_skill", {"name": "pdf-tools"}),
            call("read_skill_resource", {"skill": "pdf-tools", "path": "references/guide.md"}),
            call("run_skill_script", {"skill": "pdf-tools", "path": "scripts/extract.py"})],
         "stop_reason": "refusal"},
        "never asked",
    ], run_script=lambda *a: hook_calls.append(a))
    result = agent.run("q")
    assert result.stop_reason == "refusal" and not result.ok
    assert result.note == "the model refused; no tool call of that turn was run"
    assert result.tool_calls == [] and hook_calls == []
    assert stages(result) == ["discover", "model"]
    assert len(model.requests) == 1 and result.final_text == "I can't help with that."


def test_stop_sequence_names_the_sequence(root):
    agent, _ = make_agent(root, [{"text": "partial", "stop_reason": "stop_sequence", "stop_sequence": "</answer>"}])
    result = agent.run("q")
    assert result.stop_reason == "stop_sequence" and result.ok
    assert result.note == "stopped at the stop sequence '</answer>'"


def test_model_context_window_exceeded(root):
    agent, _ = make_agent(root, [{"text": "", "stop_reason": "model_context_window_exceeded"}])
    result = agent.run("q")
    assert result.stop_reason == "model_context_window_exceeded" and not result.ok
    assert "context window" in result.note


def test_an_unknown_stop_reason(root):
    agent, model = make_agent(root, [{"text": "hm", "tool_use": [call("activate_skill", {"name": "pdf-tools"})],
                                      "stop_reason": "brand_new_reason"}, "never"])
    result = agent.run("q")
    assert result.stop_reason == "brand_new_reason" and not result.ok
    assert result.note == "stopped for an unknown reason 'brand_new_reason'"
    assert result.tool_calls == [] and len(model.requests) == 1


def test_tool_use_without_a_tool_call_is_an_error(root):
    agent, _ = make_agent(root, [{"text": "hm", "stop_reason": "tool_use"}])
    result = agent.run("q")
    assert result.error and "without calling a tool" in result.error and not result.ok


def test_the_turn_limit(root):
    endless = [tools_turn(call("read_skill_resource", {"skill": "pdf-tools", "path": "references/guide.md"}))] * 10
    agent, model = make_agent(root, endless, max_turns=2)
    result = agent.run("q")
    assert result.stop_reason == "max_turns" and not result.ok and result.error is None
    assert result.turns == 2 and len(model.requests) == 2
    assert "2 model calls" in result.note
    assert stages(result) == ["discover", "model", "reference", "model", "reference"]
    # the last calls were answered: the conversation is well formed
    assert result.messages[-1]["role"] == "user" and result.messages[-1]["content"][0]["type"] == "tool_result"


def test_a_failing_model_call_keeps_the_trace(root):
    agent, model = make_agent(root, [
        tools_turn(call("activate_skill", {"name": "pdf-tools"}), usage={"input_tokens": 50, "output_tokens": 5}),
        {"error": {"status": 529, "message": "the model call failed with HTTP 529"}},
    ])
    result = agent.run("q")
    assert result.stop_reason == "error" and result.error == "the model call failed with HTTP 529"
    assert not result.ok
    assert stages(result) == ["discover", "model", "activate"]
    assert result.usage["input_tokens"] == 50 and result.turns == 2


def test_a_context_error_from_the_model_call(root):
    agent, _ = make_agent(root, [{"error": {"status": 400, "message": "prompt is too long", "kind": "context"}}])
    result = agent.run("q")
    assert result.stop_reason == "context_window_exceeded" and result.error == "prompt is too long"


def test_running_out_of_scripted_turns_is_an_error(root):
    agent, _ = make_agent(root, [tools_turn(call("activate_skill", {"name": "pdf-tools"}))])
    result = agent.run("q")
    assert result.stop_reason == "error" and "the script has no turn left for request 2 (1 turns declared)" in result.error


def test_keyboard_interrupt_keeps_the_trace(root):
    def interrupt(request):
        raise KeyboardInterrupt

    agent, model = make_agent(root, [
        tools_turn(call("activate_skill", {"name": "pdf-tools"}), usage={"input_tokens": 9, "output_tokens": 1}),
        interrupt,
        "never",
    ])
    result = agent.run("q")
    assert result.interrupted and result.stop_reason == "interrupted" and not result.ok
    assert "KeyboardInterrupt" in result.note
    assert stages(result) == ["discover", "model", "activate"]
    assert result.usage["input_tokens"] == 9
    assert len(model.requests) == 2


# --- conversation shape over a long run --------------------------------------------------------------------------


def check_pairing(messages: list[dict[str, Any]]) -> int:
    """Every assistant tool_use is answered by exactly one tool_result, in order, in the very next user message."""
    pairs = 0
    for index, message in enumerate(messages):
        if message["role"] == "user":
            results = [b for b in message["content"] if b.get("type") == "tool_result"]
            if results:
                previous = messages[index - 1]
                assert previous["role"] == "assistant"
                used = [b["id"] for b in previous["content"] if b.get("type") == "tool_use"]
                assert [r["tool_use_id"] for r in results] == used
                assert len(results) == len(message["content"])  # tool_results only, nothing else mixed in
        else:
            used = [b["id"] for b in message["content"] if b.get("type") == "tool_use"]
            if used and index + 1 < len(messages):
                answered = [b["tool_use_id"] for b in messages[index + 1]["content"] if b.get("type") == "tool_result"]
                assert answered == used
                pairs += len(used)
    return pairs


def test_every_tool_use_is_paired_with_one_tool_result_over_a_long_run(root):
    read = {"skill": "pdf-tools", "path": "references/guide.md"}
    turns = [
        tools_turn(call("activate_skill", {"name": "pdf-tools"})),
        {"text": "two at once", "tool_use": [call("read_skill_resource", read), call("activate_skill", {"name": "csv-clean"})]},
        tools_turn(call("activate_skill", {"name": "pdf-tools"}), call("fly", {}), call("activate_skill", "bad")),
        tools_turn(call("run_skill_script", {"skill": "pdf-tools", "path": "scripts/extract.py"})),
        {"content": [{"type": "text", "text": "paused"}], "stop_reason": "pause_turn"},
        tools_turn(call("read_skill_resource", {"skill": "pdf-tools", "path": "../x"}), call("read_skill_resource", read)),
        tools_turn(*[call("activate_skill", {"name": "csv-clean"}) for _ in range(5)]),
        "the end",
    ]
    agent, model = make_agent(root, turns)
    result = agent.run("long task")
    assert result.ok and result.turns == len(turns) and len(model.requests) == len(turns)
    for request in model.requests:
        check_pairing(request["messages"])
    assert check_pairing(result.messages) == 1 + 2 + 3 + 1 + 2 + 5
    ids = [b["id"] for m in result.messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert len(ids) == len(set(ids)) == len(result.tool_calls)
    # each request is the previous one plus what happened since
    for before, after in zip(model.requests, model.requests[1:]):
        assert after["messages"][: len(before["messages"])] == before["messages"]


# --- usage -------------------------------------------------------------------------------------------------------


def test_usage_totals_are_the_sums_of_what_the_model_reported(root):
    usages = [
        {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 90, "cache_read_input_tokens": 0},
        {"input_tokens": 20, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 90},
        {"output_tokens": 7},  # fields absent: zero, never estimated
        None,  # no usage at all
    ]
    turns = [tools_turn(call("activate_skill", {"name": "pdf-tools"}), usage=usages[0]),
             tools_turn(call("activate_skill", {"name": "csv-clean"}), usage=usages[1]),
             tools_turn(call("read_skill_resource", {"skill": "pdf-tools", "path": "references/guide.md"}), usage=usages[2]),
             {"text": "done"}]
    agent, _ = make_agent(root, turns)
    result = agent.run("q")
    assert result.usage == {"input_tokens": 120, "output_tokens": 22, "cache_creation_input_tokens": 90,
                            "cache_read_input_tokens": 90}
    rows = [e for e in result.trace if e.stage == "model"]
    assert [(e.input_tokens, e.output_tokens, e.cache_write_tokens, e.cache_read_tokens) for e in rows] == [
        (100, 10, 90, 0), (20, 5, 0, 90), (0, 7, 0, 0), (0, 0, 0, 0)]
    assert [e.object for e in rows] == ["call 1", "call 2", "call 3", "call 4"]
    # disclosures are measured in bytes, model rows only in reported tokens
    assert all(e.bytes is None for e in rows)
    assert all(e.input_tokens is None for e in result.trace if e.stage != "model")


class BareModel:
    """A client whose responses carry no usage at all (some compatible servers)."""

    name = "bare"

    def __init__(self):
        self.requests = []

    def create(self, request, on_text=None):
        self.requests.append(request)
        return {"content": [{"type": "text", "text": "no usage here, a long answer " * 50}], "stop_reason": None}

    async def acreate(self, request):
        return self.create(request)


def test_a_response_without_usage_adds_nothing(root):
    agent = Agent(load(root), BareModel(), "m", show_path=str)
    result = agent.run("a long task " * 100, skill="pdf-tools")
    assert result.usage == dict.fromkeys(result.usage, 0)
    assert result.stop_reason == "end_turn" and result.ok
    row = result.trace[-1]
    assert (row.input_tokens, row.output_tokens, row.cache_read_tokens, row.cache_write_tokens) == (0, 0, 0, 0)
    assert result.client == "bare"


def test_on_text_receives_the_text_of_each_turn(root):
    texts = []
    agent, _ = make_agent(root, [{"text": "thinking", "tool_use": [call("activate_skill", {"name": "pdf-tools"})]}, "final"])
    result = agent.run("q", on_text=texts.append)
    assert texts == ["thinking", "final"] and result.final_text == "final"


def test_trace_rows_to_dict_drop_empty_fields(root):
    agent, _ = make_agent(root, ["x"])
    result = agent.run("q")
    assert result.trace[0].to_dict() == {"stage": "discover", "object": "catalog of 2 skills",
                                         "bytes": size(agent.catalog)}


def test_scripted_model_requests_keep_what_was_sent(root):
    model = ScriptedModel([tools_turn(call("activate_skill", {"name": "pdf-tools"})), "done"])
    agent = Agent(load(root), model, "m", show_path=str)
    agent.run("q")
    assert len(model.requests[0]["messages"]) == 1
    assert len(model.requests[1]["messages"]) == 3


# --- SkillsSession -----------------------------------------------------------------------------------------------


@pytest.fixture
def session(root, tmp_path, monkeypatch) -> SkillsSession:
    monkeypatch.delenv(MODEL_VARIABLE, raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    make_skill(root / "opus-skill", "name: opus-skill\ndescription: Needs a big model. Use when thinking hard.\n"
                                    "model: opus\n")
    make_skill(root / "inherit-skill", "name: inherit-skill\ndescription: Uses whatever. Use when anything.\n"
                                       "model: inherit\n")
    make_skill(root / "custom-skill", "name: custom-skill\ndescription: A pinned model. Use when pinned.\n"
                                      "model: claude-pinned-1\n")
    return SkillsSession(sources=[Source("session", str(root), True)], cwd=str(tmp_path))


def test_model_id_resolution_order(session, monkeypatch):
    client = ScriptedModel([])
    opus_skill = session.skill("opus-skill")
    plain = session.skill("csv-clean")
    assert session.resolve_model_id(client, None, None) == DEFAULT_MODEL
    assert session.resolve_model_id(client, None, plain) == DEFAULT_MODEL
    monkeypatch.setenv(MODEL_VARIABLE, "claude-env-1")
    assert session.resolve_model_id(client, None, plain) == "claude-env-1"
    session.choose_model("claude-chosen-1")  # `%skills model ID`
    assert session.resolve_model_id(client, None, plain) == "claude-chosen-1"
    assert session.resolve_model_id(client, None, session.skill("inherit-skill")) == "claude-chosen-1"
    assert session.resolve_model_id(client, None, opus_skill) == ALIASES["opus"]
    assert session.resolve_model_id(client, None, session.skill("custom-skill")) == "claude-pinned-1"
    assert session.resolve_model_id(client, "haiku", opus_skill) == ALIASES["haiku"]
    assert session.resolve_model_id(client, "claude-explicit-1", opus_skill) == "claude-explicit-1"
    session.choose_model("auto")
    assert session.resolve_model_id(client, None, plain) == "claude-env-1"
    monkeypatch.setenv(MODEL_VARIABLE, "sonnet")
    assert session.resolve_model_id(client, None, None) == ALIASES["sonnet"] == DEFAULT_MODEL


def test_model_aliases(session):
    client = ScriptedModel([])
    for alias in ("sonnet", "opus", "haiku"):
        assert session.resolve_model_id(client, alias, None) == ALIASES[alias]
        assert ALIASES[alias].startswith("claude-")


def test_a_replay_cassettes_model_is_used_unless_one_was_chosen(session):
    class Replay:
        name = "replay"
        model = "claude-recorded-1"
        recorded_model = model  # the protocol's capability (no special case for a client named "replay")

    assert session.resolve_model_id(Replay(), None, None) == "claude-recorded-1"
    session.choose_model("claude-chosen-1")
    assert session.resolve_model_id(Replay(), None, None) == "claude-chosen-1"


def test_session_run_uses_the_resolved_model_id(session, monkeypatch):
    monkeypatch.setenv(MODEL_VARIABLE, "claude-env-1")
    model = Snapshots(["a", "b", "c"])
    session.model_client = model
    first = session.run("think", skill="opus-skill")
    second = session.run("think", skill="opus-skill", model="haiku")
    third = session.run("plain")
    assert [r["model"] for r in model.requests] == [ALIASES["opus"], ALIASES["haiku"], "claude-env-1"]
    assert (first.model, second.model, third.model) == (ALIASES["opus"], ALIASES["haiku"], "claude-env-1")
    assert session.last_run is third and third.ok
    activation = model.requests[0]["messages"][0]["content"][0]["text"]
    assert activation.startswith("[skill opus-skill | session | - | ")


def test_client_without_a_key_explains_how_to_configure_one(session):
    with pytest.raises(NoModelConfigured) as raised:
        session.client()
    message = str(raised.value)
    assert "ANTHROPIC_API_KEY" in message
    assert "scripted" in message and "replay" in message
    assert "%env ANTHROPIC_API_KEY" in message or "export" in message
    with pytest.raises(NoModelConfigured):
        session.run("task", skill="pdf-tools")


def test_run_script_needs_no_key(session):
    result = session.run_script("pdf-tools", "scripts/extract.py", stdin="data", arguments=["a b"])
    assert result.stop_reason == "no_model" and result.ok and result.error is None
    assert result.final_text == "extracted ['a b'] data\n"
    assert result.client == "none"
    assert [e.to_dict() for e in result.trace] == [
        {"stage": "execute", "object": "pdf-tools/scripts/extract.py", "bytes": 4, "detail": "exit code 0"}]
    assert session.last_run is result


def test_run_script_reports_a_failing_script(session):
    result = session.run_script("pdf-tools", "scripts/fail.py")
    assert result.stop_reason == "script_failed" and not result.ok
    assert result.error == "scripts/fail.py exit code 2"
    assert result.note == "bad pdf"


def test_run_script_outside_the_skill_is_an_error(session):
    result = session.run_script("pdf-tools", "../csv-clean/SKILL.md")
    assert result.stop_reason == "denied" and "outside the skill's folder" in result.error
    assert [(e.stage, e.object) for e in result.trace] == [("execute", "pdf-tools/../csv-clean/SKILL.md")]
    assert "outside the skill's folder" in result.trace[0].detail
