"""One round (teamlead._run.round) and the clock's deadline scope (teamlead.clock.move_on_at).

A round yields only the stream's own messages; its outcome is read once the stream has
ended. Deadlines run on the injected :class:`~teamlead.clock.FakeClock`, so no test here
waits for real time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions

from teamlead._run.process import ProcessState
from teamlead._run.round import Round
from teamlead._run.state import new_run
from teamlead.clock import SYSTEM_CLOCK, move_on_at
from teamlead.policy import Policy
from teamlead.testing import FakeClock

pytestmark = pytest.mark.anyio

SESSION = "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"


def result(text: str, *, is_error: bool = False, status: int | None = None) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": is_error,
        "result": text,
        "session_id": SESSION,
        "num_turns": 1,
        "total_cost_usd": 0.25,
        "api_error_status": status,
    }


async def stream(*messages: Any, hang: anyio.Event | None = None) -> AsyncIterator[Any]:
    for message in messages:
        yield message
    if hang is not None:
        hang.set()
        await anyio.sleep_forever()


def make_round(agen: AsyncIterator[Any], clock: FakeClock, **kwargs: Any) -> Round:
    policy = kwargs.pop("policy", Policy(deadline_s=60.0, relay=False))
    # a round alone, not a run: its state is kept out of the process's live runs
    state = new_run(
        "query", ClaudeAgentOptions(), policy, clock, process=ProcessState(registry=False)
    )
    state.start_clock()
    return Round(state, agen, deadline=clock.monotonic() + policy.deadline_s, **kwargs)


async def test_a_round_yields_only_the_streams_messages_then_exposes_its_outcome() -> None:
    messages = [{"type": "system", "subtype": "init", "session_id": SESSION}, result("Answer")]
    this_round = make_round(stream(*messages), FakeClock())
    with pytest.raises(RuntimeError):
        _ = this_round.outcome  # not before the stream has ended
    assert [m async for m in this_round] == messages
    outcome = this_round.outcome
    assert (outcome.ok, outcome.error, outcome.error_kind) == (True, None, None)
    assert outcome.cost_usd == 0.25 and [r.text for r in outcome.results] == ["Answer"]


async def test_an_error_result_is_a_transient_failure_of_the_round() -> None:
    this_round = make_round(stream(result("Overloaded", is_error=True, status=529)), FakeClock())
    _ = [m async for m in this_round]
    outcome = this_round.outcome
    assert not outcome.ok and outcome.transient and outcome.error_kind == "result"
    assert outcome.error == "API error 529: Overloaded"


async def test_a_hung_stream_ends_when_the_injected_clock_passes_the_deadline() -> None:
    clock, hung = FakeClock(), anyio.Event()
    this_round = make_round(stream(result("Ack"), hang=hung), clock)

    async def pass_the_deadline() -> None:
        await hung.wait()
        clock.advance(60.0)

    with anyio.fail_after(10):  # a guard: a hang here is the bug under test
        async with anyio.create_task_group() as tg:
            tg.start_soon(pass_the_deadline)
            seen = [m async for m in this_round]

    assert [m["result"] for m in seen] == ["Ack"]
    outcome = this_round.outcome
    assert not outcome.ok and outcome.error_kind == "deadline"
    assert outcome.error == "deadline of 60 s reached"


async def test_fake_clock_scope_ends_only_when_virtual_time_reaches_its_deadline() -> None:
    clock = FakeClock(start=100.0)
    with move_on_at(clock, 105.0) as scope:
        clock.advance(4.0)
        await anyio.lowlevel.checkpoint()  # still inside: 104 < 105
        await clock.sleep(1.0)  # virtual time reaches 105: the scope ends here
        pytest.fail("the scope should have been cancelled")
    assert scope.cancelled_caught and clock.monotonic() == 105.0
    with move_on_at(clock, 100.0) as scope:  # already past: cancelled at the first checkpoint
        await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught


async def test_other_clocks_get_the_event_loop_timer() -> None:
    with move_on_at(SYSTEM_CLOCK, SYSTEM_CLOCK.monotonic() - 1.0) as scope:
        await anyio.lowlevel.checkpoint()  # a deadline already passed ends at once
    assert scope.cancelled_caught


async def watched(log: list[str], hang: anyio.Event) -> AsyncIterator[Any]:
    """A stream that yields its init message, then hangs; its end is logged."""
    try:
        yield {"type": "system", "subtype": "init", "session_id": SESSION}
        hang.set()
        await anyio.sleep_forever()
    finally:
        log.append("stream closed")


async def stopped_once(this_round: Round, hung: anyio.Event) -> list[Any]:
    """Read ``this_round`` through, asking its run to stop once ``hung`` is set."""

    async def stop() -> None:
        await hung.wait()
        this_round._state.stop.request("asked by a test")

    seen: list[Any] = []
    with anyio.fail_after(10):  # a guard: a hang here is the bug under test
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop)
            seen = [m async for m in this_round]
    return seen


@pytest.mark.parametrize("clock", [FakeClock(), SYSTEM_CLOCK], ids=["fake clock", "system clock"])
async def test_a_stop_asked_while_a_read_waits_cuts_the_round_before_its_stream_closes(
    clock: Any,
) -> None:
    log: list[str] = []
    hung = anyio.Event()

    async def on_cut() -> bool:
        log.append("cut")
        return False  # it ended no process: the read is cancelled

    this_round = make_round(watched(log, hung), clock, on_cut=on_cut)
    seen = await stopped_once(this_round, hung)

    assert [m["subtype"] for m in seen] == ["init"]
    assert log == ["cut", "stream closed"]
    outcome = this_round.outcome
    assert (outcome.error_kind, outcome.error) == ("interrupted", "stopped: asked by a test")
    assert not this_round._state.stop.listened  # the round no longer listens


async def test_a_cut_that_ended_the_streams_process_lets_the_read_see_the_stream_end() -> None:
    # the SDK's generator is left to end with its CLI: a cancellation inside it can
    # interrupt its own clean-up
    log: list[str] = []
    hung, ended = anyio.Event(), anyio.Event()

    async def process_stream() -> AsyncIterator[Any]:
        try:
            yield {"type": "system", "subtype": "init", "session_id": SESSION}
            hung.set()
            await ended.wait()
            for _ in range(3):  # the CLI's end reaches its stream a moment after the cut
                await anyio.lowlevel.checkpoint()
            log.append("stream ended")
        except anyio.get_cancelled_exc_class():
            log.append("read cancelled")
            raise

    async def on_cut() -> bool:
        log.append("cut")
        ended.set()  # as the end of a CLI's process tree ends its stream
        return True

    this_round = make_round(process_stream(), FakeClock(), on_cut=on_cut)
    seen = await stopped_once(this_round, hung)

    assert [m["subtype"] for m in seen] == ["init"]
    assert log == ["cut", "stream ended"]
    assert this_round.outcome.error_kind == "interrupted"


async def test_the_deadline_on_the_system_clock_cuts_a_waiting_read_through_the_loop_timer() -> (
    None
):
    log: list[str] = []
    hung = anyio.Event()

    async def on_cut() -> bool:
        log.append("cut")
        return False  # it ended no process: the read is cancelled

    policy = Policy(deadline_s=0.05, relay=False)
    this_round = make_round(watched(log, hung), SYSTEM_CLOCK, on_cut=on_cut, policy=policy)
    with anyio.fail_after(10):  # a guard: a hang here is the bug under test
        seen = [m async for m in this_round]

    assert [m["subtype"] for m in seen] == ["init"]
    assert log == ["cut", "stream closed"]
    outcome = this_round.outcome
    assert (outcome.error_kind, outcome.error) == ("deadline", "deadline of 0.05 s reached")
    assert not this_round._state.stream.cli_gone  # cut: the end looks for its CLI


async def test_a_cut_whose_wrap_up_fails_ends_the_waiting_read_at_once() -> None:
    log: list[str] = []
    hung = anyio.Event()

    async def on_cut() -> None:
        log.append("cut")
        raise OSError("the wrap-up could not end the CLI")

    policy = Policy(deadline_s=0.05, relay=False)
    this_round = make_round(watched(log, hung), SYSTEM_CLOCK, on_cut=on_cut, policy=policy)
    with anyio.move_on_after(10) as guard:  # a read left waiting on its hung stream is the bug
        seen = [m async for m in this_round]

    assert not guard.cancel_called  # (its failure may end the read once the guard cancels it)
    assert [m["subtype"] for m in seen] == ["init"]
    assert log == ["cut", "stream closed"]
    outcome = this_round.outcome
    assert (outcome.error_kind, outcome.error) == ("deadline", "deadline of 0.05 s reached")


async def test_a_stream_that_ran_to_its_end_and_closed_marks_its_cli_gone() -> None:
    this_round = make_round(stream(result("Answer")), FakeClock())
    _ = [m async for m in this_round]
    assert this_round.outcome.ok and this_round._state.stream.cli_gone
