"""`%%skill run [OPTIONS] [NAME [ARGS...]]` (issue 16, point 5): the magic's options go before NAME, and everything
after NAME is the skill's ARGS exactly as typed, so `$ARGUMENTS` is what the user wrote; `NAME OPTIONS -- ARGS` gives
options after the name. First the line grammar on its own, then one real kernel (nbclient) running the cells."""

from __future__ import annotations

import json
import random
import shlex

import pytest
from IPython.core.error import UsageError
from notebook_setup import notebook_folder
from skillfiles import make_skill, write_file

from skills_magic.notebook.magics.run import OpenQuote, lexed, read_run_line

# --- the line grammar --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line, name, arguments", [
    ('echo-args "hello world" second', "echo-args", '"hello world" second'),  # quotes kept
    ("echo-args staging --dry-run", "echo-args", "staging --dry-run"),  # a flag after NAME is the skill's
    ("fix --model x", "fix", "--model x"),  # no `--`: the magic's option names are the skill's words too
    ("fix  a\\ b   'c  d'  ", "fix", "a\\ b   'c  d'"),  # inner text untouched, ends stripped
    ("fix it's broken", "fix", "it's broken"),  # an open quote in ARGS is the skill's business
    ('fix --model x "--" y', "fix", '--model x "--" y'),  # a quoted "--" is an argument, not the separator
    ("-- -odd x", "-odd", "x"),  # `--` ends the options: the next word is NAME
    ("", None, ""),
    ("--raw", None, ""),
])
def test_everything_after_the_name_is_the_arguments_as_typed(line, name, arguments):
    read = read_run_line(line)
    assert (read.name, read.arguments) == (name, arguments)
    assert read.options.model is None


@pytest.mark.parametrize("line, model, turns, arguments", [
    ("--model m --max-turns 3 fix a b", "m", 3, "a b"),
    ("--model=m --max-turns=3 fix a b", "m", 3, "a b"),
    ("fix --model m --max-turns 3 -- a -- b", "m", 3, "a -- b"),  # the first `--` separates; the rest is ARGS
    ("fix --model=-m --   a b  ", "-m", None, "a b"),  # a value may start with a dash
])
def test_options_go_before_the_name_or_between_it_and_a_separator(line, model, turns, arguments):
    read = read_run_line(line)
    assert (read.name, read.options.model, read.options.max_turns, read.arguments) == ("fix", model, turns, arguments)


@pytest.mark.parametrize("line, says", [
    ("--dry-run fix", "unknown option --dry-run before the skill's NAME"),
    ("--modl x fix", "unknown option --modl (did you mean --model?)"),
    ("fix --model x --dry -- y", "unknown option --dry between the skill's NAME and `--`"),
    ("fix --model x extra -- y", "'extra' between the skill's NAME and `--` is not an option"),
    ("--model", "--model needs a value"),
    ("--raw=yes fix", "--raw takes no value"),
    ("--max-turns 0 fix", "at least one turn"),
    ("'fix", "No closing quotation"),
])
def test_a_bad_option_is_one_usage_error_that_names_it(line, says):
    with pytest.raises(UsageError, match="usage: %%skill run") as caught:
        read_run_line(line)
    assert says in str(caught.value)


def test_the_words_are_read_as_shlex_split_reads_them():
    rng = random.Random(16)  # seeded: the same 20,000 lines on every run
    for _ in range(20_000):
        line = "".join(rng.choice("ab '\"\\\t\n-=") for _ in range(rng.randint(0, 12)))
        try:
            expected: list[str] | str = shlex.split(line)
        except ValueError as error:
            expected = str(error)
        try:
            got: list[str] | str = [word for word, _typed, _end in lexed(line)]
        except OpenQuote as error:
            got = str(error)
        assert got == expected, line


def test_the_usage_says_the_grammar_with_an_example_of_each_form():
    from skills_magic.notebook.magics.run import RUN_USAGE, RunMagics

    assert RUN_USAGE.startswith("usage: %%skill run [OPTIONS] [NAME [ARGS...]]: the magic's OPTIONS go before NAME")
    for example in ("%%skill run --model M fix-bug the login form", "%%skill run fix-bug --model M -- the login form",
                    '%%skill run --no-model --script scripts/x.py NAME a "b c"'):
        assert example in RUN_USAGE
    help_text = RunMagics.skill.__doc__
    assert '%%skill run echo-args "hello world" --dry-run    ARGS: `"hello world" --dry-run`, as typed' in help_text
    assert "--harness" not in RUN_USAGE  # the options are the parser's, listed by `%%skill?`, never copied here


# --- in a real kernel --------------------------------------------------------------------------------------------------

ARGV_PY = "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"
RECORD = """import json
session = get_ipython().magics_manager.registry['SkillsMagics'].session
received, run = [], session.run
def recording(task, skill=None, arguments="", **options):  # what the magic hands the session
    received.append({"skill": skill, "arguments": arguments, "model": options.get("model"),
                     "max_turns": options.get("max_turns")})
    return run(task, skill, arguments, **options)
session.run = recording"""
REPORT = """print(json.dumps({
    "received": received,
    "activations": [r["messages"][0]["content"][0]["text"] for r in session.model_client.requests],
    "models": [r["model"] for r in session.model_client.requests],
    "scripts": [json.loads(s1.final_text), json.loads(s2.final_text)],
}))"""


def test_a_real_kernel_passes_the_arguments_as_typed(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    skills = tmp_path / "skills"
    make_skill(skills / "echo-args", body="ARGS=[$ARGUMENTS]\n")
    write_file(skills / "echo-args", "scripts/argv.py", ARGV_PY)
    make_skill(skills / "fix", body="Fix: $ARGUMENTS\n")
    (tmp_path / "turns.yaml").write_text("turns:\n" + "  - text: Done.\n" * 5, encoding="utf-8")
    cells = [
        "%load_ext skills_magic\n%skills model scripted turns.yaml",
        RECORD,
        '%%skill run echo-args "hello world" second\nEcho.',
        "%%skill run echo-args staging --dry-run\nEcho.",
        "%%skill run fix --model x\nFix it.",
        "%%skill run --max-turns 2 --model claude-opus-4-6 echo-args a b\nEcho.",
        "%%skill run echo-args --model claude-opus-4-6 -- y\nEcho.",
        "%%skill run --dry-run echo-args\nEcho.",  # refused: the kernel goes on with the next cell
        "%skill run --no-model --script scripts/argv.py --as s1 echo-args a \"b c\" 'd  e' --flag",  # the line form
        '%%skill run echo-args --no-model --script scripts/argv.py --as s2 -- a "b c"\nstdin',  # NAME OPTIONS -- ARGS
        REPORT,
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.cells[7].metadata["tags"] = ["raises-exception"]
    # the kernel inherits this environment: only the skills folder written above, no key, no model choice
    notebook_folder(monkeypatch, tmp_path, db="db.sqlite", lock=None, sources="path", path=skills)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    refused = "".join(o.get("text", "") for o in notebook.cells[7].outputs)  # IPython prints a UsageError on stderr
    assert refused.startswith("UsageError: unknown option --dry-run before the skill's NAME; usage: %%skill run [OPTIONS]")
    report = json.loads("".join(o.get("text", "") for o in notebook.cells[-1].outputs))
    assert report["received"] == [  # one str each, exactly as typed after the name
        {"skill": "echo-args", "arguments": '"hello world" second', "model": None, "max_turns": None},
        {"skill": "echo-args", "arguments": "staging --dry-run", "model": None, "max_turns": None},
        {"skill": "fix", "arguments": "--model x", "model": None, "max_turns": None},  # the model left alone
        {"skill": "echo-args", "arguments": "a b", "model": "claude-opus-4-6", "max_turns": 2},
        {"skill": "echo-args", "arguments": "y", "model": "claude-opus-4-6", "max_turns": None},
    ]
    assert report["models"][2] != "x" and report["models"][3:] == ["claude-opus-4-6", "claude-opus-4-6"]
    assert report["scripts"] == [["a", "b c", "d  e", "--flag"], ["a", "b c"]]
    # end to end: the activated body's $ARGUMENTS is the text as typed (the substitution takes the raw string)
    bodies = [text.splitlines()[1] for text in report["activations"]]  # the line after the annotation
    assert bodies == ['ARGS=["hello world" second]', "ARGS=[staging --dry-run]", "Fix: --model x", "ARGS=[a b]",
                      "ARGS=[y]"]
