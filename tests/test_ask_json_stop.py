"""``teamlead ask --json`` ends with its ``finished`` line on SIGINT, SIGTERM and SIGHUP.

A real ``teamlead ask`` subprocess on the real CLI offline: one agent runs, the others wait
in the spawn gate; a stop signal ends the run at once, and its last NDJSON line is still
``finished``, naming every call: the running one ``stopped``, the queued ones ``rejected``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.scripts import FanOut

from .conftest import cli_processes
from .polling import poll
from .test_cli import TEAMLEAD

pytestmark = [pytest.mark.cli, pytest.mark.slow]

_AGENTS = 6


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_ask_json_ends_with_finished_naming_every_call_when_stopped_by_a_signal(
    tmp_path: Path, stop: str
) -> None:
    with ScriptedServer(FanOut.of(_AGENTS, delays=60.0)) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = subprocess.Popen(
            [*TEAMLEAD, "ask", "Investigate.", "--max-concurrent-agents", "1", "--json"],
            env={**os.environ, **claude.env},
            cwd=claude.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert poll(lambda: server.recorded("subagent"), within_s=60), "no agent started"
            proc.send_signal(getattr(signal, stop))
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
    assert proc.returncode == 130, err
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
    assert poll(lambda: not cli_processes(tmp_path / "s"), within_s=10)
