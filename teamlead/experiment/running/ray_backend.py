"""Run an experiment's trials as Ray tasks, on one machine or a cluster.

:func:`run_experiment_ray` is :func:`~teamlead.experiment.running.runner.run_experiment` with each
trial attempt shipped to a Ray task (:func:`_trial_task`) instead of run in this process.
Everything else stays on the driver, as in a local run: the trial order, how many trials
are in flight (the spec's ``concurrency``), retries of infrastructure failures, grading,
the cost budget, the progress counters and the *only* writer of ``trials.jsonl``. So a
run stays resumable, and a trial is never written twice: when a node dies mid-trial Ray
re-executes the task, the driver still awaits exactly one result per (trial key,
attempt), and it refuses a second submission or a result for a token it did not submit.

Each worker's request relay paces the trial's API requests with a governor whose learnt
limits live in one named Ray actor (:class:`_LimitsActor`), through the worker's
account (:class:`RayAccount`, this process's account whose limits are shared): a 429 cut
on one node is seen by all. The account keeps a local replica, because the governor's
rules are synchronous and must not wait on the network; a worker pulls the shared state
before its trial and every few seconds during it (:func:`kept_fresh`). Times
inside the limits are each process's monotonic clock, so they cross the actor as wall
time. The actor also counts executions of each trial token, so a re-executed task gets a
fresh CLI session id instead of colliding with the dead one's. It lives on the driver's
node, so a worker node that dies takes none of that with it. (With ``--limits redis://…``
the relays keep their limits and their requests in flight in that Redis instead.) The
base options travel to each task, a session store among them as its settings: each task
opens its own connections to it and closes them after its trial.

Ray is an optional dependency (``pip install -e '.[ray]'`` from the checkout), imported on
first use.
:func:`~teamlead.experiment.running.ray_cluster.ray_session` (re-exported here) connects to
``RAY_ADDRESS``, or starts a local Ray instance for the run and shuts it down after.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions

from ..._governor import Limits, ProcessAccount
from ..._sessions import close_store
from ...clock import SYSTEM_CLOCK, Clock
from ...policy import Policy
from ...prompts import Strategy
from ..specs.records import TrialKey, TrialRecord
from ..specs.spec import ExperimentSpec
from .ray_cluster import NAMESPACE, error_line, ray_session
from .runner import ExperimentProgress, RunSummary, run_experiment, run_one_trial

__all__ = ["RayAccount", "kept_fresh", "ray_session", "run_experiment_ray"]

_TASK_RETRIES = 3
"""Ray re-executions of a trial whose worker or node died (system failures only)."""
_FORWARDED_ENV = ("ANTHROPIC_", "CLAUDE_", "DISABLE_")
"""Variables the trials' CLI needs on every node: the API endpoint, key and CLI settings."""
_NO_DEADLINE_S = 3600.0
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


@dataclasses.dataclass(frozen=True)
class _Place:
    """Where a trial's files go on its node: the out dir (for command output) and whether
    its workspace is kept."""

    out_dir: str
    keep_workspaces: bool = False


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


def _trial_task(
    token: str,
    key: TrialKey,
    spec: ExperimentSpec,
    base: ClaudeAgentOptions,
    strategies: Mapping[str, Strategy],
    policy: Policy,
    attempt: int,
    run_id: str,
    place: _Place,
    actor: Any,
) -> tuple[str, str, bool, int]:
    """One trial attempt on a Ray worker: ``(token, record JSON, infra?, 429s met)``.

    The trial's workspace is made here, on the worker's machine, and the worker's request
    relay's governor is on the shared :class:`RayAccount`, so every node paces against the
    same account limits.
    """
    import ray

    from ..._run import default_process_state
    from .workspace import Workspaces

    runs = int(ray.get(actor.claim.remote(token), timeout=60))
    if runs > 1:  # re-executed after a crash: the dead run's session id may be taken
        run_id = f"{run_id}/rerun-{runs}"
    account = RayAccount(actor)
    account.refresh()  # start from what the other nodes learnt
    default_process_state().use_account(account)  # the worker's process: its relay's
    out_dir = Path(place.out_dir)

    async def trial() -> tuple[TrialRecord, bool, int]:
        try:
            async with kept_fresh(account):
                return await run_one_trial(
                    key,
                    spec,
                    base,
                    strategies,
                    policy,
                    attempt,
                    workspaces=Workspaces(keep=place.keep_workspaces, exclude=[out_dir]),
                    out_dir=out_dir,
                    run_id=run_id,
                )
        finally:  # this task's copy of the session store: its connections are this loop's
            await close_store(base.session_store)

    record, infra, limited = anyio.run(trial)
    return token, record.model_dump_json(), infra, limited


def _crashed_record(
    key: TrialKey, spec: ExperimentSpec, strategy: Strategy, wall_s: float, reason: str
) -> TrialRecord:
    """The record of a trial Ray could not finish (its worker kept dying, or it timed out)."""
    return TrialRecord(
        variant=key.variant,
        task=key.task,
        trial=key.trial,
        status="failed",
        error_class="infrastructure",
        wall_s=wall_s,
        final_text=reason,
        prompt_name=strategy.meta.name,
        prompt_version=strategy.meta.version,
        prompt_sha256=strategy.sha256,
        prompt_source=strategy.source,
        model=spec.model_for(spec.variant(key.variant)),
        started_at=datetime.now(timezone.utc),
    )


def _forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED_ENV)}


async def run_experiment_ray(
    spec: ExperimentSpec,
    out_dir: Path,
    *,
    base_options: ClaudeAgentOptions | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    on_progress: Callable[[ExperimentProgress], None] | None = None,
    task_cpus: float = 0.5,
    keep_workspaces: bool = False,
) -> RunSummary:
    """Run every unfinished trial of ``spec`` as Ray tasks; records are written here only.

    Needs a Ray session (see :func:`ray_session`). ``task_cpus`` is each trial's CPU
    reservation: a trial mostly waits on the API, so fractions let more run per core.
    ``keep_workspaces`` keeps each trial's workspace on the node that ran it.
    """
    import ray
    from ray.exceptions import RayError

    name = f"teamlead-governor/{spec.experiment.name}/{uuid.uuid4().hex[:12]}"
    account = RayAccount.connect(name, clock=clock)
    remote = ray.remote(
        num_cpus=task_cpus,
        max_retries=_TASK_RETRIES,
        runtime_env={"env_vars": _forwarded_env()},
    )(_trial_task)
    submitted: set[str] = set()
    place = _Place(str(out_dir), keep_workspaces)

    async def execute(
        key: TrialKey,
        spec: ExperimentSpec,
        base: ClaudeAgentOptions,
        strategies: Mapping[str, Strategy],
        trial_policy: Policy,
        attempt: int,
        run_id: str,
    ) -> tuple[TrialRecord, bool, int]:
        token = f"{key.variant}\x1f{key.task}\x1f{key.trial}\x1f{attempt}"
        if token in submitted:
            raise RuntimeError(f"trial {key} attempt {attempt} was already submitted")
        submitted.add(token)
        ref = remote.remote(
            token,
            key,
            spec,
            base,
            strategies,
            trial_policy,
            attempt,
            run_id,
            place,
            account.actor,
        )
        budget = (trial_policy.deadline_s or _NO_DEADLINE_S) * (_TASK_RETRIES + 1) + 60.0
        start = time.monotonic()
        failure: str | None = None
        try:
            # Awaited on the event loop (no thread blocked in ray.get that the process
            # would have to wait for on its way out after a stop).
            with anyio.fail_after(budget):
                returned, data, infra, limited = await asyncio.wrap_future(ref.future())
        except anyio.get_cancelled_exc_class():
            # The run was stopped: kill the trial where it runs (Ray kills the worker and
            # the CLI it started). Nothing is recorded.
            ray.cancel(ref, force=True)
            raise
        except TimeoutError:
            ray.cancel(ref, force=True)
            failure = f"ray: no result within {budget:g} s; cancelled"
        except RayError as exc:
            failure = f"ray: {type(exc).__name__}: {error_line(exc)}"
        if failure is not None:
            wall = time.monotonic() - start
            return _crashed_record(key, spec, strategies[key.variant], wall, failure), True, 0
        if returned != token:
            raise RuntimeError(f"ray returned the result of {returned!r} for {token!r}")
        return TrialRecord.model_validate_json(data), infra, limited

    try:
        return await run_experiment(
            spec,
            out_dir,
            base_options=base_options,
            policy=policy,
            clock=clock,
            on_progress=on_progress,
            execute=execute,
        )
    finally:
        ray.kill(account.actor)
