"""The experiment ledger: an append-only record of a plan's hypotheses, predictions and verdicts, and its gate.

A plan is `sci.<slug>`. A prediction states what to expect and names the exact check that would refute it
(`falsified_by`), under an existing hypothesis. Each prediction gets exactly one verdict (confirmed and refuted need
evidence) or a skip with a reason; until then it is open, and the gate fails while anything is open. Entries live in
the project's SQLite file; the database itself refuses UPDATE and DELETE, and a unique index lets only one of two
racing writers judge a prediction.

Labels (H1, P1, V1, ...) are numbered within a session: each kernel (each run of a notebook, Restart & Run All
included) starts at H1 again, so the ids its cells name are its own entries. A plan's sessions are numbered in the
order they first wrote to it (1, 2, ...); `2:P1` names session 2's P1, and a bare `P1` means this session's, else
the newest earlier session's P1. Earlier sessions' entries stay as they were written.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from skills_magic.clock import utc_now
from skills_magic.records.db import Database
from skills_magic.errors import SkillsMagicError

KINDS = ("hypothesis", "prediction", "verdict", "observation", "conclusion", "skip")
PREFIX = {"hypothesis": "H", "prediction": "P", "verdict": "V", "observation": "O", "conclusion": "C", "skip": "S"}
OUTCOMES = ("confirmed", "refuted", "inconclusive")
SLUG = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # what may follow `sci.`: no spaces, no slashes
LIST_LIMIT = 200  # `list` shows the newest entries; a plan with more says how many are not shown
REFERENCE = re.compile(r"(?:([0-9]+)\s*:\s*)?(\S+)")  # `P1`, or `2:P1`: P1 of the plan's session 2
MAX_TEXT_CHARS = 20_000  # an entry is a statement, not a log file: longer text is refused


class LedgerError(SkillsMagicError):
    """Base of the ledger's named errors; the class name is part of the message users see."""

    def __str__(self) -> str:
        return f"{type(self).__name__}: {super().__str__()}"


class BadPlan(LedgerError):
    """A plan name that is not a slug of lowercase letters, digits, `.`, `-` or `_`."""


class EmptyText(LedgerError):
    """Text that is empty, too long, or not text at all (a list, a number, a mapping)."""


class UnknownHypothesis(LedgerError):
    """A prediction naming no hypothesis, or one the plan does not have."""


class UnknownPrediction(LedgerError):
    """A verdict or skip naming a prediction the plan does not have."""


class FalsifierRequired(LedgerError):
    """A prediction without the exact check that would refute it."""


class EvidenceRequired(LedgerError):
    """A confirmed or refuted verdict without the evidence observed."""


class UnknownOutcome(LedgerError):
    """A verdict that is not confirmed, refuted or inconclusive."""


class PredictionAlreadyJudged(LedgerError):
    """A second verdict or skip for a prediction that already has one."""


class NoPlan(LedgerError):
    """A ledger command before any plan was chosen with `%ledger use`."""


class OpenPredictions(LedgerError):
    """The gate: predictions without a verdict or a skip."""


def plan_name(slug: str) -> str:
    """`demo` or `sci.demo` -> `sci.demo`; anything with spaces, slashes or capitals is a BadPlan."""
    slug = slug.strip()
    bare = slug[4:] if slug.startswith("sci.") else slug
    if not SLUG.fullmatch(bare):
        raise BadPlan(f"{slug!r} is not a plan name: use lowercase letters, digits, '.', '-' or '_' (no spaces or slashes)")
    return f"sci.{bare}"


@dataclass(frozen=True)
class Entry:
    plan: str
    kind: str
    label: str
    text: str
    at: str
    hypothesis: str | None = None  # label (`1:H1` when it is another session's)
    prediction: str | None = None  # label (`1:P1` when it is another session's)
    falsified_by: str | None = None
    outcome: str | None = None
    evidence: str | None = None
    session: int | None = None  # the number of the session that wrote it, within the plan (1 is the first)
    session_id: str | None = None  # that session's id (the kernel's SkillsSession)

    def to_dict(self) -> dict[str, Any]:
        """The entry as a cell output carries it: what a run of the notebook writes, the same on every run (which
        session it was, and when, go in the output's metadata)."""
        return {k: v for k, v in self.__dict__.items() if v is not None and k not in ("at", "session", "session_id")}

    @property
    def reference(self) -> str:
        """The id that names this entry from any session: `2:P1`."""
        return f"{self.session}:{self.label}" if self.session else self.label

    def summary(self) -> str:
        if self.kind == "prediction":
            return f"{self.label} {self.text}  (falsified by: {self.falsified_by}; under {self.hypothesis})"
        if self.kind == "verdict":
            evidence = f"; evidence: {self.evidence}" if self.evidence else ""
            return f"{self.label} {self.prediction} {self.outcome}{evidence}"
        if self.kind == "skip":
            return f"{self.label} {self.prediction} skipped: {self.text}"
        linked = f" [{self.prediction}]" if self.prediction else ""
        return f"{self.label}{linked} {self.text}"


@dataclass(frozen=True)
class LedgerSession:
    """One session of a plan (a kernel that wrote to it): its number, when it started, what it wrote."""

    number: int
    session_id: str
    started: str
    entries: int
    predictions: int
    open: int
    current: bool  # the session asking


@dataclass
class PlanState:
    """A plan's entries (the newest `limit`), its total, and its open predictions (all of them when asked by the
    gate; the oldest `limit` for a listing, with `open_count` always exact): this session's, or with
    `every_session` the whole plan's. `elsewhere_open` counts the open predictions of the plan's other sessions."""

    plan: str
    entries: list[Entry]
    total: int
    open: list[Entry] = field(default_factory=list)
    open_count: int = 0
    every_session: bool = False
    sessions: int = 0
    elsewhere_open: int = 0

    @property
    def headline(self) -> str:
        predictions = f"{self.open_count} open prediction{'' if self.open_count == 1 else 's'}"
        if self.every_session:
            return f"{self.plan}: {self.total} entries in {self.sessions} session{'' if self.sessions == 1 else 's'}, {predictions}"
        elsewhere = (f"; {self.elsewhere_open} more open in other sessions (%ledger list --all)"
                     if self.elsewhere_open else "")
        return f"{self.plan}: {self.total} entries, {predictions}{elsewhere}"


def _text(value: Any, what: str) -> str:
    if value is not None and not isinstance(value, str):
        raise EmptyText(f"the {what} must be text, not {type(value).__name__}")
    if not isinstance(value, str) or not value.strip():
        raise EmptyText(f"the {what} must not be empty")
    if len(value) > MAX_TEXT_CHARS:
        raise EmptyText(f"the {what} has {len(value):,} characters; at most {MAX_TEXT_CHARS:,} are kept in a ledger entry")
    return value.strip()


_SELECT = """
    SELECT e.plan, e.kind, e.label, e.text, e.at, h.label AS hypothesis, p.label AS prediction, e.falsified_by,
           e.outcome, e.evidence, COALESCE(e.session, '') AS session_id, COALESCE(h.session, '') AS hypothesis_session,
           COALESCE(p.session, '') AS prediction_session
    FROM ledger_entries e
    LEFT JOIN ledger_entries h ON h.id = e.hypothesis_id
    LEFT JOIN ledger_entries p ON p.id = e.prediction_id
"""
_LINKS = (("hypothesis", "hypothesis_session"), ("prediction", "prediction_session"))


_UNJUDGED = """e.kind = 'prediction' AND NOT EXISTS (
    SELECT 1 FROM ledger_entries c WHERE c.prediction_id = e.id AND c.kind IN ('verdict', 'skip'))"""
_OPEN = "e.plan = ? AND " + _UNJUDGED
_THIS_SESSION = " AND e.session = ?"


def _entry(row: sqlite3.Row, numbers: dict[str, int]) -> Entry:
    """An entry from a `_SELECT` row; `numbers` are the plan's session numbers. A link to another session's entry
    is named with that session's number (`1:H1`)."""
    values = {k: row[k] for k in row.keys() if not k.endswith("_session")}
    for link, session in _LINKS:
        if values[link] is not None and row[session] != row["session_id"]:
            values[link] = f"{numbers.get(row[session], '?')}:{values[link]}"
    return Entry(**values, session=numbers.get(row["session_id"]))


class Ledger:
    """The ledger of one project file, as the session `session` writes it; every method is one transaction."""

    def __init__(self, database: Database, session: str = ""):
        self.database = database
        self.session = session

    @property
    def db(self) -> sqlite3.Connection:
        return self.database.connect()

    def _session_ids(self, plan: str) -> list[str]:
        """The plan's sessions in the order they first wrote to it: session n is the n-th of these."""
        return [r[0] for r in self.db.execute("SELECT COALESCE(session, '') AS s FROM ledger_entries WHERE plan = ? "
                                              "GROUP BY s ORDER BY MIN(id)", (plan,))]

    def _numbers(self, plan: str) -> dict[str, int]:
        return {session: n for n, session in enumerate(self._session_ids(plan), start=1)}

    def _find(self, plan: str, label: str, kind: str, error: type[LedgerError]) -> sqlite3.Row:
        """The entry a cell names: `P1` is this session's P1, else the newest earlier session's; `2:P1` is session
        2's."""
        wanted = str(label).strip().upper()
        match = REFERENCE.fullmatch(wanted)
        number, bare = (match.group(1), match.group(2)) if match else (None, wanted)
        query = "SELECT id, label, session FROM ledger_entries WHERE plan = ? AND label = ? AND kind = ?"
        if number is not None:
            sessions = self._session_ids(plan)
            if not 1 <= int(number) <= len(sessions):
                raise error(f"{plan} has no session {int(number)} (it has {len(sessions)}: %ledger sessions)")
            row = self.db.execute(query + " AND session = ?", (plan, bare, kind, sessions[int(number) - 1])).fetchone()
        else:
            row = (self.db.execute(query + " AND session = ?", (plan, bare, kind, self.session)).fetchone()
                   or self.db.execute(query + " ORDER BY id DESC LIMIT 1", (plan, bare, kind)).fetchone())
        if row is None:
            raise error(f"{plan} has no {kind} {wanted}")
        return row

    def _named(self, plan: str, row: sqlite3.Row) -> str:
        """A found entry's label as this session names it: another session's carries its number (`1:P1`)."""
        return row["label"] if row["session"] == self.session else f"{self._numbers(plan)[row['session']]}:{row['label']}"

    def _append(self, plan: str, kind: str, text: str, **links: Any) -> Entry:
        judged = links.pop("_label", "the prediction")
        db = self.db
        db.execute("BEGIN IMMEDIATE")  # one writer at a time takes the session's next number: labels never collide
        try:
            number = db.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM ledger_entries WHERE plan = ? AND session = ? "
                                "AND kind = ?", (plan, self.session, kind)).fetchone()[0]
            label = f"{PREFIX[kind]}{number}"
            columns = {"plan": plan, "kind": kind, "number": number, "label": label, "text": text, "at": utc_now(),
                       "session": self.session, **links}
            cursor = db.execute(f"INSERT INTO ledger_entries ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                                list(columns.values()))
            db.execute("COMMIT")
        except sqlite3.IntegrityError as error:
            db.execute("ROLLBACK")
            if "ledger_entries.prediction_id" in str(error) or "prediction already judged" in str(error):
                raise PredictionAlreadyJudged(f"{judged} already has a verdict or a skip") from None
            raise
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return self.get_by_id(cursor.lastrowid)

    def get_by_id(self, row_id: int) -> Entry:
        row = self.db.execute(_SELECT + " WHERE e.id = ?", (row_id,)).fetchone()
        return _entry(row, self._numbers(row["plan"]))

    # --- actions ------------------------------------------------------------------------------------------------

    def hypothesis(self, plan: str, text: str) -> Entry:
        return self._append(plan_name(plan), "hypothesis", _text(text, "hypothesis"))

    def prediction(self, plan: str, text: str, falsified_by: str, hypothesis: str) -> Entry:
        plan = plan_name(plan)
        text = _text(text, "prediction")
        if not isinstance(falsified_by, str) or not falsified_by.strip():
            raise FalsifierRequired("a prediction names the exact check that would refute it (--falsified-by)")
        falsified_by = _text(falsified_by, "falsifying check")
        if not isinstance(hypothesis, str) or not hypothesis.strip():
            raise UnknownHypothesis("a prediction belongs to a hypothesis (--hypothesis H1)")
        row = self._find(plan, hypothesis, "hypothesis", UnknownHypothesis)
        return self._append(plan, "prediction", text, falsified_by=falsified_by.strip(), hypothesis_id=row["id"])

    def _judge(self, plan: str, prediction: str, kind: str, text: str, **extra: Any) -> Entry:
        row = self._find(plan, prediction, "prediction", UnknownPrediction)
        named = self._named(plan, row)
        closed = self.db.execute(_SELECT + " WHERE e.prediction_id = ? AND e.kind IN ('verdict', 'skip')", (row["id"],)).fetchone()
        if closed is not None:
            existing = _entry(closed, {})
            raise PredictionAlreadyJudged(f"{named} already has a {existing.kind} ({existing.outcome or 'skipped'})")
        return self._append(plan, kind, text, prediction_id=row["id"], _label=named, **extra)

    def verdict(self, plan: str, prediction: str, outcome: str, evidence: str | None = None) -> Entry:
        plan = plan_name(plan)
        outcome = str(outcome).strip().lower()
        if outcome not in OUTCOMES:
            raise UnknownOutcome(f"a verdict is confirmed, refuted or inconclusive, not {outcome!r}")
        if outcome != "inconclusive" and (not isinstance(evidence, str) or not evidence.strip()):
            raise EvidenceRequired(f"a {outcome} verdict needs --evidence: what was observed")
        evidence = _text(evidence, "evidence") if isinstance(evidence, str) and evidence.strip() else None
        return self._judge(plan, prediction, "verdict", f"{outcome}", outcome=outcome, evidence=evidence)

    def skip(self, plan: str, prediction: str, reason: str) -> Entry:
        plan = plan_name(plan)
        return self._judge(plan, prediction, "skip", _text(reason, "reason for the skip"))

    def observation(self, plan: str, text: str, prediction: str | None = None) -> Entry:
        plan = plan_name(plan)
        links = {}
        if prediction:
            links["prediction_id"] = self._find(plan, prediction, "prediction", UnknownPrediction)["id"]
        return self._append(plan, "observation", _text(text, "observation"), **links)

    def conclusion(self, plan: str, text: str) -> Entry:
        return self._append(plan_name(plan), "conclusion", _text(text, "conclusion"))

    # --- reading ------------------------------------------------------------------------------------------------

    def prediction_entry(self, plan: str, label: str) -> Entry:
        row = self._find(plan_name(plan), label, "prediction", UnknownPrediction)
        return self.get_by_id(row["id"])

    def state(self, plan: str, limit: int = LIST_LIMIT, all_open: bool = False, every_session: bool = False) -> PlanState:
        """This session's entries of the plan and its open predictions; with `every_session`, the whole plan's."""
        plan = plan_name(plan)
        db = self.db
        scope, params = ("", (plan,)) if every_session else (_THIS_SESSION, (plan, self.session))
        numbers = self._numbers(plan)
        total = db.execute("SELECT COUNT(*) FROM ledger_entries e WHERE e.plan = ?" + scope, params).fetchone()[0]
        rows = db.execute(_SELECT + f" WHERE e.plan = ?{scope} ORDER BY e.id DESC LIMIT ?", (*params, limit)).fetchall()
        open_count = db.execute(f"SELECT COUNT(*) FROM ledger_entries e WHERE {_OPEN}{scope}", params).fetchone()[0]
        everywhere = db.execute(f"SELECT COUNT(*) FROM ledger_entries e WHERE {_OPEN}", (plan,)).fetchone()[0]
        open_rows = db.execute(_SELECT + f" WHERE {_OPEN}{scope} ORDER BY e.id" + ("" if all_open else " LIMIT ?"),
                               params if all_open else (*params, limit)).fetchall()
        return PlanState(plan, [_entry(r, numbers) for r in reversed(rows)], total, [_entry(r, numbers) for r in open_rows],
                         open_count, every_session, len(numbers), everywhere - open_count)

    def sessions(self, plan: str) -> list[LedgerSession]:
        """Each session of the plan, oldest first: `%ledger sessions`."""
        rows = self.db.execute(
            "SELECT COALESCE(e.session, '') AS s, MIN(e.at) AS started, COUNT(*) AS entries, "
            f"SUM(e.kind = 'prediction') AS predictions, SUM({_UNJUDGED}) AS open "
            "FROM ledger_entries e WHERE e.plan = ? GROUP BY s ORDER BY MIN(e.id)", (plan_name(plan),)).fetchall()
        return [LedgerSession(n, r["s"], r["started"], r["entries"], r["predictions"], r["open"], r["s"] == self.session)
                for n, r in enumerate(rows, start=1)]

    def entries(self, plan: str | None = None) -> Iterable[Entry]:
        query = _SELECT + (" WHERE e.plan = ?" if plan else "") + " ORDER BY e.id"
        numbers: dict[str, dict[str, int]] = {}
        for row in self.db.execute(query, (plan_name(plan),) if plan else ()):
            if row["plan"] not in numbers:
                numbers[row["plan"]] = self._numbers(row["plan"])
            yield _entry(row, numbers[row["plan"]])

    def plans(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT plan FROM ledger_entries ORDER BY plan")]

    def gate(self, plan: str, every_session: bool = False) -> PlanState:
        """Raises OpenPredictions listing each open prediction (this session's; with `every_session`, the plan's)
        verbatim, with its falsifying check."""
        state = self.state(plan, limit=0, all_open=True, every_session=every_session)
        if state.open:
            raise OpenPredictions(gate_message(state.plan, state.open, qualified=every_session and state.sessions > 1))
        return state


def gate_message(plan: str, open_predictions: list[Entry], qualified: bool = False) -> str:
    """The open predictions, one a line; `qualified` names each with its session (`2:P1`), for a plan of several."""
    lines = [f"{plan} has {len(open_predictions)} open prediction{'s' if len(open_predictions) != 1 else ''}:"]
    lines += [f"  {p.reference if qualified else p.label}: {p.text} (falsified by: {p.falsified_by})"
              for p in open_predictions]
    lines.append("  each needs a verdict (%ledger verdict P ...) or a skip with a reason (%ledger skip P --reason ...)")
    return "\n".join(lines)


def open_from_entries(entries: Iterable[dict[str, Any]]) -> dict[str, list[Entry]]:
    """Rebuild plans from entry dicts (e.g. a notebook's outputs) and return the open predictions of each plan."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for item in entries:
        if isinstance(item, dict) and item.get("plan") and item.get("label") and item.get("kind") in KINDS:
            seen.setdefault((item["plan"], item["label"]), item)
    plans: dict[str, list[Entry]] = {}
    closed = {(plan, item.get("prediction")) for (plan, _), item in seen.items() if item["kind"] in ("verdict", "skip")}
    for (plan, label), item in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[1]["kind"], _number(kv[0][1]))):
        plans.setdefault(plan, [])
        if item["kind"] == "prediction" and (plan, label) not in closed:
            plans[plan].append(Entry(plan=plan, kind="prediction", label=label, text=item.get("text", ""), at="",
                                     hypothesis=item.get("hypothesis"), falsified_by=item.get("falsified_by")))
    return plans


def _number(label: str) -> int:
    digits = label[1:]
    return int(digits) if digits.isdigit() else 0
