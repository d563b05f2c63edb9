"""What every process of one account shares: learnt limits and the requests in flight.

An :class:`Account` holds, per bucket key, the learnt :class:`~teamlead._governor.aimd.Limits`
(updated atomically: a rule reads them and writes its result in one step, so two processes
never lose each other's cut) and the *leases*: one per slot held anywhere on the account,
so a slot is granted only while the whole account is under the limit. A lease dies with its
process (or after its time to live), so a crash never leaks a slot.

A lease is stamped, in the step that takes it, with the bucket's limits (so with the epoch
its slot belongs to) and with the account's sequence number; giving one back moves the
sequence on. A 429 is reported with :meth:`Account.update_rejected`: in one atomic step the
lease is marked rejected, and the rule is given the leases the upstream may have been
running when it rejected: every lease of the provider not rejected whose request was still
running at any moment since the rejected one was taken. A request runs until its lease is
given back, or until :meth:`Account.answered` marked its answer complete (its last event
came; the lease stays held until the body's last byte, but the upstream counts it no
more). So a request that ended, in another process, while this one's 429 was on its way
is not lost from the count; the lead's answer whose last bytes are still being read as
its agents' requests go out is not counted; and a lease taken by another process while the
rule runs is either counted or belongs to the next epoch. The count is an upper bound of
what the upstream accepted, so a measured cut never lands below the true limit; the late
rejections of the burst then settle it down to it.

Three accounts share one interface:

* :class:`ProcessAccount`: this process alone (``--limits process``); the limits may live in
  any :class:`~teamlead._governor.store.LimitStore` (e.g. the Ray actor's replica);
* :class:`~teamlead._governor.sqlite_account.MachineAccount`: every process of the user on
  this machine, through an SQLite file in the user's cache directory (the default);
* :class:`~teamlead._governor.redis_account.RedisAccount`: every machine, through Redis.

A failing shared account is wrapped by :class:`FallbackAccount`: one warning line, then the
run goes on with the next account. The rules run on the caller's monotonic clock; a shared
account stores wall-clock times, and reads back what it stored as untrusted input (see
:mod:`.stored`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from .aimd import Limits, Step
from .store import LimitStore, MemoryStore

__all__ = [
    "Account",
    "AccountError",
    "Bounds",
    "CountedRule",
    "FallbackAccount",
    "Lease",
    "LeaseRenewer",
    "ProcessAccount",
    "bounded",
    "describe",
    "provider_of",
]

log = logging.getLogger("teamlead.governor")

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

        ``rule`` is also given the leases of the keys matching ``prefix``, not marked
        rejected, whose request ran at any moment since ``lease`` was taken (``lease``
        itself not counted); for a lease this account does not know, those running now.
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

    def __init__(self, store: LimitStore | None = None) -> None:
        self._store: LimitStore = store if store is not None else MemoryStore()
        self._leases: dict[str, _Held] = {}  # token -> its lease
        self._seq = 0
        # (sequence, key) of leases given back, not rejected, while a live lease may count them
        self._released: list[tuple[int, str]] = []

    def limits(self, key: str) -> Limits | None:
        return self._store.get(key)

    def update(self, key: str, rule: Rule) -> Step:
        limits, change = rule(self._store.get(key))
        self._store.put(key, limits)
        return limits, change

    def take(self, bounds: Bounds) -> Lease | None:
        if self.in_flight(bounds.key) >= bounds.limit:
            return None
        if bounds.provider_limit is not None and (
            self.in_flight(bounds.provider) >= bounds.provider_limit
        ):
            return None
        if bounds.total_limit is not None and len(self._leases) >= bounds.total_limit:
            return None
        self._seq += 1
        token = str(self._seq)
        self._leases[token] = _Held(bounds.key, self._seq)
        return Lease(bounds.key, token, self, self._store.get(bounds.key))

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
        limits, change = rule(self._store.get(lease.key), running + ended)
        self._store.put(lease.key, limits)
        return limits, change

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


class FallbackAccount:
    """``primary`` until it fails, then ``fallback``, with one warning line.

    A lease goes back to the account that issued it; one a failed account cannot take back
    expires there by its time to live. The fallback is made on first need, so a healthy
    primary costs nothing else.
    """

    def __init__(self, primary: Account, fallback: Callable[[], Account]) -> None:
        self._current = primary
        self._make_fallback: Callable[[], Account] | None = fallback
        self.failed: str | None = None  # the warning given, once it failed

    @property
    def shared(self) -> bool:
        return self._current.shared

    @property
    def current(self) -> Account:
        """The account in use now."""
        return self._current

    def _fail(self, exc: BaseException) -> None:
        make = self._make_fallback
        if make is None:  # the fallback itself failed: nothing left to switch to
            raise exc
        self._make_fallback = None
        failed, self._current = self._current, make()
        reason = str(exc) or type(exc).__name__
        self.failed = f"shared limits: {reason}; going on with {describe(self._current)}"
        log.warning("%s", self.failed)
        try:
            failed.close()
        except Exception:  # already broken; its leases expire by their time to live
            log.debug("closing the failed account failed", exc_info=True)

    def _call(self, call: Callable[[Account], Any]) -> Any:
        try:
            return call(self._current)
        except AccountError as exc:
            self._fail(exc)
            return call(self._current)

    def limits(self, key: str) -> Limits | None:
        result: Limits | None = self._call(lambda a: a.limits(key))
        return result

    def update(self, key: str, rule: Rule) -> Step:
        result: Step = self._call(lambda a: a.update(key, rule))
        return result

    def take(self, bounds: Bounds) -> Lease | None:
        result: Lease | None = self._call(lambda a: a.take(bounds))
        return result

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        result: Step = self._call(lambda a: a.update_rejected(lease, prefix, rule))
        return result

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
        result: int = self._call(lambda a: a.in_flight(prefix))
        return result

    def close(self) -> None:
        self._current.close()


def describe(account: Account) -> str:
    """What ``account`` is, for a warning line."""
    if isinstance(account, FallbackAccount):
        account = account.current
    if isinstance(account, ProcessAccount):
        return "the limits of this process alone"
    text = getattr(account, "describe", None)  # the shared accounts say where they are
    return str(text()) if callable(text) else type(account).__name__


class LeaseRenewer:
    """The thread of a shared account that keeps this process's leases alive.

    It calls ``renew`` every ``period_s`` from the first :meth:`start` until :meth:`stop`.
    A failed renewal is tried again at the next period: the leases expire by themselves
    meanwhile, and the account's next grant reports the failure.

    Args:
        renew: moves the expiry of this process's leases ahead.
        period_s: the time between renewals.
        name: the thread's name.
        stop_s: the longest :meth:`stop` waits for a renewal under way (the account's own
            bound on one call, so a hung store never holds the process's exit).
    """

    def __init__(
        self, renew: Callable[[], None], period_s: float, name: str, *, stop_s: float = 2.0
    ) -> None:
        self._renew = renew
        self._period = period_s
        self._name = name
        self._stop_s = stop_s
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start renewing (once; a no-op while running or after :meth:`stop`)."""
        if self._thread is None and not self._stopped.is_set():
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._period):
            try:
                self._renew()
            except AccountError:
                continue
            except Exception:  # a thread that dies renews nothing more: keep going
                log.debug("renewing the leases failed", exc_info=True)

    def stop(self) -> None:
        """Stop renewing and wait (``stop_s`` at most) for a renewal under way; idempotent."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._stop_s)


def bounded(call: Callable[[], object], seconds: float, name: str) -> bool:
    """Run ``call`` in a daemon thread and wait ``seconds`` at most; whether it ended.

    For the best-effort cleanup of a shared account (give its leases back, close the
    connection) at the end of a run: each call to the store is bounded, but a store that
    answers slowly, or a client library's own wait, must not hold the process's exit. What
    was not given back expires by its own time; an error is the store's, and is let be.
    """

    def run() -> None:
        try:
            call()
        except Exception:  # best effort: the leases expire by their time to live
            log.debug("%s failed", name, exc_info=True)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(timeout=seconds)
    return not thread.is_alive()
