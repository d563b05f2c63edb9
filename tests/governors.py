"""The set-ups the governor tests share: the bucket keys they govern, a governor whose
changes are recorded, a governor on a shared account that is closed after the test, and
the warnings a test caught.

A module that opens accounts through :func:`opened` or :func:`governor_on` imports the
:func:`close_accounts` fixture, which closes them when each test ends (their leases given
back, their renewers stopped), whatever the test's outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

from teamlead._governor.accounts import Account
from teamlead.clock import SYSTEM_CLOCK, Clock
from teamlead.events import ConcurrencyChanged
from teamlead.governor import Governor, GovernorPolicy
from teamlead.testing import FakeClock

__all__ = [
    "HAIKU",
    "OPUS",
    "SONNET",
    "close_accounts",
    "governor_on",
    "opened",
    "recorded_governor",
    "warned",
]

OPUS = "anthropic/claude-opus-5-5"
SONNET = "anthropic/claude-sonnet-5-5"
HAIKU = "anthropic/claude-haiku-5"

AccountT = TypeVar("AccountT", bound=Account)

_opened: list[Account] = []


@pytest.fixture(autouse=True)
def close_accounts() -> Iterator[None]:
    """Close every account :func:`opened` registered during the test."""
    yield
    while _opened:
        _opened.pop().close()


def opened(account: AccountT) -> AccountT:
    """``account``, to be closed when the test ends (once, however often it is passed)."""
    if not any(account is known for known in _opened):
        _opened.append(account)
    return account


def governor_on(account: Account, ceiling: int, clock: Clock = SYSTEM_CLOCK) -> Governor:
    """A governor of ``ceiling`` on ``account`` (closed when the test ends)."""
    return Governor(GovernorPolicy(ceiling=ceiling), clock=clock, account=opened(account))


def recorded_governor(**policy: Any) -> tuple[Governor, FakeClock, list[ConcurrencyChanged]]:
    """A governor of ``policy`` on a fake clock, and the changes it reports."""
    clock = FakeClock()
    seen: list[ConcurrencyChanged] = []
    return Governor(GovernorPolicy(**policy), clock=clock, on_change=seen.append), clock, seen


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings (and worse) ``caplog`` caught, as their messages."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
