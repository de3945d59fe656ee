"""Shared fixtures. Tests that need something a user's clone may lack (the shared corpus) skip with a reason;
with SKILLS_MAGIC_STRICT_SKIPS=1 (set by .ci/run) every skip is reported as a failure instead, so CI runs them all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("SKILLS_MAGIC_CORPUS", REPO.parent / "shared" / "corpus"))
STRICT_SKIPS = os.environ.get("SKILLS_MAGIC_STRICT_SKIPS") == "1"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The ~1,000 real SKILL.md files in ../shared/corpus (read in place, never copied)."""
    if not CORPUS.is_dir():
        pytest.skip(f"the skills corpus is not at {CORPUS} (it ships beside the repository, not in it; set SKILLS_MAGIC_CORPUS)")
    return CORPUS


@pytest.fixture(scope="session")
def corpus_skill_folders(corpus) -> list[Path]:
    return sorted(p.parent for p in corpus.rglob("*") if p.name in ("SKILL.md", "skill.md") and p.is_file())


@pytest.fixture(scope="session")
def ip():
    """The process-wide IPython shell (created once; shared by every test module that drives magics)."""
    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        return InteractiveShell.instance()
    from IPython.testing.globalipapp import start_ipython

    return start_ipython() or InteractiveShell.instance()


@pytest.fixture
def machine_setup_forgotten(monkeypatch, tmp_path) -> None:
    """No real credentials, base URL, profile, model choice or retry setting leaks in from the machine running the
    tests (a module opts in with `pytestmark = pytest.mark.usefixtures("machine_setup_forgotten")`)."""
    from fake_anthropic import forget_machine_setup

    forget_machine_setup(monkeypatch, tmp_path)


@pytest.fixture
def sample_skills() -> Path:
    return REPO / "sample-skills"


@pytest.fixture
def messy_skills() -> Path:
    return REPO / "examples" / "messy-skills"


NO_SANDBOX = ("runs a skill's script, which needs the bubblewrap sandbox here ({why}); install it "
              "(apt-get install bubblewrap) to run this test")
# notebooks whose cells run scripts: without a sandbox those runs are refused, so their stored outputs cannot match
NOTEBOOKS_RUNNING_SCRIPTS = ("02-model-runs.ipynb", "03-permissions.ipynb", "04-experiment-ledger.ipynb",
                             "06-source-verification.ipynb", "08-notebook-data.ipynb")


def _sandbox():
    from skills_magic.safety.sandbox import availability

    return availability()


def pytest_collection_modifyitems(config, items):
    available, why = _sandbox()
    if available:
        return
    skip = pytest.mark.skip(reason=NO_SANDBOX.format(why=why))
    for item in items:
        if os.path.basename(str(item.fspath)) in NOTEBOOKS_RUNNING_SCRIPTS or item.get_closest_marker("needs_sandbox"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _config_dir(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets its own empty user config folder (trust store, the user's skills-policy.yaml): the real one is
    never read or written. A test that needs a second session with the same store keeps this variable as it is."""
    folder = tmp_path_factory.mktemp("config")
    monkeypatch.setenv("SKILLS_MAGIC_CONFIG_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def _skip_script_runs_without_a_sandbox(request, monkeypatch):
    """Where no sandbox can be made, a test whose script run would be refused is skipped with the reason (CI
    installs bubblewrap, and turns skips into failures). Tests of the no-sandbox path itself opt out."""
    if request.node.get_closest_marker("sandbox_fallback") or _sandbox()[0]:
        return
    from skills_magic.safety.gate import Gate

    real = Gate._sandbox

    def sandbox_or_skip(self, *args, **kwargs):
        from skills_magic.safety import sandbox

        if not sandbox.availability()[0] and not self.policy.grants(args[0], args[1]).unsandboxed:
            pytest.skip(NO_SANDBOX.format(why=sandbox.availability()[1]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Gate, "_sandbox", sandbox_or_skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if STRICT_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped, but SKILLS_MAGIC_STRICT_SKIPS=1 forbids skips in CI: {reason}"
