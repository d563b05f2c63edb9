"""The spawn gate, private: queue, budget, stagger and deny Agent calls while a run fans out.

The gate is a PreToolUse hook on ``Agent``: the CLI runs an Agent call only once the hook
returns, so the gate decides there. One concept per module:

- :mod:`.gate`: :class:`~teamlead._gate.gate.SpawnGate`, the hook and its decisions;
- :mod:`.calls`: one Agent call (the live ``Call`` and its frozen ``SpawnRecord``, one set
  of fields) and the ``Finished.tasks`` entries for calls that never ran;
- :mod:`.slots`: FIFO slots with hand-off, and the process-wide ``SpawnCap``;
- :mod:`.turns`: which model message a call came in (the per-message limit);
- :mod:`.reasons`: the deny reasons the model reads;
- :mod:`.hook`: the hook's deny output and merging the hook into the user's options;
- :mod:`.stream`: what the SDK stream says about the gate's calls (slots freed);
- :mod:`.feed`: one gate per run, fed by the run's stream;
- :mod:`.prompt_limits`: the limits a strategy prompt states, from the ones the gate holds.

Nothing here knows the session: :mod:`teamlead._run` builds the gate into its run state.
"""
