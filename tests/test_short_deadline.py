"""A short deadline ends ``partial`` with an answer from the finished work, never ``failed``.

With a 1.8 s deadline, a reserve of 20 % (0.36 s) was shorter than the wrap-up turn
itself (the CLI resuming the session), so the deadline cut that turn and the run ended
``failed``, exit 1, although its answer had used the finished agents. The reserve now
leaves room for one turn, and a run whose answer used finished work is ``partial``
whatever became of a later round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from teamlead.testing import FakeClock, OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in, synthesize
from tests.test_coordinator_unit import (
    Script,
    error_result,
    fan_out,
    fast_policy,
    init,
    lead,
    notified,
    result,
    run,
    synthesis_failed,
)


def wrap_up_answers(fan: FanOut) -> Any:
    """``fan``, plus an answer to the wrap-up turn, which offers no tools (role ``other``)."""

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "other" and "<teamlead-results" in req.last_user_text:
            return synthesize(req)
        return fan(req)

    return script


def _ask(claude: OfflineClaude, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "teamlead", "ask", "Investigate.", *args],
        env={**os.environ, **claude.env},
        cwd=claude.cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.cli
@pytest.mark.slow  # two real asks: one to time a turn here, one with the short deadline
@pytest.mark.timeout(300)
def test_ask_with_a_deadline_of_seconds_ends_partial_with_its_answer(tmp_path: Path) -> None:
    # about 2 s on an idle machine: two CLI turns (the first, the wrap-up) must fit in it,
    # so it is scaled by how long one plain `ask` takes on this machine now
    with ScriptedServer(lambda req: Reply.text("ok")) as server:
        started = time.monotonic()
        assert _ask(OfflineClaude(server.base_url, state_dir=tmp_path / "w"), "-q").returncode == 0
        deadline = max(2.0, round(2 * (time.monotonic() - started), 1))
    with ScriptedServer(wrap_up_answers(FanOut.of(2, delays=[0.2, 60.0]))) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = _ask(claude, "--deadline", str(deadline), "--json")
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    finished = lines[-1]
    assert finished["type"] == "finished", proc.stderr
    assert finished["status"] != "failed" and finished["result"], finished["reasons"]
    tasks = [t for t in finished["tasks"] if t["kind"] == "task"]
    if not tasks:  # a slow CLI start: the wrap-up point came first, and the gate denied them
        assert (proc.returncode, finished["status"]) == (0, "completed"), finished["reasons"]
        assert all(t["status"] == "denied" for t in finished["tasks"]), finished["tasks"]
        return
    assert (proc.returncode, finished["status"], finished["reason"]) == (3, "partial", "deadline")
    done = {t["description"] for t in tasks if t["status"] == "completed"}
    assert set(findings_in(finished["result"])) == done  # the answer used the finished work
    assert {t["description"]: t["status"] for t in tasks}["agent-2"] == "stopped"


@pytest.mark.anyio
async def test_a_failed_later_round_leaves_an_answer_that_used_finished_work_partial() -> None:
    script = Script(
        [
            *fan_out(("t1", "probe"), ("t2", "slow probe")),
            notified("t1", summary="T1 done"),
            lead("Used T1", msg_id="m2"),
            result("Used T1", origin_task="t1"),
            notified("t2", summary="T2 done"),
            *synthesis_failed(),
        ],
        [init(), error_result(None, "the CLI gave up")],  # the resume fails, not transient
    )
    items, done = await run(script)

    assert (done.status, done.result, done.reason) == ("partial", "Used T1", "resume_failed")
    assert {t.id: t.disposition for t in done.tasks} == {"t1": "included", "t2": "missing"}


@pytest.mark.anyio
async def test_an_answer_that_used_no_result_is_still_failed_when_the_last_round_failed() -> None:
    script = Script(
        [*fan_out(("t1", "probe")), notified("t1", summary="T1 done"), *synthesis_failed()],
        [init(), error_result(None, "the CLI gave up")],
    )
    items, done = await run(script)

    assert (done.status, done.result) == ("failed", "Agents are working.")


@pytest.mark.anyio
async def test_a_wrap_up_turn_cut_by_the_deadline_leaves_the_earlier_answer_partial() -> None:
    clock = FakeClock()
    script = Script(
        [
            *fan_out(("t1", "probe"), ("t2", "slow probe")),
            notified("t1", summary="T1 done"),
            lead("Used T1", msg_id="m2"),
            result("Used T1", origin_task="t1"),
            lambda: clock.advance(50.0),  # past the wrap-up point (60 - 12 s)
            lead("late", msg_id="m3"),
        ],
        [init(), lambda: clock.advance(20.0), lead("too late", msg_id="m4")],  # past 60 s
        clock=clock,
    )
    items, done = await run(script, policy=fast_policy(deadline_s=60.0), clock=clock)

    assert len(script.calls) == 2  # the first round, then the wrap-up round
    assert "slow probe" in script.prompts[1]  # named as unfinished
    assert (done.status, done.result, done.reason) == ("partial", "Used T1", "deadline")
    assert {t.id: t.status for t in done.tasks} == {"t1": "completed", "t2": "stopped"}
