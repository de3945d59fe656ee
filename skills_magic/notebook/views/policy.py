"""The views of permissions: `%skills policy` (rules, policy files, review states, the sandbox), `trust`, `review`
and `audit`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skills_magic.notebook.views.base import PathShow, View, table_html

if TYPE_CHECKING:
    from skills_magic.safety.status import ReviewState, SandboxState


class PolicyView(View):
    """`%skills policy`: the rules in evaluation order with their origin, problems met, the policy files and whether
    their rules are in force (trusted, not trusted, changed since trusted), each skill's review state, and the
    sandbox scripts run in (as the session found it: a view probes nothing; without it, no sandbox line)."""

    kind = "policy"

    def __init__(self, rules, problems, skills_state: list[tuple[str, str]], files=(), show_path: PathShow = str,
                 sandbox: SandboxState | None = None):
        self.rules, self.problems, self.skills_state = list(rules), list(problems), skills_state
        self.files = [f for f in files if f.state != "missing"]  # a file that is not there has nothing to say
        self.show_path, self.sandbox = show_path, sandbox

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
        box = self.sandbox
        if box is not None:
            lines.append(f"sandbox: {box.detail}; working folder: {box.working_folder}" if box.available else
                         f"sandbox: NONE: {box.detail}; scripts are refused unless a rule allows --unsandboxed")
        return "\n".join(lines)

    def data(self) -> dict[str, Any]:
        data = {
            "rules": [{"kind": r.kind, "rule": r.text, "origin": r.origin, "env": list(r.env)} for r in self.rules],
            "problems": self.problems,
            "manifest": dict(self.skills_state),
            **({"sandbox": self.sandbox.to_dict()} if self.sandbox is not None else {}),
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

    @classmethod
    def of(cls, skill, changes, written: bool, state: ReviewState) -> ReviewView:
        """The view of a review, its last line saying what became of the bytes shown."""
        if written:
            note = f"written to {state.lock}: these bytes are now the reviewed ones"
        elif all(c.kind == "unchanged" for c in changes) and state.in_lock:
            note = f"unchanged since the last review in {state.lock}"
        else:
            note = f"not written: nobody confirmed (accept these bytes with %skills review {skill.name} --yes)"
        return cls(skill, changes, state.sizes, written, note)

    def text(self) -> str:
        lines = [f"review of {self.skill.name} (version {self.skill.version}):"]
        for c in self.changes:
            shown = (c.current or c.reviewed or "")[:16]
            known = self.sizes.get(c.path)
            size, unit = ("-", "bytes") if known is None else (f"{known:,}", "byte " if known == 1 else "bytes")
            lines.append(f"  {c.kind:<9} {c.path:<40} {size:>9} {unit}  sha256 {shown}…")
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
        return table_html(AUDIT_COLUMNS, self._cells(), names=(0, 1), numeric=(5,))

    def data(self) -> dict[str, Any]:
        keep = ("event", "skill", "path", "digest", "decision", "decided_by", "exit_code", "detail")
        return {"audit": [{k: r[k] for k in keep} for r in self.rows]}

    def metadata(self) -> dict[str, Any]:
        return {"at": [r["at"] for r in self.rows], "seconds": [r["seconds"] for r in self.rows]}
