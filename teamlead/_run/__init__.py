"""The coordinator's machinery, private: one run state, one job per module.

The public entry points in :mod:`teamlead.coordinator` create a run's
:class:`~teamlead._run.state.RunState` and hand it to a driver of :mod:`.loop`, which
drives the flow one way:

- :mod:`.state` is the run: mode, options, clock, deadline, tracker, what was collected,
  ledger, admission, the run's agents, relay hookup, pause and permission requests;
- :mod:`.options` builds the run's CLI options, the one place they are written;
- :mod:`.agents` is the run's agents (:class:`~teamlead._run.agents.RunAgents`): the
  relay's agent ledger joined with the stream's task events, and ``Finished.tasks``'s
  row per agent;
- :mod:`.round` reads one round's messages within the deadline and, when the stream
  ends, returns the round's :class:`~teamlead._run.outcome.RoundOutcome` (:mod:`.outcome`);
  :mod:`.readback` reads back from the transcript what a broken stream never showed;
- :mod:`.retry` decides, as a pure function, whether a failed resume is tried again;
- :mod:`.collect` waits for the team, reads the inbox and falls back to summaries and
  transcripts, returning deliveries;
- :mod:`.resume_prompt` quotes the deliveries into the prompt that resumes the lead;
- :mod:`.wrapup` answers with the finished work when the deadline comes near;
- :mod:`.ledger` records what the run's :class:`~teamlead.events.Finished` will report, and
  :mod:`.result` builds that one ``Finished`` and its rows, once, at the end;
- :mod:`.relayed` hooks a run up to the request relay; :mod:`.process` is what a
  process's runs share; :mod:`.stream` is a run's stream with the run's own parse of it;
- :mod:`.stop` is a stop asked from outside; :mod:`.workflow_permission` lets the lead run
  ``Workflow``; :mod:`.permissions` is the permission requests waiting for an answer.

The runs seen and steered from outside (the registry, the control endpoint, steering,
detail and the run log) are a wing of their own, :mod:`teamlead._control`, above this one.

Admission (the spawn gate and every other agent's) is a package of its own,
:mod:`teamlead._gate`, and the relay's per-agent meter another, :mod:`teamlead._metering`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

# Each name other wings use, imported from where it lives (``X as X`` re-exports it): this
# block is the door's one list of them, its ``__all__`` too (:mod:`teamlead._door`).
if TYPE_CHECKING:
    from .bus import with_run_events as with_run_events
    from .collect import row_text as row_text
    from .dropin import SdkRounds as SdkRounds
    from .dropin import sdk_view as sdk_view
    from .loop import Client as Client
    from .loop import QueryFn as QueryFn
    from .loop import run_client as run_client
    from .loop import run_query as run_query
    from .loop import run_resume as run_resume
    from .options import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES
    from .permissions import LabelFor as LabelFor
    from .permissions import WorkflowMeta as WorkflowMeta
    from .permissions import clip as clip
    from .permissions import describe_request as describe_request
    from .permissions import labels_from as labels_from
    from .permissions import workflow_meta as workflow_meta
    from .process import ProcessState as ProcessState
    from .process import default_process_state as default_process_state
    from .relayed import RelayHookup as RelayHookup
    from .relayed import relay_for as relay_for
    from .result import stopped_before_start as stopped_before_start
    from .round import answered_alone as answered_alone
    from .round import settled as settled
    from .state import RunState as RunState
    from .state import new_run as new_run
    from .state import prepare_options as prepare_options
    from .stream import RunStream as RunStream
    from .workflow_permission import WORKFLOW_DENIED as WORKFLOW_DENIED
    from .workflow_permission import WORKFLOW_TOOL as WORKFLOW_TOOL
    from .workflow_permission import allow_workflows as allow_workflows

__getattr__ = lazy_exports(__name__)
