"""The `skills-magic` command (`python -m skills_magic`), run as a real subprocess.

Exit codes: 0 all valid, 1 something invalid, 2 usage error. `to-prompt` must print the same bytes as the reference
library skills-ref 0.1.1 (`skills_ref.to_prompt`) for every valid skill.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import nbformat
import pytest
from skills_ref import to_prompt

from skillfiles import make_skill

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SKILLS_MAGIC_SOURCES", "SKILLS_MAGIC_PATH")}
    env["PYTHONUTF8"] = "1"  # the bytes compared below must not depend on the machine's locale
    return env


def cli(*args: str, cwd: Path, command: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        (command or [sys.executable, "-m", "skills_magic"]) + list(args),
        cwd=cwd,
        env=_env(),
        capture_output=True,
        timeout=600,
    )


def reference_prompt(*folders: Path) -> bytes:
    """What skills-ref prints (its `to_prompt` plus the newline of `print`)."""
    return (to_prompt([Path(f) for f in folders]) + "\n").encode("utf-8")


@pytest.fixture
def valid(tmp_path) -> Path:
    make_skill(tmp_path / "good-skill", description="Does a good thing. Use when testing.")
    return tmp_path / "good-skill"


@pytest.fixture
def invalid(tmp_path) -> Path:
    make_skill(tmp_path / "bad-skill", frontmatter="name: other-name\ndescription: Name differs from the folder.\n")
    return tmp_path / "bad-skill"


# --- validate -----------------------------------------------------------------------------------------------------


def test_validate_exits_0_on_a_valid_skill(valid, tmp_path):
    result = cli("validate", "good-skill", cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stderr == b""


def test_validate_exits_1_on_an_invalid_skill_and_names_the_code(invalid, tmp_path):
    result = cli("validate", "bad-skill", cwd=tmp_path)

    assert result.returncode == EXIT_INVALID
    assert b"[name-mismatch]" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["bogus"],
        ["validate"],
        ["validate", "no-such-folder"],
        ["to-prompt", "no-such-folder"],
        ["list", "no-such-folder"],
        ["list", ".", "--budget", "x"],
        ["run-notebook", "no-such.ipynb"],
    ],
    ids=["no-args", "unknown-command", "no-path", "missing-path", "to-prompt-missing", "list-missing", "bad-budget", "missing-notebook"],
)
def test_usage_errors_exit_2(args, tmp_path):
    result = cli(*args, cwd=tmp_path)

    assert result.returncode == EXIT_USAGE
    assert result.stdout == b""
    assert result.stderr  # argparse's usage message or the missing path


def test_a_missing_path_among_valid_ones_is_a_usage_error(valid, tmp_path):
    result = cli("validate", "good-skill", "missing-skill", cwd=tmp_path)

    assert result.returncode == EXIT_USAGE
    assert b"missing-skill" in result.stderr


def test_validate_dot_inside_a_valid_skill_folder_exits_0(valid):
    # skills-ref 0.1.1 fails this case: it compares the name with the name of Path("."), which is ""
    result = cli("validate", ".", cwd=valid)

    assert result.returncode == EXIT_OK, result.stdout


def test_validate_dot_inside_an_invalid_skill_folder_exits_1(invalid):
    result = cli("validate", ".", cwd=invalid)

    assert result.returncode == EXIT_INVALID
    assert b"[name-mismatch]" in result.stdout


def test_validate_several_paths_at_once(valid, invalid, tmp_path):
    make_skill(tmp_path / "second-skill", description="Another good one. Use when testing.")

    all_valid = cli("validate", "good-skill", "second-skill", cwd=tmp_path)
    one_invalid = cli("validate", "good-skill", "bad-skill", "second-skill", "--json", cwd=tmp_path)

    assert all_valid.returncode == EXIT_OK
    assert one_invalid.returncode == EXIT_INVALID
    data = json.loads(one_invalid.stdout)
    assert [(r["folder"], r["valid"]) for r in data["results"]] == [
        ("good-skill", True),
        ("bad-skill", False),
        ("second-skill", True),
    ]


def test_validate_a_skill_md_file_path(valid, invalid, tmp_path):
    assert cli("validate", "good-skill/SKILL.md", cwd=tmp_path).returncode == EXIT_OK
    assert cli("validate", "bad-skill/SKILL.md", cwd=tmp_path).returncode == EXIT_INVALID


def test_validate_a_collection_validates_every_skill_under_it(tmp_path):
    collection = tmp_path / "collection"
    make_skill(collection / "one-skill", description="One. Use for one.")
    make_skill(collection / "group" / "two-skill", description="Two. Use for two.")
    make_skill(collection / ".hidden" / "three-skill", description="Three. Use for three.")

    good = cli("validate", "collection", "--json", cwd=tmp_path)
    make_skill(collection / "group" / "Four-Skill", frontmatter="name: Four-Skill\ndescription: Four.\n")
    bad = cli("validate", "collection", "--json", cwd=tmp_path)

    assert good.returncode == EXIT_OK
    assert sorted(r["folder"] for r in json.loads(good.stdout)["results"]) == sorted(
        os.path.join("collection", *parts) for parts in [("one-skill",), ("group", "two-skill"), (".hidden", "three-skill")]
    )
    assert bad.returncode == EXIT_INVALID
    verdicts = {r["folder"]: r["valid"] for r in json.loads(bad.stdout)["results"]}
    assert len(verdicts) == 4
    assert verdicts[os.path.join("collection", "group", "Four-Skill")] is False


def test_validate_a_folder_without_skills_exits_1(tmp_path):
    (tmp_path / "empty").mkdir()

    result = cli("validate", "empty", "--json", cwd=tmp_path)

    assert result.returncode == EXIT_INVALID
    [verdict] = json.loads(result.stdout)["results"]
    assert [d["code"] for d in verdict["diagnostics"]] == ["skill-md-missing"]


def test_validate_output_paths_are_relative_to_the_working_folder(valid, tmp_path):
    result = cli("validate", str(valid), "--json", cwd=tmp_path)

    assert json.loads(result.stdout)["results"][0]["folder"] == "good-skill"
    assert str(tmp_path).encode() not in result.stdout


# --- to-prompt ----------------------------------------------------------------------------------------------------

ESCAPING_DESCRIPTIONS = {
    "ampersand": "description: Tom & Jerry, R&D notes. Use when cartoons & research meet.\n",
    "angle-brackets": "description: 'Parses <tag attr=\"v\"> and a > b < c. Use for <xml>.'\n",
    "double-quotes": 'description: "Says \\"hello\\" and it\'s fine. Use when greeting."\n',
    "single-quotes": "description: 'It''s the user''s file. Use when quoting.'\n",
    "folded-block": "description: >\n  A folded description & more\n  on two lines. Use when folding.\n",
    "literal-block": "description: |\n  First line <a>\n  second line \"b\"\n",
    "unicode-text": "description: Résumé über naïve café — “smart quotes”. Use for accents.\n",
    "padded-value": "description: \"   padded with spaces   \"\n",
}


@pytest.fixture
def escaping_skills(tmp_path) -> list[Path]:
    folders = []
    for name, description_yaml in ESCAPING_DESCRIPTIONS.items():
        make_skill(tmp_path / "skills" / name, frontmatter=f"name: {name}\n{description_yaml}")
        folders.append(tmp_path / "skills" / name)
    return folders


def test_to_prompt_prints_the_same_bytes_as_skills_ref(valid, tmp_path):
    result = cli("to-prompt", "good-skill", cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == reference_prompt(valid)


@pytest.mark.parametrize("name", list(ESCAPING_DESCRIPTIONS))
def test_to_prompt_escapes_descriptions_exactly_like_skills_ref(name, escaping_skills, tmp_path):
    folder = tmp_path / "skills" / name

    result = cli("to-prompt", os.path.join("skills", name), cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == reference_prompt(folder)


@pytest.mark.parametrize(
    ("filename", "raw"),
    [
        ("SKILL.md", b"---\r\nname: crlf-skill\r\ndescription: |\r\n  line one & <two>\r\n  line three\r\n---\r\nbody\r\n"),
        ("skill.md", b"---\nname: crlf-skill\ndescription: A lowercase skill.md file. Use when it is named so.\n---\n"),
    ],
    ids=["crlf-literal-block", "lowercase-skill-md"],
)
def test_to_prompt_of_unusual_files_matches_skills_ref(filename, raw, tmp_path):
    folder = tmp_path / "crlf-skill"
    make_skill(folder, raw=raw, filename=filename)

    result = cli("to-prompt", "crlf-skill", cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == reference_prompt(folder)


def test_to_prompt_of_several_skills_keeps_their_order_and_matches_skills_ref(escaping_skills, valid, tmp_path):
    folders = [*reversed(escaping_skills), valid]

    result = cli("to-prompt", *(str(f.relative_to(tmp_path)) for f in folders), cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == reference_prompt(*folders)
    assert result.stdout.count(b"<skill>") == len(folders)


def test_to_prompt_through_a_symlinked_folder_matches_skills_ref(valid, tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    (links / "good-skill").symlink_to(valid, target_is_directory=True)

    result = cli("to-prompt", os.path.join("links", "good-skill"), cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == reference_prompt(links / "good-skill")
    assert f"<location>\n{valid.resolve() / 'SKILL.md'}\n</location>".encode() in result.stdout


def test_to_prompt_of_a_skill_md_path_matches_skills_ref_for_its_folder(valid, tmp_path):
    result = cli("to-prompt", os.path.join("good-skill", "SKILL.md"), cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == reference_prompt(valid)


def test_to_prompt_of_a_bundled_sample_skill_matches_skills_ref(sample_skills, tmp_path):
    folders = [sample_skills / "csv-profile", sample_skills / "lab-notebook-entry"]

    result = cli("to-prompt", *map(str, folders), cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == reference_prompt(*folders)


def test_to_prompt_keeps_a_valid_name_as_written_like_skills_ref(tmp_path):
    folder = tmp_path / "café"
    make_skill(folder, frontmatter=f"name: {unicodedata.normalize('NFD', 'café')}\ndescription: Accents. Use for cafés.\n")
    from skills_ref import validate

    assert validate(folder) == []  # skills-ref calls it valid...
    assert cli("validate", "café", cwd=tmp_path).returncode == EXIT_OK  # ...and so do we

    result = cli("to-prompt", "café", cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == reference_prompt(folder)


def test_to_prompt_of_an_invalid_skill_exits_1_and_prints_no_xml(valid, invalid, tmp_path):
    result = cli("to-prompt", "good-skill", "bad-skill", cwd=tmp_path)

    assert result.returncode == EXIT_INVALID
    assert result.stdout == b""
    assert b"[name-mismatch]" in result.stderr
    assert b"bad-skill" in result.stderr


def test_to_prompt_of_a_skill_skills_ref_cannot_read_exits_1(tmp_path):
    make_skill(tmp_path / "no-frontmatter", raw=b"# Just a heading\n\nNo frontmatter here.\n")

    result = cli("to-prompt", "no-frontmatter", cwd=tmp_path)

    assert result.returncode == EXIT_INVALID
    assert result.stdout == b""
    assert b"[no-frontmatter]" in result.stderr


# --- list, help, the console script -------------------------------------------------------------------------------


def test_list_json_names_the_skills_under_the_paths(tmp_path, valid, invalid):
    make_skill(tmp_path / "nested" / "deep" / "deep-skill", description="Deep. Use when deep.")
    make_skill(tmp_path / "skipped-skill", frontmatter="name: skipped-skill\n")  # no description: not listed

    result = cli("list", ".", "--json", cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    data = json.loads(result.stdout)
    names = [s["name"] for group in data["groups"] for s in group["skills"]]
    # bad-skill loads leniently under the name it declares
    assert sorted(names) == ["deep-skill", "good-skill", "other-name"]
    assert (data["shown"], data["total"], data["skipped"], data["marker"]) == (3, 3, 1, None)


def test_list_with_a_budget_ends_with_the_marker(tmp_path):
    for i in range(20):
        make_skill(tmp_path / f"skill-{i:02d}", description=f"Skill {i} does a fairly long thing. Use when thing {i} happens.")

    result = cli("list", ".", "--budget", "400", "--json", cwd=tmp_path)

    data = json.loads(result.stdout)
    assert result.returncode == EXIT_OK
    assert data["total"] == 20 and data["shown"] < 20
    assert data["marker"].startswith(f"[skills listing truncated: showed {data['shown']} of 20 skills")


def test_help_exits_0(tmp_path):
    result = cli("--help", cwd=tmp_path)

    assert result.returncode == EXIT_OK
    for command in (b"validate", b"to-prompt", b"list", b"run-notebook"):
        assert command in result.stdout


def test_console_script_is_installed_next_to_the_interpreter(valid, tmp_path):
    script = Path(sys.executable).parent / ("skills-magic.exe" if os.name == "nt" else "skills-magic")

    assert script.is_file()
    assert cli("validate", "good-skill", cwd=tmp_path, command=[str(script)]).returncode == EXIT_OK
    assert cli("validate", "missing", cwd=tmp_path, command=[str(script)]).returncode == EXIT_USAGE


def test_run_notebook_executes_it_and_prints_its_outputs(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)"), nbformat.v4.new_code_cell("'a' * 3")])
    nbformat.write(notebook, tmp_path / "tiny.ipynb")

    result = cli("run-notebook", "tiny.ipynb", cwd=tmp_path)

    assert result.returncode == EXIT_OK, result.stderr
    lines = result.stdout.decode().splitlines()
    assert "42" in lines
    assert "'aaa'" in lines


def test_run_notebook_inplace_saves_outputs_without_timing_metadata(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nbformat.write(notebook, tmp_path / "tiny.ipynb")

    assert cli("run-notebook", "--inplace", "tiny.ipynb", cwd=tmp_path).returncode == EXIT_OK

    (cell,) = nbformat.read(tmp_path / "tiny.ipynb", as_version=4).cells
    assert cell.outputs[0]["text"] == "42\n"
    assert "execution" not in cell.metadata  # no per-cell timestamps: a refresh changes only what changed
