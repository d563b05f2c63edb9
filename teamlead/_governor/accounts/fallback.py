"""A shared account that fails is replaced by the next one down, with one warning line."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar, cast

from ..aimd import Limits, Step
from .base import Account, AccountError, Bounds, CountedRule, Lease, Rule

__all__ = ["FallbackAccount"]

log = logging.getLogger("teamlead.governor")
_T = TypeVar("_T")


class FallbackAccount:
    """``primary`` until it fails, then ``fallback``, with one warning line.

    A lease goes back to the account that issued it; one a failed account cannot take back
    expires there by its time to live. The fallback is made on first need, so a healthy
    primary costs nothing else.
    """

    def __init__(self, primary: Account, fallback: Callable[[], Account]) -> None:
        self._current = primary
        self._make_fallback: Callable[[], Account] | None = fallback

    @property
    def shared(self) -> bool:
        return self._current.shared

    @property
    def current(self) -> Account:
        """The account in use now."""
        return self._current

    def describe(self) -> str:
        return self._current.describe()

    def _fail(self, exc: BaseException) -> None:
        make = self._make_fallback
        if make is None:  # the fallback itself failed: nothing left to switch to
            raise exc
        self._make_fallback = None
        failed, self._current = self._current, make()
        reason = str(exc) or type(exc).__name__
        log.warning("shared limits: %s; going on with %s", reason, self._current.describe())
        try:
            failed.close()
        except Exception:  # already broken; its leases expire by their time to live
            log.debug("closing the failed account failed", exc_info=True)

    def _call(self, call: Callable[[Account], _T]) -> _T:
        try:
            return call(self._current)
        except AccountError as exc:
            self._fail(exc)
            return call(self._current)

    def limits(self, key: str) -> Limits | None:
        return self._call(lambda a: a.limits(key))

    def update(self, key: str, rule: Rule) -> Step:
        return self._call(lambda a: a.update(key, rule))

    def take(self, bounds: Bounds) -> Lease | None:
        return self._call(lambda a: a.take(bounds))

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        return self._call(lambda a: a.update_rejected(lease, prefix, rule))

    def _to_origin(self, lease: Lease, call: Callable[[Account], None]) -> None:
        """``call`` on the account that issued ``lease``. A failure of the current account
        switches to the fallback; one of an account that failed already is let be: its
        leases expire there by themselves, and no rejection counts them any more."""
        origin = lease.origin
        target = self._current if origin is self._current else cast(Account, origin)
        try:
            call(target)
        except AccountError as exc:
            if target is self._current:
                self._fail(exc)

    def answered(self, lease: Lease) -> None:
        self._to_origin(lease, lambda a: a.answered(lease))

    def give_back(self, lease: Lease) -> None:
        self._to_origin(lease, lambda a: a.give_back(lease))

    def in_flight(self, prefix: str) -> int:
        return self._call(lambda a: a.in_flight(prefix))

    def close(self) -> None:
        self._current.close()
