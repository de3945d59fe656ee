"""`%%skill run`, `%skills model` and `%skills trace` through a real IPython shell, on the scripted model."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics

from skills_magic.notebook.views import RunView

RUN_MIME = "application/vnd.skills-magic.run+json"
TURNS = """turns:
  - text: Using the skill.
    tool_use:
      - name: activate_skill
        input: {name: csv-profile}
    usage: {input_tokens: 100, output_tokens: 10}
  - text: "**Done.**"
    usage: {input_tokens: 200, output_tokens: 20, cache_read_input_tokens: 90}
"""


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db=None, lock=None, sources="bundled")
    (tmp_path / "turns.yaml").write_text(TURNS, encoding="utf-8")
    with registered_magics(ip) as instance:
        yield instance


def run(ip, line: str, cell: str = "Profile data.csv") -> RunView:
    return ip.run_cell_magic("skill", line, cell)


def test_a_scripted_run_returns_the_answer_calls_usage_and_trace(ip, magics):
    ip.run_line_magic("skills", "model scripted turns.yaml")
    view = run(ip, "run")
    data = view.data()
    assert data["final_text"] == "**Done.**" and data["stop_reason"] == "end_turn" and data["turns"] == 2
    assert [c["name"] for c in data["tool_calls"]] == ["activate_skill"]
    assert data["usage"] == {"input_tokens": 300, "output_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 90}
    assert [e["stage"] for e in data["trace"]] == ["discover", "model", "activate", "model"]
    bundle, metadata = view._repr_mimebundle_()
    assert {"text/plain", "text/html", RUN_MIME} <= set(bundle)
    assert "<strong>Done.</strong>" in bundle["text/html"]
    assert "seconds" in metadata[RUN_MIME] and "seconds" not in bundle[RUN_MIME]  # volatile facts in metadata
    assert view.result is magics.session.last_run
    trace = ip.run_line_magic("skills", "trace")
    assert trace.data()["trace"] == data["trace"]


def test_naming_a_skill_activates_it_without_a_model_decision(ip, magics):
    ip.run_line_magic("skills", "model scripted turns.yaml")
    view = run(ip, 'run lab-notebook-entry "first run" second')
    data = view.data()
    assert data["skill"] == "lab-notebook-entry"
    first_request = magics.session.model_client.requests[0]
    activation = first_request["messages"][0]["content"][0]["text"]
    assert activation.startswith("[skill lab-notebook-entry | bundled | 1.0 | <bundled>/lab-notebook-entry]")
    assert 'ARGUMENTS: "first run" second' in activation  # the line's text after the name, quotes and all


def test_without_a_key_or_a_chosen_model_the_run_explains_how_to_get_one(ip, magics):
    with pytest.raises(UsageError) as error:
        run(ip, "run")
    message = str(error.value)
    assert "ANTHROPIC_API_KEY" in message and "scripted" in message and "replay" in message and "--no-model" in message


def test_no_model_script_runs_without_any_key(ip, magics):
    view = run(ip, "run --no-model --script scripts/profile_csv.py csv-profile -", "a,b\n1,x\n")
    data = view.data()
    assert data["stop_reason"] == "no_model" and '"rows": 1' in data["final_text"]
    assert data["trace"] == [{"stage": "execute", "object": "csv-profile/scripts/profile_csv.py", "bytes": 8, "detail": "exit code 0"}]


def test_a_failing_script_is_reported_with_its_exit_code(ip, magics):
    view = run(ip, "run --no-model --script scripts/profile_csv.py csv-profile no-such-file.csv", "unused stdin")
    data = view.data()
    assert data["stop_reason"] == "script_failed" and "exit code 1" in data["error"]


@pytest.mark.parametrize(
    "line, cell",
    [
        ("", "task"),
        ("walk", "task"),
        ("run", ""),
        ("run --max-turns 0", "task"),
        ("run --max-turns x", "task"),
        ("run --script scripts/profile_csv.py csv-profile", "task"),
        ("run --no-model --script scripts/profile_csv.py", "task"),
        ("run --no-model csv-profile", "task"),
        ("run --dry-run csv-profile", "task"),
        ("run csv-profile --max-turns 0 -- x", "task"),
        ("run --record a.json --replay b.json", "task"),
        ("run 'unclosed", "task"),
        ("run no-such-skill", "task"),
        ("run --replay missing.json", "task"),
    ],
)
def test_bad_run_lines_are_one_line_usage_errors_and_the_magic_keeps_working(ip, magics, line, cell):
    ip.run_line_magic("skills", "model scripted turns.yaml")
    with pytest.raises(UsageError):
        ip.run_cell_magic("skill", line, cell)
    assert run(ip, "run").data()["stop_reason"] == "end_turn"


def test_unknown_skill_names_suggest_close_ones(ip, magics):
    ip.run_line_magic("skills", "model scripted turns.yaml")
    with pytest.raises(UsageError, match="csv-profile"):
        run(ip, "run csv-profil")


@pytest.mark.parametrize("line", ["model scripted", "model replay", "model replay missing.json", "model scripted missing.yaml"])
def test_bad_model_choices_are_usage_errors(ip, magics, line):
    with pytest.raises(UsageError):
        ip.run_line_magic("skills", line)


def test_trace_before_any_run_is_a_usage_error(ip, magics):
    with pytest.raises(UsageError, match="no run yet"):
        ip.run_line_magic("skills", "trace")


def test_model_shows_the_choice_and_the_model_id(ip, magics, monkeypatch):
    assert ip.run_line_magic("skills", "model").data() == {
        "client": "auto", "model": "claude-sonnet-5-5", "detail": "runs use none yet (no ANTHROPIC_API_KEY)"}
    monkeypatch.setenv("SKILLS_MAGIC_MODEL", "opus")
    assert ip.run_line_magic("skills", "model").data()["model"] == "claude-opus-5-5"
    ip.run_line_magic("skills", "model claude-haiku-5-5")
    assert ip.run_line_magic("skills", "model").data()["model"] == "claude-haiku-5-5"
    view = ip.run_line_magic("skills", "model scripted turns.yaml")
    assert view.data() == {"client": "scripted", "model": "claude-haiku-5-5", "detail": "turns.yaml"}
    ip.run_line_magic("skills", "model auto")
    assert ip.run_line_magic("skills", "model").data()["client"] == "auto"


def test_with_a_key_the_default_client_is_the_anthropic_sdk(ip, magics, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    client = magics.session.client()
    assert client.name == "anthropic" and "sk-test" not in repr(client)


def test_an_interactive_kernel_streams_the_answer_then_shows_the_run_once(ip, magics, monkeypatch):
    shown = []

    class Handle:
        def update(self, value):
            shown.append(value.data)

    monkeypatch.setattr("IPython.display.display", lambda *a, **k: Handle())
    monkeypatch.setattr(ip, "kernel", types.SimpleNamespace(_allow_stdin=True), raising=False)
    ip.run_line_magic("skills", "model scripted turns.yaml")
    view = run(ip, "run")
    assert "Using the skill." in "".join(shown)  # the text arrived while the run was going
    assert shown[-1] == ""  # and the streamed copy is cleared: the returned view shows the finished run once
    assert view.data()["final_text"] == "**Done.**"


def test_load_ext_warms_the_sdk_in_the_background_only_when_a_key_is_set(tmp_path):
    code = (
        "import os, sys\n"
        "from IPython.testing.globalipapp import start_ipython\n"
        "ip = start_ipython()\n"
        "ip.run_line_magic('load_ext', 'skills_magic')\n"
        "from skills_magic.models import anthropic as m\n"
        "loaded_at_load_ext = 'anthropic' in sys.modules and m._warm is None\n"
        "if m._warm is not None: m._warm.join()\n"
        "print(m._warm is not None, 'anthropic' in sys.modules, loaded_at_load_ext)\n"
    )
    env_without = {k: v for k, v in __import__("os").environ.items() if k != "ANTHROPIC_API_KEY"}
    cold = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_without, cwd=tmp_path)
    warm = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**env_without, "ANTHROPIC_API_KEY": "sk-test-not-a-real-key"})
    assert cold.stdout.split() == ["False", "False", "False"], cold.stderr
    assert warm.stdout.split() == ["True", "True", "False"], warm.stderr


def test_the_run_notebook_cassette_holds_no_absolute_path():
    cassette = Path(__file__).resolve().parent.parent / "notebooks" / "cassettes" / "weather.json"
    text = cassette.read_text(encoding="utf-8")
    assert str(Path(__file__).resolve().parent.parent) not in text and "/home/" not in text and "/root/" not in text


def test_retries_are_configurable_from_the_environment(monkeypatch):
    from skills_magic.models.anthropic import DEFAULT_MAX_RETRIES, AnthropicModel

    monkeypatch.delenv("SKILLS_MAGIC_MAX_RETRIES", raising=False)
    assert AnthropicModel("m").max_retries == DEFAULT_MAX_RETRIES
    monkeypatch.setenv("SKILLS_MAGIC_MAX_RETRIES", "5")
    assert AnthropicModel("m").max_retries == 5
    assert AnthropicModel("m", max_retries=0).max_retries == 0
    monkeypatch.setenv("SKILLS_MAGIC_MAX_RETRIES", "lots")
    with pytest.raises(ValueError, match="SKILLS_MAGIC_MAX_RETRIES"):
        AnthropicModel("m")
