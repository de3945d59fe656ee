"""Kernel data into a run (issue 15, point 1): `--with` writes kernel objects into the run's inputs folder in a
format made for each, the model is told what they are and sees images, scripts find them; `{name}`, `{In[n]}`,
`{Out[n]}` and `{Err[n]}` in the cell body come from the kernel, and a missing name stops the run before any call."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics
from skillfiles import script_skill

from skills_magic.runs.inputs import InputError, prepare, write_inputs
from skills_magic.runs.interpolate import InterpolationError, interpolate
from skills_magic.session import SkillsSession
from skills_magic.skills.catalog import Source

pandas = pytest.importorskip("pandas", reason="the DataFrame input needs pandas (the [test] extra installs it)")
numpy = pytest.importorskip("numpy", reason="the array input needs numpy (the [test] extra installs it)")

ANSWER = "turns:\n  - text: Seen.\n    usage: {input_tokens: 10, output_tokens: 2}\n"


def first_user_turn(model) -> list[dict]:
    return model.requests[0]["messages"][0]["content"]


# --- interpolation -------------------------------------------------------------------------------------------------

def test_names_and_cell_history_are_replaced_and_other_braces_are_left_as_written():
    namespace = {"site": "Kew", "n": 3, "In": ["", "x = 1", "x + 1"], "Out": {2: 2}}

    text = interpolate('At {site}, {n} plots; cell {In[1]} gave {Out[2]}; {Err[4]}; {{site}}; {"k": 1}; {a b}',
                       namespace, {4: "ZeroDivisionError: division by zero"})

    assert text == 'At Kew, 3 plots; cell x = 1 gave 2; ZeroDivisionError: division by zero; {site}; {"k": 1}; {a b}'


@pytest.mark.parametrize("text, named", [("{nope}", "'nope'"), ("{Out[9]}", "cell 9"), ("{In[5]}", "cell 5"),
                                         ("{Err[1]}", "cell 1")])
def test_a_name_or_cell_the_kernel_lacks_is_one_clear_error(text, named):
    with pytest.raises(InterpolationError) as caught:
        interpolate(text, {"In": [""], "Out": {}}, {})

    assert named in str(caught.value) and "--raw" in str(caught.value) and "\n" not in str(caught.value)


# --- what each kind of object becomes ---------------------------------------------------------------------------------

def test_each_kind_of_object_is_written_in_a_format_made_for_it(tmp_path):
    from PIL import Image

    frame = pandas.DataFrame({"plot": ["a", "b", "c"], "yield": [1.5, 2.0, 2.5]})
    values = {"df": frame, "series": frame["yield"], "grid": numpy.arange(12).reshape(3, 4), "notes": "dry spring",
              "raw": b"\x00\x01", "meta": {"site": "Kew", "plots": [1, 2]}, "rows": [1, 2, 3],
              "photo": Image.new("RGB", (8, 6), "green")}

    folder, written = write_inputs(values, str(tmp_path))
    found = {item.name: item for item in written}

    assert Path(folder).parent == tmp_path / ".skills" / "inputs"
    assert pandas.read_csv(found["df"].path).equals(frame)  # a 0, 1, 2 index is not written as a column
    assert found["df"].kind == "DataFrame" and found["df"].shape.startswith("3 rows x 2 columns (plot, yield)")
    assert found["series"].shape.startswith("3 rows x 1 columns")
    assert (numpy.load(found["grid"].path) == values["grid"]).all() and "shape (3, 4)" in found["grid"].shape
    assert Path(found["notes"].path).read_text(encoding="utf-8") == "dry spring"
    assert Path(found["raw"].path).read_bytes() == b"\x00\x01"
    assert json.loads(Path(found["meta"].path).read_text(encoding="utf-8")) == values["meta"]
    assert json.loads(Path(found["rows"].path).read_text(encoding="utf-8")) == [1, 2, 3]
    assert found["photo"].media_type == "image/png" and found["photo"].shape == "8x6 pixels, PNG"
    assert Path(found["photo"].path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class Figure:
    """Stands in for a matplotlib figure (its module is matplotlib's, its `savefig` writes a PNG): the test
    environment has no matplotlib, whose plotting scripts test the missing-package hint."""

    __module__ = "matplotlib.figure"

    def __init__(self, width: int, height: int):
        self.width, self.height = width, height

    def savefig(self, path, format="png"):
        from PIL import Image

        Image.new("RGB", (self.width, self.height), "white").save(path, format=format.upper())


def test_a_figure_becomes_a_png_and_an_image_block_for_the_model(tmp_path):
    blocks, folder, written = prepare("Describe the figure.", {"fig": Figure(100, 50)}, str(tmp_path))

    assert written[0].kind == "figure" and written[0].shape == "100x50 pixels, PNG"
    assert [b["type"] for b in blocks] == ["text", "text", "image", "text"]
    assert blocks[2]["source"]["media_type"] == "image/png" and blocks[-1]["text"] == "Describe the figure."
    assert "fig: matplotlib.Figure (figure), 100x50 pixels, PNG, at .skills/inputs/" in blocks[0]["text"]
    assert base64.b64decode(blocks[2]["source"]["data"]) == Path(written[0].path).read_bytes()


def test_the_same_data_gets_the_same_paths_on_every_run_and_other_data_its_own(tmp_path):
    """Restart & Run All hands the model (and a cassette) the same paths; nothing of an earlier run is overwritten."""
    first, _ = write_inputs({"notes": "dry spring"}, str(tmp_path))
    again, written = write_inputs({"notes": "dry spring"}, str(tmp_path))
    other, _ = write_inputs({"notes": "wet spring"}, str(tmp_path))

    assert first == again != other
    assert Path(written[0].path).read_text(encoding="utf-8") == "dry spring"
    assert sorted(p.name for p in (tmp_path / ".skills" / "inputs").iterdir()) == sorted([Path(first).name, Path(other).name])


@pytest.mark.parametrize("value, says", [(object(), "has no file format here"), ({"f": {1, 2}}, "not JSON"),
                                         (lambda: 1, "has no file format here")])
def test_an_object_with_no_format_is_refused_with_what_would_work(tmp_path, value, says):
    with pytest.raises(InputError) as caught:
        write_inputs({"thing": value}, str(tmp_path))

    assert says in str(caught.value) and "--with thing" in str(caught.value)


# --- through the magic, on the shared IPython shell -----------------------------------------------------------------

@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    (tmp_path / "turns.yaml").write_text(ANSWER, encoding="utf-8")
    with registered_magics(ip) as instance:
        ip.run_line_magic("skills", "model scripted turns.yaml")
        yield instance


def test_with_tells_the_model_name_type_shape_and_path_and_interpolates_the_task(ip, magics):
    ip.user_ns.update(df=pandas.DataFrame({"x": [1, 2]}), site="Kew")

    ip.run_cell_magic("skill", "run --with df", "Profile df from {site}; keep {{braces}}.")
    model, result = magics.session.model_client, magics.session.last_run

    content = first_user_turn(model)
    assert content[-1] == {"type": "text", "text": "Profile df from Kew; keep {braces}."}
    assert "- df: pandas.DataFrame (DataFrame), 2 rows x 1 columns (x), at .skills/inputs/" in content[0]["text"]
    assert "$SKILLS_MAGIC_INPUTS" in content[0]["text"]
    assert [i.name for i in result.inputs] == ["df"] and os.path.isfile(result.inputs[0].path)


def test_raw_sends_the_body_as_written(ip, magics):
    ip.run_cell_magic("skill", "run --raw", "Fill in {site} later.")

    assert first_user_turn(magics.session.model_client)[-1]["text"] == "Fill in {site} later."


@pytest.mark.parametrize("line, cell, says", [("run --with nothing_here", "Go.", "--with nothing_here: no such variable"),
                                              ("run", "Use {nothing_here}.", "no variable 'nothing_here'")])
def test_a_missing_name_is_one_line_before_any_model_call(ip, magics, line, cell, says):
    with pytest.raises(UsageError) as caught:
        ip.run_cell_magic("skill", line, cell)

    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert magics.session.model_client.requests == []


def test_err_holds_the_error_a_cell_raised(ip, magics):
    ip.run_cell("1 / 0", store_history=True)
    failed = ip.execution_count - 1

    ip.run_cell_magic("skill", "run", f"Explain {{Err[{failed}]}}")

    assert first_user_turn(magics.session.model_client)[-1]["text"] == "Explain ZeroDivisionError: division by zero"


# --- scripts find the inputs, inside the sandbox ----------------------------------------------------------------------

PROFILE = """import csv, os, sys
folder = os.environ["SKILLS_MAGIC_INPUTS"]
with open(os.path.join(folder, "df.csv"), newline="") as handle:
    rows = list(csv.DictReader(handle))
print(len(rows), "rows;", ", ".join(rows[0]), "; in the working folder:", os.path.isdir(os.path.relpath(folder)))
"""


@pytest.mark.needs_sandbox
def test_a_sandboxed_script_reads_the_inputs_from_its_variable_and_the_working_folder(tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path)
    script_skill(tmp_path / "skills", "profile.py", PROFILE, name="profiler")
    session = SkillsSession(sources=[Source("path", str(tmp_path / "skills"), explicit=True)], cwd=str(tmp_path))
    session.add_rule("allow", "profiler:scripts/*")

    result = session.run_script("profiler", "scripts/profile.py",
                                inputs={"df": pandas.DataFrame({"plot": ["a", "b", "c"], "yield": [1, 2, 3]})})

    assert result.error is None, result.error
    assert result.final_text.strip() == "3 rows; plot, yield ; in the working folder: True"
    assert "SKILLS_MAGIC_INPUTS" not in os.environ


# --- in a real kernel --------------------------------------------------------------------------------------------------

def test_a_real_kernel_hands_a_dataframe_and_interpolates_its_history(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    (tmp_path / "turns.yaml").write_text(ANSWER, encoding="utf-8")
    cells = ["import pandas as pd\ndf = pd.DataFrame({'plot': ['a', 'b'], 'yield': [1.5, 2.5]})\nsite = 'Kew'",
             "%load_ext skills_magic\n%skills model scripted turns.yaml",
             "%%skill run --with df\nProfile the plots of {site}.",
             "model = get_ipython().magics_manager.registry['SkillsMagics'].session.model_client\n"
             "content = model.requests[0]['messages'][0]['content']\n"
             "print(content[-1]['text'])\nprint(content[0]['text'].splitlines()[1])"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "SKILLS_MAGIC_MODEL")}
    env.update(SKILLS_MAGIC_SOURCES="bundled", SKILLS_MAGIC_DB=str(tmp_path / "db.sqlite"))
    client = NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)

    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs)
    assert printed.splitlines()[0] == "Profile the plots of Kew."
    assert printed.splitlines()[1].startswith("- df: pandas.DataFrame (DataFrame), 2 rows x 2 columns (plot, yield), at ")


READER = """import csv, os
with open(os.path.join(os.environ["SKILLS_MAGIC_INPUTS"], "df.csv"), newline="") as handle:
    rows = list(csv.DictReader(handle))
print("read", len(rows), "rows of", ", ".join(rows[0]))
"""
READ_TURNS = """turns:
  - tool_use:
      - name: run_skill_script
        input: {skill: reader, path: scripts/read.py}
  - text: Done.
"""


@pytest.mark.needs_sandbox
def test_a_person_answers_the_prompt_and_the_script_reads_what_the_kernel_handed(tmp_path, monkeypatch):
    """jupyter_client, stdin allowed, as JupyterLab runs a cell: the model asks to run a script, the person answers
    once on stdin, and the script, in the sandbox, reads the DataFrame the cell handed the run."""
    from jupyter_client.manager import start_new_kernel
    from test_kernel_prompt import execute

    script_skill(tmp_path / "skills", "read.py", READER, name="reader")
    (tmp_path / "turns.yaml").write_text(READ_TURNS, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        execute(client, "%env SKILLS_MAGIC_SOURCES=bundled\n%env SKILLS_MAGIC_DB=.skills/test.sqlite\n"
                        "%load_ext skills_magic\n%skills add skills\n%skills model scripted turns.yaml\n"
                        "import pandas as pd\ndf = pd.DataFrame({'plot': ['a', 'b', 'c'], 'yield': [1, 2, 3]})")
        prompts, outputs, reply = execute(client, "%%skill run --with df\nRead the table.", answers=["o"])
        _, printed, _ = execute(client, "print(_.tool_calls[0].is_error, _.inputs[0].name)\n"
                                        "print(_.messages[2]['content'][0]['content'].strip())")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)

    assert reply["status"] == "ok"
    (prompt,) = prompts
    assert "skill reader wants to run scripts/read.py" in prompt and "sandbox   yes" in prompt
    assert "exit code 0" in "\n".join(outputs)
    assert "".join(printed).strip().splitlines() == ["False df", "read 3 rows of plot, yield"]  # the tool result


TAMPER = """import os
folder = os.environ["SKILLS_MAGIC_INPUTS"]
for attempt in (lambda: open(os.path.join(folder, "df.csv"), "w").write("forged"),
                lambda: os.remove(os.path.join(folder, "df.csv")),
                lambda: open(os.path.join(folder, "extra.csv"), "w").write("x")):
    try:
        attempt()
        print("changed")
    except OSError as error:
        print("refused", error.errno)
"""


@pytest.mark.needs_sandbox
def test_a_script_cannot_rewrite_what_the_kernel_handed_its_run(tmp_path, monkeypatch):
    """The inputs folder is under .skills/, read-only in every sandbox: a script cannot forge the data a later script
    (or the next run handed the same data, at the same path) reads."""
    notebook_folder(monkeypatch, tmp_path)
    script_skill(tmp_path / "skills", "tamper.py", TAMPER, name="tamper")
    session = SkillsSession(sources=[Source("path", str(tmp_path / "skills"), explicit=True)], cwd=str(tmp_path))
    session.add_rule("allow", "tamper:scripts/*")
    frame = pandas.DataFrame({"plot": ["a"], "yield": [1]})

    result = session.run_script("tamper", "scripts/tamper.py", inputs={"df": frame})

    assert result.error is None, result.error
    assert [line.split()[0] for line in result.final_text.splitlines()] == ["refused"] * 3
    path = Path(result.inputs[0].path)
    assert pandas.read_csv(path).equals(frame) and sorted(p.name for p in path.parent.iterdir()) == ["df.csv"]
