"""Run an experiment: every task x variant x trial as a full coordinator run.

Trials run in a seeded, randomized, interleaved order through the concurrency
:class:`~teamlead.governor.Governor` (bucket per model, the spec's ``concurrency`` as
ceiling and global cap). Each trial appends one versioned record to ``DIR/trials.jsonl``;
a rerun skips the keys already finished. Only infrastructure failures (the API's
429/5xx, the CLI failing to start) are retried, and retried trials are flagged.

Each trial's session id is a UUID derived from (experiment seed, variant, task, trial), so
a scripted model can seed its randomness per trial and a rerun is reproducible.

Example:
    >>> summary = anyio.run(run_experiment, spec, Path("out"))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import random
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions

from .._version import __version__
from ..clock import SYSTEM_CLOCK, Clock
from ..coordinator import QueryFn, query
from ..errors import UsageError
from ..events import Finished
from ..governor import ConcurrencyChanged, Governor, GovernorPolicy, bucket_key
from ..policy import TRANSIENT_STATUSES, Policy
from ..prompts import Strategy, apply_strategy, load_strategy
from ..tracker import Tracker
from .records import TrialKey, TrialRecord, TrialWriter, finished_keys
from .spec import ExperimentSpec, GraderSpec, TaskSpec, VariantSpec

__all__ = [
    "ExperimentProgress",
    "RunSummary",
    "grade_answer",
    "run_experiment",
    "trial_order",
    "trial_session_id",
]

_INFRA_RETRIES = 2
_NAMESPACE = uuid.UUID("6f1c2a7e-4b0d-4c59-9a4e-2f8d3b1e7c10")

# USD per million tokens (input, output) for grading cost; unknown models use the last row.
_PRICES: dict[str, tuple[float, float]] = {
    "haiku": (1.0, 5.0),
    "sonnet": (3.0, 15.0),
    "opus": (5.0, 25.0),
    "": (5.0, 25.0),
}


def trial_session_id(seed: int, key: TrialKey, attempt: int = 1) -> str:
    """The deterministic session UUID of one trial's ``attempt`` (a retry needs a new session)."""
    suffix = "" if attempt == 1 else f"|attempt-{attempt}"
    return str(uuid.uuid5(_NAMESPACE, f"{seed}|{key.variant}|{key.task}|{key.trial}{suffix}"))


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


@functools.lru_cache(maxsize=32)
def _git_sha(cwd: str | None) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd or None, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def _sdk_versions() -> tuple[str, str]:
    import claude_agent_sdk

    from .._claude.binary import cli_version

    return claude_agent_sdk.__version__, cli_version()


def _price(model: str | None) -> tuple[float, float]:
    name = (model or "").lower()
    return next((p for key, p in _PRICES.items() if key and key in name), _PRICES[""])


async def grade_answer(
    grader: GraderSpec,
    task: TaskSpec,
    answer: str,
    *,
    env: Mapping[str, str],
    default_model: str | None,
) -> tuple[float | None, float]:
    """Score ``answer`` against the task's rubric with a model; returns (score 0..1, cost USD).

    The grader is asked for a line ``SCORE: <0-10>``; an answer without one scores None.
    """
    import re

    import anthropic

    model = grader.model or default_model or "claude-sonnet-5-5"
    client = anthropic.AsyncAnthropic(
        api_key=env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN") or None,
        base_url=env.get("ANTHROPIC_BASE_URL") or None,
        max_retries=2,
    )
    prompt = grader.render(task=task.prompt, rubric=task.rubric, answer=answer)
    prompt += "\n\nEnd your reply with one line: SCORE: <a number from 0 to 10>."
    async with client:
        message = await client.messages.create(
            model=model,
            max_tokens=grader.max_tokens,
            messages=[{"role": "user", "content": prompt}],
        )
    text = "".join(getattr(b, "text", "") for b in message.content)
    price_in, price_out = _price(model)
    cost = (message.usage.input_tokens * price_in + message.usage.output_tokens * price_out) / 1e6
    match = re.search(r"SCORE:\s*([0-9]+(?:\.[0-9]+)?)", text)
    score = min(10.0, float(match.group(1))) / 10.0 if match else None
    return score, cost


def _trial_options(
    base: ClaudeAgentOptions,
    spec: ExperimentSpec,
    variant: VariantSpec,
    task: TaskSpec,
    strategy: Strategy,
    session_id: str,
) -> ClaudeAgentOptions:
    fields: dict[str, Any] = {"session_id": session_id}
    model = spec.model_for(variant)
    if model:
        fields["model"] = model
    cwd = spec.cwd_for(task)
    if cwd:
        fields["cwd"] = cwd
    for key, value in variant.options.items():
        if not hasattr(base, key):
            raise UsageError(f"variant {variant.name!r}: unknown SDK option {key!r}")
        fields[key] = value
    return apply_strategy(dataclasses.replace(base, **fields), strategy)


async def _one_trial(
    key: TrialKey,
    spec: ExperimentSpec,
    base: ClaudeAgentOptions,
    strategies: Mapping[str, Strategy],
    query_fn: QueryFn | None,
    policy: Policy,
    attempt: int = 1,
) -> tuple[TrialRecord, bool, float | None]:
    """Run one trial; returns (record, infrastructure failure?, retry-after hint)."""
    variant, task = spec.variant(key.variant), spec.task(key.task)
    strategy = strategies[variant.name]
    options = _trial_options(
        base, spec, variant, task, strategy, trial_session_id(spec.experiment.seed, key, attempt)
    )
    tracker = Tracker()
    finished: Finished | None = None
    error: str | None = None
    started_at = datetime.now(timezone.utc)
    start = time.monotonic()
    try:
        async for item in query(task.prompt, options, query_fn=query_fn, policy=policy):
            if isinstance(item, Finished):
                finished = item
            else:
                tracker.feed(item)
    except Exception as exc:  # noqa: BLE001 - a broken trial is recorded, never fatal
        error = f"{type(exc).__name__}: {exc}"
    wall = time.monotonic() - start
    statuses = [r.api_error_status for r in tracker.results if r.api_error_status]
    rate_limited = 429 in statuses
    status = finished.status if finished else "failed"
    infra = error is not None or (
        status == "failed" and any(s in TRANSIENT_STATUSES for s in statuses)
    )
    if status == "failed" and not infra and finished is not None and not tracker.results:
        infra = True  # the CLI never answered at all
    usage_in = sum(int((r.usage or {}).get("input_tokens", 0) or 0) for r in tracker.results)
    usage_out = sum(int((r.usage or {}).get("output_tokens", 0) or 0) for r in tracker.results)
    calls = len(tracker.agent_calls)
    first = tracker.first_agent_call_at
    sdk_version, cli = _sdk_versions()
    record = TrialRecord(
        variant=key.variant,
        task=key.task,
        trial=key.trial,
        status=status,
        error_class=("infrastructure" if infra else "model") if status == "failed" else None,
        delegated=calls > 0,
        agent_calls=calls,
        max_agent_calls_per_message=tracker.max_parallel_agent_calls,
        parallel=tracker.max_parallel_agent_calls >= 2,
        time_to_first_agent_s=max(0.0, first - tracker.started_at)
        if first is not None and calls
        else None,
        wall_s=wall,
        turns=sum(r.num_turns or 0 for r in tracker.results),
        input_tokens=usage_in,
        output_tokens=usage_out,
        cost_usd=finished.cost_usd if finished else tracker.cost_usd,
        resumes=finished.resumes if finished else 0,
        final_text=(finished.result or "") if finished else (error or ""),
        prompt_name=strategy.meta.name,
        prompt_version=strategy.meta.version,
        prompt_sha256=strategy.sha256,
        model=spec.model_for(variant),
        sdk_version=sdk_version,
        cli_version=cli,
        teamlead_version=__version__,
        git_sha=_git_sha(spec.cwd_for(task)),
        started_at=started_at,
    )
    return record, infra, 1.0 if rate_limited else None


async def run_experiment(
    spec: ExperimentSpec,
    out_dir: Path,
    *,
    base_options: ClaudeAgentOptions | None = None,
    query_fn: QueryFn | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    on_progress: Callable[[ExperimentProgress], None] | None = None,
) -> RunSummary:
    """Run every unfinished trial of ``spec`` and append records to ``out_dir/trials.jsonl``.

    Args:
        spec: a validated spec (see :func:`~teamlead.experiment.load_spec`).
        out_dir: created if missing; ``trials.jsonl`` there is appended to, never rewritten.
        base_options: SDK options every trial starts from (env, permission mode, ...).
        query_fn: the generator each coordinator wraps (default ``claude_agent_sdk.query``).
        policy: the coordinator policy per trial; ``deadline_s`` from the spec wins.
        on_progress: called after every change of the counters.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "trials.jsonl"
    done = finished_keys(path, retry_infrastructure=True) if path.exists() else set()
    order = trial_order(spec)
    todo = [k for k in order if k not in done]
    strategies = {v.name: load_strategy(v.strategy) for v in spec.variants}
    base = base_options or ClaudeAgentOptions()
    trial_policy = policy or Policy()
    if spec.experiment.deadline_s:
        trial_policy = trial_policy.model_copy(update={"deadline_s": spec.experiment.deadline_s})
    progress = ExperimentProgress(total=len(order), skipped=len(order) - len(todo))

    def changed(event: ConcurrencyChanged) -> None:
        progress.changes.append(event)
        if on_progress:
            on_progress(progress)

    cap = spec.experiment.concurrency
    governor = Governor(GovernorPolicy(ceiling=cap, max_total=cap), clock=clock, on_change=changed)
    spent = 0.0
    stopped: str | None = None
    queue = list(todo)
    budget = spec.experiment.max_cost_usd
    env = dict(base.env)

    async def worker(writer: TrialWriter) -> None:
        nonlocal spent, stopped
        while queue and stopped is None:
            key = queue.pop(0)
            variant = spec.variant(key.variant)
            attempts = 0
            while True:
                attempts += 1
                async with governor.slot(
                    bucket_key("anthropic", spec.model_for(variant) or "default")
                ) as slot:
                    progress.in_flight += 1
                    _report()
                    try:
                        # the slot is held until the coordinator returned, i.e. after the
                        # CLI process of this trial has exited and been reaped
                        record, infra, retry_after = await _one_trial(
                            key, spec, base, strategies, query_fn, trial_policy, attempts
                        )
                    finally:
                        progress.in_flight -= 1
                    if retry_after is not None:
                        progress.rate_limited += 1
                        slot.rate_limited(retry_after)
                    elif not infra:
                        slot.success()
                if infra and attempts <= _INFRA_RETRIES:
                    progress.retried += 1
                    _report()
                    continue
                break
            if attempts > 1:
                record = record.model_copy(update={"retried": True, "attempts": attempts})
            grader = spec.experiment.grader
            if grader is not None and record.status != "failed" and record.final_text:
                try:
                    grade, grade_cost = await grade_answer(
                        grader,
                        spec.task(key.task),
                        record.final_text,
                        env=env,
                        default_model=spec.model_for(variant),
                    )
                    record = record.model_copy(
                        update={"grade": grade, "grader_cost_usd": grade_cost}
                    )
                except Exception as exc:  # noqa: BLE001 - grading is optional; keep the trial
                    progress.grader_errors.append(
                        f"{key.variant}/{key.task}/{key.trial}: {type(exc).__name__}: {exc}"
                    )
            await anyio.to_thread.run_sync(writer.append, record)
            spent += record.cost_usd + (record.grader_cost_usd or 0.0)
            progress.done += 1
            progress.failed += record.status == "failed"
            _report()
            if budget is not None and spent >= budget:
                stopped = f"cost budget ${budget:g} reached (${spent:.4f})"

    def _report() -> None:
        if on_progress:
            on_progress(progress)

    with TrialWriter(path) as writer:
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
    )
