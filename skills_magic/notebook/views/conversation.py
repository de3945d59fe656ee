"""The view of a conversation across cells (`%skills history`, `%skills reset`): one row per turn, each a
`%%skill run` (the first, then every `--continue`), with its task, its answer, the skills active and the calls."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, plural, table_html, table_text

HISTORY_COLUMNS = ("turn", "task", "answer", "skills", "tool calls", "model calls", "stop")
SHOWN_CHARS = 60  # a task or an answer in the table: its first line, cut here (the data holds it whole)
EMPTY = "no conversation yet: `%%skill run` starts one, `%%skill run --continue` goes on with it"


def _first_line(text: str) -> str:
    line = next((part for part in text.strip().splitlines() if part.strip()), "")
    return line if len(line) <= SHOWN_CHARS else line[: SHOWN_CHARS - 1] + "…"


class ConversationView(View):
    """The turns of the conversation `--continue` goes on with; after a reset, how many were forgotten."""

    kind = "conversation"

    def __init__(self, turns, forgotten: int | None = None):
        self.turns, self.forgotten = list(turns), forgotten

    def _rows(self) -> list[tuple[str, ...]]:
        return [(str(t.number), _first_line(t.task), _first_line(t.answer) or "(no answer)", ", ".join(t.skills) or "-",
                 ", ".join(t.tool_calls) or "-", str(t.model_calls), t.stop_reason) for t in self.turns]

    def _summary(self) -> str:
        if self.forgotten is not None:
            return (f"conversation reset ({plural(self.forgotten, 'turn')} forgotten): "
                    "the next `%%skill run` starts a new one")
        if not self.turns:
            return EMPTY
        return f"{plural(len(self.turns), 'turn')}; `%%skill run --continue` adds the next, `%skills reset` starts over"

    def text(self) -> str:
        if not self.turns:
            return self._summary()
        return self._summary() + "\n\n" + table_text(HISTORY_COLUMNS, self._rows(), numeric=frozenset({0, 5}))

    def html(self) -> str:
        table = table_html(HISTORY_COLUMNS, self._rows(), names=(0, 3, 6), numeric=(0, 5)) if self.turns else ""
        return f"<p>{escape(self._summary())}</p>{table}"

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"turns": [t.to_dict() for t in self.turns]}
        if self.forgotten is not None:
            data["forgotten"] = self.forgotten
        return data
