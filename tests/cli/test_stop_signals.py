"""A stop signal ends ``teamlead ask`` at once: exit 130, and no process left behind.

A real ``teamlead ask`` subprocess on the real CLI offline gets SIGINT, SIGTERM or SIGHUP
once its agents run. Every way, the command exits 130 with the line to resume by, and every
CLI process it started is stopped and reaped:

- mid fan-out (three agents running, the plain output a user reads at a terminal): no
  request reaches the model after the signal;
- with ``--json``, one agent running and five waiting in the spawn gate
  (``--max-concurrent-agents 1``): the last line is still ``finished``, naming every call,
  the running one ``stopped``, the queued ones ``rejected``.

The six runs share nothing and go three side by side.
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

SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
#: a plain run's fan-out: every agent runs when the signal comes
_FANNED = 3
#: a ``--json`` run's calls: one runs when the signal comes, the others wait in the gate
_QUEUED_CALLS = 6


@dataclass(frozen=True)
class StoppedRun:
    """One ``teamlead ask`` stopped by a signal once its agents ran."""

    started: int  #: the agents that had reached the model when the signal came
    returncode: int | None
    out: str
    err: str
    unreaped: list[int]  #: CLI processes that ran at the signal and were not reaped
    left: list[list[str]]  #: the command lines of CLI processes still there afterwards
    late: list[str]  #: the roles of requests that came after the signal


def _stopped_run(key: tuple[str, bool], root: Path) -> StoppedRun:
    stop, as_json = key
    state = root / "s"
    running_at_once = 1 if as_json else _FANNED
    script = FanOut.of(_QUEUED_CALLS if as_json else _FANNED, delays=60.0)
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=state)
        args = ["--max-concurrent-agents", "1", "--json"] if as_json else []
        proc = start_ask(claude, *args, base=isolated_env(root))
        running: list[psutil.Process] = []
        signalled = time.monotonic()
        try:
            fanned_out = poll(
                lambda: len(server.recorded("subagent")) == running_at_once, within_s=60
            )
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
        # every CLI process is gone, so no request can still come
        late = [str(r.request.role) for r in server.recorded() if r.started > signalled]
    return StoppedRun(started, proc.returncode, out, err, [p.pid for p in alive], left, late)


RUNS = [(stop, as_json) for as_json in (False, True) for stop in SIGNALS]


def _name(key: tuple[str, bool]) -> str:
    return f"{key[0]}-{'json' if key[1] else 'plain'}"


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], StoppedRun]:
    """One run per signal and output, three side by side: each its own process, CLI state
    and scripted model."""
    return side_by_side(_stopped_run, RUNS, tmp_path_factory, at_once=3, root_name=_name)


@pytest.mark.parametrize("key", RUNS, ids=[_name(key) for key in RUNS])
def test_a_stop_signal_to_ask_exits_130_and_leaves_no_cli_process(
    stopped_runs: dict[tuple[str, bool], StoppedRun], key: tuple[str, bool]
) -> None:
    run = stopped_runs[key]
    _, as_json = key
    # the agents were running, and no more of them than the cap lets run
    assert run.started == (1 if as_json else _FANNED), f"{run.started} agent(s) had started"
    assert run.returncode == 130, run.err
    assert "Traceback" not in run.err, run.err
    assert "interrupted; resume with: teamlead resume " in run.err
    assert "Unknown child process" not in run.err  # the stop reaps nothing asyncio owns
    assert run.unreaped == []  # every CLI process that ran at the signal was reaped
    assert run.left == []


@pytest.mark.parametrize("key", RUNS, ids=[_name(key) for key in RUNS])
def test_a_stop_signal_mid_fan_out_lets_no_request_reach_the_model(
    stopped_runs: dict[tuple[str, bool], StoppedRun], key: tuple[str, bool]
) -> None:
    # with calls queued in the gate too (the json runs): their refusal is held till the
    # CLI is ended, or the CLI would take it to the lead in one more request
    run = stopped_runs[key]
    assert run.started == (1 if key[1] else _FANNED), "no fan-out"
    assert run.late == []


@pytest.mark.parametrize("stop", SIGNALS)
def test_ask_json_ends_with_finished_naming_every_call_when_stopped_by_a_signal(
    stopped_runs: dict[tuple[str, bool], StoppedRun], stop: str
) -> None:
    run = stopped_runs[(stop, True)]
    assert run.started == 1, "no agent started, or more than the cap"
    assert run.returncode == 130, run.err
    lines = [json.loads(line) for line in run.out.splitlines()]
    assert "queued" in [r.get("outcome") for r in lines]  # the others waited in the gate
    done = lines[-1]
    assert done["type"] == "finished", lines[-3:]
    # the lead's turn waited on its queued calls' hooks: it never answered
    assert (done["reason"], done["status"]) == ("interrupted", "failed"), done
    tasks = done["tasks"]
    assert [t["status"] for t in tasks if t["kind"] == "task"] == ["stopped"], tasks
    queued = [t for t in tasks if t["kind"] == "call"]
    assert len(queued) == _QUEUED_CALLS - 1, tasks
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
