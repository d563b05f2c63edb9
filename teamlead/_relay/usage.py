"""The ``usage`` of a streamed answer, read from its SSE events as they pass through.

The token budget corrects its estimate of a request's input with what the upstream
counted (``message_start``'s ``message.usage``) and learns the output size
(``message_delta``'s ``usage.output_tokens``). :class:`UsageReader` finds those two events
in the body chunks, whatever their boundaries, and reads nothing else. The body is the
upstream's, so it is read with limits: an event larger than :data:`MOST_EVENT_BYTES` is
skipped unread, a number that is not a plain count is left out. A JSON (not streamed)
answer is not read: the CLI always streams.
"""

from __future__ import annotations

import json
from typing import Any

from .._governor import Usage

__all__ = ["MOST_EVENT_BYTES", "UsageReader"]

#: An event larger than this is not one of the two small events read here.
MOST_EVENT_BYTES = 64 * 1024
_WANTED = (b"event: message_start", b"event: message_delta")
_FIELDS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)
_MOST_COUNT = 10**9


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < _MOST_COUNT else None


def _usage(event: bytes) -> Usage | None:
    """The usage of one ``message_start`` or ``message_delta`` event block, if any."""
    if not event.startswith(_WANTED):
        return None
    lines = event.split(b"\n")
    if lines[0].strip() not in _WANTED:
        return None
    data = next((line[5:] for line in lines[1:] if line.startswith(b"data:")), None)
    if data is None:
        return None
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    message = parsed.get("message")
    raw = message.get("usage") if isinstance(message, dict) else parsed.get("usage")
    if not isinstance(raw, dict):
        return None
    counts = {name: _count(raw.get(name)) for name in _FIELDS}
    if all(v is None for v in counts.values()):
        return None
    return Usage(**counts)


class UsageReader:
    """Feed it an answer's body chunks; it returns each usage found, in order.

    Example:
        >>> reader = UsageReader()
        >>> reader.feed(b'event: message_start\\ndata: {"message": {"usage": ')
        []
        >>> [u.input_tokens for u in reader.feed(b'{"input_tokens": 812}}}\\n\\n')]
        [812]
    """

    def __init__(self) -> None:
        self._held = b""
        self._skipping = False  # inside an event too large to read
        self.done = False  # message_delta was read: nothing more to find

    def feed(self, chunk: bytes) -> list[Usage]:
        """The usages completed by ``chunk``."""
        if self.done:
            return []
        data = self._held + chunk.replace(b"\r\n", b"\n")
        found: list[Usage] = []
        start = 0
        while (end := data.find(b"\n\n", start)) >= 0:
            event = data[start:end].lstrip(b"\n")
            start = end + 2
            if self._skipping:
                self._skipping = False
                continue
            usage = _usage(event)
            if usage is not None:
                found.append(usage)
                if event.startswith(_WANTED[1]):
                    self.done = True
                    self._held = b""
                    return found
        rest = data[start:]
        if len(rest) > MOST_EVENT_BYTES:
            self._skipping = True
            rest = rest[-1:]  # a blank line may begin with its last byte
        self._held = rest
        return found
