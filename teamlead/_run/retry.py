"""Whether a failed resume attempt is tried again, and after how long: a pure function of
its arguments (no clock, no I/O), so every rule is table-tested (tests/test_run_retry.py).
"""

from __future__ import annotations

from ..policy import RetryPolicy

__all__ = ["retry_delay"]


def retry_delay(
    *,
    retry: RetryPolicy,
    attempt: int,
    transient: bool,
    now: float,
    deadline: float,
    spent_usd: float = 0.0,
    max_cost_usd: float | None = None,
    retry_after: float | None = None,
) -> float | None:
    """Seconds to wait before the next attempt, or ``None`` when there is none.

    Args:
        retry: the backoff policy (``attempts`` counts the first try).
        attempt: the 1-based attempt that just failed.
        transient: whether the failure was a transient API error (rate limit, overload).
        now: the clock's ``monotonic()`` reading.
        deadline: the run's deadline on the same clock.
        spent_usd: the run's cost so far, the failed attempt included.
        max_cost_usd: the run's cost budget, if any.
        retry_after: the API's ``Retry-After`` in seconds, if it sent one.

    Example:
        >>> retry_delay(retry=RetryPolicy(), attempt=1, transient=True, now=0, deadline=60)
        2.0
        >>> retry_delay(retry=RetryPolicy(), attempt=1, transient=False, now=0, deadline=60)
    """
    if not transient or attempt >= retry.attempts:
        return None
    if max_cost_usd is not None and spent_usd >= max_cost_usd:
        return None  # another attempt would spend past the cost budget
    delay = retry.delay(attempt, retry_after)
    if now + delay >= deadline:
        return None
    return delay
