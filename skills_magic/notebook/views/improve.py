"""The view of `%skills improve`: the current description and each variant on the training split, the chosen one
against the current on the held-out split (rates with 95% intervals, the difference and its exact p-value), the
total cost, and the `%%skill write` cell that would keep it (never run)."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, preformatted, table_html, table_text

COLUMNS = ["description", "split", "hits", "false activations", "score"]


def _rate(count: int, total: int, interval) -> str:
    if not total:
        return "-"
    low, high = interval
    return f"{count}/{total} {count / total:.0%} [{low:.0%}, {high:.0%}]"


def _row(label: str, split: str, score) -> list[str]:
    if score is None:  # the cap stopped the improvement before this one ran
        return [label, split, "not run", "not run", "-"]
    intervals = score.intervals()
    return [label, split, _rate(score.hits, score.positives, intervals["hit_rate"] or (0, 0)),
            _rate(score.false, score.negatives, intervals["false_rate"] or (0, 0)), f"{score.value:+.2f}"]


class ImproveView(View):
    kind = "improve"

    def __init__(self, report):
        self.report = report

    def _rows(self) -> list[list[str]]:
        r = self.report
        rows = [_row("current", "train", r.current.train)]
        rows += [_row(f"variant {n}" + (" (chosen)" if v is r.best else ""), "train", v.train) for n, v in enumerate(r.variants, 1)]
        rows.append(_row("current", "held out", r.current.held_out))
        if r.best is not r.current:
            rows.append(_row("chosen variant", "held out", r.best.held_out))
        return rows

    def _verdict(self) -> str:
        r = self.report
        if r.best is r.current:
            return "no variant did better than the current description on the training prompts: keep it"
        compared = r.comparison()
        said = ""
        if compared is not None:
            low, high = compared["interval"]
            said = (f" (held-out hit rate difference {compared['difference']:+.0%}, 95% interval [{low:+.0%}, {high:+.0%}], "
                    f"exact p = {compared['p_value']:.3g}"
                    + ("; no evidence of a difference" if not compared["evidence"] else "") + ")")
        if r.improved:
            return f"the chosen variant did better on the held-out prompts{said}"
        return f"the chosen variant did not do better on the held-out prompts: keep the current description{said}"

    def _cost(self) -> str:
        r = self.report
        tokens = f"{r.usage['input_tokens']:,} input / {r.usage['output_tokens']:,} output tokens"
        return f"cost: {'$%.4f' % r.cost_usd if r.cost_usd is not None else 'unknown (no price for the model)'}; {tokens}"

    def text(self) -> str:
        r = self.report
        lines = [f"improve {r.skill}: {len(r.train_ids)} training prompts, {len(r.held_out_ids)} held out "
                 f"({', '.join(r.held_out_ids)})", self._verdict(), self._cost(), *([r.note] if r.note else []), "",
                 table_text(COLUMNS, self._rows(), numeric=frozenset({4})), ""]
        lines += [f"variant {n}: {v.description}" for n, v in enumerate(r.variants, 1)]
        if r.write_cell:
            lines += ["", "to keep the chosen description, run this cell (it is not run for you):", r.write_cell]
        return "\n".join(lines)

    def html(self) -> str:
        r = self.report
        variants = "".join(f"<li><b>variant {n}</b>: {escape(v.description)}</li>" for n, v in enumerate(r.variants, 1))
        return (f"<div class='skills-magic-improve'><p><b>improve {escape(r.skill)}</b>: {escape(self._verdict())}</p>"
                f"<p>{escape(self._cost())}</p>" + (f"<p>{escape(r.note)}</p>" if r.note else "") + f"{table_html(COLUMNS, self._rows(), numeric=(4,))}<ol>{variants}</ol>"
                + (f"<p>To keep the chosen description, run this cell (it is not run for you):</p>{preformatted(r.write_cell)}"
                   if r.write_cell else "") + "</div>")

    def data(self) -> dict[str, Any]:
        r = self.report

        def shown(score) -> dict[str, Any] | None:
            if score is None:
                return None
            return {"hits": score.hits, "positives": score.positives, "false": score.false,
                    "negatives": score.negatives, "errored": score.errored, "score": round(score.value, 6),
                    "intervals": score.intervals()}

        return {"skill": r.skill, "train": r.train_ids, "held_out": r.held_out_ids, "improved": r.improved,
                "current": {"description": r.current.description, "train": shown(r.current.train),
                            "held_out": shown(r.current.held_out)},
                "variants": [{"description": v.description, "train": shown(v.train), "chosen": v is r.best}
                             for v in r.variants],
                "chosen": None if r.best is r.current else {"description": r.best.description,
                                                            "held_out": shown(r.best.held_out)},
                "comparison": r.comparison(), "usage": dict(r.usage), "cost_usd": r.cost_usd,
                "write_cell": r.write_cell}
