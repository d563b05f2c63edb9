"""The coordinator's machinery, private: one job per module.

The public entry points in :mod:`teamlead.coordinator` hand a run to
:class:`~teamlead._run.session.Coordinator`, which drives the flow one way:

- :mod:`.round` reads one round's messages within the deadline and, when the stream
  ends, exposes the round's outcome;
- :mod:`.retry` decides, as a pure function, whether a failed resume is tried again;
- :mod:`.collect` waits for the team, reads the inbox and falls back to summaries and
  transcripts, producing deliveries;
- :mod:`.resume_prompt` quotes the deliveries into the prompt that resumes the lead;
- :mod:`.ledger` turns the final state into one :class:`~teamlead.events.Finished`;
- :mod:`.gate` (with ``gate_*``) queues, budgets, staggers and denies Agent calls while
  the fan-out runs, through a PreToolUse hook.
"""
