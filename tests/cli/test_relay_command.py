"""``teamlead relay -- ARGS``: the bundled Claude Code CLI run through the relay.

A pip install puts no ``claude`` on PATH, so ``teamlead relay`` runs the one the SDK
bundles. Each test runs the real CLI one-shot (``-p``) against a scripted model, in the
offline environment; the CLI's own ``ANTHROPIC_BASE_URL`` is a port nothing answers on, so
whatever reaches the scripted model went through the relay (``--upstream``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from teamlead._cli import main
from teamlead._cli.exitcodes import EXIT_INTERRUPTED
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer

from ..polling import poll
from .conftest import TEAMLEAD, cli_processes
from .startup_points import looping

pytestmark = [pytest.mark.cli]


def _env(claude: OfflineClaude, root: Path) -> dict[str, str]:
    # the CLI's own base URL leads nowhere: only the relay's upstream reaches the model
    dead = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "XDG_CACHE_HOME": str(root / "cache")}
    return {**os.environ, **claude.env, **dead}


def _relay(
    server: ScriptedServer,
    claude: OfflineClaude,
    root: Path,
    *args: str,
    options: tuple[str, ...] = (),
    stdin: str | None = None,
) -> Any:
    """``teamlead relay --upstream <server> [options] -- args``, run to its end."""
    return subprocess.run(
        [*TEAMLEAD, "relay", "--upstream", server.base_url, *options, "--", *args],
        env=_env(claude, root),
        cwd=claude.cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_relay_runs_the_bundled_cli_through_itself_and_stops_when_it_exits(
    tmp_path: Path,
) -> None:
    with ScriptedServer(lambda req: Reply.text("hello from the scripted model")) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = _relay(server, claude, tmp_path, "-p", "hello")
        recorded = server.recorded()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello from the scripted model\n"  # the CLI's stdout, and only it
    assert recorded and all(r.status == 200 for r in recorded)
    assert "ANTHROPIC_BASE_URL=" not in proc.stdout + proc.stderr
    assert cli_processes(tmp_path / "s") == []  # the CLI is gone, and teamlead has exited


def test_a_bare_double_dash_runs_the_cli_with_no_arguments(tmp_path: Path) -> None:
    """``teamlead relay --`` is the interactive session's form; piped, the CLI reads its
    one prompt from stdin instead."""

    def echo(req: ScriptedRequest) -> Reply:
        return Reply.text("PONG" if "ping from stdin" in req.last_user_text else "no ping")

    with ScriptedServer(echo) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = _relay(server, claude, tmp_path, stdin="ping from stdin\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "PONG\n"


def test_arguments_without_a_double_dash_are_refused_in_one_line() -> None:
    result = CliRunner().invoke(main, ["relay", "-q", "claude"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "teamlead: error: unexpected argument 'claude': the Claude Code CLI's arguments go "
        'after --, e.g. teamlead relay -- -p "hello"'
    )


def test_relay_exits_with_the_clis_exit_code(tmp_path: Path) -> None:
    with ScriptedServer(lambda req: Reply.error(400)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = _relay(server, claude, tmp_path, "-p", "hello")
        recorded = server.recorded()
    assert proc.returncode == 1, proc.stderr  # the CLI's: its API call failed
    assert "API Error: 400" in proc.stdout and recorded
    assert "teamlead:" not in proc.stderr  # nothing of teamlead's own went wrong


def _stopped_relay(
    root: Path, stop: signal.Signals, ready: Callable[[subprocess.Popen[str], ScriptedServer], Any]
) -> tuple[int, str]:
    """``relay -- -p hello`` to a model that never answers in time, sent ``stop`` once
    ``ready(process, server)``: its exit code and stderr."""
    with ScriptedServer(lambda req: Reply.text("late", delay=60)) as server:
        claude = OfflineClaude(server.base_url, state_dir=root / "s")
        proc = subprocess.Popen(
            [*TEAMLEAD, "relay", "--upstream", server.base_url, "--", "-p", "hello"],
            env=_env(claude, root),
            cwd=claude.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert ready(proc, server), "the relay ended first"
            proc.send_signal(stop)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    return proc.returncode, err


def test_sigterm_to_relay_stops_the_cli_it_runs_and_exits_130(tmp_path: Path) -> None:
    code, err = _stopped_relay(
        tmp_path, signal.SIGTERM, lambda _, server: poll(lambda: server.recorded() != [])
    )
    assert code == EXIT_INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "teamlead: interrupted"
    assert cli_processes(tmp_path / "s") == []


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_while_the_relay_starts_ends_it_as_a_stop(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """The signal lands once the command's event loop exists, while the relay starts and
    before the CLI runs or as it starts: noted, not raised inside the loop (a traceback,
    and the CLI could be left running), and taken by the watcher once the CLI runs."""

    def started(proc: subprocess.Popen[str], _: ScriptedServer) -> bool:
        return bool(
            poll(lambda: looping(proc.pid), every_s=0.002, unless=lambda: proc.poll() is not None)
        )

    code, err = _stopped_relay(tmp_path, stop, started)
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "teamlead: interrupted", err
    assert poll(lambda: cli_processes(tmp_path / "s") == [], within_s=10)


def test_the_relay_port_is_closed_after_the_cli_exits(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with ScriptedServer(lambda req: Reply.text("ok")) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = _relay(server, claude, tmp_path, "-p", "hello", options=("--port", str(port)))
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_a_refused_upstream_ends_relay_before_its_cli_starts(tmp_path: Path) -> None:
    """``teamlead relay --upstream URL -- …`` with nothing listening at URL: one line naming
    the flag, the URL and the cause, exit 1, and no CLI run waiting out its retries."""
    with socket.socket() as dead:  # bound, never listening: connections are refused
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
        claude = OfflineClaude(f"http://127.0.0.1:{port}", state_dir=tmp_path / "s")
        proc = subprocess.run(
            [*TEAMLEAD, "relay", "--upstream", f"http://127.0.0.1:{port}", "--", "-p", "hi"],
            env=_env(claude, tmp_path),
            cwd=claude.cwd,
            capture_output=True,
            text=True,
            timeout=20,
        )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines() == [
        f"teamlead: error: cannot connect to --upstream http://127.0.0.1:{port}: connection "
        "refused; give --upstream your API's address, or leave it out for the Anthropic API"
    ]
    assert proc.stdout == ""
