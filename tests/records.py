"""Trial records for the statistics tests: a completed trial whose outcome is ``parallel``."""

from __future__ import annotations

from teamlead.experiment.specs.records import TrialRecord

__all__ = ["trial_record"]


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
