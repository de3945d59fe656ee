"""Notebooks run headless (`skills-magic run-notebook`): the same cells a person runs, each in its own folder as
Jupyter runs it, with their text outputs and the executed copy kept where asked.

Parameters follow papermill's convention: `-p NAME VALUE` becomes a new cell `NAME = VALUE` (tagged
`injected-parameters`) right after the cell tagged `parameters`, so the notebook's own defaults are overridden; VALUE
is a Python literal when it parses as one (`3`, `0.5`, `[1, 2]`, `None`), else a string. A cell that fails stops the
run: the notebook executed up to that cell is written (where the executed copy would go, or beside the notebook) and
the failure is one line, the exception's name and message, never a traceback.
"""

from __future__ import annotations

import ast
import keyword
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from skills_magic.errors import SkillsMagicError

DEFAULT_TIMEOUT_SECONDS = 600  # a cell of ours that takes ten minutes is stuck
PARAMETERS_TAG = "parameters"  # papermill's tag for the cell that sets a notebook's defaults
INJECTED_TAG = "injected-parameters"  # papermill's tag for the cell of given values added after it
FAILED_SUFFIX = ".failed.ipynb"  # the partial notebook of a failed run, beside it when no place was asked for
SHOWN_SOURCE_CHARS = 60  # of the failing cell's first line, in the one-line error


class NotebookRunnerMissing(SkillsMagicError):
    """nbclient or ipykernel is not installed."""

    def __init__(self) -> None:
        super().__init__("run-notebook needs nbclient and ipykernel: pip install 'skills-magic[notebook]'")


class BadParameter(SkillsMagicError):
    """A `-p NAME VALUE` whose NAME is not a Python name, or a notebook without a cell tagged `parameters`."""


@dataclass(frozen=True)
class CellOutput:
    """One code cell's source and its text outputs, in order."""

    source: str
    texts: tuple[str, ...]


class CellFailed(SkillsMagicError):
    """A cell raised (or timed out, or its kernel died): the run stopped there. `partial` is the notebook as executed
    up to that cell; `cells` the code cells' outputs so far."""

    def __init__(self, path: str, number: int | None, source: str, error: str, partial: str, cells: list[CellOutput]):
        first = (source.strip().splitlines() or [""])[0]
        shown = first if len(first) <= SHOWN_SOURCE_CHARS else first[:SHOWN_SOURCE_CHARS] + "…"
        where = f"cell {number} ({shown})" if number is not None else "the notebook"
        super().__init__(f"{path}: {where} failed: {error}")
        self.path, self.number, self.error, self.partial, self.cells = path, number, error, partial, cells


def parameter_value(text: str):
    """VALUE of `-p NAME VALUE`: the Python literal it spells, else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def parameters_source(parameters: Sequence[tuple[str, str]]) -> str:
    """The injected cell's code; the last of a repeated NAME wins."""
    lines = ["# Parameters"]
    for name, text in dict(parameters).items():
        if not name.isidentifier() or keyword.iskeyword(name):
            raise BadParameter(f"-p {name} ...: NAME must be a Python name (letters, digits and _, not starting "
                               "with a digit, not a keyword); nothing was run")
        value = parameter_value(text)
        shown = repr(value)
        try:
            round_trips = ast.literal_eval(shown) == value
        except (ValueError, SyntaxError):
            round_trips = False
        lines.append(f"{name} = {shown if round_trips else text.strip()}")  # inf and nan: as typed (`1e999`)
    return "\n".join(lines) + "\n"


def inject_parameters(notebook, parameters: Sequence[tuple[str, str]], path: str) -> None:
    """Add the `NAME = VALUE` cell after the cell tagged `parameters`, in place of one an earlier run injected."""
    import nbformat

    source = parameters_source(parameters)
    notebook.cells = [c for c in notebook.cells if INJECTED_TAG not in c.get("metadata", {}).get("tags", [])]
    anchor = next((i for i, c in enumerate(notebook.cells) if PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])), None)
    if anchor is None:
        raise BadParameter(f"{path} has no cell tagged `{PARAMETERS_TAG}`: tag the cell that sets the notebook's "
                           "defaults (the values -p replaces), as papermill does; nothing was run")
    notebook.cells.insert(anchor + 1, nbformat.v4.new_code_cell(source, metadata={"tags": [INJECTED_TAG]}))


def _cell_outputs(cells) -> list[CellOutput]:
    return [CellOutput(cell.source, tuple(text for output in cell.get("outputs", []) if (text := _text(output))))
            for cell in cells if cell.cell_type == "code"]


def _error_line(error: BaseException, cell) -> str:
    """The exception's name and the first line of its message: the cell's own (a kernel's reply names it, an
    IPython UsageError included, which shows no error output), else the runner's (a timeout, a dead kernel)."""
    found = next((o for o in (cell.get("outputs", []) if cell is not None else []) if o.get("output_type") == "error"), None)
    if getattr(error, "ename", None):
        name, message = error.ename, error.evalue
    elif found is not None and not isinstance(error, TimeoutError):  # a timeout's error output is the interrupt
        name, message = found.get("ename", "Error"), found.get("evalue", "")
    else:
        name, message = type(error).__name__, error
    first = (str(message).strip().splitlines() or [""])[0]
    return f"{name}: {first}" if first else name


def failed_path(path: str) -> str:
    """Where the partial notebook of a failed run goes when no place was asked for: beside it."""
    return (path[: -len(".ipynb")] if path.endswith(".ipynb") else path) + FAILED_SUFFIX


def run_notebook(path: str, *, timeout: int = DEFAULT_TIMEOUT_SECONDS, save_to: str | None = None,
                 parameters: Sequence[tuple[str, str]] = ()) -> list[CellOutput]:
    """Execute the notebook at `path` in its own folder, with `parameters` injected; write the executed notebook to
    `save_to` (the same path: refreshed in place) when given. A failing cell raises CellFailed after the partial
    notebook is written to `save_to`, else beside the notebook (`failed_path`)."""
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellControlSignal, DeadKernelError
    except ImportError:
        raise NotebookRunnerMissing() from None
    notebook = nbformat.read(path, as_version=4)
    if parameters:
        inject_parameters(notebook, parameters, path)
    folder = os.path.dirname(os.path.abspath(path))  # a notebook runs in its own folder, as Jupyter runs it
    started: list[int] = []
    # record_timing=False: no per-cell timestamps, so a refreshed notebook differs only where outputs changed
    client = NotebookClient(notebook, timeout=timeout, record_timing=False, resources={"metadata": {"path": folder}},
                            on_cell_start=lambda cell, cell_index: started.append(cell_index))
    try:
        client.execute()
    except (CellControlSignal, DeadKernelError) as error:  # a cell raised or timed out; the kernel died
        index = started[-1] if started else None
        for later in notebook.cells[index + 1 if index is not None else 0:]:
            if later.cell_type == "code":  # not run: no outputs of an earlier run left to mislead
                later.outputs, later.execution_count = [], None
        partial = save_to or failed_path(path)
        _write(notebook, partial)
        cell = notebook.cells[index] if index is not None else None
        raise CellFailed(path, None if index is None else index + 1, cell.source if cell is not None else "",
                         _error_line(error, cell), partial, _cell_outputs(notebook.cells[: (index or 0) + 1])) from None
    if save_to is not None:
        _write(notebook, save_to)
    return _cell_outputs(notebook.cells)


def _write(notebook, target: str) -> None:
    import nbformat

    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    nbformat.write(notebook, target)


def _text(output) -> str:
    return output.get("text") or output.get("data", {}).get("text/plain", "")


def run_notebooks(paths: list[str], *, timeout: int = DEFAULT_TIMEOUT_SECONDS, inplace: bool = False,
                  output_dir: str | None = None, parameters: Sequence[tuple[str, str]] = (),
                  on_notebook: Callable[[str, list[CellOutput]], None] | None = None) -> list[str]:
    """Run each notebook in turn, stopping at the first failing cell (CellFailed); returns the executed copies
    written to `output_dir` (none for `inplace`)."""
    written = []
    for path in paths:
        target = path if inplace else (os.path.join(output_dir, os.path.basename(path)) if output_dir else None)
        cells = run_notebook(path, timeout=timeout, save_to=target, parameters=parameters)
        if on_notebook is not None:
            on_notebook(path, cells)
        if target is not None and not inplace:
            written.append(target)
    return written
