"""Trial records and spec texts for the experiment tests: a completed trial whose outcome
is ``parallel``, and an A/B spec of the two shipped strategies."""

from __future__ import annotations

from teamlead.experiment.specs.records import TrialRecord

__all__ = ["ab_spec", "trial_record"]


def trial_record(
    variant: str, task: str, trial: int, *, parallel: bool, **kw: object
) -> TrialRecord:
    """A completed trial of ``variant`` on ``task``; ``kw`` sets or overrides any field."""
    calls = 2 if parallel else 0
    fields: dict[str, object] = {
        "variant": variant,
        "task": task,
        "trial": trial,
        "status": "completed",
        "wall_s": 10.0 + trial,
        "agent_calls": calls,
        "max_agent_calls_per_message": calls,
        "delegated": parallel,
        "parallel": parallel,
        "cost_usd": 0.01 * (1 + trial),
    }
    fields.update(kw)
    return TrialRecord.model_validate(fields)


def ab_spec(
    tasks: int,
    trials: int,
    *,
    concurrency: int | None = 4,
    extra: str = "",
    name: str = "ab",
    seed: int = 7,
    prompt: str = "Research question {i}.",
    rubric: str | None = "mentions parts",
    task_id: str = "task-{i}",
) -> str:
    """The text of an A/B spec: ``baseline`` (the control) against ``delegation`` on
    ``tasks`` tasks (``task_id`` and ``prompt`` with the task's number, and ``rubric``
    unless ``None``), ``trials`` each, ``concurrency`` at once (``None``: the spec's
    default); ``extra`` goes in its ``[experiment]`` table."""
    body = [
        "[experiment]",
        f'name = "{name}"',
        f"trials = {trials}",
        f"seed = {seed}",
        *([f"concurrency = {concurrency}"] if concurrency is not None else []),
        'control = "baseline"',
        extra,
        "[[variants]]",
        'name = "baseline"',
        'strategy = "baseline"',
        "[[variants]]",
        'name = "delegation"',
        'strategy = "delegation"',
    ]
    for i in range(tasks):
        body += ["[[tasks]]", f'id = "{task_id.format(i=i)}"', f'prompt = "{prompt.format(i=i)}"']
        body += [f'rubric = "{rubric}"'] if rubric is not None else []
    return "\n".join(body) + "\n"
