"""Synthetic trial records from known rates: for tests and for planning an experiment.

Before paying for real trials, simulate the design (tasks x trials) with the effect you
hope to see and check that :func:`~teamlead.experiment.build_report` would detect it.

Example:
    >>> import numpy as np
    >>> records = synthetic_records(
    ...     {"baseline": [0.2] * 10, "delegation": [0.85] * 10},
    ...     trials=4, rng=np.random.default_rng(7),
    ... )
    >>> len(records)
    80
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .records import TrialRecord

__all__ = ["synthetic_records"]


def synthetic_records(
    parallel_rates: Mapping[str, Sequence[float]],
    *,
    trials: int,
    rng: np.random.Generator,
    delegate_alone_rate: float = 0.3,
    wall_s: Mapping[str, float] | None = None,
    task_names: Sequence[str] | None = None,
) -> list[TrialRecord]:
    """Draw trial records where ``parallel_rates[variant][i]`` is task ``i``'s chance of a
    parallel trial under that variant.

    A trial that is not parallel still delegates (one Agent call) with chance
    ``delegate_alone_rate``. Wall time is log-normal around ``wall_s[variant]`` seconds
    (default 60) times a per-task factor shared by all variants; tokens and cost follow
    the same per-task factor, so tasks differ as real ones do.

    Args:
        parallel_rates: per variant, one rate per task (all variants the same length).
        trials: trials per task per variant.
        rng: the random source; the same seed gives the same records.
        delegate_alone_rate: chance that a non-parallel trial makes one Agent call.
        wall_s: per variant, the typical wall time in seconds.
        task_names: names of the tasks (default ``task-00``, ``task-01``, ...).
    """
    sizes = {len(rates) for rates in parallel_rates.values()}
    if len(sizes) != 1:
        raise ValueError("every variant needs one rate per task, the same tasks for all")
    n_tasks = sizes.pop()
    names = (
        list(task_names) if task_names is not None else [f"task-{i:02d}" for i in range(n_tasks)]
    )
    if len(names) != n_tasks:
        raise ValueError("task_names must name every task")
    task_scale = rng.lognormal(0.0, 0.5, size=n_tasks)
    records: list[TrialRecord] = []
    for variant, rates in parallel_rates.items():
        typical = 60.0 if wall_s is None else wall_s.get(variant, 60.0)
        for task_index, rate in enumerate(rates):
            for trial in range(trials):
                parallel = bool(rng.random() < rate)
                if parallel:
                    per_message = 2 + int(rng.integers(0, 3))
                    calls = per_message + int(rng.integers(0, 2))
                elif rng.random() < delegate_alone_rate:
                    per_message = calls = 1
                else:
                    per_message = calls = 0
                scale = float(task_scale[task_index])
                wall = typical * scale * float(rng.lognormal(0.0, 0.25))
                input_tokens = int(20_000 * scale * rng.lognormal(0.0, 0.2)) + 4_000 * calls
                output_tokens = int(2_000 * scale * rng.lognormal(0.0, 0.3)) + 500 * calls
                records.append(
                    TrialRecord(
                        variant=variant,
                        task=names[task_index],
                        trial=trial,
                        status="completed",
                        delegated=calls > 0,
                        agent_calls=calls,
                        max_agent_calls_per_message=per_message,
                        parallel=parallel,
                        time_to_first_agent_s=wall * 0.1 if calls else None,
                        wall_s=wall,
                        turns=3 + calls,
                        input_tokens=input_tokens,
                        output_tokens=output_tokens,
                        cost_usd=(input_tokens * 3 + output_tokens * 15) / 1_000_000,
                        prompt_name=variant,
                    )
                )
    return records
