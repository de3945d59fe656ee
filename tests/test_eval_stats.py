"""Evals with error bars (issue 17, point 4): the statistics against published values, errored runs counted apart,
the comparison's plain words, and `%skills eval --save NAME` / `--against NAME` through the IPython shell."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from notebook_setup import notebook_folder, registered_magics

from skills_magic.notebook.views import EvalView
from skills_magic.runs import eval_saved
from skills_magic.runs.eval_stats import Interval, difference, fisher_exact, newcombe, spread, wilson
from skills_magic.runs.evals import EvalItem, EvalReport, RunRecord

REPO = Path(__file__).resolve().parent.parent
ACTIVATION_SET = REPO / "notebooks" / "evals" / "activation.yaml"
EVAL_MIME = "application/vnd.skills-magic.eval+json"


# --- the statistics, against known values --------------------------------------------------------------------------


@pytest.mark.parametrize("successes, trials, low, high", [
    (81, 263, 0.2553, 0.3662),  # Newcombe (1998a), "Two-sided confidence intervals for the single proportion", Table I
    (15, 148, 0.0624, 0.1605),
    (0, 20, 0.0, 0.1611),
    (1, 29, 0.0061, 0.1718),
    (29, 29, 0.8830, 1.0),
    (5, 10, 0.2366, 0.7634),
])
def test_the_wilson_interval_matches_published_values(successes, trials, low, high):
    interval = wilson(successes, trials)

    assert (interval.low, interval.high) == pytest.approx((low, high), abs=5e-5)


def test_a_wilson_interval_keeps_0_and_1_exact_and_has_none_without_trials():
    assert wilson(0, 7).low == 0.0 and wilson(7, 7).high == 1.0
    assert wilson(0, 0) is None
    assert wilson(3, 10).contains(0.3) and not wilson(3, 10).contains(0.9)


@pytest.mark.parametrize("table, p_value", [
    ((3, 1, 1, 3), 34 / 70),  # Fisher's tea-tasting table: scipy.stats.fisher_exact gives 0.4857142857142857
    ((6, 2, 1, 4), 0.10256410256410256),  # scipy.stats.fisher_exact([[6, 2], [1, 4]]).pvalue
    ((8, 2, 1, 5), 0.03496503496503497),
    ((2, 8, 7, 3), 0.06977851869492736),
    ((10, 0, 0, 10), 1.082508822446903e-05),
    ((200, 300, 250, 250), 0.0018270076470658027),  # large counts stay exact (integer arithmetic)
    ((5, 5, 5, 5), 1.0),
    ((0, 0, 3, 4), 1.0),  # an empty row: nothing to test
])
def test_fishers_exact_test_gives_scipys_two_sided_p_value(table, p_value):
    assert fisher_exact(*table) == pytest.approx(p_value, rel=1e-12)


def test_fishers_exact_test_is_symmetric_in_rows_and_columns():
    assert fisher_exact(2, 8, 7, 3) == pytest.approx(fisher_exact(7, 3, 2, 8)) == pytest.approx(fisher_exact(2, 7, 8, 3))


@pytest.mark.parametrize("counts, low, high", [
    ((56, 70, 48, 80), 0.0524, 0.3339),  # Newcombe (1998b), Table II, method 10: examples (a) to (d)
    ((9, 10, 3, 10), 0.1705, 0.8090),
    ((6, 7, 2, 7), 0.0582, 0.8062),
    ((5, 56, 0, 29), -0.0381, 0.1926),
])
def test_newcombes_interval_for_a_difference_matches_the_paper(counts, low, high):
    interval = newcombe(*counts)

    assert (interval.low, interval.high) == pytest.approx((low, high), abs=5e-5)


def test_a_difference_is_the_second_rate_minus_the_first_and_needs_both_to_agree():
    found = difference(48, 80, 56, 70)  # 60% then 80%

    assert found.difference == pytest.approx(0.2) and found.interval.low > 0
    assert found.p_value == pytest.approx(fisher_exact(56, 14, 48, 32)) and found.p_value < 0.05
    assert found.evidence
    unclear = difference(1, 2, 2, 2)  # 50% then 100% on two runs each: nothing shown
    assert unclear.interval.contains(0.0) and unclear.p_value == 1.0 and not unclear.evidence
    assert difference(0, 0, 1, 2) is None  # no counted runs on one side: nothing to compare


def test_spread_gives_min_max_and_the_sample_standard_deviation():
    assert spread([1.0, 0.0, 0.5]) == {"prompts": 3, "min": 0.0, "max": 1.0, "sd": 0.5}
    assert spread([0.5]) == {"prompts": 1, "min": 0.5, "max": 0.5, "sd": None}
    assert spread([]) == {"prompts": 0, "min": None, "max": None, "sd": None}


# --- errored runs, the report and its words ------------------------------------------------------------------------


ITEMS = [EvalItem("d1", "direct", ("alpha",), False, "direct"), EvalItem("n1", "negative", (), True, "negative")]


def report(label: str, d1: list[list[str] | str], n1: list[list[str]]) -> EvalReport:
    """A report of runs: a list of activated skills, or an error text for a run that failed."""
    records = [RunRecord("d1", n, [] if isinstance(run, str) else run, error=run if isinstance(run, str) else None)
               for n, run in enumerate(d1, 1)]
    records += [RunRecord("n1", n, run) for n, run in enumerate(n1, 1)]
    return EvalReport(label, list(ITEMS), records, runs=max(len(d1), len(n1)))


def test_errored_runs_are_excluded_from_every_rate_and_counted_apart():
    failing = report("a", [["alpha"], "HTTP 500", "HTTP 529"], [[], []])

    assert failing.activation_rate("direct") == 1.0  # 1 of 1 counted run; an errored run is never a miss
    assert failing.counts()["direct"] == (1, 1) and failing.counts()["overall"] == (3, 3)
    assert failing.errored() == 2 and failing.errored("direct") == 2 and failing.errored("negative") == 0
    assert failing.per_skill()["alpha"]["recall"] == 1.0
    summary = failing.summary()
    assert summary["errored"] == {"total": 2, "direct": 2, "paraphrase": 0, "negative": 0}
    assert summary["intervals"]["direct"] == pytest.approx(wilson(1, 1).as_list())
    headline = EvalView([failing]).text().splitlines()[0]
    assert "; 2 errored runs not counted in any rate" in headline
    assert "alpha 1/1 (2 errored)" in EvalView([failing]).text()


def test_no_evidence_of_a_difference_is_said_where_the_interval_holds_0():
    first = report("before", [["alpha"], [], []], [[], [], []])
    second = report("after", [["alpha"], ["alpha"], []], [[], [], []])

    lines = EvalView([first, second]).text().splitlines()

    direct = next(line for line in lines if line.startswith("activation, direct:"))
    assert direct == ("activation, direct: after 67% vs before 33%, +33 points (95% CI -32 to +72), p = 1.00 "
                      "(Fisher's exact test): no evidence of a difference")
    assert "false positives: after 0% vs before 0%, +0 points" in "\n".join(lines)
    assert "activation, paraphrase: not compared (no counted runs in one of the reports)" in lines


def test_a_clear_difference_is_named_with_its_direction():
    first = report("vague", [[]] * 20, [[]] * 20)
    second = report("clear", [["alpha"]] * 18 + [[]] * 2, [[]] * 20)

    view = EvalView([first, second])
    direct = next(line for line in view.text().splitlines() if line.startswith("activation, direct:"))

    assert direct.endswith("p < 0.001 (Fisher's exact test): evidence of a difference: clear is higher")
    assert view.data()["comparison"]["direct"]["evidence"] is True
    assert view.data()["comparison"]["negative"]["evidence"] is False


def test_the_chart_draws_an_error_bar_per_bar():
    view = EvalView([report("a", [["alpha"], []], [[], []]), report("b", [["alpha"], ["alpha"]], [["alpha"], []])])

    svg = view.chart_svg()

    assert svg.count("class='interval'") == 4  # direct and negatives, two reports; no paraphrase prompt, no bar
    assert "a: 50% (95% CI 9-91%)" in svg


def test_a_summary_rebuilds_the_same_report():
    original = report("a", [["alpha"], "HTTP 500", []], [["alpha"], []])

    rebuilt = eval_saved.report_from_summary(json.loads(json.dumps(original.summary())), label="saved")

    assert rebuilt.label == "saved" and rebuilt.counts() == original.counts() and rebuilt.errored() == 1
    assert rebuilt.per_prompt() == original.per_prompt() and rebuilt.spread() == original.spread()


# --- --save and --against through the IPython shell ----------------------------------------------------------------


@pytest.fixture
def magics(ip, tmp_path, monkeypatch):
    notebook_folder(monkeypatch, tmp_path, db="skills.sqlite", lock=None, sources="bundled")
    (tmp_path / "evals").mkdir()
    shutil.copy(ACTIVATION_SET, tmp_path / "evals" / "activation.yaml")
    with registered_magics(ip) as instance:
        ip.run_line_magic("skills", "model keywords")
        yield instance


def test_save_then_against_compares_a_later_run_with_the_saved_one(ip, magics, tmp_path):
    saved = ip.run_line_magic("skills", "eval evals/activation.yaml --runs 2 --save baseline")

    assert saved.text().splitlines()[0].endswith("; saved as 'baseline'")
    rows = sqlite3.connect(tmp_path / "skills.sqlite").execute(
        "SELECT data FROM runs WHERE kind = 'eval' AND label = 'baseline'").fetchall()
    assert len(rows) == 1 and json.loads(rows[0][0])["counts"] == saved.reports[0].summary()["counts"]

    later = ip.run_line_magic("skills", "eval evals/activation.yaml --runs 2 --strategy forced --against baseline")

    assert [r.label for r in later.reports] == ["baseline", "forced"]
    assert later.reports[0].counts() == saved.reports[0].counts()  # the saved result, as it was
    text = later.text()
    assert text.splitlines()[0].startswith("baseline: activation direct 100% (95% CI 72-100%), paraphrase 20% (6-51%)")
    assert text.splitlines()[0].endswith("; the result saved as 'baseline'")
    assert "activation, paraphrase: forced 40% vs baseline 20%, +20 points (95% CI " in text
    assert "(Fisher's exact test): no evidence of a difference" in text
    data = later._repr_mimebundle_()[0][EVAL_MIME]
    assert set(data["comparison"]) == {"direct", "paraphrase", "negative", "overall"}


def test_against_a_name_never_saved_stops_before_any_model_call(ip, magics):
    with pytest.raises(UsageError, match="no eval is saved as 'nothing'"):
        ip.run_line_magic("skills", "eval evals/activation.yaml --against nothing")

    assert magics.session.model_client.requests == []


def test_a_run_labelled_like_the_saved_name_is_not_taken_for_it(ip, magics):
    """Each prompt run is logged with its report's label (plain): a result saved as plain is still the one found."""
    ip.run_line_magic("skills", "eval evals/activation.yaml --runs 1 --save plain")
    ip.run_line_magic("skills", "eval evals/activation.yaml --runs 1")  # its per-run rows are labelled plain too

    later = ip.run_line_magic("skills", "eval evals/activation.yaml --runs 1 --against plain")

    assert [r.label for r in later.reports] == ["plain", "plain"]
    assert later.reports[0].totals()["runs"] == 15


@pytest.mark.parametrize("line, words", [
    ("--compare forced --save x", "--save takes one run: drop --compare"),
    ("--compare forced --against x", "--against takes one run: drop --compare"),
])
def test_save_and_against_take_one_run(ip, magics, line, words):
    with pytest.raises(UsageError, match=words):
        ip.run_line_magic("skills", f"eval evals/activation.yaml {line}")


def test_against_a_result_of_other_prompts_is_refused(ip, magics, tmp_path):
    ip.run_line_magic("skills", "eval evals/activation.yaml --runs 1 --save base")
    (tmp_path / "evals" / "other.yaml").write_text("- {id: X1, prompt: Profile this CSV file., expected: [csv-profile]}\n",
                                                   encoding="utf-8")

    with pytest.raises(UsageError, match="ran on other prompts"):
        ip.run_line_magic("skills", "eval evals/other.yaml --against base")


def test_interval_contains_its_ends():
    assert Interval(0.2, 0.4).contains(0.2) and Interval(0.2, 0.4).contains(0.4) and not Interval(0.2, 0.4).contains(0.5)
