"""One round: a lead turn's messages read within the deadline, then the round's outcome.

Each message is fed to the run once, shown to the spawn gate and yielded unchanged; each
read is bounded by the run's deadline (and a client's stream by the idle timeout). With a
session store, the open workflows' journals are mirrored into it as the round goes (after
each message that moved a workflow, every :data:`JOURNAL_POLL_S` while a read waits, and at
the end), so a machine that dies leaves the store every agent that finished. The round
watches the run's bus on its own subscription for the lead's 429/529 ``retry-after``, which
a resume retry then waits at least (:attr:`RoundOutcome.retry_after`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import anyio
import anyio.abc

from ..clock import DeadlineClock, move_on_at
from ..events import RateLimited
from ..policy import TRANSIENT_STATUSES
from ..tracker import (
    ResultSeen,
    SessionStateSeen,
    TrackedEvent,
    Tracker,
    WorkflowAgentChanged,
    WorkflowEnded,
    WorkflowLaunched,
)
from .bus import RunEvent
from .outcome import ErrorKind, RoundOutcome
from .state import RunState
from .workflow_permission import workflow_denials

__all__ = ["JOURNAL_POLL_S", "Round", "answered_alone", "settled"]

#: How often a waiting read mirrors the open workflows' journals into the session store.
JOURNAL_POLL_S = 0.25
_WORKFLOW_EVENTS = (WorkflowAgentChanged, WorkflowEnded, WorkflowLaunched)

_CLOSE_TIMEOUT_S = 20.0  # a guard on tearing down the CLI process, not a policy deadline
_END: Any = object()  # the stream ended
_NOTHING: Any = object()  # the read's ``until`` came first (a stream may yield None itself)
_BUDGET_GRACE_S = 2.0  # from a budget reached to the cut
#: From the cut's end of the CLI to cancelling a read that its end has not ended: a
#: cancellation inside the SDK's generator can interrupt the SDK's own clean-up (leaving its
#: CLI's pipes and its message stream open), so the read is left to see the stream end.
_CUT_READ_GRACE_S = 5.0


class Round:
    """Iterate one round's messages; read :attr:`outcome` once iteration has ended.

    Args:
        state: the run: its tracker is fed every message, its bus watched for the lead's
            Retry-After, its policy and clock bound the reads.
        stream: the messages, from a query generator or a client.
        deadline: when the round is cut (a ``clock.monotonic()`` value); default the
            run's wrap-up point.
        settle: stop once the round's work is absorbed (a result came after every task
            ended) instead of at the end of the stream: a client's stream never ends.
        send: awaited before the first read, e.g. a client's ``query(prompt)``; its
            failure is the caller's, not the round's.
        on_cut: awaited when ``deadline`` comes while a read waits, before the stream is
            closed (the spawn gate's wrap-up ends the CLI's process tree there, so closing
            does not wait for the CLI's graceful exit); the round then ends ``deadline``.
            It returns whether it ended the stream's process: the read is then left to
            see the stream's end (for at most :data:`_CUT_READ_GRACE_S`), else cancelled.
        budget_cut: a budget reached cuts the round too (not the wrap-up round, which
            a budget may have started: only its deadline cuts it).
    """

    def __init__(
        self,
        state: RunState,
        stream: AsyncIterator[Any],
        *,
        deadline: float | None = None,
        settle: bool = False,
        send: Callable[[], Awaitable[None]] | None = None,
        on_cut: Callable[[], Awaitable[bool]] | None = None,
        budget_cut: bool = True,
    ) -> None:
        self._state = state
        self._budget_cut = budget_cut
        self._stream = stream
        self._on_cut = on_cut
        self._cut = False
        self._stopped = False
        self._send = send
        self._tracker = state.stream.tracker
        self._policy = state.ask.policy
        self._clock = state.clock
        self._deadline = state.deadline.wrap_at if deadline is None else deadline
        self._settle = settle
        self._stderr_tail = state.stream.stderr_tail
        self._cli_state = state.stream.cli_state
        self._retry_after: float | None = None
        self._outcome: RoundOutcome | None = None
        # the pending read, what may cut it, and its timers (see :meth:`_read`)
        self._loop: asyncio.AbstractEventLoop | None = None  # set once iterated
        self._reading: anyio.abc.TaskGroup | _LoopTasks | None = None
        self._tripped = False
        self._read_on_cut: Callable[[], Awaitable[bool]] | None = None
        self._read_budget = False
        self._read_wrap = False
        self._spawned = False
        self._alarms: list[asyncio.TimerHandle] = []
        self._until: tuple[float, asyncio.TimerHandle] | None = None

    @property
    def outcome(self) -> RoundOutcome:
        """The round's outcome; only once iteration has ended."""
        if self._outcome is None:
            raise RuntimeError("the round's outcome is known only once its stream has ended")
        return self._outcome

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Any]:
        watch = self._state.events.subscribe()  # the lead's Retry-After, whoever reads
        if self._send is not None:
            try:
                await self._send()
            except BaseException:
                watch.close()
                raise
        start = len(self._tracker.results)
        error: str | None = None
        kind: ErrorKind | None = None
        exc_status: int | None = None
        self._loop = None if isinstance(self._clock, DeadlineClock) else _asyncio_loop()
        self._state.stream.cli_gone = ended = False
        unsubscribe = (
            self._state.stop.subscribe(self._on_stop),
            self._state.admission.on_exhausted(self._on_exhausted),
        )
        try:
            while True:
                now = self._clock.monotonic()
                until, idle = self._deadline, False
                if self._settle and now + self._policy.idle_timeout_s <= until:
                    until, idle = now + self._policy.idle_timeout_s, True
                if self._state.stop.requested:
                    error, kind = f"stopped: {self._state.stop.reason}", "interrupted"
                    break
                if until <= now:
                    error, kind = f"deadline of {self._policy.deadline_s:g} s reached", "deadline"
                    break
                message = await self._read(until, cut=not idle)
                if self._stopped or self._state.stop.requested:
                    error, kind = f"stopped: {self._state.stop.reason}", "interrupted"
                    break
                if message is _END and not self._cut:
                    ended = True
                    break
                if self._cut:
                    error, kind = self._cut_error()
                    break
                if message is _NOTHING:
                    error, kind = f"deadline of {self._policy.deadline_s:g} s reached", "deadline"
                    if idle:
                        error, kind = f"no message for {self._policy.idle_timeout_s:g} s", "idle"
                    break
                events = self._state.feed(message)
                if self._state.ask.store is not None and any(
                    isinstance(e, _WORKFLOW_EVENTS) for e in events
                ):
                    await self._state.sync_journals()
                state = session_state(events)
                if state is not None:
                    self._cli_state = state
                yield message
                self._state.admission.observe(message, events)
                for denied in workflow_denials(events):
                    yield denied
                if self._settle and settled(
                    self._tracker, start, events, reports_state=self._cli_state is not None
                ):
                    break
        except Exception as exc:  # the generator's own failure ends the stream; never cancellation
            error, kind = describe_error(exc), "raised"
            if self._stopped or self._state.stop.requested:  # the stop ended its CLI
                error, kind = f"stopped: {self._state.stop.reason}", "interrupted"
            elif self._cut:  # the stream broke because the cut ended its CLI
                error, kind = self._cut_error()
            if self._stderr_tail:
                error += f" (the CLI said: {self._stderr_tail[-1][:300]})"
            exc_status = _status_of(exc)
        finally:
            self._disarm()
            for leave in unsubscribe:
                leave()
            self._note_retry_after(watch.drain())
            watch.close()
            aclose = getattr(self._stream, "aclose", None)
            if aclose is not None:
                # a dead stream may raise on close; there is nothing left to do about it
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(_CLOSE_TIMEOUT_S),
                    contextlib.suppress(Exception),
                ):
                    await aclose()
                    # its end came and its close returned: the SDK waited for its CLI's exit
                    self._state.stream.cli_gone = ended
        await self._state.sync_journals()  # what the round's CLI journaled last
        self._outcome = self._conclude(self._tracker.results[start:], error, kind, exc_status)

    def _cut_error(self) -> tuple[str, ErrorKind]:
        """Why the wrap-up point cut the round: a graceful stop, the deadline, or a budget
        reached."""
        stop = self._state.stop
        if stop.wrapping:
            return f"stopped: {stop.wrap_reason}", "stopping"
        reason = self._state.agents.exhaust_reason
        if reason is not None and self._clock.monotonic() < self._deadline:
            return f"the run's {reason.replace('_', ' ')} is reached", "budget"
        return f"deadline of {self._policy.deadline_s:g} s reached", "deadline"

    def _note_retry_after(self, events: list[RunEvent]) -> None:
        """Keep the longest Retry-After of a failed lead request among ``events``."""
        for event in events:
            if (
                isinstance(event, RateLimited)
                and event.role == "lead"
                and event.outcome == "passed"
                and event.retry_after_s is not None
            ):
                self._retry_after = max(self._retry_after or 0.0, event.retry_after_s)

    async def _read(self, until: float, *, cut: bool) -> Any:
        """The next message; :data:`_NOTHING` once ``until`` came first; :data:`_END` at the end.

        A stop asked of the run (:attr:`RunState.stop`) ends the read at once too. The read
        spawns no task of its own: ``until`` and a budget's grace are event-loop timers
        (tasks only on a clock with its own timers, or off asyncio), and a stop, a graceful
        stop or a budget reached are told by their listeners; only what cuts the read
        starts a task, which runs ``on_cut`` while the read still waits (on asyncio, with no
        journal to mirror, in a :class:`_LoopTasks`: free when nothing cuts the read).
        """
        self._read_on_cut = self._on_cut if cut else None
        self._read_budget = self._read_on_cut is not None and self._budget_cut
        # a graceful stop cuts every round but the wrap-up's own, as the wrap-up point does
        self._read_wrap = self._budget_cut and self._state.admission.gated
        message: Any = _NOTHING
        failure: Exception | None = None
        group = (
            anyio.create_task_group()
            if self._loop is None or self._state.watches_journals
            else _LoopTasks()
        )
        async with group as tg:
            self._reading, self._tripped, self._spawned = tg, False, False
            try:
                self._arm_until(until)
                if self._read_budget and self._state.admission.exhaust_reason is not None:
                    self._alarm(self._clock.monotonic() + _BUDGET_GRACE_S)
                self._on_stop()
                if self._state.watches_journals:
                    self._spawn(self._mirror_journals)
                message = await self._stream.__anext__()
            except StopAsyncIteration:
                message = _END
            except Exception as exc:  # re-raised below, outside the task group
                failure = exc
            finally:
                self._reading = None
                for alarm in self._alarms:
                    alarm.cancel()
                self._alarms.clear()
                if self._spawned:  # its timers, and a cut's wait for the read to end
                    tg.cancel_scope.cancel()
        if failure is not None and not self._cut:
            raise failure
        return _END if failure is not None else message

    def _spawn(self, task: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        """Start ``task`` in the pending read's group (which is cancelled then, once the
        read has its message)."""
        assert self._reading is not None
        self._spawned = True
        self._reading.start_soon(task, *args)

    def _arm_until(self, until: float) -> None:
        """Trip the pending read at ``until``: one event-loop timer, kept from read to read
        while ``until`` stays the same (the round's deadline)."""
        if self._loop is None:
            self._alarm(until)
            return
        if self._until is not None:
            if self._until[0] == until:
                return
            self._until[1].cancel()
        delay = max(0.0, until - self._clock.monotonic())
        self._until = (until, self._loop.call_later(delay, self._until_came))

    def _until_came(self) -> None:
        self._until = None  # the next read arms it again (and trips at once)
        self._trip()

    def _disarm(self) -> None:
        """The round is over: its ``until`` timer goes."""
        if self._until is not None:
            self._until[1].cancel()
            self._until = None

    def _alarm(self, at: float) -> None:
        """Trip the pending read once the run's clock reaches ``at``."""
        if self._loop is None:
            self._spawn(self._alarm_task, at)
        else:
            delay = max(0.0, at - self._clock.monotonic())
            self._alarms.append(self._loop.call_later(delay, self._trip))

    async def _alarm_task(self, at: float) -> None:
        with move_on_at(self._clock, at):
            await anyio.sleep_forever()
        self._trip()

    def _on_stop(self) -> None:
        """A stop, or a graceful stop where it cuts this read, trips the pending read."""
        stop = self._state.stop
        if stop.requested or (self._read_wrap and stop.wrapping):
            self._trip()

    def _on_exhausted(self) -> None:
        """A budget reached cuts the pending read after a grace: the relay refuses new agent
        requests already, and the notifications of work that just finished reach the
        stream."""
        if self._reading is not None and self._read_budget:
            self._alarm(self._clock.monotonic() + _BUDGET_GRACE_S)

    def _trip(self) -> None:
        """Something ends the pending read: cut it from a task of its own group."""
        tg = self._reading
        if tg is None or self._tripped:
            return
        self._tripped = True
        self._spawn(self._cut_read, tg)

    async def _cut_read(self, tg: anyio.abc.TaskGroup | _LoopTasks) -> None:
        """End the pending read: once ``until`` came with nothing to cut, cancel it; else
        mark the round cut and run ``on_cut`` (shielded), then cancel the read, unless
        ``on_cut`` ended the stream's process: its end then ends the read (which cancels
        this task), and only a read still waiting :data:`_CUT_READ_GRACE_S` later is."""
        stop = self._state.stop
        self._stopped = stop.requested
        wrapped = self._read_wrap and stop.wrapping
        on_cut = self._read_on_cut
        if on_cut is None and not self._stopped and not wrapped:  # ``until`` came
            tg.cancel_scope.cancel()
            return
        self._cut = True
        ended = False
        if on_cut is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT_S):
                ended = await on_cut()
        if ended:
            await anyio.sleep(_CUT_READ_GRACE_S)
        tg.cancel_scope.cancel()

    async def _mirror_journals(self) -> None:
        """While a read waits: mirror the open workflows' journals every so often."""
        while True:
            await self._clock.sleep(JOURNAL_POLL_S)
            await self._state.sync_journals()

    def _conclude(
        self,
        results: list[ResultSeen],
        error: str | None,
        kind: ErrorKind | None,
        exc_status: int | None,
    ) -> RoundOutcome:
        real = [r for r in results if not r.placeholder]
        last = real[-1] if real else None
        if last is not None and last.ok and kind != "deadline":
            return RoundOutcome(ok=True, results=results, cli_state=self._cli_state)
        if error is None:  # the lead's own error result, or none at all
            kind, error = "result", "the stream ended without a result"
            if last is not None and last.api_error_status:
                error = f"API error {last.api_error_status}: {last.text}"
            elif last is not None and last.text:
                error = last.text
        if self._state.relay is not None:
            error = self._state.relay.in_user_terms(error)  # the upstream, not the relay
        status = last.api_error_status if last is not None and not last.ok else exc_status
        transient = status in TRANSIENT_STATUSES
        return RoundOutcome(
            ok=False,
            results=results,
            error=error,
            error_kind=kind,
            transient=transient,
            retry_after=self._retry_after if transient else None,
            cli_state=self._cli_state,
        )


class _LoopTasks:
    """The part of a task group a read uses, on asyncio's own tasks: anyio's group takes an
    event-loop round at its end even when it started nothing, once per message read; this
    one takes none then. Each task runs in a cancel scope of its own, cancelled at the
    group's end (as a group's children are, once the read cancels its group) and awaited
    there, shielded."""

    def __init__(self) -> None:
        self.cancel_scope = anyio.CancelScope()
        self._tasks: list[tuple[anyio.CancelScope, asyncio.Task[None]]] = []

    async def __aenter__(self) -> _LoopTasks:
        self.cancel_scope.__enter__()
        return self

    def start_soon(self, task: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        scope = anyio.CancelScope()

        async def scoped() -> None:
            with scope:
                try:
                    await task(*args)
                except Exception:  # as in a task group, its failure ends the read
                    self.cancel_scope.cancel()
                    raise

        self._tasks.append((scope, asyncio.create_task(scoped())))

    async def __aexit__(self, *exc: Any) -> bool:
        try:
            if self._tasks:  # nothing started: nothing to wait for, no event-loop round
                with anyio.CancelScope(shield=True):
                    for scope, started in self._tasks:
                        scope.cancel()
                        await started
        finally:
            absorbed = self.cancel_scope.__exit__(*exc)
        return bool(absorbed)


def settled(
    tracker: Tracker, start: int, events: list[TrackedEvent], *, reports_state: bool
) -> bool:
    """Whether a CLI that is kept running is idle: its turns are over and no task can inject
    one (a client's round, or ``teamlead-claude``'s CLI, ends there). ``start`` is how many
    results ``tracker`` held when the round began, ``events`` what the run made of the
    message just read.

    A CLI that reports its session state (``reports_state``) is idle exactly after a real
    result; without that, a real result with no task running is the best sign (a queued
    notification turn can still follow).
    """
    answered = any(not r.placeholder for r in tracker.results[start:])
    if not answered or tracker.open_tasks:
        return False
    if reports_state:
        return session_state(events) == "idle"
    last = events[-1] if events else None
    return isinstance(last, ResultSeen) and not last.placeholder


def answered_alone(tracker: Tracker, start: int) -> bool:
    """Whether the lead answered the run's first turn by itself: a successful result with
    text since result ``start``, and no agent, task or workflow ever started or refused.
    Nothing is outstanding then and nothing can be delivered later, so that result is the
    run's answer and its reader may have it before the CLI has even exited."""
    delegated = tracker.tasks or tracker.agent_calls or tracker.invalid_calls
    last = tracker.results[-1] if len(tracker.results) > start else None
    return (
        not delegated
        and tracker.first_delegation_at is None
        and last is not None
        and last.ok
        and bool((last.text or "").strip())
    )


def session_state(events: list[TrackedEvent]) -> str | None:
    """The CLI's session state if one of ``events`` reports it (the last one wins)."""
    states = [e.state for e in events if isinstance(e, SessionStateSeen)]
    return states[-1] if states else None


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio event loop, whose timers cost no task; ``None`` off asyncio
    (trio), where a read's timers are tasks."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message``, for an error that ended a stream."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _status_of(exc: BaseException) -> int | None:
    for attr in ("api_error_status", "status_code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    return None
