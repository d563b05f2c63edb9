"""The retry decision of a failed resume, one rule per row (teamlead._run.retry).

Expected delays are computed from the :class:`~teamlead.policy.RetryPolicy` under test,
never written out, so the table checks the decision, not one schedule.
"""

from __future__ import annotations

from typing import Any

import pytest

from teamlead._run.retry import retry_delay
from teamlead.policy import RetryPolicy

POLICY = RetryPolicy(attempts=3, base_s=2.0, factor=3.0, max_s=30.0)
NEXT = POLICY.delay(1)
BASE: dict[str, Any] = {
    "retry": POLICY,
    "attempt": 1,
    "transient": True,
    "now": 0.0,
    "deadline": 600.0,
    "spent_usd": 0.0,
    "max_cost_usd": None,
    "retry_after": None,
}

ROWS: list[tuple[str, dict[str, Any], float | None]] = [
    ("transient: the policy's first delay", {}, NEXT),
    ("second attempt: the policy's second delay", {"attempt": 2}, POLICY.delay(2)),
    ("not transient: never retried", {"transient": False}, None),
    ("attempts used up", {"attempt": POLICY.attempts}, None),
    ("past the attempts", {"attempt": POLICY.attempts + 1}, None),
    ("a longer Retry-After wins", {"retry_after": NEXT + 5}, POLICY.delay(1, NEXT + 5)),
    ("Retry-After capped at max_s", {"retry_after": POLICY.max_s * 10}, POLICY.max_s),
    ("a shorter Retry-After is ignored", {"retry_after": NEXT / 2}, NEXT),
    ("budget left", {"spent_usd": 0.5, "max_cost_usd": 1.0}, NEXT),
    ("budget reached", {"spent_usd": 1.0, "max_cost_usd": 1.0}, None),
    ("budget passed", {"spent_usd": 1.5, "max_cost_usd": 1.0}, None),
    ("backoff ends before the deadline", {"now": 10.0, "deadline": 10.0 + NEXT + 0.01}, NEXT),
    ("backoff ends at the deadline", {"now": 10.0, "deadline": 10.0 + NEXT}, None),
    ("deadline already passed", {"now": 700.0}, None),
]


@pytest.mark.parametrize(("why", "change", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_retry_decision(why: str, change: dict[str, Any], expected: float | None) -> None:
    assert retry_delay(**{**BASE, **change}) == expected, why


def test_the_table_covers_a_growing_schedule() -> None:
    assert POLICY.delay(1) < POLICY.delay(2) <= POLICY.max_s
