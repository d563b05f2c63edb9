"""Focus on one agent: its last tool calls and lines, from the stream or its transcript.

The tests feed raw stream-json frames (the shapes of the recorded traces, from
``tests/frames.py``) and write transcripts as the CLI lays them out; the real CLI's stream
is read in tests/cli/test_focus.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from teamlead._claude.transcript import transcript_tail
from teamlead._cli.focus import Focus
from teamlead.tracker import SubagentToolUse, TaskInfo, parse_message

from .frames import SESSION, ended, result, started, sub_text, sub_tool, workflow
from .parsing import HandFed


def write_transcript(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in records))
    return path


def record_tool(tool_id: str, name: str, command: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": {"command": command}}
    return {"type": "assistant", "message": {"role": "assistant", "content": [block]}}


def record_result(tool_id: str, *, error: bool = False) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": tool_id, "content": "x", "is_error": error}
    return {"type": "user", "message": {"role": "user", "content": [block]}}


def record_text(text: str) -> dict[str, Any]:
    return {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}


def feed(focus: Focus, *frames: dict[str, Any]) -> None:
    for frame in frames:
        focus.feed(frame)


# -- the stream ----------------------------------------------------------------------------------
def test_an_agents_calls_and_lines_come_from_its_own_messages() -> None:
    focus = Focus(HandFed())
    feed(
        focus,
        started("a1", "toolu_A", "alpha"),
        started("b1", "toolu_B", "beta"),
        sub_tool("toolu_A", "t1", "Read", {"file_path": "/src/app.py"}),
        result("t1"),
        sub_tool("toolu_B", "t9", "Grep", {"pattern": "TODO"}),
        sub_tool("toolu_A", "t2", "Bash", {"command": "pytest -q", "timeout": 60}),
        result("t2", error=True),
        sub_tool("toolu_A", "t3", "Edit", {"file_path": "/src/app.py", "old_string": "x"}),
        sub_text("toolu_A", "Found it.\n\nThe bug is in app.py"),
    )
    view = focus.of("a1")
    assert view is not None and view.source == "stream" and view.description == "alpha"
    assert [(c.name, c.summary, c.outcome) for c in view.calls] == [
        ("Read", "/src/app.py", "ok"),
        ("Bash", "pytest -q", "error"),
        ("Edit", "/src/app.py", "running"),
    ]
    assert view.lines == ("Found it.", "The bug is in app.py")
    other = focus.of("b1")
    assert other is not None and [c.summary for c in other.calls] == ["TODO"]
    assert focus.of("nobody") is None


def test_only_the_last_calls_and_lines_are_kept() -> None:
    focus = Focus(HandFed(), max_calls=2, max_lines=3)
    frames = [started("a1", "toolu_A", "alpha")]
    frames += [sub_tool("toolu_A", f"t{i}", "Bash", {"command": f"step {i}"}) for i in range(6)]
    frames += [result("t0"), result("t5")]  # t0 fell out long ago: its result changes nothing
    frames += [sub_text("toolu_A", "\n".join(f"line {i}" for i in range(10)))]
    feed(focus, *frames)
    view = focus.of("a1")
    assert view is not None
    assert [(c.summary, c.outcome) for c in view.calls] == [("step 4", "running"), ("step 5", "ok")]
    assert view.lines == ("line 7", "line 8", "line 9")


def test_focus_cycles_through_agent_tasks_and_workflow_agents_in_order() -> None:
    focus = Focus(HandFed())
    assert focus.next_agent(None) is None
    feed(
        focus,
        started("a1", "toolu_A", "alpha"),
        *workflow("wf1", [(0, "w-agent-0", "wf:one"), (1, None, "wf:queued"), (2, "w2", "wf:two")]),
        started("b1", "toolu_B", "beta"),
    )
    assert focus.agents == ["a1", "w-agent-0", "w2", "b1"]  # a queued one has no id yet
    seen = [focus.next_agent(None)]
    for _ in range(4):
        seen.append(focus.next_agent(seen[-1]))
    assert seen == ["a1", "w-agent-0", "w2", "b1", "a1"]
    assert focus.next_agent("a1", step=-1) == "b1"
    assert focus.next_agent("gone") == "a1"


def test_the_parser_says_what_a_subagents_tool_call_works_on() -> None:
    events = parse_message(sub_tool("toolu_A", "t1", "WebFetch", {"url": "https://x.test"}))
    uses = [e for e in events if isinstance(e, SubagentToolUse)]
    assert uses == [SubagentToolUse("toolu_A", "t1", "WebFetch", "https://x.test")]
    odd = parse_message(sub_tool("toolu_A", "t2", "Odd", {"n": 1, "deep": {"x": "y" * 500}}))
    (use,) = [e for e in odd if isinstance(e, SubagentToolUse)]
    assert use.summary.startswith('{"n": 1') and len(use.summary) == 200


# -- the transcript ----------------------------------------------------------------------------
def test_an_agent_seen_only_from_its_end_is_read_from_its_transcript(tmp_path: Path) -> None:
    path = write_transcript(
        tmp_path / "agent-a1.jsonl",
        [
            record_tool("t1", "Bash", "ls"),
            record_result("t1"),
            "{not json\n",
            record_tool("t2", "Bash", "make test"),
            record_result("t2", error=True),
            record_tool("t3", "Bash", "make fix"),
            record_text("All done.\nFINDING[a1]"),
        ],
    )
    focus = Focus(HandFed(), max_calls=2)
    feed(focus, started("a1", "toolu_A", "alpha"), ended("a1", str(path)))
    view = focus.of("a1")
    assert view is not None and view.source == "transcript"
    assert [(c.summary, c.outcome) for c in view.calls] == [
        ("make test", "error"),
        ("make fix", "running"),
    ]
    assert view.lines == ("All done.", "FINDING[a1]")


def test_a_workflow_agent_is_found_under_the_config_dir(tmp_path: Path) -> None:
    folder = tmp_path / "projects" / "-proj" / SESSION / "subagents" / "workflows" / "wf_1"
    write_transcript(folder / "agent-w2.jsonl", [record_tool("t1", "Read", "x"), record_text("hi")])
    focus = Focus(HandFed(), tmp_path)
    feed(focus, *workflow("wf1", [(0, "w2", "wf:two"), (1, "../../etc", "wf:evil")]))
    view = focus.of("w2")
    assert view is not None and view.kind == "workflow_agent" and view.description == "wf:two"
    assert view.source == "transcript" and view.lines == ("hi",)
    evil = focus.of("../../etc")  # not a plain id: it never steers a path
    assert evil is not None and evil.source == "none" and evil.calls == ()


def test_a_missing_or_special_transcript_gives_nothing_and_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "agent.fifo"
    os.mkfifo(fifo)
    focus = Focus(HandFed(), tmp_path)
    feed(
        focus,
        started("a1", "toolu_A", "alpha"),
        ended("a1", str(fifo)),
        started("b1", "toolu_B", "beta"),
        ended("b1", str(tmp_path / "missing.jsonl")),
    )
    for agent in ("a1", "b1"):  # a FIFO is refused, not opened: nothing waits for a writer
        view = focus.of(agent)
        assert view is not None and view.source == "none"


def test_the_transcript_tail_is_read_backwards_within_its_byte_cap(tmp_path: Path) -> None:
    filler = [record_text(f"old {i} " + "x" * 1000) for i in range(3000)]  # about 3 MB
    path = write_transcript(
        tmp_path / "big.jsonl", [record_tool("t0", "Bash", "first"), *filler, record_text("last")]
    )
    tail = transcript_tail(path, max_calls=3, max_lines=2, max_bytes=64 * 1024)
    assert tail is not None
    assert tail.calls == ()  # the first call is further back than the cap
    assert tail.lines[-1] == "last" and len(tail.lines) == 2


@pytest.mark.parametrize("read", ["agents", "of"])
def test_the_agents_and_one_agent_are_read_while_the_run_adds_tasks(
    monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """The live view's refresh thread reads them while the run's loop adds tasks: one that
    comes mid-read waits for the next read, never breaks this one."""
    focus = Focus(HandFed())
    feed(focus, started("a1", "toolu_A", "alpha"), started("b1", "toolu_B", "beta"))
    tasks = focus.run.tracker.tasks
    name = "is_workflow" if read == "agents" else "workflow_agents"
    real = getattr(TaskInfo, name)

    def meanwhile(task: TaskInfo) -> Any:  # the run's thread, between two tasks
        if task.task_id == "a1" and "late" not in tasks:
            tasks["late"] = dataclasses.replace(task, task_id="late")
        return real.fget(task)

    monkeypatch.setattr(TaskInfo, name, property(meanwhile))
    if read == "agents":
        assert focus.agents == ["a1", "b1"]
    else:
        assert focus.of("wf-agent-nobody") is None
