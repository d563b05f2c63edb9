"""The spawn gate's part in a session: install it, feed it, account for it, wrap up with it.

A session runs one :class:`~teamlead._run.gate.SpawnGate` across all its rounds (see
:class:`GateFeed`): the gate's hook is merged into the options of every round (a client's
options get it from :func:`teamlead.prepare_options`, since a client's hooks are fixed
when it connects), every stream message is observed, and the gate's events are yielded
right after the message that caused them. At the end, :func:`call_dispositions` turns the
gate's records into ``Finished.tasks`` entries for the calls that never became tasks, and
:func:`wrap_up_prompt` is the one no-tools round the deadline's wrap-up runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions

from .._redact import redact
from ..clock import Clock
from ..events import Disposition, TaskDisposition
from ..policy import Policy
from .gate import SpawnGate
from .gate_events import GateEvent, SpawnRecord
from .gate_stream import observe
from .resume_prompt import Delivery, render_resume_prompt

__all__ = [
    "GateFeed",
    "call_dispositions",
    "find_gate",
    "install_gate",
    "no_tools",
    "wrap_up_prompt",
]

_WRAP_HEAD = (
    "The run's deadline is near, so this is the last turn and your tools are disabled. "
    "Unfinished agents were stopped."
)


def find_gate(options: ClaudeAgentOptions) -> SpawnGate | None:
    """The spawn gate whose hook ``options`` already carry (from :func:`install_gate`)."""
    for matcher in (options.hooks or {}).get("PreToolUse") or []:
        for hook in matcher.hooks:
            owner = getattr(hook, "__self__", None)
            if isinstance(owner, SpawnGate):
                return owner
    return None


def install_gate(
    options: ClaudeAgentOptions, policy: Policy, clock: Clock | None = None
) -> ClaudeAgentOptions:
    """``options`` with a new spawn gate for ``policy`` (kept if one is already there)."""
    if not policy.spawn.enabled or find_gate(options) is not None:
        return options
    env = {k: v for k, v in (options.env or {}).items() if isinstance(v, str)}
    extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
    gate = SpawnGate(policy.spawn, deadline_s=policy.deadline_s, env=env, **extra)
    return gate.apply(options)


class GateFeed:
    """One session's gate: observes messages and hands back the events they caused."""

    def __init__(self, gate: SpawnGate) -> None:
        self.gate = gate
        self._events: list[GateEvent] = []
        gate.on_event = self._events.append

    def observe(self, message: Any) -> list[Any]:
        """Feed ``message`` to the gate (``None``: none); the gate events since the last call."""
        if message is not None:
            observe(self.gate, message)
        return self.drain()

    def drain(self) -> list[Any]:
        """The gate events not yet handed out."""
        events, self._events[:] = list(self._events), []
        return events


def _reissued(record: SpawnRecord, later: list[SpawnRecord]) -> bool:
    """Whether the lead re-issued a rejected call's work: a later call with the same
    description (and subagent type) that the gate admitted."""
    if not record.description:
        return False
    return any(
        r.status == "admitted"
        and r.description == record.description
        and r.subagent_type == record.subagent_type
        for r in later
    )


def call_dispositions(records: list[SpawnRecord]) -> tuple[list[TaskDisposition], list[str]]:
    """``Finished.tasks`` entries for the Agent calls that never ran, and reason lines.

    Denied calls (the user's own limits) are ``not_run``; a call the CLI rejected is
    ``missing`` (so the run is partial) unless the lead re-issued that work later.
    """
    out: list[TaskDisposition] = []
    reasons: list[str] = []
    for index, record in enumerate(records):
        if record.status not in ("denied", "rejected", "queued"):
            continue
        status = "denied" if record.status == "denied" else "rejected"
        disposition: Disposition = "not_run"
        description = redact(record.description or record.tool_use_id)
        reason = redact(record.reason or "")
        if status == "rejected" and not _reissued(record, records[index + 1 :]):
            disposition = "missing"
            reasons.append(f'Agent call "{description}" never ran: {reason or "rejected"}')
        out.append(
            TaskDisposition(
                id=record.tool_use_id,
                kind="call",
                description=description,
                status=status,
                disposition=disposition,
                source="none",
                reason=reason or None,
            )
        )
    return out, reasons


def wrap_up_prompt(
    pending: list[Delivery], unfinished: list[str], policy: Policy
) -> tuple[str, int]:
    """The wrap-up round's prompt: every collected result quoted, what did not finish named."""
    missing = [
        f'task "{name}" did not finish before the deadline and was stopped' for name in unfinished
    ]
    text, used = render_resume_prompt(pending, missing, policy)
    return f"{_WRAP_HEAD}\n\n{text}", used


def no_tools(options: ClaudeAgentOptions, session_id: str) -> ClaudeAgentOptions:
    """Options for the wrap-up round: the same session, no tools at all."""
    return dataclasses.replace(options, resume=session_id, tools=[])
