"""Benchmark: a pipeline of N items x 3 stages against the same calls one at a time, stage by stage, and the ideal.

    python bench/bench_pipeline.py [--items 8] [--delay 0.05] [--check]

Each agent call is a scripted model's answer after a fixed delay that differs by item and stage (item i's stage s
takes delay x (1 + (i + s) % 3)), so items finish a stage at different times. Figures:
- pipeline: `Orchestra.pipeline(items, a, b, c)`, each item on to the next stage as soon as it is done;
- stage by stage: the same with a barrier between stages (every item waits for the slowest);
- sequential: every call one after the other (the sum of all delays, computed);
- ideal: the critical path, the slowest item's three stages end to end (computed).
Target: the pipeline within 1.5x the ideal (issue 19).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_RATIO = 1.5  # the pipeline's time over the critical path's, at most
STAGES = ("a", "b", "c")


def delays(items: int, delay: float) -> dict[tuple[int, str], float]:
    return {(i, s): delay * (1 + (i + n) % 3) for i in range(items) for n, s in enumerate(STAGES)}


def timed(items: int, table: dict[tuple[int, str], float], barriers: bool) -> float:
    from pydantic import BaseModel

    from skills_magic.models.scripted import ScriptedModel
    from skills_magic.runs.orchestrate import BARRIER, Orchestra, Stage, run

    class Step(BaseModel):
        item: int

    turns = [{"when": f"[item {i}/stage {s}]", "delay": d, "tool_use": [{"name": f"record_{s}", "input": {"item": i}}]}
             for (i, s), d in table.items()]
    stages = [Stage(s, lambda step, s=s: f"[item {step if isinstance(step, int) else step.item}/stage {s}]", Step)
              for s in STAGES]
    chain = [stages[0], BARRIER, stages[1], BARRIER, stages[2]] if barriers else stages
    orchestra = Orchestra(ScriptedModel(turns), "scripted", limit=items)
    started = time.perf_counter()
    results = run(orchestra.pipeline(range(items), *chain))
    seconds = time.perf_counter() - started
    assert [r.item for r in results] == list(range(items)) and orchestra.calls == 3 * items, results
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds: the shortest call")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    table = delays(args.items, args.delay)
    pipeline = timed(args.items, table, barriers=False)
    staged = timed(args.items, table, barriers=True)
    sequential = sum(table.values())
    ideal = max(sum(table[(i, s)] for s in STAGES) for i in range(args.items))
    ratio = pipeline / ideal
    ok = ratio <= TARGET_RATIO
    print(f"pipeline: {args.items} items x {len(STAGES)} stages, {3 * args.items} agent calls "
          f"(scripted, {args.delay * 1000:.0f}-{3 * args.delay * 1000:.0f} ms each)")
    print(f"  pipeline        {pipeline * 1000:8.1f} ms")
    print(f"  stage by stage  {staged * 1000:8.1f} ms  (a barrier between stages)")
    print(f"  sequential      {sequential * 1000:8.1f} ms  (one call at a time, computed)")
    print(f"  ideal           {ideal * 1000:8.1f} ms  (the critical path, computed)")
    print(f"  {'ok  ' if ok else 'MISS'} {ratio:.2f}x the ideal (target <= {TARGET_RATIO}x); "
          f"{sequential / pipeline:.1f}x faster than sequential")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
