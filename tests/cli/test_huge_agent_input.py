"""A huge Agent input never kills the run, on the real CLI offline.

One Agent call with a 1 MB description makes its model message (and its hook's input)
larger than the SDK's default buffer of 1 MiB; the run raises the bound and every call is
accounted for.
"""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import anyio
import pytest

import teamlead
from teamlead._run.state import MAX_MESSAGE_BYTES
from teamlead.events import Finished
from teamlead.testing import AgentCall
from teamlead.testing.scripts import FanOut

from .conftest import OfflineFactory
from .scripted import agents_run

pytestmark = [pytest.mark.cli, pytest.mark.slow]

_HUGE = 1024 * 1024


def _fan_out_with_a_huge_description() -> FanOut:
    calls = [
        AgentCall(description=f"agent-{i}", prompt=f"SUBTASK-{i}: report one finding.")
        for i in range(1, 5)
    ]
    calls.append(AgentCall(description="huge-" + "x" * _HUGE, prompt="SUBTASK-5: report."))
    return FanOut(agents=calls, delays=dict.fromkeys((c.description for c in calls), 0.3))


@pytest.mark.anyio
async def test_a_1mb_agent_description_does_not_kill_the_run_and_every_call_is_accounted_for(
    offline: OfflineFactory,
) -> None:
    assert MAX_MESSAGE_BYTES > 4 * _HUGE
    server, claude = offline(_fan_out_with_a_huge_description())
    items: list[Any] = []
    with anyio.fail_after(120):
        async for item in teamlead.run("Investigate every part.", claude.options()):
            items.append(item)
    done = items[-1]
    assert isinstance(done, Finished)
    assert len(agents_run(server)) == 5
    assert len([t for t in done.tasks if t.kind == "task"]) == 5, done.tasks
    assert done.status == "completed", done.reasons


# After its reader's fatal error the SDK leaves the CLI transport's stdout pipe open; the
# warning it gives when collected is the SDK's, and is collected here, inside this test,
# whatever the test's outcome.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.anyio
async def test_a_message_over_the_buffer_is_recovered_from_with_every_call_accounted_for(
    offline: OfflineFactory,
) -> None:
    """The SDK's reader dies on the huge call's message. The four agents before it were
    admitted and ran, whether or not the stream showed their ``task_started`` before it
    broke (under load it often does not): their launches are read back from the session's
    transcript, their results from their own transcripts, and the lead is resumed."""
    server, claude = offline(_fan_out_with_a_huge_description())
    options = dataclasses.replace(claude.options(), max_buffer_size=256 * 1024)
    items: list[Any] = []
    try:
        with anyio.fail_after(120):
            async for item in teamlead.run("Investigate every part.", options):
                items.append(item)
        done = items[-1]
        assert isinstance(done, Finished)
        # the lead was resumed and answered with the four results
        assert done.resumes >= 1 and done.result, (done.status, done.reasons, done.tasks)
        assert all(f"FINDING[agent-{i}]" in done.result for i in range(1, 5)), done.result
        huge = [t for t in done.tasks if t.description.startswith("huge-")]
        assert len(huge) == 1 and huge[0].status == "rejected", done.tasks
        assert huge[0].disposition == "missing" and "max_buffer_size" in (huge[0].reason or "")
        tasks = [t for t in done.tasks if t.kind == "task"]
        assert sorted(t.description for t in tasks) == [f"agent-{i}" for i in range(1, 5)]
        assert len(done.tasks) == 5, done.tasks  # every call accounted for, once
        assert done.status == "partial", done.reasons
        assert len(agents_run(server)) == 4
    finally:
        gc.collect()
