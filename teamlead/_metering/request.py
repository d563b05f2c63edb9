"""One request at the relay: whose it is (session and agent ids, from Claude Code's
headers, see :func:`agent_key`), and its ticket. A workflow agent is told apart by Claude
Code's system prompt for them (2.1.332).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._governor import UsageScan
from .._private import json_object
from ..events import RateLimited

if TYPE_CHECKING:
    from .count import AgentCount

__all__ = [
    "LEAD",
    "Answer",
    "Forward",
    "Refused",
    "Send",
    "Ticket",
    "agent_key",
    "is_workflow_agent",
    "last_tool_of",
    "model_of",
    "with_model",
]

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Answer = Callable[..., Awaitable[None]]
#: ``exchange(send, on_limited, body)``: forward the request (``body`` instead of its own when
#: not ``None``; ``on_limited`` also told of its 429s, when not ``None``) and stream the reply
#: back through ``send``.
Forward = Callable[[Send, "Callable[[RateLimited], None] | None", "bytes | None"], Awaitable[None]]

#: The agent id of the lead: its requests carry none.
LEAD = ""
_INVALID = "?invalid"
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_SESSION_HEADER = b"x-claude-code-session-id"
_AGENT_HEADER = b"x-claude-code-agent-id"
#: Claude Code's system prompt for workflow agents (2.1.332): the hook never sees them.
_WORKFLOW_MARK = "spawned by a workflow orchestration script"


@dataclass(frozen=True)
class Refused:
    """A request the relay answers itself (a 400 ``invalid_request_error``) instead of
    forwarding: why, in one line."""

    message: str


def agent_key(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str, str]:
    """``(session id, agent id)`` of a request; the lead's agent id is :data:`LEAD`.

    A value that is not a plausible id (too long, odd characters) becomes ``"?invalid"``, so
    a hostile header can neither grow the book's keys nor pose as another agent.

    Example:
        >>> agent_key([(b"X-Claude-Code-Session-Id", b"s-1"), (b"x-claude-code-agent-id", b"a1")])
        ('s-1', 'a1')
    """
    session: str | None = None
    agent: str | None = None
    for name, value in headers:  # one pass; the first of a repeated header counts
        lower = name.lower()
        if lower == _SESSION_HEADER and session is None:
            session = value.decode("latin-1").strip()
        elif lower == _AGENT_HEADER and agent is None:
            agent = value.decode("latin-1").strip()
    session_id = "" if session is None else (session if _ID.fullmatch(session) else _INVALID)
    agent_id = LEAD if not agent else (agent if _ID.fullmatch(agent) else _INVALID)
    return session_id, agent_id


def is_workflow_agent(body: bytes) -> bool:
    """Whether a request body is a workflow agent's (Claude Code's workflow system prompt)."""
    if _WORKFLOW_MARK.encode() not in body:
        return False
    system = (json_object(body) or {}).get("system")
    blocks = system if isinstance(system, list) else [system]
    return any(
        _WORKFLOW_MARK in (b.get("text", "") if isinstance(b, dict) else str(b or ""))
        for b in blocks[:4]
    )


def model_of(body: bytes) -> str | None:
    """The ``model`` a request body names, if it is a JSON object that names one."""
    model = (json_object(body) or {}).get("model")
    return model[:200] if isinstance(model, str) and model else None


#: How much of a request body's end :func:`last_tool_of` reads: an agent's latest tool
#: call is in its last assistant message, near the end of the conversation it resends.
_TAIL_BYTES = 256 * 1024
_TOOL_USE = re.compile(rb'"type"\s*:\s*"tool_use"')
_TOOL_NAME = re.compile(rb'"name"\s*:\s*"([A-Za-z0-9_.:-]{1,64})"')


def last_tool_of(body: bytes) -> str | None:
    """The tool the agent called last, as its request's conversation shows: the ``name`` of
    the last ``tool_use`` block in the body's tail (``None`` when there is none). A bounded
    scan, not a parse: each of an agent's requests resends its whole conversation.

    Example:
        >>> last_tool_of(b'{"messages":[{"content":[{"type":"tool_use","id":"t","name":"Bash"}]}]}')
        'Bash'
    """
    tail = body[-_TAIL_BYTES:]
    last = None
    for last in _TOOL_USE.finditer(tail):  # noqa: B007 - the last match is wanted
        pass
    if last is None:
        return None
    window = tail[last.end() : last.end() + 400]
    name = _TOOL_NAME.search(window)
    return name.group(1).decode() if name else None


def with_model(body: bytes, model: str | None) -> bytes | None:
    """``body`` with its ``model`` set to ``model``; ``None`` when there is nothing to change
    (no model pinned, the body already names it, or it is not a JSON object: then it goes
    as it came, never half-rewritten)."""
    if model is None:
        return None
    data = json_object(body)
    if data is None or data.get("model") == model:
        return None
    data["model"] = model
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:  # half a surrogate pair (text cut inside an emoji): escaped
        return json.dumps(data, separators=(",", ":")).encode()


@dataclass(eq=False)
class Ticket:
    """One request under way: its reservation, its reply's usage (read as it streams, by the
    relay), its 429s and its status; its book settles it when the request ends."""

    key: tuple[str, str]
    count: AgentCount
    reserve: int
    #: the body to forward instead of the request's own (its model pinned), if any
    body: bytes | None = None
    scan: UsageScan = field(default_factory=UsageScan)
    status: int | None = None

    def watch(self, send: Send) -> Send:
        async def watched(message: Message) -> None:
            if message.get("type") == "http.response.start":
                self.status = int(message.get("status") or 0)
            await send(message)

        return watched

    def limited(self, event: RateLimited) -> None:
        if event.outcome == "absorbed":
            self.count.absorbed += 1
        else:
            self.count.passed += 1
