"""teamlead: never lose a subagent's or teammate's result with the Claude Agent SDK.

The public API is what this module re-exports (``__all__``), the names users call and what
they get back most:

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
- :class:`Policy` bounds a run (resumes, deadline, budgets); its parts, the spawn gate's
  limits among them, are in :mod:`teamlead.policy`.
- The stream yields :data:`StreamItem` (the SDK's messages and teamlead's events), a
  union an app can ``match`` on, ending with :class:`Finished`. The events and every type
  they carry (the rows, the relay's summary, the ``Literal`` codes) are in
  :mod:`teamlead.events`; every error derives from :class:`TeamleadError`.
- Strategy prompts (:func:`load_strategy`, :func:`apply_strategy`) make the lead delegate;
  the subagents they delegate to are :func:`default_agents` (the roster, rendered into a
  prompt by :func:`render_roster`).
- :class:`RunControl` changes a running run's agent cap and subagent model
  (:meth:`~RunControl.amend`: a field left out keeps its value, ``None`` restores the
  run's own, a value sets it; a no-op is refused with :class:`AmendRefused`, each
  change is a :class:`~teamlead.events.RunAmended` event; the ``UNSET`` marker and its
  type are in :mod:`teamlead.control`).
- :class:`Governor` adapts concurrency to rate limits (its knobs,
  :class:`~teamlead.governor.GovernorPolicy`, are in :mod:`teamlead.governor`);
  :func:`relay_for` keeps the request relay that paces a ``ClaudeSDKClient``'s API requests
  up while the client lives.
- :func:`open_session_store` opens a session store (Redis, SQLite) from a URL, for
  ``ClaudeAgentOptions.session_store``: a run's transcripts kept off the machine, so another
  machine can resume it (:mod:`teamlead.sessions` holds the stores and their listing); a
  store that fails is a :class:`SessionStoreError`.
- :class:`ProcessState` is what the runs of one process share (the relays, governors,
  spawn cap and live runs): one is made as the process's default; pass your own
  (``process=``) to keep runs apart.

Public modules group the rest: :mod:`teamlead.events`, :mod:`teamlead.policy`,
:mod:`teamlead.governor`, :mod:`teamlead.control`, :mod:`teamlead.sessions`,
:mod:`teamlead.experiment` (specs, trial records, statistics, reports) and
:mod:`teamlead.testing` (the real CLI offline against a scripted model, and
:class:`~teamlead.testing.FakeClock` for virtual time). Everything else (the run state,
the spawn gate, Claude Code's on-disk formats, the parsing helpers) is private and may
change without notice.
"""

from __future__ import annotations

import typing

from . import _door

# The public names, each imported from where it lives (``X as X`` tells type checkers it is
# re-exported): this block is their one list, ``__all__`` among them. Importing ``teamlead``
# loads none of them (the SDK alone takes over a second): the front door (:mod:`._door`)
# imports a name on first use, so ``python -m teamlead`` takes its stop signals from its
# first instant (see :mod:`teamlead._cli.startup`).
if typing.TYPE_CHECKING:
    from ._version import __version__ as __version__
    from .clock import Clock as Clock
    from .control import RunControl as RunControl
    from .coordinator import ClientRun as ClientRun
    from .coordinator import ProcessState as ProcessState
    from .coordinator import QueryFn as QueryFn
    from .coordinator import StreamItem as StreamItem
    from .coordinator import allow_workflows as allow_workflows
    from .coordinator import prepare_options as prepare_options
    from .coordinator import query as query
    from .coordinator import receive_all as receive_all
    from .coordinator import relay_for as relay_for
    from .coordinator import resume_session as resume_session
    from .coordinator import run as run
    from .errors import AmendRefused as AmendRefused
    from .errors import BudgetExceeded as BudgetExceeded
    from .errors import GovernorCleared as GovernorCleared
    from .errors import InboxError as InboxError
    from .errors import ResumeError as ResumeError
    from .errors import SessionStoreError as SessionStoreError
    from .errors import SetupError as SetupError
    from .errors import TeamleadError as TeamleadError
    from .errors import UsageError as UsageError
    from .events import Finished as Finished
    from .governor import Governor as Governor
    from .policy import Policy as Policy
    from .prompts import Strategy as Strategy
    from .prompts import apply_strategy as apply_strategy
    from .prompts import list_strategies as list_strategies
    from .prompts import load_strategy as load_strategy
    from .roster import default_agents as default_agents
    from .roster import render_roster as render_roster
    from .sessions import open_session_store as open_session_store


__getattr__ = _door.lazy_exports(__name__)


def __dir__() -> list[str]:
    return sorted({*globals(), *typing.cast("list[str]", __getattr__("__all__"))})
