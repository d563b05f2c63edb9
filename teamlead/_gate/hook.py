"""The PreToolUse hook's plumbing: the deny output the CLI reads, and merging the hook in.

The CLI runs an Agent call only when its PreToolUse hooks return: ``{}`` lets it run, a
deny output (:func:`deny_output`) refuses it with a reason the model reads, and an
``updatedInput`` with no decision (:func:`model_output`) lets it run on another model.
:func:`merge_hook` adds the gate's matcher to the user's own hooks without replacing them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher
from claude_agent_sdk.types import SyncHookJSONOutput

__all__ = ["deny_output", "merge_hook", "model_output"]


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


def merge_hook(options: ClaudeAgentOptions, matcher: HookMatcher) -> ClaudeAgentOptions:
    """``options`` with ``matcher`` appended under ``PreToolUse``; the user's hooks stay.

    Adding the same callback twice is a no-op.

    Example:
        >>> opts = merge_hook(ClaudeAgentOptions(), gate.hook_matcher())  # doctest: +SKIP
    """
    hooks = dict(options.hooks or {})
    existing = list(hooks.get("PreToolUse") or [])
    if any(cb in m.hooks for m in existing for cb in matcher.hooks):
        return options
    hooks["PreToolUse"] = [*existing, matcher]
    return dataclasses.replace(options, hooks=hooks)
