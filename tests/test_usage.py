"""Usage, measured (issue 18, point 4): activations and resource reads per skill, of every source, counted from the
run log (records/usage.py), shown by `%skills list --usage` (the last use's time in metadata only), and
`%skills list --by-usage`, which drops the least-used descriptions first under a budget and says so."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from notebook_setup import notebook_folder, registered_magics
from skillfiles import make_skill

from skills_magic.models.scripted import ScriptedModel
from skills_magic.notebook.views.skills import ListingView
from skills_magic.records.usage import NEVER_USED, Usage, least_used_first, skill_usage
from skills_magic.session import SkillsSession
from skills_magic.skills.catalog import Catalog, Source
from skills_magic.skills.listing import BY_USAGE_NOTE, TEXT_FORMAT, plan_listing, render_text, text_listing

pytestmark = pytest.mark.usefixtures("machine_setup_forgotten")
GUIDE = "# Guide\n\nThe details.\n"


def own_skills(root: Path) -> Path:
    """Two skills of the session's own source: alpha (with a reference file) and beta (never used here)."""
    make_skill(root / "alpha", description="Alpha does the first thing. Use when alpha is named.")
    (root / "alpha" / "references").mkdir()
    (root / "alpha" / "references" / "guide.md").write_text(GUIDE, encoding="utf-8")
    make_skill(root / "beta", description="Beta does the second thing. Use when beta is named.")
    return root


def tool(tool_name: str, **data) -> dict:
    return {"tool_use": [{"name": tool_name, "input": data}]}


def three_runs(session: SkillsSession) -> None:
    """alpha activated by the model and read once, csv-profile (bundled) activated, then alpha run by name and read
    twice: alpha 2 activations, 3 reads, 2 runs; csv-profile 1 activation; beta nothing."""
    session.model_client = ScriptedModel([
        tool("activate_skill", name="alpha"), tool("read_skill_resource", skill="alpha", path="references/guide.md"),
        "Done with alpha.",
        tool("activate_skill", name="csv-profile"), "Profiled.",
        tool("read_skill_resource", skill="alpha", path="references/guide.md"),
        tool("read_skill_resource", skill="alpha", path="references/guide.md"), "Read twice.",
    ])
    session.run("Use alpha.")
    session.run("Profile weather.csv.")
    session.run("Again, by name.", skill="alpha")


@pytest.fixture
def session(monkeypatch, tmp_path) -> SkillsSession:
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    made = SkillsSession(cwd=str(tmp_path))
    made.add(str(own_skills(tmp_path / "own")))
    return made


# --- counting ----------------------------------------------------------------------------------------------------

def test_usage_counts_activations_reads_runs_and_the_last_use_of_every_source(session):
    three_runs(session)
    rows = session.runs.rows(kind="run")  # newest first

    usage = session.skill_usage()

    assert usage["alpha"] == Usage(activations=2, reads=3, runs=2, last_used=rows[0]["at"])
    assert usage["csv-profile"] == Usage(activations=1, reads=0, runs=1, last_used=rows[1]["at"])  # bundled
    assert "beta" not in usage and usage.get("beta", NEVER_USED).uses == 0
    assert {session.skill("alpha").source, session.skill("csv-profile").source} == {"session", "bundled"}


def test_only_runs_count_and_a_refused_read_reads_nothing(session):
    session.runs.record("run", trace=[{"stage": "activate", "object": "beta"},
                                      {"stage": "reference", "object": "beta/notes.md", "detail": "denied: outside"},
                                      {"stage": "execute", "object": "beta/scripts/x.py"}])
    session.runs.record("eval", trace=[{"stage": "activate", "object": "beta"}])  # an eval's own row: not a run

    assert session.skill_usage() == {"beta": Usage(1, 0, 1, session.runs.rows(kind="run")[0]["at"])}


def test_usage_of_many_rows_is_one_query_over_the_traces(tmp_path):
    session = SkillsSession(cwd=str(tmp_path))
    trace = json.dumps([{"stage": "discover", "object": "catalog"}, {"stage": "activate", "object": "alpha"},
                        {"stage": "reference", "object": "alpha/references/guide.md"}])
    rows = [(f"2026-12-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}", "s", "run", trace, "[\"alpha\"]")
            for n in range(100_000)]
    connection = session.database.connect()
    connection.execute("BEGIN")  # one transaction: a commit per row (the connection's autocommit) is slow
    connection.executemany("INSERT INTO runs (at, session, kind, trace, activated) VALUES (?, ?, ?, ?, ?)", rows)
    connection.execute("COMMIT")
    statements = []
    connection.set_trace_callback(statements.append)
    try:
        usage = skill_usage(session.runs)
    finally:
        connection.set_trace_callback(None)

    assert usage == {"alpha": Usage(100_000, 100_000, 100_000, "2026-12-01T23:59:59")}
    assert len(statements) == 1 and "requests" not in statements[0] and "responses" not in statements[0]


def test_least_used_first_orders_by_uses_then_age_ties_from_the_end():
    usage = {"a": Usage(3, 1, 2, "2026-12-01T10:00:00"), "b": Usage(1, 0, 1, "2026-12-01T09:00:00"),
             "c": Usage(1, 0, 1, "2026-11-30T09:00:00")}

    assert least_used_first(["a", "b", "c", "d", "e"], usage) == ["e", "d", "c", "b", "a"]


# --- the listing's order -----------------------------------------------------------------------------------------

def four(tmp_path: Path):
    for name in ("one", "two", "three", "four"):
        make_skill(tmp_path / name, description=f"The {name} skill does a long and careful thing. " * 3)
    return Catalog([Source("session", str(tmp_path), explicit=True)]).scan().skills


def dropping_budget(skills) -> int:
    """The largest budget under which some descriptions, not all, are dropped and no entry is."""
    for budget in range(2_000, 200, -1):
        listing, _ = text_listing(skills, budget)
        if 0 < listing.dropped_descriptions < len(skills) and not listing.dropped_entries:
            return budget
    raise AssertionError("no budget drops some descriptions only")


def test_drop_first_drops_those_descriptions_first_and_the_marker_says_so(tmp_path):
    skills = four(tmp_path)
    budget = dropping_budget(skills)

    default, _ = text_listing(skills, budget)
    names = [e.name for e in default.entries()]  # the listing's order
    ordered, text = text_listing(skills, budget, drop_first=names)  # the first listed go first

    dropped = [e.name for e in default.entries() if e.description is None]
    assert dropped == names[-len(dropped):]  # the default: from the end
    gone = [e.name for e in ordered.entries() if e.description is None]
    assert gone == names[:len(gone)] and len(dropped) <= len(gone) < len(names)  # the first listed went first
    assert BY_USAGE_NOTE in text.splitlines()[-1] and BY_USAGE_NOTE not in default.marker()
    assert len(text) <= budget


def test_the_default_listing_is_unchanged_by_the_new_parameter(tmp_path):
    skills = four(tmp_path)
    for budget in (None, 0, 150, 300, dropping_budget(skills), 600, 100_000):
        assert render_text(plan_listing(skills, budget, TEXT_FORMAT)) == text_listing(skills, budget)[1] \
            == text_listing(skills, budget, drop_first=())[1]


# --- the magic ---------------------------------------------------------------------------------------------------

def test_skills_list_usage_shows_counts_and_keeps_the_time_in_metadata(ip, monkeypatch, tmp_path):
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    with registered_magics(ip) as magics:
        magics.session.add(str(own_skills(tmp_path / "own")))
        plain_before = ip.run_line_magic("skills", "list --budget 0").text()
        three_runs(magics.session)
        view = ip.run_line_magic("skills", "list --usage --budget 0")
        plain = ip.run_line_magic("skills", "list --budget 0")
        last = magics.session.runs.rows(kind="run")[0]["at"]

    assert isinstance(view, ListingView)
    lines = view.text().splitlines()
    assert lines[1].split()[:4] == ["skill", "activations", "reads", "runs"]
    assert [line.split() for line in lines if line.split()[:1] in (["alpha"], ["beta"], ["csv-profile"])][:3] == [
        ["alpha", "2", "3", "2"], ["beta", "0", "0", "0"], ["csv-profile", "1", "0", "1"]]
    skills = {s["name"]: s for g in view.data()["groups"] for s in g["skills"]}
    assert skills["alpha"]["usage"] == {"activations": 2, "reads": 3, "runs": 2}
    assert view.metadata()["last_used"]["alpha"] == last and view.metadata()["last_used"]["beta"] is None
    assert last not in json.dumps(view.data()) + view.text() + view.html()  # re-runs give the same output
    assert "<th" in view.html() and ">3</td>" in view.html()
    assert plain.text() == plain_before and "activations" not in plain.text() and "usage" not in plain.data()["groups"][0]["skills"][0]


def test_skills_list_by_usage_drops_the_least_used_descriptions_first_and_says_so(ip, monkeypatch, tmp_path):
    notebook_folder(monkeypatch, tmp_path, sources="bundled")
    with registered_magics(ip) as magics:
        magics.session.add(str(own_skills(tmp_path / "own")))
        three_runs(magics.session)
        skills = magics.session.scan().skills
        budget = next(b for b in range(2_000, 200, -1) if not (listing := text_listing(skills, b)[0]).dropped_entries
                      and any(e.name == "csv-profile" and e.description is None for e in listing.entries()))
        default = ip.run_line_magic("skills", f"list --budget {budget}")
        ordered = ip.run_line_magic("skills", f"list --by-usage --budget {budget}")
        roomy = (ip.run_line_magic("skills", "list --budget 0").text(),
                 ip.run_line_magic("skills", "list --by-usage --budget 0").text())

    def described(view) -> dict[str, bool]:
        return {e.name: e.description is not None for e in view.listing.entries()}

    assert described(default)["csv-profile"] is False  # the default drops from the end: bundled skills go first
    assert described(ordered)["csv-profile"] and described(ordered)["alpha"]  # the used keep theirs
    gone = {name for name, shown in described(ordered).items() if not shown}
    assert "claim-verification" in gone and gone <= {"beta", "claim-verification", "deep-research", "lab-notebook-entry",
                                                     "scientific-method", "source-verification"}  # never used
    assert BY_USAGE_NOTE in ordered.text().splitlines()[-1] and BY_USAGE_NOTE not in default.text()
    assert roomy[0] == roomy[1]  # nothing dropped: the same listing
