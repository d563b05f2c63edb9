"""The run's event bus (teamlead._run.bus): every consumer gets every event.

The public stream and the round are two subscribers: whichever reads first, the other still
gets the event (the round needs the lead's Retry-After for its outcome).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions

from teamlead._run.bus import EventBus, with_run_events
from teamlead._run.process import ProcessState
from teamlead._run.round import Round
from teamlead._run.state import new_run
from teamlead.events import RateLimited, RunAmended
from teamlead.policy import Policy
from teamlead.testing import FakeClock

pytestmark = pytest.mark.anyio

SESSION = "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"

LEAD_LIMITED = RateLimited(model="claude-x", role="lead", retry_after_s=7.0, outcome="passed")


def test_each_subscriber_gets_every_event_until_it_leaves() -> None:
    bus = EventBus()
    watch = bus.subscribe()
    first = RunAmended(changed=["cap"], cap=2, at=1.0)
    bus.publish(first)
    assert bus.stream.drain() == [first]  # the public stream's read takes nothing from watch
    assert watch.drain() == [first]
    assert watch.drain() == []  # each event once per subscriber
    watch.close()
    bus.publish(RunAmended(changed=["cap"], cap=3, at=2.0))
    assert watch.drain() == []
    assert [e.cap for e in bus.stream.drain() if isinstance(e, RunAmended)] == [3]


def test_a_subscription_nobody_read_for_a_while_keeps_every_event() -> None:
    """A thousand agents' decisions in one gap of the lead's stream: none is dropped."""
    bus = EventBus()
    for cap in range(1500):
        bus.publish(RunAmended(changed=["cap"], cap=cap, at=float(cap)))
    assert [e.cap for e in bus.stream.drain() if isinstance(e, RunAmended)] == list(range(1500))


async def test_the_round_keeps_the_leads_retry_after_the_stream_read_first() -> None:
    """The relay publishes the lead's 429 while the stream's reader holds a message; the
    public stream yields it before the next message, and the round's outcome still waits
    its Retry-After."""
    clock = FakeClock()
    policy = Policy(deadline_s=60.0, relay=False)
    state = new_run(
        "query", ClaudeAgentOptions(), policy, clock, process=ProcessState(registry=False)
    )
    state.start_clock()

    async def messages() -> AsyncGenerator[Any, None]:
        yield {"type": "system", "subtype": "init", "session_id": SESSION}
        yield {
            "type": "result",
            "subtype": "success",
            "is_error": True,
            "result": "API Error: 429 rate limited",
            "session_id": SESSION,
            "num_turns": 1,
            "api_error_status": 429,
        }

    this_round = Round(state, messages(), deadline=clock.monotonic() + policy.deadline_s)

    async def rounds() -> AsyncGenerator[Any, None]:
        async for message in this_round:
            yield message

    seen: list[Any] = []
    async for item in with_run_events(rounds(), state.events):
        seen.append(item)
        if isinstance(item, dict) and item.get("subtype") == "init":
            state.events.publish(LEAD_LIMITED)  # the relay, while the reader holds the init
    state.close()
    assert [type(i).__name__ if not isinstance(i, dict) else i["type"] for i in seen] == [
        "system",
        "RateLimited",
        "result",
    ]
    outcome = this_round.outcome
    assert (outcome.ok, outcome.transient, outcome.retry_after) == (False, True, 7.0)
