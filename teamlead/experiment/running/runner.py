"""Run an experiment: every task x variant x trial as a full coordinator run.

Trials run in a seeded, randomized, interleaved order, the spec's ``concurrency`` of them
at once. Their API requests (not the trials) are paced by the process's request relay and
its governor (bucket per model, shared by every trial; see :mod:`teamlead._relay`), which
stays up for the whole experiment. Each trial appends one versioned record to
``DIR/trials.jsonl``; a rerun skips the keys already finished. Only infrastructure
failures (the API's 429/5xx, the CLI failing to start, a failing ``setup``) are retried, and
retried trials are flagged. Each trial runs in a workspace of its own, with ``setup``
before and ``check`` after the lead (see :mod:`.trial` and :mod:`.workspace`).

Each trial's session id is a UUID derived from (experiment seed, variant, task, trial), so
a scripted model can seed its randomness per trial and a rerun is reproducible.

Example:
    >>> summary = anyio.run(run_experiment, spec, Path("out"))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions

from ..._claude import api_message_id, is_scripted_message
from ..._control import labelled
from ..._gate.prompt_limits import prompt_limits
from ..._otel import trial_scope
from ..._redact import redact
from ..._run import default_process_state
from ..._run.relayed import relayed
from ..._version import __version__
from ...clock import SYSTEM_CLOCK, Clock
from ...coordinator import QueryFn, run_stream
from ...errors import UsageError
from ...events import ConcurrencyChanged, Finished, RateLimited
from ...policy import TRANSIENT_STATUSES, Policy
from ...prompts import Strategy, apply_strategy, load_strategy
from ..specs.records import TrialKey, TrialRecord, TrialWriter, finished_among, read_records
from ..specs.spec import ExperimentSpec, TaskSpec, VariantSpec
from .agent_counts import AgentCounts, agent_counts
from .grader import grade_answer
from .outdir import OutDir, make_out_dir
from .trial import Outcome, run_trial, trial_source
from .workspace import Workspaces

__all__ = [
    "ExperimentProgress",
    "TrialExecutor",
    "RunSummary",
    "grade_answer",
    "run_experiment",
    "run_one_trial",
    "trial_order",
    "trial_session_id",
]

_INFRA_RETRIES = 2
_RATE_LIMIT_PAUSE_S = 1.0
_NAMESPACE = uuid.UUID("6f1c2a7e-4b0d-4c59-9a4e-2f8d3b1e7c10")

# USD per million tokens (input, output) for grading cost; unknown models use the last row.


def trial_session_id(seed: int, key: TrialKey, attempt: int = 1, run_id: str = "") -> str:
    """The session UUID of one trial's ``attempt`` (a retry needs a new session).

    Deterministic in the seed, the trial and ``run_id`` (kept in the out dir, see
    :class:`~teamlead.experiment.running.outdir.OutDir`), so two runs never share a session id
    while a rerun on the same out dir resumes the same ones.
    """
    suffix = "" if attempt == 1 else f"|attempt-{attempt}"
    run = f"{run_id}|" if run_id else ""
    name = f"{run}{seed}|{key.variant}|{key.task}|{key.trial}{suffix}"
    return str(uuid.uuid5(_NAMESPACE, name))


def trial_order(spec: ExperimentSpec, done: set[TrialKey] | None = None) -> list[TrialKey]:
    """Every unfinished trial in a seeded random order, interleaved across variants.

    Trials are shuffled within each trial round, so variants and tasks mix evenly over
    time (drift in the API hits every variant alike) and a partial run stays balanced.
    """
    rng = random.Random(spec.experiment.seed)
    order: list[TrialKey] = []
    for trial in range(spec.experiment.trials):
        block = [TrialKey(v.name, t.id, trial) for t in spec.tasks for v in spec.variants]
        rng.shuffle(block)
        order.extend(block)
    return [k for k in order if not done or k not in done]


@dataclass
class ExperimentProgress:
    """Live counters for the progress bar."""

    total: int
    done: int = 0
    skipped: int = 0
    in_flight: int = 0
    rate_limited: int = 0
    retried: int = 0
    failed: int = 0
    started: float = field(default_factory=time.monotonic)
    changes: list[ConcurrencyChanged] = field(default_factory=list)
    grader_errors: list[str] = field(default_factory=list)


@dataclass
class RunSummary:
    """What :func:`run_experiment` did."""

    out_dir: Path
    planned: int
    skipped: int
    ran: int
    failed: int
    retried: int
    rate_limited: int
    cost_usd: float
    stopped_reason: str | None = None
    #: some trial was answered by teamlead's scripted model: ``cost_usd`` is then the
    #: CLI's list-price estimate for made-up tokens, and nothing was charged for those
    scripted: bool = False


@functools.lru_cache(maxsize=1)
def _sdk_versions() -> tuple[str, str]:
    import claude_agent_sdk

    from ..._claude import cli_version

    return claude_agent_sdk.__version__, cli_version()


def _trial_options(
    base: ClaudeAgentOptions,
    spec: ExperimentSpec,
    variant: VariantSpec,
    task: TaskSpec,
    strategy: Strategy,
    session_id: str,
    cwd: Path,
    policy: Policy,
) -> ClaudeAgentOptions:
    fields: dict[str, Any] = {"session_id": session_id, "cwd": str(cwd)}
    model = spec.model_for(variant)
    if model:
        fields["model"] = model
    for key, value in variant.options.items():
        if not hasattr(base, key):
            raise UsageError(f"variant {variant.name!r}: unknown SDK option {key!r}")
        fields[key] = value
    options = dataclasses.replace(base, **fields)
    # the prompt states the limits the trial's spawn gate enforces
    return apply_strategy(options, strategy, values=prompt_limits(policy.spawn, options.env))


async def _lead_trial(
    key: TrialKey,
    spec: ExperimentSpec,
    strategies: Mapping[str, Strategy],
    query_fn: QueryFn | None,
    policy: Policy,
    attempt: int,
    base: ClaudeAgentOptions,
    cwd: Path,
    run_id: str = "",
) -> tuple[TrialRecord, bool, int]:
    """Run the lead of one trial in ``cwd``; returns (record, infrastructure?, 429s met).

    The 429s are those the relay met (absorbed or passed on), or, for a run that went
    direct, 1 when the CLI's own requests ended in a 429.
    """
    variant, task = spec.variant(key.variant), spec.task(key.task)
    strategy = strategies[variant.name]
    session_id = trial_session_id(spec.experiment.seed, key, attempt, run_id)
    spawn = spec.spawn_for(variant)
    if spawn is not None:
        policy = policy.model_copy(update={"spawn": spawn})
    options = _trial_options(base, spec, variant, task, strategy, session_id, cwd, policy)
    finished: Finished | None = None
    error: str | None = None
    started_at = datetime.now(timezone.utc)
    start = time.monotonic()
    relay_429s = 0
    scripted = answered = False  # any message from the scripted server; any message at all
    run = run_stream(task.prompt, options, query_fn=query_fn, policy=policy)
    name = f"experiment {spec.experiment.name}: {key.variant} · {key.task} · trial {key.trial}"
    try:  # `teamlead ps` and the run history name the trial's run so
        with labelled(name):
            async with aclosing(run):
                async for item in run:
                    if isinstance(item, Finished):
                        finished = item
                    elif isinstance(item, RateLimited):
                        relay_429s += item.status == 429
                    elif not isinstance(item, ConcurrencyChanged):  # the runner sees those once
                        message_id = api_message_id(item)
                        if message_id:
                            scripted = scripted or is_scripted_message(message_id)
                            answered = True
    except Exception as exc:  # noqa: BLE001 - a broken trial is recorded, never fatal
        error = f"{type(exc).__name__}: {exc}"
    wall = time.monotonic() - start
    # what the run itself tracked of its session (nothing when it never started)
    tracker = run.tracker
    results = tracker.results if tracker is not None else []
    statuses = [r.api_error_status for r in results if r.api_error_status]
    relayed_run = finished is not None and finished.relay is not None
    limited = relay_429s if relayed_run else int(429 in statuses)
    status = finished.status if finished else "failed"
    infra = error is not None or (
        status == "failed" and any(s in TRANSIENT_STATUSES for s in statuses)
    )
    if status == "failed" and not infra and finished is not None and not results:
        infra = True  # the CLI never answered at all
    usage_in = sum(int((r.usage or {}).get("input_tokens", 0) or 0) for r in results)
    usage_out = sum(int((r.usage or {}).get("output_tokens", 0) or 0) for r in results)
    calls = len(tracker.agent_calls) if tracker is not None else 0
    # an Agent call, or a Workflow call starting agents
    first = tracker.first_delegation_at if tracker is not None else None
    started = tracker.started_at if tracker is not None else 0.0
    most_calls = tracker.max_parallel_agent_calls if tracker is not None else 0
    agents = agent_counts(finished.tasks) if finished is not None else AgentCounts()
    sdk_version, cli = _sdk_versions()
    record = TrialRecord(
        variant=key.variant,
        task=key.task,
        trial=key.trial,
        status=status,
        error_class=("infrastructure" if infra else "model") if status == "failed" else None,
        delegated=calls > 0 or agents.workflow_agents > 0,
        agent_calls=calls,
        max_agent_calls_per_message=most_calls,
        parallel=most_calls >= 2 or agents.workflow_agents_at_once >= 2,
        time_to_first_agent_s=max(0.0, first - started)
        if first is not None and (calls or agents.workflow_agents)
        else None,
        workflow_agents=agents.workflow_agents,
        workflow_agents_at_once=agents.workflow_agents_at_once,
        workflow_agents_lost=agents.workflow_agents_lost,
        workflow_agents_cached=agents.workflow_agents_cached,
        agents_at_once=agents.agents_at_once,
        wall_s=wall,
        turns=sum(r.num_turns or 0 for r in results),
        input_tokens=usage_in,
        output_tokens=usage_out,
        cost_usd=finished.cost_usd if finished else (tracker.cost_usd if tracker else 0.0),
        resumes=finished.resumes if finished else 0,
        final_text=redact((finished.result or "") if finished else (error or ""), base.env),
        prompt_name=strategy.meta.name,
        prompt_version=strategy.meta.version,
        prompt_sha256=strategy.sha256,
        prompt_source=strategy.source,
        model=spec.model_for(variant),
        sdk_version=sdk_version,
        cli_version=cli,
        teamlead_version=__version__,
        started_at=started_at,
        scripted_model=scripted if answered else None,
    )
    return record, infra, limited


async def run_one_trial(
    key: TrialKey,
    spec: ExperimentSpec,
    base: ClaudeAgentOptions,
    strategies: Mapping[str, Strategy],
    policy: Policy,
    attempt: int,
    *,
    workspaces: Workspaces,
    out_dir: Path,
    query_fn: QueryFn | None = None,
    run_id: str = "",
) -> Outcome:
    """One attempt of one trial on this machine: workspace, setup, the lead, check.

    What :func:`run_experiment` runs per attempt, and what a remote worker (a Ray task)
    must call so the trial gets its workspace where it runs. Make ``workspaces`` on that
    machine, once per process (it holds per-repository locks and state; it does not
    pickle); the spec's ``cwd`` must exist there. Command output goes to
    ``out_dir/commands/`` on this machine; records name it relative to ``out_dir``.
    """
    lead = functools.partial(
        _lead_trial, key, spec, strategies, query_fn, policy, attempt, run_id=run_id
    )
    scope = trial_scope(  # one trace per trial attempt (when telemetry is on)
        default_process_state().telemetry,  # the trial's run's: it is given no other
        experiment=spec.experiment.name,
        variant=key.variant,
        task=key.task,
        trial=key.trial,
        attempt=attempt,
        strategy=spec.variant(key.variant).strategy,
    )
    with scope:
        return await run_trial(key, spec, base, lead, attempt, workspaces, out_dir)


TrialExecutor = Callable[
    [TrialKey, ExperimentSpec, ClaudeAgentOptions, Mapping[str, Strategy], Policy, int, str],
    Awaitable[tuple[TrialRecord, bool, int]],
]
"""Runs one trial attempt somewhere else (e.g. a Ray task, which calls :func:`run_one_trial`
there); takes the run id last and returns what :func:`run_one_trial` returns."""


async def run_experiment(
    spec: ExperimentSpec,
    out_dir: Path,
    *,
    base_options: ClaudeAgentOptions | None = None,
    query_fn: QueryFn | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    on_progress: Callable[[ExperimentProgress], None] | None = None,
    keep_workspaces: bool = False,
    workspace_dir: Path | None = None,
    execute: TrialExecutor | None = None,
) -> RunSummary:
    """Run every unfinished trial of ``spec`` and append records to ``out_dir/trials.jsonl``.

    Args:
        spec: a validated spec (see :func:`~teamlead.experiment.load_spec`).
        out_dir: created if missing; ``trials.jsonl`` there is appended to, never rewritten.
            Locked for the run; its ``run.json`` keeps the run id the session ids derive from.
        base_options: SDK options every trial starts from (env, permission mode, ...).
        query_fn: the generator each coordinator wraps (default ``claude_agent_sdk.query``).
        policy: the coordinator policy per trial; ``deadline_s`` from the spec wins.
        on_progress: called after every change of the counters.
        keep_workspaces: leave each trial's workspace on disk (the record has its path).
        workspace_dir: where trial workspaces go (default: the system temp dir).

    Raises:
        UsageError: a task's directory is missing, or a worktree is asked for outside git.
        execute: runs each trial attempt instead of this process (the Ray backend); the
            records are still written here, by this process only.
    """
    out_dir = Path(out_dir)
    make_out_dir(out_dir)
    path = out_dir / "trials.jsonl"
    earlier = read_records(path, missing_ok=True).records  # of the runs this one resumes
    done = finished_among(earlier, retry_infrastructure=True)
    # what they spent counts against the budget too
    spent_before = sum(r.cost_usd + (r.grader_cost_usd or 0.0) for r in earlier)
    order = trial_order(spec)
    todo = [k for k in order if k not in done]
    strategies = {v.name: load_strategy(v.strategy) for v in spec.variants}
    base = base_options or ClaudeAgentOptions()
    workspaces = Workspaces(keep=keep_workspaces, exclude=[out_dir], base_dir=workspace_dir)
    for task in spec.tasks:
        workspaces.check(trial_source(spec, task, base), spec.steps_for(task).workspace)
    trial_policy = policy or Policy()
    if spec.experiment.deadline_s:
        trial_policy = trial_policy.model_copy(update={"deadline_s": spec.experiment.deadline_s})
    progress = ExperimentProgress(total=len(order), skipped=len(order) - len(todo))

    def relay_event(event: object) -> None:
        if isinstance(event, ConcurrencyChanged):
            progress.changes.append(event)
            _report()

    cap = spec.experiment.concurrency
    spent = 0.0
    stopped: str | None = None
    scripted = False
    queue = list(todo)
    budget = spec.experiment.max_cost_usd
    env = dict(base.env)

    async def worker(writer: TrialWriter) -> None:
        nonlocal spent, stopped, scripted
        while queue and stopped is None:
            if budget is not None and spent_before + spent >= budget:
                stopped = f"cost budget ${budget:g} reached (${spent_before + spent:.4f})"
                break
            key = queue.pop(0)
            variant = spec.variant(key.variant)
            attempts = 0
            while True:
                attempts += 1
                progress.in_flight += 1
                _report()
                try:
                    if execute is not None:
                        run = execute(key, spec, base, strategies, trial_policy, attempts, run_id)
                    else:
                        run = run_one_trial(
                            key,
                            spec,
                            base,
                            strategies,
                            trial_policy,
                            attempts,
                            workspaces=workspaces,
                            out_dir=out_dir,
                            query_fn=query_fn,
                            run_id=run_id,
                        )
                    record, infra, limited = await run
                finally:
                    progress.in_flight -= 1
                progress.rate_limited += limited
                if infra and attempts <= _INFRA_RETRIES:
                    progress.retried += 1
                    _report()
                    if limited:  # a 429 reached the CLI: let the limit's window pass first
                        await clock.sleep(_RATE_LIMIT_PAUSE_S)
                    continue
                break
            if attempts > 1:
                record = record.model_copy(update={"retried": True, "attempts": attempts})
            grader = spec.experiment.grader
            billed = 0.0
            if grader is not None and (record.status == "failed" or not record.final_text):
                why = "the trial failed" if record.status == "failed" else "no final answer"
                record = record.model_copy(update={"grader_error": why})  # not sent to grade
            elif grader is not None:
                grade = await grade_answer(
                    grader,
                    spec.task(key.task),
                    record.final_text,
                    env=env,
                    default_model=spec.model_for(variant),
                )
                billed = grade.billed_usd
                update: dict[str, Any] = {
                    "grade": grade.score,
                    "grader_cost_usd": grade.cost_usd,
                    "grader_error": grade.error,
                }
                if grade.scripted:
                    update["scripted_model"] = True
                record = record.model_copy(update=update)
                if grade.error is not None:
                    progress.grader_errors.append(
                        f"{key.variant}/{key.task}/{key.trial}: {grade.error}"
                    )
            await anyio.to_thread.run_sync(writer.append, record)
            scripted = scripted or bool(record.scripted_model)
            spent += record.cost_usd + billed  # a grade that failed may still have cost
            progress.done += 1
            progress.failed += record.status == "failed"
            _report()

    def _report() -> None:
        if on_progress:
            on_progress(progress)

    _report()  # trials recorded by an earlier run show as done from the start
    # One relay run for the whole experiment keeps the shared relay up between trials and
    # reports each governor change once (every trial's run is told of them too). The out dir
    # is held (flock) for the whole run: a second run there stops at once.
    async with relayed(base, trial_policy, on_event=relay_event):
        with OutDir(out_dir) as run_id, TrialWriter(path) as writer:
            async with anyio.create_task_group() as tg:
                for _ in range(min(cap, max(1, len(todo)))):
                    tg.start_soon(worker, writer)
    return RunSummary(
        out_dir=out_dir,
        planned=len(order),
        skipped=progress.skipped,
        ran=progress.done,
        failed=progress.failed,
        retried=progress.retried,
        rate_limited=progress.rate_limited,
        cost_usd=spent,
        stopped_reason=stopped,
        scripted=scripted,
    )
