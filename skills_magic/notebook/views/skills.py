"""The catalog's views: `%skills list`, `show`, `validate`, `sources`, `diagnostics`, `add`, `lint` and
`%%skill write`."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from skills_magic.notebook.views.base import CELL_STYLE, NAME_CELL_STYLE, PathShow, View, escape, plural
from skills_magic.records.usage import NEVER_USED, Usage
from skills_magic.skills.catalog import CatalogScan, Source, SourceStatus, skip_reasons, skipped_name
from skills_magic.skills.listing import Listing
from skills_magic.skills.skill import Diagnostic, Skill
from skills_magic.skills.validate import LoadResult, Verdict
from skills_magic.skills.writing import WrittenFile

ADDED_NAMES_SHOWN = 10  # `%skills add` of a big collection names a few skills, `%skills list` shows them all
SEVERITY_MARK = {"error": "✗", "warning": "!", "info": "·"}
# a shown skill body is a document inside the notebook: framed, its headings smaller than the notebook's own
BODY_STYLE = "border:1px solid #d0d0d0;border-left:4px solid #9e9e9e;border-radius:4px;padding:0.25em 1em;margin:0.5em 0"
HEADING_SIZES = {"1": "1.3em", "2": "1.2em", "3": "1.1em", "4": "1em", "5": "1em", "6": "1em"}
SKIPPED_NOTE = "(skipped by the catalog: not listed, cannot be used)"
USAGE_COLUMNS = ("activations", "reads", "runs")  # `%skills list --usage`; the last use's time is metadata (re-runs)


def diagnostic_data(d: Diagnostic, show: PathShow) -> dict[str, Any]:
    return {**d.to_dict(), "path": show(d.path)}


def diagnostic_line(d: Diagnostic, show: PathShow) -> str:
    where = show(d.path)
    if d.line is not None:
        where += f":{d.line}" + (f":{d.column}" if d.column is not None else "")
    return f"{SEVERITY_MARK[d.severity]} {where}: [{d.code}] {d.message}"


class ListingView(View):
    kind = "listing"

    def __init__(self, scan: CatalogScan, listing: Listing, text: str, show: PathShow, seconds: float | None = None,
                 source: str | None = None, usage: dict[str, Usage] | None = None):
        self.scan, self.listing, self._text, self.show, self.seconds = scan, listing, text, show, seconds
        self.source = source  # `--source LABEL`: the listing holds that source's skills only
        self.usage = usage  # `--usage`: each skill's use from the run log (names never used are absent)

    def _used(self, name: str) -> Usage:
        return (self.usage or {}).get(name, NEVER_USED)

    def _usage_table(self) -> str:
        names = [e.name for e in self.listing.entries()]
        width = max([len("skill"), *map(len, names)])
        lines = [f"{'skill':<{width}}  " + "  ".join(USAGE_COLUMNS) + "  (from the run log)"]
        for name in names:
            used = self._used(name)
            counts = (used.activations, used.reads, used.runs)
            lines.append(f"{name:<{width}}  " + "  ".join(f"{n:>{len(c)}}" for n, c in zip(counts, USAGE_COLUMNS, strict=True)))
        return "\n".join(lines)

    def _summary(self) -> str:
        problems = sum(1 for d in self.scan.diagnostics if d.severity != "info")
        # the count is of the skills listed: with --source, that source's (the catalog's total beside it)
        count = (plural(len(self.scan.skills), "skill") if self.source is None else
                 f"{plural(self.listing.total, 'skill')} from {self.source}, of {len(self.scan.skills)} in the catalog")
        return (
            f"{count} ({len(self.scan.shadowed)} hidden by collisions, "
            f"{len(self.scan.skipped)} skipped); {plural(problems, 'diagnostic')}: %skills diagnostics"
        )

    def text(self) -> str:
        # the summary first, so that the listing's own last line (the truncation marker, if any) ends the output
        usage = "\n" + self._usage_table() if self.usage is not None else ""
        return self._summary() + usage + ("\n" + self._text if self._text else "")

    def html(self) -> str:
        parts = []
        head = ("" if self.usage is None else "<thead><tr><th></th><th></th>" +
                "".join(f"<th style='{CELL_STYLE}'>{c}</th>" for c in USAGE_COLUMNS) + "</tr></thead>")
        for label, entries in self.listing.groups:
            rows = "".join(
                f"<tr><td style='{NAME_CELL_STYLE}'><code style='white-space:nowrap'>{escape(e.name)}</code></td>"
                f"<td style='{CELL_STYLE}'>{escape(e.description or '')}</td>{self._usage_cells(e.name)}</tr>"
                for e in entries
            )
            parts.append(f"<h4>{escape(label)}</h4><table>{head}<tbody>{rows}</tbody></table>")
        parts.insert(0, f"<p><em>{escape(self._summary())}</em></p>")
        marker = self.listing.marker()
        if marker:
            parts.append(f"<p><strong>{escape(marker)}</strong></p>")
        return "<div class='skills-magic-listing'>" + "".join(parts) + "</div>"

    def _usage_cells(self, name: str) -> str:
        if self.usage is None:
            return ""
        used = self._used(name)
        return "".join(f"<td style='{CELL_STYLE};text-align:right'>{n}</td>" for n in (used.activations, used.reads, used.runs))

    def _usage_data(self, name: str) -> dict[str, Any]:
        used = self._used(name)
        return {} if self.usage is None else {"usage": {"activations": used.activations, "reads": used.reads,
                                                        "runs": used.runs}}

    def data(self) -> dict[str, Any]:
        return {
            "groups": [
                {
                    "source": label,
                    "skills": [
                        {
                            "name": e.name,
                            "description": e.skill.description,
                            "shown_description": e.description,
                            "folder": self.show(e.skill.folder),
                            "version": e.skill.version,
                            "model_visible": e.skill.model_visible,
                            **self._usage_data(e.name),
                        }
                        for e in entries
                    ],
                }
                for label, entries in self.listing.groups
            ],
            "shown": self.listing.shown,
            "total": self.listing.total,
            "budget": self.listing.budget,
            "marker": self.listing.marker(),
            "hidden_by_collision": len(self.scan.shadowed),
            "skipped": len(self.scan.skipped),
        }

    def metadata(self) -> dict[str, Any]:
        found: dict[str, Any] = {} if self.seconds is None else {"seconds": round(self.seconds, 6)}
        if self.usage is not None:  # times differ at every re-run: metadata, never the output a notebook compares
            found["last_used"] = {e.name: self._used(e.name).last_used for e in self.listing.entries()}
        return found


class SkillView(View):
    """`%skills show`: the annotation line and the body verbatim (rendered Markdown in HTML)."""

    kind = "skill"

    def __init__(self, skill: Skill, show: PathShow):
        self.skill, self.show = skill, show

    def annotation(self) -> str:
        return self.skill.annotation(self.show(self.skill.folder))

    def text(self) -> str:
        return self.annotation() + "\n" + self.skill.body

    def html(self) -> str:
        from markdown_it import MarkdownIt

        # raw HTML in a skill body is shown as text, never rendered: skills are untrusted input
        body = MarkdownIt("commonmark", {"html": False}).render(self.skill.body)
        # inline styles, not a <style> block: JupyterLab keeps them when it sanitizes an untrusted notebook's outputs
        body = re.sub(r"<h([1-6])>", lambda m: f"<h{m[1]} style='font-size:{HEADING_SIZES[m[1]]};margin:0.6em 0 0.3em'>", body)
        return (f"<div class='skills-magic-skill'><p><code>{escape(self.annotation())}</code></p>"
                f"<div class='skills-magic-body' style='{BODY_STYLE}'>{body}</div></div>")

    def data(self) -> dict[str, Any]:
        fm = self.skill.frontmatter
        return {
            "name": self.skill.name,
            "source": self.skill.source,
            "version": self.skill.version,
            "folder": self.show(self.skill.folder),
            "annotation": self.annotation(),
            # extra keys by name only: their values are arbitrary YAML (aliases could expand without bound)
            "frontmatter": fm.model_dump(by_alias=True, exclude_none=True, mode="json", exclude=set(fm.extra)),
            "extra_fields": sorted(map(str, fm.extra)),
            "body": self.skill.body,
        }


class VerdictsView(View):
    """`%skills validate`: the strict verdict of each folder; one the catalog skipped says so (it is not listed)."""

    kind = "validation"

    def __init__(self, verdicts: Sequence[Verdict], show: PathShow, skipped: Sequence[str] = ()):
        self.verdicts, self.show = list(verdicts), show
        self.skipped = {os.path.abspath(folder) for folder in skipped}  # folders whose SKILL.md the catalog skipped

    @property
    def valid(self) -> bool:
        return all(v.valid for v in self.verdicts)

    def _was_skipped(self, verdict: Verdict) -> bool:
        return os.path.abspath(verdict.folder) in self.skipped

    def text(self) -> str:
        lines = []
        for v in self.verdicts:
            note = f" {SKIPPED_NOTE}" if self._was_skipped(v) else ""
            lines.append(f"{'valid  ' if v.valid else 'INVALID'} {self.show(v.folder)}{note}")
            lines += [f"    {diagnostic_line(d, self.show)}" for d in v.diagnostics]
        ok = sum(v.valid for v in self.verdicts)
        lines.append(f"{ok} of {len(self.verdicts)} valid")
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "results": [
                {"folder": self.show(v.folder), "valid": v.valid, "diagnostics": [diagnostic_data(d, self.show) for d in v.diagnostics],
                 **({"skipped": True} if self._was_skipped(v) else {})}  # only there: other outputs stay as they were
                for v in self.verdicts
            ],
        }


class SourcesView(View):
    kind = "sources"

    def __init__(self, statuses: Sequence[SourceStatus], show: PathShow):
        self.statuses, self.show = list(statuses), show

    def text(self) -> str:
        lines = ["precedence  source   skills  folder"]
        for i, st in enumerate(self.statuses, 1):
            count = str(st.skills) if st.exists else "-"
            lines.append(f"{i:>10}  {st.source.label:<8} {count:>6}  {self._root(st.source)}{'' if st.exists else '  (absent)'}")
        return "\n".join(lines)

    def _root(self, source: Source) -> str:
        return "<bundled sample skills>" if source.label == "bundled" else self.show(source.root)

    def data(self) -> dict[str, Any]:
        return {
            "sources": [
                {"precedence": i, "label": st.source.label, "folder": self._root(st.source), "exists": st.exists, "skills": st.skills}
                for i, st in enumerate(self.statuses, 1)
            ]
        }


class DiagnosticsView(View):
    kind = "diagnostics"

    def __init__(self, diagnostics: Sequence[Diagnostic], show: PathShow):
        self.diagnostics, self.show = list(diagnostics), show

    def text(self) -> str:
        if not self.diagnostics:
            return "no diagnostics"
        counts: dict[str, int] = {}
        for d in self.diagnostics:
            counts[d.severity] = counts.get(d.severity, 0) + 1
        summary = ", ".join(f"{n} {sev}{'s' if n > 1 else ''}" for sev, n in counts.items())
        return "\n".join([diagnostic_line(d, self.show) for d in self.diagnostics] + [summary])

    def data(self) -> dict[str, Any]:
        return {"diagnostics": [diagnostic_data(d, self.show) for d in self.diagnostics]}


class AddedView(View):
    """`%skills add`: the folder added, the skills it made visible, and the diagnostics of the files inside it (of
    the `diagnostics` given, which may be the whole catalog's)."""

    kind = "added"

    def __init__(self, source: Source, skills: Sequence[Skill], diagnostics: Sequence[Diagnostic], show: PathShow):
        inside = source.root.rstrip(os.sep) + os.sep
        self.source, self.skills, self.show = source, list(skills), show
        self.diagnostics = [d for d in diagnostics if d.path == source.root or d.path.startswith(inside)]

    def text(self) -> str:
        names = ", ".join(s.name for s in self.skills[:ADDED_NAMES_SHOWN]) or "none"
        if len(self.skills) > ADDED_NAMES_SHOWN:
            names += f", and {len(self.skills) - ADDED_NAMES_SHOWN} more"
        problems = sum(1 for d in self.diagnostics if d.severity != "info")
        return f"added {self.show(self.source.root)}: {plural(len(self.skills), 'skill')} visible ({names}); {plural(problems, 'diagnostic')}"

    def data(self) -> dict[str, Any]:
        return {"folder": self.show(self.source.root), "skills": [s.name for s in self.skills]}


class LintView(View):
    """`%skills lint`: each skill's description findings (rule, severity, message), and each skill the catalog
    skipped (it has no description to lint) with why, file and line."""

    kind = "lint"

    def __init__(self, findings: dict[str, list], skipped: Sequence[LoadResult] = (), show: PathShow = os.path.basename):
        self.findings = findings
        self.skipped = {skipped_name(r): skip_reasons(r, show) for r in skipped}

    def text(self) -> str:
        lines = []
        for name, found in sorted(self.findings.items()):
            if not found:
                lines.append(f"{name}: clean")
            for f in found:
                lines.append(f"{name}: {f.severity} [{f.rule}] {f.message}")
        lines += [f"{name}: skipped, not linted: {reason}" for name, reasons in sorted(self.skipped.items()) for reason in reasons]
        clean = sum(1 for found in self.findings.values() if not found)
        skipped = f"; {plural(len(self.skipped), 'skill')} skipped by the catalog" if self.skipped else ""
        lines.append(f"{clean} of {len(self.findings)} descriptions clean{skipped}")
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"skills": {name: [{"rule": f.rule, "severity": f.severity, "message": f.message} for f in found]
                                           for name, found in sorted(self.findings.items())}}
        if self.skipped:  # only where there are some, so the outputs of a clean catalog stay as they were
            data["skipped"] = dict(sorted(self.skipped.items()))
        return data


class WrittenView(View):
    """`%%skill write`: the file written (and the one it replaced), the whole skill's strict verdict and its lint.

    The JSON has `replaced` ({bytes, unchanged}) only when a file with other bytes was there before."""

    kind = "written"

    def __init__(self, written: WrittenFile, findings, show: PathShow):
        self.written, self.verdict, self.findings, self.show = written, written.verdict, list(findings), show
        self.name = written.name

    def text(self) -> str:
        verdict = f"{'valid' if self.verdict.valid else 'INVALID'}, {plural(len(self.findings), 'lint finding')}"
        shown = self.show(self.written.path)
        lines = [f"wrote {shown}: {verdict}" if self.written.is_skill_md else f"wrote {shown}; skill {self.name}: {verdict}"]
        if self.written.replaced is not None and not self.written.unchanged:  # the same text again loses nothing
            lines.append(f"  ! replaced {shown}, which had {plural(self.written.replaced, 'byte')} "
                         "(--no-overwrite keeps an existing file)")
        lines += [f"  {diagnostic_line(d, self.show)}" for d in self.verdict.diagnostics]
        lines += [f"  {f.severity} [{f.rule}] {f.message}" for f in self.findings]
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        # the same text written again is no replacement: Restart & Run All shows the same output as the first run
        replaced = {} if self.written.replaced is None or self.written.unchanged else {
            "replaced": {"bytes": self.written.replaced, "unchanged": False}}
        return {"name": self.name, "path": self.show(self.written.path), "valid": self.verdict.valid, **replaced,
                "diagnostics": [diagnostic_data(d, self.show) for d in self.verdict.diagnostics],
                "lint": [{"rule": f.rule, "severity": f.severity, "message": f.message} for f in self.findings]}
