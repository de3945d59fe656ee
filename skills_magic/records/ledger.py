"""The experiment ledger: an append-only record of a plan's hypotheses, predictions and verdicts, and its gate.

A plan is `sci.<slug>`. A prediction states what to expect and names the exact check that would refute it
(`falsified_by`), under an existing hypothesis. Each prediction gets exactly one verdict (confirmed and refuted need
evidence) or a skip with a reason; until then it is open, and the gate fails while anything is open. Entries live in
the project's SQLite file; the database itself refuses UPDATE and DELETE, and a unique index lets only one of two
racing writers judge a prediction.
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
    hypothesis: str | None = None  # label
    prediction: str | None = None  # label
    falsified_by: str | None = None
    outcome: str | None = None
    evidence: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "at"}

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


@dataclass
class PlanState:
    """A plan's entries (the newest `limit`), its total, and its open predictions (all of them when asked by the
    gate; the oldest `limit` for a listing, with `open_count` always exact)."""

    plan: str
    entries: list[Entry]
    total: int
    open: list[Entry] = field(default_factory=list)
    open_count: int = 0

    @property
    def headline(self) -> str:
        return f"{self.plan}: {self.total} entries, {self.open_count} open predictions"


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
           e.outcome, e.evidence
    FROM ledger_entries e
    LEFT JOIN ledger_entries h ON h.id = e.hypothesis_id
    LEFT JOIN ledger_entries p ON p.id = e.prediction_id
"""


_OPEN = """e.plan = ? AND e.kind = 'prediction' AND NOT EXISTS (
    SELECT 1 FROM ledger_entries c WHERE c.prediction_id = e.id AND c.kind IN ('verdict', 'skip'))"""


def _entry(row: sqlite3.Row) -> Entry:
    return Entry(**{k: row[k] for k in row.keys()})


class Ledger:
    """The ledger of one project file; every method is one transaction."""

    def __init__(self, database: Database, session: str = ""):
        self.database = database
        self.session = session

    @property
    def db(self) -> sqlite3.Connection:
        return self.database.connect()

    def _find(self, plan: str, label: str, kind: str, error: type[LedgerError]) -> sqlite3.Row:
        label = str(label).strip().upper()
        row = self.db.execute("SELECT id, label, text, falsified_by FROM ledger_entries WHERE plan = ? AND label = ? AND kind = ?",
                              (plan, label, kind)).fetchone()
        if row is None:
            raise error(f"{plan} has no {kind} {label}")
        return row

    def _append(self, plan: str, kind: str, text: str, **links: Any) -> Entry:
        judged = links.pop("_label", "the prediction")
        db = self.db
        db.execute("BEGIN IMMEDIATE")  # one writer at a time takes the next number: labels never collide
        try:
            number = db.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM ledger_entries WHERE plan = ? AND kind = ?",
                                (plan, kind)).fetchone()[0]
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
        return _entry(self.db.execute(_SELECT + " WHERE e.id = ?", (row_id,)).fetchone())

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
        closed = self.db.execute(_SELECT + " WHERE e.prediction_id = ? AND e.kind IN ('verdict', 'skip')", (row["id"],)).fetchone()
        if closed is not None:
            existing = _entry(closed)
            raise PredictionAlreadyJudged(f"{row['label']} already has a {existing.kind} ({existing.outcome or 'skipped'})")
        return self._append(plan, kind, text, prediction_id=row["id"], _label=row["label"], **extra)

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

    def state(self, plan: str, limit: int = LIST_LIMIT, all_open: bool = False) -> PlanState:
        plan = plan_name(plan)
        db = self.db
        total = db.execute("SELECT COUNT(*) FROM ledger_entries WHERE plan = ?", (plan,)).fetchone()[0]
        rows = db.execute(_SELECT + " WHERE e.plan = ? ORDER BY e.id DESC LIMIT ?", (plan, limit)).fetchall()
        # each verdict or skip closes exactly one prediction of its own plan (the unique index, and _judge looks the
        # prediction up in the plan), so the open count is a difference of two counts on the (plan, kind) index
        counts = dict(db.execute("SELECT kind, COUNT(*) FROM ledger_entries WHERE plan = ? AND kind IN "
                                 "('prediction', 'verdict', 'skip') GROUP BY kind", (plan,)).fetchall())
        open_count = counts.get("prediction", 0) - counts.get("verdict", 0) - counts.get("skip", 0)
        open_rows = db.execute(_SELECT + f" WHERE {_OPEN} ORDER BY e.number" + ("" if all_open else " LIMIT ?"),
                               (plan,) if all_open else (plan, limit)).fetchall()
        return PlanState(plan, [_entry(r) for r in reversed(rows)], total, [_entry(r) for r in open_rows], open_count)

    def entries(self, plan: str | None = None) -> Iterable[Entry]:
        query = _SELECT + (" WHERE e.plan = ?" if plan else "") + " ORDER BY e.id"
        for row in self.db.execute(query, (plan_name(plan),) if plan else ()):
            yield _entry(row)

    def plans(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT plan FROM ledger_entries ORDER BY plan")]

    def gate(self, plan: str) -> PlanState:
        """Raises OpenPredictions listing each open prediction verbatim, with its falsifying check."""
        state = self.state(plan, limit=0, all_open=True)
        if state.open:
            raise OpenPredictions(gate_message(state.plan, state.open))
        return state


def gate_message(plan: str, open_predictions: list[Entry]) -> str:
    lines = [f"{plan} has {len(open_predictions)} open prediction{'s' if len(open_predictions) != 1 else ''}:"]
    lines += [f"  {p.label}: {p.text} (falsified by: {p.falsified_by})" for p in open_predictions]
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
