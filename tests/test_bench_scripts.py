"""The run, ledger and verification benchmarks run end to end (small sizes) and report every figure the README
quotes. Timings are not asserted: tests hold no timing thresholds; the README quotes a measured run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench(name: str, *args: str) -> str:
    run = subprocess.run([sys.executable, str(BENCH / name), *args], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def test_run_benchmark_reports_loop_overhead_first_run_and_catalog_size():
    out = bench("bench_runs.py", "--turns", "20", "--repeat", "1")
    assert "loop overhead" in out and "ms per turn" in out
    assert "first run, SDK not yet imported" in out and "after background warm-up" in out and "steady state" in out
    assert "characters of 8,000" in out


def test_ledger_benchmark_reports_appends_and_list():
    out = bench("bench_ledger.py", "--appends", "400", "--entries", "4000", "--repeat", "1")
    assert "appends/s" in out and "baseline" in out and "list over 4,000 entries" in out


def test_run_log_benchmark_reports_listings_against_a_bare_select():
    out = bench("bench_runlog.py", "--rows", "2000", "--repeat", "1")
    assert "the newest 50 of 2,000 rows" in out and out.count("baseline") == 2 and "skill " in out


def test_verify_benchmark_compares_concurrency_against_one():
    out = bench("bench_verify.py", "--claims", "4", "--latency", "0.02", "--concurrency", "4")
    assert "concurrency  4:" in out and "concurrency  1:" in out and "faster than concurrency 1" in out
    assert "12 agent calls" in out


def test_pipeline_benchmark_compares_the_pipeline_with_stages_sequential_and_the_ideal():
    out = bench("bench_pipeline.py", "--items", "4", "--delay", "0.01")
    assert "12 agent calls" in out and "stage by stage" in out and "sequential" in out and "x the ideal" in out


def test_research_benchmark_runs_the_whole_workflow_and_counts_its_calls_by_the_formula():
    out = bench("bench_research.py", "--angles", "2", "--sources", "2", "--delay", "0.01")
    assert "1 + 2 + 4 + 8 × 3 + 1 = 32 agent calls" in out and "sequential" in out and "x the ideal" in out


def test_sandbox_benchmark_compares_sandboxed_and_unsandboxed_runs():
    from skills_magic.safety.sandbox import availability

    if not availability()[0]:
        import pytest

        pytest.skip(f"no bubblewrap sandbox here: {availability()[1]}")
    out = bench("bench_sandbox.py", "--runs", "3")
    assert "unsandboxed" in out and "sandboxed" in out and "ms added per run" in out
