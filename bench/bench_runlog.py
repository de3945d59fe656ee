"""Benchmark: listing the run log's newest rows (`%skills runs`, `skills-magic logs`) over a log of 100,000 rows.

    python bench/bench_runlog.py [--rows 100000] [--limit 50] [--repeat 5] [--check]

A temporary log is filled with `rows` rows in the shape real ones have (runs, votes, eval runs and batch requests
over a handful of skills, each with its trace, tool calls and bodies), then two listings are timed, each against a
baseline measured in the same run on the same file: a bare sqlite3 SELECT of the same rows.
1. the newest `limit` rows (`RunLog.rows(limit=50)`);
2. the newest `limit` rows of one skill (`RunLog.rows(skill=..., limit=50)`).
Target: under 50 ms each.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_LIST_MS = 50
SKILLS = ("csv-profile", "lab-notebook-entry", "source-verification", "claim-verification", "scientific-method")
KINDS = ("run", "vote", "eval", "batch")


def fill(database, count: int) -> None:
    """`count` rows in one transaction (fast to build; listing does not care how they were written)."""
    trace = json.dumps([{"stage": "discover", "object": "catalog of 5 skills", "bytes": 2400},
                        {"stage": "model", "object": "call 1", "input_tokens": 1200, "output_tokens": 40}])
    calls = json.dumps([{"name": "activate_skill", "input": {"name": "csv-profile"}, "result_bytes": 900}])
    body = json.dumps([{"model": "claude-sonnet-5-5", "messages": [{"role": "user", "content": "x" * 400}]}])
    rows = [(f"2026-12-01T09:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000000:06d}Z", "bench",
             KINDS[i % 4], None, "claude-sonnet-5-5", "native", SKILLS[i % 5], json.dumps([SKILLS[i % 5]]), calls,
             trace, 1200, 40, 0, 0, 0.8, 0.0042, None, "end_turn", None, json.dumps({"item": f"P{i % 15}"}), body, body)
            for i in range(count)]
    db = database.connect()
    db.execute("BEGIN IMMEDIATE")
    db.executemany("INSERT INTO runs (at, session, kind, label, model, harness, skill, activated, tool_calls, trace, "
                   "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, seconds, cost_usd, "
                   "reported_cost_usd, outcome, error, data, requests, responses) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.execute("COMMIT")


def median_ms(action, repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5, help="timings to take the median of")
    parser.add_argument("--check", action="store_true", help="exit 1 when a listing misses the target")
    args = parser.parse_args()

    from skills_magic.records.db import Database
    from skills_magic.records.runlog import LISTED, RunLog

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "bench.sqlite")
        database = Database(path)
        log = RunLog(database, "bench")
        fill(database, args.rows)
        bare = sqlite3.connect(path)
        columns = ", ".join(LISTED)
        newest = f"SELECT {columns} FROM runs ORDER BY id DESC LIMIT ?"
        by_skill = f"SELECT {columns} FROM runs WHERE skill = ? ORDER BY id DESC LIMIT ?"
        figures = [
            ("newest", median_ms(lambda: log.rows(limit=args.limit), args.repeat),
             median_ms(lambda: bare.execute(newest, (args.limit,)).fetchall(), args.repeat)),
            (f"skill {SKILLS[2]}", median_ms(lambda: log.rows(skill=SKILLS[2], limit=args.limit), args.repeat),
             median_ms(lambda: bare.execute(by_skill, (SKILLS[2], args.limit)).fetchall(), args.repeat)),
        ]
        listed = len(log.rows(limit=args.limit))
        bare.close()

    print(f"run log listing: the newest {listed} of {args.rows:,} rows, median of {args.repeat}")
    ok = True
    for name, ms, base in figures:
        met = ms < TARGET_LIST_MS
        ok = ok and met
        print(f"  {'ok  ' if met else 'MISS'} {name:<24} {ms:7.2f} ms  baseline {base:6.2f} ms (bare SELECT, same file)  "
              f"{ms / base if base else float('inf'):5.1f}x  (target < {TARGET_LIST_MS} ms)")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
