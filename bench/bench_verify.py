"""Benchmark: 25 claims x 3 votes through the real SDK against a local fake server that answers after 200 ms.

    python bench/bench_verify.py [--claims 25] [--latency 0.2] [--concurrency 16] [--check]

The same verification runs twice in one process: with concurrency 16 and with concurrency 1 (the baseline).
Targets: concurrency 16 at least 10x faster than 1, and within 1.5x of ceil(75 / 16) x 200 ms (the time a perfect
scheduler needs). The server (127.0.0.1, a random port) is threaded, so it can hold every request at once.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VERDICT = {"refuted": False, "evidence": "The quote states it.", "confidence": "high"}


class SlowMessages(BaseHTTPRequestHandler):
    latency = 0.2

    def do_POST(self):  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("content-length", 0))
        self.rfile.read(length)
        time.sleep(self.latency)  # the fake model thinking
        body = json.dumps({
            "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench",
            "content": [{"type": "tool_use", "id": "toolu_bench", "name": "record_verdict", "input": VERDICT}],
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 200, "output_tokens": 30},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet
        pass


def run(base_url: str, claims: int, concurrency: int) -> tuple[float, dict]:
    import asyncio

    from skills_magic.runs import verify
    from skills_magic.models.anthropic import AnthropicModel

    items = [verify.Claim(claim=f"claim {i}", quote=f"quote {i}") for i in range(claims)]
    voter = verify.ModelVoter(AnthropicModel("bench", api_key="bench-key", base_url=base_url, max_retries=0), "bench")
    started = time.perf_counter()
    result = asyncio.run(verify.verify(items, [voter], concurrency=concurrency, max_claims=claims))
    seconds = time.perf_counter() - started
    assert result.stats["confirmed"] == claims, result.stats
    return seconds, result.stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claims", type=int, default=25)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    SlowMessages.latency = args.latency
    ThreadingHTTPServer.request_queue_size = 128  # the listen backlog: 5 by default, fewer than the votes in flight
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowMessages)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        run(base_url, 2, 2)  # warm-up: the SDK import and the first connection are not what is measured
        fast, stats = run(base_url, args.claims, args.concurrency)
        slow, _ = run(base_url, args.claims, 1)
    finally:
        server.shutdown()
    votes = args.claims * 3
    ideal = math.ceil(votes / args.concurrency) * args.latency
    speedup, versus_ideal = slow / fast, fast / ideal
    print(f"{args.claims} claims x 3 votes = {votes} requests, the server answers each after {args.latency * 1000:.0f} ms")
    print(f"  concurrency {args.concurrency:>2}: {fast:6.2f} s   ({stats['agent_calls']} agent calls, "
          f"{stats['input_tokens']:,} input / {stats['output_tokens']:,} output tokens)")
    print(f"  concurrency  1: {slow:6.2f} s   (baseline, same run)")
    ok_speed, ok_ideal = speedup >= 10, versus_ideal <= 1.5
    print(f"  {'ok  ' if ok_speed else 'MISS'} {speedup:.1f}x faster than concurrency 1 (target >= 10x)")
    print(f"  {'ok  ' if ok_ideal else 'MISS'} {versus_ideal:.2f}x of ceil({votes}/{args.concurrency}) x "
          f"{args.latency * 1000:.0f} ms = {ideal:.2f} s (target <= 1.5x)")
    return 1 if args.check and not (ok_speed and ok_ideal) else 0


if __name__ == "__main__":
    raise SystemExit(main())
