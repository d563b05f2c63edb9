"""Reading an SSE reply's ``usage`` as it streams through the relay, chunk by chunk."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["UsageScan"]

_MAX_LINE = 1 << 20  # an SSE line longer than this is not a usage line: dropped


class UsageScan:
    """Reads ``usage`` out of an SSE reply as it streams, chunk by chunk.

    Only ``message_start`` and ``message_delta`` lines are decoded (the rest is scanned for
    those two names in C and skipped), so it costs next to nothing per chunk.
    ``input_tokens`` counts cache reads and writes too; ``output_tokens`` is the last
    (cumulative) count. Both stay ``None`` if the reply carried no usage.
    """

    __slots__ = ("_tail", "input_tokens", "output_tokens")

    def __init__(self) -> None:
        self._tail = b""
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None

    @property
    def seen(self) -> bool:
        return self.input_tokens is not None or self.output_tokens is not None

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk if self._tail else chunk
        end = data.rfind(b"\n")
        if end < 0:
            self._tail = data if len(data) <= _MAX_LINE else b""
            return
        self._tail = data[end + 1 :] if len(data) - end - 1 <= _MAX_LINE else b""
        if b'"message_start"' not in data and b'"message_delta"' not in data:
            return
        for line in data[:end].split(b"\n"):
            if line.startswith(b"data:") and (
                b'"message_start"' in line[:80] or b'"message_delta"' in line[:80]
            ):
                self._line(line[5:])

    def _line(self, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        usage: Any = None
        if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
            usage = event["message"].get("usage")
        elif event.get("type") == "message_delta":
            usage = event.get("usage")
        if not isinstance(usage, dict):
            return
        inputs = [
            usage.get(k)
            for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        counted = [v for v in inputs if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        if counted:
            self.input_tokens = sum(counted)
        out = usage.get("output_tokens")
        if isinstance(out, int) and not isinstance(out, bool) and out >= 0:
            self.output_tokens = out
