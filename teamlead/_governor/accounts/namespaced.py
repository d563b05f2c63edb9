"""One account's part of a shared store: every key it writes is under the account's name.

The machine's SQLite file and a Redis hold the limits of every account their processes
use (the real API, a gateway, the scripted model of a test on a loopback port). What one
account learns must never limit another, so :class:`NamespacedAccount` stores each bucket
``provider/model`` of account ``A`` as ``A/provider/model`` (``A`` is
:func:`~teamlead._relay.shared.account_of`'s key, no secret); the governor above it sees
its own keys. An account's buckets all belong to one provider, so its total and its
provider's sum are both counted over ``A/``.
"""

from __future__ import annotations

import dataclasses

from ..aimd import Limits, Step
from .base import Account, Bounds, CountedRule, Lease, Rule

__all__ = ["NamespacedAccount"]


class NamespacedAccount:
    """``inner`` as seen by one account named ``name`` (no ``/`` in it).

    Example:
        >>> from teamlead._governor.accounts.process import ProcessAccount
        >>> store = ProcessAccount()
        >>> real = NamespacedAccount(store, "api#1")
        >>> demo = NamespacedAccount(store, "127.0.0.1:9#2")
        >>> lease = demo.take(Bounds("anthropic/opus", limit=1))
        >>> demo.in_flight("anthropic/"), real.in_flight("anthropic/"), store.in_flight("api#1/")
        (1, 0, 0)
        >>> real.take(Bounds("anthropic/opus", limit=1)) is not None
        True
    """

    def __init__(self, inner: Account, name: str) -> None:
        if not name or "/" in name:
            raise ValueError(f"an account name is non-empty and has no '/', got {name!r}")
        self.inner = inner
        self.name = name
        self._prefix = name + "/"

    @property
    def shared(self) -> bool:
        return self.inner.shared

    def describe(self) -> str:
        return self.inner.describe()

    def _in(self, key: str) -> str:
        return self._prefix + key

    def _inner_lease(self, lease: Lease) -> Lease:
        return dataclasses.replace(lease, key=self._in(lease.key))

    def limits(self, key: str) -> Limits | None:
        return self.inner.limits(self._in(key))

    def update(self, key: str, rule: Rule) -> Step:
        return self.inner.update(self._in(key), rule)

    def take(self, bounds: Bounds) -> Lease | None:
        limits = [x for x in (bounds.provider_limit, bounds.total_limit) if x is not None]
        lease = self.inner.take(
            Bounds(
                self._in(bounds.key),
                limit=bounds.limit,
                provider_limit=min(limits) if limits else None,  # counted over the account
                total_limit=None,  # the store's total spans every account: not this one's
            )
        )
        return None if lease is None else dataclasses.replace(lease, key=bounds.key)

    def give_back(self, lease: Lease) -> None:
        self.inner.give_back(self._inner_lease(lease))

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        return self.inner.update_rejected(self._inner_lease(lease), self._in(prefix), rule)

    def answered(self, lease: Lease) -> None:
        self.inner.answered(self._inner_lease(lease))

    def in_flight(self, prefix: str) -> int:
        return self.inner.in_flight(self._in(prefix))

    def close(self) -> None:
        self.inner.close()
