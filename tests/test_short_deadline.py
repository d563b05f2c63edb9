"""A short deadline ends ``partial`` with an answer from the finished work, never ``failed``.

With a 1.8 s deadline, a reserve of 20 % (0.36 s) was shorter than the wrap-up turn
itself (the CLI resuming the session), so the deadline cut that turn and the run ended
``failed``, exit 1, although its answer had used the finished agents. The reserve now
leaves room for one turn, and a run whose answer used finished work is ``partial``
whatever became of a later round.

On the real CLI the run's clock is held until the scene is set (one agent done, one
running), so a slow CLI start cannot spend the deadline before the agents start; from
there the deadline, scaled to a turn on this machine, runs in real time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import teamlead
from teamlead.events import Finished
from teamlead.policy import Policy
from teamlead.testing import (
    FakeClock,
    OfflineClaude,
    RecordedRequest,
    Reply,
    ScriptedRequest,
    ScriptedServer,
)
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

from .skip_clock import SkipClock, holding


def wrap_up_answers(fan: FanOut) -> Any:
    """``fan``, plus an answer to the wrap-up turn, which offers no tools (role ``other``)."""

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "other" and "<teamlead-results" in req.last_user_text:
            return synthesize(req)
        return fan(req)

    return script


async def one_turn_s(claude: OfflineClaude) -> float:
    """Seconds a one-turn run takes here now: start the CLI, answer, end it. The wrap-up
    does about that much after its point: it ends the CLI, resumes it for one turn."""
    started = time.monotonic()
    with anyio.fail_after(120):
        items = [i async for i in teamlead.query("Say ok.", claude.options(), policy=Policy())]
    took = time.monotonic() - started
    assert isinstance(items[-1], Finished) and items[-1].status == "completed", items[-1]
    return took


def wrap_up_requests(server: ScriptedServer) -> list[RecordedRequest]:
    return [r for r in server.recorded("other") if "<teamlead-results" in r.request.last_user_text]


@pytest.mark.cli
@pytest.mark.slow  # three real runs: two to time a turn here, one with the short deadline
@pytest.mark.timeout(300)
@pytest.mark.anyio
async def test_a_deadline_of_seconds_leaves_the_wrap_up_turn_time_to_answer(
    tmp_path: Path,
) -> None:
    # a few seconds, scaled to how long a turn takes here now: half of it (the reserve)
    # holds the wrap-up, a fifth of it (the reserve that once was) would not
    with ScriptedServer(lambda req: Reply.text("ok")) as server:
        turns = [
            await one_turn_s(OfflineClaude(server.base_url, state_dir=tmp_path / f"w{k}"))
            for k in range(2)
        ]
        deadline = max(2.0, round(2.5 * max(turns), 1))
    # the run's clock stands still until agent-1's answer has reached the lead and
    # agent-2's request is held open: a slow CLI start spends none of the deadline, and
    # from there on the deadline runs in real time
    clock = SkipClock(held=True)
    items: list[Any] = []
    with ScriptedServer(wrap_up_answers(FanOut.of(2, delays=[0.2, 60.0]))) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")

        def one_done_one_running() -> bool:
            told = [
                r
                for r in server.recorded("lead")
                if "FINDING[agent-1]" in r.request.last_user_text and r.finished is not None
            ]
            slow = [r for r in server.recorded("subagent") if _agent(r) == "agent-2"]
            return bool(told and slow) and all(r.finished is None for r in slow)

        async def collect() -> None:
            with anyio.fail_after(120):
                policy = Policy(deadline_s=deadline)
                async for item in teamlead.query(
                    "Investigate.", claude.options(), policy=policy, clock=clock
                ):
                    items.append(item)

        _, ready = await holding(clock, one_done_one_running, collect())
    assert ready, "agent-1 never finished while agent-2 ran"
    done = items[-1]
    assert isinstance(done, Finished)
    assert (done.status, done.reason) == ("partial", "deadline"), done.reasons
    tasks = {t.description: t.status for t in done.tasks if t.kind == "task"}
    assert tasks == {"agent-1": "completed", "agent-2": "stopped"}
    # the wrap-up turn answered within the reserve, and its answer is the run's: it used
    # the finished work
    wraps = wrap_up_requests(server)
    assert len(wraps) == 1, "the deadline came before the wrap-up turn was asked"
    (wrap,) = wraps
    assert wrap.finished is not None and wrap.error is None and wrap.reply is not None
    assert done.result == wrap.reply.content
    assert findings_in(done.result) == ["agent-1"]


def _agent(record: RecordedRequest) -> str | None:
    return record.request.agent.description if record.request.agent else None


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
