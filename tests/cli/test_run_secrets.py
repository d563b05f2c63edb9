"""A store's password appears nowhere a run is shown: a real ``teamlead ask`` on the
scripted model keeps its sessions and its limits in a Redis that wants a password, and
its registry entry, ``teamlead ps``, ``ps --json``, the view's events and page, and the
run's own output (NDJSON and warnings) are all read while it runs and after."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from teamlead._control.registry import runtime_dir
from teamlead._history import history_dir
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut

from ..browser import serving_view, view_events
from ..isolated import isolated_env, run_to_the_end
from ..polling import poll
from ..redis_server import REDIS_SERVER, redis_server
from .conftest import TEAMLEAD, ask_env, end_ask, start_ask

pytestmark = [
    pytest.mark.cli,
    pytest.mark.slow,
    pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed"),
]

PASSWORD = "Pa55-w0rd-of-the-store"


def test_a_store_password_appears_nowhere_a_run_is_shown(tmp_path: Path) -> None:
    server = ScriptedServer(FanOut.of(2, delays=4.0)).start()
    proc: subprocess.Popen[str] | None = None
    try:
        with redis_server(tmp_path, password=PASSWORD) as redis:
            claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
            env = ask_env(claude, isolated_env(tmp_path))
            store = f"redis://:{PASSWORD}@127.0.0.1:{redis.port}"
            proc = start_ask(
                claude,
                "--json",
                f"--session-store={store}/0",
                "--limits",
                f"{store}/1",
                base=env,
            )
            shown: list[str] = []

            def ps() -> list[dict[str, Any]]:
                done = run_to_the_end([*TEAMLEAD, "ps", "--json"], timeout=60, env=env)
                shown.append(done.stdout + done.stderr)
                return json.loads(done.stdout) if done.returncode == 0 else []

            running = proc
            row = poll(
                lambda: next(iter(ps()), None),
                within_s=90,
                every_s=0.2,
                unless=lambda: running.poll() is not None,
            )
            assert row is not None, "the run was never listed"
            masked = f"redis://***@127.0.0.1:{redis.port}"
            assert f"--session-store={masked}/0 --limits {masked}/1" in row["command"]
            table = run_to_the_end([*TEAMLEAD, "ps"], timeout=60, env=env)
            assert f"--session-store={masked}/0" in table.stdout
            shown.append(table.stdout + table.stderr)
            (entry,) = runtime_dir(env).glob("*.json")  # the run's registry entry
            shown.append(entry.read_text())
            with serving_view(env) as url:
                runs = next(view_events(url, "/events?", "runs"))
                detail = next(view_events(url, f"/detail?run={row['run']}", "detail"))
            shown += [json.dumps(runs), json.dumps(detail)]
            assert runs[0]["command"] == row["command"]
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert json.loads(out.splitlines()[-1])["status"] == "completed"
            shown += [out, err]
            past = run_to_the_end([*TEAMLEAD, "ps", "--all", "--json"], timeout=60, env=env)
            (kept,) = [r for r in json.loads(past.stdout) if r["run"] == row["run"]]
            assert f"--session-store={masked}/0" in kept["command"]  # the run history's
            told = run_to_the_end([*TEAMLEAD, "show", row["run"], "--json"], timeout=60, env=env)
            shown += [past.stdout, told.stdout]
            shown += [f.read_text() for f in history_dir(env).rglob("*") if f.is_file()]
        for text in shown:
            assert PASSWORD not in text
    finally:
        end_ask(proc, tmp_path / "s")
        server.stop()
