"""The coordinator's machinery, private: one run state, one job per module.

The public entry points in :mod:`teamlead.coordinator` create a run's
:class:`~teamlead._run.state.RunState` and hand it to a driver of :mod:`.loop`, which
drives the flow one way:

- :mod:`.state` is the run: mode, options, clock, deadline, tracker, what was collected,
  ledger, spawn gate and relay hookup;
- :mod:`.round` reads one round's messages within the deadline and, when the stream
  ends, returns the round's :class:`~teamlead._run.outcome.RoundOutcome`;
- :mod:`.retry` decides, as a pure function, whether a failed resume is tried again;
- :mod:`.collect` waits for the team, reads the inbox and falls back to summaries and
  transcripts, returning deliveries;
- :mod:`.resume_prompt` quotes the deliveries into the prompt that resumes the lead;
- :mod:`.wrapup` answers with the finished work when the deadline comes near;
- :mod:`.ledger` turns the final state into one :class:`~teamlead.events.Finished`;
- :mod:`.relayed` hooks a run up to the request relay.

The spawn gate itself is a package of its own, :mod:`teamlead._gate`.
"""
