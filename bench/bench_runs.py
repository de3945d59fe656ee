"""Benchmark: the agent loop's own cost per turn, the first run's start-up cost, and the catalog's size.

    python bench/bench_runs.py [--turns 200] [--repeat 5] [--check]

1. Loop overhead per turn (model latency excluded): a 200-turn run on the scripted client (199 tool calls, then
   an answer), against a baseline measured in the same run: the same 200 scripted responses produced without
   the loop. Target: under 2 ms per turn.
2. First-run overhead through the real SDK (a MockTransport answers, so no network): in fresh processes, the
   first `%%skill run`-equivalent call with the SDK not yet imported, the same after the background warm-up that
   `%load_ext` starts when ANTHROPIC_API_KEY is set, and a second run in the same process (the steady state).
3. The catalog part of the system prompt for 100 skills (from ../shared/corpus when present, else generated):
   stays within the default budget of 8,000 characters (1% of a 200k-token context x 4 chars per token).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE.parent.parent / "shared" / "corpus"
SAMPLE_SKILLS = HERE.parent / "sample-skills"
TARGET_MS_PER_TURN = 2.0


def scripted_turns(turns: int) -> list[dict]:
    calls = [{"tool_use": [{"name": "activate_skill", "input": {"name": "csv-profile"}}], "usage": {"input_tokens": 10, "output_tokens": 5}}]
    calls += [{"tool_use": [{"name": "read_skill_resource", "input": {"skill": "csv-profile", "path": "references/REFERENCE.md"}}],
               "usage": {"input_tokens": 10, "output_tokens": 5}} for _ in range(turns - 2)]
    calls.append({"text": "done", "usage": {"input_tokens": 10, "output_tokens": 5}})
    return calls


def sample_catalog():
    from skills_magic.skills.catalog import Catalog, Source

    return Catalog([Source("bundled", str(SAMPLE_SKILLS), explicit=True)]).scan().skills


def loop_figures(turns: int, repeat: int) -> dict[str, float]:
    from skills_magic.runs.agent import Agent
    from skills_magic.models.scripted import ScriptedModel

    skills = sample_catalog()
    loop, baseline = [], []
    for _ in range(repeat):
        model = ScriptedModel(scripted_turns(turns))
        agent = Agent(skills, model, "bench", show_path=os.path.basename, max_turns=turns)
        started = time.perf_counter()
        result = agent.run("Profile data.csv")
        loop.append(time.perf_counter() - started)
        assert result.turns == turns and result.stop_reason == "end_turn", (result.turns, result.stop_reason)
        # the baseline: the same responses from the same client, with no loop around them
        bare = ScriptedModel(scripted_turns(turns))
        request = agent.request([])
        started = time.perf_counter()
        for _ in range(turns):
            bare.create(request)
        baseline.append(time.perf_counter() - started)
    loop_s, base_s = statistics.median(loop), statistics.median(baseline)
    return {"loop_ms": loop_s * 1000, "baseline_ms": base_s * 1000, "per_turn_ms": (loop_s - base_s) * 1000 / turns}


FIRST_RUN = r"""
import json, os, sys, threading, time
mode = sys.argv[1]
from skills_magic.skills.catalog import Catalog, Source
from skills_magic.runs.agent import Agent
from skills_magic.models import anthropic as sm_anthropic
skills = Catalog([Source("bundled", {sample!r}, explicit=True)]).scan().skills
if mode == "warm":
    sm_anthropic.warm_up()
    sm_anthropic._warm.join()  # the user is still typing the cell when the import finishes

def run():
    import httpx2
    answer = {{"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [{{"type": "text", "text": "ok"}}],
              "stop_reason": "end_turn", "stop_sequence": None, "usage": {{"input_tokens": 1, "output_tokens": 1}}}}
    client = httpx2.Client(transport=httpx2.MockTransport(lambda request: httpx2.Response(200, json=answer)))
    model = sm_anthropic.AnthropicModel("m", api_key="bench-key", http_client=client)
    return Agent(skills, model, "m", show_path=os.path.basename).run("hello")

started = time.perf_counter(); first = run(); first_s = time.perf_counter() - started
started = time.perf_counter(); second = run(); second_s = time.perf_counter() - started
assert first.stop_reason == second.stop_reason == "end_turn", (first.error, second.error)
print(json.dumps({{"first": first_s, "second": second_s}}))
"""


def first_run_figures(repeat: int) -> dict[str, float]:
    code = FIRST_RUN.format(sample=str(SAMPLE_SKILLS))
    figures: dict[str, list[float]] = {"cold_first": [], "warm_first": [], "steady": []}
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
    import json

    for _ in range(repeat):
        for mode in ("cold", "warm"):
            out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, env=env, check=True)
            times = json.loads(out.stdout)
            figures[f"{mode}_first"].append(times["first"])
            figures["steady"].append(times["second"])
    return {k: statistics.median(v) * 1000 for k, v in figures.items()}


def catalog_figures(corpus: Path) -> dict[str, object]:
    from skills_magic.runs.agent import Agent
    from skills_magic.skills.catalog import Catalog, Source
    from skills_magic.skills.listing import DEFAULT_BUDGET_CHARS
    from skills_magic.models.scripted import ScriptedModel

    if corpus.is_dir():
        skills = list(Catalog([Source("session", str(corpus), explicit=True)]).scan().skills)[:100]
        origin = f"the first 100 skills of {corpus.name}"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(100):
                folder = Path(tmp, f"skill-{i:03d}")
                folder.mkdir()
                (folder / "SKILL.md").write_text(f"---\nname: skill-{i:03d}\ndescription: {'Does a careful thing. ' * 12}Use when needed.\n---\nbody\n")
            skills = list(Catalog([Source("session", tmp, explicit=True)]).scan().skills)
        origin = "100 generated skills with 270-character descriptions"
    agent = Agent(skills, ScriptedModel([]), "bench", show_path=os.path.basename)
    return {"origin": origin, "chars": len(agent.catalog), "budget": DEFAULT_BUDGET_CHARS, "shown": agent.listing.shown,
            "total": len(skills), "marker": agent.listing.marker() or "none"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--corpus", default=os.environ.get("SKILLS_MAGIC_CORPUS", str(DEFAULT_CORPUS)))
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()

    loop = loop_figures(args.turns, args.repeat)
    first = first_run_figures(max(1, args.repeat // 2))
    catalog = catalog_figures(Path(args.corpus))

    print(f"agent loop, {args.turns}-turn scripted run, median of {args.repeat}:")
    print(f"  loop {loop['loop_ms']:.1f} ms, baseline (the same responses without the loop) {loop['baseline_ms']:.1f} ms")
    ok_loop = loop["per_turn_ms"] < TARGET_MS_PER_TURN
    print(f"  {'ok  ' if ok_loop else 'MISS'} loop overhead {loop['per_turn_ms']:.3f} ms per turn (target < {TARGET_MS_PER_TURN} ms)")
    print("first run through the SDK (MockTransport, fresh processes):")
    print(f"  first run, SDK not yet imported   {first['cold_first']:8.1f} ms  (+{first['cold_first'] - first['steady']:.0f} ms over steady state)")
    print(f"  first run after background warm-up {first['warm_first']:7.1f} ms  (+{first['warm_first'] - first['steady']:.0f} ms over steady state)")
    print(f"  second run (steady state)         {first['steady']:8.1f} ms")
    ok_catalog = catalog["chars"] <= catalog["budget"]
    print(f"catalog in the system prompt, {catalog['origin']}:")
    print(f"  {'ok  ' if ok_catalog else 'MISS'} {catalog['chars']:,} characters of {catalog['budget']:,} "
          f"({catalog['shown']} of {catalog['total']} skills shown; marker: {catalog['marker']})")
    return 1 if args.check and not (ok_loop and ok_catalog) else 0


if __name__ == "__main__":
    raise SystemExit(main())
