"""Live control by key on the real CLI offline, at a real terminal: `teamlead ask` in tmux.

The lead fans out four agents under a cap of 2; while the first two run (the server holds
their replies until the keys were pressed), ``-`` lowers the cap to 1 and ``m`` moves the
subagent model to ``haiku``. The scripted server's records
show both: the two queued agents then run one after the other (under the old cap they
would have run together), and their requests carry the new model.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.recorded import RecordedRequest
from teamlead.testing.replies import AgentCall, Reply, ScriptedRequest
from teamlead.testing.scripts import FanOut, bash, synthesize
from tests.polling import poll
from tests.tmux import Pane, needs_tmux

from .conftest import TEAMLEAD

pytestmark = [pytest.mark.cli, pytest.mark.slow, needs_tmux, pytest.mark.timeout(240)]


def by_agent(server: ScriptedServer) -> dict[str, RecordedRequest]:
    found: dict[str, RecordedRequest] = {}
    for record in server.recorded("subagent"):
        agent = record.request.agent
        if agent is not None:
            found.setdefault(agent.description, record)
    return found


def test_keys_lower_the_cap_for_the_next_admissions_and_set_the_next_agents_model(
    tmp_path: Path,
) -> None:
    release = threading.Event()  # agent-1 and agent-2 answer once the keys were pressed
    fan_out = FanOut.of(4, delays=[0.3, 0.3, 0.6, 0.6])

    def script(req: ScriptedRequest) -> Reply:
        if req.agent is not None and req.agent.description in ("agent-1", "agent-2"):
            release.wait(timeout=90)  # a server thread per stream: only this one waits
        return fan_out(req)

    with ScriptedServer(script) as server, Pane(tmp_path) as pane:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = {**os.environ, **claude.env}
        argv = [*TEAMLEAD, "ask", "Investigate.", "--permission-mode", "bypassPermissions"]
        pane.start([*argv, "--max-concurrent-agents", "2"], env=env, cwd=claude.cwd)
        assert poll(lambda: len(by_agent(server)) >= 2, within_s=90), pane.screen()
        pane.wait_for("+ cap up (2)", within_s=30)
        pane.send("-")
        pane.wait_for("+ cap up (1)", within_s=30)  # the hint shows it at once
        pane.send("m")
        pane.wait_for("m model (haiku)", within_s=30)
        started = by_agent(server)
        assert set(started) == {"agent-1", "agent-2"}, "a queued agent started before the keys"
        release.set()
        # the run's own events, in the view's log once its stream moves on
        pane.wait_for(
            lambda text: (
                "cap 2 -> 1 (agents running go on)" in text
                and "subagent model -> haiku (for agents not started yet)" in text
            ),
            within_s=60,
        )
        assert pane.wait_exit(within_s=150) == 0, pane.screen()
        screen = pane.screen()
        records = by_agent(server)
    first, second = records["agent-1"], records["agent-2"]
    third, fourth = records["agent-3"], records["agent-4"]
    assert first.finished is not None and second.finished is not None
    assert third.finished is not None
    assert first.started < second.finished and second.started < first.finished  # cap 2 first
    assert third.started >= max(first.finished, second.finished)  # held until both ended
    # cap 1 from the key on: the queued two ran one after the other
    assert fourth.started >= third.finished or third.started >= (fourth.finished or 0)
    for record in (third, fourth):
        assert "haiku" in record.request.model, record.request.model
    for record in (first, second):
        assert "haiku" not in record.request.model
    assert "SYNTHESIS of 4 findings" in screen


def test_focus_moves_through_the_agents_and_shows_the_last_calls_and_lines(
    tmp_path: Path,
) -> None:
    release = threading.Event()  # the agents finish once the focus was looked at

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "subagent" and req.agent is not None:
            n = req.agent.description[-1]
            if req.assistant_turns == 0:
                return Reply.tools(bash(f"echo focus-{n}"), text=f"Looking at part {n}.")
            release.wait(timeout=90)
            return Reply.text(f"FINDING[agent-{n}]: done.")
        if req.role != "lead":
            return Reply.text("ok")
        if req.assistant_turns == 0:
            return Reply.agents(AgentCall("agent-1", "P1"), AgentCall("agent-2", "P2"))
        return synthesize(req)

    with ScriptedServer(script) as server, Pane(tmp_path) as pane:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        env = {**os.environ, **claude.env}
        argv = [*TEAMLEAD, "ask", "Investigate.", "--permission-mode", "bypassPermissions"]
        pane.start(argv, env=env, cwd=claude.cwd)
        pane.wait_for("f/tab focus · F/backtab back", within_s=90)
        # both agents ran their command and wait on their second turn
        assert poll(lambda: len(server.recorded("subagent")) >= 4, within_s=90), pane.screen()
        pane.send("f")
        first = pane.wait_for("focus [agent-", within_s=30)
        n = "1" if "focus [agent-1] agent, running" in first else "2"
        other = "2" if n == "1" else "1"
        pane.wait_for(
            lambda text: f"Bash: echo focus-{n} (ok)" in text and f"| Looking at part {n}." in text,
            within_s=30,
        )
        pane.send("\t")  # Tab moves on as f does
        screen = pane.wait_for(f"focus [agent-{other}] agent, running", within_s=30)
        assert f"Bash: echo focus-{other}" in screen and f"echo focus-{n}" not in screen
        pane.send("f")  # past the last agent: no focus
        pane.wait_for(lambda text: "focus [" not in text, within_s=30)
        release.set()
        assert pane.wait_exit(within_s=120) == 0, pane.screen()
