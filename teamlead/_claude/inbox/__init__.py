"""The team-lead inbox: read it, wait on it, consume it, as Claude Code does.

Teammates report to the lead by appending to ``<config>/teams/<team>/inboxes/team-lead.json``
(a JSON array). An interactive lead polls that file; a lead driven through the SDK never
does, so results pile up unseen. This package is the missing reader, one module per job
(``model``: the entry and message types; ``read``, ``wait``, ``consume``; ``lock``: the
writers' lock protocol):

- :func:`read_inbox` parses the file tolerantly (bad entries are skipped with a warning,
  unknown fields kept) and decodes each entry into a :class:`TeammateMessage`. A 0-byte
  (or whitespace-only) file is an empty inbox, not a broken one: writers create it with
  ``wx`` before writing ``[]``. Truncated JSON is ``invalid``, with a warning.
- :func:`wait_for_inbox` waits, woken by change events (inotify on Linux, else
  ``watchfiles``) with a polling fallback, until a condition on the inbox holds or the
  wait runs out.
- :func:`consume_inbox` removes delivered entries under the writers' lock, the way Claude
  Code's own reader does, so the inbox does not grow without bound.

Inboxes larger than :data:`DEFAULT_MAX_INBOX_BYTES` (8 MiB) are not parsed: the read
reports a warning and the file is left alone. A healthy inbox holds a handful of entries,
each capped by Claude Code at a few KiB; 8 MiB is thousands of reports.

Example:
    >>> team = find_team(session_id)                                  # doctest: +SKIP
    >>> done = await wait_for_inbox(                                  # doctest: +SKIP
    ...     team.lead_inbox, until=lambda r: any(m.is_report for m in r.messages))
    >>> keys = [m.key for m in done.read.messages]                    # doctest: +SKIP
    >>> await consume_inbox(team.lead_inbox, keys)                    # doctest: +SKIP
"""

from .consume import consume_inbox
from .read import read_inbox
from .wait import wait_for_inbox

__all__ = ["consume_inbox", "read_inbox", "wait_for_inbox"]
