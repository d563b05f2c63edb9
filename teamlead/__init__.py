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

from ._version import __version__
from .agents import default_agents, render_roster
from .clock import SYSTEM_CLOCK, Clock, FakeClock, SystemClock
from .coordinator import (
    Coordinator,
    QueryFn,
    build_resume_prompt,
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
from .inbox import (
    ConsumeResult,
    InboxEntry,
    InboxRead,
    InboxWait,
    InboxWaitPolicy,
    TeammateMessage,
    consume_inbox,
    read_inbox,
    wait_for_inbox,
)
from .policy import TRANSIENT_STATUSES, Policy, RetryPolicy
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
from .team import Team, TeamConfig, TeamMember, claude_config_dir, find_team
from .tracker import TaskInfo, Tracker, parse_message
from .transcript import find_subagent_transcript, last_assistant_text

__all__ = [
    "DEFAULT_MAX_AGENTS_PER_TURN",
    "DEFAULT_MAX_CONCURRENT_AGENTS",
    "EVENT_VERSION",
    "SYSTEM_CLOCK",
    "TRANSIENT_STATUSES",
    "BudgetExceeded",
    "Clock",
    "ConsumeResult",
    "Coordinator",
    "FakeClock",
    "FallbackUsed",
    "Finished",
    "InboxCollected",
    "InboxEntry",
    "InboxError",
    "InboxRead",
    "InboxWait",
    "InboxWaitPolicy",
    "Policy",
    "QueryFn",
    "ResumeError",
    "ResumeFailed",
    "Resuming",
    "RetryPolicy",
    "SetupError",
    "Strategy",
    "StrategyMeta",
    "SystemClock",
    "TaskDisposition",
    "TaskInfo",
    "Team",
    "TeamConfig",
    "TeamMember",
    "TeammateMessage",
    "TeamleadError",
    "TeamleadEvent",
    "Tracker",
    "UsageError",
    "WaitingForTeam",
    "__version__",
    "apply_strategy",
    "build_resume_prompt",
    "claude_config_dir",
    "consume_inbox",
    "default_agents",
    "default_values",
    "find_subagent_transcript",
    "find_team",
    "last_assistant_text",
    "list_strategies",
    "load_strategy",
    "parse_message",
    "prepare_options",
    "query",
    "read_inbox",
    "receive_all",
    "resume_session",
    "render_roster",
    "wait_for_inbox",
]
