"""Benchmark: the whole deep-research workflow (runs.research) on simulated agents, against its lower bound and
against the same agent calls made one at a time.

    python bench/bench_research.py [--angles 5] [--sources 3] [--delay 0.05] [--limit 8] [--check]

Every agent call (scope, a search per angle, a fetch per source, 3 votes per claim, the synthesis) answers after
`delay` seconds, from a client that sleeps as a remote model would. Figures, all from the same run:
- research: `research(orchestra, question)`, the pipeline of search and fetch, the barrier, the nested votes;
- sequential: the same calls one at a time (calls x delay, computed);
- ideal: the workflow's own shape run in full waves of `limit` calls, with nothing lost between them: the scope,
  ceil(angles / limit) waves of searches, ceil(sources / limit) of fetches (the barrier), ceil(votes / limit) of
  votes, the synthesis; each wave `delay` (computed; overlapping search and fetch can only do better).
The agent calls counted are checked against the formula 1 + angles + sources + claims x 3 + 1.
Target: the workflow within 1.5x its ideal (issue 19's pipeline target, here for the whole workflow).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_RATIO = 1.5  # the workflow's time over its ideal, at most
CLAIMS_PER_SOURCE = 2  # each fetch extracts this many distinct claims


class SlowAgents:
    """A model client whose every answer takes `delay` seconds: the stages' answers, built from the prompt."""

    name = "bench"
    billed = False

    def __init__(self, angles: int, sources: int, delay: float):
        self.angles, self.sources, self.delay = angles, sources, delay

    async def acreate(self, request):
        await asyncio.sleep(self.delay)
        tool = request["tool_choice"]["name"]
        prompt = request["messages"][0]["content"]
        if tool == "record_scope":
            answer = {"question": "Q", "underspecified": False,
                      "angles": [{"angle": f"angle {a}", "query": f"q{a}"} for a in range(self.angles)]}
        elif tool == "record_search":
            angle = re.search(r"\*\*Angle:\*\* angle (\d+)", prompt).group(1)
            answer = {"sources": [{"url": f"https://s{angle}-{n}.example/", "title": "t"} for n in range(self.sources)]}
        elif tool == "record_fetch":
            url = re.search(r"\*\*Source:\*\* (\S+)", prompt).group(1)
            answer = {"claims": [{"claim": f"claim {k} of {url}", "quote": "q", "importance": 3}
                                 for k in range(CLAIMS_PER_SOURCE)]}
        elif tool == "record_verdict":
            answer = {"refuted": False, "evidence": "supported", "confidence": "high"}
        else:
            answer = {"executive_summary": "S", "findings": [{"finding": "F", "claims": [1]}]}
        return {"content": [{"type": "tool_use", "id": "t", "name": tool, "input": answer}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}


def timed(angles: int, sources: int, delay: float, limit: int):
    from skills_magic.runs import research as r
    from skills_magic.runs.orchestrate import Orchestra, run

    orchestra = Orchestra(SlowAgents(angles, sources, delay), "bench", limit=limit)
    settings = r.Settings(angles=angles, sources_per_angle=sources, max_sources=angles * sources)
    started = time.perf_counter()
    report = run(r.research(orchestra, "Q", settings=settings))
    return time.perf_counter() - started, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--angles", type=int, default=5)
    parser.add_argument("--sources", type=int, default=3, help="sources per angle")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds each agent call takes")
    parser.add_argument("--limit", type=int, default=8, help="agent calls in flight at once")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args()

    seconds, report = timed(args.angles, args.sources, args.delay, args.limit)
    calls = report.agent_calls
    assert report.status == "complete" and calls == report.expected_agent_calls, (report.stopped, report.formula)
    sequential = calls * args.delay
    c = report.calls
    waves = 1 + sum(math.ceil(n / args.limit) for n in (c["angles"], c["sources"], c["verified"] * c["votes"])) + 1
    ideal = waves * args.delay
    ratio = seconds / ideal
    print(f"research: {report.formula} agent calls, {args.delay * 1000:.0f} ms each, limit {args.limit}")
    print(f"  research      {seconds * 1000:8.1f} ms")
    print(f"  sequential    {sequential * 1000:8.1f} ms  (one call at a time, computed)")
    print(f"  ideal         {ideal * 1000:8.1f} ms  ({waves} full waves of {args.limit} calls, computed)")
    ok = ratio <= TARGET_RATIO
    print(f"  {'ok  ' if ok else 'MISS'} {ratio:.2f}x the ideal (target <= {TARGET_RATIO}x); "
          f"{sequential / seconds:.1f}x faster than sequential")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
