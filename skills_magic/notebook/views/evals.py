"""The views of activation evals: rates per category, per skill and per prompt, and the bar chart (`%skills eval`)."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.costs import cost_said
from skills_magic.notebook.views.base import View, escape, plural, table_html, table_text
from skills_magic.runs.eval_stats import Interval

def _rate(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def _span(interval) -> str:
    """A 95% interval as `8-42%` (an empty string when there is none)."""
    return "" if interval is None else f"{interval.low:.0%}"[:-1] + f"-{interval.high:.0%}"


def _rated(value, interval, named: bool = False) -> str:
    """A rate with its 95% interval: `20% (8-42%)`; `named`: `20% (95% CI 8-42%)`."""
    return _rate(value) + (f" ({'95% CI ' if named else ''}{_span(interval)})" if interval is not None else "")


def _p(value: float) -> str:
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}" if value < 0.01 else f"p = {value:.2f}"


def _interval(pair) -> Interval | None:
    """An interval stored as [low, high] (a summary's)."""
    return None if pair is None else Interval(*pair)


MEASURE_TITLES = {"direct": "activation, direct", "paraphrase": "activation, paraphrase",
                  "negative": "false positives", "overall": "overall (runs that did the right thing)"}


CHART_COLOURS = ("#1f77b4", "#ff7f0e")  # one per compared report


def activation_chart_svg(reports) -> str:
    """A bar chart per category (direct and paraphrase activation, false positives on negatives), one bar per report."""
    groups = [("direct", "activation, direct"), ("paraphrase", "activation, paraphrase"), ("negative", "false positives")]
    width, height, top, bottom, left = 520, 240, 20, 50, 40
    plot_h = height - top - bottom
    group_w = (width - left - 10) / len(groups)
    bar_w = min(40, (group_w - 20) / max(1, len(reports)))
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-family='sans-serif' font-size='11'>"]
    for tick in (0, 0.5, 1):
        y = top + plot_h * (1 - tick)
        parts.append(f"<line x1='{left}' x2='{width - 10}' y1='{y:.1f}' y2='{y:.1f}' stroke='#ddd'/>")
        parts.append(f"<text x='{left - 4}' y='{y + 4:.1f}' text-anchor='end'>{tick:.0%}</text>")
    for g, (category, title) in enumerate(groups):
        x0 = left + g * group_w + 10
        for r, report in enumerate(reports):
            value, interval = report.rate(category), report.interval(category)
            h = plot_h * (value or 0)
            x = x0 + r * (bar_w + 4)
            colour = CHART_COLOURS[r % len(CHART_COLOURS)]
            parts.append(f"<rect x='{x:.1f}' y='{top + plot_h - h:.1f}' width='{bar_w:.1f}' height='{h:.1f}' fill='{colour}'>"
                         f"<title>{escape(report.label)}: {_rated(value, interval, named=True)}</title></rect>")
            if interval is not None:  # the error bar: the 95% interval, with caps
                mid, low, high = x + bar_w / 2, top + plot_h * (1 - interval.low), top + plot_h * (1 - interval.high)
                parts.append(f"<path class='interval' d='M{mid:.1f},{low:.1f}V{high:.1f}M{mid - 5:.1f},{low:.1f}H{mid + 5:.1f}"
                             f"M{mid - 5:.1f},{high:.1f}H{mid + 5:.1f}' stroke='#333' fill='none'/>")
            label_y = top + plot_h * (1 - max(value or 0, interval.high if interval else 0)) - 3
            parts.append(f"<text x='{x + bar_w / 2:.1f}' y='{label_y:.1f}' text-anchor='middle'>{_rate(value)}</text>")
        parts.append(f"<text x='{x0 + group_w / 2 - 10:.1f}' y='{height - bottom + 16}' text-anchor='middle'>{escape(title)}</text>")
    for r, report in enumerate(reports):
        x = left + r * 160
        parts.append(f"<rect x='{x}' y='{height - 18}' width='10' height='10' fill='{CHART_COLOURS[r % len(CHART_COLOURS)]}'/>")
        parts.append(f"<text x='{x + 14}' y='{height - 9}'>{escape(report.label)}</text>")
    parts.append("</svg>")
    return "".join(parts)


class EvalView(View):
    """`%skills eval`: activation per category, false and wrong activations, per skill, per prompt, a chart."""

    kind = "eval"

    def __init__(self, reports, lint: dict[str, list] | None = None, seconds: float | None = None):
        self.reports, self.lint, self.seconds = list(reports), lint or {}, seconds

    def _headline(self, report) -> str:
        t = report.totals()
        errored = report.errored()
        return (f"{report.label}: activation direct {_rated(report.rate('direct'), report.interval('direct'), named=True)}, "
                f"paraphrase {_rated(report.rate('paraphrase'), report.interval('paraphrase'))}; false positives "
                f"{_rated(report.rate('negative'), report.interval('negative'))}; wrong skill "
                f"{_rated(report.rate('wrong_skill'), report.interval('wrong_skill'))}; {plural(t['runs'], 'run')}, "
                f"{plural(t['calls'], 'call')}, {t['input_tokens']:,} input / {t['output_tokens']:,} output tokens"
                + cost_said(report.cost_usd, report.stopped)
                + (f"; {plural(errored, 'errored run')} not counted in any rate" if errored else "")
                + (f"; batches {', '.join(report.batch_ids)}" if report.batch_ids else "")
                + (f"; {report.note}" if report.note else ""))

    def comparison(self) -> dict[str, Any]:
        """The second report against the first, per category and overall (none for a single report)."""
        return self.reports[1].compared_with(self.reports[0]) if len(self.reports) == 2 else {}

    def _comparison_lines(self) -> list[str]:
        if len(self.reports) != 2:
            return []
        first, second = self.reports
        lines = []
        for measure, found in self.comparison().items():
            title = MEASURE_TITLES[measure]
            if found is None:
                lines.append(f"{title}: not compared (no counted runs in one of the reports)")
                continue
            low, high = (f"{100 * v:+.0f}" for v in found.interval.as_list())
            said = (f"evidence of a difference: {second.label} is {'higher' if found.difference > 0 else 'lower'}"
                    if found.evidence else "no evidence of a difference")
            lines.append(f"{title}: {second.label} {_rate(found.second)} vs {first.label} {_rate(found.first)}, "
                         f"{100 * found.difference:+.0f} points (95% CI {low} to {high}), {_p(found.p_value)} "
                         f"(Fisher's exact test): {said}")
        return lines

    def _spread_lines(self) -> list[str]:
        """Runs repeated per prompt: how far apart the prompts' own rates are, per category."""
        lines = []
        for report in self.reports:
            if report.runs < 2:
                continue
            shown = [f"{MEASURE_TITLES[c]} {_rate(row['min'])} on every prompt" if row["min"] == row["max"] else
                     f"{MEASURE_TITLES[c]} {_rate(row['min'])} to {_rate(row['max'])} (sd {100 * row['sd']:.0f} points)"
                     for c, row in report.spread().items() if row["prompts"]]
            if shown:
                lines.append(f"{report.label}: per-prompt rates over {report.runs} runs each: {'; '.join(shown)}")
        return lines

    def _skill_rows(self):
        rows = []
        names = sorted({s for r in self.reports for s in r.per_skill()} | set(self.lint))
        for name in names:
            cells = [name]
            for report in self.reports:
                stats = report.per_skill().get(name, {})
                cells += [_rated(stats.get("precision"), _interval(stats.get("precision_interval"))),
                          _rated(stats.get("recall"), _interval(stats.get("recall_interval")))]
            findings = self.lint.get(name, [])
            cells.append(", ".join(f.rule for f in findings) or "clean")
            rows.append(cells)
        return rows

    def _skill_columns(self):
        columns = ["skill"]
        for report in self.reports:
            columns += [f"precision ({report.label})", f"recall ({report.label})"]
        return columns + ["lint"]

    def differences(self) -> list[str]:
        """The prompts whose activations differ between the reports side by side (none for a single report)."""
        if len(self.reports) < 2:
            return []
        tables = [report.per_prompt() for report in self.reports]
        return [row["id"] for n, row in enumerate(tables[0]) if any(t[n]["activated"] != row["activated"] for t in tables[1:])]

    def _prompt_rows(self):
        rows = []
        first, differing = self.reports[0], set(self.differences())
        for n, row in enumerate(first.per_prompt()):
            cells = [row["id"], row["category"], ", ".join(row["expected"]) or "(none)"]
            for report in self.reports:
                other = report.per_prompt()[n]
                shown = ", ".join(f"{s} {k}/{other['runs']}" for s, k in sorted(other["activated"].items())) or f"none 0/{other['runs']}"
                cells.append(shown + (f" ({other['errors']} errored)" if other["errors"] else ""))
            if len(self.reports) > 1:
                cells.append("differs" if row["id"] in differing else "")
            rows.append(cells)
        return rows

    def _prompt_columns(self):
        return (["id", "category", "expected"] + [f"activated ({r.label})" for r in self.reports]
                + (["compared"] if len(self.reports) > 1 else []))

    def _differences_line(self) -> list[str]:
        if len(self.reports) < 2:
            return []
        found = self.differences()
        total = len(self.reports[0].items)
        said = f": {', '.join(found)}" if found else ""
        return [f"activation differs between {' and '.join(r.label for r in self.reports)} on {len(found)} of {total} prompts{said}"]

    def _behaviour_lines(self) -> list[str]:
        lines = []
        for report in self.reports:
            for skill, row in sorted(report.behaviour.items()):
                lines.append(f"{report.label}: {skill}: behaviours passed with the skill {_rate(row.get('with_rate'))}, "
                             f"without it {_rate(row.get('without_rate'))}" + (f" ({row['unjudged']} unjudged)" if row["unjudged"] else ""))
        return lines

    def _statistics_lines(self) -> list[str]:
        return self._comparison_lines() + self._spread_lines()

    def text(self) -> str:
        parts = [self._headline(r) for r in self.reports] + self._differences_line() + self._statistics_lines()
        parts += ["", table_text(self._skill_columns(), self._skill_rows(), numeric=frozenset()),
                  "", table_text(self._prompt_columns(), self._prompt_rows(), numeric=frozenset())]
        behaviour = self._behaviour_lines()
        if behaviour:
            parts += ["", *behaviour]
        return "\n".join(parts)

    def html(self) -> str:
        head = "".join(f"<p><b>{escape(line)}</b></p>" for line in [self._headline(r) for r in self.reports] + self._differences_line())
        head += "".join(f"<p>{escape(line)}</p>" for line in self._statistics_lines())
        behaviour = "".join(f"<li>{escape(line)}</li>" for line in self._behaviour_lines())
        return (f"<div class='skills-magic-eval'>{head}{activation_chart_svg(self.reports)}"
                f"{table_html(self._skill_columns(), self._skill_rows(), numeric=range(1, 1 + 2 * len(self.reports)))}"
                f"{table_html(self._prompt_columns(), self._prompt_rows(), names=(0, 2))}"
                + (f"<ul>{behaviour}</ul>" if behaviour else "") + "</div>")

    def data(self) -> dict[str, Any]:
        compared = {m: None if d is None else d.as_dict() for m, d in self.comparison().items()}
        return {"reports": [r.summary() for r in self.reports], **({"differences": self.differences()} if len(self.reports) > 1 else {}),
                **({"comparison": compared} if compared else {}),
                "lint": {name: [f.rule for f in findings] for name, findings in self.lint.items()}}

    def chart_svg(self) -> str:
        """The bar chart alone, as SVG (it is inlined in the HTML; `%skills eval --chart FILE` saves it)."""
        return activation_chart_svg(self.reports)

    def metadata(self) -> dict[str, Any]:
        return {} if self.seconds is None else {"seconds": round(self.seconds, 6)}
