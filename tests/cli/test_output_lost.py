"""Output that cannot be written: every command whose stdout is full (``> /dev/full``) or
closed says so in one line on stderr and exits 74, never a traceback; a run whose
``--json`` lines cannot be written still goes to its end. Real ``teamlead`` processes on
the scripted model."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut

from ..isolated import isolated_env
from ..polling import poll
from .conftest import TEAMLEAD, ask_env, end_ask, start_ask

FULL_DEVICE = Path("/dev/full")  # every write fails: No space left on device
pytestmark = [
    pytest.mark.cli,
    pytest.mark.slow,
    pytest.mark.skipif(not FULL_DEVICE.exists(), reason="no /dev/full on this system"),
]

FULL = "cannot write to stdout: No space left on device"


def _close_stdout() -> None:
    os.close(1)


def _to_full(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    with FULL_DEVICE.open("w") as full:
        return subprocess.run(
            [*TEAMLEAD, *args], stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=60
        )


def test_commands_whose_stdout_is_full_say_so_in_one_line_and_exit_74(tmp_path: Path) -> None:
    # agents of 10 s: the run is still live for the four verbs that follow it
    server = ScriptedServer(FanOut.of(3, delays=10.0)).start()
    proc = None
    try:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = ask_env(claude, isolated_env(tmp_path))
        store = f"sqlite://{tmp_path / 'sessions.db'}"
        with FULL_DEVICE.open("w") as full:
            proc = start_ask(claude, "--json", "--session-store", store, base=env, stdout=full)

        def listed() -> str | None:
            done = subprocess.run(
                [*TEAMLEAD, "ps", "--json"], capture_output=True, text=True, env=env, timeout=60
            )
            rows = json.loads(done.stdout) if done.returncode == 0 else []
            return rows[0]["run"] if rows else None

        running = proc
        run = poll(listed, within_s=90, every_s=0.2, unless=lambda: running.poll() is not None)
        assert run is not None, "the run was never listed"
        for args in (["ps"], ["ps", "--json"], ["watch", run], ["watch", run, "--json"]):
            shown = _to_full(env, *args)
            assert (shown.returncode, shown.stderr) == (74, f"teamlead: {FULL}\n"), args
        _, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (74, f"teamlead: {FULL}\n")
        assert len(server.recorded("subagent")) == 3  # the run went on to its end
        for args in (["limits"], ["sessions", "--session-store", store], ["view"]):
            shown = _to_full(env, *args)
            assert (shown.returncode, shown.stderr) == (74, f"teamlead: {FULL}\n"), args
    finally:
        end_ask(proc, tmp_path / "s")
        server.stop()


def test_a_closed_stdout_or_both_streams_lost_never_print_a_traceback(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    closed = subprocess.run(
        [*TEAMLEAD, "ps"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=60,
        preexec_fn=_close_stdout,
    )
    assert (closed.returncode, closed.stderr) == (
        74,
        "teamlead: cannot write to stdout: it is closed\n",
    )
    with FULL_DEVICE.open("w") as full:
        both = subprocess.run([*TEAMLEAD, "ps"], stdout=full, stderr=full, env=env, timeout=60)
    assert both.returncode == 74
    with FULL_DEVICE.open("w") as full:
        refused = subprocess.run(
            [*TEAMLEAD, "watch", "nosuchrun"],
            stdout=subprocess.PIPE,
            stderr=full,
            text=True,
            env=env,
            timeout=60,
        )
    assert (refused.returncode, refused.stdout) == (
        4,
        "teamlead: cannot write to stderr: No space left on device\n",
    )
