"""Admission, private: which agents and requests of a run may start or go on, when, and on
which model.

One concept per module:

- :mod:`.admission`: :class:`~teamlead._gate.admission.Admission`, one per run, the one
  owner of admission: its spawn gate, with the pause, the timeout and budgets and the
  subagent model; what the hook, the relay's ledger and :class:`~teamlead.RunControl` ask;
- :mod:`.gate`: :class:`~teamlead._gate.gate.SpawnGate`, the gate an admission is: the
  PreToolUse hook on Agent and Workflow calls and its decisions (the pools, the cap,
  stagger, budget, depth), the workflow agents' slots, and what the stream says of calls;
- :mod:`.pause`: the run's pause (``teamlead pause``), which the gate and the relay hold on;
- :mod:`.limits`: the run's limits at the relay: its own ceilings on its requests in
  flight, the per-agent timeout and the budgets;
- :mod:`.calls`: one Agent call (the live ``Call`` and its frozen ``SpawnRecord``, one set
  of fields) and the ``Finished.tasks`` entries for calls that never ran;
- :mod:`.slots`: FIFO slots with hand-off, and the process-wide ``SpawnCap``;
- :mod:`.turns`: which model message a call came in (the per-message limit);
- :mod:`.reasons`: the deny reasons the model reads, and why a workflow agent is refused;
- :mod:`.prompt_limits`: the limits a strategy prompt states, from the ones the gate holds.

Nothing here knows the session or the relay: :mod:`teamlead._run` builds the admission into
its run state, and the relay's ledger (:mod:`teamlead._metering`) asks it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .admission import Admission as Admission
    from .calls import SpawnRecord as SpawnRecord
    from .calls import call_dispositions as call_dispositions
    from .calls import with_invalid_calls as with_invalid_calls
    from .limits import AgentLimits as AgentLimits
    from .limits import ExhaustReason as ExhaustReason
    from .limits import NoPlace as NoPlace
    from .limits import RunLimits as RunLimits
    from .pause import Pause as Pause
    from .slots import SpawnCap as SpawnCap

__getattr__ = lazy_exports(__name__)
