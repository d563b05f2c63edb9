"""One Agent call as the spawn gate tracks it; the hook's deny output and its install.

Mutable on purpose: a call moves from queued to admitted/denied/rejected and holds or frees
its slots; :meth:`Call.snapshot` gives the frozen :class:`SpawnRecord` others see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import anyio
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher
from claude_agent_sdk.types import SyncHookJSONOutput

from .gate_events import DenyCode, SpawnRecord, SpawnStatus

__all__ = ["Call", "deny_output", "merge_hook", "safe_read"]


@dataclasses.dataclass(eq=False)
class Call:
    tool_use_id: str
    description: str
    subagent_type: str | None
    depth: int
    parent: str | None
    turn: str | None = None
    status: SpawnStatus = "queued"
    code: DenyCode | None = None
    reason: str | None = None
    task_id: str | None = None
    queued_at: float | None = None
    admitted_at: float | None = None
    decided_at: float | None = None
    ended_at: float | None = None
    run_slot: bool = False
    cap_slot: bool = False
    budget: bool = False
    waiting: anyio.CancelScope | None = None
    close_reason: str | None = None

    def snapshot(self) -> SpawnRecord:
        return SpawnRecord(
            tool_use_id=self.tool_use_id,
            description=self.description,
            subagent_type=self.subagent_type,
            depth=self.depth,
            parent_agent_id=self.parent,
            turn=self.turn,
            status=self.status,
            code=self.code,
            reason=self.reason,
            task_id=self.task_id,
            queued_at=self.queued_at,
            admitted_at=self.admitted_at,
            decided_at=self.decided_at,
            ended_at=self.ended_at,
        )


def deny_output(reason: str) -> SyncHookJSONOutput:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def merge_hook(options: ClaudeAgentOptions, matcher: HookMatcher) -> ClaudeAgentOptions:
    """``options`` with ``matcher`` appended under ``PreToolUse``; the user's hooks stay.

    Adding the same callback twice is a no-op.
    """
    hooks = dict(options.hooks or {})
    existing = list(hooks.get("PreToolUse") or [])
    if any(cb in m.hooks for m in existing for cb in matcher.hooks):
        return options
    hooks["PreToolUse"] = [*existing, matcher]
    return dataclasses.replace(options, hooks=hooks)


def safe_read(read: Callable[[], float]) -> float | None:
    """``read()``, or ``None`` if it fails (the gate must answer even when its clock breaks)."""
    try:
        return read()
    except Exception:
        return None
