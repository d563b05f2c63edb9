"""teamlead: never lose a subagent's or teammate's result with the Claude Agent SDK.

The public API is what this module re-exports in ``__all__``:

- :func:`query` wraps ``claude_agent_sdk.query`` (or any streaming query generator): it
  waits for background agents and teammates, falls back to summaries and transcripts,
  and resumes the lead so it ends with one answer that used every result.
- :func:`receive_all` does the same for ``ClaudeSDKClient``.
- :class:`Policy` sets the limits; the events in :mod:`teamlead.events` report progress.
- Strategy prompts (:func:`load_strategy`, :func:`apply_strategy`) make the lead delegate.
- :class:`Governor` adapts concurrency to rate limits.
- :mod:`teamlead.testing` runs the real CLI offline against a scripted model.
"""

from __future__ import annotations

from ._claude.inbox import consume_inbox, read_inbox, wait_for_inbox
from ._claude.inbox.model import (
    DEFAULT_MAX_INBOX_BYTES,
    ConsumeResult,
    InboxEntry,
    InboxRead,
    InboxWait,
    MessageKind,
    TeammateMessage,
    decode_entry,
    entry_key,
)
from ._claude.session import load_session
from ._claude.team import (
    Team,
    TeamConfig,
    TeamMember,
    claude_config_dir,
    find_team,
    inbox_path,
    sanitize_agent_name,
    sanitize_team_name,
)
from ._claude.transcript import find_subagent_transcript, last_assistant_text
from ._version import __version__
from .agents import default_agents, render_roster
from .clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock
from .coordinator import (
    QueryFn,
    prepare_options,
    query,
    receive_all,
    resume_session,
)
from .errors import BudgetExceeded, InboxError, ResumeError, SetupError, TeamleadError, UsageError
from .events import (
    EVENT_VERSION,
    FallbackUsed,
    Finished,
    InboxCollected,
    ResumeFailed,
    Resuming,
    TaskDisposition,
    TeamleadEvent,
    WaitingForTeam,
)
from .experiment import (
    ExperimentSpec,
    Report,
    TrialKey,
    TrialRecord,
    TrialWriter,
    build_report,
    finished_keys,
    load_spec,
    read_records,
    render_markdown,
    write_report,
)
from .experiment.runner import RunSummary, run_experiment
from .governor import (
    BucketState,
    ChangeReason,
    ConcurrencyChanged,
    Governor,
    GovernorCleared,
    GovernorPolicy,
    Slot,
    bucket_key,
    parse_retry_after,
    retry_after_from_headers,
)
from .policy import TRANSIENT_STATUSES, InboxWaitPolicy, LockPolicy, Policy, RetryPolicy
from .prompts import (
    DEFAULT_MAX_AGENTS_PER_TURN,
    DEFAULT_MAX_CONCURRENT_AGENTS,
    Strategy,
    StrategyMeta,
    apply_strategy,
    default_values,
    list_strategies,
    load_strategy,
)
from .tracker import TaskInfo, Tracker, parse_message

__all__ = [
    "DEFAULT_MAX_AGENTS_PER_TURN",
    "DEFAULT_MAX_CONCURRENT_AGENTS",
    "DEFAULT_MAX_INBOX_BYTES",
    "EVENT_VERSION",
    "SYSTEM_CLOCK",
    "TRANSIENT_STATUSES",
    "BucketState",
    "BudgetExceeded",
    "ChangeReason",
    "Clock",
    "ConcurrencyChanged",
    "ConsumeResult",
    "ExperimentSpec",
    "FakeClock",
    "FallbackUsed",
    "Finished",
    "Governor",
    "GovernorCleared",
    "GovernorPolicy",
    "InboxCollected",
    "InboxEntry",
    "InboxError",
    "InboxRead",
    "InboxWait",
    "InboxWaitPolicy",
    "LockPolicy",
    "MessageKind",
    "Policy",
    "QueryFn",
    "Report",
    "ResumeError",
    "ResumeFailed",
    "Resuming",
    "RetryPolicy",
    "RunSummary",
    "SetupError",
    "Slot",
    "Strategy",
    "StrategyMeta",
    "SystemClock",
    "TaskDisposition",
    "TaskInfo",
    "Team",
    "TeamConfig",
    "TeamMember",
    "TeamleadError",
    "TeamleadEvent",
    "TeammateMessage",
    "Tracker",
    "TrialKey",
    "TrialRecord",
    "TrialWriter",
    "UsageError",
    "WaitingForTeam",
    "apply_strategy",
    "bucket_key",
    "build_report",
    "claude_config_dir",
    "consume_inbox",
    "decode_entry",
    "default_agents",
    "default_values",
    "entry_key",
    "find_subagent_transcript",
    "find_team",
    "finished_keys",
    "inbox_path",
    "last_assistant_text",
    "list_strategies",
    "load_session",
    "load_spec",
    "load_strategy",
    "parse_message",
    "parse_retry_after",
    "prepare_options",
    "query",
    "read_inbox",
    "read_records",
    "receive_all",
    "render_markdown",
    "render_roster",
    "resume_session",
    "retry_after_from_headers",
    "run_experiment",
    "sanitize_agent_name",
    "sanitize_team_name",
    "wait_for_inbox",
    "write_report",
    "__version__",
]
