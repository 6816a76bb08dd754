"""The benches under bench/ still run: they import the test fakes and the package's internals,
so a rename elsewhere can break one unnoticed (bench_batch did, for a stop). Each runs once
with the smallest inputs it takes; what it measures is not judged here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[1] / "bench"


def run_bench(name: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / name), *args], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_bench_batch_runs_a_tiny_batch_at_each_worker_count() -> None:
    out = run_bench("bench_batch.py", "--tasks", "2", "--latency", "0", "--workers", "1", "2")
    rows = re.findall(r"^local\s+(\d+)\s+[\d.]+\s+[\d.]+x$", out, re.MULTILINE)
    assert rows == ["1", "2"], out


def test_bench_tokens_counts_six_requests_in_each_format() -> None:
    out = run_bench("bench_tokens.py")
    rows = re.findall(r"^(xml|react|native)\s+(\d+)\s+[\d,]+", out, re.MULTILINE)
    assert rows == [("xml", "6"), ("react", "6"), ("native", "6")], out


def test_bench_git_guard_times_a_sweep_that_removes_what_it_planted() -> None:
    out = run_bench("bench_git_guard.py", "30", "1")
    assert re.search(r"^30 folders, [\d,]+ entries", out, re.MULTILINE), out
    assert "sweep, one .git planted:" in out
    assert re.search(r"^  now \(guard when needed\):\s+[\d.]+ ms$", out, re.MULTILINE), out


def test_bench_lint_times_checked_and_unchecked_edits() -> None:
    out = run_bench("bench_lint.py", "--lines", "200", "--edits", "2")
    assert re.search(r"^edit_file \+ check\s+[\d.]+\s+[\d.]+$", out, re.MULTILINE), out


def test_bench_commands_times_each_sandbox_and_the_walk() -> None:
    out = run_bench("bench_commands.py", "--runs", "2")
    assert re.search(r"^run_command true, --sandbox off\s+[\d.]+$", out, re.MULTILINE), out
    assert re.search(r"^/proc walk alone \(\d+ processes\)\s+[\d.]+$", out, re.MULTILINE), out


def test_bench_checkpoints_times_snapshots_and_a_restore() -> None:
    out = run_bench("bench_checkpoints.py", "--files", "50", "--runs", "2")
    assert re.search(r"^snapshot, tree unchanged:\s+[\d.]+ ms$", out, re.MULTILINE), out
    assert re.search(r"^restore of those 3 files:\s+[\d.]+ ms$", out, re.MULTILINE), out


@pytest.mark.skipif(
    not (BENCH.parent / ".git").exists(), reason="compares with the scanner in git history"
)
def test_bench_rules_times_the_parser_and_the_old_scanner() -> None:
    out = run_bench("bench_rules.py", "--rounds", "2")
    assert re.search(r"^median\s+\d+µs\s+\d+µs$", out, re.MULTILINE), out
    assert re.search(r"^first check in a fresh process .*: [\d.]+ ms$", out, re.MULTILINE), out


def test_bench_sandbox_policy_builds_the_policy_on_a_generated_home() -> None:
    out = run_bench("bench_sandbox_policy.py", "--programs", "10", "--runs", "1")
    assert re.search(r"^this\s+[\d.]+ ms\s+[\d.]+ ms\s+\d+\s+", out, re.MULTILINE), out
    assert "exposed and files covered by each version: NO" not in out, out
