"""Benchmark: the sandbox's overhead on a trivial Python script, sandboxed vs unsandboxed in one run.

    python bench/bench_sandbox.py [--runs 30] [--check]

Both go through the same executor (argv, no shell, the allowlisted environment). The sandboxed runs add what the
gate adds to every run: the private copy of the skill's files (hashed as copied, mounted at the skill's folder),
the outer mount namespace with its size-limited tmpfs, bwrap's namespaces, the masks, the seccomp filter, the limits
(prlimit, and a pids cgroup where one can be made) and the copy-out of the scratch folder. Target: under 50 ms added
per run. The private copy of the source-verification sample skill is timed on its own.

Also, in the same run: the copy-on-write working folder (an overlay of a folder of 1,000 files, its changes copied
out) against the read-only working folder (target: under 50 ms added), and a request through the host-name proxy
(`--network 127.0.0.1`) against a direct one (`--network`) to a local HTTP server, timed inside the script.
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
WORKING_FILES = 1000  # the size of the working folder the copy-on-write figure is for
REQUESTS = 30  # requests a script times, through the proxy and directly
TIMED_FETCH = """
import statistics, sys, time, urllib.request
url, times = sys.argv[1], []
opener = urllib.request.build_opener() if len(sys.argv) < 3 else urllib.request.build_opener(urllib.request.ProxyHandler({}))
for _ in range(%d):
    started = time.perf_counter()
    opener.open(url, timeout=10).read()
    times.append(time.perf_counter() - started)
print(statistics.median(times) * 1000)
""" % REQUESTS
SAMPLE_SKILL = ROOT / "sample-skills" / "source-verification"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    from skills_magic.safety import sandbox
    from skills_magic.safety.execute import run_script
    from skills_magic.safety.manifest import private_copy
    from skills_magic.safety.sandbox import Grants

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
        read_only, copy_on_write, proxied, direct = working_folder_and_proxy(folder, args.runs)
    p, b, c = (statistics.median(x) * 1000 for x in (plain, boxed, copies))
    ok_added = b - p < TARGET_ADDED_MS
    version = __import__("subprocess").run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"trivial Python script, median of {args.runs} interleaved runs ({version}):")
    print(f"  unsandboxed                      {p:6.1f} ms")
    print(f"  sandboxed, private copy, limits  {b:6.1f} ms  ({b / p:.2f}x)")
    print(f"  {'ok  ' if ok_added else 'MISS'} {b - p:.1f} ms added per run (target < {TARGET_ADDED_MS} ms)")
    print(f"private copy of the source-verification skill ({len(sample.files)} files): {c:.2f} ms (median)")
    r, w = statistics.median(read_only) * 1000, statistics.median(copy_on_write) * 1000
    ok_overlay = w - r < TARGET_ADDED_MS
    print(f"working folder of {WORKING_FILES:,} files, median of {args.runs} interleaved sandboxed runs:")
    print(f"  read-only       {r:6.1f} ms")
    print(f"  copy-on-write   {w:6.1f} ms  ({w / r:.2f}x)")
    print(f"  {'ok  ' if ok_overlay else 'MISS'} {w - r:.1f} ms added per run by copy-on-write (target < {TARGET_ADDED_MS} ms)")
    x, d = statistics.median(proxied), statistics.median(direct)
    print(f"a request to a local HTTP server from inside the sandbox, median of {REQUESTS} per run over {args.runs} runs:")
    print(f"  direct (--network)              {d:6.2f} ms")
    print(f"  proxied (--network 127.0.0.1)   {x:6.2f} ms  ({x / d:.2f}x, {x - d:+.2f} ms a request)")
    return 1 if args.check and not (ok_added and ok_overlay) else 0


def working_folder_and_proxy(folder: str, runs: int):
    """(read-only runs, copy-on-write runs, proxied request ms, direct request ms), interleaved."""
    import http.server
    import threading

    from skills_magic.safety import sandbox
    from skills_magic.safety.execute import run_script
    from skills_magic.safety.sandbox import Grants

    work = Path(folder, "work")
    for number in range(WORKING_FILES):
        path = work / f"d{number % 20}" / f"f{number}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {number}\n")
    skill = Path(folder, "skill")
    (skill / "scripts" / "write.py").write_text("open('new.txt', 'w').write('x')\nprint('ok')\n")
    (skill / "scripts" / "fetch.py").write_text(TIMED_FETCH)

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    read_only, copy_on_write, proxied, direct = [], [], [], []
    try:
        for _ in range(runs):
            for working, times in ((False, read_only), (True, copy_on_write)):
                run = tempfile.mkdtemp(dir=folder)
                started = time.perf_counter()
                box = sandbox.prepare(str(work), run, Grants(), working=working, skill_copy=(str(skill), str(skill)))
                result = run_script(str(work), "scripts/write.py", sandbox=box, target=str(skill / "scripts" / "write.py"))
                times.append(time.perf_counter() - started)
                assert result.exit_code in (0, 1), result.stderr  # read-only: the write fails, as it should
            for grants, times, extra in ((Grants(hosts=("127.0.0.1",)), proxied, []), (Grants(network=True), direct, ["direct"])):
                run = tempfile.mkdtemp(dir=folder)
                box = sandbox.prepare(str(work), run, grants, skill_copy=(str(skill), str(skill)))
                result = run_script(str(work), "scripts/fetch.py", [url, *extra], sandbox=box,
                                    target=str(skill / "scripts" / "fetch.py"))
                assert result.exit_code == 0, result.stderr
                times.append(float(result.stdout))
    finally:
        server.shutdown()
        server.server_close()
    return read_only, copy_on_write, proxied, direct


if __name__ == "__main__":
    raise SystemExit(main())
