"""``Retry-After`` parsing: seconds or an HTTP date, and the ``retry-after-ms`` variant.

The relay, the experiment runner and the resume retry all read the header; none of them
needs the governor to do it. Parsing never raises, whatever the header says. A pause
beyond :data:`PLAUSIBLE_PAUSE_S` (3 minutes) is a *faulty* header, read as no Retry-After
at all: Anthropic's limits are per-minute token buckets, full again within 60 s, so a
longer value is a broken header or proxy, or a limit (a spend cap) no pause inside one run
could wait out; the margin covers enforcement over shorter intervals and clock skew.
:data:`MAX_PAUSE_S` (10 minutes) is the longest pause any caller of the governor can ask
for directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from ..clock import SYSTEM_CLOCK

__all__ = [
    "MAX_PAUSE_S",
    "PLAUSIBLE_PAUSE_S",
    "bounded_pause",
    "faulty_retry_after",
    "header_number",
    "parse_retry_after",
    "retry_after_from_headers",
]

#: The longest pause the governor takes from any caller (longer values are cut to it).
MAX_PAUSE_S = 600.0
#: The longest pause a header (Retry-After, retry-after-ms, a rate-limit window's reset)
#: can plausibly ask for; beyond it the header is faulty and ignored (see the module).
PLAUSIBLE_PAUSE_S = 180.0


def bounded_pause(seconds: float) -> float:
    """``seconds`` within ``[0, MAX_PAUSE_S]`` (``nan`` is 0).

    Example:
        >>> bounded_pause(1e9), bounded_pause(-3.0), bounded_pause(2.5)
        (600.0, 0.0, 2.5)
    """
    if not seconds > 0:  # also nan
        return 0.0
    return min(seconds, MAX_PAUSE_S)


def header_number(value: str | None) -> float | None:
    """A header's value as a finite number of at least 0, else ``None``; never raises.

    Example:
        >>> header_number(" 1.5 "), header_number("nan"), header_number("-1")
        (1.5, None, None)
    """
    if value is None or len(value) > 64:  # an HTTP date is 29 characters
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _seconds(value: str | None, now: float | None) -> float | None:
    """The unbounded seconds of a header value, or ``None``; never raises."""
    if value is None or len(value) > 64:
        return None
    seconds = header_number(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value.strip())
        if when.tzinfo is None:  # an HTTP date is always GMT
            return None
        stamp = when.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):  # e.g. a 20-digit year
        return None
    current = SYSTEM_CLOCK.time() if now is None else now
    return max(0.0, stamp - current)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header value, or ``None`` if absent, invalid
    or faulty (beyond :data:`PLAUSIBLE_PAUSE_S`).

    The header holds either seconds (``"2"``, ``"1.5"``) or an HTTP date; a date is turned
    into seconds from ``now`` (wall-clock seconds; default: the system clock). A date in the
    past gives 0. Nothing here raises.

    Example:
        >>> parse_retry_after("1.5")
        1.5
        >>> parse_retry_after("Wed, 21 Oct 2015 07:28:05 GMT", now=1445412480.0)
        5.0
        >>> parse_retry_after("1e9"), parse_retry_after("nan"), parse_retry_after("180")
        (None, None, 180.0)
    """
    seconds = _seconds(value, now)
    return None if seconds is None or seconds > PLAUSIBLE_PAUSE_S else seconds


def _header_seconds(headers: Mapping[str, str], now: float | None) -> float | None:
    """The unbounded pause the headers ask for: ``retry-after-ms``, else ``retry-after``."""
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = header_number(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    return _seconds(lowered.get("retry-after"), now)


def retry_after_from_headers(
    headers: Mapping[str, str], *, now: float | None = None
) -> float | None:
    """Seconds to wait from response headers: ``retry-after-ms`` first, then ``retry-after``;
    ``None`` when neither is there, valid and plausible (see :func:`faulty_retry_after`).

    Header names are matched case-insensitively, so an ``httpx.Headers`` or a plain dict
    both work.

    Example:
        >>> retry_after_from_headers({"Retry-After": "2"})
        2.0
        >>> retry_after_from_headers({"retry-after-ms": "1e12"}) is None
        True
    """
    seconds = _header_seconds(headers, now)
    return None if seconds is None or seconds > PLAUSIBLE_PAUSE_S else seconds


def faulty_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The pause a faulty header asked for (beyond :data:`PLAUSIBLE_PAUSE_S`), for the line
    that says it was ignored; ``None`` when the headers ask for none, or a plausible one.

    Example:
        >>> faulty_retry_after({"retry-after": "999999999"})
        999999999.0
        >>> faulty_retry_after({"retry-after": "5"}) is None
        True
    """
    seconds = _header_seconds(headers, now)
    return seconds if seconds is not None and seconds > PLAUSIBLE_PAUSE_S else None
