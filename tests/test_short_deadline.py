"""A short deadline ends ``partial`` with an answer from the finished work, never ``failed``.

With a 1.8 s deadline, a reserve of 20 % (0.36 s) was shorter than the wrap-up turn
itself (the CLI resuming the session), so the deadline cut that turn and the run ended
``failed``, exit 1, although its answer had used the finished agents. The reserve now
leaves room for one turn, and a run whose answer used finished work is ``partial``
whatever became of a later round.

Here on a scripted ``query_fn``; the same deadline on the real CLI is in
tests/cli/test_short_deadline.py.
"""

from __future__ import annotations

import pytest

from teamlead.testing import FakeClock

from .scripted_query import (
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
