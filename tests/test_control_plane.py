"""The registry of live runs and their control endpoints, in process: no CLI runs here.

The registry is files in the test's own runtime directory (the autouse isolation sets
``TEAMLEAD_RUNTIME_DIR``), so entries written here stand for runs of other processes;
an endpoint is served on the test's own event loop with a steering that records what it
was asked. The verbs are driven through ``CliRunner``, as a user types them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import select
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import psutil
import pytest
from claude_agent_sdk import ClaudeAgentOptions
from click.testing import CliRunner

from teamlead._cli import main, runs
from teamlead._cli.commands import COMMANDS
from teamlead._control.endpoint import (
    Endpoint,
    WatchFeed,
    _checked,
    _send,
    call,
    follow,
    parse_request,
)
from teamlead._control.registered import _Registered
from teamlead._control.registry import Registry, parse_entry, process_registry, runtime_dir
from teamlead._control.steering import RunSteering
from teamlead._gate.pause import Pause
from teamlead._history import History, RunRecord
from teamlead._run.process import ProcessState
from teamlead._run.state import new_run
from teamlead.control import RunControl
from teamlead.errors import ControlError, NoSuchRun
from teamlead.policy import Policy, SpawnPolicy
from teamlead.testing import FakeClock

from .polling import apoll

RUNTIME = "TEAMLEAD_RUNTIME_DIR"


def _dir() -> Path:
    folder = Path(os.environ[RUNTIME])
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _entry(run: str, **fields: Any) -> Path:
    """Write a registry entry for run ``run`` (by default: this process, alive)."""
    folder = _dir()
    data = {
        "version": 1,
        "run": run,
        "session_id": None,
        "pid": os.getpid(),
        "pid_started": psutil.Process().create_time(),
        "uid": os.getuid(),
        "command": "teamlead ask hi",
        "mode": "query",
        "started": 1_700_000_000.0,
        "socket": str(folder / f"{run}.sock"),
        **fields,
    }
    path = folder / f"{run}.json"
    path.write_text(json.dumps(data))
    return path


def _stale_socket(path: Path) -> None:
    """A socket file nobody listens on: bound, then closed without unlinking."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _gone_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert done.returncode == 0
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# -- the registry -------------------------------------------------------------------------
def test_the_runtime_directory_comes_from_the_variable_then_xdg_then_the_temp_dir() -> None:
    assert runtime_dir({RUNTIME: "/x/runs"}) == Path("/x/runs")
    assert runtime_dir({"XDG_RUNTIME_DIR": "/run/user/7"}) == Path("/run/user/7/teamlead")
    assert runtime_dir({"XDG_RUNTIME_DIR": "relative"}).name == f"teamlead-{os.getuid()}"


def test_a_run_registers_with_private_modes_and_leaves_no_trace() -> None:
    registry = Registry()
    registration = registry.register(mode="query", command="teamlead ask hi")
    registration.write()
    folder = _dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(registration.entry.path.stat().st_mode) == 0o600
    (live,) = registry.listing().live
    assert live.run == registration.run and live.pid == os.getpid()
    registration.update(session_id="sess-1234")
    assert registry.find("sess-12").run == registration.run  # a session id prefix names it
    registration.remove()
    assert registry.listing().live == [] and list(folder.iterdir()) == []


def test_a_run_whose_own_start_cannot_be_read_is_judged_by_its_pid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("teamlead._control.registry.started_here", lambda: None)
    registry = Registry()
    registry.register(mode="query", command="teamlead ask hi").write()
    (live,) = registry.listing().live  # not pruned as dead: its pid runs
    assert live.pid == os.getpid()
    gone = _entry("aaaaaaaaaaaa", pid=_gone_pid(), pid_started=None)
    assert [e.run for e in registry.listing().dead] == ["aaaaaaaaaaaa"] and not gone.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat's boot time")
def test_a_live_run_stays_live_when_the_boot_time_moves_by_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel gives the boot time in whole seconds, and a step of the wall clock can
    move it by one between the run's read of its own start and a reader's."""
    registry = Registry()
    registry.register(mode="query", command="teamlead ask hi").write()
    booted = psutil.boot_time()
    monkeypatch.setattr("psutil._pslinux.boot_time", lambda: booted + 1)
    assert len(registry.listing().live) == 1


@pytest.mark.parametrize(
    ("mode", "shown"),
    [
        pytest.param(0o1777, "1777", id="sticky"),
        pytest.param(0o777, "777", id="open"),
        pytest.param(0o770, "770", id="group-writable"),
    ],
)
def test_a_shared_runtime_directory_is_refused_in_one_line_and_left_untouched(
    tmp_path: Path, mode: int, shown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    theirs = shared / "someone-elses.json"
    theirs.write_text("theirs")
    theirs.chmod(0o644)
    with pytest.raises(ControlError) as refused:
        Registry(shared).register(mode="query", command="x")
    assert str(refused.value) == (
        f"the runtime directory {str(shared)!r} is shared (mode {shown}), and teamlead "
        f"changes nothing it did not create: set TEAMLEAD_RUNTIME_DIR to a private one, such "
        f"as {str(Path(tempfile.gettempdir()) / f'teamlead-{os.getuid()}')!r}"
    )
    assert stat.S_IMODE(shared.stat().st_mode) == mode
    assert [p.name for p in shared.iterdir()] == ["someone-elses.json"]
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o644 and theirs.read_text() == "theirs"


def test_a_runtime_directory_of_another_user_or_a_symlink_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    if os.getuid() == 0:  # as root, a directory handed to another user
        os.chown(theirs, 65534, 65534)
        with pytest.raises(ControlError, match="is another user's, and teamlead changes"):
            Registry(theirs).register(mode="query", command="x")
        assert theirs.stat().st_uid == 65534 and stat.S_IMODE(theirs.stat().st_mode) == 0o700
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(ControlError, match="is not a directory"):
        Registry(link).register(mode="query", command="x")


def test_an_own_runtime_directory_others_can_only_read_is_used_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    folder.chmod(0o755)
    registration = Registry(folder).register(mode="query", command="x")
    registration.write()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # not made by teamlead: unchanged
    assert stat.S_IMODE(registration.entry.path.stat().st_mode) == 0o600
    registration.remove()


def test_a_too_long_runtime_directory_puts_the_socket_in_a_short_private_folder(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    registration = Registry(deep).register(mode="query", command="x")
    assert registration.entry.path.parent == deep  # the entry stays where readers look
    assert len(os.fsencode(registration.socket)) <= 103
    assert stat.S_IMODE(registration.socket.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize(
    "raw",
    [
        b"x" * 70_000,
        b"not json",
        b"[1, 2]",
        b'{"run": "aaaaaaaaaaaa", "pid": "12", "socket": "s", "started": 1, "pid_started": 1}',
        b'{"run": "aaaaaaaaaaaa", "pid": true, "socket": "s", "started": 1, "pid_started": 1}',
        b'{"run": "../../etc/pw", "pid": 1, "socket": "s", "started": 1, "pid_started": 1}',
        b'{"run": "aaaaaaaaaaaa", "pid": 1, "socket": "s", "started": NaN, "pid_started": 1}',
        b"[" * 100_000,
        b'{"run": "aaaaaaaaaaaa", "pid": 1, "socket": "s", "started": 1' + b"0" * 400 + b", "
        b'"pid_started": 1}',
        b'{"run": "aaaaaaaaaaaa", "pid": 1, "socket": "s", "started": Infinity, "pid_started": 1}',
        b'{"run": "aaaaaaaaaaaa", "pid": 1, "socket": "s", "started": 1, "pid_started": -1e999}',
    ],
    ids=[
        "huge",
        "garbage",
        "array",
        "pid-text",
        "pid-bool",
        "bad-id",
        "nan",
        "deep",
        "no-float",
        "infinite",
        "past-a-float",
    ],
)
def test_a_malformed_entry_is_not_an_entry(raw: bytes) -> None:
    assert parse_entry(raw, Path("aaaaaaaaaaaa.json")) is None


def _plant(kind: str, path: Path, elsewhere: Path) -> None:
    """A file no run wrote, of ``kind``, where an entry would be."""
    if kind == "garbage":
        path.write_text("{broken")
    elif kind == "huge":
        path.write_text('{"run": "' + "a" * 5_000_000 + '"}')
    elif kind == "deep":
        path.write_text("[" * 100_000)
    elif kind == "symlink":
        elsewhere.write_text("{}")
        path.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(path)  # a reader that opened it would wait for a writer for ever
    elif kind == "directory":
        path.mkdir()


@pytest.mark.parametrize("kind", ["garbage", "huge", "deep", "symlink", "fifo", "directory"])
def test_hostile_files_in_the_runtime_directory_are_skipped(kind: str, tmp_path: Path) -> None:
    folder = _dir()
    _plant(kind, folder / "bbbbbbbbbbbb.json", tmp_path / "elsewhere.json")
    _entry("eeeeeeeeeeee", extra_field={"kept": True})
    (live,) = Registry().listing().live
    assert live.run == "eeeeeeeeeeee" and live.extra == {"extra_field": {"kept": True}}
    _stale_socket(folder / "eeeeeeeeeeee.sock")
    result = _invoke("ps", "--json")
    assert result.exit_code == 0, result.output
    assert [row["run"] for row in json.loads(result.output)] == ["eeeeeeeeeeee"]


_VERBS = [
    ["stop"],
    ["stop", "--now"],
    ["pause"],
    ["unpause"],
    ["amend", "--cap", "2"],
    ["watch"],
    ["ps"],
    ["ps", "--all"],
]


@pytest.mark.parametrize("socket_kind", ["stale socket", "no socket", "regular file"])
def test_a_forged_entry_naming_an_unrelated_live_process_never_signals_it(
    socket_kind: str, tmp_path: Path
) -> None:
    """An entry names a live process that is no run (its true pid and start time): no
    verb sends it a signal (a ``sleep`` dies or stops on any), each says in one line that
    the run does not answer."""
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        folder = _dir()
        target = folder / "aaaaaaaaaaaa.sock"
        if socket_kind == "stale socket":
            _stale_socket(target)
        elif socket_kind == "regular file":
            target.write_text("not a socket")
        _entry(
            "aaaaaaaaaaaa",
            pid=sleeper.pid,
            pid_started=psutil.Process(sleeper.pid).create_time(),
            command="teamlead ask forged",
        )
        for verb in _VERBS:
            result = _invoke(*verb, *([] if verb[0] == "ps" else ["aaaa"]))
            if verb[0] == "ps":
                assert result.exit_code == 0, result.output
                assert "unreachable" in result.output, result.output
            else:
                assert result.exit_code == 1, (verb, result.output)
                (line,) = result.output.strip().splitlines()
                assert "the run does not answer" in line, line
            assert sleeper.poll() is None, verb  # alive
            assert psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED, verb
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)


def test_a_dead_runs_entry_and_its_socket_are_pruned_once_shown_by_ps_all() -> None:
    gone = _entry("aaaaaaaaaaaa", pid=_gone_pid())
    reused = _entry("bbbbbbbbbbbb", pid_started=psutil.Process().create_time() - 1000)
    _stale_socket(_dir() / "aaaaaaaaaaaa.sock")
    result = _invoke("ps", "--all", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert sorted((r["run"], r["status"]) for r in rows) == [
        ("aaaaaaaaaaaa", "dead"),
        ("bbbbbbbbbbbb", "dead"),  # its pid runs a process that started at another time
    ]
    assert not gone.exists() and not reused.exists()
    assert list(_dir().iterdir()) == []
    assert json.loads(_invoke("ps", "--all", "--json").output) == []


def test_a_stale_socket_of_a_live_process_shows_unreachable_and_stop_says_so() -> None:
    _entry("aaaaaaaaaaaa")
    _stale_socket(_dir() / "aaaaaaaaaaaa.sock")
    (row,) = json.loads(_invoke("ps", "--json").output)
    assert row["status"] == "unreachable" and row["pid"] == os.getpid()
    result = _invoke("stop", "aaaa")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("teamlead: error: run aaaaaaaaaaaa: the run does not answer")


@pytest.mark.parametrize("verb", [["stop", "aaaa"], ["watch", "aaaa"]])
def test_a_verb_racing_the_runs_end_says_it_finished(
    verb: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run ends between the entry's read and the request: its entry and socket are
    gone, while its process (a library's, an experiment's) goes on."""
    entry = _entry("aaaaaaaaaaaa")
    ask, watch = runs.call, runs.follow

    def ended(real: Any) -> Any:
        def late(*args: Any, **kwargs: Any) -> Any:
            entry.unlink()
            return real(*args, **kwargs)

        return late

    monkeypatch.setattr(runs, "call", ended(ask))
    monkeypatch.setattr(runs, "follow", ended(watch))
    result = _invoke(*verb)
    assert result.exit_code == 4, result.output
    assert result.output.strip() == "teamlead: error: run aaaaaaaaaaaa has already finished"


def test_stop_all_says_a_run_that_ended_meanwhile_has_finished_and_exits_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``stop --all`` wants every run stopped: one that ended on its own between the
    listing and the request is so, not a refusal."""
    entry = _entry("aaaaaaaaaaaa")
    ask = runs.call

    def late(*args: Any, **kwargs: Any) -> Any:
        entry.unlink()
        return ask(*args, **kwargs)

    monkeypatch.setattr(runs, "call", late)
    result = _invoke("stop", "--all")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "run aaaaaaaaaaaa has already finished"


def test_a_prefix_of_two_runs_is_ambiguous_and_one_line() -> None:
    _entry("abc111111111")
    _entry("abc222222222", session_id="ffff0000-1")
    result = _invoke("pause", "abc")
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert "'abc' names 2 runs (abc111111111, abc222222222): give more of the id" in line
    assert Registry().find("ffff").run == "abc222222222"


@pytest.mark.parametrize("verb", [["stop"], ["pause"], ["unpause"], ["watch"], ["amend"]])
def test_a_verb_on_no_such_run_exits_4_with_one_line(verb: list[str]) -> None:
    args = [*verb, "0123456789ab", *(["--cap", "2"] if verb == ["amend"] else [])]
    result = _invoke(*args)
    assert result.exit_code == 4, result.output
    assert (
        result.output.strip() == "teamlead: error: no such run: '0123456789ab' (see `teamlead ps`)"
    )


def test_ps_says_so_when_no_run_could_register_in_the_runtime_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime directory that cannot be made (here: a file stands in its path) is one
    error line with the fix, not an empty table that looks like no run is going."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(RUNTIME, str(tmp_path / "file" / "runs"))
    result = _invoke("ps")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"teamlead: error: cannot use the runtime directory '{tmp_path / 'file' / 'runs'}': "
        "Not a directory; set TEAMLEAD_RUNTIME_DIR to a directory of yours"
    ]


def test_a_finished_runs_entry_says_finished() -> None:
    _entry("aaaaaaaaaaaa", pid=_gone_pid())
    result = _invoke("pause", "aaaaaaaaaaaa")
    assert result.exit_code == 4
    assert result.output.strip() == "teamlead: error: run 'aaaaaaaaaaaa' has already finished"


def test_ps_escapes_a_hostile_command_and_keeps_it_raw_in_json() -> None:
    hostile = "teamlead ask \x1b]0;pwned\x07\x1b[2J\u202eevil"
    _entry("aaaaaaaaaaaa", command=hostile)
    _stale_socket(_dir() / "aaaaaaaaaaaa.sock")
    text = _invoke("ps").output
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil" in text
    (row,) = json.loads(_invoke("ps", "--json").output)
    assert row["command"] == hostile


@pytest.mark.parametrize(
    ("started", "shown"),
    [
        (-1e308, "-"),
        (1e308, "-"),  # in the future
        (-1.0, "-"),
        ("three days", "3d ago"),
        ("a second ahead", "0s ago"),  # clock skew between two processes' reads
    ],
)
def test_ps_formats_absurd_start_times_sanely(started: float | str, shown: str) -> None:
    now = time.time()
    at = {"three days": now - 3 * 86400 - 600, "a second ahead": now + 1}
    _entry("aaaaaaaaaaaa", started=at.get(str(started), started))
    _stale_socket(_dir() / "aaaaaaaaaaaa.sock")
    result = _invoke("ps")
    assert result.exit_code == 0, result.output
    head, row = result.output.splitlines()
    cells = row.split()
    column = head.split().index("STARTED")
    assert " ".join(cells[column : column + len(shown.split())]) == shown, row
    assert len(row) < 200


def test_a_state_without_the_registry_registers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert process_registry(ProcessState()) is not None
    assert process_registry(ProcessState(registry=False)) is None
    monkeypatch.setenv("TEAMLEAD_NO_REGISTRY", "1")
    assert process_registry(ProcessState()) is None


def test_the_group_help_shows_each_commands_own_summary_without_loading_it() -> None:
    stubs = {name: summary for name, (_, summary) in COMMANDS.items()}
    context = main.make_context("teamlead", ["--help"], resilient_parsing=True)
    for name in sorted(stubs):
        command = main.get_command(context, name)
        assert command is not None
        assert command.get_short_help_str(1000) == stubs[name], name


# -- the pause -----------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_pause_holds_until_lifted_or_the_callers_limit() -> None:
    clock = FakeClock()
    pause = Pause()
    assert await pause.wait(None, clock)  # not paused: no wait
    pause.pause()
    results: list[bool] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _wait_into(pause, clock, clock.monotonic() + 10, results))
        tg.start_soon(lambda: _wait_into(pause, clock, None, results))
        assert await apoll(lambda: pause.held_requests == 2, within_s=5)
        clock.advance(10)  # the first one's limit comes
        assert await apoll(lambda: results == [False], within_s=5)
        pause.unpause()
    assert results == [False, True] and pause.held_requests == 0 and pause.waiting == 0
    pause.end()
    assert not pause.pause() and not pause.paused


def test_a_runs_pause_is_its_admissions_and_the_runs_end_lifts_it_for_good() -> None:
    state = new_run("query", ClaudeAgentOptions(), Policy(), FakeClock(), process=ProcessState())
    pause = state.admission.pause
    assert pause.pause() and pause.paused  # what `teamlead pause` turns on
    state.close()
    assert pause.ended and not pause.paused and not pause.pause()


async def _wait_into(pause: Pause, clock: FakeClock, until: float | None, out: list[bool]) -> None:
    out.append(await pause.wait(until, clock, request=True))


# -- the endpoint --------------------------------------------------------------------------
class _Steering:
    """A steering that records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, object]] = []

    def status(self) -> dict[str, Any]:
        return {"run": "aaaaaaaaaaaa", "status": "running"}

    def stop(self, *, now: bool) -> str:
        self.asked.append(("stop", now))
        return "stopping"

    def pause(self) -> str:
        raise ControlError("run aaaaaaaaaaaa is already paused", code="state")

    def unpause(self) -> str:
        return "unpaused"

    def amend(self, changes: Mapping[str, int | str | None]) -> str:
        self.asked.append(("amend", dict(changes)))
        return "amended"


async def _served(path: Path, **kwargs: Any) -> tuple[Endpoint, _Steering]:
    steering = _Steering()
    endpoint = Endpoint(path, steering, run="aaaaaaaaaaaa", feed=WatchFeed(), **kwargs)
    await endpoint.start()
    return endpoint, steering


async def _raw(path: Path, data: bytes) -> dict[str, Any] | None:
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(data)
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    return json.loads(line) if line else None


@pytest.mark.anyio
async def test_the_endpoint_answers_each_op_and_refuses_hostile_requests(tmp_path: Path) -> None:
    path = tmp_path / "e.sock"
    endpoint, steering = await _served(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        status = await anyio.to_thread.run_sync(lambda: call(str(path), {"op": "status"}))
        assert status["ok"] and status["status"] == "running"
        stopped = await anyio.to_thread.run_sync(
            lambda: call(str(path), {"op": "stop", "now": True})
        )
        assert stopped["message"] == "stopping" and ("stop", True) in steering.asked
        with pytest.raises(ControlError, match="already paused") as refused:
            await anyio.to_thread.run_sync(lambda: call(str(path), {"op": "pause"}))
        assert refused.value.code == "state"
        for data, code in [
            (b"x" * 5000 + b"\n", "bad_request"),  # longer than a request may be
            (b"\xff\xfe not json\n", "bad_request"),
            (b'{"op": "rm -rf"}\n', "bad_request"),
            (b'{"op": "amend", "cap": "3"}\n', "bad_request"),
            (b'{"op": "amend", "cap": true}\n', "bad_request"),
            (b'{"op": "stop", "now": "yes"}\n', "bad_request"),
            (b'{"op": "status", "version": -1}\n', "bad_request"),
            (b"[" * 3000 + b"\n", "bad_request"),
        ]:
            answer = await _raw(path, data)
            assert answer is not None and answer["ok"] is False and answer["error"] == code, data
        answer = await _raw(path, b'{"op": "amend", "cap": null, "extra": 1}\n')
        assert answer is not None and answer["ok"]
        assert ("amend", {"cap": None}) in steering.asked
    finally:
        await endpoint.close()
    assert not path.exists()
    with pytest.raises(ControlError) as gone:
        await anyio.to_thread.run_sync(lambda: call(str(path), {"op": "status"}))
    assert gone.value.code == "unreachable"


@pytest.mark.anyio
async def test_a_silent_client_is_dropped_and_a_crowd_is_told_busy(tmp_path: Path) -> None:
    path = tmp_path / "e.sock"
    endpoint, _ = await _served(path, read_timeout_s=0.3, max_connections=2)
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b'{"op": "status"')  # never ends its line
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, no answer
        writer.close()
        silent = [await asyncio.open_unix_connection(str(path)) for _ in range(2)]
        busy = await _raw(path, b'{"op": "status"}\n')
        assert busy is not None and busy["error"] == "busy"
        for _, w in silent:
            w.close()
        ok = await apoll(lambda: len(endpoint._tasks) == 0, within_s=10)
        assert ok
        assert (await _raw(path, b'{"op": "status"}\n') or {}).get("ok") is True
    finally:
        await endpoint.close()


@pytest.mark.anyio
async def test_a_verb_on_a_run_whose_socket_holds_more_than_32_connections_says_busy() -> None:
    """The crowd's connections send nothing: the run answers the verb ``busy`` at once,
    before the verb has written its request (so never a broken pipe)."""
    _entry("aaaaaaaaaaaa")
    path = _dir() / "aaaaaaaaaaaa.sock"
    endpoint, steering = await _served(path)
    crowd = [await asyncio.open_unix_connection(str(path)) for _ in range(40)]
    try:
        assert await apoll(lambda: len(endpoint._tasks) == 32, within_s=10)  # the rest: busy
        for verb in (["pause"], ["stop"], ["amend", "--cap", "2"]) * 3:
            result = await anyio.to_thread.run_sync(_invoke, *verb, "aaaa")
            assert result.exit_code == 1, result.output
            assert result.output.strip() == (
                "teamlead: error: run aaaaaaaaaaaa: the run is busy; try again"
            )
        assert steering.asked == []
        # a verb slower than the run: the busy answer came, and the socket closed, before
        # it wrote its request; it reads the answer all the same
        late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        late.settimeout(10)
        late.connect(str(path))
        ready = await anyio.to_thread.run_sync(lambda: select.select([late], [], [], 10)[0])
        assert ready == [late]
        # the run closes its end once the answer is written
        assert await apoll(lambda: len(endpoint._tasks) == 32, within_s=10)
        await anyio.lowlevel.checkpoint()  # the closing step itself
        # the answers closed before the socket: a reader left open in a generator that an
        # exception's traceback holds keeps the socket's descriptor for the collector,
        # which warns of it in whatever test it runs in
        answers = _send(late, b'{"op": "pause"}\n')
        with (
            contextlib.closing(late),
            contextlib.closing(answers),
            pytest.raises(ControlError) as busy,
        ):
            await anyio.to_thread.run_sync(lambda: [_checked(raw, "aaaa") for raw in answers])
        assert busy.value.code == "busy"
    finally:
        for _, writer in crowd:
            writer.close()
        await asyncio.gather(*(w.wait_closed() for _, w in crowd), return_exceptions=True)
        await endpoint.close()


@pytest.mark.anyio
async def test_a_watcher_gets_the_recent_lines_then_live_ones_until_the_end(
    tmp_path: Path,
) -> None:
    path = tmp_path / "e.sock"
    endpoint, _ = await _served(path)
    endpoint.feed.write('{"type": "session"}\n{"type": "lead_')  # a line in two writes
    endpoint.feed.write('turn"}\n')
    got: list[str] = []

    def watch() -> None:
        got.extend(follow(str(path)))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, watch)
            assert await apoll(lambda: len(got) == 2, within_s=10)
            endpoint.feed.write('{"type": "finished"}\n')
            assert await apoll(lambda: len(got) == 3, within_s=10)
            await endpoint.close()  # the run ended: the watcher's stream ends
    finally:
        await endpoint.close()
    assert [json.loads(line)["type"] for line in got] == ["session", "lead_turn", "finished"]


@pytest.mark.anyio
async def test_the_lines_that_come_while_a_watchers_socket_drains_are_sent_before_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's last lines and its end land while the watcher's socket drains (a reader
    slower than the run): the watcher still gets those lines, at once."""
    path = tmp_path / "e.sock"
    endpoint, _ = await _served(path)
    drains, draining, drained = [0], asyncio.Event(), asyncio.Event()
    drain = asyncio.StreamWriter.drain

    async def slow(writer: asyncio.StreamWriter) -> None:
        drains[0] += 1
        if drains[0] == 2:  # the watch's first, after its answer's: the reader lags
            draining.set()
            await drained.wait()
        await drain(writer)

    monkeypatch.setattr(asyncio.StreamWriter, "drain", slow)
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b'{"version": 1, "op": "watch"}\n')
        assert json.loads(await asyncio.wait_for(reader.readline(), 10))["ok"] is True
        await asyncio.wait_for(draining.wait(), 10)
        endpoint.feed.write('{"type": "session"}\n{"type": "finished"}\n')
        closing = asyncio.ensure_future(endpoint.close())  # the run ends meanwhile
        drained.set()
        got = await asyncio.wait_for(reader.read(), 10)
        await closing
        writer.close()
    finally:
        await endpoint.close()
    assert [json.loads(line)["type"] for line in got.splitlines()] == ["session", "finished"]


@pytest.mark.anyio
async def test_a_run_leaves_the_registry_as_it_ends_while_its_watchers_get_the_last_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its endpoint takes a moment to close (a watcher still drains): meanwhile the run
    is gone from the list, never listed as one whose socket refuses (`unreachable`)."""
    registration = Registry().register(mode="query", command="teamlead ask hi")
    endpoint, _ = await _served(registration.socket)
    registration.write()
    run = _Registered(None, registration, endpoint, None, None)  # type: ignore[arg-type]
    ended, draining, drained = asyncio.Event(), asyncio.Event(), asyncio.Event()
    drain = asyncio.StreamWriter.drain

    async def slow(writer: asyncio.StreamWriter) -> None:  # the watcher reads slowly
        if ended.is_set():
            draining.set()
            await drained.wait()
        await drain(writer)

    monkeypatch.setattr(asyncio.StreamWriter, "drain", slow)
    reader, writer = await asyncio.open_unix_connection(str(registration.socket))
    writer.write(b'{"version": 1, "op": "watch"}\n')
    assert json.loads(await asyncio.wait_for(reader.readline(), 10))["ok"] is True
    endpoint.feed.write('{"type": "finished"}\n')
    ended.set()
    closing = asyncio.ensure_future(run.close())  # the run ended
    try:
        await asyncio.wait_for(draining.wait(), 10)
        listed = await anyio.to_thread.run_sync(_invoke, "ps", "--json")
        assert json.loads(listed.output) == []
    finally:
        drained.set()
        await closing
        writer.close()


@pytest.mark.anyio
async def test_a_watcher_that_hangs_up_is_let_go_without_writes_to_its_closed_socket(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a `watch` whose own output failed hangs up at once; the run goes on writing its
    # feed: its endpoint stops serving that watcher, never asyncio's "socket.send()
    # raised exception." on the run's stderr for each line after
    path = tmp_path / "e.sock"
    endpoint, _ = await _served(path)
    try:
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b'{"version": 1, "op": "watch"}\n')
        await writer.drain()
        assert json.loads(await asyncio.wait_for(reader.readline(), 10))["ok"] is True
        writer.close()
        await writer.wait_closed()
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            burst = "".join(f'{{"type": "task_progress", "n": {n}}}\n' for n in range(40))
            endpoint.feed.write(burst)  # many lines at once, as a busy run's stream brings
            assert await apoll(lambda: not endpoint._tasks, within_s=10)
        assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    finally:
        await endpoint.close()


@pytest.mark.anyio
async def test_a_watch_the_run_ends_without_its_finished_line_says_so() -> None:
    """A run killed, or a watcher dropped for falling behind: the stream just ends."""
    _entry("aaaaaaaaaaaa")
    endpoint, _ = await _served(_dir() / "aaaaaaaaaaaa.sock")
    endpoint.feed.write('{"type": "session", "version": 1, "session_id": "s-1"}\n')
    try:
        async with anyio.create_task_group() as tg:
            watched: list[Any] = []

            async def watch() -> None:
                watched.append(await anyio.to_thread.run_sync(_invoke, "watch", "aaaa", "--json"))

            tg.start_soon(watch)
            assert await apoll(lambda: len(endpoint._tasks) == 1, within_s=10)
            await endpoint.close()
    finally:
        await endpoint.close()
    (result,) = watched
    assert result.exit_code == 1
    assert result.output.splitlines()[1:] == [
        "teamlead: error: run aaaaaaaaaaaa ended this watch without its finished line: its "
        "process was killed, or this watch fell too far behind"
    ]


def test_a_watcher_that_falls_behind_is_dropped() -> None:
    feed = WatchFeed(backlog=3)
    watcher = feed.subscribe()
    for i in range(5):
        feed.write(f'{{"n": {i}}}\n')
    assert watcher.dropped and len(watcher.lines) == 3


def test_the_lines_kept_for_a_late_watcher_are_bounded_in_bytes_not_characters() -> None:
    feed = WatchFeed()
    line = '{"text": "' + "\N{GRINNING FACE}" * 4000 + '"}\n'  # 4 bytes a character in UTF-8
    feed.write(line * 1000)
    kept = len(feed.subscribe().lines)
    assert 0 < kept <= 4 * 1024 * 1024 // len(line.encode())  # the bound: 4 MiB


def test_a_request_line_parses_into_typed_fields() -> None:
    request = parse_request(b'{"version": 1, "op": "amend", "subagent_model": "haiku"}')
    assert request.op == "amend" and request.amend == {"subagent_model": "haiku"}
    assert parse_request(b'{"op": "stop"}').now is False


def test_no_such_run_carries_what_was_asked() -> None:
    with pytest.raises(NoSuchRun) as err:
        Registry().find("zz")
    assert err.value.ref == "zz" and err.value.why == "none"


# -- ps and stop over several runs ------------------------------------------------------------
def test_ps_asks_every_run_at_once() -> None:
    # three runs whose endpoints take the connection and never answer: asked one after
    # another, each run's client gives up (and hangs up) before the next one connects
    runs = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
    listeners = []
    for run in runs:
        _entry(run)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(_dir() / f"{run}.sock"))
        listener.listen(1)
        listeners.append(listener)
    held: list[socket.socket] = []
    open_when_the_last_came: list[bool] = []

    def take() -> None:
        for listener in listeners:
            listener.settimeout(30)
            conn, _ = listener.accept()
            held.append(conn)
        for conn in held:
            open_when_the_last_came.append(_still_open(conn))

    taker = threading.Thread(target=take)
    taker.start()
    try:
        rows = json.loads(_invoke("ps", "--json").output)
    finally:
        taker.join(timeout=60)
        for one in [*held, *listeners]:
            one.close()
    assert [(r["run"], r["status"]) for r in rows] == [(run, "unreachable") for run in runs]
    assert [(r["finished"], r["answer"]) for r in rows] == [(False, None)] * 3  # one shape
    assert open_when_the_last_came == [True, True, True]


def _still_open(conn: socket.socket) -> bool:
    """Whether the client of ``conn`` has not hung up (what it sent is read and dropped)."""
    conn.setblocking(False)
    while True:
        try:
            if conn.recv(4096) == b"":
                return False
        except BlockingIOError:
            return True


@pytest.mark.anyio
async def test_stop_all_stops_every_running_run_and_says_so_for_each() -> None:
    runs = ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    served = []
    for run in runs:
        _entry(run, label=f"experiment e: arm · task · trial {run[0]}")
        steering = _Steering()
        endpoint = Endpoint(_dir() / f"{run}.sock", steering, run=run, feed=WatchFeed())
        await endpoint.start()
        served.append((endpoint, steering))
    try:
        listed = await anyio.to_thread.run_sync(_invoke, "ps")
        assert "experiment e: arm · task · trial a" in listed.output
        result = await anyio.to_thread.run_sync(_invoke, "stop", "--all", "--now")
        assert (result.exit_code, result.output.splitlines()) == (
            0,
            ["aaaaaaaaaaaa: stopping", "bbbbbbbbbbbb: stopping"],
        )
        assert [s.asked for _, s in served] == [[("stop", True)], [("stop", True)]]
        result = await anyio.to_thread.run_sync(_invoke, "stop", "0123456789ab", "bbbb")
        assert result.exit_code == 4
        assert result.output.splitlines() == [
            "teamlead: error: no such run: '0123456789ab' (see `teamlead ps`)",
            "bbbb: stopping",
        ]
        assert served[1][1].asked == [("stop", True), ("stop", False)]
    finally:
        for endpoint, _ in served:
            await endpoint.close()


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        ([], 2, "teamlead: error: name the runs to stop, or give --all (not both)"),
        (["--all", "aaaa"], 2, "teamlead: error: name the runs to stop, or give --all (not both)"),
        (["--all"], 0, "no run is running"),
    ],
)
def test_stop_names_runs_or_all_of_them(args: list[str], code: int, said: str) -> None:
    result = _invoke("stop", *args)
    assert (result.exit_code, result.output.strip()) == (code, said)


def test_ps_quiet_and_json_together_are_refused_in_one_line() -> None:
    result = _invoke("ps", "-q", "--json")
    assert (result.exit_code, result.output.strip()) == (
        2,
        "teamlead: error: --json and --quiet cannot be combined",
    )


def test_show_of_a_run_still_running_says_how_to_follow_it() -> None:
    _entry("aaaaaaaaaaaa")
    result = _invoke("show", "aaaa")
    assert (result.exit_code, result.output.strip()) == (
        4,
        "teamlead: error: run aaaaaaaaaaaa is still running: `teamlead watch aaaaaaaaaaaa` follows "
        "it, and `teamlead show` prints it once it has finished",
    )


def test_a_verb_on_a_run_the_history_keeps_says_it_finished_and_how_to_see_it() -> None:
    History().add(RunRecord(run="0123456789ab", status="completed", ended=1_800_000_000.0))
    for verb in (["stop", "0123"], ["pause", "0123"], ["watch", "0123456789ab"]):
        result = _invoke(*verb)
        assert (result.exit_code, result.output.strip()) == (
            4,
            "teamlead: error: run 0123456789ab has already finished: `teamlead show 0123456789ab` "
            "prints it",
        )


def test_view_on_a_port_another_server_holds_is_one_line_exit_2() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = _invoke("view", "--port", str(port))
    assert (result.exit_code, result.output.strip()) == (
        2,
        f"teamlead: error: cannot listen on 127.0.0.1:{port}: Address already in use",
    )


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("resume", "(none: a resume of its session, with what its agents had left)"),
        ("client", "(not known: the client sent it)"),
    ],
)
def test_show_says_why_a_run_has_no_prompt(mode: str, said: str) -> None:
    History().add(RunRecord(run="0123456789ab", mode=mode, ended=1_800_000_000.0))
    result = _invoke("show", "0123456789ab")
    assert result.exit_code == 0, result.output
    assert result.output.split("prompt:\n", 1)[1].splitlines()[0] == f"  {said}"


@pytest.mark.parametrize(
    ("started", "shown"),
    [("1e300", "-"), ("-1e300", "-"), ("1e17", "-"), ("1.8e9", "2027-01-15 08:00:00 UTC")],
)
def test_show_says_when_a_record_started_and_a_dash_for_no_possible_time(
    started: str, shown: str
) -> None:
    written = History().add(RunRecord(run="0123456789ab", ended=1_800_000_000.0))
    record = written.read_text().replace('"started":0.0', f'"started":{started}')
    written.write_text(record)
    result = _invoke("show", "0123456789ab")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[3].startswith(f"started: {shown}, took ")


def test_json_of_a_record_with_lone_surrogates_is_json_with_their_escapes() -> None:
    # a JS-side cut can leave half a surrogate pair: JSON writes it as an escape, Python
    # reads it back as a code point that no UTF-8 stream can write
    written = History().add(RunRecord(run="0123456789ab", ended=1_800_000_000.0))
    record = json.loads(written.read_text())
    record.update(prompt="a\ud800b", result="x\udfffy", command="c\ud83d")
    written.write_text(json.dumps(record))  # ASCII, the surrogates as escapes
    shown = _invoke("show", "--json", "0123456789ab")
    listed = _invoke("ps", "--all", "--json")
    assert (shown.exit_code, listed.exit_code) == (0, 0), (shown.output, listed.output)
    assert (json.loads(shown.output)["prompt"], json.loads(shown.output)["result"]) == (
        "a\ud800b",
        "x\udfffy",
    )
    [row] = json.loads(listed.output)
    assert (row["answer"], row["command"]) == ("x\udfffy", "c\ud83d")
    assert "\\ud800" in shown.output  # an escape in the JSON text, not the code point


_BAD_AMENDS = {
    "cap zero": ["--cap", "0"],
    "cap negative": ["--cap", "-1"],
    "cap over the CLI's": ["--cap", "21"],
    "cap of 4,200 digits": ["--cap", "9" * 4200],
    "cap of 5,000 digits": ["--cap", "9" * 5000],
    "cap no number": ["--cap", "three"],
    "cap a float": ["--cap", "2.5"],
    "cap unchanged": ["--cap", "3"],
    "model empty": ["--subagent-model", ""],
    "model two words": ["--subagent-model", "two words"],
    "model escape": ["--subagent-model", "x\x1b[31m"],
    "model of 201 characters": ["--subagent-model", "m" * 201],
    "model of 5,000 characters": ["--subagent-model", "m" * 5000],
    "model unchanged": ["--subagent-model", "default"],
    "nothing given": [],
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(_BAD_AMENDS))
async def test_every_bad_amend_value_is_refused_with_exit_2_and_changes_nothing(
    case: str, tmp_path: Path
) -> None:
    """A real run's steering behind the endpoint: each bad value is one line, exit 2 (as
    the docs say), wherever it is caught (the command, the endpoint or the run)."""
    control = RunControl()
    policy = Policy(spawn=SpawnPolicy(max_concurrent_agents=3), deadline_s=600)
    state = new_run("query", ClaudeAgentOptions(), policy, FakeClock(), control=control)
    _entry("aaaaaaaaaaaa")
    path = _dir() / "aaaaaaaaaaaa.sock"
    steering = RunSteering(state, run="aaaaaaaaaaaa", command="teamlead ask", started=1.0)
    endpoint = Endpoint(path, steering, run="aaaaaaaaaaaa", feed=WatchFeed())
    await endpoint.start()
    try:
        args = _BAD_AMENDS[case]
        result = await anyio.to_thread.run_sync(lambda: _invoke("amend", "aaaa", *args))
    finally:
        await endpoint.close()
        state.close()
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("teamlead: error: ") and len(line) < 300, line
    assert (control.cap, control.subagent_model) == (3, None)
    assert state.events.stream.drain() == []


def test_watch_says_each_record_in_the_words_of_the_progress_lines() -> None:
    """What ``watch`` prints without ``--json``: the line ``ask``'s progress has for the
    same fact (the task named from its start, the cost of a scripted model said as what
    it is), one per record, and never a record dumped raw."""
    from teamlead._cli.records import RecordLines
    from teamlead.events import AgentUsage, Finished, SpawnDecided

    records = [
        {"type": "session", "version": 1, "session_id": "s-1"},
        {
            "type": "lead_turn",
            "version": 1,
            "message_id": "msg_scripted_1",
            "text": "Go\n  now.",
            "error": None,
            "tool_names": ["Agent"],
        },
        json.loads(
            SpawnDecided(
                outcome="queued",
                tool_use_id="t",
                description="scan",
                running=1,
                limit=1,
                position=1,
            ).to_json()
        ),
        {  # as event version 5 wrote an admission: it reads as a spawn_decided
            "type": "spawn_admitted",
            "version": 5,
            "tool_use_id": "t",
            "description": "scan",
            "waited_s": 2.0,
            "running": 1,
            "limit": 1,
        },
        {
            "type": "task_started",
            "version": 1,
            "task_id": "k1",
            "tool_use_id": "t",
            "description": "scan",
            "subagent_type": "explorer",
        },
        {"type": "task_progress", "version": 1, "task_id": "k1", "tokens": 5},
        json.loads(
            AgentUsage(
                agent_id="a1b2c3d4e5f6a7b8",
                kind="agent",
                requests=3,
                input_tokens=1000,
                output_tokens=234,
                last_tool="Grep",
            ).to_json()
        ),
        {
            "type": "task_ended",
            "version": 1,
            "task_id": "k1",
            "status": "completed",
            "source": "task_notification",
            "summary": "FINDING",
        },
        {"type": "agent_usage", "version": 1, "agent_id": 7},
        json.loads(
            Finished(
                status="completed", result="r", session_id="s-1", resumes=1, cost_usd=0.00358
            ).to_json()
        ),
    ]
    said = RecordLines()
    assert [said.line(record) for record in records] == [
        "session s-1",
        "lead: Go now. [Agent]",
        "queued 'scan': 1 of 1 running, position 1",
        "admitted 'scan' after 2.0 s queued",
        "task started: scan [explorer]",
        None,
        "usage of agent a1b2c3d4e5f6: 3 request(s), 1,234 tokens, last tool Grep",
        "task completed: scan",
        "agent_usage: (a record this version cannot read)",
        "finished: completed after 1 resume(s), $0.0036 list-price estimate for a scripted "
        "model, nothing charged",
    ]
