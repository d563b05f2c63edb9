"""Reading back, from the session's transcript, what a broken stream never showed.

When the SDK's reader fails mid-round (a message over its ``max_buffer_size``, a torn
line), the round and its CLI end, but what the CLI had done still happened: agents and
workflows it launched ran, and Agent calls whose hook was never answered did not.
:func:`read_back` feeds the launches the transcript shows and the stream missed to the run,
as a round does, so collection waits for them and reads what they left; after an
oversized message, the calls that never launched are accounted for as rejected.
"""

from __future__ import annotations

import logging
from typing import Any

from .._claude import replay, session_messages
from ..tracker import Tracker
from .outcome import RoundOutcome
from .round import describe_error
from .state import RunState

__all__ = ["read_back"]

logger = logging.getLogger(__name__)

#: the SDK's words when a message was over its buffer
_OVERSIZED = "exceeded maximum buffer size"
_TASK_MESSAGES = frozenset({"task_started", "task_notification"})


def read_back(state: RunState, outcome: RoundOutcome) -> None:
    """After a round whose stream broke, take what the session's transcript shows and the
    stream did not: the agents launched, and (after an oversized message) the calls that
    never ran.

    Args:
        state: the run; its tracker, agents and gate are told of each launch found.
        outcome: the round's outcome; nothing is read unless its stream raised.
    """
    tracker = state.stream.tracker
    if outcome.error_kind != "raised" or not tracker.session_id:
        return
    try:
        messages = session_messages(state.ask.config_dir, tracker.session_id)
    except Exception as exc:  # no transcript to read: the error line says what broke
        logger.warning("could not read the session's transcript back: %s", describe_error(exc))
        return
    saved = replay(messages, tracker.session_id, clock=state.clock)
    hidden = {
        task.task_id
        for task in saved.tasks.values()
        if task.task_id not in tracker.tasks
        and not (task.tool_use_id and tracker.call_seen(task.tool_use_id))
    }  # a call whose result the stream showed (a foreground agent's answer) is not hidden
    launches: set[str] = set()  # the tool_use ids of the hidden workflows' launches
    for task_id in hidden:
        tool_use_id = saved.tasks[task_id].tool_use_id or ""
        call = saved.agent_calls.get(tool_use_id)
        if call is not None:
            tracker.agent_calls.setdefault(call.tool_use_id, call)
        if saved.tasks[task_id].is_workflow:
            launches.add(tool_use_id)
    for raw in messages:
        if raw.get("subtype") in _TASK_MESSAGES and raw.get("task_id") in hidden:
            _take(state, raw)
        elif "tool_use_result" in raw and _tool_use_id(raw) in launches:
            _take(state, raw)  # a workflow's launch: its run id and script
    if hidden:
        logger.info("read %d launch(es) the stream missed back from the transcript", len(hidden))
    if _OVERSIZED in (outcome.error or ""):
        _unread_calls(state, saved)


def _tool_use_id(raw: dict[str, Any]) -> str | None:
    """The tool_use id a user message's first tool result answers."""
    message = raw.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    first = content[0] if isinstance(content, list) and content else None
    found = first.get("tool_use_id") if isinstance(first, dict) else None
    return found if isinstance(found, str) else None


def _take(state: RunState, raw: dict[str, Any]) -> None:
    """Feed one message read back to the run, as a round feeds one from the stream (the
    gate's events wait for the next round to yield them)."""
    try:
        events = state.feed(raw)
    except (ValueError, RecursionError):  # a record whose fields make no sense: skipped
        return
    state.admission.observe(raw, events)


def _unread_calls(state: RunState, saved: Tracker) -> None:
    """The lead's Agent calls that the stream never showed, nor their hooks (the message
    over the SDK's buffer held them), and that never launched: ``rejected``, with why."""
    tracker = state.stream.tracker
    launched = {t.tool_use_id for t in tracker.tasks.values() if t.tool_use_id}
    limit = state.ask.options.max_buffer_size
    reason = (
        f"the call's message was larger than the SDK's buffer of {limit} bytes "
        "(ClaudeAgentOptions.max_buffer_size), so it was never read and did not run"
    )
    for tool_use_id, call in saved.agent_calls.items():
        if tool_use_id in tracker.agent_calls or tool_use_id in launched:
            continue
        tracker.agent_calls[tool_use_id] = call
        tracker.invalid_calls.setdefault(tool_use_id, reason)
