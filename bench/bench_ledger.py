"""Benchmark: ledger appends per second, and `list` with the open-prediction count over a large plan.

    python bench/bench_ledger.py [--appends 10000] [--entries 100000] [--check]

1. 10,000 appends (hypotheses, predictions under them, verdicts on most), each its own transaction, as `%ledger` does
   them, against a baseline measured in the same run: the same number of plain INSERTs into a bare table of the
   same file, one transaction each. Target: over 2,000 appends/s.
2. `list` (the newest entries, the total and the open-prediction count) on a plan of 100,000 entries. Target: under
   50 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_APPENDS_PER_SECOND = 2000
TARGET_LIST_MS = 50


def appends(ledger, plan: str, count: int) -> None:
    """count entries in the shape of a real plan: a hypothesis, two predictions, a verdict on the first."""
    written = 0
    while written < count:
        h = ledger.hypothesis(plan, f"hypothesis {written}")
        p1 = ledger.prediction(plan, f"prediction {written}", "the check that would refute it", h.label)
        p2 = ledger.prediction(plan, f"another prediction {written}", "another check", h.label)
        ledger.verdict(plan, p1.label, "confirmed", "what was observed")
        written += 4
        del p2  # left open on purpose: the open count has something to count


def baseline(database, count: int) -> float:
    db = database.connect()
    db.execute("CREATE TABLE IF NOT EXISTS bench_plain (id INTEGER PRIMARY KEY, plan TEXT, text TEXT, at TEXT)")
    started = time.perf_counter()
    for i in range(count):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO bench_plain (plan, text, at) VALUES (?, ?, ?)", ("sci.plain", f"entry {i}", "now"))
        db.execute("COMMIT")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--appends", type=int, default=10_000)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5, help="list timings to take the median of")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    from skills_magic.records.db import Database
    from skills_magic.records.ledger import Ledger

    with tempfile.TemporaryDirectory() as folder:
        database = Database(os.path.join(folder, "bench.sqlite"))
        ledger = Ledger(database, "bench")
        base_seconds = baseline(database, args.appends)
        started = time.perf_counter()
        appends(ledger, "sci.appends", args.appends)
        append_seconds = time.perf_counter() - started
        rate = args.appends / append_seconds

        # a plan of `entries` entries, written in one transaction (fast to build; list does not care how)
        big = Ledger(database, "bench")
        db = database.connect()
        db.execute("BEGIN IMMEDIATE")
        rows = []
        for i in range(args.entries // 4):
            base = 4 * i
            rows += [
                ("sci.big", "hypothesis", i + 1, f"H{i + 1}", f"h {i}", None, None, None, None, None),
                ("sci.big", "prediction", 2 * i + 1, f"P{2 * i + 1}", f"p {i}", base + 1, None, "check", None, None),
                ("sci.big", "prediction", 2 * i + 2, f"P{2 * i + 2}", f"q {i}", base + 1, None, "check", None, None),
                ("sci.big", "verdict", i + 1, f"V{i + 1}", "confirmed", None, base + 2, None, "confirmed", "seen"),
            ]
        offset = db.execute("SELECT COALESCE(MAX(id), 0) FROM ledger_entries").fetchone()[0]
        db.executemany(
            "INSERT INTO ledger_entries (plan, kind, number, label, text, hypothesis_id, prediction_id, falsified_by, "
            "outcome, evidence, at, session) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'now', 'bench')",
            [(*r[:5], None if r[5] is None else r[5] + offset, None if r[6] is None else r[6] + offset, *r[7:]) for r in rows],
        )
        db.execute("COMMIT")
        timings = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            state = big.state("sci.big")
            timings.append(time.perf_counter() - started)
        list_ms = statistics.median(timings) * 1000

    print(f"ledger appends: {args.appends:,} entries, each its own transaction (WAL, synchronous=NORMAL)")
    print(f"  ledger     {append_seconds * 1000:8.1f} ms  {rate:8,.0f} appends/s")
    print(f"  baseline   {base_seconds * 1000:8.1f} ms  {args.appends / base_seconds:8,.0f} inserts/s (plain INSERT, same file)")
    ok_rate = rate > TARGET_APPENDS_PER_SECOND
    print(f"  {'ok  ' if ok_rate else 'MISS'} {rate:,.0f} appends/s, {append_seconds / base_seconds:.2f}x the baseline's time "
          f"(target > {TARGET_APPENDS_PER_SECOND:,}/s)")
    ok_list = list_ms < TARGET_LIST_MS
    print(f"list over {state.total:,} entries ({state.open_count:,} open predictions, newest {len(state.entries)} shown), "
          f"median of {args.repeat}:")
    print(f"  {'ok  ' if ok_list else 'MISS'} {list_ms:.1f} ms (target < {TARGET_LIST_MS} ms)")
    return 1 if args.check and not (ok_rate and ok_list) else 0


if __name__ == "__main__":
    raise SystemExit(main())
