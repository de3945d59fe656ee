"""Real browser, real JupyterLab: `%%skill run --background` shows a permission prompt as buttons, and a click decides.

JupyterLab runs as a subprocess on 127.0.0.1 (random port and token, its own config/runtime/data folders under
tmp_path; the virtualenv's data folder stays on the path, so the python3 kernel and the ipywidgets labextension are
found). Headless Debian Chromium, driven by Playwright's sync API (no browser download), opens a notebook that loads
the extension, adds a copy of csv-profile and picks a scripted model that asks to run `scripts/profile_csv.py`; the
test runs all cells, waits for the "Allow once" / "Always for this skill and path" / "Deny" buttons, clicks one and
checks what the run did. Screenshots before and after each click, and on failure, go to test-artifacts/browser/.

Skips (with the reason) when Chromium, playwright or jupyterlab is missing; CI sets SKILLS_MAGIC_STRICT_SKIPS=1,
which turns those skips into failures.
"""

from __future__ import annotations

import contextlib
import re
import shutil

import pytest
from jupyterlab_browser import (  # noqa: F401 (fixtures are found by name)
    ARTIFACTS, MISSING, NOTEBOOK, REPO, WAIT_MS, Lab, _shot, browser, cells, lab, open_notebook, page, run_all_cells,
    save_notebook, screenshot_on_failure,
)

TASK = "Profile this CSV."
ALLOWED_CALL = re.compile(r"^run_skill_script \{.* -> [\d,]+ bytes$")  # the input is shown cut to a width: no "}"
DENIED_CALL = re.compile(r"^run_skill_script \{.* -> error: denied: the user: deny$")
ANSWER = "Two rows; temp_C is a number column with one missing value."


pytestmark = [pytest.mark.skipif(bool(MISSING), reason="; ".join(MISSING) or "nothing is missing"),
              pytest.mark.needs_sandbox]  # the kernel runs the skill's script


# ---------------------------------------------------------------------------------------------------- the server


# --------------------------------------------------------------------------------------------------- the browser


# ------------------------------------------------------------------------------------------------- the notebook


def write_notebook(lab: Lab, name: str, runs: int = 1) -> str:
    """A folder of its own for the test: a copy of csv-profile, the scripted turns, and the notebook (relative path)."""
    folder = lab.root / name
    shutil.copytree(REPO / "sample-skills" / "csv-profile", folder / "csv-profile")
    shutil.copyfile(REPO / "notebooks" / "turns" / "permissions.yaml", folder / "turns.yaml")
    setup = ("%env SKILLS_MAGIC_SOURCES=bundled\n"
             "%env SKILLS_MAGIC_DB=.skills/test.sqlite\n"
             "%load_ext skills_magic\n"
             "%skills add csv-profile\n"
             "%skills model scripted turns.yaml")
    # the scripted model answers its turns once: each run picks it again
    sources = [setup, f"%%skill run --background\n{TASK}"]
    for _ in range(runs - 1):
        sources += ["%skills model scripted turns.yaml\n%skills policy", f"%%skill run --background\n{TASK}"]
    save_notebook(folder / "browser.ipynb", sources)
    return f"{name}/browser.ipynb"


# ----------------------------------------------------------------------------------------------------- the steps



def run_cell(page, index: int) -> None:
    """Select the cell (command mode, by its prompt) and Shift+Enter; wait until the kernel has taken it."""
    from playwright.sync_api import expect

    cell = cells(page).nth(index)
    cell.locator(".jp-InputArea-prompt").click()
    expect(cell).to_have_class(re.compile(r"\bjp-mod-selected\b"))
    page.keyboard.press("Shift+Enter")
    # "[n]:" once executed ("[*]:" while queued or running); a background run returns at once
    expect(cell.locator(".jp-InputArea-prompt")).to_have_text(re.compile(r"\[\d+\]:"), timeout=WAIT_MS)


def cell_output(page, index: int):
    return cells(page).nth(index).locator(".jp-OutputArea")


def prompt_buttons(output):
    return {label: output.get_by_role("button", name=label, exact=True)
            for label in ("Allow once", "Always for this skill and path", "Deny")}


def wait_for_prompt(page, output) -> dict:
    from playwright.sync_api import expect

    buttons = prompt_buttons(output)
    for button in buttons.values():
        expect(button).to_be_visible(timeout=WAIT_MS)
        expect(button).to_be_enabled()
    expect(output.locator(".skills-magic-permission")).to_contain_text(
        "skill csv-profile wants to run scripts/profile_csv.py")
    return buttons


def wait_for_result(output):
    """The RunView replaces "running in the background…" once the worker thread is done."""
    from playwright.sync_api import expect

    run = output.locator(".skills-magic-run")
    expect(run).to_be_visible(timeout=WAIT_MS)
    expect(output).not_to_contain_text("running in the background")
    return run.text_content()


def answer_the_prompt(page, output, name: str, button: str, said: str) -> tuple[dict, str]:
    """Wait for the cell's permission prompt, click `button`, wait for the cell to say `said` in bold and for the run
    to end: the prompt's buttons and the run's text (a screenshot before the click and one after)."""
    from playwright.sync_api import expect

    buttons = wait_for_prompt(page, output)
    _shot(page, f"{name}--1-prompt")
    buttons[button].click()
    expect(output.locator("b", has_text=re.compile(f"^{said}$"))).to_be_visible(timeout=WAIT_MS)
    text = wait_for_result(output)
    _shot(page, f"{name}--2-after-click")
    return buttons, text


@contextlib.contextmanager
def answered(lab: Lab, page, name: str, button: str, said: str):
    """The test's notebook (one run) opened and all its cells run, its prompt answered as in `answer_the_prompt`:
    (the run's output, the prompt's buttons, the run's text). A failure in the block leaves a screenshot."""
    notebook = write_notebook(lab, name)
    with screenshot_on_failure(page, name, lab):
        open_notebook(page, lab, notebook)
        run_all_cells(page)
        output = cell_output(page, 1)
        buttons, text = answer_the_prompt(page, output, name, button, said)
        yield output, buttons, text


def tool_calls(output) -> list[str]:
    """The lines of the run's "tool calls" list (inside a closed <details>: text content, not visibility)."""
    return [line.strip() for line in output.locator(".skills-magic-run details li").all_text_contents()]


def execute_rows(output) -> list[str]:
    rows = output.locator(".skills-magic-run table tbody tr")
    return [" | ".join(cell.strip() for cell in row.locator("td").all_text_contents())
            for row in rows.all() if row.locator("td").first.text_content().strip() == "execute"]


# ----------------------------------------------------------------------------------------------------- the tests

def test_allow_once_runs_the_script(lab, page):
    from playwright.sync_api import expect

    with answered(lab, page, "allow-once", "Allow once", "allowed once") as (output, buttons, text):
        assert ANSWER in text, text
        calls = tool_calls(output)
        assert len(calls) == 2 and calls[0].startswith("activate_skill") and ALLOWED_CALL.match(calls[1]), calls
        assert "-> error" not in text, text
        rows = execute_rows(output)
        assert len(rows) == 1 and "exit code 0" in rows[0], rows
        for button in buttons.values():
            expect(button).to_be_disabled()


def test_deny_refuses_the_script(lab, page):
    from playwright.sync_api import expect

    with answered(lab, page, "deny", "Deny", "denied") as (output, buttons, text):
        calls = tool_calls(output)
        assert len(calls) == 2 and DENIED_CALL.match(calls[1]), calls
        assert "exit code 0" not in text, text
        rows = execute_rows(output)
        assert len(rows) == 1 and "denied: the user: deny" in rows[0], rows
        for button in buttons.values():
            expect(button).to_be_disabled()


def test_always_allows_the_next_run_without_asking(lab, page):
    from playwright.sync_api import expect

    notebook = write_notebook(lab, "always", runs=2)
    with screenshot_on_failure(page, "always", lab):
        open_notebook(page, lab, notebook)
        # cell by cell: the second run must start only after the first one's answer made the rule
        run_cell(page, 0)
        run_cell(page, 1)
        first = cell_output(page, 1)
        _buttons, text = answer_the_prompt(page, first, "always", "Always for this skill and path", "allowed always")
        assert ALLOWED_CALL.match(tool_calls(first)[1]) and "-> error" not in text, text
        assert "exit code 0" in " ".join(execute_rows(first))

        run_cell(page, 2)
        expect(cell_output(page, 2)).to_contain_text("allow csv-profile:scripts/profile_csv.py  [asked: always]")
        run_cell(page, 3)
        second = cell_output(page, 3)
        second_text = wait_for_result(second)
        _shot(page, "always--3-second-run-no-prompt")
        assert ALLOWED_CALL.match(tool_calls(second)[1]) and "-> error" not in second_text, second_text
        assert ANSWER in second_text, second_text
        assert "exit code 0" in " ".join(execute_rows(second))
        expect(second.get_by_role("button")).to_have_count(0)
