"""The benchmark script runs end to end on the corpus and reports every figure the README quotes.
(Its timings are not asserted: tests never hold timing thresholds; the README quotes a measured run.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_catalog.py"


@pytest.mark.corpus
def test_benchmark_runs_and_reports_every_figure(corpus, corpus_skill_folders):
    run = subprocess.run([sys.executable, str(BENCH), str(corpus), "--repeat", "1"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for row in ("skills-ref", "floor", "cold", "warm"):
        assert any(line.split()[:1] == [row] for line in run.stdout.splitlines()), run.stdout
    for figure in ("faster than skills-ref", "the floor", "faster than cold", "import skills_magic", "heavy modules imported: none"):
        assert figure in run.stdout
    n = len(corpus_skill_folders)
    assert f"cold loads {n} of {n} files" in run.stdout


def test_benchmark_refuses_a_missing_corpus(tmp_path):
    run = subprocess.run([sys.executable, str(BENCH), str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert run.returncode == 2 and "no corpus" in run.stderr
