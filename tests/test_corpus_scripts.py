"""Real public skills' scripts (../shared/corpus-scripts: anthropics/skills and K-Dense's scientific skills, copied
unchanged) run end to end as a user runs them: a real Jupyter kernel started in a fresh project folder (the notebook's
folder), the skill copied to ./skills/NAME, then `%load_ext skills_magic`, `%skills add skills`,
`%skills allow NAME:scripts/*` (with at most one grant the user types) and the README's "realistic command". Inputs are
real files the tests write; each test asserts what the user sees in the cell (text/plain and the run view's JSON), the
project on disk before and after `%skills apply`, and that nothing outside the project changed. Hosts granted by name
are shown with a small stdlib skill of the user's own (api-client) against a local HTTP server standing in for a web
API, and with the real doi_to_bibtex.py, which a wrong grant gets refused before any lookup: nothing uses the internet.
docs/permissions.md "Real skills' scripts" lists these scripts and more, with what each needs and the outcome."""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import ClassVar

import pytest
from fake_anthropic import QuietHandler
from jupyter_client.manager import start_new_kernel
from processes import processes_running, wait_until_gone
from skillfiles import tree

pytestmark = [pytest.mark.corpus, pytest.mark.needs_sandbox]

REPO = Path(__file__).resolve().parent.parent
CORPUS_SCRIPTS = Path(os.environ.get("SKILLS_MAGIC_CORPUS_SCRIPTS", REPO.parent / "shared" / "corpus-scripts"))
FOLDERS = {  # skill -> its folder in the corpus
    "skill-creator": "anthropic-skills/skill-creator",
    "webapp-testing": "anthropic-skills/webapp-testing",
    "web-artifacts-builder": "anthropic-skills/web-artifacts-builder",
    "citation-management": "kdense-scientific-skills/citation-management",
    "literature-review": "kdense-scientific-skills/literature-review",
    "matplotlib": "kdense-scientific-skills/matplotlib",
    "scholar-evaluation": "kdense-scientific-skills/scholar-evaluation",
    "scientific-visualization": "kdense-scientific-skills/scientific-visualization",
}
RUN = "application/vnd.skills-magic.run+json"
APPLY = "application/vnd.skills-magic.apply+json"
CELL_SECONDS = 90  # a cell's deadline: the default script timeout (60 s) and the kernel's own work

MY_SKILL = "---\nname: my-skill\ndescription: Writes a friendly greeting. Use when the user asks to be greeted.\n---\n\n# Greet\n\nSay hello.\n"
REFS_BIB = """@article{smith2020,
  title = {Soil microbes under drought},
  author = {Smith, Jane; Doe, John},
  journal = {Ecology Letters},
  year = {2020},
  pages = {10-20},
  doi = {https://doi.org/10.1111/ele.13500}
}

@article{adams2018,
  title = {Roots and rain},
  author = {Adams, Ann},
  journal = {Plant Journal},
  year = {2018},
  doi = {10.1111/tpj.1}
}

@article{smith2020b,
  title = {Soil microbes under drought},
  author = {Smith, Jane and Doe, John},
  journal = {Ecology Letters},
  year = {2020},
  doi = {10.1111/ele.13500}
}
"""
REFS_BIB_FORMATTED = """@article{adams2018,
  author  = {Adams, Ann},
  title   = {Roots and rain},
  journal = {Plant Journal},
  year    = {2018},
  doi     = {10.1111/tpj.1}
}

@article{smith2020,
  author  = {Smith, Jane and Doe, John},
  title   = {Soil microbes under drought},
  journal = {Ecology Letters},
  year    = {2020},
  pages   = {10--20},
  doi     = {10.1111/ele.13500}
}
"""
SEARCH_RESULTS = [  # literature-review's input: the same paper found twice (DOI case differs), and one more
    {"title": "Roots and rain", "authors": "Adams, Ann", "first_author": "Adams", "year": "2018", "doi": "10.1111/tpj.1",
     "source": "PubMed"},
    {"title": "Roots and rain", "authors": "Adams, Ann", "first_author": "Adams", "year": "2018", "doi": "10.1111/TPJ.1",
     "source": "Scopus"},
    {"title": "Soil microbes under drought", "authors": "Smith, Jane", "first_author": "Smith", "year": "2020",
     "journal": "Ecology Letters", "source": "PubMed"},
]
CHECK_PY = """import urllib.request
print("proxies", urllib.request.getproxies())
with urllib.request.urlopen("http://localhost:8765/", timeout=10) as response:
    body = response.read().decode()
    print("status", response.status, "lists check.py" if "check.py" in body else "does not list check.py")
"""
FETCH_PY = """import sys, urllib.request
for url in sys.argv[1:]:
    with urllib.request.urlopen(url, timeout=10) as response:
        print(url, response.status, response.read().decode())
"""
NETWORK_OFF = "the network is off in the sandbox"


# --- the notebook: a real kernel in a fresh project folder ------------------------------------------------------


class Cell:
    """What one executed cell showed: every output message, the input prompts, the reply."""

    def __init__(self, code: str, outputs: list[tuple[str, dict]], prompts: list[str], reply: dict):
        self.code, self.outputs, self.prompts, self.reply = code, outputs, prompts, reply

    @property
    def text(self) -> str:
        parts = []
        for kind, content in self.outputs:
            if kind in ("execute_result", "display_data"):
                parts.append(content["data"].get("text/plain", ""))
            elif kind == "stream":
                parts.append(content["text"])
            elif kind == "error":
                parts.append("\n".join(content["traceback"]))
        return "\n".join(parts)

    def _shown(self, mime: str) -> dict:
        for kind, content in self.outputs:
            if kind in ("execute_result", "display_data") and mime in content["data"]:
                return content
        raise AssertionError(f"{self.code!r} showed no {mime}; it showed:\n{self.text}")

    def data(self, mime: str = RUN) -> dict:
        return self._shown(mime)["data"][mime]

    def metadata(self, mime: str = RUN) -> dict:
        return self._shown(mime).get("metadata", {}).get(mime, {})


class Notebook:
    """A kernel whose working folder is `folder` (the notebook's folder); `outside` is its parent's other content."""

    def __init__(self, folder: Path, client):
        self.folder, self.client = folder, client
        self.outside = tree(folder.parent, skip=folder.name)
        self.corpus_before: dict[str, str] | None = None  # the corpus, as it was when a skill was first copied

    def execute(self, code: str, seconds: float = CELL_SECONDS) -> Cell:
        """Run a cell as a front end does (stdin allowed: a prompt is recorded and denied), up to the kernel going
        idle, within a deadline."""
        deadline = time.monotonic() + seconds
        message_id = self.client.execute(code, allow_stdin=True)
        prompts: list[str] = []
        outputs: list[tuple[str, dict]] = []
        reply = None
        idle = False
        while reply is None or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{code!r} did not finish within {seconds} s; it showed so far: {outputs}")
            try:
                request = self.client.get_stdin_msg(timeout=0)
                if request["msg_type"] == "input_request":
                    prompts.append(request["content"]["prompt"])
                    self.client.input("d")
            except queue.Empty:
                pass
            if reply is None:
                try:
                    message = self.client.get_shell_msg(timeout=0)
                    if message["parent_header"].get("msg_id") == message_id:
                        reply = message["content"]
                except queue.Empty:
                    pass
            try:
                message = self.client.get_iopub_msg(timeout=min(0.1, left))
            except queue.Empty:
                continue
            if message["parent_header"].get("msg_id") != message_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind in ("execute_result", "display_data", "stream", "error"):
                outputs.append((kind, {**content, "metadata": content.get("metadata", {})}))
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
        return Cell(code, outputs, prompts, reply)

    def ok(self, code: str, seconds: float = CELL_SECONDS) -> Cell:
        cell = self.execute(code, seconds)
        assert cell.reply["status"] == "ok" and not [k for k, _ in cell.outputs if k == "error"], cell.text
        assert "UsageError" not in cell.text, cell.text
        assert cell.prompts == [], cell.prompts  # a command the user typed is never asked about again
        return cell

    def add(self, name: str) -> Path:
        """Copy a skill of the corpus into the project's skills/ folder (as a user copies one in)."""
        corpus = corpus_scripts()
        if self.corpus_before is None:
            self.corpus_before = tree(corpus, skip=None)
        target = self.folder / "skills" / name
        shutil.copytree(corpus / FOLDERS[name], target)
        return target

    def write(self, relative: str, text: str) -> Path:
        path = self.folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def start(self, name: str, grant: str = "") -> None:
        """The cells a user types before a run: load, add the project's skills, allow the skill's scripts."""
        self.ok("%load_ext skills_magic")
        added = self.ok("%skills add skills")
        assert name in added.data("application/vnd.skills-magic.added+json")["skills"], added.text
        rule = f"{name}:scripts/*"
        policy = self.ok(f"%skills allow {rule}" + (f" {grant}" if grant else ""))
        assert f"allow {rule}" in policy.text, policy.text

    def ready(self, name: str, files: dict[str, str] | None = None, grant: str = "") -> dict[str, str]:
        """The skill `name` of the corpus copied in, the user's own `files` written beside it, the start cells run:
        the notebook's folder as it is then (to compare after the run)."""
        self.add(name)
        for relative, text in (files or {}).items():
            self.write(relative, text)
        self.start(name, grant)
        return tree(self.folder)

    def run(self, command: str, seconds: float = CELL_SECONDS) -> Cell:
        """`%%skill run ...` exactly as typed, with an empty line under it (IPython refuses a cell magic whose body
        is empty); the cell shows the run view, never an error."""
        cell = self.ok(command + "\n\n", seconds)
        data = cell.data()
        assert data["client"] == "none" and data["tool_calls"] == [], data
        return cell

    def apply(self, cell: Cell) -> Cell:
        """`%skills apply RUN` with the run named in the view's metadata (run ids differ on every run)."""
        (command,) = cell.metadata()["apply"]
        return self.ok(command)

    def assert_nothing_changed_outside(self) -> None:
        assert tree(self.folder.parent, skip=self.folder.name) == self.outside
        if self.corpus_before is not None:
            assert tree(CORPUS_SCRIPTS, skip=None) == self.corpus_before


def kernel_environment() -> dict[str, str]:
    """The test's environment, as a user's activated virtualenv has it: its bin folder first on PATH (so `python` is
    the kernel's), only the bundled skills besides the project's own, the default database in the project."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["SKILLS_MAGIC_SOURCES"] = "bundled"
    for name in ("SKILLS_MAGIC_DB", "SKILLS_MAGIC_PATH", "SKILLS_MAGIC_LOCK"):
        env.pop(name, None)
    return env


def corpus_scripts() -> Path:
    """../shared/corpus-scripts, or a skip naming where it was looked for (a user's clone may not have it)."""
    if not (CORPUS_SCRIPTS / "README.md").is_file():
        pytest.skip(f"the scripts corpus is not at {CORPUS_SCRIPTS} (it ships beside the repository, not in it; set "
                    "SKILLS_MAGIC_CORPUS_SCRIPTS)")
    return CORPUS_SCRIPTS


@pytest.fixture
def notebook(tmp_path):
    """One real kernel per test, started in tmp/notebook (the notebook's folder); tmp/neighbour is a folder beside the
    project that no run may touch."""
    folder = tmp_path / "notebook"
    (folder / "skills").mkdir(parents=True)
    (tmp_path / "neighbour").mkdir()
    (tmp_path / "neighbour" / "notes.txt").write_text("not the project's\n")
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(folder), env=kernel_environment(),
                                       startup_timeout=60)
    try:
        yield Notebook(folder, client)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def assert_hint(cell: Cell, hint: str) -> None:
    """A failed run's cell ends its error with the one hint line naming the cause and the fix."""
    data = cell.data()
    assert data["stop_reason"] == "script_failed", data
    assert data["error"] and data["error"].splitlines()[-1] == hint, data["error"]
    assert hint in cell.text


def assert_no_process_left(marker: str) -> None:
    for pid in processes_running(marker):
        assert wait_until_gone(pid), f"process {pid} ({marker!r}) outlived its run"


# --- skill-creator ----------------------------------------------------------------------------------------------


def test_quick_validate_finds_the_skill_folder_in_the_notebooks_folder_and_prints_its_verdict(notebook):
    before = notebook.ready("skill-creator", {"my-skill/SKILL.md": MY_SKILL})

    valid = notebook.run("%%skill run --no-model --script scripts/quick_validate.py skill-creator my-skill")
    data = valid.data()
    assert data["final_text"] == "Skill is valid!\n"
    assert (data["stop_reason"], data["error"]) == ("no_model", None)
    assert data["trace"][-1]["detail"] == "exit code 0" and "changes" not in data
    assert tree(notebook.folder) == before

    notebook.write("my-skill/SKILL.md", MY_SKILL.replace("name: my-skill", "name: My_Skill"))  # the user edits it
    before = tree(notebook.folder)
    invalid = notebook.run("%%skill run --no-model --script scripts/quick_validate.py skill-creator my-skill")
    data = invalid.data()
    assert data["final_text"] == "Name 'My_Skill' should be kebab-case (lowercase letters, digits, and hyphens only)\n"
    assert data["stop_reason"] == "script_failed"
    assert data["error"] == "scripts/quick_validate.py exit code 1"  # the script's own verdict: nothing to grant
    assert tree(notebook.folder) == before
    notebook.assert_nothing_changed_outside()


def test_package_skill_imports_its_sibling_module_and_its_zip_is_a_change_applied_on_request(notebook):
    before = notebook.ready("skill-creator", {"my-skill/SKILL.md": MY_SKILL})

    cell = notebook.run("%%skill run --no-model --script scripts/package_skill.py skill-creator my-skill dist")
    data = cell.data()
    assert (data["stop_reason"], data["error"]) == ("no_model", None), cell.text
    assert "No module named" not in cell.text  # `from scripts.quick_validate import validate_skill` resolved
    assert "✅ Skill is valid!" in data["final_text"] and "  Added: my-skill/SKILL.md" in data["final_text"]
    assert data["final_text"].rstrip().endswith("/dist/my-skill.skill")
    (change,) = data["changes"]
    assert (change["kind"], change["path"], change["diff"]) == ("added", "dist/my-skill.skill", None)
    assert "changes in the working folder (not applied: %skills apply last):" in cell.text
    assert f"  added    dist/my-skill.skill ({change['bytes']:,} bytes)" in cell.text
    made = Path(cell.metadata()["change_files"]["dist/my-skill.skill"])
    assert zipfile.ZipFile(made).namelist() == ["my-skill/SKILL.md"]
    assert zipfile.ZipFile(made).read("my-skill/SKILL.md").decode() == MY_SKILL
    assert tree(notebook.folder) == before and not (notebook.folder / "dist").exists()  # not on disk yet

    applied = notebook.apply(cell)
    assert applied.data(APPLY) == {"applied": [change], "refused": []}
    assert "applied  added    dist/my-skill.skill" in applied.text
    assert (notebook.folder / "dist" / "my-skill.skill").read_bytes() == made.read_bytes()
    assert zipfile.ZipFile(notebook.folder / "dist" / "my-skill.skill").namelist() == ["my-skill/SKILL.md"]
    notebook.assert_nothing_changed_outside()


def test_aggregate_benchmark_writes_its_summary_next_to_its_input_as_changes(notebook):
    gradings = {}
    for config, passed in (("with_skill", 2), ("without_skill", 1)):
        grading = {"summary": {"pass_rate": passed / 2, "passed": passed, "failed": 2 - passed, "total": 2},
                   "expectations": [{"text": "greets by name", "passed": passed == 2, "evidence": "Hello, Ann"}]}
        gradings[f"workspace/iteration-1/eval-1/{config}/run-1/grading.json"] = json.dumps(grading)
    before = notebook.ready("skill-creator", gradings)

    cell = notebook.run("%%skill run --no-model --script scripts/aggregate_benchmark.py skill-creator "
                        "workspace/iteration-1 --skill-name my-skill")
    data = cell.data()
    assert (data["stop_reason"], data["error"]) == ("no_model", None), cell.text
    assert data["final_text"].startswith("Generated: workspace/iteration-1/benchmark.json\n"
                                         "Generated: workspace/iteration-1/benchmark.md\n")
    assert "  With Skill: 100.0% pass rate" in data["final_text"] and "  Without Skill: 50.0% pass rate" in data["final_text"]
    assert [(c["kind"], c["path"]) for c in data["changes"]] == [
        ("added", "workspace/iteration-1/benchmark.json"), ("added", "workspace/iteration-1/benchmark.md")]
    files = cell.metadata()["change_files"]
    benchmark = json.loads(Path(files["workspace/iteration-1/benchmark.json"]).read_text())
    assert benchmark["metadata"]["skill_name"] == "my-skill"
    assert benchmark["run_summary"]["with_skill"]["pass_rate"]["mean"] == 1.0
    assert '\n+    "skill_name": "my-skill",\n' in data["changes"][0]["diff"]
    assert tree(notebook.folder) == before  # benchmark.json and .md are not on disk until applied
    assert not (notebook.folder / "workspace" / "iteration-1" / "benchmark.json").exists()

    notebook.apply(cell)
    assert json.loads((notebook.folder / "workspace/iteration-1/benchmark.json").read_text()) == benchmark
    assert (notebook.folder / "workspace/iteration-1/benchmark.md").read_bytes() == Path(
        files["workspace/iteration-1/benchmark.md"]).read_bytes()
    notebook.assert_nothing_changed_outside()


# --- reading inputs given by relative paths ---------------------------------------------------------------------


def test_calculate_scores_reads_the_scores_file_and_writes_its_report_as_a_change(notebook):
    scores = {"problem_formulation": 4, "methodology": 3.5, "analysis": 4, "writing": 3}
    before = notebook.ready("scholar-evaluation", {"scores.json": json.dumps(scores)})

    cell = notebook.run("%%skill run --no-model --script scripts/calculate_scores.py scholar-evaluation "
                        "--scores scores.json --output evaluation.txt")
    data = cell.data()
    assert (data["stop_reason"], data["error"]) == ("no_model", None), cell.text
    assert data["final_text"].strip() == "Report saved to: evaluation.txt"
    (change,) = data["changes"]
    assert (change["kind"], change["path"]) == ("added", "evaluation.txt")
    assert "+SCHOLAREVAL SCORE REPORT" in change["diff"]
    assert "+  methodology               3.50/5.00  (weight: 20.0%, contribution: 0.700)" in change["diff"]
    assert "      +SCHOLAREVAL SCORE REPORT" in cell.text  # the diff, in the cell
    assert tree(notebook.folder) == before and not (notebook.folder / "evaluation.txt").exists()
    notebook.assert_nothing_changed_outside()


def test_search_databases_deduplicates_a_relative_results_file_into_bibtex(notebook):
    before = notebook.ready("literature-review", {"results.json": json.dumps(SEARCH_RESULTS)})

    cell = notebook.run("%%skill run --no-model --script scripts/search_databases.py literature-review "
                        "results.json --deduplicate --format bibtex --output results.bib")
    data = cell.data()
    assert (data["stop_reason"], data["error"]) == ("no_model", None), cell.text
    assert data["final_text"] == "After deduplication: 2 results\n✓ Results saved to: results.bib\n"
    (change,) = data["changes"]
    assert (change["kind"], change["path"]) == ("added", "results.bib")
    bib = Path(cell.metadata()["change_files"]["results.bib"]).read_text()
    assert bib.count("@article{") == 2 and "@article{Adams2018," in bib and "@article{Smith2020," in bib
    assert tree(notebook.folder) == before
    notebook.assert_nothing_changed_outside()


# --- rewriting an input in place --------------------------------------------------------------------------------


def test_format_bibtex_rewrites_its_input_as_a_diffed_change_the_user_applies(notebook):
    before = notebook.ready("citation-management", {"refs.bib": REFS_BIB})

    cell = notebook.run("%%skill run --no-model --script scripts/format_bibtex.py citation-management "
                        "refs.bib --deduplicate --sort year")
    data = cell.data()
    assert (data["stop_reason"], data["error"]) == ("no_model", None), cell.text
    assert "Duplicate DOI found: 10.1111/ele.13500 (skipping smith2020b)" in data["note"]
    assert "Successfully wrote 2 entries to refs.bib" in data["note"]
    (change,) = data["changes"]
    assert (change["kind"], change["path"], change["bytes"]) == ("changed", "refs.bib", len(REFS_BIB_FORMATTED))
    assert change["diff"].startswith("--- a/refs.bib\n+++ b/refs.bib\n")
    assert "\n-@article{smith2020b,\n" in change["diff"] and "\n+  pages   = {10--20},\n" in change["diff"]
    assert f"  changed  refs.bib ({len(REFS_BIB_FORMATTED)} bytes)" in cell.text
    assert "      -@article{smith2020b," in cell.text
    assert (notebook.folder / "refs.bib").read_text() == REFS_BIB and tree(notebook.folder) == before

    applied = notebook.apply(cell)
    assert applied.data(APPLY) == {"applied": [change], "refused": []}
    assert (notebook.folder / "refs.bib").read_text() == REFS_BIB_FORMATTED
    notebook.assert_nothing_changed_outside()


# --- missing Python packages ------------------------------------------------------------------------------------


@pytest.mark.parametrize("skill, command, imports", [
    # the plotting template imports numpy first, then matplotlib: the hint names the first one missing (the test
    # environment has numpy, which pandas needs for `--with`, and no matplotlib)
    ("matplotlib", "scripts/plot_template.py --plot-type line --output growth.png", ("numpy", "matplotlib")),
    ("scientific-visualization", "scripts/figure_export.py", ("matplotlib",)),
])
def test_a_plotting_script_without_its_package_ends_with_the_pip_install_hint(notebook, skill, command, imports):
    package = next((name for name in imports if importlib.util.find_spec(name) is None), None)
    if package is None:
        pytest.fail(f"{', '.join(imports)} are installed here, so this test cannot show the hint for a missing package")
    before = notebook.ready(skill)

    script, _, arguments = command.partition(" ")
    cell = notebook.run(f"%%skill run --no-model --script {script} {skill} {arguments}")
    data = cell.data()
    assert f"ModuleNotFoundError: No module named '{package}'" in data["note"]
    assert data["error"].splitlines()[0] == f"{script} exit code 1"
    assert_hint(cell, f"hint: the Python package {package!r} is not installed in the kernel's environment: "
                      f"%pip install {package} (the script runs with the kernel's Python)")
    assert "changes" not in data and tree(notebook.folder) == before
    notebook.assert_nothing_changed_outside()


# --- programs and the network -----------------------------------------------------------------------------------


def _global_node_modules() -> str | None:
    if shutil.which("npm", path=kernel_environment()["PATH"]) is None:
        return None
    found = subprocess.run(["npm", "root", "-g"], capture_output=True, text=True, timeout=30, check=False)
    return found.stdout.strip() or None


def test_init_artifact_without_a_network_grant_ends_naming_the_network_and_the_grant(notebook):
    """It installs pnpm with npm, then Vite and shadcn from registry.npmjs.org: with the network off, npm retries
    for longer than the default 60 s, so the user grants a shorter timeout and the hint still names the network."""
    path = kernel_environment()["PATH"]
    global_modules = _global_node_modules()
    installed_before = sorted(os.listdir(global_modules)) if global_modules and os.path.isdir(global_modules) else None
    had_pnpm = shutil.which("pnpm", path=path)
    skill_folder = notebook.add("web-artifacts-builder")
    notebook.start("web-artifacts-builder", "--timeout 20")
    before = tree(notebook.folder)

    cell = notebook.run("%%skill run --no-model --script scripts/init-artifact.sh web-artifacts-builder my-app")
    data = cell.data()
    subject = "web-artifacts-builder:scripts/init-artifact.sh"
    if shutil.which("node", path=path) is None or (had_pnpm is None and shutil.which("npm", path=path) is None):
        missing = "node" if shutil.which("node", path=path) is None else "npm"
        assert_hint(cell, f"hint: the program {missing!r} is not on this machine (or not on PATH); install it "
                          "(apt-get install nodejs npm)")
    else:
        assert "Detected Node.js version" in data["final_text"]
        hint = data["error"].splitlines()[-1]
        assert hint.startswith("hint: ") and NETWORK_OFF in hint, data["error"]
        assert f"%skills allow {subject} --network HOST[,HOST...]" in hint
        assert_hint(cell, hint)
        if data["trace"][-1]["detail"] == "timed out":  # not a bare timeout: the grant for longer is named too
            assert data["error"].splitlines()[0] == "scripts/init-artifact.sh timed out"
            assert f"%skills allow {subject} --timeout 300" in hint
            assert 20 <= cell.metadata()["seconds"] < 40  # the granted 20 s, not the default 60 s
    assert_no_process_left(str(skill_folder / "scripts" / "init-artifact.sh"))  # npm went with it: the run's PID namespace
    assert not (notebook.folder / "my-app").exists() and tree(notebook.folder) == before
    assert shutil.which("pnpm", path=path) == had_pnpm  # npm install -g did not reach the machine
    if installed_before is not None:
        assert sorted(os.listdir(global_modules)) == installed_before
    notebook.assert_nothing_changed_outside()


def test_with_server_runs_a_server_and_a_check_on_the_sandboxs_own_loopback_without_any_grant(notebook):
    before = notebook.ready("webapp-testing", {"check.py": CHECK_PY})

    cell = notebook.run('%%skill run --no-model --script scripts/with_server.py webapp-testing '
                        '--server "python -m http.server 8765" --port 8765 -- python check.py')
    data = cell.data()
    assert (data["stop_reason"], data["error"]) == ("no_model", None), cell.text
    lines = data["final_text"].splitlines()
    assert "proxies {}" in lines  # no HTTP_PROXY without a grant: localhost goes to the sandbox's own loopback
    assert "status 200 lists check.py" in lines  # the server ran in the notebook's folder
    assert "Server ready on port 8765" in lines and "Running: python check.py" in lines
    assert lines[-2:] == ["Server 1 stopped", "All servers stopped"]
    assert "changes" not in data and tree(notebook.folder) == before
    assert_no_process_left("http.server\x008765")  # the server died with the run
    notebook.assert_nothing_changed_outside()


class _API(QuietHandler):
    seen: ClassVar[list[str]] = []  # each server gets its own list (see `api`)

    def do_GET(self):
        self.seen.append(f"{self.headers.get('Host')} {self.path}")
        self.reply(b'{"answer": 42}', headers={"Content-Type": "application/json"})


@pytest.fixture
def api():
    """A local HTTP server on the host's loopback, standing in for a web API; yields (port, requests seen)."""
    seen: list[str] = []
    handler = type("Handler", (_API,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _api_client(notebook: Notebook) -> None:
    """A small skill of the user's own whose stdlib script fetches URLs (urllib honours HTTP_PROXY)."""
    notebook.write("skills/api-client/SKILL.md", "---\nname: api-client\ndescription: Fetches JSON from a web API. Use "
                                                 "when asked for data from an API.\n---\n\nRun scripts/fetch.py URL.\n")
    notebook.write("skills/api-client/scripts/fetch.py", FETCH_PY)


def test_a_host_granted_by_name_is_reached_through_the_proxy(notebook, api):
    port, seen = api
    _api_client(notebook)
    notebook.start("api-client", "--network 127.0.0.1")

    cell = notebook.run(f"%%skill run --no-model --script scripts/fetch.py api-client http://127.0.0.1:{port}/v1/answer")
    data = cell.data()
    assert (data["stop_reason"], data["error"]) == ("no_model", None), cell.text
    assert data["final_text"] == f'http://127.0.0.1:{port}/v1/answer 200 {{"answer": 42}}\n'
    assert seen == [f"127.0.0.1:{port} /v1/answer"]
    notebook.assert_nothing_changed_outside()


def test_a_host_that_is_not_granted_is_refused_with_a_line_naming_it_and_the_grant(notebook, api):
    _port, seen = api
    _api_client(notebook)
    notebook.start("api-client", "--network 127.0.0.1")

    cell = notebook.run("%%skill run --no-model --script scripts/fetch.py api-client http://api.example.org/v1/answer")
    data = cell.data()
    grant = "%skills allow api-client:scripts/fetch.py --network 127.0.0.1,api.example.org"
    assert (f"HTTP Error 403: skills_magic: host api.example.org is not granted to this run; allow it with {grant}"
            in data["note"])
    assert data["error"].splitlines()[0] == "scripts/fetch.py exit code 1"
    assert_hint(cell, f"hint: the sandbox refused api.example.org (not granted to this run); to allow it: {grant}")
    assert seen == []  # refused before anything left for it
    notebook.assert_nothing_changed_outside()


def test_doi_to_bibtex_without_a_grant_ends_with_the_network_hint(notebook):
    before = notebook.ready("citation-management")

    cell = notebook.run("%%skill run --no-model --script scripts/doi_to_bibtex.py citation-management "
                        "10.1038/s41586-021-03819-2 -o refs.bib")
    data = cell.data()
    assert data["error"].splitlines()[0] == "scripts/doi_to_bibtex.py exit code 1"
    if importlib.util.find_spec("requests") is None:
        assert_hint(cell, "hint: the Python package 'requests' is not installed in the kernel's environment: "
                          "%pip install requests (the script runs with the kernel's Python)")
    else:
        assert "Failed to resolve 'doi.org'" in data["note"]
        assert_hint(cell, "hint: the network is off in the sandbox; to let this run reach the hosts it needs: "
                          "%skills allow citation-management:scripts/doi_to_bibtex.py --network doi.org")  # the host it tried, named
    assert "changes" not in data and tree(notebook.folder) == before
    notebook.assert_nothing_changed_outside()


def test_doi_to_bibtex_granted_another_host_is_refused_naming_doi_org_and_the_grant(notebook):
    """The user granted Crossref's API, but the script asks doi.org first: refused at once, before any lookup."""
    if importlib.util.find_spec("requests") is None:
        pytest.fail("requests is not installed here (jupyterlab's dependencies bring it)")
    before = notebook.ready("citation-management", grant="--network api.crossref.org")

    cell = notebook.run("%%skill run --no-model --script scripts/doi_to_bibtex.py citation-management "
                        "10.1038/s41586-021-03819-2 -o refs.bib")
    data = cell.data()
    grant = "%skills allow citation-management:scripts/doi_to_bibtex.py --network api.crossref.org,doi.org"
    assert f"Tunnel connection failed: 403 skills_magic: host doi.org is not granted to this run; allow it with {grant}" \
        in data["note"]
    assert_hint(cell, f"hint: the sandbox refused doi.org (not granted to this run); to allow it: {grant}")
    assert "changes" not in data and tree(notebook.folder) == before
    notebook.assert_nothing_changed_outside()
