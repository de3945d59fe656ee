"""The ledger gate outside a kernel (`skills-magic ledger check/export`): the open predictions of each plan, read
from the project's database (opened read-only, never migrated) or rebuilt from an executed notebook's outputs."""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field

from skills_magic.errors import SkillsMagicError
from skills_magic.records.db import Database
from skills_magic.records.ledger import Entry, Ledger, open_from_entries

LEDGER_MIME = "application/vnd.skills-magic.ledger+json"  # `%ledger` outputs: a plan's entries
RUN_MIME = "application/vnd.skills-magic.run+json"  # run outputs: entries a model wrote through the experiment tool


class LedgerUnreadable(SkillsMagicError):
    """No ledger where one was named, or a database or notebook that cannot be read as one."""


@dataclass
class LedgerCheck:
    """Each plan's open predictions in one source (a database file or a notebook)."""

    source: str
    plans: dict[str, list[Entry]] = field(default_factory=dict)
    from_notebook: bool = False
    several_sessions: frozenset[str] = frozenset()  # plans written by more than one session: ids say which (`2:P1`)

    def only(self, plan: str | None) -> LedgerCheck:
        """The check of one plan; a plan the source does not hold is an error."""
        if plan is None:
            return self
        if plan not in self.plans:
            raise LedgerUnreadable(f"{self.source} has no plan {plan}")
        return LedgerCheck(self.source, {plan: self.plans[plan]}, self.from_notebook, self.several_sessions)

    @property
    def failing(self) -> bool:
        return any(self.plans.values())


def read_only_ledger(path: str) -> Ledger | None:
    """The ledger in the SQLite file `path`, read-only (a check works in a read-only folder); None where no kernel
    has written a ledger to it yet (no table: nothing to check, not an error)."""
    if not os.path.lexists(path):
        raise LedgerUnreadable(f"no ledger at {path}")
    ledger = Ledger(Database(path, read_only=True))
    try:
        return ledger if ledger.database.has_table("ledger_entries") else None
    except sqlite3.Error as error:
        raise LedgerUnreadable(f"cannot read the ledger in {path}: {error}") from None


def check(notebook: str | None, database: str, plan: str | None = None) -> LedgerCheck:
    """Each plan's open predictions (only `plan`'s when given): from an executed notebook's outputs, else the database."""
    return (check_notebook(notebook) if notebook else check_database(database)).only(plan)


def check_database(path: str) -> LedgerCheck:
    ledger = read_only_ledger(path)
    if ledger is None:
        return LedgerCheck(path)
    try:  # every session of every plan: an earlier run of a notebook that left a prediction open fails the check
        states = [ledger.state(p, limit=0, all_open=True, every_session=True) for p in ledger.plans()]
        return LedgerCheck(path, {s.plan: s.open for s in states}, False, frozenset(s.plan for s in states if s.sessions > 1))
    except sqlite3.Error as error:  # a readable SQLite file that is not (or no longer) shaped like the ledger
        raise LedgerUnreadable(f"cannot read the ledger in {path}: {error}") from None


def check_notebook(path: str) -> LedgerCheck:
    return LedgerCheck(path, open_from_entries(notebook_entries(path)), from_notebook=True)


def export_lines(path: str, plan: str | None, fmt: str) -> list[str]:
    """Every entry (of `plan`) as JSON lines (with its session's number and id) or Markdown (a section per plan,
    and in it one per session where there are several)."""
    ledger = read_only_ledger(path)
    if ledger is None:
        return []
    entries = list(ledger.entries(plan))
    if fmt == "jsonl":
        return [json.dumps({**e.to_dict(), "at": e.at, "session": e.session, "session_id": e.session_id},
                           ensure_ascii=False, sort_keys=True) for e in entries]
    several = {e.plan for e in entries if (e.session or 1) > 1}
    lines, heading, session = [], None, None
    for e in sorted(entries, key=lambda e: (e.plan, e.session or 0)):  # stable: each session's entries in order
        if e.plan != heading:
            lines.append(f"\n## {e.plan}\n" if lines else f"## {e.plan}\n")
            heading, session = e.plan, None
        if e.plan in several and e.session != session:
            gap = "" if session is None else "\n"  # right under the plan's heading, or after a session's entries
            lines.append(f"{gap}### session {e.session} (from {e.at})\n")
            session = e.session
        lines.append(f"- **{e.label}** ({e.kind}) {e.summary()[len(e.label) + 1:]}")
    return lines


def _listed(value, key: str) -> list:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, list) else []


def notebook_entries(path: str) -> list[dict]:
    """The ledger entries an executed notebook's outputs carry (`%ledger` outputs and runs' experiment entries)."""
    try:
        with open(path, encoding="utf-8") as handle:
            notebook = json.load(handle)
    except (OSError, ValueError) as error:  # ValueError: not UTF-8, not JSON
        reason = getattr(error, "strerror", None) or str(error).splitlines()[0]
        raise LedgerUnreadable(f"cannot read the notebook {path}: {reason}") from None
    if not isinstance(notebook, dict):
        raise LedgerUnreadable(f"cannot read the notebook {path}: it is JSON but not a notebook (no cells)")
    found = []
    for cell in _listed(notebook, "cells"):
        for output in _listed(cell, "outputs"):
            data = output.get("data") if isinstance(output, dict) else None
            data = data if isinstance(data, dict) else {}
            ledger = data.get(LEDGER_MIME)
            if isinstance(ledger, dict):
                found += [dict(e, plan=e.get("plan") or ledger.get("plan")) for e in _listed(ledger, "entries")
                          if isinstance(e, dict)]
            run = data.get(RUN_MIME)
            if isinstance(run, dict):
                found += [e for e in _listed(run, "ledger_entries") if isinstance(e, dict)]
    return found
