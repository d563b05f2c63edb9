"""The coordinator's machinery, private: one run context, one job per module.

:mod:`teamlead.coordinator` creates a run's :class:`~teamlead._run.state.RunState` and
hands it to a driver of :mod:`.loop`; docs/layout.md names each module's job. The
outside-control plane (:mod:`teamlead._control`), admission (:mod:`teamlead._gate`) and
the relay's meter (:mod:`teamlead._metering`) are wings of their own.
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
    from .relayed import relay_wanted as relay_wanted
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
