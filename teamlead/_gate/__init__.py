"""Admission, private: which agents of a run may start, when, and on which model.

One module owns it: :mod:`.admission`, whose :class:`~teamlead._gate.admission.Admission`
(one per run) decides for every kind of agent. Agent and Workflow calls are decided in a
PreToolUse hook (the CLI runs a call only once the hook returns); a workflow agent, which
fires no hook, at its first request to the relay. One concept per module:

- :mod:`.admission`: :class:`~teamlead._gate.admission.Admission`, the run's one owner of
  admission: the gate, the workflow agents' admission, the subagent model; what the run,
  the relay's ledger and :class:`~teamlead.RunControl` ask and amend;
- :mod:`.gate`: :class:`~teamlead._gate.gate.SpawnGate`, the hook and its decisions (the
  pools, the cap, stagger, budget, depth), and the workflow agents' slots;
- :mod:`.calls`: one Agent call (the live ``Call`` and its frozen ``SpawnRecord``, one set
  of fields) and the ``Finished.tasks`` entries for calls that never ran;
- :mod:`.slots`: FIFO slots with hand-off, and the process-wide ``SpawnCap``;
- :mod:`.turns`: which model message a call came in (the per-message limit);
- :mod:`.reasons`: the deny reasons the model reads;
- :mod:`.hook`: the hook's deny output and merging the hook into the user's options;
- :mod:`.stream`: what the SDK stream says about the gate's calls (slots freed);
- :mod:`.prompt_limits`: the limits a strategy prompt states, from the ones the gate holds.

Nothing here knows the session: :mod:`teamlead._run` builds the admission into its run
state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .admission import Admission
    from .calls import SpawnRecord, call_dispositions, with_invalid_calls
    from .slots import SpawnCap

__all__ = [
    "Admission",
    "SpawnCap",
    "SpawnRecord",
    "call_dispositions",
    "with_invalid_calls",
]

__getattr__ = lazy_exports(__name__)
