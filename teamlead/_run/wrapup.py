"""The deadline's wrap-up (Pi's rule): at the reserve, stop what still runs, then answer.

When the spawn gate's wrap-up point cuts a round, the session calls :func:`wrap_up`: the
gate closes (queued calls are denied), the tasks still running are marked stopped (the
round already ended the CLI's process tree, or ``wrap_round`` stops them on a live
client), what finished is collected, and one round resumes the lead with no tools,
quoting every collected result and naming what did not finish. The ledger records the
stop as ``deadline``, so the run ends ``partial`` with an answer from the finished work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .._redact import redact
from ..clock import Clock
from ..events import Resuming
from ..policy import Policy
from ..tracker import Tracker
from .collect import Collector
from .ledger import Ledger
from .resume_prompt import Delivery
from .round import Round
from .spawning import GateFeed, wrap_up_prompt

__all__ = ["WrapFn", "wrap_up"]

#: The wrap-up round for a prompt, after stopping the given task ids.
WrapFn = Callable[[str, list[str]], Awaitable[Round]]

_COLLECT_SHARE = 0.25  # of the time left: collecting must leave room for the answer


async def wrap_up(
    feed: GateFeed,
    tracker: Tracker,
    collected: Collector,
    ledger: Ledger,
    policy: Policy,
    *,
    clock: Clock,
    deadline: float,
    pending: list[Delivery],
    wrap_round: WrapFn,
) -> AsyncIterator[Any]:
    """Run the wrap-up; yields its events and the round's messages (not ``Finished``)."""
    feed.gate.close("the run's deadline is near: no more agents")
    for event in feed.drain():
        yield event
    open_tasks = tracker.open_tasks
    open_ids = [task.task_id for task in open_tasks]
    unfinished = [task.description or task.task_id for task in open_tasks]
    for task in open_tasks:
        task.status, task.ended_at = "stopped", clock.monotonic()
    left = deadline - clock.monotonic()
    collecting = collected.collect(
        tracker, pending, deadline=clock.monotonic() + _COLLECT_SHARE * left
    )
    async for event in collecting:
        yield event
    text, used = wrap_up_prompt(pending, unfinished, policy)
    delivered = pending[:used]
    ledger.resumes += 1
    yield Resuming(
        session_id=tracker.session_id or "",
        round=ledger.resumes,
        attempt=1,
        deliveries=[d.key for d in delivered],
        reasons=["the deadline's wrap-up: tools disabled, unfinished agents stopped"],
        kind="wrap_up",
    )
    this_round = await wrap_round(text, open_ids)
    async for item in this_round:
        yield item
    ledger.after_round(this_round.outcome, first=False)
    if this_round.outcome.ok:
        ledger.reasons += await collected.absorb(delivered)
    names = ", ".join(f'"{redact(n)}"' for n in unfinished) or "none"
    ledger.stopped(
        "deadline",
        f"the deadline of {policy.deadline_s:g} s came near: wrapped up with the "
        f"finished work; stopped unfinished: {names}",
    )
