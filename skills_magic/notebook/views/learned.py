"""The views of learned skills (`%skills learned`, `history NAME`, `diff`, `revert`, `promote`, `learn on|off`):
values in (rows as dicts, versions with `to_dict()`, diff lines), text, HTML and JSON out."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, plural, preformatted, table_html, table_text

# times go in the output's metadata, never its data: a notebook that learns re-runs to the same outputs
LEARNED_COLUMNS = ("name", "versions", "last author", "last change", "state", "activations", "reads")
HISTORY_COLUMNS = ("version", "action", "author", "run", "reason", "files")
VOLATILE = ("at", "last_used")  # the keys of a row kept out of the data
NO_LEARNED = "no learned skills yet: `%skills learn on` offers the model the manage_skill tool"


class LearnedView(View):
    """Every learned skill: its versions, who changed it last, how, when, and whether it is listed."""

    kind = "learned"

    def __init__(self, rows, enabled: bool):
        self.rows, self.enabled = list(rows), enabled

    def _cells(self) -> list[tuple[str, ...]]:
        return [(r["name"], str(r["versions"]), r["author"], r["action"], r["state"], str(r.get("activations", 0)),
                 str(r.get("reads", 0))) for r in self.rows]

    def _summary(self) -> str:
        learning = "on: runs offer manage_skill" if self.enabled else "off (`%skills learn on`)"
        return f"{plural(len(self.rows), 'learned skill')}; learning is {learning}" if self.rows else NO_LEARNED

    def text(self) -> str:
        if not self.rows:
            return self._summary()
        return self._summary() + "\n\n" + table_text(LEARNED_COLUMNS, self._cells(), numeric=frozenset({1, 5, 6}))

    def html(self) -> str:
        table = table_html(LEARNED_COLUMNS, self._cells(), numeric=(1, 5, 6)) if self.rows else ""
        return f"<p>{escape(self._summary())}</p>{table}"

    def data(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "skills": [{k: v for k, v in r.items() if k not in VOLATILE} for r in self.rows]}

    def metadata(self) -> dict[str, Any]:
        return {"times": {r["name"]: {k: r.get(k) for k in VOLATILE} for r in self.rows}} if self.rows else {}


class LearnedHistoryView(View):
    """The versions of one learned skill, oldest first."""

    kind = "learned-history"

    def __init__(self, name: str, versions):
        self.name, self.versions = name, [v.to_dict() for v in versions]

    def _cells(self) -> list[tuple[str, ...]]:
        return [(str(v["version"]), v["action"], v["author"], v["run"] or "-", v["reason"] or "-",
                 ", ".join(v["files"]) or "-") for v in self.versions]

    def _summary(self) -> str:
        return (f"learned skill {self.name}: {plural(len(self.versions), 'version')}; "
                f"`%skills diff {self.name} V1 V2` compares two, `%skills revert {self.name} V` brings one back")

    def text(self) -> str:
        return self._summary() + "\n\n" + table_text(HISTORY_COLUMNS, self._cells(), numeric=frozenset({0}))

    def html(self) -> str:
        return f"<p>{escape(self._summary())}</p>" + table_html(HISTORY_COLUMNS, self._cells(), names=(0,), numeric=(0,))

    def data(self) -> dict[str, Any]:
        return {"name": self.name, "versions": [{k: v for k, v in version.items() if k not in VOLATILE}
                                                for version in self.versions]}

    def metadata(self) -> dict[str, Any]:
        return {"at": [v.get("at") for v in self.versions]}


class LearnedDiffView(View):
    """A unified diff per file between two versions of a learned skill."""

    kind = "learned-diff"

    def __init__(self, name: str, first: int, second: int, changed):
        self.name, self.first, self.second, self.changed = name, first, second, list(changed)

    def text(self) -> str:
        if not self.changed:
            return f"versions {self.first} and {self.second} of {self.name} hold the same files"
        return "".join(line if line.endswith("\n") else line + "\n" for _, lines in self.changed for line in lines).rstrip("\n")

    def html(self) -> str:
        return preformatted(self.text())

    def data(self) -> dict[str, Any]:
        return {"name": self.name, "from": self.first, "to": self.second,
                "files": {path: "".join(lines) for path, lines in self.changed}}


class LearnedNoteView(View):
    """One line saying what a learned-skill command did (a revert, a promotion, learning turned on or off)."""

    kind = "learned-note"

    def __init__(self, note: str, **facts: Any):
        self.note, self.facts = note, facts

    def text(self) -> str:
        return self.note

    def html(self) -> str:
        return f"<p>{escape(self.note)}</p>"

    def data(self) -> dict[str, Any]:
        return {"note": self.note, **self.facts}
