"""A run parses its stream once: every other reader reads the run's own parse.

The NDJSON writer, the team view, focus, the approvals' labels, telemetry and the
experiment runner are each handed the run's :class:`~teamlead.tracker.StreamParse` (its
tracker, and the events of the item it yielded last) and never build a tracker of their
own. The first test holds the production code to that: only the run's state (and a saved
session read back, which becomes a run's tracker, and a run's log read back) may make a
``Tracker``, and only the tracker parses a message (the spawn gate takes the run's events).
The others drive a whole run on a scripted ``query_fn`` and check what its readers made of
the run's own parse.
"""

from __future__ import annotations

import ast
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions
from rich.console import Console

from teamlead._cli.focus import Focus
from teamlead._cli.team_view import LiveTeamView, PlainProgress
from teamlead._ndjson import JsonProgress
from teamlead._run import labels_from
from teamlead.coordinator import run_stream
from teamlead.events import Finished
from teamlead.policy import InboxWaitPolicy, Policy
from teamlead.testing import FakeClock

pytestmark = pytest.mark.anyio

PACKAGE = Path(__file__).parent.parent / "teamlead"
SESSION = "5b1e0c7a-0d2f-4c55-9a8e-2f1f3c3b9d10"

#: the modules that may make a ``Tracker``: the run's state makes the run's own, a saved
#: session read back from its transcript becomes the tracker of the run that resumes it, and
#: a run's NDJSON log is folded by one (``teamlead view run.ndjson``: no stream to share)
MAKES_TRACKERS = {"_run/state.py", "_claude/saved_session.py", "_control/runlog.py"}
#: the modules that may call the parser: the tracker's ``feed``, and the spawn gate when a
#: caller hands it a message without the run's events (a round always hands them)
PARSES = {"tracker.py", "_gate/gate.py"}


def _calls(name: str) -> set[str]:
    """The modules of ``teamlead`` that call ``name(...)`` (by name or as an attribute)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if name not in text:
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if called == name:
                    found.add(path.relative_to(PACKAGE).as_posix())
    return found


def test_no_reader_of_the_stream_builds_a_tracker_or_parses_of_its_own() -> None:
    assert _calls("Tracker") == MAKES_TRACKERS
    assert _calls("parse_message") == PARSES


# -- a whole run, read by every reader at once ---------------------------------------------
def _messages() -> list[dict[str, Any]]:
    """The lead delegates one agent, the agent reports, the lead answers with its result."""
    call = {
        "type": "tool_use",
        "id": "tu-a1",
        "name": "Agent",
        "input": {"description": "probe alpha", "prompt": "probe alpha: do it"},
    }
    return [
        {"type": "system", "subtype": "init", "session_id": SESSION, "cwd": "/proj"},
        {
            "type": "assistant",
            "message": {"id": "msg_1", "content": [call]},
            "parent_tool_use_id": None,
            "session_id": SESSION,
        },
        {
            "type": "system",
            "subtype": "task_started",
            "task_id": "a1",
            "tool_use_id": "tu-a1",
            "run_id": "run-a1",
            "description": "probe alpha",
            "task_type": "local_agent",
            "session_id": SESSION,
        },
        {
            "type": "system",
            "subtype": "task_notification",
            "task_id": "a1",
            "tool_use_id": "tu-a1",
            "run_id": "run-a1",
            "status": "completed",
            "summary": "alpha found it",
            "session_id": SESSION,
        },
        {
            "type": "assistant",
            "message": {"id": "msg_2", "content": [{"type": "text", "text": "alpha found it"}]},
            "parent_tool_use_id": None,
            "session_id": SESSION,
        },
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": "alpha found it",
            "session_id": SESSION,
            "num_turns": 1,
        },
    ]


async def _scripted(*, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
    for message in _messages():
        yield message


def _policy() -> Policy:
    inbox = InboxWaitPolicy(use_events=False, tries=1, span_s=1.0, first_delay_s=0.5)
    return Policy(relay=False, wait_s=2.0, inbox=inbox)


async def test_every_reader_of_a_run_reads_the_run_s_own_tracker_and_events() -> None:
    run = run_stream("Investigate.", query_fn=_scripted, policy=_policy(), clock=FakeClock())
    ndjson, plain, screen = io.StringIO(), io.StringIO(), io.StringIO()
    readers = [
        JsonProgress(ndjson, run),
        PlainProgress(plain, run),
        LiveTeamView(Console(file=screen, force_terminal=True, width=160), run),
    ]
    focus = Focus(run)
    label_for = labels_from(run)
    assert run.tracker is None and focus.agents == [] and label_for("a1") == "agent a1"
    finished: Finished | None = None
    async for item in run:
        for reader in readers:
            reader.handle(item)
        focus.feed(item)
        if isinstance(item, Finished):
            finished = item
    for reader in readers:
        reader.close()
    assert finished is not None and finished.status == "completed"
    tracker = run.tracker
    assert tracker is not None and list(tracker.tasks) == ["a1"]
    # each reader shows what the run tracked, parsed once by the run
    records = [json.loads(line) for line in ndjson.getvalue().splitlines()]
    kinds = [r["type"] for r in records]
    assert kinds[:3] == ["session", "agent_call", "task_started"]
    for kind, count in (("session", 1), ("task_ended", 1), ("lead_turn", 2), ("result", 1)):
        assert kinds.count(kind) == count, kinds
    assert kinds[-1] == "finished"
    assert f"session {SESSION}" in plain.getvalue()
    assert "task completed: probe alpha" in plain.getvalue()
    assert "probe alpha" in screen.getvalue()
    assert focus.agents == ["a1"] and label_for("a1") == "probe alpha"


async def test_the_run_gives_its_events_for_the_item_it_yielded_and_none_for_another() -> None:
    run = run_stream("Investigate.", query_fn=_scripted, policy=_policy(), clock=FakeClock())
    seen: list[tuple[str, int, int]] = []
    async for item in run:
        if isinstance(item, dict):
            copy = dict(item)  # equal, but not what the run yielded: the run never parsed it
            seen.append((item["type"], len(run.events_of(item)), len(run.events_of(copy))))
    assert seen and all(copied == 0 for _, _, copied in seen)
    assert all(count > 0 for kind, count, _ in seen if kind in ("assistant", "result"))
