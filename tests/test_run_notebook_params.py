"""`skills-magic run-notebook` as a real subprocess with real kernels: `-p NAME VALUE` injected after the cell tagged
`parameters` (papermill's convention), and a failing cell reported as one line with the partial notebook written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from skills_magic.runs.notebooks import BadParameter, parameter_value, parameters_source

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
DEFAULTS = "station = 'north'\nthreshold = 1\nlimits = None"
REPORT = "print(json.dumps({'station': station, 'threshold': threshold, 'limits': limits}))"


def run_notebook(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKILLS_MAGIC_", "ANTHROPIC_"))}
    return subprocess.run([sys.executable, "-m", "skills_magic", "run-notebook", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def notebook(path: Path, *cells, parameters: bool = True) -> Path:
    """A notebook of code cells (a (source, tags) pair tags its cell); the first sets the defaults."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# A parameterised notebook"), nbformat.v4.new_code_cell("import json"),
                nbformat.v4.new_code_cell(DEFAULTS, metadata={"tags": ["parameters"]} if parameters else {})]
    for cell in cells:
        source, tags = cell if isinstance(cell, tuple) else (cell, [])
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": tags} if tags else {}))
    nbformat.write(nb, path)
    return path


def reported(path: Path) -> dict:
    """What the REPORT cell printed in the executed notebook."""
    executed = nbformat.read(path, as_version=4)
    (line,) = [o["text"] for c in executed.cells for o in c.get("outputs", []) if o.get("name") == "stdout"
               and o["text"].startswith("{")]
    return json.loads(line)


# --- -p NAME VALUE ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("3", 3), ("0.5", 0.5), ("-2", -2), ("[1, 2]", [1, 2]), ("None", None), ("True", True), ("'quoted'", "quoted"),
    ('{"a": 1}', {"a": 1}), ("north", "north"), ("2026-01-01", "2026-01-01"), ("a b", "a b"), ("", ""),
    ("print('x')", "print('x')"), ("__import__('os')", "__import__('os')"),
])
def test_a_value_is_a_python_literal_when_it_is_one_else_a_string(text, value):
    assert parameter_value(text) == value and type(parameter_value(text)) is type(value)


def test_the_injected_cell_is_code_that_gives_back_each_value():
    source = parameters_source([("n", "3"), ("name", "it's"), ("big", "1e999"), ("n", "4")])
    assert source == "# Parameters\nn = 4\nname = \"it's\"\nbig = 1e999\n"  # the last n wins; inf as typed
    scope: dict = {}
    exec(source, scope)  # noqa: S102 (the test's own literal code)
    assert scope["n"] == 4 and scope["name"] == "it's" and scope["big"] == float("inf")


@pytest.mark.parametrize("name", ["1x", "a-b", "class", "", "x y"])
def test_a_name_that_is_not_a_python_name_is_refused(name):
    with pytest.raises(BadParameter, match="NAME must be a Python name"):
        parameters_source([(name, "1")])


def test_parameters_go_in_a_new_cell_after_the_parameters_cell_and_win(tmp_path):
    path = notebook(tmp_path / "report.ipynb", REPORT)
    result = run_notebook("report.ipynb", "-p", "threshold", "2.5", "-p", "station", "south", "-p", "limits", "[0, 10]",
                          "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    executed = tmp_path / "out" / "report.ipynb"
    assert reported(executed) == {"station": "south", "threshold": 2.5, "limits": [0, 10]}
    cells = nbformat.read(executed, as_version=4).cells
    assert [c.metadata.get("tags", []) for c in cells][2:4] == [["parameters"], ["injected-parameters"]]
    assert cells[3].source == "# Parameters\nthreshold = 2.5\nstation = 'south'\nlimits = [0, 10]\n"
    assert ">>> # Parameters\nthreshold = 2.5" in result.stdout  # printed with the other cells
    assert nbformat.read(path, as_version=4).cells[3].source == REPORT  # the notebook itself is left as it was


def test_without_parameters_the_defaults_apply(tmp_path):
    notebook(tmp_path / "report.ipynb", REPORT)
    assert run_notebook("report.ipynb", "--output-dir", "out", cwd=tmp_path).returncode == EXIT_OK
    assert reported(tmp_path / "out" / "report.ipynb") == {"station": "north", "threshold": 1, "limits": None}


def test_inplace_twice_replaces_the_cell_an_earlier_run_injected(tmp_path):
    path = notebook(tmp_path / "report.ipynb", REPORT)
    assert run_notebook("--inplace", "report.ipynb", "-p", "threshold", "5", cwd=tmp_path).returncode == EXIT_OK
    assert run_notebook("--inplace", "report.ipynb", "-p", "station", "east", cwd=tmp_path).returncode == EXIT_OK
    cells = nbformat.read(path, as_version=4).cells
    assert sum("injected-parameters" in c.metadata.get("tags", []) for c in cells) == 1
    assert reported(path) == {"station": "east", "threshold": 1, "limits": None}


def test_a_notebook_without_a_parameters_cell_is_a_usage_error_and_nothing_runs(tmp_path):
    notebook(tmp_path / "plain.ipynb", "open('ran', 'w').close()", parameters=False)
    result = run_notebook("plain.ipynb", "-p", "threshold", "2", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == EXIT_USAGE
    assert result.stderr.strip().endswith("plain.ipynb has no cell tagged `parameters`: tag the cell that sets the "
                                          "notebook's defaults (the values -p replaces), as papermill does; nothing was run")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "out").exists()


def test_a_bad_name_is_a_usage_error_in_one_line(tmp_path):
    notebook(tmp_path / "report.ipynb", REPORT)
    result = run_notebook("report.ipynb", "-p", "1x", "2", cwd=tmp_path)
    assert result.returncode == EXIT_USAGE and len(result.stderr.strip().splitlines()) == 1
    assert "-p 1x ...: NAME must be a Python name" in result.stderr
    assert run_notebook("report.ipynb", "-p", "only-a-name", cwd=tmp_path).returncode == EXIT_USAGE  # argparse: 2 words


# --- a failing cell -------------------------------------------------------------------------------------------------


FAILING = ["print('before', threshold)", "raise ValueError(f'threshold {threshold} is too high\\nsecond line')",
           "print('after')"]


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("skills-magic:")]


def test_a_failing_cell_prints_one_line_and_writes_the_partial_notebook_beside_it(tmp_path):
    path = notebook(tmp_path / "fails.ipynb", *FAILING)
    result = run_notebook("fails.ipynb", "-p", "threshold", "9", cwd=tmp_path)
    assert result.returncode == EXIT_INVALID
    assert error_lines(result) == [
        "skills-magic: fails.ipynb: cell 6 (raise ValueError(f'threshold {threshold} is too high\\nsecond…) "
        "failed: ValueError: threshold 9 is too high",  # the cell's first line, cut at 60 characters
        "skills-magic: the notebook as executed up to that cell: fails.failed.ipynb"]
    assert "Traceback" not in result.stdout + result.stderr and "second line" not in result.stderr
    assert ">>> print('before', threshold)\nbefore 9" in result.stdout and "after" not in result.stdout
    partial = nbformat.read(tmp_path / "fails.failed.ipynb", as_version=4).cells  # [3] is the injected cell
    assert partial[4].outputs[0]["output_type"] == "stream" and partial[4].outputs[0]["text"] == "before 9\n"
    assert partial[5].outputs[0]["output_type"] == "error" and partial[5].outputs[0]["ename"] == "ValueError"
    assert partial[6].outputs == [] and partial[6].execution_count is None  # never ran
    assert nbformat.read(path, as_version=4).cells[-1].outputs == []  # the notebook itself is untouched


def test_the_partial_notebook_goes_to_the_output_folder_or_in_place(tmp_path):
    path = notebook(tmp_path / "fails.ipynb", *FAILING)
    result = run_notebook("fails.ipynb", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == EXIT_INVALID
    assert error_lines(result)[1] == "skills-magic: the notebook as executed up to that cell: out/fails.ipynb"
    assert nbformat.read(tmp_path / "out" / "fails.ipynb", as_version=4).cells[4].outputs[0]["ename"] == "ValueError"
    stale = nbformat.read(path, as_version=4)
    stale.cells[-1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="from an older run\n")]
    nbformat.write(stale, path)
    result = run_notebook("--inplace", "fails.ipynb", cwd=tmp_path)
    assert result.returncode == EXIT_INVALID and error_lines(result)[1].endswith(": fails.ipynb")
    cells = nbformat.read(path, as_version=4).cells
    assert cells[4].outputs[0]["ename"] == "ValueError" and cells[-1].outputs == []  # no stale output after it
    assert not (tmp_path / "fails.failed.ipynb").exists()


def test_a_cell_tagged_raises_exception_may_fail(tmp_path):
    notebook(tmp_path / "expected.ipynb", ("1 / 0", ["raises-exception"]), "print('went on')")
    result = run_notebook("expected.ipynb", cwd=tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    assert "went on" in result.stdout and not (tmp_path / "expected.failed.ipynb").exists()


def test_a_magics_user_error_is_its_one_line(tmp_path):
    notebook(tmp_path / "gate.ipynb", "%env SKILLS_MAGIC_DB=ledger.sqlite\n%load_ext skills_magic\n%ledger use demo",
             "%ledger hypothesis h", '%ledger prediction p --falsified-by c --hypothesis H1', "%ledger gate")
    result = run_notebook("gate.ipynb", cwd=tmp_path)
    assert result.returncode == EXIT_INVALID
    assert error_lines(result)[0] == ("skills-magic: gate.ipynb: cell 7 (%ledger gate) failed: UsageError: "
                                      "OpenPredictions: sci.demo has 1 open prediction:")


def test_a_cell_that_times_out_is_one_line_too(tmp_path):
    notebook(tmp_path / "slow.ipynb", "import time\ntime.sleep(60)")
    result = run_notebook("slow.ipynb", "--timeout", "2", cwd=tmp_path)
    assert result.returncode == EXIT_INVALID
    (line, _) = error_lines(result)
    assert line.startswith("skills-magic: slow.ipynb: cell 4 (import time) failed: CellTimeoutError: ")
    assert "timed out" in line and "Traceback" not in result.stdout  # (the stopped kernel may log its own on stderr)
    assert (tmp_path / "slow.failed.ipynb").is_file()


def test_the_notebooks_before_a_failing_one_are_kept(tmp_path):
    notebook(tmp_path / "a.ipynb", "print('a ran')")
    notebook(tmp_path / "b.ipynb", *FAILING)
    notebook(tmp_path / "c.ipynb", "print('c ran')")
    result = run_notebook("a.ipynb", "b.ipynb", "c.ipynb", "--output-dir", "out", cwd=tmp_path)
    assert result.returncode == EXIT_INVALID
    assert "a ran" in result.stdout and "c ran" not in result.stdout  # it stops at the first failing cell
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.ipynb", "b.ipynb"]
