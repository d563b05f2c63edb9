"""The benches still run: each one's ``--quick`` mode, in a subprocess, as a user runs it.

Only behaviour is checked (exit code, a SUMMARY line); the figures belong to the benches.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.mark.parametrize(
    "script",
    [
        "scripted_server.py",
        "inbox_read.py",
        "workspace.py",
        pytest.param("coordinator_overhead.py", marks=pytest.mark.cli),
        pytest.param("spawn_gate.py", marks=pytest.mark.cli),
        "relay.py",
        "otel.py",
        pytest.param("storm.py", marks=pytest.mark.cli),
        pytest.param("overload.py", marks=pytest.mark.cli),
        "limits.py",
        "cli_start.py",
        pytest.param("shim_latency.py", marks=pytest.mark.cli),
        "agent_ends.py",
        pytest.param("agents_scale.py", marks=pytest.mark.cli),
    ],
)
def test_bench_quick_mode_runs_and_summarizes(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--quick"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    summaries = [line for line in done.stdout.splitlines() if line.startswith("SUMMARY:")]
    assert len(summaries) == 1, done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == summaries[0]  # the summary ends the output
    assert "FAILED" not in done.stdout + done.stderr
