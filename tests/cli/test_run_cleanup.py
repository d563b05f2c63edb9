"""A run lets go of every slot it holds on every way out, on the real CLI offline.

Closed with ``contextlib.aclosing`` while its agents run, left by an exception of the app
or abandoned to the garbage collector, a run gives its slots of its process's
:class:`~teamlead._gate.slots.SpawnCap` (a :class:`teamlead.ProcessState` of the test's
own) back, so a fresh run after it delegates normally; and a run whose calls a starved cap
denied is never ``completed``.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import teamlead
from teamlead.events import Finished, SpawnDecided
from teamlead.policy import Policy, SpawnPolicy
from teamlead.testing import OfflineClaude
from teamlead.testing.scripts import FanOut

from ..polling import apoll, poll
from ..skip_clock import SkipClock, holding
from .conftest import OfflineFactory, cli_processes
from .scripted import agents_run

pytestmark = pytest.mark.cli


class _Boom(Exception):
    """The app's own failure while it reads the run."""


async def _leave_while_agents_run(
    claude: OfflineClaude, agents: int, how: str, world: teamlead.ProcessState
) -> None:
    """Start a run and leave it once ``agents`` calls are admitted: closed with
    ``aclosing``, left by an exception of the app, or abandoned to the garbage collector."""
    admitted = 0
    items = teamlead.run(
        "Investigate every part.", claude.options(), policy=Policy(), process=world
    )
    with anyio.fail_after(90):
        if how == "abandoned":
            async for item in items:
                admitted += isinstance(item, SpawnDecided) and item.outcome == "admitted"
                if admitted == agents:
                    break
            del items  # never closed by the app: the event loop's finaliser closes it
            gc.collect()
            return
        with contextlib.suppress(_Boom):
            async with contextlib.aclosing(items) as stream:
                async for item in stream:
                    admitted += isinstance(item, SpawnDecided) and item.outcome == "admitted"
                    if admitted == agents:
                        if how == "exception":
                            raise _Boom
                        break
    assert admitted == agents


async def _until(check: Callable[[], bool], within_s: float) -> bool:
    """``check()`` once it holds, within ``within_s``: an abandoned run is closed by a task
    the event loop's finaliser starts, which offers nothing to wait on but its effect."""
    return bool(await apoll(check, within_s=within_s))


@pytest.mark.slow
@pytest.mark.anyio
async def test_runs_left_while_agents_run_give_back_every_cap_slot_and_the_next_run_delegates(
    offline: OfflineFactory,
) -> None:
    """One process state, a run left each way in turn (each after a run left before it),
    then a fresh run: every way gives every slot back, and the fresh run delegates."""
    world = teamlead.ProcessState()
    cap = world.spawn_cap
    for how in ("aclosing", "exception", "abandoned"):
        _, claude = offline(FanOut.of(3, delays=60.0))
        await _leave_while_agents_run(claude, 3, how, world)
        freed = await _until(lambda: cap.running == 0, within_s=20)
        assert freed, f"the run left by {how} left {cap.running} slot(s)"
        state_dir = claude.state_dir
        assert poll(lambda: not cli_processes(state_dir), within_s=15), how  # noqa: B023
    server, claude = offline(FanOut.of(3, delays=0.3))
    items: list[Any] = []
    with anyio.fail_after(90):
        async for item in teamlead.run("Investigate every part.", claude.options(), process=world):
            items.append(item)
    done = items[-1]
    assert isinstance(done, Finished)
    assert agents_run(server) == {"agent-1", "agent-2", "agent-3"}
    assert done.status == "completed", done.reasons
    assert cap.running == 0 and world.live_runs == 0


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_run_whose_calls_a_starved_cap_denied_is_not_completed(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(FanOut.of(2, delays=0.3))
    world = teamlead.ProcessState()
    cap = world.spawn_cap
    taken = 0
    while cap.try_take():  # other runs of the process hold every slot
        taken += 1
    policy = Policy(deadline_s=40.0, spawn=SpawnPolicy(wrap_up_reserve_s=36.0))
    items: list[Any] = []
    # the run's clock stands still until both calls wait for the cap: a slow CLI start
    # would spend the 4 s to the wrap-up point, and the calls be refused for the deadline
    # before they ever waited on the other runs' slots
    clock = SkipClock(held=True)

    async def collect() -> None:
        with anyio.fail_after(90):
            async for item in teamlead.run(
                "Investigate every part.",
                claude.options(),
                policy=policy,
                clock=clock,
                process=world,
            ):
                items.append(item)

    try:
        _, ready = await holding(clock, lambda: cap.waiting == 2, collect())
        assert ready, "the calls never waited for the cap"
    finally:
        for _ in range(taken):
            cap.release()
    done = items[-1]
    assert isinstance(done, Finished)
    assert not agents_run(server)
    # its calls waited for the other runs' slots up to the wrap-up point, and were refused
    assert (done.status, done.reason) == ("partial", "deadline"), done
    calls = [t for t in done.tasks if t.kind == "call"]
    assert len(calls) == 2 and all(t.disposition == "missing" for t in calls), calls
    assert all("other runs" in (t.reason or "") for t in calls), calls
