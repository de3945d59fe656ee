"""The catalog over real folders: source precedence and collisions, the bounded recursive search, de-duplication,
the stat cache, and the real corpus."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from skillfiles import make_skill

import skills_magic.skills.catalog as catalog_module
from skills_magic.skills.catalog import (
    MAX_SEARCH_DEPTH,
    SKIPPED_FOLDERS,
    Catalog,
    Source,
    bundled_skills_folder,
    default_sources,
)
from skills_magic.skills.listing import text_listing

PRECEDENCE = ["session", "path", "project", "user", "bundled"]


def scan_of(root: Path, explicit: bool = True, label: str = "session"):
    return Catalog([Source(label, str(root), explicit=explicit)]).scan()


def diagnostics_with(scan, code: str) -> list:
    return [d for d in scan.diagnostics if d.code == code]


def bump_mtime(path: Path) -> None:
    """Move a file's or folder's mtime a second ahead, so a change is seen even with coarse timestamps."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


# --- sources and precedence ------------------------------------------------------------------------------------


@pytest.fixture
def bundled_skills():
    return Catalog([Source("bundled", bundled_skills_folder())]).scan().skills


def test_same_name_in_every_source_first_wins_and_each_copy_below_has_a_collision(tmp_path, bundled_skills):
    shared = bundled_skills[0].name  # the bundled copy is the package's own; the others are written here
    cwd, home, on_path, session = tmp_path / "project", tmp_path / "home", tmp_path / "on-path", tmp_path / "session"
    folders = {"session": session, "path": on_path, "project": cwd / ".claude" / "skills", "user": home / ".agents" / "skills"}
    for label, folder in folders.items():
        make_skill(folder / shared, description=f"The {label} copy.")
        make_skill(folder / f"only-{label}", description=f"Only in {label}.")
    catalog = Catalog(default_sources(cwd=str(cwd), home=str(home), environ={"SKILLS_MAGIC_PATH": str(on_path)}))
    catalog.add(session)
    scan = catalog.scan()

    winner = scan.get(shared)
    assert (winner.source, winner.description) == ("session", "The session copy.")
    losers = [s for s in scan.shadowed if s.skill.name == shared]
    assert [s.skill.source for s in losers] == ["path", "project", "user", "bundled"]
    assert all(s.winner is winner for s in losers)
    for loser in losers:
        [collision] = [d for d in diagnostics_with(scan, "collision") if d.path == loser.skill.path]
        assert collision.severity == "warning"
        assert shared in collision.message
    assert len(diagnostics_with(scan, "collision")) == 4

    listing, text = text_listing(scan.skills, None)
    expected = PRECEDENCE if len(bundled_skills) > 1 else PRECEDENCE[:-1]
    assert [label for label, _ in listing.groups] == expected
    assert [f"## {label}" for label in expected] == [line for line in text.splitlines() if line.startswith("## ")]
    for label in folders:
        assert scan.get(f"only-{label}").source == label


def test_earlier_session_addition_wins_over_a_later_one(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    make_skill(first / "tool", description="First.")
    make_skill(second / "tool", description="Second.")
    catalog = Catalog([])
    catalog.add(first)
    catalog.add(second)
    scan = catalog.scan()
    assert scan.get("tool").description == "First."
    assert [s.skill.path for s in scan.shadowed] == [str(second / "tool" / "SKILL.md")]


def test_project_folders_are_searched_agents_then_claude_then_skills(tmp_path):
    cwd = tmp_path / "project"
    for sub in (".agents/skills", ".claude/skills", "skills"):
        make_skill(cwd / sub / "tool", description=f"From {sub}.")
    sources = default_sources(cwd=str(cwd), home=str(tmp_path / "home"), environ={"SKILLS_MAGIC_SOURCES": "project"})
    scan = Catalog(sources).scan()
    assert scan.get("tool").description == "From .agents/skills."
    assert len(scan.shadowed) == 2


def test_skills_magic_path_adds_path_sources_before_the_project(tmp_path):
    cwd, first, second = tmp_path / "project", tmp_path / "first", tmp_path / "project" / "relative"
    environ = {"SKILLS_MAGIC_PATH": os.pathsep.join([str(first), "", "relative"])}
    sources = default_sources(cwd=str(cwd), home=str(tmp_path / "home"), environ=environ)
    path_sources = [s for s in sources if s.label == "path"]
    assert [s.root for s in path_sources] == [str(first), str(second)]
    assert all(s.explicit for s in path_sources)
    labels = [s.label for s in sources]
    assert labels.index("path") < labels.index("project") < labels.index("user") < labels.index("bundled")

    make_skill(first / "from-path")
    make_skill(cwd / "skills" / "from-path", description="The project copy.")
    scan = Catalog(sources).scan()
    assert scan.get("from-path").source == "path"
    assert [s.skill.source for s in scan.shadowed] == ["project"]


@pytest.mark.parametrize("wanted, labels", [("project,bundled", ["project", "bundled"]), (" user , path ", ["path", "user"])])
def test_skills_magic_sources_keeps_only_the_named_labels(tmp_path, wanted, labels):
    environ = {"SKILLS_MAGIC_SOURCES": wanted, "SKILLS_MAGIC_PATH": str(tmp_path / "extra")}
    sources = default_sources(cwd=str(tmp_path / "project"), home=str(tmp_path / "home"), environ=environ)
    assert list(dict.fromkeys(s.label for s in sources)) == labels


def test_skills_magic_sources_leaves_out_the_user_folder(tmp_path):
    cwd, home = tmp_path / "project", tmp_path / "home"
    make_skill(cwd / ".claude" / "skills" / "in-project")
    make_skill(home / ".agents" / "skills" / "in-home")
    scan = Catalog(default_sources(cwd=str(cwd), home=str(home), environ={"SKILLS_MAGIC_SOURCES": "project"})).scan()
    assert scan.names() == ["in-project"]


def test_unknown_source_label_raises_naming_it(tmp_path):
    with pytest.raises(ValueError, match="nonsense"):
        default_sources(cwd=str(tmp_path), home=str(tmp_path), environ={"SKILLS_MAGIC_SOURCES": "project,nonsense"})


# --- the recursive search --------------------------------------------------------------------------------------


@pytest.mark.parametrize("explicit", [True, False])
def test_skills_nested_one_to_three_levels_are_found(tmp_path, explicit):
    make_skill(tmp_path / "one")
    make_skill(tmp_path / "group" / "two")
    make_skill(tmp_path / "group" / "deeper" / "three")
    scan = scan_of(tmp_path, explicit=explicit, label="project")
    assert sorted(scan.names()) == ["one", "three", "two"]
    assert scan.diagnostics == ()


@pytest.mark.parametrize("skipped", [".git", "node_modules", "__pycache__", ".venv", "venv", "site-packages"])
def test_tool_folders_are_not_searched(tmp_path, skipped):
    assert skipped in SKIPPED_FOLDERS
    make_skill(tmp_path / "visible")
    make_skill(tmp_path / skipped / "hidden-inside")
    make_skill(tmp_path / "group" / skipped / "hidden-deeper")
    assert scan_of(tmp_path, explicit=True).names() == ["visible"]


def test_a_folder_holding_pyvenv_cfg_is_not_searched_whatever_its_name(tmp_path):
    make_skill(tmp_path / "visible")
    env = tmp_path / "my-env"
    (env / "lib").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    make_skill(env / "lib" / "packaged-skill")
    assert scan_of(tmp_path, explicit=True).names() == ["visible"]


def test_hidden_folders_are_searched_only_for_explicit_sources(tmp_path):
    make_skill(tmp_path / "visible")
    make_skill(tmp_path / ".curated" / "curated-skill")
    assert sorted(scan_of(tmp_path, explicit=True).names()) == ["curated-skill", "visible"]
    assert scan_of(tmp_path, explicit=False, label="project").names() == ["visible"]
    catalog = Catalog([])
    catalog.add(tmp_path)
    assert sorted(catalog.scan().names()) == ["curated-skill", "visible"]


def test_a_skill_deeper_than_the_search_depth_is_not_found_and_says_so(tmp_path):
    limit = tmp_path.joinpath(*[f"level-{i}" for i in range(1, MAX_SEARCH_DEPTH)])  # MAX_SEARCH_DEPTH - 1 levels
    make_skill(limit / "at-the-limit")  # exactly MAX_SEARCH_DEPTH levels below the root
    make_skill(limit / "one-more" / "too-deep")  # one level more
    make_skill(tmp_path / "shallow")
    scan = scan_of(tmp_path)
    assert sorted(scan.names()) == ["at-the-limit", "shallow"]
    [depth] = diagnostics_with(scan, "search-depth")
    assert depth.severity == "info"
    assert depth.path == str(limit / "one-more")


def test_a_skill_folder_is_not_searched_further(tmp_path):
    make_skill(tmp_path / "outer")
    make_skill(tmp_path / "outer" / "references" / "inner")
    make_skill(tmp_path / "outer" / "inner-two")
    scan = scan_of(tmp_path)
    assert scan.names() == ["outer"]
    assert scan.files_found == 1


def test_lowercase_skill_md_is_found(tmp_path):
    path = make_skill(tmp_path / "lower", filename="skill.md")
    make_skill(tmp_path / "upper")
    scan = scan_of(tmp_path)
    assert sorted(scan.names()) == ["lower", "upper"]
    assert scan.get("lower").path == str(path)


def test_skill_md_is_preferred_to_skill_md_lowercase_in_one_folder(tmp_path):
    make_skill(tmp_path / "both", description="Upper case file.")
    lower = tmp_path / "both" / "skill.md"
    lower.write_text("---\nname: both\ndescription: Lower case file.\n---\n")
    if len(os.listdir(tmp_path / "both")) == 1:
        pytest.skip("case-insensitive file system: SKILL.md and skill.md are one file")
    scan = scan_of(tmp_path)
    assert scan.names() == ["both"]
    assert scan.get("both").description == "Upper case file."


# --- de-duplication by real path -------------------------------------------------------------------------------


def test_a_symlinked_skill_folder_is_listed_once(tmp_path):
    make_skill(tmp_path / "real-skill")
    os.symlink(tmp_path / "real-skill", tmp_path / "zz-alias")
    scan = scan_of(tmp_path)
    assert scan.names() == ["real-skill"]
    assert scan.shadowed == () and scan.skipped == ()
    [duplicate] = diagnostics_with(scan, "duplicate")
    assert duplicate.severity == "info"
    assert duplicate.path == str(tmp_path / "zz-alias" / "SKILL.md")
    assert diagnostics_with(scan, "collision") == []


def test_overlapping_sources_list_each_skill_once(tmp_path):
    outer = tmp_path / "outer"
    make_skill(outer / "top")
    make_skill(outer / "group" / "inside")
    catalog = Catalog([])
    catalog.add(outer)
    catalog.add(outer / "group")
    scan = catalog.scan()
    assert sorted(scan.names()) == ["inside", "top"]
    assert scan.shadowed == ()
    assert diagnostics_with(scan, "collision") == []
    assert [d.path for d in diagnostics_with(scan, "duplicate")] == [str(outer / "group" / "inside" / "SKILL.md")]


# --- the cache --------------------------------------------------------------------------------------------------


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Every path the catalog asks the loader to parse."""
    calls: list[str] = []
    real = catalog_module.load_skill

    def counting(path):
        calls.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(catalog_module, "load_skill", counting)
    return calls


@pytest.fixture
def collection(tmp_path) -> Path:
    """A source root holding a collection of three skills."""
    for name in ("alpha", "beta", "gamma"):
        make_skill(tmp_path / "collection" / name, description=f"The {name} skill.")
    return tmp_path


def test_second_scan_with_nothing_changed_is_the_same_object_and_reads_nothing(collection, loads):
    catalog = Catalog([Source("session", str(collection), explicit=True)])
    first = catalog.scan()
    assert len(loads) == 3
    assert catalog.scan() is first
    assert len(loads) == 3


def test_editing_one_skill_reparses_only_that_one(collection, loads):
    catalog = Catalog([Source("session", str(collection), explicit=True)])
    first = catalog.scan()
    beta = collection / "collection" / "beta" / "SKILL.md"
    make_skill(beta.parent, description="The beta skill, rewritten and longer.")
    bump_mtime(beta)
    loads.clear()
    second = catalog.scan()
    assert loads == [str(beta)]
    assert second is not first
    assert second.get("beta").description == "The beta skill, rewritten and longer."
    assert second.names() == first.names()


def test_a_new_skill_in_an_existing_collection_is_found_on_the_next_scan(collection, loads):
    catalog = Catalog([Source("session", str(collection), explicit=True)])
    catalog.scan()
    delta = make_skill(collection / "collection" / "delta")
    bump_mtime(collection / "collection")
    loads.clear()
    scan = catalog.scan()
    assert scan.names() == ["alpha", "beta", "delta", "gamma"]
    assert loads == [str(delta)]


def test_a_deleted_skill_folder_is_gone_on_the_next_scan(collection, loads):
    catalog = Catalog([Source("session", str(collection), explicit=True)])
    catalog.scan()
    shutil.rmtree(collection / "collection" / "beta")
    bump_mtime(collection / "collection")
    loads.clear()
    scan = catalog.scan()
    assert scan.names() == ["alpha", "gamma"]
    assert loads == []


def test_renaming_skill_md_to_lowercase_is_followed(collection):
    catalog = Catalog([Source("session", str(collection), explicit=True)])
    catalog.scan()
    folder = collection / "collection" / "beta"
    (folder / "SKILL.md").rename(folder / "skill.md")
    bump_mtime(folder)
    scan = catalog.scan()
    assert scan.names() == ["alpha", "beta", "gamma"]
    assert scan.get("beta").path == str(folder / "skill.md")
    assert scan.skipped == ()


def test_renaming_skill_md_within_one_timestamp_tick_loses_no_skill(collection):
    # file systems with coarse timestamps (FAT, SMB, or two changes in one kernel clock tick) keep a folder's
    # mtime across a rename; restoring it by hand reproduces that exactly
    catalog = Catalog([Source("session", str(collection), explicit=True)])
    catalog.scan()
    folder = collection / "collection" / "beta"
    before = os.stat(folder)
    (folder / "SKILL.md").rename(folder / "skill.md")
    os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))
    scan = catalog.scan()
    assert {"alpha", "gamma"} <= set(scan.names())  # unchanged skills must never disappear
    assert scan.names() == ["alpha", "beta", "gamma"]


def test_a_source_added_after_a_scan_is_in_the_next_scans_sources(collection):
    catalog = Catalog([Source("session", str(collection), explicit=True)])
    catalog.scan()
    empty = collection / "empty"
    empty.mkdir()
    added = catalog.add(empty)
    assert added in catalog.scan().sources


# --- the real corpus -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_scan(corpus):
    return Catalog([Source("session", str(corpus), explicit=True)]).scan()


@pytest.mark.corpus
def test_corpus_scan_accounts_for_every_skill_md(corpus_scan, corpus_skill_folders):
    duplicates = len(diagnostics_with(corpus_scan, "duplicate"))
    accounted = len(corpus_scan.skills) + len(corpus_scan.shadowed) + len(corpus_scan.skipped) + duplicates
    assert accounted == len(corpus_skill_folders)
    assert corpus_scan.files_found == len(corpus_skill_folders)
    found = {os.path.dirname(s.path) for s in corpus_scan.skills}
    found |= {os.path.dirname(s.skill.path) for s in corpus_scan.shadowed}
    found |= {os.path.dirname(r.path) for r in corpus_scan.skipped}
    assert found | {os.path.dirname(d.path) for d in diagnostics_with(corpus_scan, "duplicate")} == {str(f) for f in corpus_skill_folders}


@pytest.mark.corpus
def test_corpus_every_shadowed_skill_has_a_collision_on_its_own_path(corpus_scan):
    collisions = [d.path for d in diagnostics_with(corpus_scan, "collision")]
    assert sorted(collisions) == sorted(s.skill.path for s in corpus_scan.shadowed)
    for shadowed in corpus_scan.shadowed:
        assert shadowed.winner.name == shadowed.skill.name
        assert corpus_scan.get(shadowed.skill.name) is shadowed.winner


@pytest.mark.corpus
def test_corpus_hidden_collections_are_included(corpus_scan, corpus_skill_folders):
    for hidden in (".system", ".curated", ".experimental"):
        expected = {str(f) for f in corpus_skill_folders if f"{os.sep}openai-skills{os.sep}{hidden}{os.sep}" in str(f) + os.sep}
        assert expected, f"the corpus has no openai-skills/{hidden} skills"
        loaded = [s for s in (*corpus_scan.skills, *(x.skill for x in corpus_scan.shadowed)) if os.path.dirname(s.path) in expected]
        assert {os.path.dirname(s.path) for s in loaded} == expected
