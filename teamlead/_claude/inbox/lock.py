"""The inbox lock: a ``<inbox>.lock`` directory, with proper-lockfile's semantics.

Claude Code's writers (and the npm package ``proper-lockfile``) lock a file by making the
directory ``<file>.lock`` and release it with ``rmdir``. A lock whose mtime is older than
10 s is stale. Writers retry for only about 0.65 s before they drop their message, so the
work done under the lock is synchronous, short and never awaits: a cancellation can only
land while we wait for the lock, never while we hold it. The retry schedule is a
:class:`~teamlead.policy.LockPolicy`.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ...clock import SYSTEM_CLOCK, Clock
from ...errors import InboxError
from ...policy import LockPolicy

__all__ = ["with_lock"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _remove_if_stale(lock: Path, policy: LockPolicy, clock: Clock) -> bool:
    """Remove ``lock`` when its mtime is older than the stale age; True if it is gone."""
    try:
        age = clock.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return True
    if age <= policy.stale_after_s:
        return False
    try:
        lock.rmdir()
    except FileNotFoundError:
        return True
    except OSError as exc:
        logger.warning("stale inbox lock %s could not be removed: %s", lock, exc.strerror)
        return False
    logger.warning("removed stale inbox lock %s (%.0f s old)", lock, age)
    return True


def _release(lock: Path) -> None:
    try:
        lock.rmdir()
    except OSError as exc:
        # Someone judged our lock stale and took it: we held it far too long.
        logger.warning("inbox lock %s was gone at release: %s", lock, exc.strerror)


async def with_lock(
    path: Path,
    work: Callable[[], T],
    *,
    policy: LockPolicy | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> T:
    """Run ``work()`` while holding the lock of ``path``, retrying within the policy's budget.

    ``work`` is synchronous on purpose: nothing can cancel it halfway, and the lock is
    removed in ``finally`` right after it returns or raises.

    Raises:
        InboxError: the lock stayed busy past the budget, or could not be made at all.
    """
    policy = LockPolicy() if policy is None else policy
    lock = path.with_name(path.name + ".lock")
    start = clock.monotonic()
    delay = policy.first_delay_s
    attempts = 0
    stale_removals = 0
    while True:
        attempts += 1
        try:
            lock.mkdir()
        except FileExistsError:
            # Retry at once after clearing a stale lock, but only a few times in a row.
            if stale_removals < 3 and _remove_if_stale(lock, policy, clock):
                stale_removals += 1
                continue
        except OSError as exc:
            reason = "its directory is missing" if exc.errno == errno.ENOENT else exc.strerror
            raise InboxError(f"cannot lock inbox: {reason}", path=str(path)) from None
        else:
            try:
                return work()
            finally:
                _release(lock)
        if clock.monotonic() - start + delay > policy.budget_s:
            raise InboxError(
                f"inbox lock still busy after {attempts} tries over "
                f"{clock.monotonic() - start:.2f} s; left it alone",
                path=str(path),
            )
        await clock.sleep(delay)
        delay = min(delay * policy.backoff, policy.max_delay_s)
