"""A stop signal ends ``teamlead ask`` at once, mid fan-out: exit 130, no process left.

A real ``teamlead ask`` subprocess on the real CLI offline, two agents running and three
waiting in the spawn gate (``--max-concurrent-agents 2``), gets SIGINT, SIGTERM or SIGHUP.
Each way the command exits 130 with the line to resume by, every CLI process it started is
stopped and reaped, and no request reaches the model after the signal; with ``--json`` its
last line is still ``finished``, naming every call: the running ones ``stopped``, the queued
ones ``rejected``. The Ctrl-C a user types at a terminal is the plain run. The four runs
share nothing and go side by side.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from teamlead.testing import OfflineClaude, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut

from ..isolated import isolated_env, side_by_side
from ..polling import poll
from .conftest import cli_processes, start_ask

pytestmark = [pytest.mark.cli, pytest.mark.slow]

_AGENTS = 5
_CAP = 2  # two agents run when the signal comes, three wait in the gate

#: the runs: a signal, and whether ``--json`` was asked
STOPS = [("SIGINT", False), ("SIGINT", True), ("SIGTERM", True), ("SIGHUP", True)]
IDS = [f"{stop}-{'json' if as_json else 'plain'}" for stop, as_json in STOPS]
JSON_STOPS = [stop for stop, as_json in STOPS if as_json]


@dataclass(frozen=True)
class StoppedRun:
    """One ``teamlead ask`` stopped by a signal once its first agents ran."""

    started: int  #: the agents that had reached the model when the signal came
    returncode: int | None
    out: str
    err: str
    left_running: list[int]  #: CLI processes that ran at the signal and were not reaped
    left: list[list[str]]  #: the command lines of CLI processes still there afterwards
    late: list[str]  #: the roles of requests that came after the signal


def _stopped_run(key: tuple[str, bool], root: Path) -> StoppedRun:
    stop, as_json = key
    state = root / "s"
    with ScriptedServer(FanOut.of(_AGENTS, delays=60.0)) as server:
        claude = OfflineClaude(server.base_url, state_dir=state)
        args = ["--max-concurrent-agents", str(_CAP), *(["--json"] if as_json else [])]
        proc = start_ask(claude, *args, base=isolated_env(root))
        running: list[psutil.Process] = []
        signalled = time.monotonic()
        try:
            fanned_out = poll(lambda: len(server.recorded("subagent")) == _CAP, within_s=60)
            started = len(server.recorded("subagent"))
            if fanned_out and poll(lambda: cli_processes(state)):
                running = cli_processes(state)
                signalled = time.monotonic()
                proc.send_signal(getattr(signal, stop))
            # communicate's deadline is the promptness check: a stop that hangs is killed,
            # and fails on its exit code
            try:
                out, err = proc.communicate(timeout=30 if as_json else 20)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate(timeout=10)
                err += "\n(no end within its deadline after the signal)"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
        # every process teamlead started is stopped and reaped, not merely signalled
        _, alive = psutil.wait_procs(running, timeout=10)
        poll(lambda: not cli_processes(state), within_s=10)
        left = [p.cmdline() for p in cli_processes(state)]
        # every CLI process is gone, so no request can still come: none came after the signal
        late = [str(r.request.role) for r in server.recorded() if r.started > signalled]
    return StoppedRun(started, proc.returncode, out, err, [p.pid for p in alive], left, late)


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], StoppedRun]:
    """One run per signal (and a plain Ctrl-C), side by side: each its own process, CLI
    state and scripted model."""
    return side_by_side(
        _stopped_run, STOPS, tmp_path_factory, root_name=lambda key: IDS[STOPS.index(key)]
    )


@pytest.mark.parametrize("key", STOPS, ids=IDS)
def test_a_stop_signal_mid_fan_out_exits_130_and_leaves_no_cli_process(
    stopped_runs: dict[tuple[str, bool], StoppedRun], key: tuple[str, bool]
) -> None:
    run = stopped_runs[key]
    # the fan-out was under way, and no more than the cap had started
    assert run.started == _CAP, f"{run.started} agent(s) had started"
    assert run.returncode == 130, run.err
    assert "Traceback" not in run.err, run.err
    assert "interrupted; resume with: teamlead resume " in run.err
    assert "Unknown child process" not in run.err  # the stop reaps nothing asyncio owns
    assert run.left_running == []  # every CLI process that ran at the signal was reaped
    assert run.left == []
    assert run.late == []


@pytest.mark.parametrize("stop", JSON_STOPS)
def test_ask_json_ends_with_finished_naming_every_call_when_stopped_by_a_signal(
    stopped_runs: dict[tuple[str, bool], StoppedRun], stop: str
) -> None:
    run = stopped_runs[(stop, True)]
    assert run.returncode == 130, run.err
    lines = [json.loads(line) for line in run.out.splitlines()]
    assert "spawn_queued" in [r["type"] for r in lines]  # the others waited in the gate
    done = lines[-1]
    assert done["type"] == "finished", lines[-3:]
    assert done["reason"] == "interrupted" and done["status"] != "completed", done
    tasks = done["tasks"]
    assert [t["status"] for t in tasks if t["kind"] == "task"] == ["stopped"] * _CAP, tasks
    queued = [t for t in tasks if t["kind"] == "call"]
    assert len(queued) == _AGENTS - _CAP, tasks
    assert all(t["status"] == "rejected" and t["disposition"] == "missing" for t in queued)
    assert all(stop in (t["reason"] or "") for t in queued), queued


def test_a_signal_during_a_failing_synthesis_turn_still_ends_with_finished(
    tmp_path: Path,
) -> None:
    """The race the field met: the lead's synthesis turn is failing (a 529 no retry gets
    past, answered 1.5 s after it came) when SIGINT lands; the NDJSON still ends with the
    run's ``finished`` line, and the command exits 130."""
    fan = FanOut.of(2, delays=0.2, synthesis_fault=Reply.error(529, should_retry=False, delay=1.5))
    with ScriptedServer(fan) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = start_ask(claude, "--json", base=isolated_env(tmp_path))
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
