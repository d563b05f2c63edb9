"""The Messages API on the wire: SSE event sequences, JSON bodies, and request fields.

The scripted server's formats, kept apart from its HTTP plumbing: what the streaming and
non-streaming Messages API send for a :class:`~teamlead.testing.replies.Reply`, and how the
session id and system text are read from a request body.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from .._claude import SCRIPTED_MESSAGE_PREFIX
from .replies import Reply

__all__ = ["message_json", "new_message_id", "session_from_metadata", "sse_events", "system_text"]

_TEXT_CHUNK = 24  # characters per text_delta, like the real API's small deltas
_JSON_CHUNK = 40


def new_message_id() -> str:
    """A fresh message id, marked as the scripted model's (trial records read the mark)."""
    return f"{SCRIPTED_MESSAGE_PREFIX}{uuid.uuid4().hex[:24]}"


def session_from_metadata(body: dict[str, Any]) -> str | None:
    meta = body.get("metadata")
    user_id = meta.get("user_id") if isinstance(meta, dict) else None
    if not isinstance(user_id, str):
        return None
    try:
        parsed = json.loads(user_id)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("session_id"), str):
        return str(parsed["session_id"])
    marker = "_session_"
    if marker in user_id:
        return user_id.rsplit(marker, 1)[1] or None
    return None


def system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(
            b.get("text", "")
            for b in system
            if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
    return ""


def sse_events(reply: Reply, model: str, message_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The exact SSE event sequence of the streaming Messages API for ``reply``."""
    usage = {"input_tokens": reply.input_tokens, "output_tokens": 1}
    start_message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }
    if reply.usage:
        start_message["usage"] = usage
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": start_message,
        },
    )
    index = 0
    if reply.content:
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
        )
        yield "ping", {"type": "ping"}
        for start in range(0, len(reply.content), _TEXT_CHUNK):
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "text_delta",
                        "text": reply.content[start : start + _TEXT_CHUNK],
                    },
                },
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    for use in reply.tool_uses:
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": use.id, "name": use.name, "input": {}},
            },
        )
        raw = json.dumps(dict(use.input))
        for start in range(0, len(raw), _JSON_CHUNK):
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": raw[start : start + _JSON_CHUNK],
                    },
                },
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": reply.resolved_stop_reason, "stop_sequence": None},
    }
    if reply.usage:
        delta["usage"] = {"output_tokens": reply.resolved_output_tokens}
    yield "message_delta", delta
    yield "message_stop", {"type": "message_stop"}


def message_json(reply: Reply, model: str, message_id: str) -> dict[str, Any]:
    """The non-streaming JSON body for ``reply``."""
    content: list[dict[str, Any]] = []
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    content.extend(
        {"type": "tool_use", "id": u.id, "name": u.name, "input": dict(u.input)}
        for u in reply.tool_uses
    )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.resolved_stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.resolved_output_tokens,
        },
    }
