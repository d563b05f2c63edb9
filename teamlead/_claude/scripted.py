"""The mark teamlead's scripted model server puts on every message it writes.

A trial record says whether its answers came from a scripted model, so a report can say
so before anyone reads its numbers as a real model's. The server (``teamlead.testing``)
starts every message id with :data:`SCRIPTED_MESSAGE_PREFIX`; the real API's ids are
``msg_`` and base62, so none starts that way. Product code reads the mark here and never
loads the test bed.
"""

from __future__ import annotations

from claude_agent_sdk import AssistantMessage

__all__ = ["SCRIPTED_MESSAGE_PREFIX", "api_message_id", "is_scripted_message"]

SCRIPTED_MESSAGE_PREFIX = "msg_scripted_"
"""How every message id from the scripted model server begins."""


def is_scripted_message(message_id: object) -> bool:
    """True when ``message_id`` was written by teamlead's scripted model server.

    Example:
        >>> is_scripted_message("msg_scripted_0f3a"), is_scripted_message("msg_01XFDUDYJgAA")
        (True, False)
    """
    return isinstance(message_id, str) and message_id.startswith(SCRIPTED_MESSAGE_PREFIX)


def api_message_id(item: object) -> str | None:
    """The id an API gave an assistant message, typed or raw (as a ``query_fn`` yields it).

    None for anything else, and for the messages the CLI writes itself (its API error
    messages), whose ids are not the API's ``msg_...``.

    Example:
        >>> api_message_id({"type": "assistant", "message": {"id": "msg_01XF"}})
        'msg_01XF'
    """
    if isinstance(item, AssistantMessage):
        found: object = item.message_id
    elif isinstance(item, dict) and item.get("type") == "assistant":
        message = item.get("message")
        found = message.get("id") if isinstance(message, dict) else None
    else:
        return None
    return found if isinstance(found, str) and found.startswith("msg_") else None
