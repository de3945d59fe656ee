"""notebooks/06-source-verification.ipynb executed fresh: the printed Table 48.1 has the chapter's results, and the
Example 48.2 trace rows are measurements of what was actually read and sent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.needs_sandbox  # the kernel runs skill scripts
REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "06-source-verification.ipynb"
SKILL = REPO / "sample-skills" / "source-verification"
RUN_MIME = "application/vnd.skills-magic.run+json"
TRACE_MIME = "application/vnd.skills-magic.trace+json"


@pytest.fixture(scope="module")
def executed():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    return notebook


def outputs(notebook, mime):
    return [o["data"][mime] for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []) if mime in o.get("data", {})]


def test_the_printed_table_has_the_results_column_of_table_48_1(executed):
    printed = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])
                      if o.get("name") == "stdout")
    rows = [line for line in printed.splitlines() if line.startswith("750,") or line.startswith("600,")][:5]
    assert len(rows) == 5
    results = [line.split("  ")[-1].strip() for line in rows]
    assert results == ["Accept", "Withhold", "Accept", "Withhold: unit/date span omitted", "Withhold"]
    assert "Metadata alone is insufficient" in rows[4] and "Incomplete scope" in rows[3]


def test_the_example_48_2_trace_is_measured(executed):
    (trace,) = outputs(executed, TRACE_MIME)
    rows = {row["stage"]: row for row in trace["trace"]}
    assert [row["stage"] for row in trace["trace"]] == ["discover", "activate", "model", "reference", "model", "execute", "model"]
    # the reference is sent whole: its bytes are the file's size
    assert rows["reference"]["bytes"] == (SKILL / "references" / "evidence-contract.md").stat().st_size
    # the catalog and the activation: recompute what the agent sent and compare
    from skills_magic.runs.agent import Agent
    from skills_magic.skills.catalog import Catalog, Source
    from skills_magic.runs.disclosure import activation_text
    from skills_magic.models.scripted import ScriptedModel

    skills = Catalog([Source("session", str(SKILL), explicit=True)]).scan().skills
    agent = Agent(skills, ScriptedModel([]), "m", show_path=lambda p: ".scratch/source-verification")
    assert rows["discover"]["bytes"] == len(agent.catalog.encode("utf-8"))
    assert rows["activate"]["bytes"] == len(activation_text(skills[0], ".scratch/source-verification", [], "").encode("utf-8"))
    assert rows["execute"]["detail"] == "exit code 0"
    runs = outputs(executed, RUN_MIME)
    model_run = next(r for r in runs if r["client"] == "scripted")
    stdin = next(c["input"]["stdin"] for c in model_run["tool_calls"] if c["name"] == "run_skill_script")
    assert rows["execute"]["bytes"] == len(stdin.encode("utf-8"))


def test_the_changed_helper_is_refused_by_the_manifest(executed):
    runs = outputs(executed, RUN_MIME)
    last = runs[-1]
    assert last["stop_reason"] == "denied" and "not the reviewed file" in last["error"]
    assert last["error"].count("sha256") == 1 and "now" in last["error"]


def test_the_main_command_writes_the_executed_notebooks(tmp_path):
    quickstart = REPO / "notebooks" / "01-quickstart.ipynb"
    run = subprocess.run([sys.executable, "-m", "skills_magic", "run-notebook", str(quickstart), "--output-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env={k: v for k, v in __import__("os").environ.items()
                                                                         if not k.startswith("ANTHROPIC_")})
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "01-quickstart.ipynb").is_file()
    assert str(tmp_path / "01-quickstart.ipynb") in run.stdout and "executed notebooks" in run.stdout
    executed = nbformat.read(tmp_path / "01-quickstart.ipynb", as_version=4)
    assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code")
