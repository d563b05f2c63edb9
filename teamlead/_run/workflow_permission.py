"""Letting the lead run a ``Workflow``, and saying so when it could not.

In permission mode ``default`` (and ``acceptEdits``) Claude Code denies a ``Workflow`` call
unless a ``can_use_tool`` callback allows it or ``allowed_tools`` names ``Workflow``; the
lead then reads "Review dynamic workflow before running" as the call's tool result (Claude
Code 2.1.332), and nothing else tells the user why no workflow ran. :func:`allow_workflows`
is the allow-list entry; :func:`workflow_denials` turns the denial in the stream into one
:class:`~teamlead.events.WorkflowDenied` event that names the way to allow it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from claude_agent_sdk import ClaudeAgentOptions

from ..events import WorkflowDenied
from ..tracker import ToolResultSeen, TrackedEvent

__all__ = ["WORKFLOW_DENIED", "WORKFLOW_TOOL", "allow_workflows", "workflow_denials"]

#: The tool name, as ``allowed_tools`` and the hooks name it.
WORKFLOW_TOOL = "Workflow"
#: The tool result of a Workflow call the CLI's permission check denied (2.1.332).
WORKFLOW_DENIED = "Review dynamic workflow before running"
_HINT = (
    "the lead's Workflow call was denied: the permission mode asks for approval; allow "
    "workflows with teamlead.allow_workflows(options) (allowed_tools=['Workflow']) or "
    "`teamlead ask --allow-workflows`"
)


def allow_workflows(options: ClaudeAgentOptions | None = None) -> ClaudeAgentOptions:
    """``options`` whose lead may run ``Workflow`` scripts in any permission mode.

    Adds ``Workflow`` to ``allowed_tools`` (once; the other entries stay). Tools used
    *inside* the workflow's agents still go through the permission mode and
    ``can_use_tool`` as usual; the run's limits (cap, stagger, budgets, timeout, depth)
    apply to the workflow's agents either way.

    Example:
        >>> options = allow_workflows(ClaudeAgentOptions(allowed_tools=["Read"]))
        >>> options.allowed_tools
        ['Read', 'Workflow']
    """
    options = options or ClaudeAgentOptions()
    tools = list(options.allowed_tools or [])
    if WORKFLOW_TOOL in tools:
        return options
    return dataclasses.replace(options, allowed_tools=[*tools, WORKFLOW_TOOL])


def workflow_denials(events: Iterable[TrackedEvent]) -> list[WorkflowDenied]:
    """One :class:`~teamlead.events.WorkflowDenied` per Workflow call the CLI's permission
    check refused among one message's parsed ``events``."""
    return [
        WorkflowDenied(tool_use_id=event.tool_use_id[:200], reason=WORKFLOW_DENIED, hint=_HINT)
        for event in events
        if isinstance(event, ToolResultSeen)
        and event.is_error
        and event.text.strip().startswith(WORKFLOW_DENIED)
    ]
