"""Benchmark: the bubblewrap sandbox's overhead on a trivial Python script, sandboxed vs unsandboxed in one run.

    python bench/bench_sandbox.py [--runs 30] [--check]

Both go through the same executor (argv, no shell, the scrubbed environment); the sandboxed runs add bwrap's
namespaces, mounts and a scratch folder. Target: under 50 ms added per run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_ADDED_MS = 50


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    from skills_magic import sandbox
    from skills_magic.execute import run_script
    from skills_magic.sandbox import Grants

    ok, why = sandbox.availability()
    if not ok:
        print(f"no sandbox here: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        skill = Path(folder, "skill")
        (skill / "scripts").mkdir(parents=True)
        (skill / "scripts" / "hi.py").write_text("print('hi')\n")
        plain, boxed = [], []
        for _ in range(args.runs):  # interleaved, so machine noise hits both alike
            started = time.perf_counter()
            run_script(str(skill), "scripts/hi.py")
            plain.append(time.perf_counter() - started)
            scratch = tempfile.mkdtemp(dir=folder)
            started = time.perf_counter()
            result = run_script(str(skill), "scripts/hi.py",
                                sandbox=(lambda c, s=scratch: sandbox.wrap(c, str(skill), s, Grants()), scratch, 10**8))
            boxed.append(time.perf_counter() - started)
            assert result.stdout == "hi\n" and result.sandboxed, result.stderr
    p, b = statistics.median(plain) * 1000, statistics.median(boxed) * 1000
    ok_added = b - p < TARGET_ADDED_MS
    version = __import__("subprocess").run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"trivial Python script, median of {args.runs} interleaved runs ({version}):")
    print(f"  unsandboxed {p:6.1f} ms")
    print(f"  sandboxed   {b:6.1f} ms  ({b / p:.2f}x)")
    print(f"  {'ok  ' if ok_added else 'MISS'} {b - p:.1f} ms added per run (target < {TARGET_ADDED_MS} ms)")
    return 1 if args.check and not ok_added else 0


if __name__ == "__main__":
    raise SystemExit(main())
