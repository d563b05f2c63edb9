"""teamlead: never lose a subagent's or teammate's result with the Claude Agent SDK.

The public API is what this module re-exports in ``__all__``, the names users call:

- :func:`query` is the strict drop-in for ``claude_agent_sdk.query`` (its arguments, its
  messages, its exceptions): it waits for background agents and teammates, falls back to
  summaries and transcripts, and resumes the lead so the final ``ResultMessage`` is one
  answer that used every result. :func:`run` is the same run with all of teamlead (the
  spawn gate, the request relay, live control) and its events, ending with
  :class:`Finished`; it wraps any streaming query generator.
- :func:`receive_all` does the same for ``ClaudeSDKClient``, on the :class:`ClientRun`
  made before the client connects (its spawn gate, request relay and clock);
  :func:`resume_session` finishes a stopped session; :func:`prepare_options` sets the
  options a run needs; :func:`allow_workflows` lets the lead run ``Workflow`` scripts in
  the default permission mode.
- The policies users construct: :class:`Policy` with its parts :class:`RetryPolicy`,
  :class:`SpawnPolicy` (the spawn gate's limits), :class:`InboxWaitPolicy` and
  :class:`LockPolicy`, :class:`GovernorPolicy`, and :class:`LimitsPolicy` (the relay's
  ceilings and where its learnt limits are shared).
- The stream yields :data:`StreamItem` (the SDK's messages and teamlead's events), a
  union an app can ``match`` on. The events (:class:`Finished` and the others) report
  progress, with every type they carry: :class:`TaskDisposition`, :class:`RelaySummary`,
  :class:`BucketSummary` and the ``Literal`` codes (:data:`Status`, :data:`Disposition`,
  :data:`TaskState`, :data:`TaskKind`, :data:`RelayedAgentKind`, :data:`RequestRole`,
  :data:`FinishReason`, :data:`EndKind`,
  :data:`DenyCode`, :data:`ChangeReason`); every error derives from :class:`TeamleadError`.
- Strategy prompts (:func:`load_strategy`, :func:`apply_strategy`) make the lead delegate;
  the subagents they delegate to are :func:`default_agents` (the roster, rendered into a
  prompt by :func:`render_roster`).
- :class:`RunControl` changes a running run's agent cap and subagent model
  (:meth:`~RunControl.amend`: a field left out keeps its value, ``None`` restores the
  run's own, a value sets it; a no-op is refused with :class:`AmendRefused`, each
  change is a :class:`RunAmended` event; the ``UNSET`` marker and its type are in
  :mod:`teamlead.control`).
- :class:`Governor` adapts concurrency to rate limits; :func:`relay_for` keeps the request
  relay that paces a ``ClaudeSDKClient``'s API requests up while the client lives.
- :func:`open_session_store` opens a session store (Redis, SQLite) from a URL, for
  ``ClaudeAgentOptions.session_store``: a run's transcripts kept off the machine, so another
  machine can resume it (:mod:`teamlead.sessions` holds the stores and their listing); a
  store that fails is a :class:`SessionStoreError`.
- :class:`ProcessState` is what the runs of one process share (the relays, governors,
  spawn cap and live runs): one is made as the process's default; pass your own
  (``process=``) to keep runs apart.

Two subpackages hold the rest of the public API: :mod:`teamlead.experiment` (specs, trial
records, statistics, reports) and :mod:`teamlead.testing` (the real CLI offline against a
scripted model, and :class:`~teamlead.testing.FakeClock` for virtual time). Everything else
(the run state, the spawn gate, Claude Code's on-disk formats, the parsing helpers) is
private and may change without notice.
"""

from __future__ import annotations

import importlib
import typing

from ._version import __version__

if typing.TYPE_CHECKING:
    from .clock import Clock
    from .control import RunControl
    from .coordinator import (
        ClientRun,
        ProcessState,
        QueryFn,
        StreamItem,
        allow_workflows,
        prepare_options,
        query,
        receive_all,
        relay_for,
        resume_session,
        run,
    )
    from .errors import (
        AmendRefused,
        BudgetExceeded,
        GovernorCleared,
        InboxError,
        ResumeError,
        SessionStoreError,
        SetupError,
        TeamleadError,
        UsageError,
    )
    from .events import (
        AgentUsage,
        AmendField,
        BucketSummary,
        ChangeReason,
        ConcurrencyChanged,
        DenyCode,
        Disposition,
        EndKind,
        FallbackUsed,
        Finished,
        FinishReason,
        InboxCollected,
        RateLimited,
        RelayedAgentKind,
        RelaySummary,
        RequestRole,
        ResumeFailed,
        Resuming,
        RunAmended,
        SpawnAdmitted,
        SpawnDenied,
        SpawnQueued,
        SpawnRejected,
        Status,
        TaskDisposition,
        TaskKind,
        TaskState,
        TeamleadEvent,
        WaitingForTeam,
        WorkflowDenied,
    )
    from .governor import Governor, GovernorPolicy, bucket_key
    from .policy import InboxWaitPolicy, LimitsPolicy, LockPolicy, Policy, RetryPolicy, SpawnPolicy
    from .prompts import Strategy, apply_strategy, list_strategies, load_strategy
    from .roster import default_agents, render_roster
    from .sessions import open_session_store

#: Where each public name lives. Importing ``teamlead`` loads none of them (the SDK alone
#: takes over a second): a name is imported on first use, so ``python -m teamlead`` takes
#: its stop signals from its first instant (see :mod:`teamlead._cli.startup`).
_EXPORTS: dict[str, tuple[str, ...]] = {
    ".clock": ("Clock",),
    ".control": ("RunControl",),
    ".coordinator": (
        "ClientRun",
        "ProcessState",
        "QueryFn",
        "StreamItem",
        "allow_workflows",
        "prepare_options",
        "query",
        "receive_all",
        "relay_for",
        "resume_session",
        "run",
    ),
    ".errors": (
        "AmendRefused",
        "BudgetExceeded",
        "GovernorCleared",
        "InboxError",
        "ResumeError",
        "SessionStoreError",
        "SetupError",
        "TeamleadError",
        "UsageError",
    ),
    ".events": (
        "AgentUsage",
        "AmendField",
        "BucketSummary",
        "ChangeReason",
        "ConcurrencyChanged",
        "DenyCode",
        "Disposition",
        "EndKind",
        "FallbackUsed",
        "Finished",
        "FinishReason",
        "InboxCollected",
        "RateLimited",
        "RelayedAgentKind",
        "RequestRole",
        "RelaySummary",
        "ResumeFailed",
        "Resuming",
        "RunAmended",
        "SpawnAdmitted",
        "SpawnDenied",
        "SpawnQueued",
        "SpawnRejected",
        "Status",
        "TaskDisposition",
        "TaskKind",
        "TaskState",
        "TeamleadEvent",
        "WaitingForTeam",
        "WorkflowDenied",
    ),
    ".governor": (
        "Governor",
        "GovernorPolicy",
        "bucket_key",
    ),
    ".policy": (
        "InboxWaitPolicy",
        "LimitsPolicy",
        "LockPolicy",
        "Policy",
        "RetryPolicy",
        "SpawnPolicy",
    ),
    ".prompts": (
        "Strategy",
        "apply_strategy",
        "list_strategies",
        "load_strategy",
    ),
    ".roster": ("default_agents", "render_roster"),
    ".sessions": ("open_session_store",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = [
    "AgentUsage",
    "AmendField",
    "AmendRefused",
    "BucketSummary",
    "BudgetExceeded",
    "ChangeReason",
    "ClientRun",
    "ProcessState",
    "Clock",
    "ConcurrencyChanged",
    "DenyCode",
    "Disposition",
    "EndKind",
    "FallbackUsed",
    "FinishReason",
    "Finished",
    "Governor",
    "GovernorCleared",
    "GovernorPolicy",
    "InboxCollected",
    "InboxError",
    "InboxWaitPolicy",
    "LimitsPolicy",
    "LockPolicy",
    "Policy",
    "QueryFn",
    "StreamItem",
    "RateLimited",
    "RelayedAgentKind",
    "RelaySummary",
    "RequestRole",
    "ResumeError",
    "ResumeFailed",
    "Resuming",
    "RetryPolicy",
    "RunAmended",
    "RunControl",
    "SessionStoreError",
    "SetupError",
    "SpawnAdmitted",
    "SpawnDenied",
    "SpawnPolicy",
    "SpawnQueued",
    "SpawnRejected",
    "Status",
    "Strategy",
    "TaskDisposition",
    "TaskKind",
    "TaskState",
    "TeamleadError",
    "TeamleadEvent",
    "UsageError",
    "WaitingForTeam",
    "WorkflowDenied",
    "__version__",
    "allow_workflows",
    "apply_strategy",
    "bucket_key",
    "default_agents",
    "list_strategies",
    "load_strategy",
    "open_session_store",
    "prepare_options",
    "query",
    "receive_all",
    "relay_for",
    "render_roster",
    "resume_session",
    "run",
]


def __getattr__(name: str) -> object:
    """A public name, imported on first use (and kept, so the next use is a plain lookup)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
