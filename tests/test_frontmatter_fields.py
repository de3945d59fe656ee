"""The frontmatter fields do what they say in the native harness (issue 16, point 4): `when_to_use` and the per-entry
cap in the listing, `user-invocable`, `paths`, `model` and `effort`, and no catalog at all when no skill is visible.
Unit tests on the agent, then the real IPython shell (scripted model, asserting what the requests contain), then
one real kernel (nbclient) for when_to_use, user-invocable and paths together."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill

from skills_magic.models.scripted import ScriptedModel
from skills_magic.runs import fields
from skills_magic.runs.agent import SYSTEM_INSTRUCTIONS, Agent
from skills_magic.skills.catalog import Catalog, Source
from skills_magic.skills.listing import ENTRY_CAP_CHARS, text_listing, xml_listing

DESCRIPTION = "Profile tabular data files. Use when a CSV needs checking."
WHEN = "When the user hands over a table and asks what is in it."
LONG = "Describes a thing at length. " * 80  # 2,320 characters: over Claude Code's 1,536 cap


def build(root: Path) -> Path:
    make_skill(root / "profile", f"name: profile\ndescription: {DESCRIPTION}\nwhen_to_use: {WHEN}\n")
    make_skill(root / "wordy", f"name: wordy\ndescription: {LONG.strip()}\n")
    make_skill(root / "hidden-from-user", "name: hidden-from-user\ndescription: Internal helper. Use when the model "
                                          "needs it.\nuser-invocable: false\n", "Helper steps.\n")
    make_skill(root / "csv-only", "name: csv-only\ndescription: Checks CSV files. Use when a CSV is given.\n"
                                  "paths: ['*.csv', 'data/**/*.tsv']\n", "CSV steps.\n")
    make_skill(root / "opus-task", "name: opus-task\ndescription: Hard reasoning. Use when the task is hard.\n"
                                   "model: claude-opus-4-6\neffort: high\n", "Think hard.\n")
    make_skill(root / "haiku-task", "name: haiku-task\ndescription: Quick answers. Use when the task is small.\n"
                                    "model: haiku\neffort: low\n", "Be quick.\n")
    return root


def load(root: Path):
    return Catalog([Source("session", str(root), explicit=True)]).scan().skills


def skills_named(root: Path, *names: str):
    return [s for s in load(root) if s.name in names]


def agent(skills, turns=(), **options) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(list(turns))
    return Agent(skills, model, "claude-sonnet-4-5", show_path=str, session_id="s", **options), model


def activate(name: str) -> dict:
    return {"tool_use": [{"name": "activate_skill", "input": {"name": name}}]}


@pytest.fixture
def root(tmp_path) -> Path:
    return build(tmp_path / "skills")


# --- a. no skill visible: no catalog, no instructions, no skill tool ---------------------------------------------------


def test_with_no_skill_visible_the_request_has_no_catalog_instructions_or_skill_tools(root):
    from skills_magic.runs.pytools import ToolRegistry

    def brew(tea: str) -> str:
        """Brew a tea."""
        return tea

    tools = ToolRegistry()
    tools.add(brew)
    one, model = agent(skills_named(root, "csv-only"), ["Done."], python_tools=tools, ledger=("sci.x", lambda d: ("", None)))
    result = one.run("Hello")
    request = model.requests[0]
    assert "system" not in request  # no instructions and no empty <available_skills>
    assert [t["name"] for t in request["tools"]] == ["experiment", "brew"]
    assert result.trace[0].stage == "discover" and result.trace[0].bytes == 0
    assert "1 left out by `paths`" in result.trace[0].detail


def test_an_explicit_skill_with_no_catalog_keeps_its_file_tools_but_no_activate_skill(root):
    one, model = agent(skills_named(root, "csv-only"), ["Done."])
    one.run("Check it", skill="csv-only")
    request = model.requests[0]
    assert "system" not in request
    assert [t["name"] for t in request["tools"]] == ["read_skill_resource", "run_skill_script"]
    assert "CSV steps." in request["messages"][0]["content"][0]["text"]


def test_with_a_skill_visible_the_system_prompt_is_as_before(root):
    one, model = agent(skills_named(root, "profile"), ["Done."])
    one.run("Hello")
    assert model.requests[0]["system"][0]["text"].startswith(SYSTEM_INSTRUCTIONS + "\n\n<available_skills>")
    assert model.requests[0]["tools"][0]["input_schema"]["properties"]["name"]["enum"] == ["profile"]


# --- b. when_to_use and the per-entry cap ----------------------------------------------------------------------------


def test_when_to_use_joins_the_description_in_both_listings(root):
    skills = skills_named(root, "profile")
    _, text = text_listing(skills, None)
    assert text.splitlines()[1] == f"- profile: {DESCRIPTION} - {WHEN}"
    one, _ = agent(skills)
    assert f"<description>\n{DESCRIPTION} - {WHEN}\n</description>" in one.system


def test_when_to_use_counts_in_the_budget(root):
    skills = skills_named(root, "profile")
    _, full = text_listing(skills, None)
    assert len(f"## session\n- profile: {DESCRIPTION}\n") < len(full) - 1  # the description alone would fit
    assert text_listing(skills, len(full) + 1)[0].marker() is None  # the measure counts the last newline
    listing, text = text_listing(skills, len(full) - 1)
    assert listing.truncated and WHEN not in text


def test_an_entry_is_capped_at_1536_characters_and_the_marker_says_so(root):
    whole, _ = text_listing(skills_named(root, "wordy", "profile"), None)  # no budget (`--budget 0`): everything whole
    assert whole.capped == 0 and len(next(e for e in whole.entries() if e.name == "wordy").description) > ENTRY_CAP_CHARS
    listing, text = text_listing(skills_named(root, "wordy", "profile"))  # the default budget, as the model's catalog
    wordy = next(e for e in listing.entries() if e.name == "wordy")
    assert len(wordy.description) == ENTRY_CAP_CHARS and wordy.description.endswith("…")
    assert listing.capped == 1
    assert text.splitlines()[-1].startswith("[skills listing truncated: showed 2 of 2 skills; capped 1 entry at 1,536 characters;")
    one, _ = agent(skills_named(root, "wordy"))
    assert "capped 1 entry at 1,536 characters" in one.system


def test_to_prompt_keeps_the_raw_description_as_skills_ref_does(root):
    _, xml = xml_listing(skills_named(root, "wordy", "profile"))  # the default: skills-ref's listing
    assert LONG.strip() in xml and WHEN not in xml and "[skills listing" not in xml


# --- c. user-invocable -----------------------------------------------------------------------------------------------


def test_a_skill_that_is_not_user_invocable_is_still_in_the_models_catalog(root):
    one, _ = agent(load(root))
    assert "hidden-from-user" in one.visible
    with pytest.raises(fields.NotUserInvocable, match="not user-invocable.*the model may still choose it"):
        fields.check_user_invocable(next(s for s in load(root) if s.name == "hidden-from-user"))


# --- d. paths --------------------------------------------------------------------------------------------------------


def test_paths_match_gitignore_patterns_against_the_runs_files(root, tmp_path):
    csv_only = skills_named(root, "csv-only")[0]
    assert fields.path_patterns(csv_only) == ["*.csv", "data/**/*.tsv"]
    assert fields.matches_paths(csv_only, ["df.csv"]) and fields.matches_paths(csv_only, ["sub/df.csv"])
    assert fields.matches_paths(csv_only, ["data/a/b.tsv"]) and not fields.matches_paths(csv_only, ["b.tsv"])
    assert not fields.matches_paths(csv_only, []) and fields.matches_paths(skills_named(root, "profile")[0], [])
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.tsv").write_text("a\tb\n")

    class Written:
        path = "/tmp/inputs/df.csv"

    assert fields.run_files([Written()], ["data/x.tsv", "no-such.csv", "word"], str(tmp_path)) == ["df.csv", "data/x.tsv"]


def test_a_paths_skill_is_listed_only_when_a_file_of_the_run_matches(root):
    without, _ = agent(load(root))
    assert "csv-only" not in without.visible and without.left_out_by_paths == 1
    with_csv, _ = agent(load(root), files=["df.csv"])
    assert "csv-only" in with_csv.visible and with_csv.left_out_by_paths == 0


def test_a_single_pattern_string_works_too(tmp_path):
    make_skill(tmp_path / "s" / "md", "name: md\ndescription: Markdown. Use when markdown.\npaths: docs/*.md\n")
    skill = load(tmp_path / "s")[0]
    assert fields.matches_paths(skill, ["docs/a.md"]) and not fields.matches_paths(skill, ["a.md"])


# --- e. model and effort ---------------------------------------------------------------------------------------------


def test_an_activated_skills_model_and_effort_change_the_next_requests(root):
    one, model = agent(load(root), [activate("opus-task"), "Done."])
    result = one.run("A hard task")
    first, second = model.requests
    assert first["model"] == "claude-sonnet-4-5" and "output_config" not in first
    assert second["model"] == "claude-opus-4-6" and second["output_config"] == {"effort": "high"}
    activation = next(e for e in result.trace if e.stage == "activate")
    assert activation.detail == "model claude-opus-4-6; effort high"


def test_effort_is_not_sent_to_a_model_without_the_setting_and_the_trace_says_so(root):
    one, model = agent(load(root), [activate("haiku-task"), "Done."])
    result = one.run("A small task")
    assert model.requests[1]["model"] == "claude-haiku-5-5" and "output_config" not in model.requests[1]
    activation = next(e for e in result.trace if e.stage == "activate")
    assert "effort low: not sent, the API has no effort setting for claude-haiku-5-5" in activation.detail


def test_model_fixed_by_the_user_is_kept_and_the_trace_says_so(root):
    one, model = agent(load(root), [activate("opus-task"), "Done."], model_fixed=True)
    result = one.run("A hard task")
    assert model.requests[1]["model"] == "claude-sonnet-4-5" and "output_config" not in model.requests[1]
    detail = next(e for e in result.trace if e.stage == "activate").detail
    assert "model claude-opus-4-6: not used, --model chose claude-sonnet-4-5" in detail
    assert "no effort setting for claude-sonnet-4-5" in detail


@pytest.mark.parametrize("model_id, supported", [
    ("claude-opus-4-5", True), ("claude-opus-4-5-20251101", True), ("claude-opus-4-6", True),
    ("claude-sonnet-4-6", True), ("claude-sonnet-4-5", False), ("claude-opus-4-1", False),
    ("claude-opus-4-20250514", False), ("claude-haiku-4-5", False), ("claude-mythos-preview", True), ("scripted", False),
])
def test_which_models_take_an_effort(model_id, supported):
    assert fields.effort_supported(model_id) is supported


def test_an_unknown_effort_level_is_not_sent():
    levels = "low, medium, high, xhigh, max"
    assert fields.effort_setting(7, "claude-opus-4-6") == (None, f"effort 7: not sent, the API's effort levels are {levels}")
    assert fields.effort_setting("High", "claude-opus-4-6") == ("high", "effort high")


# --- through the real IPython shell ----------------------------------------------------------------------------------


@pytest.fixture
def shell(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="audit.sqlite", lock=None, sources="path", path=build(tmp_path / "skills"))
    with registered_magics(ip) as instance:
        yield instance


def scripted(ip, tmp_path, text: str):
    (tmp_path / "turns.yaml").write_text(text, encoding="utf-8")
    ip.run_line_magic("skills", "model scripted turns.yaml")


def test_shell_no_visible_skill_leaves_the_catalog_out(ip, shell, tmp_path, monkeypatch):
    for name in os.listdir(tmp_path / "skills"):  # only the paths skill is left, and no file is given
        if name != "csv-only":
            shutil.rmtree(tmp_path / "skills" / name)
    scripted(ip, tmp_path, "turns:\n  - text: Hello.\n")
    ip.run_cell_magic("skill", "run", "Say hello")
    request = shell.session.model_client.requests[0]
    assert "system" not in request and request["tools"] == []


def test_shell_when_to_use_and_the_cap_are_in_the_requests_catalog(ip, shell, tmp_path):
    scripted(ip, tmp_path, "turns:\n  - text: Hello.\n")
    ip.run_cell_magic("skill", "run", "Say hello")
    system = shell.session.model_client.requests[0]["system"][0]["text"]
    assert f"{DESCRIPTION} - {WHEN}" in system and "capped 1 entry at 1,536 characters" in system
    assert "<name>\ncsv-only\n</name>" not in system  # no file of the run matches its paths


def test_shell_user_cannot_run_a_skill_that_is_not_user_invocable(ip, shell, tmp_path):
    scripted(ip, tmp_path, "turns:\n  - text: Hello.\n")
    with pytest.raises(UsageError, match="^skill 'hidden-from-user' is not user-invocable .*may still choose it$"):
        ip.run_cell_magic("skill", "run hidden-from-user", "Do it")
    assert shell.session.model_client.requests == []  # refused before any request
    view = ip.run_cell_magic("skill", "run", "Do it")  # the model may still choose it
    assert "hidden-from-user" in shell.session.model_client.requests[0]["system"][0]["text"]
    assert view.data()["final_text"] == "Hello."


def test_shell_a_with_input_or_a_file_argument_makes_the_paths_skill_visible(ip, shell, tmp_path):
    pytest.importorskip("pandas")
    import pandas as pd

    ip.user_ns["df"] = pd.DataFrame({"a": [1]})
    scripted(ip, tmp_path, "turns:\n  - text: One.\n  - text: Two.\n  - text: Three.\n")
    ip.run_cell_magic("skill", "run --with df", "Check it")
    (tmp_path / "table.csv").write_text("a\n1\n")
    ip.run_cell_magic("skill", "run profile table.csv", "Check it")
    ip.run_cell_magic("skill", "run", "Check it")
    first, second, third = (r["system"][0]["text"] for r in shell.session.model_client.requests)
    assert "<name>\ncsv-only\n</name>" in first and "<name>\ncsv-only\n</name>" in second
    assert "<name>\ncsv-only\n</name>" not in third
    assert "1 left out by `paths`" in shell.session.last_run.trace[0].detail


def test_shell_a_skill_the_model_activates_switches_the_model_and_sends_its_effort(ip, shell, tmp_path):
    scripted(ip, tmp_path, "turns:\n  - tool_use:\n      - name: activate_skill\n        input: {name: opus-task}\n"
                           "  - text: Done.\n")
    ip.run_cell_magic("skill", "run", "A hard task")
    first, second = shell.session.model_client.requests
    assert "output_config" not in first and first["model"] != "claude-opus-4-6"
    assert second["model"] == "claude-opus-4-6" and second["output_config"] == {"effort": "high"}


def test_shell_an_explicitly_run_skill_uses_its_model_and_effort_from_the_first_request(ip, shell, tmp_path):
    scripted(ip, tmp_path, "turns:\n  - text: Done.\n")
    ip.run_cell_magic("skill", "run opus-task", "A hard task")
    request = shell.session.model_client.requests[0]
    assert request["model"] == "claude-opus-4-6" and request["output_config"] == {"effort": "high"}


# --- in a real kernel --------------------------------------------------------------------------------------------------


def test_a_real_kernel_lists_when_to_use_refuses_a_user_run_and_follows_paths(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    build(tmp_path / "skills")
    (tmp_path / "turns.yaml").write_text("turns:\n  - text: One.\n  - text: Two.\n", encoding="utf-8")
    (tmp_path / "table.csv").write_text("a\n1\n", encoding="utf-8")
    cells = ["%load_ext skills_magic\n%skills model scripted turns.yaml",
             ("try:\n    get_ipython().run_cell_magic('skill', 'run hidden-from-user', 'Do it')\n"
              "except Exception as error:\n    print('refused:', error)"),
             "%%skill run\nSay hello",
             "%%skill run profile table.csv\nCheck it",
             ("model = get_ipython().magics_manager.registry['SkillsMagics'].session.model_client\n"
              "for request in model.requests:\n"
              "    system = request['system'][0]['text']\n"
              "    print('when_to_use' if ' - When the user hands over' in system else 'no when_to_use',\n"
              "          'csv-only' if '<name>\\ncsv-only\\n</name>' in system else 'no csv-only',\n"
              "          'hidden-from-user' if 'hidden-from-user' in system else 'no hidden-from-user')")]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    # the kernel inherits this environment: only the skills folder written above, no key, no model choice
    notebook_folder(monkeypatch, tmp_path, db="db.sqlite", lock=None, sources="path", path=tmp_path / "skills")
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    refused = "".join(o.get("text", "") for o in notebook.cells[1].outputs)
    assert refused.startswith("refused: skill 'hidden-from-user' is not user-invocable")
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs).splitlines()
    assert printed == ["when_to_use no csv-only hidden-from-user", "when_to_use csv-only hidden-from-user"]


def _kernel_run(tmp_path: Path, monkeypatch, skills: Path, turns: str, cells: list[str]):
    import nbformat
    from nbclient import NotebookClient

    (tmp_path / "turns.yaml").write_text(turns, encoding="utf-8")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in
                                               ["%load_ext skills_magic\n%skills model scripted turns.yaml", *cells]])
    notebook_folder(monkeypatch, tmp_path, db="db.sqlite", lock=None, sources="path", path=skills)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return ["".join(o.get("text", "") for o in cell.outputs) for cell in notebook.cells]


PRINT_REQUESTS = ("import json\nmodel = get_ipython().magics_manager.registry['SkillsMagics'].session.model_client\n"
                  "for request in model.requests:\n"
                  "    print(json.dumps({k: request.get(k) for k in ('model', 'system', 'tools', 'output_config')}))")


def test_a_real_kernel_caps_entries_and_switches_model_and_effort_when_a_skill_activates(tmp_path, monkeypatch):
    import json

    printed = _kernel_run(tmp_path, monkeypatch, build(tmp_path / "skills"),
                          "turns:\n" + "  - tool_use: [{name: activate_skill, input: {name: opus-task}}]\n  - text: Done.\n" * 2,
                          ["%%skill run --model claude-sonnet-4-5\nA hard task", "%%skill run\nA hard task",
                           PRINT_REQUESTS])
    requests = [json.loads(line) for line in printed[-1].splitlines()]
    assert len(requests) == 4
    fixed_first, fixed_second, first, second = requests
    assert fixed_second["model"] == "claude-sonnet-4-5" and fixed_second["output_config"] is None  # --model wins
    assert fixed_first["model"] == "claude-sonnet-4-5" and first["model"] != "claude-opus-4-6"
    assert second["model"] == "claude-opus-4-6" and second["output_config"] == {"effort": "high"}
    system = first["system"][0]["text"]
    entry = system[system.index("<name>\nwordy\n</name>"):].split("</description>")[0]
    assert entry.endswith("…\n") or entry.rstrip().endswith("…")  # the 2,320-character description is capped
    assert len(entry.split("<description>\n")[1].rstrip("\n")) == ENTRY_CAP_CHARS


def test_a_real_kernel_with_no_visible_skill_sends_no_catalog_instructions_or_skill_tools(tmp_path, monkeypatch):
    import json

    skills = tmp_path / "skills"
    make_skill(skills / "manual-only", "name: manual-only\ndescription: Only when named. Use when named.\n"
                                       "disable-model-invocation: true\n", "Manual steps.\n")
    printed = _kernel_run(tmp_path, monkeypatch, skills, "turns:\n  - text: Hello.\n  - text: Named.\n",
                          ["%%skill run\nSay hello", "%%skill run manual-only\nDo it", PRINT_REQUESTS])
    plain, named = [json.loads(line) for line in printed[-1].splitlines()]
    assert plain["system"] is None and plain["tools"] == []  # disable-model-invocation as today: nothing visible
    assert SYSTEM_INSTRUCTIONS not in json.dumps(plain)
    assert {t["name"] for t in named["tools"]} == {"read_skill_resource", "run_skill_script"}  # named: its file tools
