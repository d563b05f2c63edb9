"""The PreToolUse hook's plumbing: the deny output the CLI reads, and merging the hook in.

The CLI runs an Agent call only when its PreToolUse hooks return: ``{}`` lets it run, a
deny output (:func:`deny_output`) refuses it with a reason the model reads.
:func:`merge_hook` adds the gate's matcher to the user's own hooks without replacing them.
"""

from __future__ import annotations

import dataclasses

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher
from claude_agent_sdk.types import SyncHookJSONOutput

__all__ = ["deny_output", "merge_hook"]


def deny_output(reason: str) -> SyncHookJSONOutput:
    """The hook output that refuses a tool call, with ``reason`` for the model."""
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

    Example:
        >>> opts = merge_hook(ClaudeAgentOptions(), gate.hook_matcher())  # doctest: +SKIP
    """
    hooks = dict(options.hooks or {})
    existing = list(hooks.get("PreToolUse") or [])
    if any(cb in m.hooks for m in existing for cb in matcher.hooks):
        return options
    hooks["PreToolUse"] = [*existing, matcher]
    return dataclasses.replace(options, hooks=hooks)
