"""The account as this process alone sees it (``--limits process``), in memory.

A subclass may share the limits elsewhere by overriding :meth:`ProcessAccount._keep` (every
write goes through it) and what :meth:`ProcessAccount.limits` reads (the experiment's Ray
account).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..aimd import Limits, Step
from .base import Bounds, CountedRule, Lease, Rule

__all__ = ["ProcessAccount"]


def _matches(key: str, prefix: str) -> bool:
    return key == prefix or (prefix.endswith("/") and key.startswith(prefix))


class ProcessAccount:
    """The account as this process alone sees it: leases counted in memory.

    Example:
        >>> account = ProcessAccount()
        >>> lease = account.take(Bounds("anthropic/claude-opus-5-5", limit=1))
        >>> account.take(Bounds("anthropic/claude-opus-5-5", limit=1)) is None
        True
        >>> account.give_back(lease); account.in_flight("anthropic/")
        0
    """

    shared = False

    def __init__(self) -> None:
        self._limits: dict[str, Limits] = {}
        self._leases: dict[str, _Held] = {}  # token -> its lease
        self._seq = 0
        # (sequence, key) of leases given back, not rejected, while a live lease may count them
        self._released: list[tuple[int, str]] = []

    def describe(self) -> str:
        return "the limits of this process alone"

    def limits(self, key: str) -> Limits | None:
        return self._limits.get(key)

    def _keep(self, key: str, limits: Limits) -> None:
        """Store ``key``'s new limits: every write of a rule's result goes through here."""
        self._limits[key] = limits

    def update(self, key: str, rule: Rule) -> Step:
        limits, change = rule(self.limits(key))
        self._keep(key, limits)
        return limits, change

    def take(self, bounds: Bounds) -> Lease | None:
        if not bounds.admit(self.in_flight, lambda: len(self._leases)):
            return None
        self._seq += 1
        token = str(self._seq)
        self._leases[token] = _Held(bounds.key, self._seq)
        return Lease(bounds.key, token, self, self.limits(bounds.key))

    def give_back(self, lease: Lease) -> None:
        held = self._leases.pop(lease.token, None)
        if held is None:
            return
        self._seq += 1
        if not held.rejected:
            self._released.append((held.answered or self._seq, held.key))
        oldest = min((h.taken for h in self._leases.values()), default=self._seq)
        self._released = [r for r in self._released if r[0] > oldest]

    def answered(self, lease: Lease) -> None:
        held = self._leases.get(lease.token)
        if held is not None and held.answered is None:
            self._seq += 1
            held.answered = self._seq

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        held = self._leases.get(lease.token)
        since = self._seq
        if held is not None:
            held.rejected = True
            since = held.taken
        running = sum(
            1
            for h in self._leases.values()
            if not h.rejected
            and (h.answered is None or h.answered > since)
            and _matches(h.key, prefix)
        )
        ended = sum(1 for seq, key in self._released if seq > since and _matches(key, prefix))
        return self.update(lease.key, lambda got: rule(got, running + ended))

    def in_flight(self, prefix: str) -> int:
        return sum(1 for h in self._leases.values() if _matches(h.key, prefix))

    def close(self) -> None:
        self._leases.clear()
        self._released.clear()


@dataclass
class _Held:
    """A lease of :class:`ProcessAccount`: its key, its sequence number, whether rejected,
    and the sequence number when its answer was complete."""

    key: str
    taken: int
    rejected: bool = False
    answered: int | None = None
