"""Waiting on an inbox: wake on a file change, poll with backoff, stop at the deadline."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from pathlib import Path

import anyio
from watchfiles import awatch

from ...clock import SYSTEM_CLOCK, Clock, wait_event
from ...policy import InboxWaitPolicy
from ..team import within
from ._inotify import open_watch
from .model import DEFAULT_MAX_INBOX_BYTES, InboxRead, InboxWait
from .read import confine_root, logger, read_unlogged

__all__ = ["wait_for_inbox"]


class _Wake:
    """A resettable flag the watcher sets and the waiter consumes."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self.count = 0

    def set(self) -> None:
        self.count += 1
        self._event.set()

    async def wait(self, seconds: float, clock: Clock) -> bool:
        """Wait for a change or ``seconds`` on ``clock``; True on a change."""
        fired = await wait_event(self._event, seconds, clock)
        if fired:
            self._event = anyio.Event()
        return fired


def _nearest_existing(directory: Path, root: Path) -> Path | None:
    """``directory`` or its closest existing ancestor inside ``root``."""
    for candidate in (directory, *directory.parents):
        if not within(candidate, root):
            return None
        if candidate.is_dir():
            return candidate
        if candidate == root:
            return None
    return None


async def _watch(
    path: Path, root: Path, policy: InboxWaitPolicy, stop: anyio.Event, wake: _Wake
) -> None:
    """Set ``wake`` on every change to the inbox; watch the nearest ancestor while it is missing.

    The watch is in place before the first suspension, so a wake set just before waiting
    is seen only once the new watch is in place: nothing falls between two. Linux inotify
    is awaited on the loop itself (a change is seen as the kernel queues it, an idle wait
    costs nothing); elsewhere ``watchfiles`` watches from a thread.
    """
    retarget = False
    while not stop.is_set():
        target = _nearest_existing(path.parent, root)
        if target is None:
            return  # nothing to watch inside the config dir: polling only
        batches = open_watch(target) or _watchfiles_batches(target, policy, stop)
        if retarget:
            wake.set()
        retarget = True
        try:
            async for names, gone in batches:
                if target != path.parent:
                    wake.set()
                    if _nearest_existing(path.parent, root) != target:
                        break
                    continue
                if path.name in names:
                    wake.set()
                if gone or not target.is_dir():
                    break
        except (OSError, RuntimeError) as exc:
            logger.warning("watching %s failed (%s); polling instead", target, type(exc).__name__)
            return
        finally:
            await batches.aclose()


async def _watchfiles_batches(
    target: Path, policy: InboxWaitPolicy, stop: anyio.Event
) -> AsyncGenerator[tuple[set[str], bool], None]:
    """The directory's changes from ``watchfiles``, in inotify's batches (the names changed,
    whether the directory went away); they end when ``stop`` is set."""
    changes_iter = awatch(
        target,
        watch_filter=None,
        debounce=policy.debounce_ms,
        step=policy.step_ms,
        stop_event=stop,
        rust_timeout=policy.watcher_timeout_ms,
        recursive=False,
        ignore_permission_denied=True,
    )
    try:
        async for changes in changes_iter:
            yield {Path(changed).name for _, changed in changes}, False
    finally:
        await changes_iter.aclose()


async def wait_for_inbox(
    path: Path,
    *,
    until: Callable[[InboxRead], bool],
    policy: InboxWaitPolicy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    deadline: float | None = None,
    config_dir: Path | None = None,
    max_bytes: int = DEFAULT_MAX_INBOX_BYTES,
    logged: set[str] | None = None,
) -> InboxWait:
    """Wait until ``until(read)`` holds for a read of the inbox, or the wait runs out.

    Wakes at once when the file changes (a watch on the inbox's directory, or on its
    nearest existing ancestor inside the config dir while it does not exist) and polls
    with the policy's backoff as a fallback, every delay on ``clock``. The wait is bounded
    by the policy and by ``deadline``. It is cancel-safe: the watcher is stopped through
    its stop event, so no thread is left waiting on the file system.

    Args:
        path: the inbox file; it need not exist yet.
        until: called with each read; the wait ends when it returns True.
        policy: retries and backoff (default :class:`InboxWaitPolicy()`).
        clock: time source for delays and the deadline.
        deadline: absolute time on ``clock.monotonic()`` after which the wait gives up.
        config_dir: the config dir the inbox must stay in (inferred by default).
        max_bytes: inbox size cap, as in :func:`read_inbox`.
        logged: warnings already logged (this wait adds to it), so a caller that reads
            the same inbox again logs each warning once.

    Returns:
        The last read and whether ``until`` held.

    Example:
        >>> done = await wait_for_inbox(                              # doctest: +SKIP
        ...     team.lead_inbox,
        ...     until=lambda r: {"alpha", "beta"} <= {m.sender for m in r.messages if m.is_report},
        ...     deadline=clock.monotonic() + 300)
        >>> done.satisfied                                            # doctest: +SKIP
        True
    """
    path = Path(path)
    policy = InboxWaitPolicy() if policy is None else policy
    root = confine_root(path, config_dir)
    start = clock.monotonic()
    logged = set() if logged is None else logged
    reads = 0

    def read_once() -> InboxRead:
        nonlocal reads
        reads += 1
        read = read_unlogged(path, config_dir, max_bytes)
        for warning in read.warnings:
            if warning not in logged:
                logged.add(warning)
                logger.warning("%s", warning)
        return read

    wake = _Wake()
    stop = anyio.Event()

    async def wait_loop() -> InboxWait:
        read = read_once()
        satisfied = until(read)
        delay = policy.first_delay_s
        while not satisfied:
            now = clock.monotonic()
            if deadline is not None and now >= deadline:
                break
            if reads > policy.tries and now - start >= policy.span_s:
                break
            pause = delay
            if reads > policy.tries:
                pause = min(pause, start + policy.span_s - now)
            if deadline is not None:
                pause = min(pause, deadline - now)
            changed = await wake.wait(pause, clock)
            read = read_once()
            satisfied = until(read)
            if not changed:
                delay = min(delay * policy.backoff, policy.max_delay_s)
        return InboxWait(read=read, satisfied=satisfied, reads=reads, events=wake.count)

    outcome: InboxWait | None = None
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        if policy.use_events:
            tg.start_soon(_watch, path, root, policy, stop, wake)
            await anyio.lowlevel.checkpoint()  # let the watcher register first
        try:
            outcome = await wait_loop()
        except Exception as exc:  # from `until`: re-raised below as itself, not in a group
            failure = exc
        finally:
            stop.set()  # the watcher thread sees it within one step and returns
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
    assert outcome is not None
    return outcome
