"""The account's interface: what every process of one account shares, and its parts.

An :class:`Account` holds, per bucket key, the learnt :class:`~teamlead._governor.aimd.Limits`
(updated atomically: a rule reads them and writes its result in one step, so two processes
never lose each other's cut) and the *leases*: one per slot held anywhere on the account,
so a slot is granted only while the whole account is under the limit. A lease dies with its
process (or after its time to live), so a crash never leaks a slot.

A lease is stamped, in the step that takes it, with the bucket's limits (so with the epoch
its slot belongs to) and with the account's sequence number, which
:meth:`Account.update_rejected` counts by. The variants are the package's other modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..aimd import Limits, Step

__all__ = [
    "Account",
    "AccountError",
    "Bounds",
    "CountedRule",
    "Lease",
    "Rule",
    "provider_of",
]

Rule = Callable[["Limits | None"], Step]
#: A rule that is also given the leases the upstream may have been running (see
#: :meth:`Account.update_rejected`).
CountedRule = Callable[["Limits | None", int], Step]


class AccountError(Exception):
    """A shared account failed (unreachable, corrupt, unwritable); the message says how."""


@dataclass(frozen=True)
class Bounds:
    """The limits one grant must stay under, all counted over the whole account.

    Attributes:
        key: the bucket, ``provider/model``.
        limit: most leases of ``key``.
        provider_limit: most leases of all keys of the key's provider (``None``: no limit).
        total_limit: most leases of all keys (``None``: no limit).
    """

    key: str
    limit: int
    provider_limit: int | None = None
    total_limit: int | None = None

    @property
    def provider(self) -> str:
        """The key's provider prefix, ``provider/``."""
        return provider_of(self.key)

    def admit(self, count: Callable[[str], int], total: Callable[[], int]) -> bool:
        """Whether one more lease stays within the bounds, given the live leases of a key or
        prefix (``count``) and of all keys (``total``, asked only when there is a total)."""
        if count(self.key) >= self.limit:
            return False
        if self.provider_limit is not None and count(self.provider) >= self.provider_limit:
            return False
        return self.total_limit is None or total() < self.total_limit


def provider_of(key: str) -> str:
    """The provider prefix of a ``provider/model`` bucket key, ``provider/``."""
    return key.split("/", 1)[0] + "/"


@dataclass(frozen=True)
class Lease:
    """One slot's hold on the account; given back with :meth:`Account.give_back`.

    Attributes:
        key: the bucket.
        token: the lease's name in the account.
        origin: the account that issued it (a fallback gives each lease back there).
        limits: the bucket's limits read in the step that took the lease (``None``: never
            seen): the slot belongs to their epoch.
    """

    key: str
    token: str
    origin: object
    limits: Limits | None = None


class Account(Protocol):
    """The shared state of one account; see the module docstring."""

    @property
    def shared(self) -> bool:
        """Whether other processes hold leases too (waiters then re-check now and then)."""
        ...

    def describe(self) -> str:
        """Where the state is, for a warning line (no password in it)."""
        ...

    def limits(self, key: str) -> Limits | None:
        """The learnt limits of ``key`` (``None``: never seen, or forgotten)."""
        ...

    def update(self, key: str, rule: Rule) -> Step:
        """Apply ``rule`` to ``key``'s limits and store its result, atomically."""
        ...

    def take(self, bounds: Bounds) -> Lease | None:
        """A lease within ``bounds``, or ``None`` when the account is at one of them."""
        ...

    def give_back(self, lease: Lease) -> None:
        """End ``lease``; idempotent."""
        ...

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        """Mark ``lease`` rejected and apply ``rule`` to its key's limits, atomically.

        ``rule`` is also given the leases of the keys matching ``prefix``, in any process,
        not marked rejected, whose request ran at any moment since ``lease`` was taken (until
        given back, or marked :meth:`answered`; ``lease`` itself not counted); for a lease
        this account does not know, those running now. That count is an upper bound of what
        the upstream accepted, so a measured cut never lands below the true limit; the
        burst's late rejections then settle it.
        """
        ...

    def answered(self, lease: Lease) -> None:
        """Mark ``lease``'s answer complete: a rejection from now on does not count it,
        though it stays held until given back; idempotent."""
        ...

    def in_flight(self, prefix: str) -> int:
        """Live leases of the keys equal to ``prefix`` or starting with it."""
        ...

    def close(self) -> None:
        """Give back this process's leases and release resources; idempotent."""
        ...
