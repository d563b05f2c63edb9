"""One round: a lead turn's messages read within the deadline, then the round's outcome.

A :class:`Round` is an async iterator over one stream (a query generator, or a client's
``receive_messages()``). It feeds every message to the tracker and yields it unchanged.
Each read is bounded by the run's deadline on the injected clock (and, for a client's
never-ending stream, by the idle timeout). When iteration ends the stream is closed and
:attr:`Round.outcome` says whether the lead answered, and if not, why, so nothing but
the SDK's own messages travels in the stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import anyio

from ..clock import Clock, move_on_at
from ..policy import TRANSIENT_STATUSES, Policy
from ..tracker import ResultSeen, Tracker

__all__ = ["ErrorKind", "Round", "RoundOutcome"]

#: Why a round ended without an answer: the run's deadline, a client's silence, the
#: generator raising, or the lead's own error result (or no result at all).
ErrorKind: TypeAlias = Literal["deadline", "idle", "raised", "result"]

_CLOSE_TIMEOUT_S = 20.0  # a guard on tearing down the CLI process, not a policy deadline


@dataclass
class RoundOutcome:
    """How one round ended: ``ok`` when its last real result was a success."""

    ok: bool
    results: list[ResultSeen]
    error: str | None = None
    error_kind: ErrorKind | None = None
    transient: bool = False
    retry_after: float | None = None

    @property
    def cost_usd(self) -> float:
        """The round's cost: the CLI reports its process's running total on every result,
        so the largest is the round's."""
        return max((r.cost_usd or 0.0 for r in self.results), default=0.0)


class Round:
    """Iterate one round's messages; read :attr:`outcome` once iteration has ended.

    Args:
        stream: the messages, from a query generator or a client.
        tracker: follows the session; fed every message.
        policy: ``deadline_s`` and ``idle_timeout_s`` for the error texts.
        clock: the clock the deadline is on.
        deadline: the run's deadline, a ``clock.monotonic()`` value.
        settle: stop once the round's work is absorbed (a result came after every task
            ended) instead of at the end of the stream: a client's stream never ends.
        cli_state: the last ``session_state_changed`` state seen in earlier rounds.
        stderr_tail: the CLI's last stderr lines, quoted when the stream raises.
        send: awaited before the first read, e.g. a client's ``query(prompt)``; its
            failure is the caller's, not the round's.
    """

    def __init__(
        self,
        stream: AsyncIterator[Any],
        *,
        tracker: Tracker,
        policy: Policy,
        clock: Clock,
        deadline: float,
        settle: bool = False,
        cli_state: str | None = None,
        stderr_tail: Sequence[str] = (),
        send: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._stream = stream
        self._send = send
        self._tracker = tracker
        self._policy = policy
        self._clock = clock
        self._deadline = deadline
        self._settle = settle
        self._stderr_tail = stderr_tail
        self.cli_state = cli_state
        self._outcome: RoundOutcome | None = None

    @property
    def outcome(self) -> RoundOutcome:
        """The round's outcome; only once iteration has ended."""
        if self._outcome is None:
            raise RuntimeError("the round's outcome is known only once its stream has ended")
        return self._outcome

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Any]:
        if self._send is not None:
            await self._send()
        start = len(self._tracker.results)
        error: str | None = None
        kind: ErrorKind | None = None
        exc_status: int | None = None
        try:
            while True:
                now = self._clock.monotonic()
                until, idle = self._deadline, False
                if self._settle and now + self._policy.idle_timeout_s <= until:
                    until, idle = now + self._policy.idle_timeout_s, True
                if until <= now:
                    error, kind = f"deadline of {self._policy.deadline_s:g} s reached", "deadline"
                    break
                message: Any = None
                with move_on_at(self._clock, until):
                    try:
                        message = await self._stream.__anext__()
                    except StopAsyncIteration:
                        break
                if message is None:
                    if idle:
                        error, kind = f"no message for {self._policy.idle_timeout_s:g} s", "idle"
                    else:
                        error = f"deadline of {self._policy.deadline_s:g} s reached"
                        kind = "deadline"
                    break
                events = self._tracker.feed(message)
                state = session_state(message)
                if state is not None:
                    self.cli_state = state
                yield message
                if self._settle and self._settled(start, events, state):
                    break
        except Exception as exc:  # the generator's own failure ends the stream; never cancellation
            error, kind = describe(exc), "raised"
            if self._stderr_tail:
                error += f" (the CLI said: {self._stderr_tail[-1][:300]})"
            exc_status = _status_of(exc)
        finally:
            aclose = getattr(self._stream, "aclose", None)
            if aclose is not None:
                # a dead stream may raise on close; there is nothing left to do about it
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(_CLOSE_TIMEOUT_S),
                    contextlib.suppress(Exception),
                ):
                    await aclose()
        self._outcome = self._conclude(self._tracker.results[start:], error, kind, exc_status)

    def _settled(self, start: int, events: list[Any], state: str | None) -> bool:
        """Whether the client's CLI is idle: its turns are over and no task can inject one.

        With session-state events (see :func:`teamlead.prepare_options`), "idle" after a
        real result is exact. Without them, a real result with no task running is the best
        sign; a queued notification turn can still follow then.
        """
        answered = any(not r.placeholder for r in self._tracker.results[start:])
        if not answered or self._tracker.open_tasks:
            return False
        if self.cli_state is not None:
            return state == "idle"
        last = events[-1] if events else None
        return isinstance(last, ResultSeen) and not last.placeholder

    @staticmethod
    def _conclude(
        results: list[ResultSeen],
        error: str | None,
        kind: ErrorKind | None,
        exc_status: int | None,
    ) -> RoundOutcome:
        real = [r for r in results if not r.placeholder]
        last = real[-1] if real else None
        ok = last is not None and last.ok
        if ok and kind == "deadline":
            ok = False
        if not ok and error is None:
            kind = "result"
            error = (
                f"API error {last.api_error_status}: {last.text}"
                if last is not None and last.api_error_status
                else (
                    last.text
                    if last is not None and last.text
                    else "the stream ended without a result"
                )
            )
        status = last.api_error_status if last is not None and not last.ok else exc_status
        transient = status in TRANSIENT_STATUSES if status is not None else False
        if ok:
            return RoundOutcome(ok=True, results=results)
        return RoundOutcome(
            ok=False, results=results, error=error, error_kind=kind, transient=transient
        )


def session_state(message: Any) -> str | None:
    """The state of a ``system/session_state_changed`` frame, typed or raw."""
    data = message if isinstance(message, dict) else getattr(message, "data", None)
    if isinstance(data, dict) and data.get("subtype") == "session_state_changed":
        state = data.get("state")
        return state if isinstance(state, str) else None
    return None


def describe(exc: BaseException) -> str:
    """``Type: first line of the message``, for an error that ended a stream."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _status_of(exc: BaseException) -> int | None:
    for attr in ("api_error_status", "status_code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    return None
