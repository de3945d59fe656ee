"""The base of every rich output, and the small formatting pieces the views of every subject share.

A view is a small class with `_repr_mimebundle_` (text/plain, text/html, a vendor JSON type). JupyterLab prefers plain
`application/json` over HTML, so the JSON type is `application/vnd.skills-magic.<kind>+json`. Volatile facts
(durations, absolute roots) go in the output's metadata, never its data, so an executed notebook is the same on every
run and every clone (`pytest --nbval`). Paths in data are relative to the notebook's folder.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Collection, Sequence
from typing import Any

MIME_PREFIX = "application/vnd.skills-magic."

PathShow = Callable[[str], str]


def mime(kind: str) -> str:
    return f"{MIME_PREFIX}{kind}+json"


# JupyterLab right-aligns every table cell and lets cells wrap anywhere: text reads left-aligned, a name stays whole
CELL_STYLE = "text-align:left;vertical-align:top"
NAME_CELL_STYLE = CELL_STYLE + ";white-space:nowrap"
NUMBER_CELL_STYLE = "text-align:right;vertical-align:top;white-space:nowrap"
# literal text (a script's output, a status line): as written, wrapped at the output's width, never Markdown
PRE_STYLE = "white-space:pre-wrap;margin:0.25em 0"


def plural(count: int, word: str, many: str | None = None) -> str:
    """`1 skill`, `2 skills`, `1,234 bytes`; `many` for a word whose plural is not word + s (`entry`, `entries`)."""
    return f"{count:,} {word if count == 1 else many or word + 's'}"


def escape(text: Any) -> str:
    """Any value as HTML text (a skill's or a script's text is never markup)."""
    return html.escape(str(text))


def preformatted(text: Any, css_class: str = "") -> str:
    """Literal text as HTML: escaped, every space and line kept (a script's `__init__` or `# x` is not Markdown)."""
    shown = f" class='{css_class}'" if css_class else ""
    return f"<pre{shown} style='{PRE_STYLE}'>{escape(text)}</pre>"


class View:
    """Base of every output: subclasses give text, html and JSON; metadata holds the volatile facts."""

    kind = "view"

    def text(self) -> str:
        raise NotImplementedError

    def html(self) -> str:
        return f"<pre>{escape(self.text())}</pre>"

    def data(self) -> dict[str, Any]:
        raise NotImplementedError

    def metadata(self) -> dict[str, Any]:
        return {}

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": self.text(), "text/html": self.html(), mime(self.kind): self.data()}
        meta = self.metadata()
        return bundle, ({mime(self.kind): meta} if meta else {})

    def __repr__(self) -> str:
        return self.text()


def table_text(columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset({2, 3, 4, 5, 6})) -> str:
    """A plain-text table: each column as wide as its widest cell, the `numeric` columns right-aligned."""
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in numeric else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([line(columns), *(line(r) for r in rows)])


def cell_style(index: int, names: Collection[int] = (0,), numeric: Collection[int] = ()) -> str:
    """The inline style of column `index`: numbers right-aligned, names kept on one line, other text left-aligned."""
    return NUMBER_CELL_STYLE if index in numeric else NAME_CELL_STYLE if index in names else CELL_STYLE


def table_html(columns: Sequence[str], rows: Sequence[Sequence[str]], names: Collection[int] = (0,),
               numeric: Collection[int] = ()) -> str:
    """A table: the `names` columns (skill names, ids) never wrap, the `numeric` ones right-aligned, the rest left."""
    head = "".join(f"<th style='{cell_style(i, names, numeric)}'>{escape(c)}</th>" for i, c in enumerate(columns))
    body = "".join("<tr>" + "".join(f"<td style='{cell_style(i, names, numeric)}'>{escape(c)}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class JSONResult(dict):
    """`--json`: a view's JSON data as a plain dict (displayed as JSON, usable as data)."""

    def _repr_mimebundle_(self, include=None, exclude=None):
        import json

        return {"application/json": dict(self), "text/plain": json.dumps(self, indent=1, ensure_ascii=False)}, {}
