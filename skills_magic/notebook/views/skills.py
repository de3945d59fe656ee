"""The catalog's views: `%skills list`, `show`, `validate`, `sources`, `diagnostics`, `add`, `lint` and
`%%skill write`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from skills_magic.notebook.views.base import PathShow, View, escape, plural
from skills_magic.skills.catalog import CatalogScan, Source, SourceStatus
from skills_magic.skills.listing import Listing
from skills_magic.skills.skill import Diagnostic, Skill
from skills_magic.skills.validate import Verdict

ADDED_NAMES_SHOWN = 10  # `%skills add` of a big collection names a few skills, `%skills list` shows them all
SEVERITY_MARK = {"error": "✗", "warning": "!", "info": "·"}


def diagnostic_data(d: Diagnostic, show: PathShow) -> dict[str, Any]:
    return {**d.to_dict(), "path": show(d.path)}


def diagnostic_line(d: Diagnostic, show: PathShow) -> str:
    where = show(d.path)
    if d.line is not None:
        where += f":{d.line}" + (f":{d.column}" if d.column is not None else "")
    return f"{SEVERITY_MARK[d.severity]} {where}: [{d.code}] {d.message}"


class ListingView(View):
    kind = "listing"

    def __init__(self, scan: CatalogScan, listing: Listing, text: str, show: PathShow, seconds: float | None = None):
        self.scan, self.listing, self._text, self.show, self.seconds = scan, listing, text, show, seconds

    def _summary(self) -> str:
        problems = sum(1 for d in self.scan.diagnostics if d.severity != "info")
        return (
            f"{plural(len(self.scan.skills), 'skill')} ({len(self.scan.shadowed)} hidden by collisions, "
            f"{len(self.scan.skipped)} skipped); {plural(problems, 'diagnostic')}: %skills diagnostics"
        )

    def text(self) -> str:
        # the summary first, so that the listing's own last line (the truncation marker, if any) ends the output
        return self._summary() + ("\n" + self._text if self._text else "")

    def html(self) -> str:
        parts = []
        for label, entries in self.listing.groups:
            rows = "".join(
                f"<tr><td style='white-space:nowrap'><code>{escape(e.name)}</code></td><td>{escape(e.description or '')}</td></tr>" for e in entries
            )
            parts.append(f"<h4>{escape(label)}</h4><table><tbody>{rows}</tbody></table>")
        parts.insert(0, f"<p><em>{escape(self._summary())}</em></p>")
        marker = self.listing.marker()
        if marker:
            parts.append(f"<p><strong>{escape(marker)}</strong></p>")
        return "<div class='skills-magic-listing'>" + "".join(parts) + "</div>"

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
        return {} if self.seconds is None else {"seconds": round(self.seconds, 6)}


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
        return f"<div class='skills-magic-skill'><p><code>{escape(self.annotation())}</code></p>{body}</div>"

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
    kind = "validation"

    def __init__(self, verdicts: Sequence[Verdict], show: PathShow):
        self.verdicts, self.show = list(verdicts), show

    @property
    def valid(self) -> bool:
        return all(v.valid for v in self.verdicts)

    def text(self) -> str:
        lines = []
        for v in self.verdicts:
            lines.append(f"{'valid  ' if v.valid else 'INVALID'} {self.show(v.folder)}")
            lines += [f"    {diagnostic_line(d, self.show)}" for d in v.diagnostics]
        ok = sum(v.valid for v in self.verdicts)
        lines.append(f"{ok} of {len(self.verdicts)} valid")
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "results": [
                {"folder": self.show(v.folder), "valid": v.valid, "diagnostics": [diagnostic_data(d, self.show) for d in v.diagnostics]}
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
    """`%skills lint`: each skill's description findings (rule, severity, message)."""

    kind = "lint"

    def __init__(self, findings: dict[str, list]):
        self.findings = findings

    def text(self) -> str:
        lines = []
        for name, found in sorted(self.findings.items()):
            if not found:
                lines.append(f"{name}: clean")
            for f in found:
                lines.append(f"{name}: {f.severity} [{f.rule}] {f.message}")
        clean = sum(1 for found in self.findings.values() if not found)
        lines.append(f"{clean} of {len(self.findings)} descriptions clean")
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        return {"skills": {name: [{"rule": f.rule, "severity": f.severity, "message": f.message} for f in found]
                           for name, found in sorted(self.findings.items())}}


class WrittenView(View):
    """`%%skill write`: where the SKILL.md went, its strict verdict and its lint, at once."""

    kind = "written"

    def __init__(self, name: str, verdict, findings, show: PathShow):
        self.name, self.verdict, self.findings, self.show = name, verdict, list(findings), show

    def text(self) -> str:
        lines = [f"wrote {self.show(self.verdict.skill_md or self.verdict.folder)}: "
                 f"{'valid' if self.verdict.valid else 'INVALID'}, {len(self.findings)} lint findings"]
        lines += [f"  {diagnostic_line(d, self.show)}" for d in self.verdict.diagnostics]
        lines += [f"  {f.severity} [{f.rule}] {f.message}" for f in self.findings]
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.show(self.verdict.skill_md or self.verdict.folder), "valid": self.verdict.valid,
                "diagnostics": [diagnostic_data(d, self.show) for d in self.verdict.diagnostics],
                "lint": [{"rule": f.rule, "severity": f.severity, "message": f.message} for f in self.findings]}
