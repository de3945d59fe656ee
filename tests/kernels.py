"""Notebooks run in a real kernel for tests: cells executed headless by nbclient (no one at the notebook, so no
stdin), and the pieces of an output a test reads."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL_TIMEOUT_SECONDS = 300  # a cell may wait this long: a kernel's start and a sandboxed run on a loaded machine


def execute(folder: Path, cells: list[str], timeout: float = KERNEL_TIMEOUT_SECONDS) -> nbformat.NotebookNode:
    """A new notebook of these code cells, executed in a python3 kernel whose working folder is `folder`."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()
    return notebook


def bundle(cell, mime: str) -> dict:
    """The one output of `cell` that carries `mime` (a view's JSON), asserting there is exactly one."""
    found = [o["data"][mime] for o in cell.outputs if o.get("output_type") in ("execute_result", "display_data")
             and mime in o.get("data", {})]
    assert len(found) == 1, cell.outputs
    return found[0]


def plain(cell) -> str:
    """Every text/plain of a cell's outputs, one after the other."""
    return "\n".join(o["data"].get("text/plain", "") for o in cell.outputs if "data" in o)
