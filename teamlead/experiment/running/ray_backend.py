"""Run an experiment's trials as Ray tasks, on one machine or a cluster.

:func:`run_experiment_ray` is :func:`~teamlead.experiment.running.runner.run_experiment` with each
trial attempt shipped to a Ray task (:func:`_trial_task`) instead of run in this process.
Everything else stays on the driver, as in a local run: the trial order, how many trials
are in flight (the spec's ``concurrency``), retries of infrastructure failures, grading,
the cost budget, the progress counters and the *only* writer of ``trials.jsonl``. So a
run stays resumable, and a trial is never written twice: when a node dies mid-trial Ray
re-executes the task, the driver still awaits exactly one result per (trial key,
attempt), and it refuses a second submission or a result for a token it did not submit.

Each worker's request relay paces the trial's API requests with a governor on the run's
:class:`~teamlead.experiment.running.ray_account.RayAccount`, whose learnt limits live in
one named Ray actor: a 429 cut on one node is seen by all. The actor also counts
executions of each trial token, so a re-executed task gets a fresh CLI session id instead
of colliding with the dead one's. It lives on the driver's node, so a worker node that
dies takes none of that with it. (With ``--limits redis://…``
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
import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions

from ..._sessions import close_store
from ...clock import SYSTEM_CLOCK, Clock
from ...policy import Policy
from ...prompts import Strategy
from ..specs.records import TrialKey, TrialRecord
from ..specs.spec import ExperimentSpec
from .ray_account import RayAccount, kept_fresh
from .ray_cluster import error_line, ray_session
from .runner import ExperimentProgress, RunSummary, run_experiment, run_one_trial

__all__ = ["ray_session", "run_experiment_ray"]

_TASK_RETRIES = 3
"""Ray re-executions of a trial whose worker or node died (system failures only)."""
_FORWARDED_ENV = ("ANTHROPIC_", "CLAUDE_", "DISABLE_")
"""Variables the trials' CLI needs on every node: the API endpoint, key and CLI settings."""
_NO_DEADLINE_S = 3600.0


@dataclasses.dataclass(frozen=True)
class _Place:
    """Where a trial's files go on its node: the out dir (for command output) and whether
    its workspace is kept."""

    out_dir: str
    keep_workspaces: bool = False


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
