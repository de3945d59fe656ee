"""Bad input is an error result, never a dead run or a dead kernel (issue 12, point 8).

- Odd tool input from the model (NUL, lone surrogates, 10 MB strings, wrong types, missing fields) to every tool of
  the agent loop is an `is_error` result with a one-line reason, and the run goes on; what goes back to the model
  (tool results, its own turns echoed) always encodes as UTF-8, through the real SDK too.
- A YAML alias bomb in a SKILL.md is refused by counting the expanded node graph: the skill is skipped with a
  `yaml-aliases` diagnostic, the others load (checked in a child process under a memory limit and a timeout).
- A database file that is not a usable database is a `DatabaseUnreadable` naming the file, and nothing runs.
- `skills-magic ledger check --db` exits 2 for "could not read", 1 for open predictions, 0 for all judged, and reads
  a database in a folder the process cannot write.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_anthropic import FakeMessagesAPI, Recorded, forget_machine_setup, message, text_block, tool_use_block
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill, write_file

import skills_magic.safety.gate as gate_module
from skills_magic.runs.agent import MAX_INPUT_DEPTH, MAX_INPUT_STRING_CHARS, Agent, TraceEvent
from skills_magic.skills.catalog import Source
from skills_magic.records.db import Database
from skills_magic.errors import DatabaseUnreadable, SkillsMagicError
from skills_magic.records.ledger import Ledger
from skills_magic.models.anthropic import AnthropicModel
from skills_magic.models.scripted import ScriptedModel
from skills_magic.session import SkillsSession
from skills_magic.skills.skill import MAX_ALIAS_NODES, parse_frontmatter

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
HUGE = "x" * 10_000_000  # 10 MB: far past MAX_INPUT_STRING_CHARS
ECHO = "import sys\nprint('ran', sys.argv[1:], repr(sys.stdin.read()))\n"
GUIDE = "# Guide\n\nThe details.\n"
CHILD_MEMORY_BYTES = 1 << 30  # a child that expands an alias bomb dies of MemoryError here, not the machine
CHILD_SECONDS = 60  # ... or is stopped here


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLS_MAGIC_") and k != "ANTHROPIC_API_KEY"}
    env["PYTHONUTF8"] = "1"
    env.update(extra)
    return env


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))


def cli(*args: str, cwd: Path, command_prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*command_prefix, sys.executable, "-m", "skills_magic", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=CHILD_SECONDS, check=False, preexec_fn=_limit_memory)


# --- 1. odd tool input from the model ---------------------------------------------------------------------------


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    """A project folder with one skill (a script and a reference), its own database, lock and no API key."""
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite")
    skill = tmp_path / "skills" / "pdf-tools"
    make_skill(skill, "name: pdf-tools\ndescription: Extracts text from PDF files. Use when a PDF is mentioned.\n")
    write_file(skill, "scripts/echo.py", ECHO)
    write_file(skill, "references/guide.md", GUIDE)
    return tmp_path


def session_in(place: Path) -> SkillsSession:
    session = SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))
    session.add_rule("allow", "pdf-tools:scripts/*")  # the script would run: only its input can stop it
    session.use_plan("demo")
    session.ledger_for_model = True  # the experiment tool is offered too
    return session


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"deeper": value}
    return value


SCRIPT = {"skill": "pdf-tools", "path": "scripts/echo.py"}
ODD_INPUTS = [
    # activate_skill
    ("activate_skill", {"name": "pdf\x00tools"}, "`name` contains a NUL character"),
    ("activate_skill", {"name": "pdf-tools\ud800"}, "`name` contains a lone surrogate"),
    ("activate_skill", {"name": HUGE}, f"`name` has 10,000,000 characters, more than the {MAX_INPUT_STRING_CHARS:,}"),
    ("activate_skill", {"name": None}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": 42}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": ["pdf-tools"]}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": {"inner": {"name": "pdf-tools"}}}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": nested(MAX_INPUT_DEPTH + 8)}, f"nested more than {MAX_INPUT_DEPTH} levels deep"),
    ("activate_skill", {}, "`name` must be the name of a listed skill"),
    ("activate_skill", {"name": "y" * 5000}, "no skill named 'yyyy"),
    # read_skill_resource
    ("read_skill_resource", {"skill": "pdf-tools", "path": "references/\x00guide.md"}, "`path` contains a NUL character"),
    ("read_skill_resource", {"skill": "pdf-tools", "path": "references/\udc80.md"}, "`path` contains a lone surrogate"),
    ("read_skill_resource", {"skill": "pdf-tools", "path": HUGE}, "`path` has 10,000,000 characters"),
    ("read_skill_resource", {"skill": "pdf-tools", "path": "r/" * 100_000}, "a `path` of at most 4096 characters"),
    ("read_skill_resource", {"skill": "pdf-tools", "path": ["references/guide.md"]}, "`path` must be a file path"),
    ("read_skill_resource", {"skill": "pdf-tools", "path": 7}, "`path` must be a file path"),
    ("read_skill_resource", {"skill": "pdf-tools", "path": None}, "`path` must be a file path"),
    ("read_skill_resource", {"skill": "pdf-tools"}, "`path` must be a file path"),
    ("read_skill_resource", {"skill": {"name": "pdf-tools"}, "path": "references/guide.md"}, "`skill` must be the name"),
    # run_skill_script
    ("run_skill_script", {**SCRIPT, "args": ["ok", "a\x00b"]}, "`args[1]` contains a NUL character"),
    ("run_skill_script", {**SCRIPT, "args": ["\ud800"]}, "`args[0]` contains a lone surrogate"),
    ("run_skill_script", {**SCRIPT, "stdin": "caf\udce9"}, "`stdin` contains a lone surrogate"),
    ("run_skill_script", {**SCRIPT, "stdin": "a\x00b"}, "`stdin` contains a NUL character"),
    ("run_skill_script", {**SCRIPT, "stdin": HUGE}, "`stdin` has 10,000,000 characters"),
    ("run_skill_script", {"skill": "pdf-tools", "path": "scripts/\x00echo.py"}, "`path` contains a NUL character"),
    ("run_skill_script", {"skill": "pdf-tools", "path": "scripts/" + "e" * 5000}, "a `path` of at most 4096 characters"),
    ("run_skill_script", {**SCRIPT, "args": [{"a": 1}]}, "`args` to be a list of strings"),
    ("run_skill_script", {**SCRIPT, "args": [None]}, "`args` to be a list of strings"),
    ("run_skill_script", {**SCRIPT, "args": [["nested"]]}, "`args` to be a list of strings"),
    ("run_skill_script", {**SCRIPT, "args": "a b"}, "run_skill_script needs"),
    ("run_skill_script", {**SCRIPT, "stdin": 5}, "run_skill_script needs"),
    ("run_skill_script", {**SCRIPT, "stdin": ["text"]}, "run_skill_script needs"),
    ("run_skill_script", {"skill": "pdf-tools", "path": None}, "run_skill_script needs"),
    ("run_skill_script", {"skill": "pdf-tools"}, "run_skill_script needs"),
    ("run_skill_script", {"skill": 3, "path": "scripts/echo.py"}, "`skill` must be the name"),
    # the experiment ledger
    ("experiment", {}, "`action` must be one of"),
    ("experiment", {"action": ["hypothesis"]}, "`action` must be one of"),
    ("experiment", {"action": {"kind": "hypothesis"}}, "`action` must be one of"),
    ("experiment", {"action": "hypothesis", "text": ["a"]}, "EmptyText: the hypothesis must be text, not list"),
    ("experiment", {"action": "hypothesis", "text": 5}, "EmptyText: the hypothesis must be text, not int"),
    ("experiment", {"action": "observation", "text": {"a": {"b": None}}}, "the observation must be text, not dict"),
    ("experiment", {"action": "hypothesis"}, "the hypothesis must not be empty"),
    ("experiment", {"action": "hypothesis", "text": "a\x00b"}, "`text` contains a NUL character"),
    ("experiment", {"action": "hypothesis", "text": "\ud800"}, "`text` contains a lone surrogate"),
    ("experiment", {"action": "hypothesis", "text": HUGE}, "`text` has 10,000,000 characters"),
    ("experiment", {"action": "verdict", "prediction": ["P1"], "outcome": "confirmed", "evidence": "e"}, "UnknownPrediction"),
    ("experiment", {"action": "skip", "prediction": "P1", "reason": 7}, "the reason for the skip must be text, not int"),
]


@pytest.mark.parametrize("name, data, reason", ODD_INPUTS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(ODD_INPUTS)])
def test_odd_tool_input_is_a_one_line_error_result_and_the_run_goes_on(place, monkeypatch, name, data, reason):
    executed = []
    real_run_script = gate_module.run_script
    monkeypatch.setattr(gate_module, "run_script", lambda *a, **k: executed.append(a) or real_run_script(*a, **k))
    session = session_in(place)
    model = ScriptedModel([{"content": [{"type": "tool_use", "id": "odd1", "name": name, "input": data}],
                            "stop_reason": "tool_use"}, "next turn"])
    session.model_client = model

    result = session.run("Extract the text of report.pdf.")

    assert result.ok and result.final_text == "next turn" and result.error is None
    assert len(model.requests) == 2  # the next response was asked for: the run went on
    answer = model.requests[1]["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "odd1" and answer["is_error"] is True
    assert reason in answer["content"], answer["content"][:300]
    assert "\n" not in answer["content"] and len(answer["content"]) < 400  # one line, never the 10 MB echoed
    assert executed == []  # no script was started on such an input
    assert result.ledger_entries == [] and list(session.ledger.entries()) == []
    # every request of the run can go over the wire as UTF-8 JSON
    for request in model.requests:
        json.dumps(request, ensure_ascii=False).encode("utf-8")


@pytest.mark.needs_sandbox
def test_good_input_next_to_odd_input_still_runs_the_script(place):
    session = session_in(place)
    session.model_client = model = ScriptedModel([
        {"tool_use": [{"name": "run_skill_script", "input": {**SCRIPT, "args": ["a\x00b"]}, "id": "bad"},
                      {"name": "run_skill_script", "input": {**SCRIPT, "args": ["ok", 3], "stdin": "caf\u00e9"}, "id": "good"}]},
        "done"])
    result = session.run("Extract it.")
    bad, good = model.requests[1]["messages"][-1]["content"]
    assert bad["is_error"] is True and "NUL" in bad["content"]
    assert "is_error" not in good and good["content"] == "ran ['ok', '3'] 'caf\u00e9'\n"
    assert result.ok and result.final_text == "done"


def test_a_tool_result_with_a_lone_surrogate_is_sent_with_a_replacement_character(place):
    def hook(skill, path, args, stdin):
        return "out \ud800 put", False, TraceEvent("execute", f"{skill.name}/{path}", detail="exit code 0")

    session = session_in(place)
    model = ScriptedModel([{"tool_use": [{"name": "run_skill_script", "input": SCRIPT}]}, "done"])
    agent = Agent(session.scan().skills, model, "model-x", show_path=str, run_script=hook)
    result = agent.run("task")
    answer = model.requests[1]["messages"][-1]["content"][0]
    assert answer["content"] == "out \ufffd put" and "is_error" not in answer
    json.dumps(model.requests[1], ensure_ascii=False).encode("utf-8")
    assert result.ok and result.final_text == "done"


def test_an_unexpected_failure_inside_a_tool_is_an_error_result_but_an_unusable_database_stops_the_run(place):
    def failing(skill, path, args, stdin):
        raise ValueError("embedded null byte\nin the second line")

    session = session_in(place)
    model = ScriptedModel([{"tool_use": [{"name": "run_skill_script", "input": SCRIPT}]}, "done"])
    result = Agent(session.scan().skills, model, "model-x", show_path=str, run_script=failing).run("task")
    answer = model.requests[1]["messages"][-1]["content"][0]
    assert answer["is_error"] is True
    assert answer["content"] == "run_skill_script failed on this input: ValueError: embedded null byte"
    assert result.ok and result.final_text == "done"

    def unusable(skill, path, args, stdin):
        raise DatabaseUnreadable(str(place / "skills.sqlite"), "file is not a database")

    model = ScriptedModel([{"tool_use": [{"name": "run_skill_script", "input": SCRIPT}]}, "done"])
    with pytest.raises(DatabaseUnreadable):  # the user has to act: the model cannot fix the project's file
        Agent(session.scan().skills, model, "model-x", show_path=str, run_script=unusable).run("task")
    assert len(model.requests) == 1


class EscapingMessagesAPI(FakeMessagesAPI):
    """The fake API serving its replies as ASCII JSON, so a reply can carry a lone surrogate escaped (`\\ud800`), as
    the real API can: JSON allows it, and the SDK decodes it into a Python str that UTF-8 cannot encode."""

    def respond(self, method, path, headers, raw):
        self.requests.append(Recorded(method, path, {k.lower(): v for k, v in headers.items()}, raw))
        return 200, {"content-type": "application/json"}, json.dumps(self.replies.get_nowait()).encode("ascii")


def test_through_the_sdk_a_lone_surrogate_from_the_model_neither_ends_the_run_nor_breaks_the_next_request(place, monkeypatch):
    forget_machine_setup(monkeypatch, place)
    api = EscapingMessagesAPI([
        message([text_block("Let me look \ud800."), tool_use_block("activate_skill", {"name": "pdf\ud800"}, "s1"),
                 tool_use_block("read_skill_resource", {"skill": "pdf-tools", "path": "references/\x00guide.md"}, "s2")]),
        message("All done."),
    ])
    session = session_in(place)
    model = AnthropicModel("claude-test-1", http_client=api.client(), api_key="sk-ant-fake")
    result = Agent(session.scan().skills, model, "claude-test-1", show_path=str).run("Read the PDF.")

    assert result.ok and result.final_text == "All done." and len(api.requests) == 2
    second = api.requests[1].body  # what really went over the wire, parsed back
    echoed, answers = second["messages"][1]["content"], second["messages"][2]["content"]
    assert echoed[0]["text"] == "Let me look \ufffd." and echoed[1]["input"] == {"name": "pdf\ufffd"}
    assert [a["is_error"] for a in answers] == [True, True]
    assert "lone surrogate" in answers[0]["content"] and "NUL character" in answers[1]["content"]
    assert result.tool_calls[0].input == {"name": "pdf\ufffd"}  # what a notebook displays encodes too
    json.dumps([c.input for c in result.tool_calls], ensure_ascii=False).encode("utf-8")


# --- 2. YAML alias bombs ----------------------------------------------------------------------------------------


def laughs(levels: int = 9, key: str = "metadata") -> str:
    """`a: &a ["x", ...]; b: &b [*a, *a, ...]; ...`: nine items a level, 9**levels strings when expanded."""
    names = [chr(ord("a") + i) if i < 26 else f"a{i}" for i in range(levels)]
    lines = [f"{key}:", f"  a: &a [{', '.join(['x'] * 9)}]"]
    lines += [f"  {names[i]}: &{names[i]} [{', '.join([f'*{names[i - 1]}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def bomb_folder(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    make_skill(root / "good-skill", description="The good one. Use when checking that a bomb loses nothing.")
    bomb = make_skill(root / "bomb", f"name: bomb\ndescription: Laughs. Use never.\n{laughs()}", body="Boom.\n")
    assert bomb.stat().st_size < 500  # a few hundred bytes...
    return root


SCAN = """
import json, sys
from skills_magic.skills.catalog import Catalog, Source
from skills_magic.notebook.views import SkillView
from skills_magic.session import SkillsSession
session = SkillsSession(sources=[Source("session", sys.argv[1], True)])
scan = session.scan()
[SkillView(session.skill(s.name), session.show_path).data() for s in scan.skills]  # what %skills show builds
print(json.dumps({"names": [s.name for s in scan.skills],
                  "diagnostics": [[d.code, d.severity, d.message, d.path] for d in scan.diagnostics]}))
"""


def test_an_alias_bomb_under_metadata_is_skipped_with_a_diagnostic_and_the_other_skills_load(tmp_path):
    root = bomb_folder(tmp_path)
    # in a child with 1 GiB of address space and a timeout: should the bound fail, it fails there, not here
    run = subprocess.run([sys.executable, "-c", SCAN, str(root)], capture_output=True, text=True, env=_env(),
                         timeout=CHILD_SECONDS, preexec_fn=_limit_memory, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout)
    assert found["names"] == ["good-skill"]
    [(code, severity, text, path)] = found["diagnostics"]
    assert (code, severity, path) == ("yaml-aliases", "error", str(root / "bomb" / "SKILL.md"))
    assert f"more than {MAX_ALIAS_NODES:,} nodes" in text and "\n" not in text


def test_validate_on_an_alias_bomb_is_a_clear_error_not_a_crash(tmp_path):
    root = bomb_folder(tmp_path)
    result = cli("validate", str(root / "bomb"), cwd=tmp_path)
    assert result.returncode == EXIT_INVALID, result.stderr[-2000:]
    assert "Invalid skill" in result.stdout and "[yaml-aliases]" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("text", [
    laughs(9, "metadata"),
    laughs(30, "top"),  # 9**30 if expanded: the count itself must be cheap (memoised)
    "metadata:\n  x: &x [*x]\n",  # a list that contains itself expands endlessly
    "m: &m {k: *m}\n",
], ids=["nine-levels", "thirty-levels", "self-list", "self-mapping"])
def test_expanding_aliases_past_the_bound_is_refused_quickly(text):
    # in a child too, and never shown: a failing assertion would print the loaded value, expanding it right there
    code = ("import sys; from skills_magic.skills.skill import parse_frontmatter; parsed = parse_frontmatter(sys.argv[1]); "
            "print(parsed.data is None, [d.code for d in parsed.diagnostics])")
    run = subprocess.run([sys.executable, "-c", code, f"name: x\ndescription: d\n{text}"], capture_output=True,
                         text=True, env=_env(), timeout=CHILD_SECONDS, preexec_fn=_limit_memory, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == "True ['yaml-aliases']\n"


def test_a_few_aliases_and_long_frontmatter_without_aliases_still_load(tmp_path):
    assert parse_frontmatter("a: &a hi\nb: *a\nc: &c {k: [1, 2]}\nd: *c\n").data == {
        "a": "hi", "b": "hi", "c": {"k": [1, 2]}, "d": {"k": [1, 2]}}
    long = "paths:\n" + "".join(f"  - src/file{i}.py\n" for i in range(3 * MAX_ALIAS_NODES))
    assert len(parse_frontmatter(long).data["paths"]) == 3 * MAX_ALIAS_NODES  # written nodes are not aliases


# --- 3. a database file that is not a database -------------------------------------------------------------------


def _ledger_file(path: Path) -> None:
    ledger = Ledger(Database(str(path)))
    ledger.hypothesis("demo", "The file has gaps")
    for number in range(200):
        ledger.observation("demo", f"observation {number} " + "o" * 200)
    ledger.database.connect().close()  # the last connection: the WAL is checkpointed into the file and removed


def _random_bytes(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def _text_file(path: Path) -> None:
    path.write_text("these are my notes, not a database\n" * 50, encoding="utf-8")


def _a_folder(path: Path) -> None:
    path.mkdir()


def _corrupt_header(path: Path) -> None:
    _ledger_file(path)
    raw = bytearray(path.read_bytes())
    raw[:16] = b"SQLite format 9\x00"
    path.write_bytes(bytes(raw))


def _truncated(path: Path) -> None:
    _ledger_file(path)
    os.truncate(path, path.stat().st_size // 2)


BAD_FILES = [_random_bytes, _text_file, _a_folder, _corrupt_header, _truncated]
BAD_IDS = ["random-bytes", "text-file", "a-folder", "corrupt-header", "truncated"]


def _snapshot(path: Path):
    return sorted(os.listdir(path)) if path.is_dir() else path.read_bytes()


@pytest.mark.parametrize("spoil", BAD_FILES, ids=BAD_IDS)
def test_an_unusable_database_is_a_named_error_with_its_path_and_nothing_runs(place, monkeypatch, spoil):
    monkeypatch.delenv("SKILLS_MAGIC_DB")  # the default place: .skills/skills.sqlite of the project
    database = place / ".skills" / "skills.sqlite"
    database.parent.mkdir()
    spoil(database)
    before = _snapshot(database)
    executed = []
    monkeypatch.setattr(gate_module, "run_script", lambda *a, **k: executed.append(a))
    session = SkillsSession(sources=[Source("session", str(place / "skills"), explicit=True)], cwd=str(place))

    attempts = {
        "ledger write": lambda: session.ledger.hypothesis("demo", "h"),
        "ledger read": lambda: session.ledger.plans(),
        "audit read": lambda: session.audit(),
        "a script the user runs (its audit row comes first)": lambda: session.run_script("pdf-tools", "scripts/echo.py"),
        "a model run that asks for a script": lambda: _model_run(session),
    }
    for what, attempt in attempts.items():
        with pytest.raises(DatabaseUnreadable) as raised:
            attempt()
        error = raised.value
        assert isinstance(error, SkillsMagicError) and error.path == str(database), what
        text = str(error)
        assert "\n" not in text and str(database) in text and "move it aside" in text, (what, text)
    assert executed == []  # no script started
    assert _snapshot(database) == before  # and the file is left as it was, for the user to look at


def _model_run(session: SkillsSession) -> None:
    session.add_rule("allow", "pdf-tools:scripts/*")
    session.model_client = ScriptedModel([{"tool_use": [{"name": "run_skill_script", "input": SCRIPT}]}, "done"])
    session.run("Extract it.")


def test_ledger_magic_on_an_unusable_database_is_a_one_line_usage_error(ip, tmp_path, monkeypatch):
    from IPython.core.error import UsageError

    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "bundled")
    monkeypatch.setenv("SKILLS_MAGIC_DB", "ledger.sqlite")  # relative to the session's folder
    monkeypatch.chdir(tmp_path)
    _random_bytes(tmp_path / "ledger.sqlite")
    with registered_magics(ip):
        for line in ("use demo", "hypothesis The file has gaps", "list --plan demo"):
            with pytest.raises(UsageError) as raised:
                ip.run_line_magic("ledger", line)
            text = str(raised.value)
            assert "\n" not in text and str(tmp_path / "ledger.sqlite") in text and "file is not a database" in text


def test_a_folder_in_the_databases_place_says_so(tmp_path):
    (tmp_path / "skills.sqlite").mkdir()
    with pytest.raises(DatabaseUnreadable, match="it is a folder, not a file"):
        Database(str(tmp_path / "skills.sqlite")).connect()


# --- 4. `skills-magic ledger check --db` exit codes ---------------------------------------------------------------


@pytest.mark.parametrize("spoil", BAD_FILES, ids=BAD_IDS)
@pytest.mark.parametrize("command", ["check", "export"])
def test_ledger_cli_on_an_unusable_database_exits_2_with_one_line(tmp_path, spoil, command):
    database = tmp_path / "ledger.sqlite"
    spoil(database)
    result = cli("ledger", command, "--db", str(database), cwd=tmp_path)
    assert result.returncode == EXIT_USAGE, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("skills-magic: cannot use the database") and str(database) in line


def test_ledger_check_on_a_missing_database_or_notebook_exits_2_with_one_line(tmp_path):
    (tmp_path / "broken.ipynb").write_text('{"cells": [', encoding="utf-8")
    (tmp_path / "list.ipynb").write_text("[1, 2]", encoding="utf-8")
    for args in (["--db", str(tmp_path / "absent.sqlite")], [str(tmp_path / "broken.ipynb")], [str(tmp_path / "list.ipynb")]):
        result = cli("ledger", "check", *args, cwd=tmp_path)
        assert result.returncode == EXIT_USAGE, (args, result.stderr)
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert not (tmp_path / "absent.sqlite").exists()


def test_ledger_check_help_documents_its_exit_codes(tmp_path):
    result = cli("ledger", "check", "--help", cwd=tmp_path)
    text = " ".join(result.stdout.split())
    assert result.returncode == EXIT_OK
    assert "0 every prediction is judged" in text and "1 a prediction is open" in text
    assert "2 the database or notebook could not be read" in text


def _read_only_runner(folder: Path) -> tuple[str, ...]:
    """A command prefix under which `folder` cannot be written by the process, really (root ignores chmod): a
    read-only bind mount in a user and mount namespace; as another user, chmod is enough. Checked with a probe."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        prefix: tuple[str, ...] = ()
    else:
        if shutil.which("unshare") is None:
            pytest.skip("needs unshare(1) to make a folder read-only for root")
        script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
        prefix = ("unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, str(folder))
    probe = subprocess.run([*prefix, "sh", "-c", f'touch "{folder}/probe"'], capture_output=True, text=True, check=False)
    if "Operation not permitted" in probe.stderr and "unshare" in probe.stderr:
        pytest.skip(f"user namespaces are not available here: {probe.stderr.strip()}")
    assert probe.returncode != 0 and not (folder / "probe").exists(), "the folder must really be read-only"
    return prefix


@pytest.fixture
def read_only_ledgers(tmp_path) -> tuple[Path, tuple[str, ...]]:
    folder = tmp_path / "ro"
    folder.mkdir()
    open_one = Ledger(Database(str(folder / "open.sqlite")))
    open_one.hypothesis("demo", "The file has gaps")
    open_one.prediction("demo", "temp_C has a missing reading", "python3 profile.py weather.csv", "H1")
    judged = Ledger(Database(str(folder / "judged.sqlite")))
    judged.hypothesis("done", "Everything is judged")
    judged.prediction("done", "judged", "check", "H1")
    judged.verdict("done", "P1", "confirmed", "seen")
    for ledger in (open_one, judged):
        assert ledger.database.connect().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        ledger.database.connect().close()  # like a kernel that has ended
    _random_bytes(folder / "junk.sqlite")
    yield folder, _read_only_runner(folder)
    folder.chmod(0o755)


def test_ledger_check_reads_a_wal_database_in_a_read_only_folder(read_only_ledgers, tmp_path):
    folder, prefix = read_only_ledgers
    before = sorted(os.listdir(folder))

    opened = cli("ledger", "check", "--db", str(folder / "open.sqlite"), cwd=tmp_path, command_prefix=prefix)
    assert opened.returncode == EXIT_INVALID, opened.stderr
    assert opened.stdout.splitlines()[0] == "sci.demo has 1 open prediction:"
    assert "temp_C has a missing reading" in opened.stdout
    assert opened.stderr == ""

    judged = cli("ledger", "check", "--db", str(folder / "judged.sqlite"), cwd=tmp_path, command_prefix=prefix)
    assert judged.returncode == EXIT_OK, judged.stderr
    assert judged.stdout == "sci.done: 0 open predictions\n" and judged.stderr == ""

    exported = cli("ledger", "export", "--db", str(folder / "judged.sqlite"), cwd=tmp_path, command_prefix=prefix)
    assert exported.returncode == EXIT_OK and len(exported.stdout.splitlines()) == 3, exported.stderr
    assert sorted(os.listdir(folder)) == before  # nothing was written beside the files


def test_ledger_check_on_an_unusable_database_in_a_read_only_folder_exits_2(read_only_ledgers, tmp_path):
    folder, prefix = read_only_ledgers
    result = cli("ledger", "check", "--db", str(folder / "junk.sqlite"), cwd=tmp_path, command_prefix=prefix)
    assert result.returncode == EXIT_USAGE, result.stderr
    expected = (f"skills-magic: cannot use the database {folder / 'junk.sqlite'}: file is not a database; "
                "check that --db (or SKILLS_MAGIC_DB) names the project's skills.sqlite")
    assert result.stderr.splitlines() == [expected]
