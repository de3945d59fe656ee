"""The view of the Python functions a session offers its runs as tools (`%skills tool add | list | remove`): each
tool's name, its signature and what the model is told."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, plural, table_html, table_text

TOOL_COLUMNS = ("tool", "signature", "description")
SHOWN_CHARS = 80  # a description's first line in the table (the data holds the schema and description whole)
EMPTY = "no Python functions offered to the model: `%skills tool add NAME` offers the notebook's function NAME"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= SHOWN_CHARS else line[: SHOWN_CHARS - 1] + "…"


class ToolsView(View):
    """The registered tools, in the order the model is offered them; `note` says what the command changed."""

    kind = "tools"

    def __init__(self, tools, note: str = ""):
        self.tools, self.note = list(tools), note

    def _rows(self) -> list[tuple[str, str, str]]:
        return [(t.name, t.signature, _first_line(t.description)) for t in self.tools]

    def _summary(self) -> str:
        counted = f"{plural(len(self.tools), 'Python function')} offered to the model" if self.tools else EMPTY
        return f"{self.note}; {counted}" if self.note else counted

    def text(self) -> str:
        if not self.tools:
            return self._summary()
        return self._summary() + "\n\n" + table_text(TOOL_COLUMNS, self._rows(), numeric=frozenset())

    def html(self) -> str:
        table = table_html(TOOL_COLUMNS, self._rows(), names=(0,)) if self.tools else ""
        return f"<p>{escape(self._summary())}</p>{table}"

    def data(self) -> dict[str, Any]:
        return {"tools": [{"name": t.name, "signature": t.signature, "description": t.description,
                           "input_schema": t.input_schema} for t in self.tools]}
