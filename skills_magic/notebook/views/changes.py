"""The views of what a run's scripts changed in the working folder: the changes a run shows, and `%skills apply`."""

from __future__ import annotations

from typing import Any

from skills_magic.notebook.views.base import View, escape, plural, table_html

CHANGES_TITLE = "changes in the working folder (not applied: %skills apply last)"
CHANGE_COLUMNS = ("kind", "path", "bytes")


def _change_detail(c) -> str:
    if c.link is not None:
        return f" -> {c.link}"
    return ", executable" if c.executable else ""


def _change_row(c) -> tuple[str, str, str]:
    return c.kind, c.path + _change_detail(c), f"{c.bytes:,}"


def changes_text(changes, title: str) -> str:
    """A run's changes as text: one line each (kind, path, size), each text file's diff indented under it."""
    lines = [title]
    for c in changes:
        lines.append(f"  {c.kind:<8} {c.path} ({plural(c.bytes, 'byte')}{_change_detail(c)})")
        if c.diff:
            lines += [f"      {line}" for line in c.diff.rstrip("\n").split("\n")]
    return "\n".join(lines)


def changes_html(changes, title: str) -> str:
    """A run's changes as HTML: a table, then each diff in a <pre> (escaped: a script's text is never markup)."""
    diffs = "".join(f"<p><code>{escape(c.path)}</code></p><pre>{escape(c.diff)}</pre>" for c in changes if c.diff)
    return (f"<details open><summary>{escape(title)} ({len(changes)})</summary>"
            + table_html(CHANGE_COLUMNS, [_change_row(c) for c in changes], names=(0, 1), numeric=(2,)) + diffs + "</details>")


def changes_metadata(changes) -> dict[str, Any]:
    """Where a run's changes are on this machine and the exact commands that apply them: volatile, so metadata."""
    runs = list(dict.fromkeys(c.run_id for c in changes if c.run_id))
    return {"runs": runs, "apply": [f"%skills apply {r}" for r in runs],
            "change_files": {c.path: c.file for c in changes if c.file}}


class ApplyView(View):
    """`%skills apply RUN [PATH...]`: each change applied, and each refused with why."""

    kind = "apply"

    def __init__(self, report):
        self.report = report

    def _refused(self):
        for item, reason in self.report.refused:
            yield (item.kind, item.path, item.bytes, item) if hasattr(item, "path") else ("-", str(item), None, None), reason

    def _headline(self) -> str:
        applied, refused = len(self.report.applied), len(self.report.refused)
        if not applied and not refused:
            return "nothing to apply: the run changed no files in the working folder"
        return f"applied {plural(applied, 'change')} to the working folder" + (f"; refused {refused}" if refused else "")

    def text(self) -> str:
        lines = [self._headline()]
        lines += [f"  applied  {c.kind:<8} {c.path} ({plural(c.bytes, 'byte')}{_change_detail(c)})"
                  for c in self.report.applied]
        lines += [f"  refused  {kind:<8} {path}: {reason}" for (kind, path, _size, _c), reason in self._refused()]
        return "\n".join(lines)

    def html(self) -> str:
        rows = [("applied", c.kind, c.path + _change_detail(c), f"{c.bytes:,}", "") for c in self.report.applied]
        rows += [("refused", kind, path, "" if size is None else f"{size:,}", reason)
                 for (kind, path, size, _c), reason in self._refused()]
        diffs = "".join(f"<p><code>{escape(c.path)}</code></p><pre>{escape(c.diff)}</pre>" for c in self.report.applied if c.diff)
        table = table_html(("outcome", "kind", "path", "bytes", "why refused"), rows, names=(0, 1, 2), numeric=(3,)) if rows else ""
        return f"<div class='skills-magic-apply'><p><b>{escape(self._headline())}</b></p>{table}{diffs}</div>"

    def data(self) -> dict[str, Any]:
        return {
            "applied": [c.to_dict() for c in self.report.applied],
            "refused": [{**(c.to_dict() if c is not None else {"path": path}), "reason": reason}
                        for (_kind, path, _size, c), reason in self._refused()],
        }

    def metadata(self) -> dict[str, Any]:
        return {"runs": list(self.report.runs)}
