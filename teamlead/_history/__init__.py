"""The run history: every finished run kept as a versioned record, for ``teamlead ps
--all``, ``teamlead show`` and ``teamlead view``.

A record: :mod:`.record`; the store of records within its bounds, where it is and whether
it is kept: :mod:`.store`. Others import from here.
"""

from __future__ import annotations

from .record import INLINE_RESULT_CHARS, AgentRecord, RunRecord
from .store import History, history_dir, history_wanted

__all__ = [
    "INLINE_RESULT_CHARS",
    "AgentRecord",
    "History",
    "RunRecord",
    "history_dir",
    "history_wanted",
]
