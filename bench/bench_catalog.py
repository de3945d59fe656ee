"""Benchmark: discover + parse + render the listing of a skills corpus, against baselines measured in this run.

    python bench/bench_catalog.py [CORPUS] [--repeat N] [--check]

Baselines (same process, same corpus, interleaved with our runs so machine noise hits all alike):
  skills-ref   os.walk for SKILL.md folders, skills-ref 0.1.1 `read_properties` on each, `to_prompt` over those
               that load (it raises on the others)
  floor        os.walk, read each SKILL.md, split the frontmatter, `yaml.load` with CSafeLoader: the least work
               that reads and parses every file
Ours:
  cold         a new session: walk, read, parse, validate leniently, resolve collisions, render the listing
  warm         the same session again with nothing changed (the stat pass) and the listing, 3 times per cold run
Also `python -X importtime -c "import skills_magic"` and which heavy modules that import pulls in.
Ratios are printed against the baselines; absolute times drift between machines and runs.
Targets (issue 2): cold >= 10x faster than skills-ref, cold <= 2x the floor, warm >= 20x faster than cold,
import < 150 ms with no anthropic / IPython / ipywidgets. `--check` exits 1 when one is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = HERE.parent.parent / "shared" / "corpus"
HEAVY_MODULES = ("anthropic", "IPython", "ipywidgets", "pydantic", "yaml")
WARM_RELISTS = 3  # re-lists per cold run: a researcher re-runs `%skills list` many times


def skill_folders(root: str) -> list[str]:
    return [dp for dp, _, files in os.walk(root) if "SKILL.md" in files or "skill.md" in files]


def run_skills_ref(root: str) -> int:
    from skills_ref import read_properties, to_prompt
    from skills_ref.errors import SkillError

    loaded = []
    for folder in skill_folders(root):
        try:
            read_properties(Path(folder))
        except (SkillError, UnicodeDecodeError, OSError):
            continue
        loaded.append(Path(folder))
    to_prompt(loaded)
    return len(loaded)


def run_floor(root: str) -> int:
    loaded = 0
    for folder in skill_folders(root):
        with open(os.path.join(folder, "SKILL.md"), encoding="utf-8") as handle:
            text = handle.read()
        if text.startswith("---"):
            end = text.find("\n---", 3)
            try:
                yaml.load(text[3:end], Loader=yaml.CSafeLoader)
                loaded += 1
            except yaml.YAMLError:
                pass
    return loaded


def run_ours(session) -> int:
    scan, _, _ = session.listing()  # what `%skills list` does: scan, then the listing under the default budget
    return len(scan.skills) + len(scan.shadowed)


def new_session(root: str):
    from skills_magic.skills.catalog import Source
    from skills_magic.session import SkillsSession

    return SkillsSession(sources=[Source("path", root, explicit=True)], cwd=root)


def timed(fn, *args) -> tuple[float, int]:
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def import_figures() -> tuple[float, list[str]]:
    code = "import skills_magic, sys, json; print(json.dumps(sorted(m for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    total_us = 0
    for line in out.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == "skills_magic":
            total_us = int(parts[1])
    import json

    modules = json.loads(out.stdout)
    heavy = [m for m in HEAVY_MODULES if m in modules]
    return total_us / 1000, heavy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", default=os.environ.get("SKILLS_MAGIC_CORPUS", str(DEFAULT_CORPUS)))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    root = os.path.abspath(args.corpus)
    if not os.path.isdir(root):
        print(f"no corpus at {root}", file=sys.stderr)
        return 2

    times: dict[str, list[float]] = {"skills-ref": [], "floor": [], "cold": [], "warm": []}
    counts: dict[str, int] = {}
    # warm-up so that imports and the OS page cache are the same for every contender
    run_skills_ref(root), run_floor(root), run_ours(new_session(root))
    for _ in range(args.repeat):
        for name, fn, arg in (("skills-ref", run_skills_ref, root), ("floor", run_floor, root)):
            seconds, counts[name] = timed(fn, arg)
            times[name].append(seconds)
        session = new_session(root)
        seconds, counts["cold"] = timed(run_ours, session)
        times["cold"].append(seconds)
        for _ in range(WARM_RELISTS):
            seconds, counts["warm"] = timed(run_ours, session)
            times["warm"].append(seconds)
    median = {k: statistics.median(v) for k, v in times.items()}
    files = len(skill_folders(root))
    import_ms, heavy = import_figures()

    print(f"corpus: {files} SKILL.md files; median of {args.repeat} runs ({args.repeat * WARM_RELISTS} for warm)")
    for name in times:
        print(f"  {name:<11} {median[name] * 1000:8.1f} ms   skills loaded: {counts[name]}")
    vs_ref = median["skills-ref"] / median["cold"]
    vs_floor = median["cold"] / median["floor"]
    warm = median["cold"] / median["warm"]
    results = [
        (f"cold is {vs_ref:.1f}x faster than skills-ref", vs_ref >= 10, "target >= 10x"),
        (f"cold takes {vs_floor:.2f}x the floor", vs_floor <= 2, "target <= 2x"),
        (f"warm is {warm:.1f}x faster than cold", warm >= 20, "target >= 20x"),
        (f"cold loads {counts['cold']} of {files} files", counts["cold"] >= counts["floor"], "target: every loadable skill"),
        (f"import skills_magic: {import_ms:.1f} ms", import_ms < 150, "target < 150 ms"),
        (f"heavy modules imported: {', '.join(heavy) or 'none'}", not set(heavy) & {"anthropic", "IPython", "ipywidgets"}, "target: no anthropic/IPython/ipywidgets"),
    ]
    missed = 0
    for text, ok, target in results:
        print(f"  {'ok  ' if ok else 'MISS'} {text} ({target})")
        missed += not ok
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    raise SystemExit(main())
