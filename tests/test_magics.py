"""The `%skills` magics, driven through a real IPython shell.

Each test gets a fresh `SkillsMagics` instance (its session is created with the cwd and environment of that
moment): the cwd is the test's tmp_path and only the project and bundled sources are searched, so the user's own
skills (~/.agents/skills, ~/.claude/skills) never leak in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from notebook_setup import register_magics, registered_magics
from skillfiles import make_skill
from skills_magic import load_ipython_extension, unload_ipython_extension
from skills_magic.skills.catalog import bundled_skills_folder
from skills_magic.notebook.magics import unregister

SAMPLE_NAMES = sorted(p.name for p in (Path(__file__).resolve().parent.parent / "sample-skills").iterdir()
                      if (p / "SKILL.md").is_file())  # the bundled sample skills, in listing order
MIME_KINDS = {
    "listing": "application/vnd.skills-magic.listing+json",
    "skill": "application/vnd.skills-magic.skill+json",
    "validation": "application/vnd.skills-magic.validation+json",
    "added": "application/vnd.skills-magic.added+json",
    "sources": "application/vnd.skills-magic.sources+json",
    "diagnostics": "application/vnd.skills-magic.diagnostics+json",
}
MARKER = re.compile(
    r"^\[skills listing truncated: showed (\d+) of (\d+) skills; .*dropped (\d+) descriptions? and (\d+) entr(?:y|ies).*\]$"
)


# --- the shell and a fresh magics instance per test --------------------------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """The notebook's folder: the cwd, with only the project and bundled sources searched."""
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "project,bundled")
    monkeypatch.delenv("SKILLS_MAGIC_PATH", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def skills(ip, project):
    """`skills("list")` runs `%skills list` on a fresh session rooted at tmp_path."""

    def run(line: str):
        return ip.run_line_magic("skills", line)

    with registered_magics(ip):
        yield run


def _collection(root: Path, names_descriptions: dict[str, str]) -> Path:
    for name, description in names_descriptions.items():
        make_skill(root / name, name=name, description=description)
    return root


def _entry_names(text: str) -> list[str]:
    return [line[2:].split(":", 1)[0] for line in text.splitlines() if line.startswith("- ")]


def _headers(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


def _strings(value):
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _codes(view_data: dict) -> list[str]:
    return [d["code"] for d in view_data["diagnostics"]]


# --- list ---------------------------------------------------------------------------------------------------------


def test_list_shows_the_bundled_sample_skills_under_their_source(skills):
    text = skills("list").text()

    assert _headers(text) == ["## bundled"]
    assert _entry_names(text) == SAMPLE_NAMES
    assert "[skills listing truncated" not in text


def test_added_skills_are_listed_first_in_a_session_group(skills, project):
    _collection(project / "mine", {"alpha-tool": "Alpha things. Use for alpha.", "beta-tool": "Beta things. Use for beta."})

    skills("add mine")
    text = skills("list").text()

    assert _headers(text) == ["## session", "## bundled"]
    assert _entry_names(text) == ["alpha-tool", "beta-tool", *SAMPLE_NAMES]


def test_a_project_skills_folder_is_listed_as_the_project_source(skills, project):
    make_skill(project / ".agents" / "skills" / "local-tool", description="A project skill. Use in this project.")

    text = skills("list").text()

    assert _headers(text) == ["## project", "## bundled"]
    assert _entry_names(text) == ["local-tool", *SAMPLE_NAMES]


def test_small_budget_ends_the_listing_with_a_marker_that_counts_what_was_shown(skills, project):
    descriptions = {f"tool-{i:02d}": f"Tool number {i} does a long and careful thing. Use when thing {i} is needed." for i in range(8)}
    _collection(project / "many", descriptions)
    skills("add many")

    view = skills("list --budget 300")
    lines = view.text().splitlines()
    listing_lines = lines[1:]  # the view puts one summary line before the listing a model would see

    match = MARKER.match(listing_lines[-1])
    assert match, listing_lines[-1]
    shown, total, _, dropped_entries = map(int, match.groups())
    assert shown == len(_entry_names(view.text()))
    assert total == len(descriptions) + len(SAMPLE_NAMES)
    assert dropped_entries == total - shown
    assert shown < total
    assert len("\n".join(listing_lines)) <= 300
    data = view.data()
    assert (data["shown"], data["total"], data["budget"], data["marker"]) == (shown, total, 300, listing_lines[-1])


def test_budget_zero_shows_every_skill_with_its_full_description(skills, project):
    descriptions = {f"tool-{i:02d}": f"Tool number {i} does a long and careful thing. Use when thing {i} is needed." for i in range(8)}
    _collection(project / "many", descriptions)
    skills("add many")

    text = skills("list --budget 0").text()

    assert "[skills listing truncated" not in text
    assert _entry_names(text) == [*descriptions, *SAMPLE_NAMES]
    for name, description in descriptions.items():
        assert f"- {name}: {description}" in text.splitlines()


def test_source_option_lists_only_that_source(skills, project):
    _collection(project / "mine", {"alpha-tool": "Alpha things. Use for alpha."})
    skills("add mine")

    bundled = skills("list --source bundled").text()
    session = skills("list --source session").text()

    assert _headers(bundled) == ["## bundled"]
    assert _entry_names(bundled) == SAMPLE_NAMES
    assert _headers(session) == ["## session"]
    assert _entry_names(session) == ["alpha-tool"]


def test_list_json_returns_the_listing_as_a_dict(skills, project):
    _collection(project / "mine", {"alpha-tool": "Alpha things. Use for alpha."})
    skills("add mine")

    data = skills("list --json")

    assert isinstance(data, dict)
    assert [(g["source"], [s["name"] for s in g["skills"]]) for g in data["groups"]] == [
        ("session", ["alpha-tool"]),
        ("bundled", SAMPLE_NAMES),
    ]
    assert (data["shown"], data["total"], data["marker"]) == (1 + len(SAMPLE_NAMES), 1 + len(SAMPLE_NAMES), None)
    assert data["groups"][0]["skills"][0]["folder"] == os.path.join("mine", "alpha-tool")
    json.dumps(data)  # plain data, ready to store or compare


def test_list_sees_a_skill_added_to_an_added_collection_after_the_first_listing(skills, project):
    mine = _collection(project / "mine", {"alpha-tool": "Alpha things. Use for alpha."})
    skills("add mine")
    assert _entry_names(skills("list").text()) == ["alpha-tool", *SAMPLE_NAMES]

    make_skill(mine / "beta-tool", description="Beta things. Use for beta.")
    # a new entry in a folder changes its mtime; make sure it differs from the cached one whatever the clock tick
    stat = os.stat(mine)
    os.utime(mine, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))

    assert _entry_names(skills("list").text()) == ["alpha-tool", "beta-tool", *SAMPLE_NAMES]


def test_messy_collection_loads_what_its_readme_says(skills, project, messy_skills):
    shutil.copytree(messy_skills, project / "messy")

    added = skills("add messy")
    listing = skills("list --json")
    errors = skills("diagnostics --severity error --json")["diagnostics"]
    collisions = skills("diagnostics --code collision --json")["diagnostics"]

    assert sorted(added.data()["skills"]) == ["csv-profile", "extra-keys", "long-description", "unit-converter", "weather-report"]
    assert [(g["source"], [s["name"] for s in g["skills"]]) for g in listing["groups"]] == [
        ("session", ["csv-profile", "extra-keys", "long-description", "unit-converter", "weather-report"]),
        ("bundled", [n for n in SAMPLE_NAMES if n != "csv-profile"]),
    ]
    assert (listing["hidden_by_collision"], listing["skipped"]) == (1, 3)
    assert sorted((Path(d["path"]).parent.name, d["code"]) for d in errors) == [
        ("broken-yaml", "yaml-error"),
        ("no-description", "description-missing"),
        ("tab-indented", "yaml-error"),
    ]
    # bundled skills are shown inside <bundled>, wherever the package is installed
    assert [d["path"] for d in collisions] == ["<bundled>/csv-profile/SKILL.md"]
    assert Path(bundled_skills_folder(), "csv-profile", "SKILL.md").is_file()


# --- show ---------------------------------------------------------------------------------------------------------


def _body_after_frontmatter(path: Path) -> str:
    """The file's text after the closing `---` line, computed independently of the package."""
    text = path.read_bytes().decode("utf-8")
    lines = text.splitlines(keepends=True)
    assert lines[0].rstrip("\r\n") == "---"
    for i, line in enumerate(lines[1:], 1):
        if line.rstrip("\r\n") == "---":
            return "".join(lines[i + 1 :])
    raise AssertionError("no closing fence")


def test_show_is_the_annotation_line_then_the_body_verbatim(skills, project):
    path = make_skill(
        project / "mine" / "demo-tool",
        frontmatter='name: demo-tool\ndescription: Demo. Use for demos.\nmetadata:\n  version: "2.1"\n',
        body="\n# Demo tool\n\nA rule:\n\n---\n\n  indented line  \ntrailing text without newline",
    )
    skills("add mine")

    view = skills("show demo-tool")
    bundle, _ = view._repr_mimebundle_()

    annotation = f"[skill demo-tool | session | 2.1 | {os.path.join('mine', 'demo-tool')}]"
    assert bundle["text/plain"] == annotation + "\n" + _body_after_frontmatter(path)
    assert bundle["text/plain"] == annotation + "\n" + "\n# Demo tool\n\nA rule:\n\n---\n\n  indented line  \ntrailing text without newline"


def test_show_keeps_crlf_line_endings_of_the_body(skills, project):
    raw = b"---\r\nname: crlf-tool\r\ndescription: Windows line ends. Use for testing.\r\n---\r\n# Title\r\n\r\nStep one.\r\n"
    path = make_skill(project / "mine" / "crlf-tool", raw=raw)
    skills("add mine")

    text = skills("show crlf-tool").text()

    assert text == f"[skill crlf-tool | session | - | {os.path.join('mine', 'crlf-tool')}]\n" + "# Title\r\n\r\nStep one.\r\n"
    assert text.split("\n", 1)[1] == _body_after_frontmatter(path)


def test_show_of_a_bundled_skill_gives_its_body_verbatim(skills, sample_skills):
    text = skills("show csv-profile").text()

    annotation, body = text.split("\n", 1)
    assert re.fullmatch(r"\[skill csv-profile \| bundled \| 1\.0 \| .*csv-profile\]", annotation)
    assert body == _body_after_frontmatter(sample_skills / "csv-profile" / "SKILL.md")


def test_show_html_renders_markdown_but_never_raw_html_from_the_body(skills, project):
    make_skill(
        project / "mine" / "html-tool",
        description="Has HTML in its body. Use for testing.",
        body="# Big title\n\nSome *emphasis*.\n\n<script>alert('x')</script>\n\nInline <img src=x onerror=alert(1)> tag.\n",
    )
    skills("add mine")

    html = skills("show html-tool")._repr_mimebundle_()[0]["text/html"]

    assert "<h1 style=" in html and ">Big title</h1>" in html  # issue 15: a shown body's headings are made smaller
    assert "<em>emphasis</em>" in html
    assert "<script" not in html
    assert "&lt;script&gt;" in html
    assert "<img" not in html


def test_listing_html_shows_descriptions_as_text_never_as_html(skills, project):
    make_skill(project / "mine" / "html-desc", frontmatter="name: html-desc\ndescription: 'Uses <script>alert(1)</script> & co.'\n")
    skills("add mine")

    html = skills("list")._repr_mimebundle_()[0]["text/html"]

    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; co." in html


def test_show_of_an_unknown_name_is_a_usage_error_naming_close_matches(skills):
    with pytest.raises(UsageError) as error:
        skills("show csv-profil")

    assert "csv-profile" in str(error.value)


def test_show_sees_an_edited_skill_file(skills, project):
    path = make_skill(project / "mine" / "edit-tool", description="Edit me. Use for edits.", body="# Old\n")
    skills("add mine")
    assert skills("show edit-tool").text().endswith("\n# Old\n")

    make_skill(project / "mine" / "edit-tool", description="Edit me. Use for edits.", body="# New and longer\n")

    assert skills("show edit-tool").text().split("\n", 1)[1] == _body_after_frontmatter(path) == "# New and longer\n"


# --- validate -----------------------------------------------------------------------------------------------------


def test_validate_a_catalog_name(skills, project):
    make_skill(project / "mine" / "extra-tool", frontmatter="name: extra-tool\ndescription: Extra. Use for testing.\ntags: [a, b]\n")
    skills("add mine")

    good = skills("validate csv-profile").data()
    bad = skills("validate extra-tool").data()

    assert good["valid"] is True and len(good["results"]) == 1 and good["results"][0]["diagnostics"] == []
    assert bad["valid"] is False
    assert [r["folder"] for r in bad["results"]] == [os.path.join("mine", "extra-tool")]
    assert _codes(bad["results"][0]) == ["unknown-field"]


def test_validate_a_path_that_the_catalog_skipped(skills, project):
    make_skill(project / "drafts" / "no-desc", frontmatter="name: no-desc\n")

    data = skills("validate drafts/no-desc").data()

    assert data["valid"] is False
    assert [r["folder"] for r in data["results"]] == [os.path.join("drafts", "no-desc")]
    assert _codes(data["results"][0]) == ["description-missing"]


def test_validate_a_collection_path_gives_one_verdict_per_skill(skills, project):
    _collection(project / "col", {"one-tool": "One. Use for one.", "two-tool": "Two. Use for two."})
    make_skill(project / "col" / "nested" / "Three-Tool", frontmatter="name: Three-Tool\ndescription: Three.\n")

    data = skills("validate col").data()

    verdicts = {r["folder"]: r["valid"] for r in data["results"]}
    assert verdicts == {
        os.path.join("col", "one-tool"): True,
        os.path.join("col", "two-tool"): True,
        os.path.join("col", "nested", "Three-Tool"): False,
    }
    assert data["valid"] is False


def test_validate_without_a_target_judges_every_skill_in_the_catalog(skills, project, messy_skills):
    shutil.copytree(messy_skills, project / "messy")
    skills("add messy")

    data = skills("validate").data()

    folders = [Path(r["folder"]).name for r in data["results"]]
    # visible skills (the bundled csv-profile is hidden by the session's) and the three skipped ones
    others = [n for n in SAMPLE_NAMES if n != "csv-profile"]
    assert sorted(folders) == sorted(
        ["csv-profile", "extra-keys", "long-description", "renamed-folder", "weather-report", *others,
         "broken-yaml", "no-description", "tab-indented"]
    )
    valid = sorted(Path(r["folder"]).name for r in data["results"] if r["valid"])
    assert valid == sorted(["csv-profile", *others])


def test_validate_of_a_missing_target_is_a_usage_error(skills):
    with pytest.raises(UsageError):
        skills("validate no-such-skill-or-folder")


# --- add ----------------------------------------------------------------------------------------------------------


def test_add_reports_the_skills_it_made_visible(skills, project):
    _collection(project / "mine", {"alpha-tool": "Alpha. Use for alpha.", "csv-profile": "My own csv profile. Use for csv."})

    view = skills("add mine")

    assert view.data() == {"folder": "mine", "skills": ["alpha-tool", "csv-profile"]}
    csv = skills("show csv-profile").data()
    assert (csv["source"], csv["folder"]) == ("session", os.path.join("mine", "csv-profile"))


def test_add_of_a_skill_md_file_adds_its_folder(skills, project):
    path = make_skill(project / "single" / "solo-tool", description="Solo. Use alone.")

    view = skills(f"add {path.relative_to(project)}")

    assert view.data() == {"folder": os.path.join("single", "solo-tool"), "skills": ["solo-tool"]}


def test_adding_the_same_folder_twice_adds_one_source(skills, project):
    _collection(project / "mine", {"alpha-tool": "Alpha. Use for alpha."})

    skills("add mine")
    skills("add ./mine/")

    labels = [s["label"] for s in skills("sources").data()["sources"]]
    assert labels.count("session") == 1


def test_add_of_a_missing_path_is_a_usage_error(skills):
    with pytest.raises(UsageError) as error:
        skills("add no/such/folder")

    assert "no/such/folder" in str(error.value)


def test_add_of_a_file_that_is_not_a_skill_md_is_a_usage_error(skills, project):
    (project / "notes.txt").write_text("not a skill\n", encoding="utf-8")

    with pytest.raises(UsageError):
        skills("add notes.txt")


def _diagnostic_count(added_text: str) -> int:
    return int(re.search(r"(\d+) diagnostics?$", added_text).group(1))


def test_add_counts_only_the_problems_of_the_added_folder(skills, project):
    make_skill(project / "col-drafts" / "no-desc", frontmatter="name: no-desc\n")
    _collection(project / "col", {"clean-tool": "Clean. Use for clean things."})

    assert _diagnostic_count(skills("add col-drafts").text()) == 1
    assert _diagnostic_count(skills("add col").text()) == 0


# --- sources and diagnostics --------------------------------------------------------------------------------------


def test_sources_lists_the_sources_in_precedence_order(skills, project):
    _collection(project / "mine", {"alpha-tool": "Alpha. Use for alpha."})
    make_skill(project / "skills" / "local-tool", description="Local. Use locally.")
    skills("add mine")

    view = skills("sources")
    sources = view.data()["sources"]

    assert [(s["precedence"], s["label"], s["folder"], s["exists"], s["skills"]) for s in sources] == [
        (1, "session", "mine", True, 1),
        (2, "project", os.path.join(".agents", "skills"), False, 0),
        (3, "project", os.path.join(".claude", "skills"), False, 0),
        (4, "project", "skills", True, 1),
        (5, "bundled", "<bundled sample skills>", True, len(SAMPLE_NAMES)),
    ]
    rows = view.text().splitlines()[1:]
    assert [row.split()[1] for row in rows] == ["session", "project", "project", "project", "bundled"]


def test_diagnostics_filters_by_severity_and_code(skills, project, messy_skills):
    shutil.copytree(messy_skills, project / "messy")
    skills("add messy")

    everything = skills("diagnostics").data()["diagnostics"]
    errors = skills("diagnostics --severity error").data()["diagnostics"]
    warnings = skills("diagnostics --severity warning").data()["diagnostics"]
    yaml_errors = skills("diagnostics --code yaml-error").data()["diagnostics"]
    both = skills("diagnostics --severity warning --code yaml-error").data()["diagnostics"]

    assert {d["severity"] for d in errors} == {"error"} and len(errors) == 3
    assert {d["severity"] for d in warnings} == {"warning"}
    assert len(errors) + len(warnings) + sum(d["severity"] == "info" for d in everything) == len(everything)
    assert sorted(Path(d["path"]).parent.name for d in yaml_errors) == ["broken-yaml", "tab-indented"]
    assert all(d["line"] is not None and d["column"] is not None for d in yaml_errors)
    assert both == []
    assert skills("diagnostics --code yaml-error --json") == {"diagnostics": yaml_errors}


def test_diagnostics_of_a_clean_catalog_is_empty(skills):
    view = skills("diagnostics")

    assert view.data() == {"diagnostics": []}


# --- rich outputs -------------------------------------------------------------------------------------------------


def _all_views(skills, project, messy_skills):
    shutil.copytree(messy_skills, project / "messy")
    make_skill(project / ".claude" / "skills" / "local-tool", description="Local. Use locally.")
    make_skill(project / ".claude" / "skills" / "csv-profile", description="Hidden by the session's. Use never.")
    return {
        "added": skills("add messy"),
        "listing": skills("list"),
        "skill": skills("show weather-report"),
        "validation": skills("validate"),
        "sources": skills("sources"),
        "diagnostics": skills("diagnostics"),
    }


def test_every_view_has_plain_text_html_and_its_own_json_type(ip, skills, project, messy_skills):
    for kind, view in _all_views(skills, project, messy_skills).items():
        data, metadata = ip.display_formatter.format(view)

        assert set(data) == {"text/plain", "text/html", MIME_KINDS[kind]}, kind
        assert data["text/plain"] == view.text()
        json.dumps(data[MIME_KINDS[kind]])
        json.dumps(metadata)


def test_view_data_holds_no_absolute_path(ip, skills, project, messy_skills, monkeypatch):
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "project")  # the bundled folder is elsewhere on disk: see below
    register_magics(ip)  # a new session with that environment (the `skills` fixture unregisters it)
    views = _all_views(skills, project, messy_skills)

    assert "collision" in _codes(views["diagnostics"].data())  # a message that names another skill's folder
    for kind, view in views.items():
        data = view._repr_mimebundle_()[0][MIME_KINDS[kind]]
        for string in _strings(data):
            assert not string.startswith(("/", "~")), (kind, string)
            assert str(project) not in string, (kind, string)


def test_bundled_skill_paths_in_view_data_are_not_absolute_when_the_notebook_is_far_away(ip, monkeypatch, tmp_path):
    notebook_folder = tmp_path / "a" / "b" / "c" / "d"
    notebook_folder.mkdir(parents=True)
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "bundled")
    monkeypatch.chdir(notebook_folder)
    with registered_magics(ip):
        views = {"listing": ip.run_line_magic("skills", "list"), "skill": ip.run_line_magic("skills", "show csv-profile")}

    for kind, view in views.items():
        for string in _strings(view.data()):
            assert not string.startswith(("/", "~")), (kind, string)


# --- bad input ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "lsit",
        "show",
        "add",
        "list --budget x",
        "list --budget",
        "list extra-argument",
        "diagnostics --severity fatal",
        "diagnostics --code no-such-code",
        'show "csv-profile',
        "add 'unclosed",
        "list --help",
    ],
)
def test_bad_input_is_a_usage_error_and_the_magic_keeps_working(skills, line):
    with pytest.raises(UsageError):
        skills(line)

    assert _entry_names(skills("list").text()) == SAMPLE_NAMES


def test_negative_budget_is_a_usage_error(skills):
    with pytest.raises(UsageError):
        skills("list --budget -5")


def test_a_usage_error_in_a_cell_is_shown_without_a_traceback(ip, skills, capsys):
    result = ip.run_cell("%skills lsit")

    assert isinstance(result.error_in_exec, UsageError)
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "UsageError" in output
    assert "Traceback" not in output


# --- configuration and the extension ------------------------------------------------------------------------------


@pytest.fixture
def configured_paths(ip):
    """Set `c.SkillsMagics.paths` on the shell's config for one test."""
    had = "SkillsMagics" in ip.config
    previous = ip.config.SkillsMagics.get("paths") if had else None

    def configure(paths: list[str]) -> None:
        ip.config.SkillsMagics.paths = paths

    yield configure
    if had and previous is not None:
        ip.config.SkillsMagics.paths = previous
    else:
        ip.config.pop("SkillsMagics", None)


@pytest.mark.parametrize("absolute", [True, False], ids=["absolute", "relative-to-the-notebook"])
def test_ipython_config_paths_add_a_path_source(ip, project, configured_paths, monkeypatch, absolute):
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "path,project,bundled")
    _collection(project / "configured", {"config-tool": "From config. Use when configured."})
    configured_paths([str(project / "configured") if absolute else "configured"])
    load_ipython_extension(ip)
    try:
        sources = ip.run_line_magic("skills", "sources").data()["sources"]
        listing = ip.run_line_magic("skills", "list").text()
    finally:
        unload_ipython_extension(ip)

    assert [(s["label"], s["folder"]) for s in sources][:2] == [("path", "configured"), ("project", os.path.join(".agents", "skills"))]
    assert _headers(listing) == ["## path", "## bundled"]
    assert _entry_names(listing) == ["config-tool", *SAMPLE_NAMES]


def test_skills_magic_path_variable_adds_a_path_source(ip, project, monkeypatch):
    _collection(project / "from-env", {"env-tool": "From the environment. Use when set."})
    monkeypatch.setenv("SKILLS_MAGIC_SOURCES", "path,bundled")
    monkeypatch.setenv("SKILLS_MAGIC_PATH", "from-env")
    with registered_magics(ip):
        listing = ip.run_line_magic("skills", "list").text()

    assert _headers(listing) == ["## path", "## bundled"]
    assert _entry_names(listing) == ["env-tool", *SAMPLE_NAMES]


def test_load_and_unload_the_extension(ip, project):
    if "skills_magic" in ip.extension_manager.loaded:
        ip.run_line_magic("unload_ext", "skills_magic")
    unregister(ip)

    ip.run_line_magic("load_ext", "skills_magic")
    assert "skills" in ip.magics_manager.magics["line"]
    assert _entry_names(ip.run_line_magic("skills", "list").text()) == SAMPLE_NAMES

    ip.run_line_magic("unload_ext", "skills_magic")
    assert "skills" not in ip.magics_manager.magics["line"]
    assert "SkillsMagics" not in ip.magics_manager.registry
    with pytest.raises(UsageError):  # IPython: line magic function `%skills` not found
        ip.run_line_magic("skills", "list")

    ip.run_line_magic("load_ext", "skills_magic")
    try:
        assert _entry_names(ip.run_line_magic("skills", "list").text()) == SAMPLE_NAMES
    finally:
        ip.run_line_magic("unload_ext", "skills_magic")


def test_help_text_names_every_subcommand():
    from skills_magic.notebook.magics import SkillsMagics

    doc = SkillsMagics.skills.__doc__
    for command in ("list", "show", "validate", "add", "sources", "diagnostics"):
        assert f"%skills {command}" in doc
