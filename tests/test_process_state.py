"""What a process's runs share lives in one object, and a run's own ceilings stay its own.

:class:`teamlead.ProcessState` holds the relays, governors, spawn cap and live runs;
two states share none of them. :class:`~teamlead._gate.limits.RunLimits` holds one
run's ceilings on its requests in flight: first come first served, bounded waits on the
injected clock, a place given back however its holder leaves.
"""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import pytest

import teamlead
from teamlead._gate.limits import NoPlace, RunLimits
from teamlead._relay.shared import account_of
from teamlead._run.process import default_process_state
from teamlead._run.stop import RunStop
from teamlead.policy import LimitsPolicy
from teamlead.testing import FakeClock

pytestmark = pytest.mark.anyio

OPUS = "anthropic/claude-opus-5-5"
HAIKU = "anthropic/claude-haiku-5"


@pytest.mark.parametrize(
    ("limits", "key", "expected"),
    [
        (LimitsPolicy(), OPUS, None),
        (LimitsPolicy(default=3), OPUS, 3),
        (LimitsPolicy(models={"claude-opus-5-5": 2}, default=5), OPUS, 2),
        (LimitsPolicy(models={"claude-haiku-*": 4}, default=5), HAIKU, 4),
        (LimitsPolicy(models={"claude-haiku-*": 4}, default=5), OPUS, 5),
        (LimitsPolicy(providers={"anthropic": 2}, default=5), OPUS, 2),
        (LimitsPolicy(total=1, default=5), OPUS, 1),
        (LimitsPolicy(providers={"other": 1}), OPUS, None),
    ],
)
def test_a_runs_ceiling_for_a_key_is_the_lowest_that_applies(
    limits: LimitsPolicy, key: str, expected: int | None
) -> None:
    assert RunLimits(limits).limit_of(key) == expected


async def test_a_full_key_queues_first_come_first_served_and_a_free_key_passes() -> None:
    clock = FakeClock()
    limits = RunLimits(LimitsPolicy(models={"claude-opus-5-5": 1}), clock)
    order: list[str] = []
    release = anyio.Event()

    async def request(name: str, key: str) -> None:
        async with limits.hold(key, None):
            order.append(name)
            if name == "first":
                await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(request, "first", OPUS)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(request, "second", OPUS)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(request, "haiku", HAIKU)  # no ceiling of its own: never waits
        await anyio.wait_all_tasks_blocked()
        assert order == ["first", "haiku"] and limits.in_flight(OPUS) == 1
        release.set()
    assert order == ["first", "haiku", "second"]
    assert limits.in_flight() == 0


async def test_a_wait_under_the_runs_ceiling_ends_at_its_deadline_and_leaks_nothing() -> None:
    clock = FakeClock()
    limits = RunLimits(LimitsPolicy(total=1), clock)
    outcome: list[str] = []
    async with limits.hold(OPUS, None):

        async def late() -> None:
            try:
                async with limits.hold(OPUS, clock.monotonic() + 30):
                    outcome.append("held")
            except NoPlace:
                outcome.append("no place")

        async with anyio.create_task_group() as tg:
            tg.start_soon(late)
            await anyio.wait_all_tasks_blocked()
            clock.advance(30)
    assert outcome == ["no place"]
    assert limits.in_flight() == 0
    async with limits.hold(OPUS, clock.monotonic()):  # the place it waited for is free
        assert limits.in_flight(OPUS) == 1


async def test_a_cancelled_waiter_leaves_the_queue_and_the_next_is_served() -> None:
    limits = RunLimits(LimitsPolicy(total=1), FakeClock())
    served: list[str] = []
    async with anyio.create_task_group() as tg:
        gate = anyio.Event()

        async def holder() -> None:
            async with limits.hold(OPUS, None):
                await gate.wait()

        async def waiter(name: str) -> None:
            async with limits.hold(OPUS, None):
                served.append(name)

        tg.start_soon(holder)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as doomed:
            doomed.cancel()
            async with anyio.create_task_group() as inner:
                inner.start_soon(waiter, "cancelled")
        tg.start_soon(waiter, "next")
        await anyio.wait_all_tasks_blocked()
        gate.set()
    assert served == ["next"] and limits.in_flight() == 0


def test_two_process_states_share_no_spawn_cap_and_no_live_run() -> None:
    one, two = teamlead.ProcessState(spawn_limit=3), teamlead.ProcessState(spawn_limit=5)
    assert one.spawn_cap is not two.spawn_cap
    assert (one.spawn_cap.limit, two.spawn_cap.limit) == (3, 5)
    assert one.relays is not two.relays
    assert one.telemetry is not two.telemetry and one.telemetry is one.telemetry
    stop = RunStop()
    one.enter(stop)
    assert (one.live_runs, two.live_runs) == (1, 0)
    assert two.stop_every_run("SIGINT") == 0 and not stop.requested
    assert one.stop_every_run("SIGTERM") == 1 and stop.reason == "SIGTERM"
    stop.done()
    assert one.live_runs == 0


@pytest.mark.parametrize("wraps", [False, True], ids=["stop", "graceful stop"])
async def test_a_stop_of_either_kind_cancels_the_wait_it_guards(wraps: bool) -> None:
    stop = RunStop()
    ended: list[str] = []

    async def wait_for_work() -> None:
        with stop.cancels():
            await anyio.sleep_forever()
        ended.append("cancelled")

    with anyio.fail_after(10):  # a bound, never reached when the stop cancels the wait
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_work)
            await anyio.wait_all_tasks_blocked()
            assert ended == []
            if wraps:
                stop.wrap_up("teamlead stop")
            else:
                stop.request("SIGTERM")
    assert ended == ["cancelled"]
    with stop.cancels():  # a stop asked before the wait cancels it at once
        await anyio.sleep_forever()


async def test_a_wait_no_stop_reaches_runs_to_its_end() -> None:
    clock = FakeClock()
    with RunStop().cancels():
        await clock.sleep(5)
    assert clock.monotonic() == 5


def test_the_default_process_state_is_made_once() -> None:
    assert default_process_state() is default_process_state()


def test_no_module_of_teamlead_rebinds_a_global_but_the_default_state() -> None:
    # what runs share lives in a ProcessState; a module-level cache rebound with
    # `global` (as the telemetry providers once were) would be a world of its own
    package = Path(teamlead.__file__).parent
    rebinding = sorted(
        f"{path.relative_to(package)}: global {', '.join(node.names)}"
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Global)
    )
    assert rebinding == ["_run/process.py: global _default"]


def test_an_account_is_its_upstream_and_credential_and_holds_no_secret() -> None:
    key = {"ANTHROPIC_API_KEY": "sk-ant-secret"}
    real = account_of("https://api.anthropic.com", key)
    assert real == account_of("https://API.anthropic.com/", key)
    assert real != account_of("https://api.anthropic.com", {"ANTHROPIC_API_KEY": "sk-other"})
    assert real != account_of("http://127.0.0.1:8123", key)  # a scripted upstream is apart
    assert real != account_of("https://gateway.example/anthropic", key)
    assert "secret" not in real and real.startswith("api.anthropic.com#")
    login = account_of("https://api.anthropic.com", {"CLAUDE_CONFIG_DIR": "/a/.claude"})
    assert login != real  # a key is another account than the login
    assert login == account_of("https://api.anthropic.com", {"CLAUDE_CONFIG_DIR": "/b/.claude"})
    assert account_of("http://user:pw@127.0.0.1:9/v", {}).startswith("127.0.0.1:9#")
