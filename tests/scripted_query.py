"""A scripted ``query_fn`` and the stream-json messages it replays, for unit tests of a run.

:class:`Script` stands in for the CLI at the coordinator's one seam, ``query_fn``: call N
replays ``rounds[N]``, one list of stream-json messages (the shapes of
``tests/fixtures/traces/*.jsonl``, made by the builders here) or steps that raise, hang
or act. :func:`run` drives :func:`teamlead.run` with it on a
:class:`~teamlead.testing.FakeClock`, so no test sleeps for real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import anyio
from claude_agent_sdk import ClaudeAgentOptions

import teamlead
from teamlead.clock import Clock
from teamlead.events import Finished
from teamlead.policy import InboxWaitPolicy, Policy
from teamlead.testing import FakeClock

__all__ = [
    "SESSION",
    "Hang",
    "Script",
    "advance_when_hung",
    "agent_call",
    "error_result",
    "fan_out",
    "fast_policy",
    "init",
    "lead",
    "notified",
    "of_type",
    "result",
    "run",
    "started",
    "synthesis_failed",
    "updated",
]

SESSION = "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"


# -- stream-json builders -------------------------------------------------------------------
def init() -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "session_id": SESSION, "cwd": "/proj"}


def agent_call(tool_use_id: str, description: str, msg_id: str = "msg_1") -> dict[str, Any]:
    block = {
        "type": "tool_use",
        "id": tool_use_id,
        "name": "Agent",
        "input": {"description": description, "prompt": f"{description}: do it"},
    }
    return {
        "type": "assistant",
        "message": {"id": msg_id, "content": [block]},
        "parent_tool_use_id": None,
        "session_id": SESSION,
    }


def started(task_id: str, description: str) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "task_started",
        "task_id": task_id,
        "tool_use_id": f"tu-{task_id}",
        "run_id": f"run-{task_id}",
        "description": description,
        "task_type": "local_agent",
        "session_id": SESSION,
    }


def updated(task_id: str, status: str) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "task_updated",
        "task_id": task_id,
        "run_id": f"run-{task_id}",
        "patch": {"status": status},
        "session_id": SESSION,
    }


def notified(
    task_id: str,
    status: str = "completed",
    summary: str | None = None,
    output_file: str | None = None,
) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "task_notification",
        "task_id": task_id,
        "tool_use_id": f"tu-{task_id}",
        "run_id": f"run-{task_id}",
        "status": status,
        "summary": summary,
        "output_file": output_file,
        "session_id": SESSION,
    }


def lead(text: str, msg_id: str = "msg_lead", error: str | None = None) -> dict[str, Any]:
    return {
        "type": "assistant",
        "message": {"id": msg_id, "content": [{"type": "text", "text": text}]},
        "parent_tool_use_id": None,
        "error": error,
        "session_id": SESSION,
    }


def result(
    text: str = "done", *, cost: float | None = None, origin_task: str | None = None
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": text,
        "session_id": SESSION,
        "num_turns": 1,
        "total_cost_usd": cost,
        "api_error_status": None,
    }
    if origin_task:
        raw["origin"] = {"kind": "task-notification", "runId": f"run-{origin_task}"}
    return raw


def error_result(
    status: int | None = 529, text: str = "Overloaded", *, cost: float | None = None
) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": "error_during_execution" if status is None else "success",
        "is_error": True,
        "result": text,
        "session_id": SESSION,
        "num_turns": 1,
        "total_cost_usd": cost,
        "api_error_status": status,
    }


def synthesis_failed(status: int = 529) -> list[dict[str, Any]]:
    """The injected synthesis turn fails: an errored assistant message, then an error result."""
    return [
        lead("API Error: overloaded", msg_id="msg_err", error="rate_limit"),
        error_result(status),
    ]


def fan_out(*tasks: tuple[str, str]) -> list[dict[str, Any]]:
    """init, one Agent call per task in one API message, task_started each, the ack result."""
    out: list[dict[str, Any]] = [init()]
    out += [agent_call(f"tu-{tid}", desc) for tid, desc in tasks]
    out += [started(tid, desc) for tid, desc in tasks]
    out += [lead("Agents are working.", msg_id="msg_ack"), result("Agents are working.")]
    return out


class Hang:
    """A step that awaits forever; says when it started hanging and that it was closed."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.closed = False


async def advance_when_hung(hang: Hang, clock: FakeClock, seconds: float) -> None:
    """Once the stream hangs, move virtual time on by ``seconds`` (as time would pass)."""
    await hang.started.wait()
    clock.advance(seconds)


class Script:
    """A scripted ``query_fn``: call N replays ``rounds[N]``; records prompts and options.

    A step is a message (dict or typed SDK object), an exception to raise, a callable run
    for its side effect (post to the inbox, advance the clock), or a :class:`Hang`.
    """

    def __init__(self, *rounds: Iterable[Any], clock: Clock | None = None) -> None:
        self.rounds = [list(r) for r in rounds]
        self.calls: list[tuple[str, ClaudeAgentOptions]] = []
        self.clock = clock
        self.started_at: list[float] = []  # the clock's time at each call, given a clock

    async def __call__(self, *, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
        self.calls.append((prompt, options))
        if self.clock is not None:
            self.started_at.append(self.clock.monotonic())
        assert len(self.calls) <= len(self.rounds), f"unexpected query_fn call {len(self.calls)}"
        for step in self.rounds[len(self.calls) - 1]:
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, Hang):
                try:
                    step.started.set()
                    await anyio.sleep_forever()
                finally:
                    step.closed = True
            elif callable(step):
                step()
            else:
                yield step

    @property
    def prompts(self) -> list[str]:
        return [p for p, _ in self.calls]


def fast_policy(**overrides: Any) -> Policy:
    """Small waits, polling only (no watcher thread), so each test takes milliseconds.

    No request relay either (starting and stopping its server costs a fifth of a second a
    test): a scripted ``query_fn`` sends no request through it. The one test that checks
    how a run hands the relay to every round turns it back on; tests/test_relay_wiring.py
    covers the rest of the wiring.
    """
    values: dict[str, Any] = {
        "relay": False,
        "wait_s": 20.0,
        "inbox": InboxWaitPolicy(
            use_events=False, tries=2, span_s=3.0, first_delay_s=1.0, max_delay_s=2.0
        ),
    }
    values.update(overrides)
    return Policy(**values)


async def run(
    script: Script,
    *,
    options: ClaudeAgentOptions | None = None,
    policy: Policy | None = None,
    clock: Clock | None = None,
) -> tuple[list[Any], Finished]:
    items = [
        item
        async for item in teamlead.run(
            "Investigate.",
            options,
            query_fn=script,
            policy=policy or fast_policy(),
            clock=clock or FakeClock(),
        )
    ]
    assert sum(isinstance(i, Finished) for i in items) == 1
    assert isinstance(items[-1], Finished)
    return items, items[-1]


def of_type(items: list[Any], kind: type) -> list[Any]:
    return [i for i in items if isinstance(i, kind)]
