"""``teamlead ask --json`` ends with its ``finished`` line on SIGINT, SIGTERM and SIGHUP.

A real ``teamlead ask`` subprocess on the real CLI offline: one agent runs, the others wait
in the spawn gate; a stop signal ends the run at once, and its last NDJSON line is still
``finished``, naming every call: the running one ``stopped``, the queued ones ``rejected``.
The three runs (one per signal) share nothing and run side by side.
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from teamlead.testing import OfflineClaude, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut

from ..isolated import isolated_env, side_by_side
from ..polling import poll
from .conftest import TEAMLEAD, cli_processes

pytestmark = [pytest.mark.cli, pytest.mark.slow]

_AGENTS = 6


STOPS = ("SIGINT", "SIGTERM", "SIGHUP")


@dataclass(frozen=True)
class StoppedRun:
    """One `teamlead ask --json` stopped by a signal once its first agent ran."""

    started: bool  #: an agent reached the model before the deadline
    returncode: int | None
    out: str
    err: str
    reaped: bool  #: no CLI process of the run was left afterwards


def _stopped_run(stop: str, root: Path) -> StoppedRun:
    with ScriptedServer(FanOut.of(_AGENTS, delays=60.0)) as server:
        claude = OfflineClaude(server.base_url, state_dir=root / "s")
        proc = subprocess.Popen(
            [*TEAMLEAD, "ask", "Investigate.", "--max-concurrent-agents", "1", "--json"],
            env={**isolated_env(root), **claude.env},
            cwd=claude.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            started = bool(poll(lambda: server.recorded("subagent"), within_s=60))
            if started:
                proc.send_signal(getattr(signal, stop))
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
    reaped = bool(poll(lambda: not cli_processes(root / "s"), within_s=10))
    return StoppedRun(started, proc.returncode, out, err, reaped)


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StoppedRun]:
    """One run per signal, side by side: each its own process, CLI state and scripted model."""
    return side_by_side(_stopped_run, STOPS, tmp_path_factory)


@pytest.mark.parametrize("stop", STOPS)
def test_ask_json_ends_with_finished_naming_every_call_when_stopped_by_a_signal(
    stopped_runs: dict[str, StoppedRun], stop: str
) -> None:
    run = stopped_runs[stop]
    assert run.started, "no agent started"
    out, err = run.out, run.err
    assert run.returncode == 130, err
    lines = [json.loads(line) for line in out.splitlines()]
    done = lines[-1]
    assert done["type"] == "finished", lines[-3:]
    assert done["reason"] == "interrupted" and done["status"] != "completed", done
    tasks = done["tasks"]
    assert [t["status"] for t in tasks if t["kind"] == "task"] == ["stopped"], tasks
    queued = [t for t in tasks if t["kind"] == "call"]
    assert len(queued) == _AGENTS - 1, tasks
    assert all(t["status"] == "rejected" and t["disposition"] == "missing" for t in queued)
    assert all(stop in (t["reason"] or "") for t in queued), queued
    assert "interrupted; resume with: teamlead resume " in err
    assert run.reaped


def test_a_signal_during_a_failing_synthesis_turn_still_ends_with_finished(
    tmp_path: Path,
) -> None:
    """The race the field met: the lead's synthesis turn is failing (a 529 no retry gets
    past, answered 1.5 s after it came) when SIGINT lands; the NDJSON still ends with the
    run's ``finished`` line, and the command exits 130."""
    fan = FanOut.of(2, delays=0.2, synthesis_fault=Reply.error(529, should_retry=False, delay=1.5))
    with ScriptedServer(fan) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = subprocess.Popen(
            [*TEAMLEAD, "ask", "Investigate.", "--json"],
            env={**isolated_env(tmp_path), **claude.env},
            cwd=claude.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def failing_turn_under_way() -> bool:
                return any(
                    "<task-notification>" in r.request.last_user_text and r.finished is None
                    for r in server.recorded("lead")
                )

            assert poll(failing_turn_under_way, within_s=90), "no synthesis turn came"
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    last = json.loads(out.strip().splitlines()[-1])
    assert last["type"] == "finished" and last["reason"] == "interrupted", last
