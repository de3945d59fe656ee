"""A real JupyterLab in headless Chromium for the browser tests: the server, the browser, a page, and helpers to open
a notebook and run its cells. Used by test_browser.py (permission prompts) and test_browser_votes.py (the vote board).

JupyterLab runs as a subprocess on 127.0.0.1 (a random port and token, its own config, runtime and data folders);
Debian's Chromium is driven by Playwright's sync API with `executable_path` (never a browser download of its own),
with the flags that keep it off the network. Test modules skip with `MISSING` as the reason when something is absent.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts" / "browser"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SERVER_START_SECONDS = 90.0  # a cold JupyterLab start (first import of everything) takes a few seconds; be generous
WAIT_MS = 60_000  # every wait in the page is bounded by this (kernel start, prompts, results)
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"  # the notebook on show


def _chromium() -> str | None:
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")


CHROMIUM = _chromium()
MISSING = [reason for missing, reason in [
    (CHROMIUM is None, "no Chromium at /usr/bin/chromium or on PATH (Debian: apt-get install chromium)"),
    (importlib.util.find_spec("playwright") is None, "the Python package `playwright` is not installed"),
    (importlib.util.find_spec("jupyterlab") is None, "the Python package `jupyterlab` is not installed"),
    (importlib.util.find_spec("ipywidgets") is None, "the Python package `ipywidgets` is not installed"),
] if missing]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Lab:
    def __init__(self, root: Path, port: int, token: str, process: subprocess.Popen, log: Path):
        self.root, self.port, self.token, self.process, self.log = root, port, token, process, log

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, notebook: str, workspace: str) -> str:
        # a workspace of its own: JupyterLab would otherwise reopen the previous test's notebook beside this one
        return f"{self.base}/lab/workspaces/{workspace}/tree/{notebook}?token={self.token}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _lab_environment(home: Path) -> dict[str, str]:
    """The machine's environment minus anything that would change what the kernel or the model does."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SKILLS_MAGIC_", "ANTHROPIC_", "JUPYTER", "IPYTHON"))}
    env.update({
        # its own config, runtime and data folders; the venv's share/jupyter (sys.prefix) stays on the data path,
        # which is where the python3 kernelspec and the @jupyter-widgets/jupyterlab-manager labextension live
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "IPYTHONDIR": str(home / "ipython"),
        "JUPYTER_PLATFORM_DIRS": "1",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def _quiet_settings(config: Path) -> None:
    """No "Would you like to receive official Jupyter news?" toast over the notebook (and no fetch attempt)."""
    settings = config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}), encoding="utf-8")


def _wait_until_up(lab: Lab) -> None:
    deadline = time.monotonic() + SERVER_START_SECONDS
    last = "no answer yet"
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {lab.process.returncode}:\n{lab.log_tail()}")
        try:
            with urllib.request.urlopen(f"{lab.base}/api/status?token={lab.token}", timeout=2) as response:
                if response.status == 200:
                    json.load(response)
                    return
        except (urllib.error.URLError, OSError, ValueError) as error:
            last = str(error)
        time.sleep(0.2)  # polling interval, bounded by the deadline above
    raise RuntimeError(f"JupyterLab did not answer /api/status within {SERVER_START_SECONDS:.0f} s ({last}):\n"
                       f"{lab.log_tail()}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    # SIGTERM: the server shuts its kernels down (they run in sessions of their own) and exits; its process group
    # (start_new_session) also holds anything else it started
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    home = tmp_path_factory.mktemp("jupyter-home")
    root = tmp_path_factory.mktemp("lab-root")
    env = _lab_environment(home)
    _quiet_settings(home / "config")
    port, token = _free_port(), secrets.token_hex(16)
    log = home / "jupyterlab.log"
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
    ]
    with open(log, "wb") as output:
        process = subprocess.Popen(command, cwd=root, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    server = Lab(root, port, token, process, log)
    try:
        _wait_until_up(server)
        yield server
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    try:
        yield tab
    finally:
        context.close()


def _shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@contextlib.contextmanager
def screenshot_on_failure(page, name: str, lab: Lab):
    """A screenshot and the server's log when the block fails; last time's files of this test are removed first."""
    for stale in ARTIFACTS.glob(f"{name}--*"):
        stale.unlink()
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            _shot(page, f"{name}--FAILED")
        with contextlib.suppress(Exception):
            (ARTIFACTS / f"{name}--FAILED-jupyterlab.log").write_text(lab.log_tail(200), encoding="utf-8")
        raise


def _code(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}


def save_notebook(path: Path, sources: list[str]) -> None:
    """A notebook for the Python 3 kernel whose code cells hold `sources`, never run, written to `path`."""
    notebook = {
        "cells": [_code(source) for source in sources],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")


def cells(page):
    return page.locator(f"{NOTEBOOK} .jp-Cell")


def open_notebook(page, lab: Lab, notebook: str) -> None:
    from playwright.sync_api import expect

    page.goto(lab.url(notebook, workspace=notebook.split("/")[0]))
    cells(page).first.wait_for()
    # the kernel has started, its websocket is connected and it is idle. The status bar's kernel item says
    # "No Kernel | Initializing", "... | Connecting", "... | Unknown" before that (the toolbar's execution indicator
    # says "idle" already before the kernel starts: cells run then are lost)
    status = page.locator("#jp-main-statusbar").get_by_role("button", name=re.compile(r" \| [A-Z][a-z]+$"))
    expect(status).to_have_text(re.compile(r"^(?!No Kernel).+ \| Idle$"), timeout=WAIT_MS)
    expect(page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator")).to_have_attribute(
        "data-status", "idle")


def run_all_cells(page) -> None:
    """Run > Run All Cells from the menu bar; wait until the kernel has taken the first cell."""
    from playwright.sync_api import expect

    page.locator("#jp-menu-panel").get_by_role("menuitem", name="Run", exact=True).click()
    page.locator(".lm-Menu").get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
    expect(cells(page).first.locator(".jp-InputArea-prompt")).to_have_text(
        re.compile(r"\[(\d+|\*)\]:"), timeout=WAIT_MS)

