"""What the runs of one process share, in one object: :class:`ProcessState`.

The process's default state is made on first use (:func:`default_process_state`); a test,
or an app that wants two separate sets, passes its own (``process=``). Two states meet only
where sharing is the point: an account outside the process (machine, Redis) and a registry
directory in common.

Example:
    >>> shared = ProcessState(spawn_limit=4, registry=False)
    >>> shared.spawn_cap.limit, shared.live_runs, shared.registers
    (4, 0, False)
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .._gate import SpawnCap
from .._governor import Account
from .._history import History, history_wanted
from .stop import RunStop

if TYPE_CHECKING:  # the relay's server stack is imported when a run first uses it: a
    from .._otel import TelemetrySource
    from .._relay import RelayPool  # broken one must cost the relay only, not a run

__all__ = ["ProcessState", "default_process_state"]


class ProcessState:
    """The relays, governors, account, spawn cap, live runs, registry and telemetry a
    process's runs share.

    Args:
        spawn_limit: the most subagents running at once over every run of this state
            (default, and never above: the CLI's own cap,
            ``CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS``).
        account: the account of this state's governors for every ``--limits`` value but a
            Redis URL (a Ray worker passes the experiment's ``RayAccount``; see
            :class:`~teamlead._relay.RelayPool`); ``None``: each value opens its own.
        env: the environment the CLI's subagent cap, the runtime directory and
            ``TEAMLEAD_NO_REGISTRY`` are read from (default: this process's, read when used).
        runtime_dir: where this state's runs register (default: ``TEAMLEAD_RUNTIME_DIR``,
            else ``$XDG_RUNTIME_DIR/teamlead``, else a folder of the user's in the temp dir).
        registry: ``False``: this state's runs do not register (nobody can see or steer
            them from outside); ``TEAMLEAD_NO_REGISTRY=1`` does the same.
        history: ``False``: this state's runs are not kept in the run history
            (:mod:`teamlead._history`); ``TEAMLEAD_NO_HISTORY=1`` does the same.

    Attributes:
        registers: whether this state's runs may register (``registry``); the registry
            itself, and ``TEAMLEAD_NO_REGISTRY``, are the control plane's
            (:func:`teamlead._control.process_registry`).
        runtime_dir: where this state's runs register, when given (else the environment
            says).
        env: the environment this state reads its variables from (``None``: the process's).
    """

    def __init__(
        self,
        *,
        spawn_limit: int | None = None,
        account: Account | None = None,
        env: Mapping[str, str] | None = None,
        runtime_dir: str | os.PathLike[str] | None = None,
        registry: bool = True,
        history: bool = True,
    ) -> None:
        self._account = account
        self._relays: RelayPool | None = None
        self._spawn_limit = spawn_limit
        self.env = env
        self._spawn_cap: SpawnCap | None = None
        self._runs: weakref.WeakSet[RunStop] = weakref.WeakSet()
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None else None
        self.registers = registry
        self._keeping = history
        self._history: History | None = None
        self._telemetry: TelemetrySource | None = None

    @property
    def telemetry(self) -> TelemetrySource:
        """Where this state's runs get their tracer and meter (the app's providers, or the
        ones built from the ``OTEL_*`` variables once), made on first use."""
        if self._telemetry is None:
            from .._otel import TelemetrySource

            self._telemetry = TelemetrySource()
        return self._telemetry

    @property
    def relays(self) -> RelayPool:
        """The relays per upstream and account, and the governors per account (made on
        first use; raises ``ImportError`` when the relay's server stack is broken)."""
        if self._relays is None:
            from .._relay import RelayPool

            self._relays = RelayPool(account=self._account)
        return self._relays

    @property
    def spawn_cap(self) -> SpawnCap:
        """The cap on subagents every run of this state shares, made on first use."""
        if self._spawn_cap is None:
            self._spawn_cap = SpawnCap(self._spawn_limit, env=self.env)
        return self._spawn_cap

    @property
    def history(self) -> History | None:
        """The run history this state's runs are kept in when they finish (made on first
        use), or ``None`` when they are not (``history=False``, :meth:`keep_history`
        ``(False)`` or ``TEAMLEAD_NO_HISTORY``). Its directory is read at each record."""
        if not self._keeping or not history_wanted(self.env):
            return None
        if self._history is None:
            self._history = History(env=self.env)
        return self._history

    def keep_history(self, keep: bool) -> None:
        """Keep this state's runs in the run history from now on, or not (``teamlead ask
        --no-history``)."""
        self._keeping = keep

    def use_account(self, account: Account | None) -> None:
        """The governors made from now on use ``account`` (see the ``account`` argument)."""
        self._account = account
        if self._relays is not None:
            self._relays.process_account = account

    def enter(self, stop: RunStop) -> None:
        """A run starts: a stop of every run (:meth:`stop_every_run`) reaches it, until it
        ends (:meth:`RunStop.done`)."""
        self._runs.add(stop)
        stop.on_done = self._runs.discard

    @property
    def live_runs(self) -> int:
        """Runs of this state that have not ended."""
        return len(self._runs)

    def stop_every_run(self, reason: str) -> int:
        """Ask every live run of this state to stop; returns how many were asked."""
        runs = list(self._runs)
        for run in runs:
            run.request(reason)
        return len(runs)


_default: ProcessState | None = None


def default_process_state() -> ProcessState:
    """The process's own :class:`ProcessState`, made on first use: what every run uses
    unless it is given one."""
    global _default
    if _default is None:
        _default = ProcessState()
    return _default
