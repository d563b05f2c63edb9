"""``Retry-After`` parsing: seconds or an HTTP date, and the ``retry-after-ms`` variant.

Kept apart from the governor because the relay, the experiment runner and the resume retry
all read the same header, and none of them needs the governor to do it.

A pause read from outside is bounded: whatever the header says (``1e9`` seconds, a date in
2099, a 20-digit year, ``nan``), parsing never raises, and the pause is at most
:data:`MAX_PAUSE_S` (10 minutes). The upstream can ask again when that has passed; a bigger
value would only hold a model for the life of the process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from ..clock import SYSTEM_CLOCK

__all__ = ["MAX_PAUSE_S", "bounded_pause", "parse_retry_after", "retry_after_from_headers"]

#: The longest pause any header can ask for (Retry-After, retry-after-ms, a rate-limit
#: window's reset); longer values are cut to it.
MAX_PAUSE_S = 600.0


def bounded_pause(seconds: float) -> float:
    """``seconds`` within ``[0, MAX_PAUSE_S]`` (``nan`` is 0).

    Example:
        >>> bounded_pause(1e9), bounded_pause(-3.0), bounded_pause(2.5)
        (600.0, 0.0, 2.5)
    """
    if not seconds > 0:  # also nan
        return 0.0
    return min(seconds, MAX_PAUSE_S)


def _seconds(value: str | None, now: float | None) -> float | None:
    """The unbounded seconds of a header value, or ``None``; never raises."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 64:  # an HTTP date is 29 characters
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:  # an HTTP date is always GMT
            return None
        stamp = when.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):  # e.g. a 20-digit year
        return None
    current = SYSTEM_CLOCK.time() if now is None else now
    return max(0.0, stamp - current)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or ``None`` if absent or invalid.

    The header holds either seconds (``"2"``, ``"1.5"``) or an HTTP date; a date is turned
    into seconds from ``now`` (wall-clock seconds; default: the system clock). A date in the
    past gives 0. The result is at most :data:`MAX_PAUSE_S`; nothing here raises.

    Example:
        >>> parse_retry_after("1.5")
        1.5
        >>> parse_retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now=1445412480.0)
        5.0
        >>> parse_retry_after("1e9"), parse_retry_after("nan")
        (600.0, None)
    """
    seconds = _seconds(value, now)
    return None if seconds is None else bounded_pause(seconds)


def retry_after_from_headers(
    headers: Mapping[str, str], *, now: float | None = None
) -> float | None:
    """Seconds to wait from response headers: ``retry-after-ms`` first, then ``retry-after``.

    Header names are matched case-insensitively, so an ``httpx.Headers`` or a plain dict
    both work. The result is at most :data:`MAX_PAUSE_S`.

    Example:
        >>> retry_after_from_headers({"Retry-After": "2"})
        2.0
        >>> retry_after_from_headers({"retry-after-ms": "1e12"})
        600.0
    """
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        text = millis.strip()
        try:
            value = float(text) if len(text) <= 64 else math.nan
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return bounded_pause(value / 1000.0)
    return parse_retry_after(lowered.get("retry-after"), now=now)
