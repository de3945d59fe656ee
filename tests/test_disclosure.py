"""Progressive disclosure: substitutions in a skill body, the list of a skill's files, the activation text and
reading one resource (only text, only from inside the skill's folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from skillfiles import make_skill, write_file

import skills_magic.runs.disclosure as disclosure
from skills_magic.skills.catalog import Catalog, Source
from skills_magic.runs.disclosure import (
    ResourceError,
    activation_text,
    declared_argument_names,
    read_resource,
    resources,
    substitute,
)
from skills_magic.skills.skill import Skill


def load(root: Path) -> dict[str, Skill]:
    return {s.name: s for s in Catalog([Source("session", str(root), explicit=True)]).scan().skills}


def one_skill(tmp_path: Path, frontmatter: str | None = None, body: str = "# Body\n\nDo it.\n", name: str = "demo") -> Skill:
    root = tmp_path / "skills"
    make_skill(root / name, frontmatter, body)
    return load(root)[name]


# --- substitute() ------------------------------------------------------------------------------------------------


def sub(body: str, arguments=(), names=(), skill_dir: str = "<dir>", session: str = "sess-1") -> str:
    """`arguments`: the raw string, or a list (joined as shell words)."""
    return substitute(body, arguments if isinstance(arguments, str) else list(arguments), skill_dir, session, list(names))


def test_arguments_is_all_arguments_joined_by_spaces():
    assert sub("Fix $ARGUMENTS now.", ["issue", "42"]) == "Fix issue 42 now."


def test_arguments_with_no_arguments_is_empty():
    assert sub("Fix [$ARGUMENTS].") == "Fix []."


def test_indexed_arguments_are_zero_based():
    assert sub("a=$ARGUMENTS[0] b=$ARGUMENTS[1]", ["x", "y"]) == "a=x b=y"


def test_positional_dollar_n_is_zero_based():
    assert sub("first $0, second $1, again $0", ["x", "y"]) == "first x, second y, again x"


def test_indexed_and_positional_without_an_argument_are_left_as_written():
    assert sub("a=$ARGUMENTS[0] b=$ARGUMENTS[3] c=$5", ["x"]) == "a=x b=$ARGUMENTS[3] c=$5"


def test_skill_dir_placeholders():
    assert sub("run ${SKILL_DIR}/s.py and ${CLAUDE_SKILL_DIR}/t.py", skill_dir="skills/demo") == (
        "run skills/demo/s.py and skills/demo/t.py"
    )


def test_session_id_placeholder():
    assert sub("log to /tmp/${CLAUDE_SESSION_ID}.log", session="abc123") == "log to /tmp/abc123.log"


def test_dir_and_session_placeholders_do_not_count_as_argument_use():
    # the arguments still have to reach the model: they are appended
    text = sub("in ${SKILL_DIR} for ${CLAUDE_SESSION_ID}\n", ["a1"], skill_dir="d", session="s")
    assert text == "in d for s\n\n\nARGUMENTS: a1"


def test_declared_argument_names():
    assert sub("Fix issue $issue in $repo.", ["42", "org/x"], names=["issue", "repo"]) == "Fix issue 42 in org/x."


def test_declared_name_without_an_argument_is_empty():
    assert sub("Fix $issue in $repo.", ["42"], names=["issue", "repo"]) == "Fix 42 in ."


def test_declared_name_is_matched_on_a_word_boundary():
    assert sub("$issue and $issue_id and $issues", ["42"], names=["issue"]) == "42 and $issue_id and $issues"


def test_awk_field_references_are_untouched_without_arguments():
    body = "Count: `awk '{print $1, $2}' data.txt`\n"
    assert sub(body) == body


def test_shell_variables_and_dollar_amounts_are_untouched():
    body = "echo $HOME costs $ 5 or $x\n"
    assert sub(body) == body
    assert sub(body, names=["issue"]) == body


def test_arguments_appended_when_the_body_has_no_placeholder():
    assert sub("# Do it\n\nSteps.\n\n\n", 'a "b c"') == '# Do it\n\nSteps.\n\n\n\n\nARGUMENTS: a "b c"'  # as typed
    assert sub("Steps.\n", ["a", "b c"]) == "Steps.\n\n\nARGUMENTS: a 'b c'"  # a list is joined as shell words


def test_nothing_appended_without_arguments():
    assert sub("# Do it\n") == "# Do it\n"


def test_nothing_appended_when_a_placeholder_is_used():
    assert sub("Do $ARGUMENTS.\n", ["it"]) == "Do it.\n"
    assert sub("Do $0.\n", ["it"]) == "Do it.\n"
    assert sub("Do $ARGUMENTS[0].\n", ["it"]) == "Do it.\n"
    assert sub("Do $what.\n", ["it"], names=["what"]) == "Do it.\n"


def test_arguments_followed_by_a_word_character_is_not_a_placeholder():
    assert sub("x $ARGUMENTSX y\n", ["a"]) == "x $ARGUMENTSX y\n\n\nARGUMENTS: a"
    assert sub("x $ARGUMENTS_1\n", ["a"]) == "x $ARGUMENTS_1\n\n\nARGUMENTS: a"


def test_positional_followed_by_a_word_character_is_not_a_placeholder():
    assert sub("x $0abc\n", ["a"]) == "x $0abc\n\n\nARGUMENTS: a"


def test_multi_digit_positional():
    arguments = [str(i) for i in range(12)]
    assert sub("$10 $11 $1", arguments) == "10 11 1"


def test_unknown_braced_variables_are_untouched():
    assert sub("${HOME} ${SKILL_DIRX} $SKILL_DIR", skill_dir="d") == "${HOME} ${SKILL_DIRX} $SKILL_DIR"


def test_substituted_values_are_not_reinterpreted():
    # an argument that happens to contain `$N` is inserted as is, never substituted again
    assert sub("a=$0 b=$1", ["$1", "B"]) == "a=$1 b=B"
    assert sub("$ARGUMENTS", "$0 x") == "$0 x"


def test_declared_names_do_not_rescan_substituted_values():
    # positional pass puts "$other" into the text; the names pass then replaces it with the value of `other`
    assert sub("a=$0 b=$issue", ["$other", "X"], names=["issue", "other"]) == "a=$other b=$other"


def test_skill_dir_is_not_rescanned_for_declared_names():
    # the folder's `$issue` is not a placeholder: the body used none, so the argument is appended
    assert sub("${SKILL_DIR}/run.py", ["42"], names=["issue"], skill_dir="weird$issue") == "weird$issue/run.py\n\nARGUMENTS: 42"


def test_declared_argument_names_from_frontmatter(tmp_path):
    as_string = one_skill(tmp_path / "a", "name: demo\ndescription: D. Use when testing.\narguments: issue repo\n")
    as_list = one_skill(tmp_path / "b", "name: demo\ndescription: D. Use when testing.\narguments: [issue, repo]\n")
    nothing = one_skill(tmp_path / "c")
    assert declared_argument_names(as_string) == ["issue", "repo"]
    assert declared_argument_names(as_list) == ["issue", "repo"]
    assert declared_argument_names(nothing) == []


def test_activation_substitutes_declared_names(tmp_path):
    skill = one_skill(tmp_path, "name: demo\ndescription: D. Use when testing.\narguments: [issue]\n", "Fix #$issue.\n")
    text = activation_text(skill, "skills/demo", ["42"], "s")
    assert "Fix #42." in text
    assert "ARGUMENTS:" not in text


# --- resources() -------------------------------------------------------------------------------------------------


def demo_skill(tmp_path: Path, files: dict[str, str] | None = None) -> Path:
    """Skill `demo` in tmp/skills with `files` (relative path: text) beside its SKILL.md; the skills folder."""
    root = tmp_path / "skills"
    make_skill(root / "demo")
    for relative, text in (files or {}).items():
        write_file(root / "demo", relative, text)
    return root


def test_resources_lists_files_relative_without_skill_md(tmp_path):
    root = demo_skill(tmp_path, {"scripts/run.py": "print(1)\n", "scripts/a.sh": "echo\n",
                                 "references/guide.md": "# g\n", "README.md": "r\n", "b.txt": "b\n"})
    skill = load(root)["demo"]
    found = resources(skill)
    assert "SKILL.md" not in found
    assert set(found) == {"README.md", "b.txt", "references/guide.md", "scripts/a.sh", "scripts/run.py"}
    assert all(not os.path.isabs(p) and "\\" not in p for p in found)
    # sorted: files of a folder by name, then its subfolders by name, depth first (deterministic)
    assert found == ["README.md", "b.txt", "references/guide.md", "scripts/a.sh", "scripts/run.py"]
    assert resources(skill) == found


def test_resources_never_holds_contents(tmp_path):
    root = demo_skill(tmp_path, {"secret.md": "THE CONTENTS\n"})
    skill = load(root)["demo"]
    assert resources(skill) == ["secret.md"]
    assert "THE CONTENTS" not in activation_text(skill, "d", [], "s")


def test_resources_skips_vcs_and_cache_folders(tmp_path):
    root = tmp_path / "skills"
    folder = root / "demo"
    make_skill(folder)
    for skipped in (".git", "__pycache__", "node_modules", ".venv", ".ipynb_checkpoints"):
        (folder / skipped).mkdir()
        (folder / skipped / "file.txt").write_text("x\n")
    (folder / "scripts" / "__pycache__").mkdir(parents=True)
    (folder / "scripts" / "__pycache__" / "run.cpython-311.pyc").write_bytes(b"\x00")
    (folder / "scripts" / "run.py").write_text("print(1)\n")
    (folder / ".hidden.txt").write_text("kept\n")
    skill = load(root)["demo"]
    assert resources(skill) == [".hidden.txt", "scripts/run.py"]


def test_resources_of_a_skill_without_files_is_empty(tmp_path):
    skill = one_skill(tmp_path)
    assert resources(skill) == []


def test_nested_skill_md_is_a_resource(tmp_path):
    root = demo_skill(tmp_path, {"templates/SKILL.md": "template\n"})
    skill = Catalog([Source("session", str(root), explicit=True)]).scan().get("demo")
    assert resources(skill) == ["templates/SKILL.md"]


def test_resources_stops_walking_once_over_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(disclosure, "MAX_RESOURCES_LISTED", 3)
    root = demo_skill(tmp_path, {f"f{i}.txt": "x\n" for i in range(5)})
    folder = root / "demo"
    for sub_folder in ("a", "b"):
        (folder / sub_folder).mkdir()
        (folder / sub_folder / "x.txt").write_text("x\n")
    found = resources(load(root)["demo"])
    # more than the cap (so the listing can say there are more) but the subfolders were not walked
    assert found == [f"f{i}.txt" for i in range(5)]


def test_activation_caps_the_resource_list_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(disclosure, "MAX_RESOURCES_LISTED", 3)
    root = demo_skill(tmp_path, {f"f{i}.txt": "x\n" for i in range(6)})
    text = activation_text(load(root)["demo"], "skills/demo", [], "s")
    tail = text.split("[resources of demo: read with read_skill_resource, run scripts with run_skill_script]\n", 1)[1]
    assert tail.splitlines() == ["- f0.txt", "- f1.txt", "- f2.txt", "- ... and more files not listed (over 3)"]


# --- activation_text() -------------------------------------------------------------------------------------------


def test_activation_text_shape(tmp_path):
    body = "# Demo\n\nRun `python ${SKILL_DIR}/scripts/run.py $0`.\nSession ${CLAUDE_SESSION_ID}.\n"
    root = tmp_path / "skills"
    folder = root / "demo"
    make_skill(folder, "name: demo\ndescription: D. Use when testing.\nmetadata:\n  version: \"1.4\"\n", body)
    (folder / "scripts").mkdir()
    (folder / "scripts" / "run.py").write_text("print(1)\n")
    (folder / "references").mkdir()
    (folder / "references" / "api.md").write_text("# API\n")
    skill = load(root)["demo"]
    text = activation_text(skill, "skills/demo", ["in.csv"], "sess-9")
    assert text == (
        "[skill demo | session | 1.4 | skills/demo]\n"
        "# Demo\n\nRun `python skills/demo/scripts/run.py in.csv`.\nSession sess-9.\n"
        "\n\n[resources of demo: read with read_skill_resource, run scripts with run_skill_script]\n"
        "- references/api.md\n"
        "- scripts/run.py"
    )


def test_activation_text_without_resources_says_none(tmp_path):
    skill = one_skill(tmp_path, body="Just do it.\n")
    text = activation_text(skill, "skills/demo", [], "s")
    assert text == (
        "[skill demo | session | - | skills/demo]\nJust do it.\n"
        "\n\n[resources of demo: read with read_skill_resource, run scripts with run_skill_script]\n(none)"
    )


def test_activation_text_keeps_the_body_verbatim(tmp_path):
    body = "# Title\n\n  indented\ttab\n\n```\n$ echo `date`\n```\n<tag attr=\"x\">&amp;</tag>\n\u00e9\u4e2d\U0001f600\n"
    skill = one_skill(tmp_path, body=body)
    text = activation_text(skill, "d", [], "s")
    assert text.split("\n", 1)[1].startswith(body)


def test_activation_text_appends_arguments_for_a_body_without_placeholders(tmp_path):
    skill = one_skill(tmp_path, body="Do it.\n")
    text = activation_text(skill, "d", ["x", "y"], "s")
    assert "Do it.\n\n\nARGUMENTS: x y" in text


# --- read_resource() ---------------------------------------------------------------------------------------------


@pytest.fixture
def skill_with_files(tmp_path) -> Skill:
    root = tmp_path / "skills"
    folder = root / "demo"
    make_skill(folder)
    (folder / "references").mkdir()
    (folder / "references" / "guide.md").write_text("# Guide\n\u00e9t\u00e9\n", encoding="utf-8")
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (folder / "latin1.txt").write_bytes("caf\u00e9\n".encode("latin-1"))
    (tmp_path / "outside.txt").write_text("outside secret\n")
    (folder / "escape.md").symlink_to(tmp_path / "outside.txt")
    (folder / "inside-link.md").symlink_to(folder / "references" / "guide.md")
    return load(root)["demo"]


def test_read_resource_returns_text(skill_with_files):
    resource = read_resource(skill_with_files, "references/guide.md")
    assert resource.path == "references/guide.md"
    assert resource.text == "# Guide\n\u00e9t\u00e9\n"


def test_read_resource_follows_a_symlink_that_stays_inside(skill_with_files):
    assert read_resource(skill_with_files, "inside-link.md").text == "# Guide\n\u00e9t\u00e9\n"


def test_read_resource_dot_segments_inside_are_fine(skill_with_files):
    assert read_resource(skill_with_files, "references/../references/guide.md").text.startswith("# Guide")


@pytest.mark.parametrize("path, message", [
    ("../outside.txt", "outside the folder"),
    ("references/../../outside.txt", "outside the folder"),
    ("escape.md", "outside the folder"),
    ("missing.md", "is not a file"),
    ("references", "is not a file"),
    (".", "outside the folder"),
    ("image.png", "binary file"),
    ("latin1.txt", "not UTF-8"),
    ("", "must be a file path"),
    ("   ", "must be a file path"),
])
def test_read_resource_refusals(skill_with_files, path, message):
    with pytest.raises(ResourceError, match=message):
        read_resource(skill_with_files, path)


def test_read_resource_refuses_absolute_paths(skill_with_files):
    inside = os.path.join(skill_with_files.folder, "references", "guide.md")
    with pytest.raises(ResourceError, match="absolute"):
        read_resource(skill_with_files, inside)
    with pytest.raises(ResourceError, match="absolute"):
        read_resource(skill_with_files, "/etc/passwd")


@pytest.mark.parametrize("path", [None, 3, ["a"], {"p": 1}])
def test_read_resource_refuses_non_string_paths(skill_with_files, path):
    with pytest.raises(ResourceError, match="must be a file path"):
        read_resource(skill_with_files, path)


def test_read_resource_refuses_a_sibling_folder_with_the_same_prefix(tmp_path):
    root = tmp_path / "skills"
    make_skill(root / "demo")
    make_skill(root / "demo-other")
    (root / "demo-other" / "notes.md").write_text("other\n")
    skill = load(root)["demo"]
    with pytest.raises(ResourceError, match="outside the folder"):
        read_resource(skill, "../demo-other/notes.md")


def test_read_resource_size_limit(skill_with_files, monkeypatch):
    monkeypatch.setattr(disclosure, "MAX_RESOURCE_BYTES", 8)
    path = os.path.join(skill_with_files.folder, "references", "guide.md")
    size = os.path.getsize(path)
    with pytest.raises(ResourceError, match=f"has {size} bytes; resources over 8 bytes are not sent"):
        read_resource(skill_with_files, "references/guide.md")
    monkeypatch.setattr(disclosure, "MAX_RESOURCE_BYTES", size)  # exactly at the limit is fine
    assert read_resource(skill_with_files, "references/guide.md").text.startswith("# Guide")
