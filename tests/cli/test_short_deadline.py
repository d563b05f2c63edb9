"""A deadline of seconds on the real CLI leaves the wrap-up turn time to answer.

With a 1.8 s deadline, a reserve of 20 % (0.36 s) was shorter than the wrap-up turn
itself (the CLI resuming the session), so the deadline cut that turn and the run ended
``failed``, although its answer had used the finished agents (the rule itself, on a
scripted ``query_fn``, is in tests/test_short_deadline.py).

The run's clock is held until the scene is set (one agent done, one running), so a slow
CLI start cannot spend the deadline before the agents start; from there the deadline,
scaled to a turn on this machine, runs in real time.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import teamlead
from teamlead.events import Finished
from teamlead.policy import Policy
from teamlead.testing import OfflineClaude, RecordedRequest, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in

from ..skip_clock import SkipClock, holding
from .scripted import one_done_one_running, wrap_up_answers

pytestmark = pytest.mark.cli


async def one_turn_s(claude: OfflineClaude) -> float:
    """Seconds a one-turn run takes here now: start the CLI, answer, end it. The wrap-up
    does about that much after its point: it ends the CLI, resumes it for one turn."""
    started = time.monotonic()
    with anyio.fail_after(120):
        items = [i async for i in teamlead.run("Say ok.", claude.options(), policy=Policy())]
    took = time.monotonic() - started
    assert isinstance(items[-1], Finished) and items[-1].status == "completed", items[-1]
    return took


def wrap_up_requests(server: ScriptedServer) -> list[RecordedRequest]:
    return [r for r in server.recorded("other") if "<teamlead-results" in r.request.last_user_text]


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

        async def collect() -> None:
            with anyio.fail_after(120):
                policy = Policy(deadline_s=deadline)
                async for item in teamlead.run(
                    "Investigate.", claude.options(), policy=policy, clock=clock
                ):
                    items.append(item)

        scene = functools.partial(one_done_one_running, server, "agent-1", "agent-2")
        _, ready = await holding(clock, scene, collect())
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
