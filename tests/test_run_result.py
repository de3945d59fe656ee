"""Results as objects: `%%skill run` returns the RunResult itself (`_`, `--as r` and `session.last_run` are one
object), displayed exactly as its RunView through the formatter `%load_ext` registers; `session.run(...)` returns
the same kind of object; docs/runs.md documents every attribute. Last, a real kernel through nbclient: two cells of
one conversation, a registered Python function, `r = _`."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import nbformat
import pytest
from IPython.core.error import UsageError
from nbclient import NotebookClient

from fake_anthropic import forget_machine_setup
from notebook_setup import notebook_folder, registered_magics
from skills_magic.notebook.magics import register, unregister
from skills_magic.notebook.views.runs import RunView
from skills_magic.runs.result import RunResult

REPO = Path(__file__).resolve().parent.parent
RUN_MIME = "application/vnd.skills-magic.run+json"
# the first cell activates a skill and answers; the second (--continue) calls the notebook's `mean`
TURNS = """turns:
  - {tool_use: [{name: activate_skill, input: {name: csv-profile}}]}
  - "**Profiled.**"
  - {tool_use: [{name: mean, input: {values: [1, 2, 3]}}]}
  - The mean is 2.
"""


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    forget_machine_setup(monkeypatch, tmp_path)
    (tmp_path / "turns.yaml").write_text(TURNS, encoding="utf-8")
    with registered_magics(ip) as instance:
        ip.run_line_magic("skills", "model scripted turns.yaml")
        yield instance
    for name in ("r", "_", "mean"):
        ip.user_ns.pop(name, None)


def test_the_cell_returns_the_run_result_itself(ip, magics):
    result = ip.run_cell_magic("skill", "run", "Profile data.csv\n")

    assert isinstance(result, RunResult) and result is magics.session.last_run
    assert result.final_text == "**Profiled.**" and result.activated == ["csv-profile"] and result.seconds > 0
    # what code written when a cell returned a RunView calls still answers
    assert isinstance(result, RunView) and result.result is result and result.data()["final_text"] == "**Profiled.**"


def test_underscore_and_as_name_the_same_object(ip, magics):
    ip.run_cell("%%skill run --as r\nProfile data.csv\n", store_history=True)

    assert ip.user_ns["r"] is ip.user_ns["_"] is magics.session.last_run
    assert ip.user_ns["r"].final_text == "**Profiled.**"


@pytest.mark.parametrize("line, message", [
    ("run --as 2x", "--as '2x': the name must be a Python identifier"),
    ("run --as class", "--as 'class': the name must be a Python identifier"),
    ("run --as r --background", "--as names the run's result, which a --background run has only when it ends"),
])
def test_a_bad_as_is_refused_before_the_run(ip, magics, line, message):
    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("skill", line, "Profile data.csv\n")
    assert message in str(caught.value) and magics.session.model_client.requests == []


def test_the_formatter_shows_a_python_api_result_exactly_as_its_run_view(ip, magics):
    result = magics.session.run("Profile data.csv")
    assert type(result) is RunResult  # the Python API's object, never changed into anything else

    register(ip)  # `%load_ext skills_magic`
    try:
        shown, metadata = ip.display_formatter.format(result)
        expected, expected_metadata = RunView(result, result.seconds)._repr_mimebundle_()
        assert shown == expected and metadata == expected_metadata
        assert metadata[RUN_MIME]["seconds"] == round(result.seconds, 6) and "seconds" not in shown[RUN_MIME]
    finally:
        unregister(ip)  # `%unload_ext`: the formatter goes too
    plain, _ = ip.display_formatter.format(result)
    assert RUN_MIME not in plain and plain["text/plain"].startswith("RunResult(")


def test_a_script_run_without_a_model_carries_its_seconds_too(ip, magics):
    result = ip.run_cell_magic("skill", "run --no-model --script scripts/profile_csv.py csv-profile -", "a,b\n1,x\n")
    assert result.stop_reason == "no_model" and result.seconds is not None
    assert result._repr_mimebundle_()[1][RUN_MIME]["seconds"] == round(result.seconds, 6)


def test_docs_runs_md_documents_every_run_result_attribute():
    text = (REPO / "docs" / "runs.md").read_text(encoding="utf-8")
    section = text[text.index("## RunResult"):]
    documented = set(re.findall(r"^\| `(\w+)`", section, re.M))
    attributes = {f.name for f in dataclasses.fields(RunResult)} | {"ok"}
    assert attributes - documented == set()


# --- a real kernel ----------------------------------------------------------------------------------------------

CELLS = [
    "%load_ext skills_magic\n%skills model scripted turns.yaml",
    'def mean(values: list[float]) -> float:\n    """The mean of some numbers."""\n    return sum(values) / len(values)\n\n'
    "%skills tool add mean",
    "%%skill run\nProfile data.csv",
    "r = _\nprint(type(r).__mro__[1].__name__, r.final_text, r.activated)",
    "%%skill run --continue --as r2\nAnd the mean of 1, 2 and 3?",
    "print(r2 is _, r2 is not r, r2.final_text, [c.name for c in r2.tool_calls], r2.trace[0].stage, len(r2.messages))",
    "%skills history",
]


def _outputs(cell, kind: str) -> list[dict]:
    return [o for o in cell.get("outputs", []) if o["output_type"] == kind]


def test_a_conversation_a_python_tool_and_the_result_in_code_in_a_real_kernel(tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db=".skills/test.sqlite", sources="bundled")
    forget_machine_setup(monkeypatch, tmp_path)
    (tmp_path / "turns.yaml").write_text(TURNS, encoding="utf-8")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])

    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    cells = notebook.cells
    first = _outputs(cells[2], "execute_result")[0]
    assert first["data"][RUN_MIME]["final_text"] == "**Profiled.**" and "<strong>Profiled.</strong>" in first["data"]["text/html"]
    assert "seconds" in first["metadata"][RUN_MIME]  # the view's metadata, kept by the formatter
    assert _outputs(cells[3], "stream")[0]["text"] == "RunResult **Profiled.** ['csv-profile']\n"
    second = _outputs(cells[4], "execute_result")[0]["data"][RUN_MIME]
    assert [(c["name"], c["is_error"]) for c in second["tool_calls"]] == [("mean", False)]
    assert [row["stage"] for row in second["trace"]] == ["continue", "model", "call", "model"]
    assert _outputs(cells[5], "stream")[0]["text"] == "True True The mean is 2. ['mean'] continue 8\n"
    history = _outputs(cells[6], "execute_result")[0]["data"]["application/vnd.skills-magic.conversation+json"]
    assert [(t["turn"], t["tool_calls"]) for t in history["turns"]] == [(1, ["activate_skill"]), (2, ["mean"])]
    everything = json.dumps([o for c in cells for o in c.get("outputs", [])])
    assert "Traceback" not in everything and "Error" not in everything
