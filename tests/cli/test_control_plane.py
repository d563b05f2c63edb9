"""Runs seen and steered from outside, on the real CLI offline: ``teamlead ask`` runs in a
subprocess against the scripted server, and ``teamlead ps``, ``pause``, ``unpause``,
``amend``, ``stop`` and ``watch`` reach it from other processes, as a user types them.

Each scenario is one run in a world of its own (its runtime directory, CLI state and
scripted model), set up once per module; the scenarios run side by side, and each test
reads what its scenario recorded. Every wait polls with a deadline; the one check that
something does *not* happen (no request while paused) is read off the scripted server's
own timestamps, at a moment the pause is proven to be holding something.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

import teamlead
from teamlead._control.endpoint import call
from teamlead._control.registry import Registry
from teamlead._run.process import ProcessState
from teamlead.events import Finished, RunAmended, SpawnDecided
from teamlead.policy import SpawnPolicy
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in

from ..isolated import isolated_env, run_to_the_end, side_by_side
from ..polling import poll
from .conftest import TEAMLEAD, OfflineFactory, ask_env, cli_processes, end_ask, start_ask

pytestmark = [pytest.mark.cli, pytest.mark.slow]

HOSTILE = "Investigate \x1b]0;pwned\x07 the parts."


@dataclass
class World:
    """One scenario's world: a scripted server, the CLI's state, the environment."""

    root: Path
    server: ScriptedServer
    claude: OfflineClaude
    env: dict[str, str]
    proc: subprocess.Popen[str] | None = None

    @classmethod
    def make(cls, root: Path, script: Any) -> World:
        server = ScriptedServer(script).start()
        claude = OfflineClaude(server.base_url, state_dir=root / "s")
        return cls(root, server, claude, ask_env(claude, isolated_env(root)))

    def ask(self, prompt: str, *args: str) -> subprocess.Popen[str]:
        self.proc = start_ask(self.claude, *args, "--json", prompt=prompt, base=self.env)
        return self.proc

    def verb(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_to_the_end([*TEAMLEAD, *args], timeout=60, env=self.env)

    def ps(self) -> list[dict[str, Any]]:
        done = self.verb("ps", "--json")
        rows = json.loads(done.stdout) if done.returncode == 0 else []
        assert isinstance(rows, list)
        return rows

    def listed(self, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """The run's ``ps`` row once ``check`` holds for it (``None``: not within 90 s)."""
        proc = self.proc
        return poll(
            lambda: next((r for r in self.ps() if check(r)), None),
            within_s=90,
            every_s=0.2,
            unless=lambda: proc is not None and proc.poll() is not None,
        )

    def end(self, timeout: float = 60) -> tuple[int | None, str, str]:
        assert self.proc is not None
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=10)
            err += f"\n(no end within {timeout} s)"
        return self.proc.returncode, out, err

    def close(self) -> None:
        end_ask(self.proc, self.root / "s")
        self.server.stop()


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _agents(row: dict[str, Any]) -> tuple[int, int, int, int]:
    """Running, queued, done, failed; -1 for a count the row lacks (a run that did not
    answer ``ps`` in time on a busy machine is listed ``unreachable``, without counts)."""
    a = row["agents"]
    counts = [a[key] for key in ("running", "queued", "done", "failed")]
    running, queued, done, failed = (-1 if c is None else c for c in counts)
    return running, queued, done, failed


# -- scenario: listed, watched and amended -----------------------------------------------
@dataclass
class Steered:
    listed: dict[str, Any] | None = None
    table: str = ""
    amended: subprocess.CompletedProcess[str] | None = None
    returncode: int | None = None
    out: str = ""
    err: str = ""
    watch_json: tuple[int | None, str, str] = (None, "", "")
    watch_text: tuple[int | None, str, str] = (None, "", "")
    max_agents: int = 0
    after: list[dict[str, Any]] = field(default_factory=list)
    stop_after: subprocess.CompletedProcess[str] | None = None


def _steered(root: Path) -> Steered:
    """Four agents under a cap of one; ps lists it, two watchers follow it from other
    processes, and ``amend --cap 3`` raises the cap while three wait."""
    seen = Steered()
    world = World.make(root, FanOut.of(4, delays=5.0))  # room for ps, ps and amend, loaded
    try:
        world.ask(HOSTILE, "--max-concurrent-agents", "1")
        seen.listed = world.listed(lambda r: _agents(r)[:2] == (1, 3))
        if seen.listed is None:
            seen.returncode, seen.out, seen.err = world.end(5)
            return seen
        seen.table = world.verb("ps").stdout
        run, session = seen.listed["run"], seen.listed["session_id"]
        watchers = [
            subprocess.Popen(
                [*TEAMLEAD, "watch", *args],
                env=world.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for args in ([run[:6], "--json"], [session])
        ]
        seen.amended = world.verb("amend", run, "--cap", "3")
        seen.returncode, seen.out, seen.err = world.end(120)
        results = []
        for watcher in watchers:
            out, err = watcher.communicate(timeout=60)
            results.append((watcher.returncode, out, err))
        seen.watch_json, seen.watch_text = results
        seen.max_agents = world.server.max_concurrent_agents()
        seen.after = world.ps()
        seen.stop_after = world.verb("stop", run)
        return seen
    finally:
        world.close()


# -- scenario: paused twice ------------------------------------------------------------
@dataclass
class Paused:
    first: dict[str, Any] | None = None  #: ps while the gate held the third agent
    second: dict[str, Any] | None = None  #: ps while the relay held the lead's request
    late_requests: list[str] = field(default_factory=list)  #: started while paused
    unfinished_in_flight: int = -1  #: requests in flight at a pause that never finished
    verbs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)
    again: subprocess.CompletedProcess[str] | None = None
    returncode: int | None = None
    out: str = ""
    err: str = ""


def _paused(root: Path) -> Paused:
    """Three agents of 3 s under a cap of two. Paused while the first two stream: they
    finish, and the gate holds the third. Unpaused, the third runs; paused again while it
    streams: it finishes, and the relay holds the lead's next request. Unpaused, the run
    completes."""
    seen = Paused()
    world = World.make(root, FanOut.of(3, delays=3.0))
    server = world.server
    try:
        world.ask("Investigate.", "--max-concurrent-agents", "2")

        def streaming(n: int) -> bool:
            subagents = server.recorded("subagent")
            return len(subagents) == n and sum(r.finished is None for r in subagents) >= 1

        def pause_now() -> tuple[float, list[Any]]:
            verb = world.verb("pause", run)
            seen.verbs.append(verb)
            return time.monotonic(), [r for r in server.recorded() if r.finished is None]

        row = world.listed(lambda r: _agents(r)[:2] == (2, 1))
        if row is None or not poll(lambda: streaming(2), within_s=30):
            seen.returncode, seen.out, seen.err = world.end(5)
            return seen
        run = row["run"]
        paused_at, in_flight = pause_now()
        seen.again = world.verb("pause", run)
        seen.first = world.listed(lambda r: r["status"] == "paused" and _agents(r)[:3] == (0, 1, 2))
        late = [r for r in server.recorded() if r.started > paused_at]
        seen.verbs.append(world.verb("unpause", run))
        if not poll(lambda: streaming(3), within_s=30):
            seen.returncode, seen.out, seen.err = world.end(5)
            return seen
        paused_again, more_in_flight = pause_now()
        seen.second = world.listed(lambda r: (r["held"] or 0) >= 1 and _agents(r)[2] == 3)
        late += [r for r in server.recorded() if r.started > paused_again]
        seen.unfinished_in_flight = sum(r.finished is None for r in [*in_flight, *more_in_flight])
        seen.late_requests = [f"{r.role}: {r.request.first_user_text[:60]}" for r in late]
        seen.verbs.append(world.verb("unpause", run))
        seen.returncode, seen.out, seen.err = world.end(120)
        return seen
    finally:
        world.close()


# -- scenario: stopped, gracefully or now ----------------------------------------------
@dataclass
class Stopped:
    verb: subprocess.CompletedProcess[str] | None = None
    returncode: int | None = None
    out: str = ""
    err: str = ""
    reaped: bool = False


def _stopped(how: str, root: Path) -> Stopped:
    """Three agents; the first answers at once, the others would take a minute; once the
    first is done, ``teamlead stop`` (or ``stop --now``) ends the run."""
    seen = Stopped()
    world = World.make(root, FanOut.of(3, delays=[0.3, 60.0, 60.0]))
    try:
        world.ask("Investigate.")
        row = world.listed(lambda r: _agents(r)[2] >= 1)
        if row is None:
            seen.returncode, seen.out, seen.err = world.end(5)
            return seen
        seen.verb = world.verb("stop", row["run"], *(["--now"] if how == "now" else []))
        seen.returncode, seen.out, seen.err = world.end(30)  # the agents had a minute left
        seen.reaped = bool(poll(lambda: not cli_processes(root / "s"), within_s=15))
        return seen
    finally:
        world.close()


# -- scenario: killed ------------------------------------------------------------------
@dataclass
class Killed:
    run: str = ""
    entry_existed: bool = False
    stop: subprocess.CompletedProcess[str] | None = None
    entry_left: bool = True
    after: list[dict[str, Any]] = field(default_factory=lambda: [{}])


def _killed(root: Path) -> Killed:
    """A run killed with SIGKILL, which leaves its entry and socket behind."""
    seen = Killed()
    world = World.make(root, FanOut.of(2, delays=60.0))
    try:
        proc = world.ask("Investigate.")
        row = world.listed(lambda r: _agents(r)[0] >= 1)
        if row is None:
            return seen
        seen.run = row["run"]
        entry = Path(world.env["TEAMLEAD_RUNTIME_DIR"]) / f"{seen.run}.json"
        seen.entry_existed = entry.exists()
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)  # its pipes closed too
        seen.stop = world.verb("stop", seen.run)
        seen.entry_left = entry.exists() or (entry.with_suffix(".sock")).exists()
        seen.after = world.ps()
        return seen
    finally:
        world.close()


SCENARIOS: dict[str, Callable[[Path], Any]] = {
    "steered": _steered,
    "paused": _paused,
    "stopped": lambda root: _stopped("graceful", root),
    "stopped-now": lambda root: _stopped("now", root),
    "killed": _killed,
}


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every scenario, three at a time, each in a world of its own."""
    return side_by_side(
        lambda name, root: SCENARIOS[name](root), SCENARIOS, tmp_path_factory, at_once=3
    )


# -- ps ------------------------------------------------------------------------------------
def test_ps_lists_a_running_ask_with_its_agents(seen: dict[str, Any]) -> None:
    steered: Steered = seen["steered"]
    row = steered.listed
    assert row is not None, steered.err
    assert row["status"] == "running" and row["pid"] > 0 and row["version"] == 1
    assert len(row["run"]) == 12 and row["session_id"]
    assert _agents(row) == (1, 3, 0, 0) and row["cap"] == 1 and row["held"] == 0
    assert row["requests"] >= 1 and row["tokens"] is not None
    head, line = steered.table.splitlines()[:2]
    assert head.split()[:4] == ["RUN", "SESSION", "PID", "STATUS"]
    assert line.startswith(row["run"]) and " 1/3/0/0 " in line


def test_ps_renders_a_hostile_prompt_as_escaped_text(seen: dict[str, Any]) -> None:
    steered: Steered = seen["steered"]
    assert steered.listed is not None and steered.listed["command"].startswith("teamlead ask ")
    assert "\x1b]0;pwned\x07" in steered.listed["command"]  # JSON keeps it as it was
    assert "\x1b" not in steered.table and "\x07" not in steered.table
    assert "Investigate \\x1b]0;pwned\\x07 the parts." in steered.table


# -- amend -------------------------------------------------------------------------------
def test_amend_cap_from_outside_changes_the_level_the_server_sees(seen: dict[str, Any]) -> None:
    steered: Steered = seen["steered"]
    assert steered.amended is not None and steered.amended.returncode == 0, steered.err
    assert steered.amended.stdout.strip().endswith(": cap 1 -> 3")
    assert steered.returncode == 0, steered.err
    lines = _lines(steered.out)
    (amended,) = [r for r in lines if r["type"] == "run_amended"]
    assert (amended["previous_cap"], amended["cap"]) == (1, 3)
    assert steered.max_agents == 3  # one at a time until the amend, then three
    done = lines[-1]
    assert done["type"] == "finished" and done["status"] == "completed"
    assert sorted(findings_in(done["result"])) == [f"agent-{i}" for i in range(1, 5)]


# -- watch -------------------------------------------------------------------------------
def test_watch_streams_the_runs_events_to_another_process(seen: dict[str, Any]) -> None:
    steered: Steered = seen["steered"]
    code, out, err = steered.watch_json
    assert code == 0, err
    assert out.splitlines() == steered.out.splitlines()  # every line ask --json wrote
    code, out, err = steered.watch_text
    assert code == 0, err
    lines = out.splitlines()
    # the words of ask's progress lines, one line per event, never a record dumped raw
    assert re.match(r"finished: completed after \d resume\(s\), \$\d+\.\d{4} ", lines[-1])
    assert "list-price estimate for a scripted model, nothing charged; relay:" in lines[-1]
    assert any(re.fullmatch(r"queued 'agent-\d': 1 of 1 running, position \d", x) for x in lines)
    assert any(re.fullmatch(r"task started: agent-\d \[general-purpose\]", x) for x in lines)
    assert any(re.fullmatch(r"task completed: agent-\d", line) for line in lines)
    assert any(re.fullmatch(r"usage of agent \w{12}: 1 request\(s\), \d+ tokens", x) for x in lines)
    assert "lead: [Agent, Agent, Agent, Agent]" in lines  # a lead turn of calls, no text
    assert not [line for line in lines if "{" in line or line.endswith("...")]
    assert "\x1b" not in out


def test_a_finished_run_leaves_the_registry(seen: dict[str, Any]) -> None:
    steered: Steered = seen["steered"]
    assert steered.after == []
    assert steered.stop_after is not None and steered.stop_after.returncode == 4
    assert "has already finished: `teamlead show" in steered.stop_after.stderr


# -- pause -------------------------------------------------------------------------------
def test_pause_holds_new_agents_and_requests_and_unpause_lets_the_run_finish(
    seen: dict[str, Any],
) -> None:
    paused: Paused = seen["paused"]
    assert [v.returncode for v in paused.verbs] == [0, 0, 0, 0], paused.err
    assert paused.verbs[0].stdout.startswith("paused run ")
    assert "deadline keeps running" in paused.verbs[0].stdout
    assert paused.first is not None, "the gate did not hold the third agent while paused"
    assert paused.second is not None, "the relay did not hold the lead's request"
    assert paused.second["status"] == "paused" and paused.second["held"] >= 1
    assert paused.late_requests == []  # the server saw no new request while paused
    assert paused.unfinished_in_flight == 0  # what streamed at the pause finished
    assert paused.returncode == 0, paused.err
    done = _lines(paused.out)[-1]
    assert done["type"] == "finished" and done["status"] == "completed"
    assert sorted(findings_in(done["result"])) == ["agent-1", "agent-2", "agent-3"]


def test_pausing_a_paused_run_is_refused_in_one_line(seen: dict[str, Any]) -> None:
    paused: Paused = seen["paused"]
    assert paused.again is not None and paused.again.returncode == 1
    (line,) = paused.again.stderr.strip().splitlines()
    assert line.endswith("is already paused")


# -- stop ----------------------------------------------------------------------------------
def test_stop_wraps_up_from_the_finished_work_and_ends_with_finished(
    seen: dict[str, Any],
) -> None:
    stopped: Stopped = seen["stopped"]
    assert stopped.verb is not None and stopped.verb.returncode == 0, stopped.err
    assert stopped.verb.stdout.startswith("stopping run ")
    assert stopped.returncode == 3, stopped.err  # partial
    lines = _lines(stopped.out)
    assert any(r["type"] == "resuming" and r["kind"] == "wrap_up" for r in lines)
    done = lines[-1]
    assert done["type"] == "finished" and done["status"] == "partial"
    assert done["reason"] == "interrupted"
    assert any("teamlead stop" in reason for reason in done["reasons"])
    rows = {t["description"]: (t["status"], t["disposition"]) for t in done["tasks"]}
    assert rows == {
        "agent-1": ("completed", "included"),
        "agent-2": ("stopped", "failed"),
        "agent-3": ("stopped", "failed"),
    }
    assert stopped.reaped


def test_stop_now_skips_the_wrap_up(seen: dict[str, Any]) -> None:
    stopped: Stopped = seen["stopped-now"]
    assert stopped.verb is not None and stopped.verb.returncode == 0, stopped.err
    assert stopped.returncode == 3, stopped.err
    lines = _lines(stopped.out)
    assert not any(r["type"] == "resuming" for r in lines)
    done = lines[-1]
    assert done["type"] == "finished" and done["reason"] == "interrupted"
    assert [t["status"] for t in done["tasks"]].count("stopped") == 2
    assert stopped.reaped


# -- faults --------------------------------------------------------------------------------
def test_a_run_killed_with_sigkill_is_recognised_and_pruned(seen: dict[str, Any]) -> None:
    killed: Killed = seen["killed"]
    assert killed.run and killed.entry_existed
    assert killed.stop is not None and killed.stop.returncode == 4
    assert killed.stop.stderr.strip() == f"teamlead: error: run '{killed.run}' has already finished"
    assert not killed.entry_left  # its entry and socket are gone
    assert killed.after == []


# -- the library -------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_library_run_without_a_control_is_registered_and_amended_from_outside(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    server, claude = offline(FanOut.of(3, delays=1.0))
    world = ProcessState(runtime_dir=tmp_path / "rt")
    policy = teamlead.Policy(wait_s=5, deadline_s=150, spawn=SpawnPolicy(max_concurrent_agents=1))
    items: list[Any] = []
    status: dict[str, Any] = {}
    answer: dict[str, Any] = {}
    left_at_finished: list[Any] = [None]
    run = teamlead.run("Investigate.", claude.options(), policy=policy, process=world)
    with anyio.fail_after(150):
        async for item in run:
            items.append(item)
            if isinstance(item, Finished):
                left_at_finished[0] = Registry(tmp_path / "rt").listing().live
            if isinstance(item, SpawnDecided) and item.outcome == "queued" and not answer:
                (entry,) = Registry(tmp_path / "rt").listing().live
                assert entry.pid == os.getpid()
                status.update(await anyio.to_thread.run_sync(call, entry.socket, {"op": "status"}))
                amend = {"op": "amend", "cap": 2}
                answer.update(await anyio.to_thread.run_sync(call, entry.socket, amend))
    assert status["status"] == "running" and status["cap"] == 1
    assert answer["ok"] and answer["message"].endswith("cap 1 -> 2")
    amended = [i for i in items if isinstance(i, RunAmended)]
    assert [(a.previous_cap, a.cap) for a in amended] == [(1, 2)]
    done = items[-1]
    assert isinstance(done, Finished) and done.status == "completed", done.reasons
    assert left_at_finished == [[]]  # it left the registry before Finished came
    assert server.max_concurrent_agents() == 2
