"""The relay's meter: one run's requests counted and governed per agent (private).

The relay attributes each request to one run (its path token) and one agent (the
``x-claude-code-agent-id`` header Claude Code sends for Agent-tool and workflow agents
alike); the run's agents (:class:`teamlead._run.agents.RunAgents`) join what is counted here
with the stream's task events. One concept per module:

- :mod:`.book`: :class:`~teamlead._metering.book.AgentBook`, one run's agent ledger
  (requests, tokens, 429s, times per agent) and the limits applied at the relay (the
  per-agent timeout, the token and request budgets, the subagent model); for the agents the
  hook cannot see it asks the run's admission
  (:class:`~teamlead._metering.count.AgentAdmission`, whose one owner is
  :class:`teamlead._gate.admission.Admission`);
- :mod:`.count`: one agent's counters, and what the ledger asks the run's admission;
- :mod:`.request`: one request at the relay: whose it is (its session and agent ids, read
  as untrusted) and its ticket;
- :mod:`.usage`: reading ``usage`` out of a streamed reply;
- :mod:`.pause`: the run's pause (``teamlead pause``), which holds the run's new requests
  here and its new Agent calls in the spawn gate.

It sits below both the relay and the run (it imports only the clock and the events), so
the relay can call it on its request path and the run can read it, without either
importing the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .book import AgentBook, AgentCount, AgentLimits, ExhaustReason
    from .count import WorkflowRefusal
    from .pause import Pause
    from .request import LEAD

__all__ = [
    "AgentBook",
    "AgentCount",
    "AgentLimits",
    "ExhaustReason",
    "LEAD",
    "Pause",
    "WorkflowRefusal",
]

__getattr__ = lazy_exports(__name__)
