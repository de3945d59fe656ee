"""Rich outputs: small view classes with `_repr_mimebundle_` (text/plain, text/html, a vendor JSON type).

JupyterLab prefers plain `application/json` over HTML, so the JSON type is `application/vnd.skills-magic.<kind>+json`.
Volatile facts (durations, absolute roots) go in the output's metadata, never its data, so an executed notebook is
the same on every run and every clone (`pytest --nbval`). Paths in data are relative to the notebook's folder.
"""

from __future__ import annotations

import html
from typing import Any
from collections.abc import Callable, Sequence

from skills_magic.skills.catalog import CatalogScan, Source
from skills_magic.skills.listing import Listing
from skills_magic.session import SourceStatus
from skills_magic.skills.skill import Diagnostic, Skill
from skills_magic.skills.validate import Verdict

MIME_PREFIX = "application/vnd.skills-magic."
ADDED_NAMES_SHOWN = 10  # `%skills add` of a big collection names a few skills, `%skills list` shows them all
SEVERITY_MARK = {"error": "✗", "warning": "!", "info": "·"}

PathShow = Callable[[str], str]


def mime(kind: str) -> str:
    return f"{MIME_PREFIX}{kind}+json"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _e(text: Any) -> str:
    return html.escape(str(text))


class View:
    """Base of every output: subclasses give text, html and JSON; metadata holds the volatile facts."""

    kind = "view"

    def text(self) -> str:
        raise NotImplementedError

    def html(self) -> str:
        return f"<pre>{_e(self.text())}</pre>"

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
            f"{_n(len(self.scan.skills), 'skill')} ({len(self.scan.shadowed)} hidden by collisions, "
            f"{len(self.scan.skipped)} skipped); {_n(problems, 'diagnostic')}: %skills diagnostics"
        )

    def text(self) -> str:
        # the summary first, so that the listing's own last line (the truncation marker, if any) ends the output
        return self._summary() + ("\n" + self._text if self._text else "")

    def html(self) -> str:
        parts = []
        for label, entries in self.listing.groups:
            rows = "".join(
                f"<tr><td style='white-space:nowrap'><code>{_e(e.name)}</code></td><td>{_e(e.description or '')}</td></tr>" for e in entries
            )
            parts.append(f"<h4>{_e(label)}</h4><table><tbody>{rows}</tbody></table>")
        parts.insert(0, f"<p><em>{_e(self._summary())}</em></p>")
        marker = self.listing.marker()
        if marker:
            parts.append(f"<p><strong>{_e(marker)}</strong></p>")
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
        return f"<div class='skills-magic-skill'><p><code>{_e(self.annotation())}</code></p>{body}</div>"

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
    kind = "added"

    def __init__(self, source: Source, skills: Sequence[Skill], diagnostics: Sequence[Diagnostic], show: PathShow):
        self.source, self.skills, self.diagnostics, self.show = source, list(skills), list(diagnostics), show

    def text(self) -> str:
        names = ", ".join(s.name for s in self.skills[:ADDED_NAMES_SHOWN]) or "none"
        if len(self.skills) > ADDED_NAMES_SHOWN:
            names += f", and {len(self.skills) - ADDED_NAMES_SHOWN} more"
        problems = sum(1 for d in self.diagnostics if d.severity != "info")
        return f"added {self.show(self.source.root)}: {_n(len(self.skills), 'skill')} visible ({names}); {_n(problems, 'diagnostic')}"

    def data(self) -> dict[str, Any]:
        return {"folder": self.show(self.source.root), "skills": [s.name for s in self.skills]}


def _thousands(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


TRACE_COLUMNS = ("stage", "object", "bytes", "in tok", "out tok", "cache read", "cache write", "detail")


def trace_rows(trace) -> list[tuple[str, ...]]:
    return [
        (e.stage, e.object, _thousands(e.bytes), _thousands(e.input_tokens), _thousands(e.output_tokens),
         _thousands(e.cache_read_tokens), _thousands(e.cache_write_tokens), e.detail)
        for e in trace
    ]


def _table_text(columns: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset({2, 3, 4, 5, 6})) -> str:
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in numeric else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([line(columns), *(line(r) for r in rows)])


def _table_html(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class TraceView(View):
    """The load trace of a run: what was disclosed to the model, in UTF-8 bytes and reported tokens."""

    kind = "trace"

    def __init__(self, result):
        self.result = result

    def text(self) -> str:
        return _table_text(TRACE_COLUMNS, trace_rows(self.result.trace))

    def html(self) -> str:
        return _table_html(TRACE_COLUMNS, trace_rows(self.result.trace))

    def data(self) -> dict[str, Any]:
        return {"trace": [e.to_dict() for e in self.result.trace]}


class RunView(View):
    """`%%skill run`: the answer (Markdown), the tool calls, why it stopped, the usage and the load trace."""

    kind = "run"

    def __init__(self, result, seconds: float | None = None):
        self.result, self.seconds = result, seconds

    def _calls(self) -> list[str]:
        from skills_magic.runs.agent import describe_input

        lines = []
        for call in self.result.tool_calls:
            outcome = f"error: {call.error}" if call.is_error else f"{call.result_bytes:,} bytes"
            lines.append(f"{call.name} {describe_input(call.input)} -> {outcome}")
        return lines

    def _status(self) -> str:
        r = self.result
        status = f"stop: {r.stop_reason}"
        if r.client != "none":
            status += f" after {r.turns} model call{'s' if r.turns != 1 else ''} ({r.client}, {r.model})"
        if r.note:
            status += f"; {r.note}"
        if r.error:
            status += f"\nerror: {r.error}"
        return status

    def _usage(self) -> str:
        u = self.result.usage
        return (f"usage: input {u['input_tokens']:,} · output {u['output_tokens']:,} · cache read "
                f"{u['cache_read_input_tokens']:,} · cache write {u['cache_creation_input_tokens']:,} tokens")

    def text(self) -> str:
        parts = [self.result.final_text.rstrip() or "(no answer)"]
        if self.result.tool_calls:
            parts.append("tool calls:\n" + "\n".join(f"  {line}" for line in self._calls()))
        if self.result.outputs:
            parts.append("files the scripts wrote (in their scratch folders):\n"
                         + "\n".join(f"  {o['script']}: {o['path']} ({o['bytes']:,} bytes)" for o in self.result.outputs))
        if self.result.changes:
            parts.append(changes_text(self.result.changes, f"{CHANGES_TITLE}:"))
        if self.result.ledger_entries:
            parts.append("ledger entries written by the model:\n" + "\n".join(f"  {e.plan} {e.summary()}" for e in self.result.ledger_entries))
        parts.append(self._status())
        if self.result.client != "none":
            parts.append(self._usage())
        parts.append("load trace:\n" + TraceView(self.result).text())
        return "\n\n".join(parts)

    def html(self) -> str:
        from markdown_it import MarkdownIt

        answer = MarkdownIt("commonmark", {"html": False}).render(self.result.final_text or "*(no answer)*")
        calls = "".join(f"<li><code>{_e(line)}</code></li>" for line in self._calls())
        return (
            f"<div class='skills-magic-run'>{answer}"
            + (f"<details><summary>tool calls ({len(self.result.tool_calls)})</summary><ul>{calls}</ul></details>" if calls else "")
            + (changes_html(self.result.changes, CHANGES_TITLE) if self.result.changes else "")
            + (f"<details open><summary>ledger entries ({len(self.result.ledger_entries)})</summary>"
               + _table_html(LEDGER_COLUMNS, [_ledger_row(e) for e in self.result.ledger_entries]) + "</details>"
               if self.result.ledger_entries else "")
            + f"<p><code>{_e(self._status())}</code>"
            + (f"<br><code>{_e(self._usage())}</code>" if self.result.client != "none" else "") + "</p>"
            + f"<details open><summary>load trace</summary>{TraceView(self.result).html()}</details></div>"
        )

    def data(self) -> dict[str, Any]:
        r = self.result
        return {
            "skill": r.skill,
            "client": r.client,
            "model": r.model,
            "final_text": r.final_text,
            "stop_reason": r.stop_reason,
            "note": r.note,
            "error": r.error,
            "interrupted": r.interrupted,
            "turns": r.turns,
            "tool_calls": [{"name": c.name, "input": c.input, "result_bytes": c.result_bytes, "is_error": c.is_error,
                            "error": c.error} for c in r.tool_calls],
            "usage": dict(r.usage),
            "trace": [e.to_dict() for e in r.trace],
            "ledger_entries": [e.to_dict() for e in r.ledger_entries],
            "outputs": [{k: o[k] for k in ("script", "path", "bytes")} for o in r.outputs],
            # only where a run changed something, so the outputs of runs that change nothing stay as they were
            **({"changes": [c.to_dict() for c in r.changes]} if r.changes else {}),
        }

    def metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {} if self.seconds is None else {"seconds": round(self.seconds, 6)}
        if self.result.outputs:  # where the files are on this machine: volatile, so not in the data
            meta["output_files"] = [o["file"] for o in self.result.outputs]
        if self.result.changes:  # run ids differ on every run: the command to apply them is metadata
            meta.update(changes_metadata(self.result.changes))
        return meta


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
        lines.append(f"  {c.kind:<8} {c.path} ({c.bytes:,} byte{'' if c.bytes == 1 else 's'}{_change_detail(c)})")
        if c.diff:
            lines += [f"      {line}" for line in c.diff.rstrip("\n").split("\n")]
    return "\n".join(lines)


def changes_html(changes, title: str) -> str:
    """A run's changes as HTML: a table, then each diff in a <pre> (escaped: a script's text is never markup)."""
    diffs = "".join(f"<p><code>{_e(c.path)}</code></p><pre>{_e(c.diff)}</pre>" for c in changes if c.diff)
    return (f"<details open><summary>{_e(title)} ({len(changes)})</summary>"
            + _table_html(CHANGE_COLUMNS, [_change_row(c) for c in changes]) + diffs + "</details>")


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
        return f"applied {_n(applied, 'change')} to the working folder" + (f"; refused {refused}" if refused else "")

    def text(self) -> str:
        lines = [self._headline()]
        lines += [f"  applied  {c.kind:<8} {c.path} ({c.bytes:,} byte{'' if c.bytes == 1 else 's'}{_change_detail(c)})"
                  for c in self.report.applied]
        lines += [f"  refused  {kind:<8} {path}: {reason}" for (kind, path, _size, _c), reason in self._refused()]
        return "\n".join(lines)

    def html(self) -> str:
        rows = [("applied", c.kind, c.path + _change_detail(c), f"{c.bytes:,}", "") for c in self.report.applied]
        rows += [("refused", kind, path, "" if size is None else f"{size:,}", reason)
                 for (kind, path, size, _c), reason in self._refused()]
        diffs = "".join(f"<p><code>{_e(c.path)}</code></p><pre>{_e(c.diff)}</pre>" for c in self.report.applied if c.diff)
        table = _table_html(("outcome", "kind", "path", "bytes", "why refused"), rows) if rows else ""
        return f"<div class='skills-magic-apply'><p><b>{_e(self._headline())}</b></p>{table}{diffs}</div>"

    def data(self) -> dict[str, Any]:
        return {
            "applied": [c.to_dict() for c in self.report.applied],
            "refused": [{**(c.to_dict() if c is not None else {"path": path}), "reason": reason}
                        for (_kind, path, _size, c), reason in self._refused()],
        }

    def metadata(self) -> dict[str, Any]:
        return {"runs": list(self.report.runs)}


class ModelView(View):
    kind = "model"

    def __init__(self, client_name: str, model_id: str, detail: str = ""):
        self.client_name, self.model_id, self.detail = client_name, model_id, detail

    def text(self) -> str:
        return f"model: {self.client_name} ({self.model_id})" + (f"; {self.detail}" if self.detail else "")

    def data(self) -> dict[str, Any]:
        return {"client": self.client_name, "model": self.model_id, "detail": self.detail}


def _sandbox_state() -> dict[str, Any]:
    from skills_magic.safety.sandbox import availability, overlay_availability

    ok, why = availability()
    copy_on_write, how = overlay_availability()
    return {"available": ok, "detail": why, "working_folder": {"copy_on_write": copy_on_write, "detail": how}}


class PolicyView(View):
    """`%skills policy`: the rules in evaluation order with their origin, problems met, the policy files and whether
    their rules are in force (trusted, not trusted, changed since trusted), each skill's review state."""

    kind = "policy"

    def __init__(self, rules, problems, skills_state: list[tuple[str, str]], files=(), show_path: PathShow = str):
        self.rules, self.problems, self.skills_state = list(rules), list(problems), skills_state
        self.files = [f for f in files if f.state != "missing"]  # a file that is not there has nothing to say
        self.show_path = show_path

    def text(self) -> str:
        ordered = [r for r in self.rules if r.kind == "deny"] + [r for r in self.rules if r.kind == "allow"]
        lines = ["rules (deny first, then allow, then ask):"]
        lines += [f"  {r}" for r in ordered] or ["  (none: every script run is asked; unattended, denied)"]
        if self.problems:
            lines += ["rules not accepted:"] + [f"  ! {p}" for p in self.problems]
        if self.files:
            lines.append("policy files:")
            for f in self.files:
                lines.append(f"  {f.summary(self.show_path(f.path))}")
                lines += [f"    inert: {r}" for r in f.inert]
        lines.append("skills.lock:")
        lines += [f"  {name}: {state}" for name, state in self.skills_state]
        from skills_magic.safety.sandbox import availability

        ok, why = availability()
        working = f"; working folder: {_sandbox_state()['working_folder']['detail']}" if ok else ""
        lines.append(f"sandbox: {why}{working}" if ok else
                     f"sandbox: NONE: {why}; scripts are refused unless a rule allows --unsandboxed")
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        data = {
            "rules": [{"kind": r.kind, "rule": r.text, "origin": r.origin, "env": list(r.env)} for r in self.rules],
            "problems": self.problems,
            "manifest": dict(self.skills_state),
            "sandbox": _sandbox_state(),
        }
        if self.files:  # only where there is one, so a notebook without policy files keeps its outputs
            data["files"] = [_policy_file_data(f, self.show_path) for f in self.files]
        return data


def _rule_data(rule, show_path: PathShow) -> dict[str, Any]:
    return {"kind": rule.kind, "rule": rule.text, "origin": rule.origin, "env": list(rule.env), "network": rule.network,
            "hosts": list(rule.hosts), "write": [show_path(p) for p in rule.writable], "unsandboxed": rule.unsandboxed}


def _policy_file_data(file, show_path: PathShow) -> dict[str, Any]:
    return {"path": show_path(file.path), "owner": file.owner, "state": file.state, "sha256": file.sha256,
            "trusted_sha256": file.trusted_sha256, "summary": file.summary(show_path(file.path)),
            "inert": [_rule_data(r, show_path) for r in file.inert]}


class TrustView(View):
    """`%skills trust`: every rule and grant the trusted bytes hold, what was refused or dropped and why, the digest
    recorded; or, with --revoke, that the file's allow rules are inert again."""

    kind = "trust"

    def __init__(self, report, show_path: PathShow = str):
        self.report, self.show_path = report, show_path

    def text(self) -> str:
        r, name = self.report, self.show_path(self.report.path)
        if r.revoked:
            lines = [f"revoked: {name} (sha256 {r.sha256}) is no longer trusted" if r.sha256
                     else f"{name} was not trusted: nothing to revoke"]
        else:
            before = ("first trust" if r.previous is None else "the same bytes as before" if r.previous == r.sha256
                      else f"replacing {r.previous[:12]}…")
            lines = [f"trusted: {name} (sha256 {r.sha256}; {before})", "the rules these bytes hold (deny first, then allow):"]
            ordered = [x for x in r.rules if x.kind == "deny"] + [x for x in r.rules if x.kind == "allow"]
            lines += [f"  {x}" for x in ordered] or ["  (none)"]
            if r.problems:
                lines.append("refused or dropped (a project file never grants secrets, unsandboxed runs, writes outside "
                             "its folder, or a wildcard skill):")
                lines += [f"  ! {p}" for p in r.problems]
        if r.now is not None:
            lines.append(f"now: {r.now.summary(name)}")
        lines.append(f"trust store: {self.show_path(r.store)}")
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        r = self.report
        return {"path": self.show_path(r.path), "revoked": r.revoked, "sha256": r.sha256, "previous": r.previous,
                "rules": [_rule_data(x, self.show_path) for x in r.rules], "problems": list(r.problems),
                "state": r.now.state if r.now is not None else None, "store": self.show_path(r.store)}


class ReviewView(View):
    """`%skills review NAME`: every file with its size and digest, what changed since the last review."""

    kind = "review"

    def __init__(self, skill, changes, sizes: dict[str, int], written: bool, confirmation: str):
        self.skill, self.changes, self.sizes, self.written, self.confirmation = skill, changes, sizes, written, confirmation

    def text(self) -> str:
        lines = [f"review of {self.skill.name} (version {self.skill.version}):"]
        for c in self.changes:
            shown = (c.current or c.reviewed or "")[:16]
            size = f"{self.sizes[c.path]:,}" if c.path in self.sizes else "-"
            lines.append(f"  {c.kind:<9} {c.path:<40} {size:>9} bytes  sha256 {shown}…")
        lines.append(self.confirmation)
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        return {
            "skill": self.skill.name,
            "version": self.skill.version,
            "files": [{"path": c.path, "change": c.kind, "bytes": self.sizes.get(c.path), "reviewed_sha256": c.reviewed,
                       "sha256": c.current} for c in self.changes],
            "written": self.written,
        }


AUDIT_COLUMNS = ("event", "skill", "path", "decision", "decided by", "exit", "detail")


class AuditView(View):
    """`%skills audit`: decisions and runs (times and durations go to metadata: they change on every run)."""

    kind = "audit"

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def _cells(self):
        return [(r["event"], r["skill"], r["path"], r["decision"] or "", (r["decided_by"] or "")[:100],
                 "" if r["exit_code"] is None else str(r["exit_code"]), (r["detail"] or "")[:60]) for r in self.rows]

    def text(self) -> str:
        if not self.rows:
            return "no decisions or runs recorded in this session"
        widths = [max(len(c), *(len(row[i]) for row in self._cells())) for i, c in enumerate(AUDIT_COLUMNS)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(AUDIT_COLUMNS, widths, strict=True)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in self._cells()]
        return "\n".join(lines)

    def html(self) -> str:
        return _table_html(AUDIT_COLUMNS, self._cells())

    def data(self) -> dict[str, Any]:
        keep = ("event", "skill", "path", "digest", "decision", "decided_by", "exit_code", "detail")
        return {"audit": [{k: r[k] for k in keep} for r in self.rows]}

    def metadata(self) -> dict[str, Any]:
        return {"at": [r["at"] for r in self.rows], "seconds": [r["seconds"] for r in self.rows]}


LEDGER_COLUMNS = ("id", "kind", "text", "links")


def _ledger_row(e) -> tuple[str, str, str, str]:
    row = _ledger_cells(e)
    return tuple(" ".join(cell.split()) for cell in row)  # one line per entry in a table; the data keeps the text


def _ledger_cells(e) -> tuple[str, str, str, str]:
    if e.kind == "prediction":
        return e.label, e.kind, e.text, f"{e.hypothesis}; falsified by: {e.falsified_by}"
    if e.kind == "verdict":
        return e.label, e.kind, e.outcome or "", f"{e.prediction}" + (f"; evidence: {e.evidence}" if e.evidence else "")
    if e.kind == "skip":
        return e.label, e.kind, e.text, e.prediction or ""
    return e.label, e.kind, e.text, e.prediction or ""


class LedgerEntryView(View):
    """One ledger entry as a cell output: the executed notebook itself carries the record."""

    kind = "ledger"

    def __init__(self, entry, database_path: str):
        self.entry, self.database_path = entry, database_path

    def text(self) -> str:
        return f"{self.entry.plan} {self.entry.summary()}"

    def html(self) -> str:
        return f"<div class='skills-magic-ledger'><code>{_e(self.entry.plan)}</code> {_table_html(LEDGER_COLUMNS, [_ledger_row(self.entry)])}</div>"

    def data(self) -> dict[str, Any]:
        return {"entries": [self.entry.to_dict()]}

    def metadata(self) -> dict[str, Any]:
        return {"at": [self.entry.at], "database": self.database_path}


class LedgerStateView(View):
    """`%ledger list` / `%ledger gate`: the entries as a table with the open-prediction count."""

    kind = "ledger"

    def __init__(self, state, database_path: str):
        self.state, self.database_path = state, database_path

    def _rows(self):
        return [_ledger_row(e) for e in self.state.entries]

    def text(self) -> str:
        lines = [self.state.headline]
        if len(self.state.entries) < self.state.total and self.state.entries:
            lines.append(f"(the newest {len(self.state.entries)} of {self.state.total} entries)")
        if self.state.entries:
            lines.append(_table_text(LEDGER_COLUMNS, self._rows(), numeric=frozenset()))
        return "\n".join(lines)

    def html(self) -> str:
        return f"<p><b>{_e(self.state.headline)}</b></p>" + (_table_html(LEDGER_COLUMNS, self._rows()) if self.state.entries else "")

    def data(self) -> dict[str, Any]:
        return {
            "plan": self.state.plan,
            "total": self.state.total,
            "open": self.state.open_count,
            "entries": [e.to_dict() for e in self.state.entries],
        }

    def metadata(self) -> dict[str, Any]:
        return {"at": [e.at for e in self.state.entries], "database": self.database_path}


VOTE_MARK = {"pending": "…", "upheld": "✓", "refuted": "✗", "abstained": "–"}
VOTE_COLOUR = {"pending": "#e0e0e0", "upheld": "#b7e1b0", "refuted": "#f3b0ae", "abstained": "#d0d0d0"}
OUTCOME_COLOUR = {"confirmed": "#2e7d32", "refuted": "#c62828", "unverified": "#ef6c00", "not_verified": "#757575"}


def vote_title(vote) -> str:
    if vote.verdict is not None:
        counter = f" (counter source: {vote.verdict.counter_source})" if vote.verdict.counter_source else ""
        return f"voter {vote.voter} ({vote.kind}), {vote.verdict.confidence} confidence: {vote.verdict.evidence}{counter}"
    return f"voter {vote.voter} ({vote.kind}): {vote.reason or vote.status}"


def votes_table_html(claims, votes_per_claim: int, summary: str) -> str:
    head = "".join(f"<th>voter {i}</th>" for i in range(1, votes_per_claim + 1))
    rows = []
    for c in claims:
        cells = "".join(
            f"<td class='vote vote-{v.status}' data-status='{v.status}' title='{_e(vote_title(v))}' "
            f"style='background:{VOTE_COLOUR[v.status]};text-align:center'>{VOTE_MARK[v.status]} {v.status}</td>"
            for v in c.votes
        )
        outcome = c.outcome if all(v.status != "pending" for v in c.votes) else "pending"
        colour = OUTCOME_COLOUR.get(outcome, "#9e9e9e")
        rows.append(f"<tr data-claim='{c.index + 1}'><td>{c.index + 1}</td><td>{_e(c.claim.claim)}</td>{cells}"
                    f"<td class='outcome' data-outcome='{outcome}' style='color:{colour};font-weight:bold'>{outcome}</td></tr>")
    return (f"<table class='skills-magic-votes'><thead><tr><th>#</th><th>claim</th>{head}<th>outcome</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table><p class='votes-summary'>{_e(summary)}</p>")


class VotesView(View):
    """The static result of a verification: per-claim outcome and every vote (shown where widgets do not render)."""

    kind = "votes"

    def __init__(self, result):
        self.result = result

    def summary(self) -> str:
        from skills_magic.runs.verify import outcome_counts

        return outcome_counts(self.result)

    def text(self) -> str:
        lines = []
        for c in self.result.claims:
            marks = " ".join(VOTE_MARK[v.status] for v in c.votes)
            lines.append(f"{c.index + 1:>2}. {c.outcome.upper():<10} [{marks}]  {c.claim.claim}")
            for v in c.votes:
                lines.append(f"      {vote_title(v)}")
        for extra in self.result.not_verified:
            lines.append(f"  - NOT VERIFIED (over the limit)  {extra.claim}")
        lines.append(self.summary())
        return "\n".join(lines)

    def html(self) -> str:
        extra = "".join(f"<li>{_e(c.claim)}</li>" for c in self.result.not_verified)
        return votes_table_html(self.result.claims, self.result.votes_per_claim, self.summary()) + (
            f"<p>not verified (over the limit):</p><ul>{extra}</ul>" if extra else "")

    def data(self) -> dict[str, Any]:
        return {
            "claims": [{"claim": c.claim.model_dump(exclude_none=True), "outcome": c.outcome,
                        "votes": [v.to_dict() for v in c.votes]} for c in self.result.claims],
            "not_verified": [c.model_dump(exclude_none=True) for c in self.result.not_verified],
            "votes_per_claim": self.result.votes_per_claim,
            "refutations_required": self.result.refutations_required,
            "cancelled": self.result.cancelled,
            "stats": self.result.stats,
        }

    def metadata(self) -> dict[str, Any]:
        return {"seconds": round(self.result.seconds, 6),
                "vote_seconds": [round(v.seconds, 6) for v in self.result.votes]}


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
                         f"<title>{_e(report.label)}: {_rate(value)}</title></rect>")
            parts.append(f"<text x='{x + bar_w / 2:.1f}' y='{top + plot_h - h - 3:.1f}' text-anchor='middle'>{_rate(value)}</text>")
        parts.append(f"<text x='{x0 + group_w / 2 - 10:.1f}' y='{height - bottom + 16}' text-anchor='middle'>{_e(title)}</text>")
    for r, report in enumerate(reports):
        x = left + r * 160
        parts.append(f"<rect x='{x}' y='{height - 18}' width='10' height='10' fill='{CHART_COLOURS[r % len(CHART_COLOURS)]}'/>")
        parts.append(f"<text x='{x + 14}' y='{height - 9}'>{_e(report.label)}</text>")
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
                f"wrong skill {_rate(report.wrong_skill_rate())}; {t['runs']} runs, {t['calls']} calls, "
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

    def _prompt_rows(self):
        rows = []
        first = self.reports[0]
        for n, row in enumerate(first.per_prompt()):
            cells = [row["id"], row["category"], ", ".join(row["expected"]) or "(none)"]
            for report in self.reports:
                other = report.per_prompt()[n]
                shown = ", ".join(f"{s} {k}/{other['runs']}" for s, k in sorted(other["activated"].items())) or f"none 0/{other['runs']}"
                cells.append(shown)
            rows.append(cells)
        return rows

    def _prompt_columns(self):
        return ["id", "category", "expected"] + [f"activated ({r.label})" for r in self.reports]

    def _behaviour_lines(self) -> list[str]:
        lines = []
        for report in self.reports:
            for skill, row in sorted(report.behaviour.items()):
                lines.append(f"{report.label}: {skill}: behaviours passed with the skill {_rate(row.get('with_rate'))}, "
                             f"without it {_rate(row.get('without_rate'))}" + (f" ({row['unjudged']} unjudged)" if row["unjudged"] else ""))
        return lines

    def text(self) -> str:
        parts = [self._headline(r) for r in self.reports]
        parts += ["", _table_text(self._skill_columns(), self._skill_rows(), numeric=frozenset()),
                  "", _table_text(self._prompt_columns(), self._prompt_rows(), numeric=frozenset())]
        behaviour = self._behaviour_lines()
        if behaviour:
            parts += ["", *behaviour]
        return "\n".join(parts)

    def html(self) -> str:
        head = "".join(f"<p><b>{_e(self._headline(r))}</b></p>" for r in self.reports)
        behaviour = "".join(f"<li>{_e(line)}</li>" for line in self._behaviour_lines())
        return (f"<div class='skills-magic-eval'>{head}{activation_chart_svg(self.reports)}"
                f"{_table_html(self._skill_columns(), self._skill_rows())}{_table_html(self._prompt_columns(), self._prompt_rows())}"
                + (f"<ul>{behaviour}</ul>" if behaviour else "") + "</div>")

    def data(self) -> dict[str, Any]:
        return {"reports": [r.summary() for r in self.reports],
                "lint": {name: [f.rule for f in findings] for name, findings in self.lint.items()}}

    def chart_svg(self) -> str:
        """The bar chart alone, as SVG (it is inlined in the HTML; `%skills eval --chart FILE` saves it)."""
        return activation_chart_svg(self.reports)

    def metadata(self) -> dict[str, Any]:
        return {} if self.seconds is None else {"seconds": round(self.seconds, 6)}


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
