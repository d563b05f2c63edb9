"""The relay's meter: one run's requests counted per agent, and governed by its admission
(private).

The relay attributes each request to one run (its path token) and one agent (the
``x-claude-code-agent-id`` header); the run's agents (:class:`teamlead._run.agents.RunAgents`)
join what is counted here with the stream's task events. One concept per module:

- :mod:`.book`: :class:`~teamlead._metering.book.AgentBook`, one run's agent ledger, which
  applies the run's admission (:class:`teamlead._gate.Admission`) to each request;
- :mod:`.count`: one agent's counters;
- :mod:`.request`: one request at the relay: whose it is (its session and agent ids, read
  as untrusted) and its ticket.

It sits below the relay and the run and above the admission and the governor's usage
reader, so the relay can call it on its request path and the run can read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .book import AgentBook as AgentBook
    from .book import AgentCount as AgentCount
    from .request import LEAD as LEAD

__getattr__ = lazy_exports(__name__)
