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
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import AssistantMessage, CLIJSONDecodeError, SystemMessage, ToolUseBlock
from claude_agent_sdk import query as sdk_query

import teamlead
from teamlead.events import Finished
from teamlead.testing.scripts import FanOut, WorkflowFanOut, findings_in

from ..polling import apoll
from .conftest import OfflineFactory
from .scripted import agents_run, journaled, requests_by_key

pytestmark = [pytest.mark.cli, pytest.mark.anyio]

_AGENTS = 4


def _launched(config_dir: Path) -> list[dict[str, Any]]:
    """The launches (``toolUseResult``) that the sessions under ``config_dir`` record."""
    found: list[dict[str, Any]] = []
    for path in (config_dir / "projects").glob("*/*.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line still being written
            result = record.get("toolUseResult") if isinstance(record, dict) else None
            if isinstance(result, dict):
                found.append(result)
    return found


def _agents_launched(config_dir: Path) -> int:
    return sum(isinstance(r.get("agentId"), str) for r in _launched(config_dir))


def _workflow_launched(config_dir: Path) -> bool:
    return any(r.get("taskType") == "local_workflow" for r in _launched(config_dir))


def _answered(config_dir: Path) -> int:
    """The agents whose transcript (``<session>/subagents/agent-*.jsonl``) holds their finding."""
    paths = (config_dir / "projects").glob("*/*/subagents/agent-*.jsonl")
    return sum("FINDING[" in p.read_text(errors="replace") for p in paths)


def _breaking_first_round(
    hides: Callable[[Any], bool], ready: Callable[[], bool]
) -> tuple[Any, list[str]]:
    """A ``query_fn``: the real SDK query, whose first round breaks as the SDK's reader does
    at the first message ``hides`` picks (it is never shown), once ``ready()``: the CLI has
    done what the stream will never show. And the list that says whether it broke."""
    broke: list[str] = []

    async def query_fn(**kwargs: Any) -> AsyncIterator[Any]:
        stream = sdk_query(**kwargs)
        first = kwargs["options"].resume is None
        try:
            async for message in stream:
                if first and hides(message):
                    if await apoll(ready, within_s=60):
                        broke.append("broke")
                        raise CLIJSONDecodeError('{"type":"system","sub', ValueError("torn"))
                    return  # never ready: ``broke`` stays empty, and the test says so
                yield message
        finally:
            await stream.aclose()

    return query_fn, broke


async def test_agents_launched_after_the_break_point_are_read_back_and_their_results_used(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(FanOut.of(_AGENTS, delays=0.3))
    config = claude.config_dir
    # the task messages are hidden; the break waits for every launch and every answer
    query_fn, broke = _breaking_first_round(
        lambda m: isinstance(m, SystemMessage) and m.subtype.startswith("task_"),
        lambda: _agents_launched(config) >= _AGENTS and _answered(config) >= _AGENTS,
    )
    items: list[Any] = []
    with anyio.fail_after(120):
        async for item in teamlead.run("Investigate.", claude.options(), query_fn=query_fn):
            items.append(item)
    done = items[-1]
    assert isinstance(done, Finished)
    assert broke == ["broke"]  # the stream really broke, with all four hidden
    assert len(agents_run(server)) == _AGENTS
    # the launches the stream never showed were read back, and their results used
    assert done.resumes == 1, (done.status, done.reasons, done.tasks)
    labels = [f"agent-{i}" for i in range(1, _AGENTS + 1)]
    assert sorted(findings_in(done.result or "")) == labels
    assert sorted(t.description for t in done.tasks if t.kind == "task") == labels
    assert len(done.tasks) == _AGENTS  # each agent once, and no call row besides
    assert done.reasons[0].startswith("recovered from: the lead's stream ended with an error")
    # every agent had answered before the break: their transcripts say they finished, though
    # the broken round's CLI never announced it, so their results count as any other
    assert done.status == "completed", done.reasons
    assert {(t.status, t.ended, t.disposition) for t in done.tasks} == {
        ("completed", "finished", "included")
    }


async def test_a_workflow_launched_after_the_break_point_is_read_back_and_resumed_from_its_journal(
    offline: OfflineFactory,
) -> None:
    keys = ["a", "b", "c"]
    server, claude = offline(WorkflowFanOut(keys, delay=0.2))
    called: list[bool] = []

    def after_the_workflow_call(message: Any) -> bool:
        """Every message after the lead's Workflow call: its launch, its task messages."""
        if called:
            return True
        if isinstance(message, AssistantMessage) and any(
            isinstance(b, ToolUseBlock) and b.name == "Workflow" for b in message.content
        ):
            called.append(True)
        return False

    query_fn, broke = _breaking_first_round(
        after_the_workflow_call,
        lambda: _workflow_launched(claude.config_dir) and journaled(claude.state_dir, len(keys)),
    )
    policy = teamlead.Policy(wait_s=5, deadline_s=150)
    with anyio.fail_after(120):
        items = [
            item
            async for item in teamlead.run(
                "Investigate.", claude.options(), query_fn=query_fn, policy=policy
            )
        ]
    done = items[-1]
    assert isinstance(done, Finished)
    assert broke == ["broke"]
    assert done.resumes >= 1, (done.status, done.reasons, done.tasks)
    assert set(findings_in(done.result or "")) >= set(keys), (done.result, done.reasons)
    workflows = [t for t in done.tasks if t.kind == "task"]
    assert workflows and all(t.run_id for t in workflows), done.tasks
    # the journal's results were used, not redone: each agent answered once
    assert {k: [s for s in v if s == 200] for k, v in requests_by_key(server).items()} == {
        k: [200] for k in keys
    }
