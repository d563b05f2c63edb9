"""The experiment's account on Ray: learnt limits shared by every node through one actor.

:class:`RayAccount` is this process's account (:class:`~teamlead._governor.ProcessAccount`:
leases counted here) whose learnt limits live in one named Ray actor
(:class:`_LimitsActor`): a 429 cut on one node is seen by all. The account keeps a local
replica, because the governor's rules are synchronous and must not wait on the network:
each write goes to the actor without waiting, and a worker pulls the shared state before
its trial and every few seconds during it (:func:`kept_fresh`). Times inside the limits
are each process's monotonic clock, so they cross the actor as wall time. The actor also
counts executions of each trial token (see
:mod:`~teamlead.experiment.running.ray_backend`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ..._governor import Limits, ProcessAccount
from ...clock import SYSTEM_CLOCK, Clock
from .ray_cluster import NAMESPACE

__all__ = ["RayAccount", "kept_fresh"]

_REFRESH_S = 2.0
"""How often a worker pulls the shared limits while its trial runs."""
_TIMED = ("bad_at", "cooldown_until")
_ACTOR_START_S = 180.0
"""How long :meth:`RayAccount.connect` waits for a new actor's worker to start."""


class _LimitsActor:
    """The shared learnt limits, as wall-clock :class:`Limits` fields, and run counts.

    A write from a process that has not seen the latest epoch (a stale replica) is
    ignored, so a cut on one node is not undone by another node's late success.
    """

    def __init__(self) -> None:
        self._limits: dict[str, dict[str, Any]] = {}
        self._runs: dict[str, int] = {}

    def put(self, key: str, limits: dict[str, Any]) -> None:
        current = self._limits.get(key)
        if current is None or limits["epoch"] >= current["epoch"]:
            self._limits[key] = limits

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return dict(self._limits)

    def claim(self, token: str) -> int:
        """Count one execution of ``token``; returns how many there have been."""
        self._runs[token] = self._runs.get(token, 0) + 1
        return self._runs[token]


def _to_wall(limits: Limits, offset: float) -> dict[str, Any]:
    data = dataclasses.asdict(limits)
    for name in _TIMED:
        if math.isfinite(data[name]):
            data[name] += offset
    return data


def _from_wall(data: Mapping[str, Any], offset: float) -> Limits:
    fields = dict(data)
    for name in _TIMED:
        if math.isfinite(fields[name]):
            fields[name] -= offset
    return Limits(**fields)


class RayAccount(ProcessAccount):
    """This process's account, its learnt limits shared through a named Ray actor.

    Leases are counted in this process, as in :class:`ProcessAccount`. The limits are read
    from a local replica; each write updates it and is sent to the actor without waiting;
    :meth:`refresh` (blocking, call it off the event loop) replaces the replica with the
    shared state.

    Example:
        >>> account = RayAccount.connect("teamlead-governor/ab")  # doctest: +SKIP
        >>> Governor(GovernorPolicy(ceiling=4), account=account)  # doctest: +SKIP
    """

    def __init__(self, actor: Any, *, clock: Clock = SYSTEM_CLOCK, timeout_s: float = 30.0):
        super().__init__()
        self._actor = actor
        self._clock = clock
        self._timeout_s = timeout_s

    @classmethod
    def connect(
        cls, name: str, *, clock: Clock = SYSTEM_CLOCK, ready_within_s: float = _ACTOR_START_S
    ) -> RayAccount:
        """The account of the actor ``name`` (created if missing) in the current Ray session,
        its replica filled from the actor once it answers.

        A new actor is placed on this process's node: a run's shared limits and run counts
        then live as long as the driver does, and a worker node that dies takes none of it.
        Starting one takes a worker process, slow on a loaded node: ``connect`` waits for
        it up to ``ready_within_s`` (then :class:`RuntimeError`), so that every later read
        meets a running actor and ``timeout_s`` bounds the read alone.
        """
        import ray
        from ray.exceptions import GetTimeoutError
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        actor = (
            ray.remote(num_cpus=0)(_LimitsActor)
            .options(name=name, namespace=NAMESPACE, get_if_exists=True, scheduling_strategy=here)
            .remote()
        )
        account = cls(actor, clock=clock)
        try:
            account._pull(ready_within_s)
        except GetTimeoutError:
            raise RuntimeError(
                f"the Ray actor {name!r} holding the shared limits did not start within "
                f"{ready_within_s:g} s: is the node overloaded? (RayAccount.connect's "
                f"ready_within_s waits longer)"
            ) from None
        return account

    @property
    def actor(self) -> Any:
        """The actor handle (for :func:`_trial_task`'s run counts)."""
        return self._actor

    def _offset(self) -> float:
        return self._clock.time() - self._clock.monotonic()

    def _keep(self, key: str, limits: Limits) -> None:
        super()._keep(key, limits)
        self._actor.put.remote(key, _to_wall(limits, self._offset()))

    def refresh(self) -> None:
        """Replace the local replica with the actor's state (waits at most ``timeout_s``)."""
        self._pull(self._timeout_s)

    def _pull(self, within_s: float) -> None:
        import ray

        shared = ray.get(self._actor.snapshot.remote(), timeout=within_s)
        offset = self._offset()
        self._limits = {key: _from_wall(data, offset) for key, data in shared.items()}


@asynccontextmanager
async def kept_fresh(account: RayAccount, every_s: float = _REFRESH_S) -> AsyncIterator[None]:
    """Refresh ``account``'s replica every ``every_s`` in the background for the block, so
    a governor on it sees what other nodes learn while a trial runs."""

    async def keep() -> None:
        while True:
            await anyio.sleep(every_s)
            with contextlib.suppress(Exception):  # a slow actor: keep the replica, try again
                await anyio.to_thread.run_sync(account.refresh, abandon_on_cancel=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
