"""Benchmark: the sandbox's overhead on a trivial Python script, sandboxed vs unsandboxed in one run.

    python bench/bench_sandbox.py [--runs 30] [--check]

Both go through the same executor (argv, no shell, the allowlisted environment). The sandboxed runs add what the
gate adds to every run: the private copy of the skill's files (hashed as copied, mounted at the skill's folder),
the outer mount namespace with its size-limited tmpfs, bwrap's namespaces, the masks, the seccomp filter, the limits
(prlimit, and a pids cgroup where one can be made) and the copy-out of the scratch folder. Target: under 50 ms added
per run. The private copy of the source-verification sample skill is timed on its own.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_ADDED_MS = 50
SAMPLE_SKILL = ROOT / "sample-skills" / "source-verification"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    from skills_magic import sandbox
    from skills_magic.execute import run_script
    from skills_magic.manifest import private_copy
    from skills_magic.sandbox import Grants

    ok, why = sandbox.availability()
    if not ok:
        print(f"no sandbox here: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        skill = Path(folder, "skill")
        (skill / "scripts").mkdir(parents=True)
        (skill / "SKILL.md").write_text("---\nname: skill\ndescription: A benchmark skill.\n---\nRun hi.\n")
        (skill / "scripts" / "hi.py").write_text("print('hi')\n")
        plain, boxed, copies = [], [], []
        for number in range(args.runs):  # interleaved, so machine noise hits both alike
            started = time.perf_counter()
            run_script(str(skill), "scripts/hi.py")
            plain.append(time.perf_counter() - started)
            scratch = tempfile.mkdtemp(dir=folder)
            started = time.perf_counter()
            copy = private_copy("skill", str(skill), str(Path(folder, f"copy-{number}")), None)
            box = sandbox.prepare(str(skill), scratch, Grants(), skill_copy=(copy.folder, str(skill)))
            result = run_script(str(skill), "scripts/hi.py", sandbox=box, digest=copy.files["scripts/hi.py"])
            shutil.rmtree(copy.folder)
            boxed.append(time.perf_counter() - started)
            assert result.stdout == "hi\n" and result.sandboxed, result.stderr
            started = time.perf_counter()
            sample = private_copy("source-verification", str(SAMPLE_SKILL), str(Path(folder, f"sample-{number}")), None)
            copies.append(time.perf_counter() - started)
            shutil.rmtree(sample.folder)
    p, b, c = (statistics.median(x) * 1000 for x in (plain, boxed, copies))
    ok_added = b - p < TARGET_ADDED_MS
    version = __import__("subprocess").run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"trivial Python script, median of {args.runs} interleaved runs ({version}):")
    print(f"  unsandboxed                      {p:6.1f} ms")
    print(f"  sandboxed, private copy, limits  {b:6.1f} ms  ({b / p:.2f}x)")
    print(f"  {'ok  ' if ok_added else 'MISS'} {b - p:.1f} ms added per run (target < {TARGET_ADDED_MS} ms)")
    print(f"private copy of the source-verification skill ({len(sample.files)} files): {c:.2f} ms (median)")
    return 1 if args.check and not ok_added else 0


if __name__ == "__main__":
    raise SystemExit(main())
