"""What a Messages API reply says of itself, read from its SSE events as they stream by.

``message_start`` carries the input counts (fresh, cache writes, cache reads), the model
and the reply's id; ``message_delta`` the output count and the stop reason. One
:class:`UsageScan` per reply at the relay serves all its readers: the token budget learns
from each event's counts as it completes, the agents' metering and the OTel ``chat`` span
read the whole once the reply ends. The body is the upstream's, so it is read with limits:
a line larger than :data:`MOST_EVENT_BYTES` is skipped unread, and a count that is not a
plain ``int`` in range is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .._private import json_object

__all__ = ["MOST_EVENT_BYTES", "Usage", "UsageScan"]

#: A line larger than this is not one of the small events read here: skipped unread.
MOST_EVENT_BYTES = 64 * 1024
_MOST_COUNT = 10**9
_WANTED = (b'"message_start"', b'"message_delta"')
_STOP = b"event: message_stop"


@dataclass(frozen=True)
class Usage:
    """What the upstream counted for one request (``usage`` in its answer); ``None``: not
    reported (``message_start`` has the input, ``message_delta`` the output)."""

    input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    output_tokens: int | None = None

    @classmethod
    def of(cls, raw: Any) -> Usage | None:
        """The counts of a ``usage`` object; ``None`` when it holds none."""
        if not isinstance(raw, Mapping):
            return None
        counts = {f.name: _count(raw.get(f.name)) for f in fields(cls)}
        return None if all(v is None for v in counts.values()) else cls(**counts)

    @property
    def prompt_tokens(self) -> int | None:
        """The whole prompt: fresh input, cache writes and cache reads."""
        parts = (
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        )
        if all(p is None for p in parts):
            return None
        return sum(p or 0 for p in parts)

    @property
    def counted_input(self) -> int | None:
        """What the input-token window counts: all but the cache reads."""
        if self.input_tokens is None and self.cache_creation_input_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.cache_creation_input_tokens or 0)


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < _MOST_COUNT else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class UsageScan:
    """Feed it a reply's body chunks, whatever their boundaries; it returns each event's
    counts as the event completes, and keeps the reply's latest counts (:attr:`usage`),
    model, id and stop reason, and whether the answer has ended (:attr:`ended`).

    Example:
        >>> scan = UsageScan()
        >>> scan.feed(b'event: message_start\\ndata: {"type": "message_start", "message": ')
        []
        >>> [u.input_tokens for u in scan.feed(b'{"model": "m","usage": {"input_tokens": 12}}}\\n')]
        [12]
        >>> delta = b'data: {"type": "message_delta", "usage": {"output_tokens": 7}}\\n'
        >>> [u.output_tokens for u in scan.feed(delta)]
        [7]
        >>> scan.usage.input_tokens, scan.usage.output_tokens, scan.model
        (12, 7, 'm')
    """

    def __init__(self) -> None:
        self._held = b""
        self._skipping = False  # inside a line too large to read
        self.usage = Usage()
        self.model: str | None = None
        self.response_id: str | None = None
        self.stop_reason: str | None = None
        #: A complete ``message_stop`` event went by (its blank line too): the upstream has
        #: finished the request. Only a line of the stream counts (text is JSON inside
        #: ``data:`` lines, where a line break is escaped), whatever the chunk boundaries.
        self.ended = False
        self._stopping = False  # inside the message_stop event

    @property
    def seen(self) -> bool:
        """Whether the reply reported any count."""
        return self.usage != Usage()

    def feed(self, chunk: bytes) -> list[Usage]:
        """The counts of the events ``chunk`` completes, in order (``message_start``'s
        input only: its output count is a placeholder)."""
        data = self._held + chunk if self._held else chunk
        end = data.rfind(b"\n")
        if end < 0:
            self._hold(data)
            return []
        lines = data[:end]
        if self._skipping:  # its first line ends the line being skipped
            lines, self._skipping = lines.partition(b"\n")[2], False
        self._hold(data[end + 1 :])
        if not self.ended and (self._stopping or _STOP in lines):
            for line in lines.split(b"\n"):
                if line.rstrip(b"\r") == _STOP:
                    self._stopping = True
                elif self._stopping and not line.rstrip(b"\r"):
                    self.ended = True
                    break
        if _WANTED[0] not in lines and _WANTED[1] not in lines:
            return []  # most chunks: text deltas, scanned in C and let go
        found = []
        for line in lines.split(b"\n"):  # only the lines that can hold one are parsed
            wanted = _WANTED[0] in line or _WANTED[1] in line
            if wanted and line.startswith(b"data:") and len(line) <= MOST_EVENT_BYTES:
                usage = self._event(line[5:])
                if usage is not None:
                    found.append(usage)
        return found

    def message(self, message: Any) -> Usage | None:
        """Read a ``message`` object (``message_start``'s, or a whole JSON reply)."""
        if not isinstance(message, dict):
            return None
        self.model = _text(message.get("model")) or self.model
        self.response_id = _text(message.get("id")) or self.response_id
        self.stop_reason = _text(message.get("stop_reason")) or self.stop_reason
        return self._counted(message.get("usage"))

    def _hold(self, rest: bytes) -> None:
        if len(rest) > MOST_EVENT_BYTES:
            rest, self._skipping = b"", True
        self._held = rest

    def _event(self, raw: bytes) -> Usage | None:
        event = json_object(raw)
        if event is None:
            return None
        if event.get("type") == "message_start":
            usage = self.message(event.get("message"))
            if usage is None or usage.output_tokens is None:
                return usage
            # its output count is set before any output is written (the API's says 1): the
            # reply's own comes in message_delta, so this event gives its input only
            usage = replace(usage, output_tokens=None)
            return None if usage == Usage() else usage
        if event.get("type") != "message_delta":
            return None
        delta = event.get("delta")
        if isinstance(delta, dict):
            self.stop_reason = _text(delta.get("stop_reason")) or self.stop_reason
        return self._counted(event.get("usage"))

    def _counted(self, raw: Any) -> Usage | None:
        usage = Usage.of(raw)
        if usage is not None:
            newer = {k: v for k, v in vars(usage).items() if v is not None}
            self.usage = replace(self.usage, **newer)
        return usage
