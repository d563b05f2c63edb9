"""The team-lead inbox: read it, wait on it, consume it, as Claude Code does.

Teammates report to the lead by appending to ``<config>/teams/<team>/inboxes/team-lead.json``
(a JSON array). An interactive lead polls that file; a lead driven through the SDK never
does, so results pile up unseen. This package is the missing reader, one module per job:
``model``, ``read``, ``wait``, ``consume`` and ``lock`` (the writers' lock protocol).

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
