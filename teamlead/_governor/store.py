"""Where the governor keeps what each bucket has learnt: a small Protocol and its default.

The governor reads a bucket's :class:`~teamlead._governor.aimd.Limits` before applying a
rule and writes the result back; queues and held slots stay local to the process. One
account used from several processes or machines can therefore share what was learnt by
passing a store that keeps ``Limits`` elsewhere (e.g. a Ray actor, with a local replica it
refreshes in the background: the rules are synchronous and must not wait on the network).
Times inside ``Limits`` are the reading process's monotonic clock, so a shared store
translates ``cooldown_until`` and ``bad_at`` to and from its own time base.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .aimd import Limits

__all__ = ["LimitStore", "MemoryStore"]


@runtime_checkable
class LimitStore(Protocol):
    """The learnt limits per bucket key."""

    def get(self, key: str) -> Limits | None:
        """The limits of ``key``, or ``None`` for a bucket never seen."""
        ...

    def put(self, key: str, limits: Limits) -> None:
        """Store the new limits of ``key``."""
        ...


class MemoryStore:
    """The default store: a dict in this process.

    Example:
        >>> store = MemoryStore()
        >>> store.put("anthropic/claude-opus-5-5", Limits(cap=3))
        >>> store.get("anthropic/claude-opus-5-5").cap
        3
    """

    def __init__(self) -> None:
        self._limits: dict[str, Limits] = {}

    def get(self, key: str) -> Limits | None:
        return self._limits.get(key)

    def put(self, key: str, limits: Limits) -> None:
        self._limits[key] = limits
