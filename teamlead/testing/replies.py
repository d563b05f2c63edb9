"""What a scripted model says: :class:`ScriptedRequest` in, :class:`Reply` out.

A *script* is any callable ``(ScriptedRequest) -> Reply``. The server parses each
Messages API request into a :class:`ScriptedRequest` (system text, messages, tools,
session id, and whether it comes from the lead or from one of its subagents) and
streams back whatever the script decides: text, one or more ``tool_use`` blocks in one
message (several ``Agent`` calls, say), a delay before or while streaming, or an HTTP
fault.

Example:
    >>> def script(req: ScriptedRequest) -> Reply:
    ...     if req.role == "subagent":
    ...         return Reply.text(f"finding for {req.agent_description}", delay=0.5)
    ...     return Reply.text("done")
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..events import RequestRole

__all__ = [
    "AgentCall",
    "Fault",
    "Reply",
    "Role",
    "ScriptedRequest",
    "ToolUse",
]

Role: TypeAlias = RequestRole
"""Whom a scripted request is for (:data:`teamlead.events.RequestRole`)."""


@dataclass(frozen=True)
class ToolUse:
    """One ``tool_use`` block: a tool name and its input."""

    name: str
    input: Mapping[str, Any]
    id: str = field(default_factory=lambda: f"toolu_{uuid.uuid4().hex[:24]}")


@dataclass(frozen=True)
class AgentCall:
    """An ``Agent`` tool call: the lead delegating one subagent.

    ``prompt`` is what the subagent's conversation starts with; the server uses it to
    recognise the subagent's own requests later, so keep prompts distinct.
    """

    description: str
    prompt: str
    subagent_type: str = "general-purpose"
    name: str | None = None
    model: str | None = None
    run_in_background: bool | None = None

    def to_tool_use(self, tool_name: str = "Agent") -> ToolUse:
        data: dict[str, Any] = {
            "description": self.description,
            "prompt": self.prompt,
            "subagent_type": self.subagent_type,
        }
        for key in ("name", "model", "run_in_background"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return ToolUse(name=tool_name, input=data)


@dataclass(frozen=True)
class Fault:
    """An HTTP fault instead of a reply.

    ``status`` 429 carries ``retry-after``; 500 is an ``api_error``; 529 is
    ``overloaded_error``; ``drop=True`` closes the connection (mid-stream when
    ``after_events`` > 0). ``should_retry`` is the ``x-should-retry`` header the API
    sends: ``None`` as the API does (``true`` for 429, 500 and 529), ``False`` for a
    fault no retry will get past (the relay then passes an overload on at once).
    """

    status: int = 500
    retry_after: float | None = None
    message: str | None = None
    drop: bool = False
    after_events: int = 0
    should_retry: bool | None = None

    @property
    def error_type(self) -> str:
        return {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(self.status, "api_error")

    def body(self) -> dict[str, Any]:
        default = {
            429: "Number of concurrent connections has exceeded your rate limit.",
            529: "Overloaded",
            500: "Internal server error",
        }.get(self.status, "Scripted error")
        return {
            "type": "error",
            "error": {"type": self.error_type, "message": self.message or default},
            "request_id": f"req_{uuid.uuid4().hex[:24]}",
        }


@dataclass(frozen=True)
class Reply:
    """One scripted model reply. Build it with the class methods.

    Attributes:
        content: assistant text, streamed in chunks (may be empty when tools are used).
        tool_uses: tool_use blocks sent in the same message, after the text.
        delay: seconds to wait before the first byte.
        chunk_delay: seconds between streamed text chunks ("while streaming").
        fault: an HTTP fault instead of a reply.
        input_tokens / output_tokens: usage reported for the reply.
        headers: extra response headers (``anthropic-ratelimit-*``, say), sent as given.
        usage: send ``usage`` in ``message_start``/``message_delta`` (every reply does by
            default, as the API does); ``False`` sends none, for a reader that must count
            it as unknown.
    """

    content: str = ""
    tool_uses: tuple[ToolUse, ...] = ()
    delay: float = 0.0
    chunk_delay: float = 0.0
    fault: Fault | None = None
    input_tokens: int = 20
    output_tokens: int | None = None
    stop_reason: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    usage: bool = True

    @classmethod
    def text(
        cls,
        text: str,
        *,
        delay: float = 0.0,
        chunk_delay: float = 0.0,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """A plain text answer that ends the turn (with extra response ``headers``)."""
        extra = tuple((headers or {}).items())
        return cls(content=text, delay=delay, chunk_delay=chunk_delay, headers=extra)

    @classmethod
    def tools(cls, *calls: ToolUse | AgentCall, text: str = "", delay: float = 0.0) -> Reply:
        """One message with one or more tool_use blocks (``stop_reason: tool_use``)."""
        uses = tuple(c.to_tool_use() if isinstance(c, AgentCall) else c for c in calls)
        if not uses:
            raise ValueError("Reply.tools needs at least one call")
        return cls(content=text, tool_uses=uses, delay=delay)

    @classmethod
    def agents(cls, *calls: AgentCall, text: str = "", delay: float = 0.0) -> Reply:
        """Several ``Agent`` calls in one message: the parallel fan-out."""
        return cls.tools(*calls, text=text, delay=delay)

    @classmethod
    def error(
        cls,
        status: int,
        *,
        retry_after: float | None = None,
        message: str | None = None,
        delay: float = 0.0,
        should_retry: bool | None = None,
    ) -> Reply:
        """An HTTP error reply: 429 (with ``retry-after``), 500, 529, ... (``should_retry``:
        see :class:`Fault`)."""
        fault = Fault(
            status=status, retry_after=retry_after, message=message, should_retry=should_retry
        )
        return cls(fault=fault, delay=delay)

    def final(self) -> Reply:
        """This reply, a fault marked as one no retry gets past (``x-should-retry:
        false``); a reply that is no fault as it is."""
        if self.fault is None or self.fault.should_retry is not None:
            return self
        return dataclasses.replace(self, fault=dataclasses.replace(self.fault, should_retry=False))

    @classmethod
    def drop(cls, *, after_events: int = 0, delay: float = 0.0, partial_text: str = "") -> Reply:
        """Close the connection after ``after_events`` SSE events, before the reply is whole.

        ``partial_text`` gives the stream some text deltas to cut through.
        """
        fault = Fault(status=0, drop=True, after_events=after_events)
        return cls(content=partial_text, fault=fault, delay=delay)

    @property
    def resolved_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if self.tool_uses else "end_turn"

    @property
    def resolved_output_tokens(self) -> int:
        if self.output_tokens is not None:
            return self.output_tokens
        size = len(self.content) + sum(len(json.dumps(dict(t.input))) for t in self.tool_uses)
        return max(1, size // 4)


_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_NOTIFICATION = re.compile(r"<task-notification>(.*?)</task-notification>", re.DOTALL)
_TAG = re.compile(r"<(\w[\w-]*)>(.*?)</\1>", re.DOTALL)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _text_of(content: Any) -> str:
    parts: list[str] = []
    for block in _blocks(content):
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif block.get("type") == "tool_result":
            parts.append(_text_of(block.get("content")))
    return "\n".join(parts)


@dataclass(frozen=True)
class ScriptedRequest:
    """A parsed ``POST /v1/messages`` request, as a script sees it.

    Attributes:
        index: 0-based arrival order across the whole server.
        body: the raw JSON body (kept for anything not parsed below).
        system: the system prompt text, blocks joined by newlines.
        messages: the raw ``messages`` list.
        tools: the names of the tools offered.
        session_id: parsed from ``metadata.user_id`` (a JSON string or a ``session_<id>``
            suffix), or ``None``.
        role: ``"lead"`` for the main conversation, ``"subagent"`` for a conversation
            that starts with the prompt of an ``Agent`` call this server sent, ``"other"``
            for side requests (titles, summaries) that offer no tools.
        agent: for a subagent, the :class:`AgentCall` that started it.
        stream: whether the client asked for SSE.
    """

    index: int
    body: Mapping[str, Any]
    system: str
    messages: Sequence[Mapping[str, Any]]
    tools: tuple[str, ...]
    session_id: str | None
    role: Role
    agent: AgentCall | None
    stream: bool
    model: str

    @property
    def first_user_text(self) -> str:
        """Text of the first user message, with system reminders removed."""
        for msg in self.messages:
            if msg.get("role") == "user":
                return _REMINDER.sub("", _text_of(msg.get("content"))).strip()
        return ""

    @property
    def last_user_text(self) -> str:
        """Text of the last user message (tool results included), reminders kept."""
        for msg in reversed(self.messages):
            if msg.get("role") == "user":
                return _text_of(msg.get("content"))
        return ""

    @property
    def all_text(self) -> str:
        """Every text in the conversation, for marker checks."""
        return "\n".join(_text_of(m.get("content")) for m in self.messages)

    @property
    def agent_description(self) -> str | None:
        return self.agent.description if self.agent else None

    @property
    def assistant_turns(self) -> int:
        """How many assistant messages the conversation already holds."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def tool_uses_sent(self) -> list[dict[str, Any]]:
        """Every tool_use block the model already sent in this conversation."""
        out: list[dict[str, Any]] = []
        for msg in self.messages:
            if msg.get("role") == "assistant":
                out.extend(b for b in _blocks(msg.get("content")) if b.get("type") == "tool_use")
        return out

    @property
    def notifications(self) -> list[dict[str, str]]:
        """The ``<task-notification>`` blocks the CLI injected, as tag -> text dicts."""
        found: list[dict[str, str]] = []
        for body in _NOTIFICATION.findall(self.all_text):
            found.append({tag: value.strip() for tag, value in _TAG.findall(body)})
        return found

    def has_marker(self, marker: str) -> bool:
        """Whether ``marker`` appears in the system prompt or any message."""
        return marker in self.system or marker in self.all_text
