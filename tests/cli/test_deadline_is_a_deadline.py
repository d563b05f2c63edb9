"""The deadline is a deadline: ``Finished`` comes right after it, whatever the upstream does.

On the real CLI offline, against a scripted model that never answers the wrap-up turn: the
wrap-up round is cut at the deadline, and stopping the CLI does not wait the SDK's
graceful-exit period past it.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

import teamlead
from teamlead.events import Finished, Resuming
from teamlead.policy import Policy, SpawnPolicy
from teamlead.testing import Reply, ScriptedRequest
from teamlead.testing.scripts import FanOut

from ..polling import poll
from .conftest import OfflineFactory, cli_processes

pytestmark = [pytest.mark.cli, pytest.mark.slow]

#: Long enough for the CLI to start and be waiting on the model (about 1 s, 2-3 s on a loaded
#: machine) when it comes; the scripted model's 300 s is 75 times longer.
_DEADLINE_S = 4.0
#: With the gate's wrap-up reserve (half of it, 3 s) both halves fit a loaded machine: the
#: fan-out and the quick agent before the wrap point, resuming the CLI for the wrap-up turn
#: after it.
_WRAP_UP_DEADLINE_S = 6.0
_AFTER_S = 2.0  # the goal is 1 s; the rest is headroom for a loaded machine


def _never_answers_the_wrap_up(fan: FanOut) -> Any:
    def script(req: ScriptedRequest) -> Reply:
        if req.role == "other" and "<teamlead-results" in req.last_user_text:
            return Reply.text("too late", delay=300.0)
        return fan(req)

    return script


@pytest.mark.anyio
async def test_finished_comes_within_a_second_of_the_deadline_when_the_wrap_up_never_answers(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(_never_answers_the_wrap_up(FanOut.of(2, delays=[0.2, 300.0])))
    items: list[Any] = []
    started = time.monotonic()
    policy = Policy(deadline_s=_WRAP_UP_DEADLINE_S)
    with anyio.fail_after(60):
        async for item in teamlead.run("Investigate every part.", claude.options(), policy=policy):
            items.append(item)
    elapsed = time.monotonic() - started
    done = items[-1]
    assert isinstance(done, Finished)
    assert any(isinstance(i, Resuming) and i.kind == "wrap_up" for i in items)
    assert server.recorded("other"), "the wrap-up turn never reached the model"
    late = elapsed - _WRAP_UP_DEADLINE_S
    assert late < _AFTER_S, f"Finished came {late:.1f} s late"
    assert done.reason == "deadline" and done.status != "completed", done
    assert poll(lambda: not cli_processes(claude.state_dir), within_s=10)


def _never_answers(req: ScriptedRequest) -> Reply:
    return Reply.text("too late", delay=300.0)


@pytest.mark.anyio
@pytest.mark.parametrize("gate", [True, False], ids=["gate-on", "gate-off"])
async def test_finished_comes_within_a_second_of_the_deadline_when_the_model_never_answers(
    offline: OfflineFactory, gate: bool
) -> None:
    server, claude = offline(_never_answers)
    policy = Policy(deadline_s=_DEADLINE_S, spawn=SpawnPolicy(enabled=gate))
    items: list[Any] = []
    started = time.monotonic()
    with anyio.fail_after(60):
        async for item in teamlead.run("Investigate.", claude.options(), policy=policy):
            items.append(item)
    elapsed = time.monotonic() - started
    done = items[-1]
    assert isinstance(done, Finished)
    assert elapsed < _DEADLINE_S + _AFTER_S, f"Finished came {elapsed - _DEADLINE_S:.1f} s late"
    assert done.status == "failed" and done.reason == "deadline", done
    assert server.recorded("lead"), "the deadline came before the CLI asked the model"
    assert poll(lambda: not cli_processes(claude.state_dir), within_s=10)
