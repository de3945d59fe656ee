"""The views of costs: the price table with its date and the user's overrides (`%skills price`), and the pre-flight
estimate a verification or an eval shows before it starts."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, preformatted, table_html, table_text

PRICE_COLUMNS = ("model", "input", "output", "cache write 5m", "cache write 1h", "cache read", "batch", "from")
PRICE_NUMBERS = frozenset({1, 2, 3, 4, 5, 6})


def money(amount: float | None) -> str:
    """Dollars as the views show them: cents for a dollar or more, four decimals below (one call is small)."""
    return "-" if amount is None else f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


def cost_said(cost_usd: float | None, stopped: str = "") -> str:
    """`; cost $0.0123` (at the price table) and why a cap stopped it, for a headline; nothing when unpriced."""
    return ("" if cost_usd is None else f"; cost {money(cost_usd)}") + (f"; {stopped}" if stopped else "")


def _per_million(value: float) -> str:
    return f"{value:g}"


class PriceView(View):
    """`%skills price`: dollars per million tokens for each model key (the user's overrides first), the date the table
    was checked against Anthropic's prices, and where the overrides come from."""

    kind = "prices"

    def __init__(self, rows, checked: str, source: str, overrides_file: str, note: str = ""):
        self.rows, self.checked, self.source, self.overrides_file, self.note = list(rows), checked, source, overrides_file, note

    def _rows(self) -> list[tuple[str, ...]]:
        return [(key, *(_per_million(fields[f]) for f in ("input", "output", "cache_write_5m", "cache_write_1h",
                                                          "cache_read", "batch")), origin or "table")
                for key, fields, origin in self.rows]

    def _header(self) -> str:
        overrides = sum(1 for _key, _fields, origin in self.rows if origin)
        said = (f"US dollars per million tokens; the table was checked on {self.checked} against {self.source}; "
                f"{overrides} override{'' if overrides == 1 else 's'} (from {self.overrides_file} or `%skills price`)")
        return f"{self.note}\n{said}" if self.note else said

    def text(self) -> str:
        return self._header() + "\n\n" + table_text(PRICE_COLUMNS, self._rows(), numeric=PRICE_NUMBERS)

    def html(self) -> str:
        return preformatted(self._header()) + table_html(PRICE_COLUMNS, self._rows(), numeric=PRICE_NUMBERS)

    def data(self) -> dict[str, Any]:
        return {"checked": self.checked, "source": self.source,
                "prices": [{"model": key, **fields, "from": "table" if not origin else "%skills price"
                            if origin == "%skills price" else "prices.yaml"} for key, fields, origin in self.rows]}

    def metadata(self) -> dict[str, Any]:
        return {"overrides_file": self.overrides_file}  # an absolute path: this machine's, never the data


class EstimateView(View):
    """What a verification or an eval is expected to cost at most, shown before it starts (runs.budget.Estimate)."""

    kind = "estimate"

    def __init__(self, estimate):
        self.estimate = estimate

    def text(self) -> str:
        return self.estimate.describe()

    def html(self) -> str:
        return preformatted(self.text(), "skills-magic-estimate")

    def data(self) -> dict[str, Any]:
        e = self.estimate
        return {"what": e.what, "requests": e.requests, "input_tokens": e.input_tokens, "output_tokens": e.output_tokens,
                "cost_usd": e.cost_usd, "model": e.model, "cap_usd": e.cap}
