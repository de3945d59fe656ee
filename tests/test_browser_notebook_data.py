"""Real browser, real JupyterLab: notebook 08 (notebook data in a run) as a researcher sees it (issue 15).

The notebook is copied as it is into the lab's folder, with its scripted turns, and run with Run All in headless
Chromium: the first run view must show its tool calls (the skill activated, its script run on the DataFrame handed
with `--with`) and the file the script wrote; the continued run's view must show the calls of the notebook's own
Python function. Screenshots go to test-artifacts/browser/ (notebook-data--1-run, --2-continued .png). Skips (with the
reason) when Chromium, playwright or jupyterlab is missing; CI sets SKILLS_MAGIC_STRICT_SKIPS=1, which turns those
skips into failures.
"""

from __future__ import annotations

import re
import shutil

import pytest
from jupyterlab_browser import (  # noqa: F401 (fixtures are found by name)
    MISSING, REPO, WAIT_MS, _shot, browser, cells, lab, open_notebook, page, screenshot_on_failure,
)

pytestmark = [pytest.mark.skipif(bool(MISSING), reason="; ".join(MISSING) or "nothing is missing"),
              pytest.mark.needs_sandbox]  # the notebook runs a skill's script

NOTEBOOK = REPO / "notebooks" / "08-notebook-data.ipynb"
FIRST_RUN, CONTINUED_RUN = 8, 15  # the cells of `%%skill run --with plots` and `%%skill run --continue --as answer`


def run_all(page) -> None:
    """Run > Run All Cells from the menu bar (the notebook opens with a markdown cell: the wait is on the runs)."""
    page.locator("#jp-menu-panel").get_by_role("menuitem", name="Run", exact=True).click()
    page.locator(".lm-Menu").get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()


def rendered_run(page, index: int):
    """The run view cell `index` rendered (HTML), once the cell has run."""
    from playwright.sync_api import expect

    output = cells(page).nth(index).locator(".jp-OutputArea-output.jp-RenderedHTMLCommon .skills-magic-run")
    expect(output.first).to_be_visible(timeout=WAIT_MS)
    return output.first


def test_notebook_08_shows_its_tool_calls_and_the_file_the_script_wrote(lab, page):
    pytest.importorskip("pandas", reason="notebook 08 hands a pandas DataFrame to its run")
    folder = lab.root / "notebook-data"
    (folder / "turns").mkdir(parents=True)
    shutil.copy(NOTEBOOK, folder / NOTEBOOK.name)
    shutil.copy(REPO / "notebooks" / "turns" / "notebook-data.yaml", folder / "turns")
    with screenshot_on_failure(page, "notebook-data", lab):
        open_notebook(page, lab, f"notebook-data/{NOTEBOOK.name}")
        run_all(page)

        first = rendered_run(page, FIRST_RUN)
        calls = first.locator("details", has_text="tool calls")
        assert calls.locator("li", has_text="activate_skill").count() == 1
        assert calls.locator("li", has_text="run_skill_script").count() == 1
        files = first.locator("details", has_text="files the scripts wrote")
        assert files.locator("td", has_text="profile.json").count() == 1
        assert "3 rows and 3 columns" in first.text_content()
        first.scroll_into_view_if_needed()
        _shot(page, "notebook-data--1-run")

        continued = rendered_run(page, CONTINUED_RUN)
        assert continued.locator("details", has_text="tool calls").locator("li", has_text="yield_change").count() == 2
        assert "Plot B changed most" in continued.text_content()
        continued.scroll_into_view_if_needed()
        _shot(page, "notebook-data--2-continued")
