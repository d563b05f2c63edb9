"""Pacing ahead of 429s from the ``anthropic-ratelimit-*`` response headers.

The Messages API reports, on every response, how much of each rate-limit window
(:data:`WINDOWS`: requests, tokens, input and output tokens per minute) is left:
``anthropic-ratelimit-<window>-{limit,remaining,reset}``, ``reset`` being the RFC 3339
time the window is *fully* replenished (windows refill continuously). A window is read
only when ``remaining`` and ``reset`` are both present and valid. One that gives its
``limit`` is the token budget's to model (:mod:`.token_budget`); the governor applies
:func:`pace_pause` to the others. A window whose reset is further away than
:data:`~teamlead._governor.retry_after.PLAUSIBLE_PAUSE_S` cannot be a per-minute bucket:
the header is faulty and the window skipped. Nothing here raises on a bad value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from .retry_after import PLAUSIBLE_PAUSE_S, bounded_pause, header_number

__all__ = ["WINDOWS", "RateWindow", "faulty_window", "pace_pause", "read_windows"]

#: The window names, as they appear between ``anthropic-ratelimit-`` and the field.
WINDOWS: tuple[str, ...] = ("requests", "tokens", "input-tokens", "output-tokens")

_PREFIX = "anthropic-ratelimit-"


@dataclass(frozen=True)
class RateWindow:
    """One rate-limit window as the last response described it.

    Attributes:
        name: ``requests``, ``tokens``, ``input-tokens`` or ``output-tokens``.
        remaining: what is left now.
        reset_at: wall-clock seconds when the window is full again.
        limit: the window's size, when the response gave it.
    """

    name: str
    remaining: float
    reset_at: float
    limit: float | None = None


def _rfc3339(value: str | None) -> float | None:
    if value is None or len(value) > 64:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
        if when.tzinfo is None:
            return None
        return when.timestamp()
    except (ValueError, OverflowError):
        return None


def read_windows(headers: Mapping[str, str]) -> list[RateWindow]:
    """The windows described by ``headers`` (names matched case-insensitively).

    Example:
        >>> read_windows({"anthropic-ratelimit-requests-remaining": "3",
        ...               "anthropic-ratelimit-requests-limit": "50",
        ...               "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:30Z"})
        [RateWindow(name='requests', remaining=3.0, reset_at=1767225630.0, limit=50.0)]
    """
    lowered = {
        key: str(v) for k, v in headers.items() if (key := str(k).lower()).startswith(_PREFIX)
    }
    windows = []
    for name in WINDOWS:
        remaining = header_number(lowered.get(f"{_PREFIX}{name}-remaining"))
        reset_at = _rfc3339(lowered.get(f"{_PREFIX}{name}-reset"))
        if remaining is None or reset_at is None:
            continue
        limit = header_number(lowered.get(f"{_PREFIX}{name}-limit"))
        windows.append(RateWindow(name, remaining, reset_at, limit if limit else None))
    return windows


def pace_pause(windows: list[RateWindow], *, now: float, pace_below: float) -> float:
    """Seconds to hold new requests so no window runs dry; 0 when there is room.

    A window under ``pace_below`` of its limit holds them until it refilled back to that
    level (``(reset - now) * (pace_below * limit - remaining) / (limit - remaining)``), an
    empty one until its reset; the longest over the windows wins. ``now`` is wall-clock
    seconds, like ``reset_at``. Requests already running are never stopped.

    Example:
        >>> pace_pause([RateWindow("requests", 0, reset_at=110.0, limit=50)],
        ...            now=100.0, pace_below=0.05)
        10.0
        >>> pace_pause([RateWindow("requests", 1, reset_at=149.0, limit=50)],
        ...            now=100.0, pace_below=0.1)
        4.0
    """
    longest = 0.0
    for window in windows:
        until_reset = max(0.0, window.reset_at - now)
        if until_reset > PLAUSIBLE_PAUSE_S:
            continue  # a faulty reset: no per-minute bucket is that far from full
        if window.remaining <= 0:
            longest = max(longest, until_reset)
            continue
        limit = window.limit
        if limit is None or limit <= window.remaining:
            continue
        floor_level = pace_below * limit
        if window.remaining >= floor_level:
            continue
        refill = until_reset * (floor_level - window.remaining) / (limit - window.remaining)
        longest = max(longest, refill)
    return bounded_pause(longest)


def faulty_window(windows: list[RateWindow], *, now: float) -> RateWindow | None:
    """The first window that says it is empty until a reset beyond the plausibility bound
    (a faulty header, ignored by :func:`pace_pause` and the token budget), for the line
    that says so; ``None`` when there is none.

    Example:
        >>> faulty_window([RateWindow("requests", 0, reset_at=4e9, limit=50)], now=100.0)
        RateWindow(name='requests', remaining=0, reset_at=4000000000.0, limit=50)
        >>> faulty_window([RateWindow("requests", 0, reset_at=130.0)], now=100.0) is None
        True
    """
    for window in windows:
        if window.remaining <= 0 and window.reset_at - now > PLAUSIBLE_PAUSE_S:
            return window
    return None
