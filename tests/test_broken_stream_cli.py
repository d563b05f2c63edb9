"""A stream that breaks in the middle of a round loses no agent, on the real CLI offline.

The SDK's reader can fail mid-round (a message over its buffer, a torn line): the stream
ends with the SDK's ``CLIJSONDecodeError`` and the CLI is closed with it. What the CLI did
before that is real all the same: the agents it launched ran and wrote their transcripts,
even when the stream never got as far as their ``task_started``. Under load that is the
usual order (``test_huge_agent_input`` meets it by chance).

Here the real CLI runs the real fan-out; the round's ``query_fn`` reads its real stream,
withholds the task messages, and breaks with the SDK's own error once the session's
transcript holds every launch: the break at its worst, every time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import AssistantMessage, CLIJSONDecodeError, SystemMessage, ToolUseBlock
from claude_agent_sdk import query as sdk_query

import teamlead
from teamlead.events import Finished
from teamlead.testing.scripts import FanOut, WorkflowFanOut, findings_in

from .conftest import OfflineFactory
from .polling import apoll
from .test_gate_cli import agents_run
from .test_workflows_cli import QUICK, _journaled, policy, requests_by_key

pytestmark = [pytest.mark.cli, pytest.mark.anyio]

_AGENTS = 4


def _launches(config_dir: Path) -> int:
    """The Agent launches (``toolUseResult.agentId``) in the sessions under ``config_dir``."""
    count = 0
    for path in (config_dir / "projects").glob("*/*.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line still being written
            result = record.get("toolUseResult") if isinstance(record, dict) else None
            count += isinstance(result, dict) and isinstance(result.get("agentId"), str)
    return count


def _answered(config_dir: Path) -> int:
    """The agents whose transcript (``<session>/subagents/agent-*.jsonl``) holds their finding."""
    paths = (config_dir / "projects").glob("*/*/subagents/agent-*.jsonl")
    return sum("FINDING[" in p.read_text(errors="replace") for p in paths)


def _breaking_first_round(config_dir: Path, broke: list[str]) -> Any:
    """A ``query_fn``: the real SDK query, whose first round hides its task messages and
    breaks as the SDK's reader does, once every agent's launch is in the session's
    transcript and every agent's answer in its own."""

    async def query_fn(**kwargs: Any) -> AsyncIterator[Any]:
        stream = sdk_query(**kwargs)
        first = kwargs["options"].resume is None
        try:
            async for message in stream:
                if not first:
                    yield message
                    continue
                if isinstance(message, SystemMessage) and message.subtype.startswith("task_"):
                    if await apoll(
                        lambda: (
                            _launches(config_dir) >= _AGENTS and _answered(config_dir) >= _AGENTS
                        ),
                        within_s=60,
                    ):
                        broke.append("after every launch")
                        raise CLIJSONDecodeError(
                            '{"type":"system","subtype":"task_sta', ValueError("torn")
                        )
                    continue  # withheld: the stream never shows it
                yield message
        finally:
            await stream.aclose()

    return query_fn


async def test_agents_launched_after_the_break_point_are_read_back_and_their_results_used(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(FanOut.of(_AGENTS, delays=0.3))
    broke: list[str] = []
    items: list[Any] = []
    with anyio.fail_after(120):
        query_fn = _breaking_first_round(claude.config_dir, broke)
        async for item in teamlead.query("Investigate.", claude.options(), query_fn=query_fn):
            items.append(item)
    done = items[-1]
    assert isinstance(done, Finished)
    assert broke == ["after every launch"]  # the stream really broke, with all four hidden
    assert len(agents_run(server)) == _AGENTS
    # the launches the stream never showed were read back, and their results used
    assert done.resumes == 1, (done.status, done.reasons, done.tasks)
    labels = [f"agent-{i}" for i in range(1, _AGENTS + 1)]
    assert sorted(findings_in(done.result or "")) == labels
    assert sorted(t.description for t in done.tasks if t.kind == "task") == labels
    assert len(done.tasks) == _AGENTS  # each agent once, and no call row besides
    assert done.reasons[0].startswith("recovered from: the lead's stream ended with an error")
    assert done.status == "partial"  # the agents ended with the broken round's CLI


def _workflow_launched(config_dir: Path) -> bool:
    """Whether a session under ``config_dir`` records a workflow's launch."""
    for path in (config_dir / "projects").glob("*/*.jsonl"):
        if '"taskType":"local_workflow"' in path.read_text(errors="replace"):
            return True
    return False


def _hiding_the_workflow(config_dir: Path, broke: list[str], results: int) -> Any:
    """A ``query_fn``: the real SDK query, whose first round shows the lead's Workflow call
    and nothing after it (no launch, no task message), and breaks once the session's
    transcript records the launch and the run's journal holds ``results`` results."""

    async def query_fn(**kwargs: Any) -> AsyncIterator[Any]:
        stream = sdk_query(**kwargs)
        first = kwargs["options"].resume is None
        called = False
        try:
            async for message in stream:
                if not first:
                    yield message
                    continue
                if called:
                    if await apoll(
                        lambda: (
                            _workflow_launched(config_dir)
                            and _journaled(config_dir.parent, results)
                        ),
                        within_s=60,
                    ):
                        broke.append("after the launch")
                        raise CLIJSONDecodeError(
                            '{"type":"user","message":{"ro', ValueError("torn")
                        )
                    continue
                called = any(
                    isinstance(b, ToolUseBlock) and b.name == "Workflow"
                    for b in getattr(message, "content", None) or []
                    if isinstance(message, AssistantMessage)
                )
                yield message
        finally:
            await stream.aclose()

    return query_fn


async def test_a_workflow_launched_after_the_break_point_is_read_back_and_resumed_from_its_journal(
    offline: OfflineFactory,
) -> None:
    keys = ["a", "b", "c"]
    server, claude = offline(WorkflowFanOut(keys, delay=QUICK))
    broke: list[str] = []
    query_fn = _hiding_the_workflow(claude.config_dir, broke, len(keys))
    with anyio.fail_after(120):
        items = [
            item
            async for item in teamlead.query(
                "Investigate.", claude.options(), query_fn=query_fn, policy=policy()
            )
        ]
    done = items[-1]
    assert isinstance(done, Finished)
    assert broke == ["after the launch"]
    assert done.resumes >= 1, (done.status, done.reasons, done.tasks)
    assert set(findings_in(done.result or "")) >= set(keys), (done.result, done.reasons)
    workflows = [t for t in done.tasks if t.kind == "task"]
    assert workflows and all(t.run_id for t in workflows), done.tasks
    # the journal's results were used, not redone: each agent answered once
    assert {k: [s for s in v if s == 200] for k, v in requests_by_key(server).items()} == {
        k: [200] for k in keys
    }
