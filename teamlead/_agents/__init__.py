"""Every agent of a run accounted for and governed, whatever spawned it (private).

The relay attributes each request to one run (its path token) and one agent (the
``x-claude-code-agent-id`` header Claude Code sends for Agent-tool and workflow agents
alike), and the run joins that with its stream's task events. One concept per module:

- :mod:`.book`: :class:`~teamlead._agents.book.AgentBook`, one run's ledger (requests,
  tokens, 429s, times per agent) and the limits applied at the relay (the per-agent
  timeout, the token and request budgets); for the agents the hook cannot see it asks the
  run's admission (:class:`~teamlead._agents.count.AgentAdmission`, whose one owner is
  :class:`teamlead._gate.admission.Admission`);
- :mod:`.count`: one agent's counters, and what the ledger asks the run's admission;
- :mod:`.usage`: reading ``usage`` out of a streamed reply.

It sits below both the relay and the run (it imports only the clock and the events), so
the relay can call it on its request path and the run can read it, without either
importing the other.
"""
