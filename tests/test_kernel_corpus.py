"""Acceptance: the ~1,000 real skills of ../shared/corpus in a real Jupyter kernel, driven by nbclient.

Every SKILL.md of the corpus must be accounted for: listed, hidden by a name collision (with a `collision`
diagnostic), or not loadable (with an error diagnostic naming the file). Which files are loadable is computed here
independently, with yaml.safe_load, not with the package's own loader.
"""

from __future__ import annotations

import codecs
import os
import shlex
from pathlib import Path

import nbformat
import pytest
from conftest import CORPUS
import yaml
from nbclient import NotebookClient

pytestmark = pytest.mark.corpus

MARKER_START = "[skills listing truncated: showed "
DEFAULT_BUDGET_CHARS = 8_000


def _loadable(path: Path) -> bool:
    """A client could load this SKILL.md: UTF-8 text, a `---` frontmatter that is a mapping, a description."""
    raw = path.read_bytes()
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    if b"\x00" in raw:
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    lines = text.splitlines()
    if not lines or lines[0].rstrip() != "---":
        return False
    closing = next((i for i, line in enumerate(lines[1:], 1) if line.rstrip() == "---"), None)
    if closing is None:
        return False
    try:
        data = yaml.safe_load("\n".join(lines[1:closing]))
    except yaml.YAMLError:
        return False
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return False
    description = data.get("description")
    return isinstance(description, str) and bool(description.strip())


def _skill_md(folder: Path) -> Path:
    return next(folder / n for n in ("SKILL.md", "skill.md") if (folder / n).is_file())


def _output(cell, mime: str):
    for output in cell.outputs:
        if output.output_type == "error":
            pytest.fail(f"{cell.source!r} raised {output.ename}: {output.evalue}")
        if output.output_type in ("execute_result", "display_data") and mime in output.data:
            return output.data[mime]
    pytest.fail(f"{cell.source!r} produced no {mime} output: {cell.outputs}")


@pytest.fixture(scope="module")
def executed(corpus, tmp_path_factory):
    """The notebook, executed once in a python3 kernel whose working folder is a fresh tmp folder."""
    folder = tmp_path_factory.mktemp("notebook")
    cells = [
        "%env SKILLS_MAGIC_SOURCES=bundled\n%load_ext skills_magic",
        f"%skills add {shlex.quote(str(corpus))}",
        "%skills list --budget 0 --json",
        "%skills diagnostics --json",
        "%skills list",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    return folder, notebook.cells


def _on_disk(folder: Path, shown: str) -> Path:
    """A path as shown in an output back to the real file: relative to the notebook's folder, or, for a source far
    from the notebook (the corpus here), `<session>/` + the path from the folder holding the source."""
    if shown.startswith("<session>/"):
        return CORPUS.parent / shown[len("<session>/") :]
    if shown.startswith("<bundled>/"):
        from skills_magic.skills.catalog import bundled_skills_folder

        return Path(bundled_skills_folder(), shown[len("<bundled>/") :])
    return Path(os.path.normpath(os.path.join(folder, os.path.expanduser(shown))))


def test_every_loadable_corpus_skill_is_listed_or_hidden_by_a_collision(executed, corpus, corpus_skill_folders):
    folder, cells = executed
    listing = _output(cells[2], "application/json")
    diagnostics = _output(cells[3], "application/json")["diagnostics"]
    corpus_files = {_skill_md(f).resolve() for f in corpus_skill_folders}
    loadable = {p for p in corpus_files if _loadable(p)}

    listed = {
        _on_disk(folder, s["folder"]).resolve()
        for group in listing["groups"]
        if group["source"] == "session"
        for s in group["skills"]
    }
    listed_files = {_skill_md(f) for f in listed}
    hidden = {_on_disk(folder, d["path"]).resolve() for d in diagnostics if d["code"] == "collision"} & corpus_files

    assert listed_files <= corpus_files
    assert listed_files.isdisjoint(hidden)
    assert listed_files | hidden == loadable
    assert len(listed_files) + len(hidden) == len(loadable)
    assert 900 <= len(listed_files) <= 1_100  # "about 1,000 skills"
    assert listing["shown"] == listing["total"] and listing["marker"] is None
    names = [s["name"] for group in listing["groups"] for s in group["skills"]]
    assert len(names) == len(set(names))  # a name is listed once: the rest are collisions


def test_every_corpus_skill_not_listed_has_a_diagnostic_saying_why(executed, corpus_skill_folders):
    folder, cells = executed
    listing = _output(cells[2], "application/json")
    diagnostics = _output(cells[3], "application/json")["diagnostics"]
    listed = {
        _skill_md(_on_disk(folder, s["folder"]).resolve())
        for group in listing["groups"]
        for s in group["skills"]
    }
    explained: dict[Path, set[str]] = {}
    for d in diagnostics:
        if d["severity"] == "error" or d["code"] == "collision":
            explained.setdefault(_on_disk(folder, d["path"]).resolve(), set()).add(d["code"])

    unlisted = {_skill_md(f).resolve() for f in corpus_skill_folders} - listed

    assert unlisted  # the corpus has same-named skills in several collections
    missing = sorted(str(p) for p in unlisted if p not in explained)
    assert missing == []
    for path in unlisted:
        codes = explained[path]
        assert codes, path
        if _loadable(path):
            assert "collision" in codes, (path, codes)


def test_collision_and_skip_counts_agree_with_the_diagnostics(executed, corpus_skill_folders):
    _, cells = executed
    listing = _output(cells[2], "application/json")
    diagnostics = _output(cells[3], "application/json")["diagnostics"]

    assert listing["hidden_by_collision"] == sum(d["code"] == "collision" for d in diagnostics)
    skipped_files = {d["path"] for d in diagnostics if d["severity"] == "error"}
    assert listing["skipped"] == len(skipped_files)


def test_default_listing_of_the_corpus_ends_with_the_truncation_marker(executed):
    _, cells = executed
    listing = _output(cells[2], "application/json")
    text = _output(cells[4], "text/plain")

    lines = text.splitlines()
    listing_lines = lines[1:]  # the view puts one summary line before the listing
    marker = listing_lines[-1]
    assert marker.startswith(MARKER_START) and marker.endswith("]")
    shown, total = marker[len(MARKER_START) :].split(" skills", 1)[0].split(" of ")
    assert int(total) == listing["total"]
    assert int(shown) == sum(line.startswith("- ") for line in listing_lines) < int(total)
    assert len("\n".join(listing_lines)) <= DEFAULT_BUDGET_CHARS


def test_outputs_carry_no_absolute_path_of_the_notebook_folder(executed):
    folder, cells = executed
    for cell in cells[1:]:
        for output in cell.outputs:
            for mime, value in output.get("data", {}).items():
                assert str(folder) not in str(value), (cell.source, mime)
