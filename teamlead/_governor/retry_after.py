"""``Retry-After`` parsing: seconds or an HTTP date, and the ``retry-after-ms`` variant.

Kept apart from the governor because the relay, the experiment runner and the resume retry
all read the same header, and none of them needs the governor to do it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from ..clock import SYSTEM_CLOCK

__all__ = ["parse_retry_after", "retry_after_from_headers"]


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or ``None`` if absent or invalid.

    The header holds either seconds (``"2"``, ``"1.5"``) or an HTTP date; a date is turned
    into seconds from ``now`` (wall-clock seconds; default: the system clock). A date in the
    past gives 0.

    Example:
        >>> parse_retry_after("1.5")
        1.5
        >>> parse_retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now=1445412480.0)
        5.0
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        return None
    current = SYSTEM_CLOCK.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def retry_after_from_headers(
    headers: Mapping[str, str], *, now: float | None = None
) -> float | None:
    """Seconds to wait from response headers: ``retry-after-ms`` first, then ``retry-after``.

    Header names are matched case-insensitively, so an ``httpx.Headers`` or a plain dict
    both work.

    Example:
        >>> retry_after_from_headers({"Retry-After": "2"})
        2.0
    """
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = parse_retry_after(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    return parse_retry_after(lowered.get("retry-after"), now=now)
