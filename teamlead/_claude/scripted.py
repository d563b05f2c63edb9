"""The mark teamlead's scripted model server puts on every message it writes.

A trial record says whether its answers came from a scripted model, so a report can say
so before anyone reads its numbers as a real model's. The server (``teamlead.testing``)
starts every message id with :data:`SCRIPTED_MESSAGE_PREFIX`; the real API's ids are
``msg_`` and base62, so none starts that way. Product code reads the mark here and never
loads the test bed.
"""

from __future__ import annotations

__all__ = ["SCRIPTED_MESSAGE_PREFIX", "is_scripted_message"]

SCRIPTED_MESSAGE_PREFIX = "msg_scripted_"
"""How every message id from the scripted model server begins."""


def is_scripted_message(message_id: object) -> bool:
    """True when ``message_id`` was written by teamlead's scripted model server.

    Example:
        >>> is_scripted_message("msg_scripted_0f3a"), is_scripted_message("msg_01XFDUDYJgAA")
        (True, False)
    """
    return isinstance(message_id, str) and message_id.startswith(SCRIPTED_MESSAGE_PREFIX)
