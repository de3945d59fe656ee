"""Notebooks run headless (`skills-magic run-notebook`): the same cells a person runs, each in its own folder as
Jupyter runs it, with their text outputs and the executed copy kept where asked."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from skills_magic.errors import SkillsMagicError

DEFAULT_TIMEOUT_SECONDS = 600  # a cell of ours that takes ten minutes is stuck


class NotebookRunnerMissing(SkillsMagicError):
    """nbclient or ipykernel is not installed."""

    def __init__(self) -> None:
        super().__init__("run-notebook needs nbclient and ipykernel: pip install 'skills-magic[notebook]'")


@dataclass(frozen=True)
class CellOutput:
    """One code cell's source and its text outputs, in order."""

    source: str
    texts: tuple[str, ...]


def run_notebook(path: str, *, timeout: int = DEFAULT_TIMEOUT_SECONDS, save_to: str | None = None) -> list[CellOutput]:
    """Execute the notebook at `path` in its own folder; write the executed notebook to `save_to` (the same path:
    refreshed in place) when given."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError:
        raise NotebookRunnerMissing() from None
    notebook = nbformat.read(path, as_version=4)
    folder = os.path.dirname(os.path.abspath(path))  # a notebook runs in its own folder, as Jupyter runs it
    # record_timing=False: no per-cell timestamps, so a refreshed notebook differs only where outputs changed
    NotebookClient(notebook, timeout=timeout, record_timing=False, resources={"metadata": {"path": folder}}).execute()
    if save_to is not None:
        os.makedirs(os.path.dirname(os.path.abspath(save_to)), exist_ok=True)
        nbformat.write(notebook, save_to)
    return [CellOutput(cell.source, tuple(text for output in cell.get("outputs", []) if (text := _text(output))))
            for cell in notebook.cells if cell.cell_type == "code"]


def _text(output) -> str:
    return output.get("text") or output.get("data", {}).get("text/plain", "")


def run_notebooks(paths: list[str], *, timeout: int = DEFAULT_TIMEOUT_SECONDS, inplace: bool = False,
                  output_dir: str | None = None, on_notebook: Callable[[str, list[CellOutput]], None] | None = None
                  ) -> list[str]:
    """Run each notebook in turn; returns the executed copies written to `output_dir` (none for `inplace`)."""
    written = []
    for path in paths:
        target = path if inplace else (os.path.join(output_dir, os.path.basename(path)) if output_dir else None)
        cells = run_notebook(path, timeout=timeout, save_to=target)
        if on_notebook is not None:
            on_notebook(path, cells)
        if target is not None and not inplace:
            written.append(target)
    return written
