"""The views of activation evals: rates per category, per skill and per prompt, and the bar chart (`%skills eval`)."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, plural, table_html, table_text

def _rate(value) -> str:
    return "-" if value is None else f"{value:.0%}"


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
            value = report.false_positive_rate() if category == "negative" else report.activation_rate(category)
            h = plot_h * (value or 0)
            x = x0 + r * (bar_w + 4)
            colour = CHART_COLOURS[r % len(CHART_COLOURS)]
            parts.append(f"<rect x='{x:.1f}' y='{top + plot_h - h:.1f}' width='{bar_w:.1f}' height='{h:.1f}' fill='{colour}'>"
                         f"<title>{escape(report.label)}: {_rate(value)}</title></rect>")
            parts.append(f"<text x='{x + bar_w / 2:.1f}' y='{top + plot_h - h - 3:.1f}' text-anchor='middle'>{_rate(value)}</text>")
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
        return (f"{report.label}: activation direct {_rate(report.activation_rate('direct'))}, paraphrase "
                f"{_rate(report.activation_rate('paraphrase'))}; false positives {_rate(report.false_positive_rate())}; "
                f"wrong skill {_rate(report.wrong_skill_rate())}; {plural(t['runs'], 'run')}, {plural(t['calls'], 'call')}, "
                f"{t['input_tokens']:,} input / {t['output_tokens']:,} output tokens"
                + (f"; batches {', '.join(report.batch_ids)}" if report.batch_ids else ""))

    def _skill_rows(self):
        rows = []
        names = sorted({s for r in self.reports for s in r.per_skill()} | set(self.lint))
        for name in names:
            cells = [name]
            for report in self.reports:
                stats = report.per_skill().get(name, {})
                cells += [_rate(stats.get("precision")), _rate(stats.get("recall"))]
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
                cells.append(shown)
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

    def text(self) -> str:
        parts = [self._headline(r) for r in self.reports] + self._differences_line()
        parts += ["", table_text(self._skill_columns(), self._skill_rows(), numeric=frozenset()),
                  "", table_text(self._prompt_columns(), self._prompt_rows(), numeric=frozenset())]
        behaviour = self._behaviour_lines()
        if behaviour:
            parts += ["", *behaviour]
        return "\n".join(parts)

    def html(self) -> str:
        head = "".join(f"<p><b>{escape(line)}</b></p>" for line in [self._headline(r) for r in self.reports] + self._differences_line())
        behaviour = "".join(f"<li>{escape(line)}</li>" for line in self._behaviour_lines())
        return (f"<div class='skills-magic-eval'>{head}{activation_chart_svg(self.reports)}"
                f"{table_html(self._skill_columns(), self._skill_rows(), numeric=range(1, 1 + 2 * len(self.reports)))}"
                f"{table_html(self._prompt_columns(), self._prompt_rows(), names=(0, 2))}"
                + (f"<ul>{behaviour}</ul>" if behaviour else "") + "</div>")

    def data(self) -> dict[str, Any]:
        return {"reports": [r.summary() for r in self.reports], **({"differences": self.differences()} if len(self.reports) > 1 else {}),
                "lint": {name: [f.rule for f in findings] for name, findings in self.lint.items()}}

    def chart_svg(self) -> str:
        """The bar chart alone, as SVG (it is inlined in the HTML; `%skills eval --chart FILE` saves it)."""
        return activation_chart_svg(self.reports)

    def metadata(self) -> dict[str, Any]:
        return {} if self.seconds is None else {"seconds": round(self.seconds, 6)}
