"""Bad SKILL.md files: each gets a clear diagnostic with a stable code, and nothing else is lost.

Every bad skill is also put next to a good one in a collection and scanned: the good skill must still be listed
(in the catalog and in the text listing) and the bad one must be named in the diagnostics, skipped or loaded with
a warning. Line numbers are those of SKILL.md: the opening `---` is line 1.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from skillfiles import make_skill

import skills_magic.skills.skill as skill_module
from skills_magic.skills.catalog import Catalog, CatalogScan, Source
from skills_magic.skills.listing import text_listing
from skills_magic.skills.skill import CODES
from skills_magic.skills.validate import load_skill, validate_folder

GOOD_DESCRIPTION = "The good one. Use when checking that a bad neighbour loses nothing."


def collection(tmp_path: Path) -> Path:
    """A collection folder holding one good skill; tests add a bad one beside it."""
    root = tmp_path / "skills"
    make_skill(root / "good-skill", description=GOOD_DESCRIPTION)
    return root


def scan(root: Path) -> CatalogScan:
    return Catalog([Source("session", str(root), explicit=True)]).scan()


def assert_good_skill_still_listed(result: CatalogScan) -> None:
    assert "good-skill" in result.names()
    assert result.get("good-skill").description == GOOD_DESCRIPTION
    _, text = text_listing(result.skills, None)
    assert f"- good-skill: {GOOD_DESCRIPTION}" in text.splitlines()


def codes_at(result: CatalogScan, path: Path) -> list[str]:
    return [d.code for d in result.diagnostics if d.path == str(path)]


def errors(diagnostics) -> list[str]:
    return [d.code for d in diagnostics if d.severity == "error"]


def only(diagnostics, code: str):
    found = [d for d in diagnostics if d.code == code]
    assert len(found) == 1, f"expected one {code!r} diagnostic, got {[str(d) for d in diagnostics]}"
    return found[0]


# --- files that cannot be loaded: (bytes, the error code, its line and column) ----------------------------------

SKIPPED = [
    pytest.param(b"---\nname: bad-skill\ndescription: caf\xe9 au lait\n---\n", "encoding-error", 3, 17, id="latin1-byte-in-frontmatter"),
    pytest.param(b"---\nname: bad-skill\ndescription: d\n---\n# Body\nline \xff\n", "encoding-error", 6, 6, id="bad-byte-in-body"),
    pytest.param(b"", "empty-file", None, None, id="empty-file"),
    pytest.param(b"\n  \n\t\n", "empty-file", None, None, id="whitespace-only"),
    pytest.param(b"# Bad skill\n\nNo frontmatter here.\n", "no-frontmatter", 1, 1, id="no-frontmatter"),
    pytest.param(b"---\nname: bad-skill\ndescription: d\n# Body\n", "frontmatter-unclosed", 1, 1, id="unclosed"),
    pytest.param(b"---\nname: bad-skill\ndescription: a: b\n---\n", "yaml-error", 3, 15, id="yaml-syntax-error"),
    pytest.param(b"---\nname: bad-skill\ndescription: d\nmetadata:\n\tversion: '1'\n---\n", "yaml-error", 5, 1, id="tab-indent"),
    pytest.param(b"---\nname: bad-skill\ndescription: >\n  ok\n\tbad\n---\n", "yaml-error", 5, 1, id="tab-in-block-scalar"),
    pytest.param(b"---\n- name: bad-skill\n- description: d\n---\n", "frontmatter-not-mapping", 2, 1, id="frontmatter-list"),
    pytest.param(b"---\njust some words\n---\n", "frontmatter-not-mapping", 2, 1, id="frontmatter-string"),
    pytest.param(b"---\n42\n---\n", "frontmatter-not-mapping", 2, 1, id="frontmatter-number"),
    pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01", "binary-file", None, None, id="binary-png"),
    pytest.param(b"---\n---\n", "description-missing", None, None, id="empty-frontmatter"),
    pytest.param(b"---\nname: bad-skill\ndescription: 42\n---\n", "description-not-string", 3, None, id="description-int"),
]


@pytest.mark.parametrize("raw, code, line, column", SKIPPED)
def test_bad_file_gets_one_error_with_its_location(tmp_path, raw, code, line, column):
    path = make_skill(tmp_path / "bad-skill", raw=raw)
    result = load_skill(path)
    assert result.skill is None
    assert errors(result.diagnostics) == [code]
    diagnostic = only(result.diagnostics, code)
    assert CODES[code][0] == "error" == diagnostic.severity
    assert (diagnostic.line, diagnostic.column) == (line, column)
    assert diagnostic.path == str(path)
    assert diagnostic.message.strip()


@pytest.mark.parametrize("raw, code, line, column", SKIPPED)
def test_bad_file_is_skipped_and_the_good_skill_beside_it_still_loads(tmp_path, raw, code, line, column):
    root = collection(tmp_path)
    bad = make_skill(root / "bad-skill", raw=raw)
    result = scan(root)
    assert_good_skill_still_listed(result)
    assert "bad-skill" not in result.names()
    assert [r.path for r in result.skipped] == [str(bad)]
    assert code in codes_at(result, bad)


@pytest.mark.parametrize("raw, code, line, column", SKIPPED)
def test_bad_file_is_invalid_strictly_with_the_same_code(tmp_path, raw, code, line, column):
    make_skill(tmp_path / "bad-skill", raw=raw)
    verdict = validate_folder(tmp_path / "bad-skill")
    assert not verdict.valid
    assert code in [d.code for d in verdict.diagnostics]


def test_empty_frontmatter_also_reports_the_missing_name(tmp_path):
    result = load_skill(make_skill(tmp_path / "bad-skill", raw=b"---\n---\n"))
    assert [d.code for d in result.diagnostics] == ["name-missing", "description-missing"]


def test_yaml_error_line_counts_the_opening_fence_as_line_one(tmp_path):
    frontmatter = "name: bad-skill\ndescription: fine\nlicense: MIT\ncompatibility: any\nmetadata: {a: [1, 2}\n"
    result = load_skill(make_skill(tmp_path / "bad-skill", frontmatter))
    diagnostic = only(result.diagnostics, "yaml-error")
    assert diagnostic.line == 6  # `metadata:` is the sixth line of SKILL.md
    assert diagnostic.column == len("metadata: {a: [1, 2") + 1


def test_tab_error_message_mentions_the_tab(tmp_path):
    raw = b"---\nname: bad-skill\ndescription: d\nmetadata:\n\tversion: '1'\n---\n"
    diagnostic = only(load_skill(make_skill(tmp_path / "bad-skill", raw=raw)).diagnostics, "yaml-error")
    assert "tab" in diagnostic.message


def test_encoding_error_names_the_bad_byte(tmp_path):
    raw = b"---\nname: bad-skill\ndescription: caf\xe9\n---\n"
    diagnostic = only(load_skill(make_skill(tmp_path / "bad-skill", raw=raw)).diagnostics, "encoding-error")
    assert "0xe9" in diagnostic.message.lower()


# --- files that are not readable regular files ----------------------------------------------------------------


def _dangling_symlink(folder: Path) -> None:
    folder.mkdir(parents=True)
    os.symlink(folder / "does-not-exist.md", folder / "SKILL.md")


def _folder_named_skill_md(folder: Path) -> None:
    (folder / "SKILL.md").mkdir(parents=True)
    make_skill(folder / "SKILL.md" / "inner")  # even a skill inside it is not this folder's SKILL.md


@pytest.mark.parametrize(
    "make_bad, code",
    [
        pytest.param(_dangling_symlink, "unreadable", id="dangling-symlink"),
        pytest.param(_folder_named_skill_md, "not-a-file", id="folder-named-SKILL.md"),
    ],
)
def test_skill_md_that_is_not_a_readable_file_is_skipped_and_others_still_load(tmp_path, make_bad, code):
    root = collection(tmp_path)
    make_bad(root / "bad-skill")
    bad = root / "bad-skill" / "SKILL.md"
    diagnostic = only(load_skill(bad).diagnostics, code)
    assert diagnostic.severity == "error" and diagnostic.message.strip()
    result = scan(root)
    assert_good_skill_still_listed(result)
    assert [r.path for r in result.skipped] == [str(bad)]
    assert codes_at(result, bad) == [code]
    assert result.names() == ["good-skill"]


def test_unreadable_skill_md_is_skipped_and_others_still_load(tmp_path, monkeypatch):
    root = collection(tmp_path)
    bad = make_skill(root / "bad-skill")
    real_read = skill_module._read_bytes

    def read_refusing_one_file(path):
        if os.path.abspath(path) == str(bad):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_read(path)

    monkeypatch.setattr(skill_module, "_read_bytes", read_refusing_one_file)
    diagnostic = only(load_skill(bad).diagnostics, "unreadable")
    assert diagnostic.severity == "error" and diagnostic.message.strip()
    result = scan(root)
    assert_good_skill_still_listed(result)
    assert [r.path for r in result.skipped] == [str(bad)]
    assert codes_at(result, bad) == ["unreadable"]

    if os.geteuid() != 0:  # root reads a mode-000 file anyway; CI runs as root, so this part runs on laptops
        monkeypatch.undo()
        locked = make_skill(root / "locked-skill")
        locked.chmod(0)
        try:
            result = scan(root)
            assert_good_skill_still_listed(result)
            assert codes_at(result, locked) == ["unreadable"]
            assert str(locked) in [r.path for r in result.skipped]
        finally:
            locked.chmod(0o644)


def test_symlink_loop_in_a_source_ends_the_scan_and_the_good_skill_loads_once(tmp_path):
    root = collection(tmp_path)
    group = root / "group"
    make_skill(group / "nested-skill")
    os.symlink(root, group / "back-to-root")
    os.symlink(group, group / "to-itself")
    result = scan(root)
    assert_good_skill_still_listed(result)
    assert sorted(result.names()) == ["good-skill", "nested-skill"]
    loops = [d for d in result.diagnostics if d.code == "symlink-loop"]
    assert sorted(d.path for d in loops) == [str(group / "back-to-root"), str(group / "to-itself")]
    assert all(d.severity == "info" for d in loops)


def test_five_megabyte_body_loads_intact_with_a_body_long_info(tmp_path):
    body = "".join(f"Line {i:06d} of a very long skill body. " + "x" * 60 + "\n" for i in range(53_000))
    assert len(body.encode()) > 5 * 1024 * 1024
    root = collection(tmp_path)
    path = make_skill(root / "huge-skill", body=body)
    result = load_skill(path)
    assert result.skill is not None
    assert result.skill.body == body
    assert only(result.diagnostics, "body-long").severity == "info"
    assert validate_folder(root / "huge-skill").valid  # advice, not a violation
    listed = scan(root)
    assert_good_skill_still_listed(listed)
    assert listed.get("huge-skill").body == body


# --- files that load with a warning (lenient) but break the specification ---------------------------------------

LENIENT = [
    # (folder, SKILL.md bytes, the warning code, its line, its column)
    pytest.param("bad-skill", b"\xef\xbb\xbf---\nname: bad-skill\ndescription: d\n---\n", "bom", 1, 1, id="bom"),
    pytest.param("bad-skill", b"---\nname: bad-skill\ndescription: first\ndescription: second\n---\n", "duplicate-key", 4, 1, id="duplicate-key"),
    pytest.param("Caf\u00e9-Tools", "---\nname: Caf\u00e9-Tools\ndescription: d\n---\n".encode(), "name-uppercase", 2, None, id="name-uppercase-non-ascii"),
    pytest.param("pdf-tools", b"---\nname: PDF-Tools\ndescription: d\n---\n", "name-uppercase", 2, None, id="name-uppercase-ascii"),
    pytest.param("bad-skill", b"---\nname: bad-skill\ndescription: d\nmetadata: {version: 1.0}\n---\n", "metadata-not-string", 4, None, id="metadata-float"),
    pytest.param("bad-skill", b"---\nname: bad-skill\ndescription: d\nallowed-tools: [Read, Write]\n---\n", "allowed-tools-not-string", 4, None, id="allowed-tools-list"),
    pytest.param("bad-skill", b"---\nname: bad-skill\ndescription: d\ndisable-model-invocation: [1]\n---\n", "field-type", 4, None, id="extension-field-wrong-type"),
]


@pytest.mark.parametrize("folder, raw, code, line, column", LENIENT)
def test_spec_violation_loads_with_a_warning_and_is_invalid_strictly(tmp_path, folder, raw, code, line, column):
    path = make_skill(tmp_path / folder, raw=raw)
    result = load_skill(path)
    assert result.skill is not None
    assert errors(result.diagnostics) == []
    diagnostic = only(result.diagnostics, code)
    assert CODES[code][0] == "warning" == diagnostic.severity
    assert (diagnostic.line, diagnostic.column) == (line, column)
    assert diagnostic.message.strip()
    assert not validate_folder(tmp_path / folder).valid


@pytest.mark.parametrize("folder, raw, code, line, column", LENIENT)
def test_spec_violation_is_listed_beside_the_good_skill_with_its_warning(tmp_path, folder, raw, code, line, column):
    root = collection(tmp_path)
    path = make_skill(root / folder, raw=raw)
    result = scan(root)
    assert_good_skill_still_listed(result)
    assert len(result.skills) == 2 and result.skipped == ()
    [bad] = [s for s in result.skills if s.path == str(path)]
    assert code in [d.code for d in bad.diagnostics]
    assert code in codes_at(result, path)
    _, text = text_listing(result.skills, None)
    assert f"- {bad.name}: {bad.description}" in text.splitlines()


def test_bom_is_stripped_so_the_name_is_read_right(tmp_path):
    path = make_skill(tmp_path / "bom-skill", raw=b"\xef\xbb\xbf---\nname: bom-skill\ndescription: With a BOM.\n---\n# Body\n")
    skill = load_skill(path).skill
    assert (skill.name, skill.description, skill.body) == ("bom-skill", "With a BOM.", "# Body\n")
    assert [d.code for d in validate_folder(tmp_path / "bom-skill").problems] == ["bom"]


def test_bom_does_not_shift_the_column_of_a_bad_byte(tmp_path):
    raw = b"\xef\xbb\xbf---\nname: bad-skill\ndescription: caf\xe9\n---\n"
    diagnostic = only(load_skill(make_skill(tmp_path / "bad-skill", raw=raw)).diagnostics, "encoding-error")
    assert (diagnostic.line, diagnostic.column) == (3, 17)


def test_duplicate_key_keeps_the_last_value(tmp_path):
    raw = b"---\nname: bad-skill\ndescription: first\nlicense: MIT\ndescription: second\n---\n"
    result = load_skill(make_skill(tmp_path / "bad-skill", raw=raw))
    assert result.skill.description == "second"
    assert only(result.diagnostics, "duplicate-key").line == 5


def test_duplicate_key_inside_metadata_is_reported_on_its_line(tmp_path):
    raw = b"---\nname: bad-skill\ndescription: d\nmetadata:\n  version: '1'\n  version: '2'\n---\n"
    result = load_skill(make_skill(tmp_path / "bad-skill", raw=raw))
    assert (only(result.diagnostics, "duplicate-key").line, only(result.diagnostics, "duplicate-key").column) == (6, 3)
    assert result.skill.frontmatter.metadata == {"version": "2"}


def test_unquoted_metadata_version_loads_as_the_string_the_author_wrote(tmp_path):
    raw = b"---\nname: bad-skill\ndescription: d\nmetadata: {version: 1.0}\n---\n"
    skill = load_skill(make_skill(tmp_path / "bad-skill", raw=raw)).skill
    assert skill.frontmatter.metadata == {"version": "1.0"}
    assert skill.version == "1.0"
    assert "metadata-not-string" in [d.code for d in validate_folder(tmp_path / "bad-skill").problems]


def test_unquoted_metadata_version_keeps_its_trailing_zero(tmp_path):
    raw = b"---\nname: bad-skill\ndescription: d\nmetadata: {version: 1.10}\n---\n"
    skill = load_skill(make_skill(tmp_path / "bad-skill", raw=raw)).skill
    assert skill.version == "1.10"


def test_allowed_tools_list_loads_as_a_list_but_is_invalid_strictly(tmp_path):
    raw = b"---\nname: bad-skill\ndescription: d\nallowed-tools: [Read, Write]\n---\n"
    skill = load_skill(make_skill(tmp_path / "bad-skill", raw=raw)).skill
    assert skill.frontmatter.allowed_tools == ["Read", "Write"]
    verdict = validate_folder(tmp_path / "bad-skill")
    assert [d.code for d in verdict.problems] == ["allowed-tools-not-string"]
    assert verdict.problems[0].line == 4


def test_extension_field_of_the_wrong_type_is_ignored_and_named(tmp_path):
    raw = b"---\nname: bad-skill\ndescription: d\ndisable-model-invocation: [1]\n---\n"
    result = load_skill(make_skill(tmp_path / "bad-skill", raw=raw))
    assert result.skill.frontmatter.disable_model_invocation is False  # the default: the bad value is dropped
    assert result.skill.model_visible
    assert "disable-model-invocation" in only(result.diagnostics, "field-type").message


# --- `---` inside values, line endings, names ----------------------------------------------------------------

@pytest.mark.parametrize(
    "frontmatter, description",
    [
        pytest.param("description: before --- after\n", "before --- after", id="inline"),
        pytest.param("description: |\n  before\n  ---\n  after\n", "before\n---\nafter", id="literal-block"),
        pytest.param("description: >\n  before\n  ---\n  after\n", "before --- after", id="folded-block"),
        pytest.param("description: before\n  --- after\n", "before --- after", id="plain-continuation"),
        pytest.param("description: \"before\n  ---\n  after\"\n", "before --- after", id="quoted-multiline"),
    ],
)
def test_dashes_inside_a_value_do_not_close_the_frontmatter(tmp_path, frontmatter, description):
    path = make_skill(tmp_path / "dash-skill", f"name: dash-skill\n{frontmatter}license: MIT\n", body="# Body\n---\nafter the rule\n")
    result = load_skill(path)
    assert result.diagnostics == ()
    assert result.skill.description == description
    assert result.skill.frontmatter.license == "MIT"
    assert result.skill.body == "# Body\n---\nafter the rule\n"


def test_crlf_line_endings_load_like_lf(tmp_path):
    root = collection(tmp_path)
    raw = b"---\r\nname: crlf-skill\r\ndescription: Written on Windows.\r\nlicense: MIT\r\n---\r\n# Body\r\nStep one.\r\n"
    path = make_skill(root / "crlf-skill", raw=raw)
    result = load_skill(path)
    assert result.diagnostics == ()
    skill = result.skill
    assert (skill.name, skill.description, skill.frontmatter.license) == ("crlf-skill", "Written on Windows.", "MIT")
    assert skill.body == "# Body\r\nStep one.\r\n"
    assert validate_folder(root / "crlf-skill").valid
    listed = scan(root)
    assert_good_skill_still_listed(listed)
    assert "crlf-skill" in listed.names()


def test_crlf_yaml_error_line_is_that_of_skill_md(tmp_path):
    raw = b"---\r\nname: bad-skill\r\ndescription: a: b\r\n---\r\n"
    diagnostic = only(load_skill(make_skill(tmp_path / "bad-skill", raw=raw)).diagnostics, "yaml-error")
    assert (diagnostic.line, diagnostic.column) == (3, 15)


@pytest.mark.parametrize(
    "folder, written, listed",
    [
        pytest.param("caf\u00e9", "caf\u00e9", "caf\u00e9", id="non-ascii-letter"),
        pytest.param("caf\u00e9", "cafe\u0301", "caf\u00e9", id="decomposed-accent"),
        pytest.param("cafe-tools", "\uff43afe-tools", "cafe-tools", id="fullwidth-letter"),
        pytest.param("file-tools", "\ufb01le-tools", "file-tools", id="fi-ligature"),
        pytest.param("tool-2", "tool-\u2461", "tool-2", id="circled-digit"),
    ],
)
def test_non_ascii_name_that_normalizes_to_its_folder_is_valid(tmp_path, folder, written, listed):
    root = collection(tmp_path)
    path = make_skill(root / folder, f"name: {written}\ndescription: Unicode name.\n")
    result = load_skill(path)
    assert result.diagnostics == ()
    assert result.skill.name == listed
    assert validate_folder(root / folder).valid
    found = scan(root)
    assert_good_skill_still_listed(found)
    assert listed in found.names()


def test_uppercase_non_ascii_name_warns_and_still_lists(tmp_path):
    root = collection(tmp_path)
    path = make_skill(root / "Caf\u00e9-Tools", "name: Caf\u00e9-Tools\ndescription: Upper.\n")
    result = load_skill(path)
    assert [d.code for d in result.diagnostics] == ["name-uppercase"]
    assert "Caf\u00e9-Tools" in result.diagnostics[0].message
    found = scan(root)
    assert_good_skill_still_listed(found)
    assert "name-uppercase" in codes_at(found, path)
    assert len(found.skills) == 2


def test_file_over_the_size_limit_is_refused_unread_and_others_still_load(tmp_path, monkeypatch):
    monkeypatch.setattr(skill_module, "MAX_SKILL_FILE_BYTES", 4096)
    root = collection(tmp_path)
    bad = make_skill(root / "bad-skill", body="x" * 5000)
    diagnostic = only(load_skill(bad).diagnostics, "too-large")
    assert diagnostic.severity == "error" and str(bad.stat().st_size) in diagnostic.message
    result = scan(root)
    assert_good_skill_still_listed(result)
    assert [r.path for r in result.skipped] == [str(bad)]


# --- hostile YAML -------------------------------------------------------------------------------------------------

BILLION_LAUGHS = "lol0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 30)
)


def test_alias_bombs_and_self_references_are_skipped_without_expanding(tmp_path):
    # run in a child process with a generous timeout: a regression here would hang rather than fail
    root = collection(tmp_path)
    make_skill(root / "bomb", f"name: bomb\ndescription: Aliases.\n{BILLION_LAUGHS}")
    make_skill(root / "loop", "name: loop\ndescription: Self reference.\nx: &x [*x]\n")
    code = (
        "import sys; from skills_magic.session import SkillsSession; from skills_magic.skills.catalog import Source; "
        "from skills_magic.notebook.views import SkillView; "
        f"s = SkillsSession(sources=[Source('session', {str(root)!r}, True)]); "
        "names = sorted(x.name for x in s.scan().skills); "
        "[SkillView(s.skill(n), s.show_path).data() for n in names]; print(names)"
    )
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "['good-skill']"  # past the alias bound: skipped with a diagnostic, the rest load


def test_nesting_deeper_than_yaml_allows_is_a_yaml_error(tmp_path):
    root = collection(tmp_path)
    make_skill(root / "deep", "name: deep\ndescription: Deep.\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    result = scan(root)
    assert_good_skill_still_listed(result)
    assert errors(result.diagnostics) == ["yaml-error"]
