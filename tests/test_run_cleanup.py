"""A run lets go of every slot it holds on every way out, on the real CLI offline.

Closed with ``contextlib.aclosing`` while its agents run, a run gives its slots of the
process-wide :class:`~teamlead._gate.slots.SpawnCap` back, so a fresh run after it
delegates normally; and a run whose calls a starved cap denied is never ``completed``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest

import teamlead
from teamlead._gate.slots import SpawnCap
from teamlead.events import Finished, SpawnAdmitted
from teamlead.policy import Policy, SpawnPolicy
from teamlead.testing import OfflineClaude
from teamlead.testing.scripts import FanOut

from .conftest import OfflineFactory, cli_processes
from .polling import poll
from .test_gate_cli import agents_run

pytestmark = pytest.mark.cli


async def _close_while_agents_run(claude: OfflineClaude, agents: int) -> None:
    """Start a run and close it with ``aclosing`` once ``agents`` calls are admitted."""
    admitted = 0
    with anyio.fail_after(90):
        async with contextlib.aclosing(
            teamlead.query("Investigate every part.", claude.options(), policy=Policy())
        ) as items:
            async for item in items:
                if isinstance(item, SpawnAdmitted):
                    admitted += 1
                    if admitted == agents:
                        break
    assert admitted == agents


@pytest.mark.slow
@pytest.mark.anyio
async def test_runs_closed_with_aclosing_while_agents_run_give_back_every_cap_slot(
    offline: OfflineFactory,
) -> None:
    cap = SpawnCap.shared()
    before = cap.running
    for attempt in range(2):
        _, claude = offline(FanOut.of(3, delays=60.0))
        await _close_while_agents_run(claude, 3)
        assert cap.running == before, f"run {attempt + 1} left {cap.running - before} slot(s)"
        state_dir = claude.state_dir
        assert poll(lambda: not cli_processes(state_dir), within_s=15)  # noqa: B023
    server, claude = offline(FanOut.of(3, delays=0.3))
    items: list[Any] = []
    with anyio.fail_after(90):
        async for item in teamlead.query("Investigate every part.", claude.options()):
            items.append(item)
    done = items[-1]
    assert isinstance(done, Finished)
    assert agents_run(server) == {"agent-1", "agent-2", "agent-3"}
    assert done.status == "completed", done.reasons
    assert cap.running == before


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_run_whose_calls_a_starved_cap_denied_is_not_completed(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(FanOut.of(2, delays=0.3))
    cap = SpawnCap.shared()
    taken = 0
    while cap.slots.try_take():  # other runs of the process hold every slot
        taken += 1
    policy = Policy(deadline_s=40.0, spawn=SpawnPolicy(wrap_up_reserve_s=36.0))
    items: list[Any] = []
    try:
        with anyio.fail_after(90):
            async for item in teamlead.query(
                "Investigate every part.", claude.options(), policy=policy
            ):
                items.append(item)
    finally:
        for _ in range(taken):
            cap.slots.release()
    done = items[-1]
    assert isinstance(done, Finished)
    assert not agents_run(server)
    assert done.status != "completed" and done.reason != "all_results_used", done
    calls = [t for t in done.tasks if t.kind == "call"]
    assert len(calls) == 2 and all(t.disposition == "missing" for t in calls), calls
    assert all("other runs" in (t.reason or "") for t in calls), calls
