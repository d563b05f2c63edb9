"""The control plane's less-trodden paths, on the real CLI offline: a graceful ``stop`` of a
client run (``teamlead.receive_all``), a pause of a run that goes direct (``--no-relay``),
and a run that belongs to another user."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from claude_agent_sdk import ClaudeSDKClient

import teamlead
from teamlead._control.endpoint import Endpoint, WatchFeed, call
from teamlead._control.registry import Registry
from teamlead._run.process import ProcessState
from teamlead.events import Finished
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in

from ..isolated import isolated_env, run_to_the_end
from ..polling import poll
from .conftest import TEAMLEAD, OfflineFactory, ask_env, end_ask, start_ask

pytestmark = [pytest.mark.cli, pytest.mark.slow]

NOBODY = 65534


@pytest.mark.anyio
async def test_a_graceful_stop_wraps_up_a_client_run_from_its_finished_work(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    server, claude = offline(FanOut.of(3, delays=[0.3, 60.0, 60.0]))
    world = ProcessState(runtime_dir=tmp_path / "rt")
    policy = teamlead.Policy(wait_s=5, deadline_s=150)
    items: list[Any] = []
    said: dict[str, Any] = {}
    with anyio.fail_after(150):
        async with (
            teamlead.ClientRun(claude.options(), policy, process=world) as run,
            ClaudeSDKClient(options=run.options) as client,
        ):
            await client.query("Investigate every part.")
            async for item in teamlead.receive_all(client, run):
                items.append(item)
                if said:
                    continue
                (entry,) = Registry(tmp_path / "rt").listing().live
                assert entry.mode == "client"
                status = await anyio.to_thread.run_sync(call, entry.socket, {"op": "status"})
                if status["agents"]["done"] >= 1:  # agent-1 answered; the others take a minute
                    stop = {"op": "stop", "now": False}
                    said.update(await anyio.to_thread.run_sync(call, entry.socket, stop))
    assert said["ok"] and "the lead answers from the finished work" in said["message"]
    done = items[-1]
    assert isinstance(done, Finished)
    assert done.status == "partial" and done.reason == "interrupted", done.reasons
    assert any("teamlead stop" in reason for reason in done.reasons)
    # the wrap-up's own round is not cut by the stop that asked for it: the lead answered
    assert findings_in(done.result or "") == ["agent-1"]
    assert {t.description: t.status for t in done.tasks} == {
        "agent-1": "completed",
        "agent-2": "stopped",
        "agent-3": "stopped",
    }
    assert Registry(tmp_path / "rt").listing().live == []


def test_pausing_a_run_that_goes_direct_holds_its_new_agents_only(tmp_path: Path) -> None:
    """``--no-relay``: no relay holds requests, so a pause holds the agents the gate has
    not admitted yet, and says so; the lead's requests go on."""
    server = ScriptedServer(FanOut.of(3, delays=3.0)).start()
    try:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = ask_env(claude, isolated_env(tmp_path))
        proc = start_ask(claude, "--json", "--no-relay", "--max-concurrent-agents", "1", base=env)

        def ps() -> list[dict[str, Any]]:
            done = run_to_the_end([*TEAMLEAD, "ps", "--json"], timeout=60, env=env)
            return json.loads(done.stdout) if done.returncode == 0 else []

        row = poll(
            lambda: next((r for r in ps() if r["agents"]["queued"] == 2), None),
            within_s=90,
            every_s=0.2,
            unless=lambda: proc.poll() is not None,
        )
        assert row is not None, "the gate never queued two agents"
        paused = run_to_the_end([*TEAMLEAD, "pause", row["run"]], timeout=60, env=env)
        assert paused.returncode == 0, paused.stderr
        (line,) = paused.stdout.strip().splitlines()
        assert "nothing at the relay (the run goes direct: its lead's requests go on)" in line
        assert "no new agent starts" in line
        # the first agent ends; the paused gate admits neither of the other two
        held = poll(
            lambda: next(
                (r for r in ps() if r["status"] == "paused" and r["agents"]["done"] == 1), None
            ),
            within_s=60,
            every_s=0.3,
        )
        assert held is not None and held["agents"]["queued"] == 2 and held["held"] == 0
        unpausing = time.monotonic()
        unpaused = run_to_the_end([*TEAMLEAD, "unpause", row["run"]], timeout=60, env=env)
        assert unpaused.returncode == 0, unpaused.stderr
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        # the whole pause long, from before the first agent ended, nothing else started
        started: dict[str, float] = {}
        for r in server.recorded("subagent"):
            if r.request.agent is not None:
                name = r.request.agent.description
                started[name] = min(started.get(name, r.started), r.started)
        assert sorted(started) == ["agent-1", "agent-2", "agent-3"]
        assert started["agent-1"] < unpausing < min(started["agent-2"], started["agent-3"])
        done = json.loads(out.splitlines()[-1])
        assert done["status"] == "completed" and done["relay"] is None
        assert sorted(findings_in(done["result"])) == ["agent-1", "agent-2", "agent-3"]
    finally:
        end_ask(locals().get("proc"), tmp_path / "s")
        server.stop()


def test_a_run_in_a_shared_runtime_directory_warns_once_and_changes_nothing_there(
    tmp_path: Path,
) -> None:
    """``TEAMLEAD_RUNTIME_DIR`` naming a sticky directory others write to (as the temp
    directory is): the run is not registered, says so in one line naming a private one,
    completes, and the directory and the files of others in it are as they were."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = shared / "their-notes.txt"
    theirs.write_text("theirs")
    theirs.chmod(0o664)
    with ScriptedServer(FanOut.of(2, delays=0.1)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = {**ask_env(claude, isolated_env(tmp_path)), "TEAMLEAD_RUNTIME_DIR": str(shared)}
        env.pop("XDG_RUNTIME_DIR", None)
        temp = Path(env.get("TMPDIR") or tempfile.gettempdir())  # the run's temp directory
        private = temp / f"teamlead-{os.getuid()}"
        proc = start_ask(claude, "--quiet", base=env)
        out, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, err
    assert sorted(findings_in(out)) == ["agent-1", "agent-2"]
    (line,) = [line for line in err.splitlines() if "runtime directory" in line]
    assert line == (
        "teamlead: warning: this run cannot be seen or steered from outside (teamlead ps): "
        f"the runtime directory {str(shared)!r} is shared (mode 1777), and teamlead changes "
        f"nothing it did not create: set TEAMLEAD_RUNTIME_DIR to a private one, such as "
        f"{str(private)!r}"
    )
    assert shared.stat().st_mode & 0o7777 == 0o1777
    assert [p.name for p in shared.iterdir()] == ["their-notes.txt"]
    assert theirs.read_text() == "theirs" and theirs.stat().st_mode & 0o777 == 0o664


def _someone_elses_process() -> subprocess.Popen[bytes] | None:
    """A process of another user: started as ``nobody`` when this is root; ``None`` when
    this user cannot start one (the test then uses a process another user runs)."""
    if os.getuid() != 0:
        return None
    return subprocess.Popen(["sleep", "120"], user=NOBODY, group=NOBODY)


def test_a_run_of_another_user_is_refused_in_one_line(tmp_path: Path) -> None:
    """The registry lists an entry whose process is another user's (as a shared runtime
    directory would): every verb says so in one line, exit 4, and never connects."""
    other = _someone_elses_process()
    try:
        if other is not None:
            pid = other.pid
        else:
            theirs = [
                p for p in psutil.process_iter(["uids"]) if p.info["uids"].real != os.getuid()
            ]
            if not theirs:
                pytest.skip("no process of another user runs here to stand for their run")
            pid = theirs[0].pid
        registration = Registry().register(mode="query", command="teamlead ask theirs")
        entry = registration.entry
        started = psutil.Process(pid).create_time()
        entry = registration.entry = dataclasses.replace(entry, pid=pid, pid_started=started)
        registration.write()
        env = dict(os.environ)
        for verb in (["stop", entry.run], ["pause", entry.run[:6]], ["watch", entry.run]):
            done = run_to_the_end([*TEAMLEAD, *verb], timeout=60, env=env)
            assert done.returncode == 4, done
            (line,) = done.stderr.strip().splitlines()
            assert line.endswith("belongs to another user"), line
        listed = run_to_the_end([*TEAMLEAD, "ps", "--json"], timeout=60, env=env)
        assert json.loads(listed.stdout) == []  # not listed as yours, and not pruned
        assert entry.path.exists()
        registration.remove()
    finally:
        if other is not None:
            other.kill()
            other.wait(timeout=10)


@pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0,
    reason="only root can connect to this user's socket as another uid: anyone else is "
    "kept out by the modes alone (0700 directory, 0600 socket), which the kernel checks",
)
def test_a_connection_from_another_uid_is_refused_by_the_socket_and_by_the_endpoint(
    tmp_path: Path,
) -> None:
    """A client of another uid (``nobody``) meets the modes first (the socket 0600: the
    connect is refused); with the modes opened by mistake, the endpoint's own check of the
    peer's uid (``SO_PEERCRED``) refuses it with ``not_yours``, and the run goes on."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None or not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("no system python3 for the other user, or no SO_PEERCRED here")
    # outside the test's own 0700 temp dir: the other user may pass through, not list
    folder = Path(tempfile.mkdtemp(prefix="teamlead-peer-", dir="/tmp"))
    folder.chmod(0o711)
    path = folder / "run.sock"

    class Steering:
        def status(self) -> dict[str, Any]:
            return {"status": "running"}

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    endpoint = Endpoint(path, Steering(), run="0123456789ab", feed=WatchFeed())  # type: ignore[arg-type]
    asyncio.run_coroutine_threadsafe(endpoint.start(), loop).result(timeout=10)
    client = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({str(path)!r})\n"
        "except PermissionError:\n"
        "    print('denied'); sys.exit(0)\n"
        "try:\n"  # a refusal comes at once, maybe before the request went out
        '    s.sendall(b\'{"version": 1, "op": "status"}\\n\')\n'
        "except OSError:\n"
        "    pass\n"
        "print(s.makefile().readline().strip())\n"
    )
    try:
        kept_out = subprocess.run(
            [python, "-c", client], user=NOBODY, capture_output=True, text=True, timeout=30
        )
        assert kept_out.stdout.strip() == "denied", kept_out
        path.chmod(0o666)  # a mode opened by mistake: the endpoint checks the peer itself
        refused = subprocess.run(
            [python, "-c", client], user=NOBODY, capture_output=True, text=True, timeout=30
        )
        answer = json.loads(refused.stdout or "{}")
        assert answer["ok"] is False and answer["error"] == "not_yours", answer
        assert call(str(path), {"op": "status"})["status"] == "running"  # its owner is served
    finally:
        asyncio.run_coroutine_threadsafe(endpoint.close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        shutil.rmtree(folder, ignore_errors=True)
