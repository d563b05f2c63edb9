"""Trial records count a run's workflow agents, and reports show them (fast tier).

The counts come from ``Finished.tasks``: rows of kind ``workflow_agent`` with their status
and ``cached`` flag, and every agent row's relay timings (``started_at``/``ended_at``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pydantic
import pytest

from teamlead.events import TaskDisposition
from teamlead.experiment import build_report, render_markdown, synthetic_records
from teamlead.experiment.reporting.html import render_html
from teamlead.experiment.running.agent_counts import AgentCounts, agent_counts, most_at_once
from teamlead.experiment.specs.records import RECORD_VERSION, TrialRecord


def row(
    id: str,
    kind: Any = "workflow_agent",
    status: Any = "completed",
    at: tuple[float, float] | None = None,
    cached: bool = False,
) -> TaskDisposition:
    return TaskDisposition(
        id=id,
        kind=kind,
        description=id,
        status=status,
        disposition="included",
        source="lead",
        started_at=at[0] if at else None,
        ended_at=at[1] if at else None,
        cached=cached,
    )


def test_most_at_once_counts_overlaps_and_not_touching_ends() -> None:
    assert most_at_once([]) == 0
    assert most_at_once([(0, 1), (1, 2), (2, 3)]) == 1  # one ends as the next starts
    assert most_at_once([(0, 10), (1, 2), (1.5, 3), (2.5, 4)]) == 3
    assert most_at_once([(5, 4)]) == 1  # a clock step back: still one agent


def test_agent_counts_read_workflow_rows_and_every_agents_timings() -> None:
    rows = [
        row("scan", kind="task", at=None),  # the workflow's own task: no requests of its own
        row("a1", kind="task", at=(0, 9)),  # an Agent-tool agent beside the workflow
        row("w1", at=(1, 3)),
        row("w2", at=(2, 4)),
        row("w3", status="failed", at=(3.5, 5)),
        row("w4", status="lost"),  # queued when the CLI died: no request
        row("w5", status="cached", cached=True),  # replayed from the journal
        row("w6", status="completed", cached=True),  # a reader that keeps status, sets cached
        row("t1", kind="teammate", status="reported"),
        row("c1", kind="call", status="denied"),
    ]
    assert agent_counts(rows) == AgentCounts(
        workflow_agents=6,
        workflow_agents_at_once=2,
        workflow_agents_lost=2,
        workflow_agents_cached=2,
        agents_at_once=3,
    )
    assert agent_counts([]) == AgentCounts()


def record(**fields: Any) -> TrialRecord:
    base: dict[str, Any] = {"variant": "v", "task": "t", "trial": 0, "status": "completed"}
    return TrialRecord(**{**base, "wall_s": 1.0, **fields})


def test_a_workflow_delegates_and_two_of_its_agents_at_once_are_parallel() -> None:
    one = record(delegated=True, workflow_agents=3, workflow_agents_at_once=1, agents_at_once=1)
    assert one.delegated and not one.parallel and one.agent_calls == 0
    two = record(
        delegated=True,
        parallel=True,
        workflow_agents=3,
        workflow_agents_at_once=2,
        workflow_agents_lost=1,
        workflow_agents_cached=1,
        agents_at_once=3,
    )
    assert two.version == RECORD_VERSION == 2
    again = TrialRecord.model_validate_json(two.to_json_line())
    assert again == two


@pytest.mark.parametrize(
    "fields",
    [
        {"workflow_agents": 2},  # ran agents but not delegated
        {
            "delegated": True,
            "workflow_agents": 2,
            "workflow_agents_at_once": 2,
            "agents_at_once": 2,
        },
        {"delegated": True, "workflow_agents": 1, "workflow_agents_lost": 2},
        {"delegated": True, "workflow_agents": 2, "workflow_agents_at_once": 1},  # all kinds: 0
    ],
)
def test_inconsistent_workflow_counts_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        record(**fields)


def test_the_report_shows_workflow_agents_per_variant() -> None:
    records = synthetic_records(
        {"baseline": [0.2, 0.2], "wf": [0.2, 0.2]}, trials=4, rng=np.random.default_rng(3)
    )
    with_workflows = []
    for r in records:
        if r.variant == "wf" and r.trial < 2:
            r = r.model_copy(
                update={
                    "delegated": True,
                    "parallel": True,
                    "workflow_agents": 4,
                    "workflow_agents_at_once": 2,
                    "workflow_agents_lost": 1,
                    "workflow_agents_cached": r.trial,
                    "agents_at_once": 3,
                }
            )
        with_workflows.append(r)
    report = build_report(with_workflows, control="baseline", seed=1, n_permutations=200)
    wf = report.variants["wf"].workflow_agents
    assert wf is not None and report.variants["baseline"].workflow_agents is None
    assert (wf.trials, wf.started, wf.most_at_once, wf.lost, wf.cached) == (4, 16, 2, 4, 2)
    assert wf.agents_at_once == 3
    data = json.loads(json.dumps(report.to_json()))
    assert data["variants"]["wf"]["workflow_agents"]["started"] == 16
    assert data["variants"]["baseline"]["workflow_agents"] is None
    markdown = render_markdown(report)
    assert "| variant | trials with workflows | workflow agents | most at once |" in markdown
    assert "| wf | 4 | 16 | 2 | 4 | 2 | 3 |" in markdown
    page = render_html(report, with_workflows)
    assert '<table class="sortable" id="workflow-agents">' in page
    assert '<td>wf</td><td data-sort="4.0">4</td><td data-sort="16.0">16</td>' in page
    plain = build_report(records, control="baseline", seed=1, n_permutations=200)
    assert "trials with workflows" not in render_markdown(plain)
    assert "workflow-agents" not in render_html(plain, records)
