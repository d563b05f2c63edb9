"""Progress lines and reasons read as full sentences, also when a value is missing.

A task that stopped with no summary and no transcript, or one the CLI started with no
description, used to print ``taken from its none``, ``(result via none)`` and
``task stopped: `` (nothing after the colon).
"""

from __future__ import annotations

import io

import pytest

from teamlead._cli.team_view import PlainProgress
from teamlead.events import FallbackUsed

from .parsing import HandFed
from .scripted_query import (
    Script,
    fan_out,
    lead,
    notified,
    of_type,
    result,
    run,
    synthesis_failed,
)

pytestmark = pytest.mark.anyio


def _plain_lines(items: list[object]) -> list[str]:
    out = io.StringIO()
    progress = PlainProgress(out, HandFed())
    for item in items:
        progress.handle(item)
    return [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]


async def test_a_stopped_task_that_left_nothing_is_said_in_words() -> None:
    script = Script(
        [*fan_out(("t1", "probe")), notified("t1", status="stopped"), *synthesis_failed()],
        [lead("Final without the probe", msg_id="m2"), result("Final without the probe")],
    )
    items, done = await run(script)

    (fallback,) = of_type(items, FallbackUsed)
    assert fallback.source == "none"
    assert 'task "probe" ended stopped and left no result' in done.reasons
    assert not any("none" in reason for reason in done.reasons)
    lines = _plain_lines(items)
    assert "'probe' (stopped) left no result: no summary and no transcript" in lines
    assert "task stopped: probe" in lines
    assert not any(line.endswith("none") or "(result via" in line for line in lines)


async def test_a_stopped_task_with_a_summary_says_where_its_words_came_from() -> None:
    script = Script(
        [
            *fan_out(("t1", "probe")),
            notified("t1", status="stopped", summary="half done"),
            *synthesis_failed(),
        ],
        [lead("Final with half", msg_id="m2"), result("Final with half")],
    )
    items, done = await run(script)

    assert 'task "probe" ended stopped; what it left came from its summary' in done.reasons
    assert "result of 'probe' (stopped) taken from its summary" in _plain_lines(items)


async def test_a_task_without_a_description_is_named_by_its_id() -> None:
    script = Script(
        [*fan_out(("t1", "")), notified("t1", status="stopped"), *synthesis_failed()],
        [lead("Final", msg_id="m2"), result("Final")],
    )
    items, done = await run(script)

    lines = _plain_lines(items)
    assert "task started: t1 (no description) [agent]" in lines
    assert "task stopped: t1 (no description)" in lines
    assert "task t1 (stopped) left no result: no summary and no transcript" in lines
    assert 'task "t1" ended stopped and left no result' in done.reasons
