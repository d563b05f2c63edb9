"""Time values from outside are bounded, and nothing the governor keeps grows for good.

A header may carry anything: ``1e9`` seconds, a date in 2099, a 20-digit year, ``nan``.
Parsing never raises, no pause is longer than ``MAX_PAUSE_S``, an idle spell forgets a
pause, a caller that cannot wait the pause out is told at once, and the journal is a ring.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from teamlead._governor.ratelimit_headers import pace_pause, read_windows
from teamlead._governor.retry_after import (
    MAX_PAUSE_S,
    PLAUSIBLE_PAUSE_S,
    faulty_retry_after,
    parse_retry_after,
    retry_after_from_headers,
)
from teamlead.events import ConcurrencyChanged
from teamlead.governor import JOURNAL_SIZE, Governor, GovernorPolicy
from teamlead.testing import FakeClock

from .governors import OPUS as A

pytestmark = pytest.mark.anyio


NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc).timestamp()

HOSTILE = [
    "1e9",
    "1e308",
    "1e400",
    "nan",
    "-1",
    "-0",
    "inf",
    "0x10",
    "9" * 400,
    "Wed, 21 Oct 99999999999999999999 07:28:05 GMT",
    "Wed, 21 Oct 10000 07:28:05 GMT",
    "Thu, 01 Jan 2099 00:00:00 GMT",
    "Wed, 21 Oct 2015 07:28:05 +9999",
    "Wed, 99 Oct 2015 07:28:05 GMT",
    "Wed, 21 Oct 2015 07:28:05",
    "Mon, 01 Jan 0001 00:00:00 GMT",
    "\x00\x01",
    "1.5" + " " * 10_000,
]


#: The hostile values read as a pause (``retry-after``, ``retry-after-ms``): each a pause of
#: none; every other one is refused in both headers.
NO_PAUSE = {"-0": (0.0, 0.0), "Mon, 01 Jan 0001 00:00:00 GMT": (0.0, None)}


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_retry_after_is_refused_unless_it_asks_for_no_pause(value: str) -> None:
    read = tuple(
        retry_after_from_headers({header: value}, now=NOW)
        for header in ("retry-after", "retry-after-ms")
    )
    assert read == NO_PAUSE.get(value, (None, None))


@given(st.text(max_size=80))
def test_any_retry_after_text_is_a_bounded_pause_or_none(value: str) -> None:
    for seconds in (
        parse_retry_after(value, now=NOW),
        retry_after_from_headers({"retry-after-ms": value}),
    ):
        assert seconds is None or (math.isfinite(seconds) and 0 <= seconds <= PLAUSIBLE_PAUSE_S)


@pytest.mark.parametrize(
    ("headers", "pause", "faulty"),
    [
        ({"retry-after": "999999999"}, None, 999999999.0),
        ({"retry-after": "Thu, 01 Jan 2099 00:00:00 GMT"}, None, 4070908800.0 - NOW),
        ({"retry-after-ms": "1e12"}, None, 1e9),
        ({"retry-after": "181"}, None, 181.0),
        ({"retry-after": "180"}, 180.0, None),
        ({"retry-after": "120"}, 120.0, None),
        ({"retry-after-ms": "1500"}, 1.5, None),  # not cut as ms
        ({"retry-after": "Wed, 21 Oct 99999999999999999999 07:28:05 GMT"}, None, None),
        ({}, None, None),
    ],
)
def test_a_pause_beyond_the_plausibility_bound_is_a_faulty_header_not_a_pause(
    headers: dict[str, str], pause: float | None, faulty: float | None
) -> None:
    assert retry_after_from_headers(headers, now=NOW) == pause
    assert faulty_retry_after(headers, now=NOW) == faulty


@pytest.mark.parametrize(
    "reset", ["2099-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "99999-01-01T00:00:00Z", "x"]
)
def test_a_rate_limit_window_resetting_implausibly_far_away_pauses_nothing(reset: str) -> None:
    windows = read_windows(
        {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-reset": reset,
        }
    )
    assert pace_pause(windows, now=NOW, pace_below=0.05) == 0.0


async def test_the_governor_bounds_a_pause_whoever_reports_it() -> None:
    gov = Governor(GovernorPolicy(ceiling=4), clock=FakeClock())
    async with gov.slot(A) as slot:
        slot.rate_limited(1e9)
    assert gov.state(A).cooldown_s == MAX_PAUSE_S
    async with gov.slot(A, timeout=MAX_PAUSE_S) as slot:  # waits the bound, not 30 years
        slot.overloaded(1e12)
    assert gov.state(A).cooldown_s == MAX_PAUSE_S
    reset = datetime.fromtimestamp(gov.clock.time() + 1e9, tz=timezone.utc).isoformat()
    gov.pace(
        A, {"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": reset}
    )
    assert gov.state(A).cooldown_s <= MAX_PAUSE_S


async def test_an_idle_reset_forgets_the_pause() -> None:
    clock = FakeClock()
    gov = Governor(GovernorPolicy(ceiling=4), clock=clock)
    async with gov.slot(A) as slot:
        slot.rate_limited(MAX_PAUSE_S)
    clock.advance(gov.policy.idle_reset_s)
    assert gov.state(A).cooldown_s == 0
    before = clock.monotonic()
    async with gov.slot(A, timeout=1):
        pass
    assert clock.monotonic() == before
    assert gov.journal[-1].reason == "idle_reset"


async def test_a_caller_that_cannot_wait_out_the_pause_is_told_at_once() -> None:
    clock = FakeClock()
    gov = Governor(GovernorPolicy(ceiling=4), clock=clock)
    async with gov.slot(A) as slot:
        slot.rate_limited(120)
    with pytest.raises(TimeoutError, match="paused longer than 30s allowed"):
        await gov.acquire(A, timeout=30)
    assert clock.monotonic() == 0
    assert gov.state(A).waiting == 0
    async with gov.slot(A, timeout=121):  # one that can wait, waits
        assert clock.monotonic() == 120


async def test_the_journal_keeps_the_last_changes_and_listeners_see_all() -> None:
    seen: list[ConcurrencyChanged] = []
    clock = FakeClock()
    gov = Governor(GovernorPolicy(ceiling=4), clock=clock, on_change=seen.append)
    for _ in range(2 * JOURNAL_SIZE + 10):
        async with gov.slot(A) as slot:
            slot.rate_limited(1.0)  # a pause of its own every time (journalled)
        clock.advance(1.0)
    assert len(seen) > 2 * JOURNAL_SIZE
    assert len(gov.journal) == JOURNAL_SIZE
    assert list(gov.journal) == seen[-JOURNAL_SIZE:]
