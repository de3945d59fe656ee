"""Real browser, real JupyterLab: how the views look where a newcomer reads them (issue 15, point 7).

JupyterLab's own stylesheet right-aligns every table cell, lets cells wrap anywhere and gives a Markdown heading in
an output the size of the notebook's own headings. The views answer with inline styles (JupyterLab keeps those when
it sanitizes an untrusted notebook; a <style> block it would drop). This test opens a notebook in JupyterLab in
headless Chromium (tests/jupyterlab_browser.py), runs it, and reads what the browser computed:

- `%skills list`: every cell's text is left-aligned, a skill's name stays on one line (one line box), however narrow;
- `%skills show`: the body sits in a bordered block, and its `#` heading is smaller than the notebook's own `#`;
- `%skill run --no-model --script PATH NAME`: the script's output is one <pre> whose text is exactly what it printed
  (`__init__`, `2*3*4`, `# x` and indented JSON, never Markdown), and the files it wrote are listed.

Screenshots go to test-artifacts/browser/ (rendering--1-all, --2-narrow, --3-body, --4-run .png). Skips (with the reason) when Chromium, playwright or
jupyterlab is missing; CI sets SKILLS_MAGIC_STRICT_SKIPS=1, which turns those skips into failures.
"""

from __future__ import annotations

import json

import pytest
from jupyterlab_browser import (  # noqa: F401 (fixtures are found by name)
    MISSING, WAIT_MS, Lab, _shot, browser, cells, lab, open_notebook, page, run_all_cells,
    screenshot_on_failure,
)

pytestmark = [pytest.mark.skipif(bool(MISSING), reason="; ".join(MISSING) or "nothing is missing"),
              pytest.mark.needs_sandbox]  # the notebook runs a skill's script

PRINTED = '__init__ is called\n2*3*4 = 24\n# x\n{\n  "a": {\n    "b": [1, 2]\n  }\n}'
PRINTER = f"""import os, sys
sys.stdout.write({PRINTED!r} + "\\n")
with open(os.path.join(os.environ["SKILLS_MAGIC_OUTPUT"], "report.txt"), "w") as out:
    out.write("hello")
"""
HEADED_BODY = "# Headed skill\n\nSome text.\n\n## A section\n\nMore text.\n"
SOURCES = [
    "%env SKILLS_MAGIC_SOURCES=bundled\n%env SKILLS_MAGIC_DB=.skills/test.sqlite\n%load_ext skills_magic\n"
    "%skills add mine",
    "%skills list",
    "%skills show headed-skill",
    "%skill run --no-model --script scripts/show.py printer",  # on one line: the script's stdin is empty
]
HEADING = "# The notebook's own heading"  # a markdown cell, last: the size a shown body's heading must stay under


def write_notebook(lab: Lab, name: str) -> str:
    """A folder of its own: two skills (one with headings, one whose script prints Markdown-looking text)."""
    folder = lab.root / name
    for skill, description, body in [
        ("headed-skill", "Has headings in its body to show how a shown body looks. Use when testing.", HEADED_BODY),
        ("printer", "Prints text that looks like Markdown and writes a file. Use when testing.", "# Printer\n"),
    ]:
        (folder / "mine" / skill).mkdir(parents=True)
        (folder / "mine" / skill / "SKILL.md").write_text(
            f"---\nname: {skill}\ndescription: {description}\n---\n{body}", encoding="utf-8")
    (folder / "mine" / "printer" / "scripts").mkdir()
    (folder / "mine" / "printer" / "scripts" / "show.py").write_text(PRINTER, encoding="utf-8")
    notebook = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s} for s in SOURCES]
        + [{"cell_type": "markdown", "metadata": {}, "source": HEADING}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    (folder / "rendering.ipynb").write_text(json.dumps(notebook, indent=1), encoding="utf-8")
    return f"{name}/rendering.ipynb"


def output_of(page, index: int):
    """The rendered HTML output of cell `index`, once it is there."""
    from playwright.sync_api import expect

    output = cells(page).nth(index).locator(".jp-OutputArea-output.jp-RenderedHTMLCommon")
    expect(output.first).to_be_visible(timeout=WAIT_MS)
    return output.first


def test_tables_bodies_and_script_output_render_as_meant(lab, page):
    notebook = write_notebook(lab, "rendering")
    with screenshot_on_failure(page, "rendering", lab):
        open_notebook(page, lab, notebook)
        run_all_cells(page)
        listing, shown, run = output_of(page, 1), output_of(page, 2), output_of(page, 3)
        _shot(page, "rendering--1-all")

        # the listing: left-aligned text, names kept whole even in a narrow output
        cells_css = listing.locator("td").evaluate_all(
            "tds => tds.map(td => [getComputedStyle(td).textAlign, getComputedStyle(td).whiteSpace])")
        assert cells_css and all(align in ("left", "start") for align, _ in cells_css), cells_css
        assert all(space == "nowrap" for _, space in cells_css[0::2]), cells_css  # the name column
        page.set_viewport_size({"width": 520, "height": 1000})
        line_boxes = listing.locator("td:first-child code").evaluate_all(
            "codes => codes.map(c => c.getClientRects().length)")
        assert line_boxes and set(line_boxes) == {1}, line_boxes  # no name broke over two lines
        _shot(page, "rendering--2-narrow")
        page.set_viewport_size({"width": 1400, "height": 1000})

        # the shown body: framed, its headings smaller than the notebook's own
        frame = shown.locator(".skills-magic-body")
        assert float(frame.evaluate("e => parseFloat(getComputedStyle(e).borderLeftWidth)")) >= 3
        body_h1 = float(frame.locator("h1").evaluate("e => parseFloat(getComputedStyle(e).fontSize)"))
        notebook_h1 = float(cells(page).nth(4).locator(".jp-RenderedMarkdown h1").evaluate(
            "e => parseFloat(getComputedStyle(e).fontSize)"))
        assert body_h1 < notebook_h1 * 0.8, (body_h1, notebook_h1)

        # the script's output: exactly what it printed, in one <pre>, no Markdown anywhere in the run
        stdout = run.locator("pre.skills-magic-stdout")
        assert stdout.text_content() == PRINTED
        assert run.locator(".skills-magic-run strong, .skills-magic-run em, .skills-magic-run h1").count() == 0
        files = run.locator("details", has_text="files the scripts wrote")
        assert files.locator("td", has_text="report.txt").count() == 1
        shown.scroll_into_view_if_needed()
        _shot(page, "rendering--3-body")
        run.scroll_into_view_if_needed()
        _shot(page, "rendering--4-run")

