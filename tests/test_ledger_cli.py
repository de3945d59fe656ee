"""`skills-magic ledger check|export` as a real subprocess: the gate on a database, the export formats, and the gate
on an executed notebook rebuilt from its outputs alone (no database at check time).

Exit codes: 0 nothing open, 1 a prediction open (or a notebook with no ledger output), 2 usage error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from skills_magic.records.db import Database
from skills_magic.records.ledger import Ledger

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_04 = REPO / "notebooks" / "04-experiment-ledger.ipynb"
LEDGER_MIME = "application/vnd.skills-magic.ledger+json"
RUN_MIME = "application/vnd.skills-magic.run+json"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLS_MAGIC_") and k != "ANTHROPIC_API_KEY"}
    env["PYTHONUTF8"] = "1"
    env.update(extra)
    return env


def cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skills_magic", "ledger", *args], cwd=cwd, env=_env(**env),
                          capture_output=True, text=True, timeout=600, check=False)


def make_ledger(path: Path) -> Ledger:
    return Ledger(Database(str(path)), "cli-test")


@pytest.fixture
def db(tmp_path) -> Path:
    """sci.demo with two open predictions, sci.done with none."""
    path = tmp_path / "ledger.sqlite"
    ledger = make_ledger(path)
    ledger.hypothesis("demo", "The file has gaps")
    ledger.prediction("demo", "temp_C has a missing reading", 'python3 profile.py "weather.csv"', "H1")
    ledger.prediction("demo", "rain isn't negative", "min(rain_mm) < 0", "H1")
    ledger.hypothesis("done", "Everything is judged")
    ledger.prediction("done", "judged", "check", "H1")
    ledger.verdict("done", "P1", "inconclusive")
    return path


# --- check on a database ------------------------------------------------------------------------------------------


def test_check_fails_while_predictions_are_open_and_prints_them(db, tmp_path):
    result = cli("check", "--db", str(db), cwd=tmp_path)
    assert result.returncode == EXIT_INVALID, result.stderr
    lines = result.stdout.splitlines()
    assert "sci.demo has 2 open predictions:" in lines
    assert '  P1: temp_C has a missing reading (falsified by: python3 profile.py "weather.csv")' in lines
    assert "  P2: rain isn't negative (falsified by: min(rain_mm) < 0)" in lines
    assert "sci.done: 0 open predictions" in lines


def test_check_passes_once_every_prediction_is_closed(db, tmp_path):
    ledger = make_ledger(db)
    ledger.verdict("demo", "P1", "confirmed", "1 of 4 missing")
    assert cli("check", "--db", str(db), cwd=tmp_path).returncode == EXIT_INVALID
    ledger.skip("demo", "P2", "no rain this month")
    result = cli("check", "--db", str(db), cwd=tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["sci.demo: 0 open predictions", "sci.done: 0 open predictions"]


@pytest.mark.parametrize("plan, code", [("done", EXIT_OK), ("sci.done", EXIT_OK), ("demo", EXIT_INVALID),
                                        ("sci.demo", EXIT_INVALID)])
def test_check_plan_looks_at_one_plan(db, tmp_path, plan, code):
    result = cli("check", "--db", str(db), "--plan", plan, cwd=tmp_path)
    assert result.returncode == code
    assert ("sci.done" in result.stdout) == plan.endswith("done")
    assert ("sci.demo" in result.stdout) == plan.endswith("demo")


@pytest.mark.parametrize("plan, message", [("absent", "has no plan sci.absent"), ("Bad Plan", "BadPlan"), ("a/b", "BadPlan")])
def test_check_of_an_unknown_or_malformed_plan_is_a_usage_error(db, tmp_path, plan, message):
    result = cli("check", "--db", str(db), "--plan", plan, cwd=tmp_path)
    assert result.returncode == EXIT_USAGE and message in result.stderr


def test_a_missing_database_is_exit_2_with_a_message_and_is_not_created(tmp_path):
    missing = tmp_path / "nowhere" / "ledger.sqlite"
    for args in (["check", "--db", str(missing)], ["export", "--db", str(missing)], ["check"]):
        result = cli(*args, cwd=tmp_path)
        assert result.returncode == EXIT_USAGE, args
        assert "no ledger at" in result.stderr
    assert not missing.exists() and not (tmp_path / ".skills").exists()


def test_check_finds_the_database_where_the_kernel_does(db, tmp_path):
    default = tmp_path / ".skills" / "skills.sqlite"
    ledger = make_ledger(default)
    ledger.hypothesis("demo", "h")
    ledger.prediction("demo", "p1", "c", "H1")
    ledger.prediction("demo", "p2", "c", "H1")
    assert cli("check", cwd=tmp_path).returncode == EXIT_INVALID  # .skills/skills.sqlite
    assert cli("check", cwd=tmp_path, SKILLS_MAGIC_DB="ledger.sqlite").returncode == EXIT_INVALID
    make_ledger(default).skip("demo", "P1", "x")
    make_ledger(default).skip("demo", "P2", "x")
    assert cli("check", cwd=tmp_path).returncode == EXIT_OK
    assert cli("check", cwd=tmp_path, SKILLS_MAGIC_DB="ledger.sqlite").returncode == EXIT_INVALID


def test_a_database_without_entries_passes(tmp_path):
    path = tmp_path / "empty.sqlite"
    Database(str(path)).connect()
    result = cli("check", "--db", str(path), cwd=tmp_path)
    assert result.returncode == EXIT_OK and "no ledger entries" in result.stdout


# --- export ---------------------------------------------------------------------------------------------------------


def test_export_jsonl_writes_every_entry_as_one_json_object_per_line(db, tmp_path):
    result = cli("export", "--db", str(db), cwd=tmp_path)
    assert result.returncode == EXIT_OK
    lines = result.stdout.splitlines()
    entries = [json.loads(line) for line in lines]
    assert all(isinstance(e, dict) for e in entries) and len(entries) == 6
    expected = [e.to_dict() for e in make_ledger(db).entries()]
    assert [{k: v for k, v in e.items() if k not in ("at", "session", "session_id")} for e in entries] == expected
    assert all(e["at"].endswith("Z") for e in entries)
    assert all(e["session"] == 1 and e["session_id"] == "cli-test" for e in entries)  # which kernel wrote it
    assert entries[1] == {**expected[1], "at": entries[1]["at"], "session": 1, "session_id": "cli-test"}
    assert entries[1]["falsified_by"] == 'python3 profile.py "weather.csv"'
    assert cli("export", "--db", str(db), "--format", "jsonl", cwd=tmp_path).stdout == result.stdout


def test_export_plan_keeps_one_plan(db, tmp_path):
    result = cli("export", "--db", str(db), "--plan", "done", cwd=tmp_path)
    plans = [json.loads(line)["plan"] for line in result.stdout.splitlines()]
    assert plans == ["sci.done"] * 3


def test_export_keeps_unicode_and_newlines_in_one_line_each(tmp_path):
    path = tmp_path / "ledger.sqlite"
    make_ledger(path).observation("demo", "température: 3 °C\nsecond line \"quoted\"")
    (line,) = cli("export", "--db", str(path), cwd=tmp_path).stdout.splitlines()
    assert json.loads(line)["text"] == "température: 3 °C\nsecond line \"quoted\""


def test_export_md_writes_a_section_per_plan_and_a_line_per_entry(db, tmp_path):
    result = cli("export", "--db", str(db), "--format", "md", cwd=tmp_path)
    assert result.returncode == EXIT_OK
    lines = result.stdout.splitlines()
    assert lines[0] == "## sci.demo"
    assert "## sci.done" in lines
    bullets = [line for line in lines if line.startswith("- ")]
    assert len(bullets) == 6
    assert "- **H1** (hypothesis) The file has gaps" in lines
    assert ('- **P1** (prediction) temp_C has a missing reading  (falsified by: python3 profile.py "weather.csv"; '
            "under H1)") in lines
    assert "- **V1** (verdict) P1 inconclusive" in lines


def test_export_md_gives_each_plan_one_section_even_when_plans_interleave(tmp_path):
    path = tmp_path / "ledger.sqlite"
    ledger = make_ledger(path)
    ledger.hypothesis("a", "ha")
    ledger.hypothesis("b", "hb")
    ledger.prediction("a", "pa", "ca", "H1")
    lines = cli("export", "--db", str(path), "--format", "md", cwd=tmp_path).stdout.splitlines()
    assert lines.count("## sci.a") == 1 and lines.count("## sci.b") == 1


# --- check NOTEBOOK: the ledger rebuilt from outputs alone ---------------------------------------------------------


TURNS = """turns:
  - tool_use:
      - name: experiment
        input: {action: verdict, prediction: P2, outcome: inconclusive}
  - text: P2 judged.
"""

SETUP = ("%env SKILLS_MAGIC_SOURCES=bundled\n%env SKILLS_MAGIC_DB=nb.sqlite\n%env SKILLS_MAGIC_LOCK=skills.lock\n"
         "%load_ext skills_magic")
OPENING = [
    SETUP,
    "%ledger use nbplan",
    "%ledger hypothesis The notebook's data has gaps",
    '%ledger prediction temp_C has a gap --falsified-by "profile says missing: 0" --hypothesis H1',
    '%%ledger prediction --hypothesis H1 --falsified-by "the model\'s check"\nThe model will judge this one',
    '%ledger verdict P1 confirmed --evidence "1 of 4 missing"',
]
CLOSING = [  # P2 is closed only by the model, in a run's output
    "%skills model scripted turns.yaml",
    "%ledger model on",
    "%%skill run\nJudge P2.",
    "%ledger gate",
]


def execute(tmp_path: Path, cells: list[str], name: str) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(notebook, timeout=300, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    path = tmp_path / name
    nbformat.write(notebook, path)
    return path


def remove_database(folder: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (folder / f"nb.sqlite{suffix}").unlink(missing_ok=True)
    assert not list(folder.glob("*.sqlite*")) and not (folder / ".skills").exists()


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict[str, Path]:
    """Two notebooks executed by nbclient in a real kernel, their database deleted afterwards."""
    found = {}
    for name, cells in (("open", OPENING), ("closed", OPENING + CLOSING)):
        folder = tmp_path_factory.mktemp(name)
        (folder / "turns.yaml").write_text(TURNS, encoding="utf-8")
        found[name] = execute(folder, cells, f"{name}.ipynb")
        assert (folder / "nb.sqlite").is_file()  # the kernel used the database the notebook chose
        remove_database(folder)
    return found


def test_the_executed_notebooks_carry_the_entries_in_their_outputs(executed):
    notebook = nbformat.read(executed["closed"], as_version=4)
    bundles = [o["data"] for c in notebook.cells for o in c.get("outputs", []) if "data" in o]
    ledger_entries = [e for b in bundles if LEDGER_MIME in b for e in b[LEDGER_MIME].get("entries", [])]
    assert [e["label"] for e in ledger_entries] == ["H1", "P1", "P2", "V1"]
    (run,) = [b[RUN_MIME] for b in bundles if RUN_MIME in b]
    assert run["ledger_entries"] == [{"plan": "sci.nbplan", "kind": "verdict", "label": "V2", "text": "inconclusive",
                                      "prediction": "P2", "outcome": "inconclusive"}]
    assert bundles[-1]["text/plain"] == "sci.nbplan: 5 entries, 0 open predictions"  # the gate cell passed


def test_check_on_a_notebook_that_leaves_a_prediction_open_exits_1(executed):
    folder = executed["open"].parent
    result = cli("check", str(executed["open"]), cwd=folder)
    assert result.returncode == EXIT_INVALID, result.stderr
    assert result.stdout.splitlines()[:2] == ["sci.nbplan has 1 open prediction:",
                                              "  P2: The model will judge this one (falsified by: the model's check)"]
    assert not (folder / "nb.sqlite").exists() and not (folder / ".skills").exists()  # nothing was opened or created


def test_check_on_a_notebook_that_closes_everything_exits_0(executed):
    folder = executed["closed"].parent
    result = cli("check", str(executed["closed"]), cwd=folder)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["sci.nbplan: 0 open predictions"]
    assert cli("check", str(executed["closed"]), "--plan", "nbplan", cwd=folder).returncode == EXIT_OK
    assert cli("check", str(executed["closed"]), "--plan", "other", cwd=folder).returncode == EXIT_USAGE
    assert not (folder / "nb.sqlite").exists()


def test_check_on_a_notebook_without_ledger_outputs_fails(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("%ledger use demo")]  # never executed: no outputs
    path = tmp_path / "unexecuted.ipynb"
    nbformat.write(notebook, path)
    result = cli("check", str(path), cwd=tmp_path)
    assert result.returncode == EXIT_INVALID and "no ledger outputs" in result.stderr


def test_check_on_a_missing_notebook_is_a_usage_error(tmp_path):
    result = cli("check", str(tmp_path / "absent.ipynb"), cwd=tmp_path)
    assert result.returncode == EXIT_USAGE and "absent.ipynb" in result.stderr


def test_check_rebuilds_from_hand_written_outputs(tmp_path):
    """The same rules on outputs written by hand: a verdict closes a prediction; a run's entries count too."""

    def output(mime: str, data: dict) -> dict:
        return nbformat.v4.new_output("display_data", data={mime: data, "text/plain": "x"})

    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("")
    cell.outputs = [
        output(LEDGER_MIME, {"entries": [{"plan": "sci.x", "kind": "hypothesis", "label": "H1", "text": "h"}]}),
        output(LEDGER_MIME, {"plan": "sci.x", "entries": [
            {"kind": "prediction", "label": "P1", "text": "one", "falsified_by": "c1", "hypothesis": "H1"},
            {"kind": "prediction", "label": "P2", "text": "two", "falsified_by": "c2", "hypothesis": "H1"}]}),
        output(RUN_MIME, {"ledger_entries": [{"plan": "sci.x", "kind": "skip", "label": "S1", "text": "r", "prediction": "P1"}]}),
    ]
    notebook.cells = [cell]
    path = tmp_path / "hand.ipynb"
    nbformat.write(notebook, path)
    result = cli("check", str(path), cwd=tmp_path)
    assert result.returncode == EXIT_INVALID
    assert "  P2: two (falsified by: c2)" in result.stdout and "P1" not in result.stdout


@pytest.mark.needs_sandbox  # its %ledger test cell runs a check in the sandbox
def test_the_repositorys_ledger_notebook_executes_and_passes_the_check(tmp_path):
    if not NOTEBOOK_04.is_file():
        pytest.skip(f"{NOTEBOOK_04.relative_to(REPO)} does not exist yet (it is being written)")
    notebook = nbformat.read(NOTEBOOK_04, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None  # fresh: nothing from the committed outputs survives
    NotebookClient(notebook, timeout=600, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(NOTEBOOK_04.parent)}}).execute()
    executed = tmp_path / NOTEBOOK_04.name
    nbformat.write(notebook, executed)
    result = cli("check", str(executed), cwd=tmp_path)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "0 open predictions" in result.stdout
