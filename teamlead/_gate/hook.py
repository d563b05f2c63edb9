"""The PreToolUse hook's plumbing: the outputs the CLI reads from the gate's hook.

The CLI runs an Agent call only when its PreToolUse hooks return: ``{}`` lets it run, a
deny output (:func:`deny_output`) refuses it with a reason the model reads, and an
``updatedInput`` with no decision (:func:`model_output`) lets it run on another model.
The run adds the gate's matcher to the user's own hooks with its options
(:func:`teamlead._run.options.build_options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from claude_agent_sdk.types import SyncHookJSONOutput

__all__ = ["deny_output", "model_output"]


def deny_output(reason: str) -> SyncHookJSONOutput:
    """The hook output that refuses a tool call, with ``reason`` for the model."""
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def model_output(tool_input: Mapping[str, Any], model: str) -> SyncHookJSONOutput:
    """The hook output that lets an Agent call run, its agent on ``model``.

    The CLI honours ``updatedInput`` with no permission decision (the call still goes
    through the user's permission rules): the whole input comes back, ``model`` replaced.
    """
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "updatedInput": {**tool_input, "model": model},
        }
    }
