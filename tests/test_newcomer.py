"""What a newcomer tripped over (issue 15, point 7), each met as a newcomer meets it: through a real IPython shell,
or a real kernel where what the notebook shows is the point (a traceback, a progress bar). A missing key, a script's
output read as Markdown, an eval of an unknown skill, a skipped skill invisible by name, plurals, counts, paths,
help, typos, and how tables and a shown body are drawn (tests/test_browser_rendering.py: how JupyterLab draws them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from IPython.core.error import UsageError
from nbclient import NotebookClient
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill, write_file

from skills_magic.models.base import NoModelConfigured
from skills_magic.notebook.views.base import plural, table_html
from skills_magic.notebook.views.evals import EvalView
from skills_magic.notebook.views.runs import RunView
from skills_magic.paths import display_path
from skills_magic.runs.agent import RunResult
from skills_magic.runs.evals import EvalItem, EvalReport, RunRecord

REPO = Path(__file__).resolve().parent.parent
ACTIVATION_SET = REPO / "notebooks" / "evals" / "activation.yaml"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
NO_REQUESTS_HERE = "http://127.0.0.1:9"  # the discard port: a request that went out would fail to connect, not this
# a script's output that Markdown would mangle: bold, italics, a heading, a list, indented JSON
MARKDOWN_LOOKALIKE = '__init__ is called\n2*3*4 = 24\n# x\n* not a list\n{\n  "a": {\n    "b": [1, 2]\n  }\n}\n'
PRINTER = f"""import os, sys
sys.stdout.write({MARKDOWN_LOOKALIKE!r})
with open(os.path.join(os.environ["SKILLS_MAGIC_OUTPUT"], "report.txt"), "w") as out:
    out.write("hello")
"""
BROKEN_YAML = "---\nname: bad-yaml\ndescription: [unclosed\n---\n# Body\n"


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """The notebook's folder: its own database, only the project and bundled skills, no key from the machine."""
    notebook_folder(monkeypatch, tmp_path, db=".skills/test.sqlite", lock=None, sources="project,bundled",
                    forget=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_PROFILE",
                            "SKILLS_MAGIC_MODEL", "SKILLS_MAGIC_PATH"))
    return tmp_path


@pytest.fixture
def skills(ip, folder):
    """`skills("list")` runs `%skills list` in a fresh session in `folder`."""
    with registered_magics(ip) as instance:
        yield lambda line: ip.run_line_magic("skills", line), instance


def run_cells(folder: Path, sources: list[str]) -> list:
    """A notebook of `sources` executed in a real kernel in `folder` (errors kept as outputs): its cells."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    return notebook.cells


def errors_of(cell) -> list:
    """Tracebacks the cell showed (a bug, or an error the magics let through)."""
    return [o for o in cell.outputs if o.output_type == "error"]


def usage_errors(cell) -> list[str]:
    """The one-line errors the cell showed: IPython prints a UsageError to stderr as `UsageError: ...`."""
    return [o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"
            and o.text.startswith("UsageError: ")]


# --- `%skills model anthropic` without a key ------------------------------------------------------------------------


@pytest.mark.parametrize("config", ["no config folder", "an empty config folder"])
def test_anthropic_without_a_key_says_what_auto_says_before_any_request(ip, skills, folder, monkeypatch, config):
    run_skills, _ = skills
    monkeypatch.setenv("ANTHROPIC_BASE_URL", NO_REQUESTS_HERE)
    if config == "no config folder":  # what a newcomer has: the SDK finds no profile, and resolves no credential
        monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
        (folder / "home").mkdir()
        monkeypatch.setenv("HOME", str(folder / "home"))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(folder / "home" / ".config"))
    else:  # the SDK looks for the default profile there and raises its CredentialsError
        (folder / "config").mkdir()
        monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(folder / "config"))

    assert run_skills("model anthropic").text().startswith("model: anthropic (")
    with pytest.raises(UsageError) as raised:
        ip.run_cell_magic("skill", "run", "Hello.")

    assert str(raised.value) == str(NoModelConfigured())  # the paragraph `%skills model auto` gives, word for word
    assert "TypeError" not in str(raised.value) and "authentication method" not in str(raised.value)


def test_anthropic_with_a_key_still_builds_its_client(folder, monkeypatch):
    from skills_magic.models.anthropic import AnthropicModel

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake-newcomer-KEY")
    assert AnthropicModel("claude-test-1").client().api_key == "sk-ant-fake-newcomer-KEY"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "ollama")  # Ollama's and llama.cpp's way: a bearer token
    assert AnthropicModel("claude-test-1").async_client().auth_token == "ollama"


def test_in_a_kernel_the_missing_key_is_one_line_and_no_traceback(folder, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", NO_REQUESTS_HERE)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    (folder / "home").mkdir()
    monkeypatch.setenv("HOME", str(folder / "home"))
    cells = run_cells(folder, ["%load_ext skills_magic\n%skills model anthropic", "%%skill run\nHello."])

    assert errors_of(cells[0]) == [] and usage_errors(cells[0]) == []
    assert errors_of(cells[1]) == []  # no traceback at all
    assert [o.output_type for o in cells[1].outputs] == ["stream"]
    assert usage_errors(cells[1]) == [f"UsageError: {NoModelConfigured()}\n"]


# --- a run's HTML -------------------------------------------------------------------------------------------------


def a_script_run(stdout: str, outputs=()) -> RunResult:
    result = RunResult(task="", skill="printer", client="none", model="-", final_text=stdout, stop_reason="no_model")
    result.outputs = [{"script": "printer/scripts/show.py", "path": path, "bytes": size, "file": f"/elsewhere/{path}"}
                      for path, size in outputs]
    return result


def test_a_scripts_output_is_literal_text_in_html_and_only_a_models_answer_is_markdown():
    html = RunView(a_script_run(MARKDOWN_LOOKALIKE)).html()

    for markup in ("<strong>", "<em>", "<h1", "<ul>", "<li>"):
        assert markup not in html, markup
    stdout = re.search(r"<pre class='skills-magic-stdout'[^>]*>(.*?)</pre>", html, re.S).group(1)
    assert stdout == MARKDOWN_LOOKALIKE.rstrip("\n").replace('"', "&quot;")  # every space and line kept, escaped
    assert "<script>" not in RunView(a_script_run("<script>alert(1)</script>")).html()

    answer = RunResult(task="t", skill=None, client="scripted", model="m", final_text="**Done.** __init__\n\n# Report")
    answered = RunView(answer).html()
    assert "<strong>Done.</strong>" in answered and "<h1>Report</h1>" in answered  # the model's own Markdown


def test_the_files_the_scripts_wrote_are_in_the_html_as_in_the_text():
    view = RunView(a_script_run("ok\n", [("report.txt", 5), ("one.bin", 1)]))

    assert "files the scripts wrote (in their scratch folders):" in view.text()
    assert "printer/scripts/show.py: one.bin (1 byte)" in view.text()
    html = view.html()
    assert "files the scripts wrote (in their scratch folders) (2)" in html
    rows = re.findall(r"<tr><td[^>]*>([^<]*)</td><td[^>]*>([^<]*)</td><td[^>]*>([^<]*)</td></tr>", html)
    assert ("printer/scripts/show.py", "report.txt", "5") in rows and ("printer/scripts/show.py", "one.bin", "1") in rows
    assert "/elsewhere" not in html  # where the files are on this machine stays in the metadata


@pytest.mark.needs_sandbox
def test_a_real_script_run_shows_its_output_as_printed_and_the_file_it_wrote(ip, skills, folder):
    make_skill(folder / "skills" / "printer", name="printer", description="Prints text. Use when testing.")
    write_file(folder / "skills" / "printer", "scripts/show.py", PRINTER)

    view = ip.run_cell_magic("skill", "run --no-model --script scripts/show.py printer", "\n")

    assert view.text().startswith(MARKDOWN_LOOKALIKE.rstrip("\n"))  # text/plain was right, and stays so
    html = view._repr_mimebundle_()[0]["text/html"]
    assert "<strong>" not in html and "<em>" not in html and "<h1" not in html
    assert "__init__ is called\n2*3*4 = 24\n# x\n* not a list\n{\n  &quot;a&quot;: {" in html
    assert "files the scripts wrote" in html and ">report.txt</td>" in html


# --- evals --------------------------------------------------------------------------------------------------------


class CountingModel:
    """A model client that counts its calls and answers with no tool call (nothing activated)."""

    name = "counting"

    def __init__(self):
        self.calls = 0

    def create(self, request, on_text=None):
        self.calls += 1
        return {"id": f"msg_{self.calls}", "type": "message", "role": "assistant", "model": request["model"],
                "content": [{"type": "text", "text": "No skill."}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1}}

    async def acreate(self, request):
        return self.create(request)


def prompt_set(folder: Path, expected: str) -> str:
    (folder / "evals").mkdir(exist_ok=True)
    (folder / "evals" / "set.yaml").write_text(
        "prompts:\n"
        "  - {id: D1, category: direct, expected: [csv-profile], prompt: 'Profile this CSV file.'}\n"
        f"  - {{id: D2, category: direct, expected: [{expected}], prompt: 'Do the other thing.'}}\n"
        "  - {id: N1, category: negative, prompt: 'What time is it?'}\n", encoding="utf-8")
    return "evals/set.yaml"


@pytest.mark.parametrize(("expected", "suggestion"), [("no-such-skill", None), ("csv-profil", "csv-profile")])
def test_an_eval_expecting_an_unknown_skill_is_refused_before_any_model_call(ip, skills, folder, expected, suggestion):
    run_skills, instance = skills
    model = CountingModel()
    instance.session.model_client = model

    with pytest.raises(UsageError) as raised:
        run_skills(f"eval {prompt_set(folder, expected)} --runs 1")

    message = str(raised.value)
    assert "\n" not in message and f"{expected!r} (item D2" in message and "not in the catalog" in message
    assert (f"did you mean {suggestion}" in message) if suggestion else ("did you mean" not in message)
    assert model.calls == 0

    assert run_skills(f"eval {prompt_set(folder, 'lab-notebook-entry')} --runs 1").reports  # a right set runs
    assert model.calls == 3


def test_in_a_kernel_a_refused_prompt_set_shows_its_error_and_no_progress_bar(folder):
    (folder / "evals").mkdir()
    (folder / "evals" / "activation.yaml").write_text(ACTIVATION_SET.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "evals" / "broken.yaml").write_text("prompts: [unclosed\n", encoding="utf-8")
    (folder / "evals" / "no-prompt.yaml").write_text("prompts:\n  - {id: A}\n", encoding="utf-8")
    prompt_set(folder, "no-such-skill")
    cells = run_cells(folder, [
        "%env SKILLS_MAGIC_SOURCES=bundled\n%load_ext skills_magic\n%skills model keywords",
        "%skills eval evals/broken.yaml", "%skills eval evals/no-prompt.yaml", "%skills eval evals/missing.yaml",
        "%skills eval evals/set.yaml --runs 1", "%skills eval evals/activation.yaml --runs 1",
    ])

    for cell in cells[1:5]:
        assert errors_of(cell) == [] and len(usage_errors(cell)) == 1, cell.outputs
        assert not [o for o in cell.outputs if WIDGET_MIME in o.get("data", {})], cell.source  # no bar before it
    assert "'no-such-skill' (item D2)" in usage_errors(cells[4])[0]
    assert errors_of(cells[5]) == [] and usage_errors(cells[5]) == []
    assert [o for o in cells[5].outputs if WIDGET_MIME in o.get("data", {})]  # a run that begins shows its bar


# --- a skill skipped for broken YAML ------------------------------------------------------------------------------


@pytest.fixture
def broken(skills, folder):
    run_skills, _ = skills
    (folder / "skills" / "bad-yaml").mkdir(parents=True)
    (folder / "skills" / "bad-yaml" / "SKILL.md").write_text(BROKEN_YAML, encoding="utf-8")
    make_skill(folder / "skills" / "fine", name="fine", description="Does a fine thing. Use when testing.")
    return run_skills


@pytest.mark.parametrize("command", ["show", "lint"])
def test_show_and_lint_of_a_skipped_skill_say_it_was_skipped_why_where(broken, command):
    with pytest.raises(UsageError) as raised:
        broken(f"{command} bad-yaml")

    message = str(raised.value)
    assert "\n" not in message and "no skill named" not in message
    assert "'bad-yaml' was skipped" in message
    assert re.search(r"skills/bad-yaml/SKILL\.md:\d+: \[yaml-error\] ", message), message


def test_validate_of_a_skipped_skill_gives_its_verdict_marked_skipped(broken):
    view = broken("validate bad-yaml")

    first, problem, *_ = view.text().splitlines()
    assert first == "INVALID skills/bad-yaml (skipped by the catalog: not listed, cannot be used)"
    assert re.match(r"\s+✗ skills/bad-yaml/SKILL\.md:\d+:\d+: \[yaml-error\]", problem), problem
    assert view.data()["results"][0]["skipped"] is True
    assert "skipped" not in broken("validate fine").data()["results"][0]


def test_lint_of_everything_lists_the_skipped_skill_with_why(broken):
    view = broken("lint")

    lines = view.text().splitlines()
    [skipped] = [line for line in lines if line.startswith("bad-yaml:")]
    assert re.match(r"bad-yaml: skipped, not linted: skills/bad-yaml/SKILL\.md:\d+: \[yaml-error\] ", skipped)
    assert re.fullmatch(r"\d of 7 descriptions clean; 1 skill skipped by the catalog", lines[-1]), lines[-1]
    assert list(view.data()["skipped"]) == ["bad-yaml"]


def test_an_unknown_name_is_still_no_skill_named_with_close_matches(broken):
    with pytest.raises(UsageError, match=r"no skill named 'fin' in the catalog \(did you mean fine\?\)"):
        broken("show fin")


# --- words, counts and paths --------------------------------------------------------------------------------------


def test_plural_says_one_thing_and_many_things():
    assert [plural(n, "run") for n in (0, 1, 2, 1234)] == ["0 runs", "1 run", "2 runs", "1,234 runs"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"


def test_an_eval_of_one_run_says_1_run_and_1_call():
    item = EvalItem("D1", "Profile it.", ("csv-profile",))
    report = EvalReport("plain", [item], [RunRecord("D1", 1, ["csv-profile"], calls=1)], runs=1)

    headline = EvalView([report]).text().splitlines()[0]
    assert "; 1 run, 1 call, " in headline and "1 runs" not in headline and "1 calls" not in headline


def test_the_live_vote_board_counts_one_vote():
    from skills_magic.notebook.widgets import VoteBoard
    from skills_magic.runs.verify import Claim

    board = VoteBoard([Claim(claim="The sky is blue.", quote="blue", source="notes.md")], 1)
    board.update(board.claims[0], board.claims[0].votes[0])
    assert "0 of 1 vote in" in board.html.value


def test_a_written_skill_with_one_finding_says_1_lint_finding(ip, skills, folder):
    text = ("---\nname: data-helper\ndescription: I summarise data tables into short reports with counts and types. "
            "Use when the user asks for a summary of a table.\n---\nBody\n")
    view = ip.run_cell_magic("skill", "write data-helper", text)

    findings = view.data()["lint"]
    assert len(findings) == 1, findings  # first-person only: one finding, named as one
    assert "1 lint finding" in view.text() and "1 lint findings" not in view.text()


def test_list_of_one_source_counts_that_sources_skills(skills, folder):
    run_skills = skills[0]
    make_skill(folder / "mine" / "only-one", name="only-one", description="The one skill here. Use when testing.")
    run_skills("add mine")

    view = run_skills("list --source session")
    assert view.text().splitlines()[0].startswith("1 skill from session, of 7 in the catalog (")
    assert [e.name for _, entries in view.listing.groups for e in entries] == ["only-one"]
    assert run_skills("list").text().startswith("7 skills (")


def test_a_path_in_home_far_from_the_notebook_is_shown_from_home(tmp_path, monkeypatch):
    home, elsewhere = tmp_path / "home" / "me", tmp_path / "work" / "project" / "notebooks"
    monkeypatch.setenv("HOME", str(home))
    user = str(home / ".agents" / "skills")

    assert display_path(user, str(elsewhere)) == "~/.agents/skills"  # not ../../../../home/me/.agents/skills
    assert display_path(user, str(home / "research" / "notebooks")) == "~/.agents/skills"  # another project in home
    assert display_path(str(home / "research" / "skills"), str(home / "research" / "notebooks")) == "../skills"
    assert display_path(str(elsewhere.parent / "skills"), str(elsewhere)) == "../skills"
    assert display_path(str(home / "research" / "x.csv"), str(home / "research")) == "x.csv"


def test_sources_show_the_user_folders_from_home(ip, tmp_path, monkeypatch):
    home, notebooks = tmp_path / "home" / "me", tmp_path / "work" / "project" / "notebooks"
    make_skill(home / ".agents" / "skills" / "mine", name="mine", description="Mine. Use when testing.")
    notebooks.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    notebook_folder(monkeypatch, notebooks, db=None, lock=None, sources="user,bundled")
    with registered_magics(ip):
        sources = ip.run_line_magic("skills", "sources").data()["sources"]
        skill = ip.run_line_magic("skills", "show mine")

    assert [(s["label"], s["folder"]) for s in sources][:2] == [("user", "~/.agents/skills"), ("user", "~/.claude/skills")]
    assert skill.data()["folder"] == "~/.agents/skills/mine"


def test_notebook_01_names_as_many_sample_skills_as_ship():
    shipped = sorted(p.name for p in (REPO / "sample-skills").iterdir() if (p / "SKILL.md").is_file())
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}
    notebook = json.loads((REPO / "notebooks" / "01-quickstart.ipynb").read_text(encoding="utf-8"))
    text = " ".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")

    assert f"ships {words[len(shipped)]} sample skills" in text
    assert not [n for n in words.values() if n != words[len(shipped)] and f"ships {n} sample skills" in text]


def test_skills_help_points_to_the_cell_magic_and_the_ledger(ip, skills):
    from skills_magic.notebook.magics import SkillsMagics

    top = SkillsMagics.skills.__doc__.split("\n\n")[0]  # in the first lines `%skills?` prints, not at its end
    assert "%%skill" in top and "`%%skill?`" in top and "%ledger" in top

    shown = ip.object_inspect_text("%skills")  # what `%skills?` prints in a notebook
    assert "%%skill?" in shown and "%ledger?" in shown


@pytest.mark.parametrize(("typo", "meant"), [("lst", "list"), ("shwo", "show"), ("valdate", "validate"),
                                             ("list --source sesion", "session")])
def test_a_typo_suggests_the_close_match(skills, typo, meant):
    run_skills, _ = skills
    with pytest.raises(UsageError) as raised:
        run_skills(typo)

    message = str(raised.value)
    assert re.search(rf"did you mean (\w+ or )?{meant}(\?| or)", message), message
    assert "choose from" not in message and "\n" not in message


def test_a_word_that_matches_nothing_still_lists_the_choices(skills):
    with pytest.raises(UsageError, match=r"invalid choice: 'qqqq' \(choose from 'list', 'show'"):
        skills[0]("qqqq")


@pytest.mark.parametrize(("word", "pointer"), [("run", "%%skill run [NAME]"), ("verify", "%%skill verify"),
                                               ("write", "%%skill write NAME")])
def test_skills_run_verify_write_point_to_the_cell_magic(skills, word, pointer):
    run_skills, _ = skills
    with pytest.raises(UsageError) as raised:
        run_skills(f"{word} csv-profile")

    message = str(raised.value)
    assert "\n" not in message and f"use `{pointer}" in message and "invalid choice" not in message


# --- how tables and a shown body are drawn ------------------------------------------------------------------------


def styles_of(html: str, tag: str) -> list[str]:
    return re.findall(rf"<{tag} style='([^']*)'", html)


def test_table_cells_are_left_aligned_names_do_not_wrap_numbers_right_aligned():
    html = table_html(("skill", "detail", "bytes"), [("csv-profile", "a long text that may wrap", "1,234")],
                      names=(0,), numeric=(2,))

    name, detail, number = styles_of(html, "td")
    assert "text-align:left" in name and "white-space:nowrap" in name
    assert "text-align:left" in detail and "nowrap" not in detail
    assert "text-align:right" in number
    assert [("text-align:left" in s) for s in styles_of(html, "th")] == [True, True, False]


def test_every_table_a_view_draws_aligns_its_text_left(skills, folder):
    listing = skills[0]("list")._repr_mimebundle_()[0]["text/html"]
    for row in re.findall(r"<tr>(.*?)</tr>", listing):
        name, description = styles_of(row, "td")
        assert "white-space:nowrap" in name and "text-align:left" in name and "text-align:left" in description
    assert all("text-align:left" in s for s in styles_of(RunView(a_script_run("ok")).html(), "td")
               if "text-align:right" not in s)


def test_a_shown_body_is_framed_and_its_headings_are_smaller(skills, folder):
    run_skills, _ = skills
    make_skill(folder / "skills" / "headed", name="headed", description="Has headings. Use when testing.",
               body="# Big title\n\n## Section\n\nText.\n\n```\n<h1>not a heading</h1>\n```\n")

    html = run_skills("show headed")._repr_mimebundle_()[0]["text/html"]
    body = re.search(r"<div class='skills-magic-body' style='([^']*)'>(.*)</div></div>$", html, re.S)
    assert body and "border:1px solid" in body.group(1)
    assert re.search(r"<h1 style='font-size:1\.3em[^']*'>Big title</h1>", body.group(2))
    assert re.search(r"<h2 style='font-size:1\.2em[^']*'>Section</h2>", body.group(2))
    assert "&lt;h1&gt;not a heading&lt;/h1&gt;" in body.group(2)  # code stays code, and escaped

