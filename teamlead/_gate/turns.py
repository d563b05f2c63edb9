"""Which model message an Agent call came in, for the per-message spawn limit.

The hook input names no message (``prompt_id`` is shared by every message of one prompt),
so the turn comes from the tracker when it can: :meth:`Turns.note` maps tool_use ids to
the ``message.id`` of the assistant message, which the CLI streams just before it calls the
hooks. Without that, lead calls that arrive while another lead call is still in the hook,
or within ``gap_s`` after, count as one message (the hooks of one message start as its
tool_use blocks stream in; the next message needs a whole model round trip first).
Spawns by a subagent count per spawning agent.
"""

from __future__ import annotations

import math
from collections import Counter

__all__ = ["Turns"]


class Turns:
    """The per-message spawn counts of one gate.

    Args:
        gap_s: without a message id, lead calls that arrive while another is in the hook,
            or within this gap after, count as one message.
    """

    def __init__(self, gap_s: float) -> None:
        self._gap_s = max(0.0, gap_s)
        self._message_of: dict[str, str] = {}
        #: Calls admitted (or being admitted) from each turn; one that will not run is taken off.
        self.counts: Counter[str] = Counter()
        self._burst = 0
        self._burst_message: str | None = None
        self._pending = 0
        self._last = -math.inf

    def note(self, message_id: str, tool_use_ids: list[str]) -> None:
        """The tool_use ids of one model message (from the stream, just before the hooks)."""
        for tool_use_id in tool_use_ids:
            self._message_of[tool_use_id] = message_id

    def enter(self) -> None:
        """A lead call entered the hook."""
        self._pending += 1

    def leave(self, now: float | None) -> None:
        """A lead call left the hook (``now`` may be unknown after a clock fault)."""
        self._pending -= 1
        if now is not None:
            self._last = now

    def turn_of(self, tool_use_id: str, depth: int, parent: str | None, now: float) -> str:
        """The key of the message a call came in: its message id when the stream named it,
        else the current burst of lead calls (a subagent's: per spawning agent).

        Args:
            tool_use_id: the call's tool_use id.
            depth: 1 for the lead's calls.
            parent: the spawning agent's id, for nested calls.
            now: the clock's ``monotonic()`` reading.
        """
        hinted = self._message_of.get(tool_use_id)
        if depth > 1:
            return hinted or f"nested:{parent}"
        if hinted:
            if hinted != self._burst_message:
                self._burst += 1
                self._burst_message = hinted
            return hinted
        if self._pending <= 1 and now - self._last > self._gap_s:
            self._burst += 1
            self._burst_message = None
        return self._burst_message or f"burst-{self._burst}"
