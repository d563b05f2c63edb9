"""The run context: one coordinated run's parts, each owning its data, in one object.

The entry points create a :class:`RunState` with :func:`new_run`; the drivers in
:mod:`.loop` hand it to each round, to collection and to the wrap-up, which ask the part
they need (the parts are listed on :class:`RunState`).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import uuid
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import anyio
from claude_agent_sdk import ClaudeAgentOptions

from .._claude import claude_config_dir, is_session_id
from .._gate import Admission
from .._private import write_private
from .._procs import stop_marked
from .._redact import redact
from .._sessions import RunStore
from ..clock import Clock
from ..control import ControlLease, RunControl
from ..policy import Policy
from ..tracker import TrackedEvent, Tracker
from .agents import RunAgents
from .bus import EventBus
from .delivered import Delivered
from .options import MAX_MESSAGE_BYTES, RUN_MARK_VAR, SUBAGENT_MODEL_VAR, Wiring, build_options
from .permissions import PermissionRequests
from .process import ProcessState, default_process_state
from .relayed import RelayHookup, relayed
from .stop import RunStop

__all__ = [
    "MAX_MESSAGE_BYTES",
    "RUN_MARK_VAR",
    "SUBAGENT_MODEL_VAR",
    "Asked",
    "Deadline",
    "Mode",
    "Outside",
    "RunState",
    "Streamed",
    "new_run",
    "prepare_options",
]

#: ``query``: every round is a new CLI process started by the query function;
#: ``client``: every round runs on one connected ``ClaudeSDKClient``.
Mode: TypeAlias = Literal["query", "client"]

_STDERR_LINES = 20
_END_TIMEOUT_S = 10.0  # stopping a run's leftover CLI: SIGTERM, then SIGKILL after 2 s


@dataclass
class Asked:
    """What the run was asked and with what policy; only this part changes its options.

    Attributes:
        mode: ``query`` or ``client``.
        user_options: the caller's options, as given (never changed).
        wiring: the run's pieces of its CLI options (the gate's hook, the run mark, the
            stderr tail, the relay's base URL, the trace context, ...).
        options: the options every round starts from: :attr:`user_options` with
            :attr:`wiring`, built by :func:`~.options.build_options` (only :meth:`wire`
            changes them).
        policy: the run's limits.
        config_dir: the Claude config dir holding the team, inbox and transcripts.
        mark: the value of :data:`RUN_MARK_VAR` in this run's CLI environment.
        store: the run's session store, when its options name one.
        turns: the turns the run has begun: a query run has one, a client's run one per
            :func:`teamlead.receive_all` (the same CLI process; the run's state goes on,
            and each turn's ``Finished`` reports the run so far).
        held: the run outlives each of its turns (a :class:`~teamlead.ClientRun`'s, for
            its client's life): :meth:`RunState.close` lets go of nothing until it is
            released.
    """

    mode: Mode
    user_options: ClaudeAgentOptions
    wiring: Wiring
    options: ClaudeAgentOptions
    policy: Policy
    config_dir: Path
    mark: str
    store: RunStore | None = None
    turns: int = 0
    held: bool = False

    def wire(self, **pieces: Any) -> None:
        """Add ``pieces`` (fields of :class:`~.options.Wiring`) to the run's wiring, and build
        :attr:`options` again from the user's (a piece known only once the run goes: the
        relay's base URL, the trace context, a session store given up)."""
        self.wiring = dataclasses.replace(self.wiring, **pieces)
        self.options = build_options(self.user_options, self.policy, self.wiring)

    def options_with(self, **pieces: Any) -> ClaudeAgentOptions:
        """The options :meth:`wire` would make with ``pieces``, the run's left as they are."""
        wiring = dataclasses.replace(self.wiring, **pieces)
        return build_options(self.user_options, self.policy, wiring)

    async def open_store(self) -> None:
        """Check the session store answers; one that does not is told in one warning line,
        and the run goes on without it (the SDK mirrors nothing: nothing to fail later)."""
        if self.store is not None and not await self.store.check():
            self.store = None
            self.wire(store_view=None, store_off=True)


@dataclass
class Streamed:
    """What the run makes of its CLI's stream; only the run's rounds feed it.

    Attributes:
        tracker: follows the session.
        cli_state: the CLI's last ``session_state_changed`` state.
        stderr_tail: the CLI's last stderr lines, quoted when its stream breaks.
        last_parsed: the message the run fed last (:meth:`RunState.feed`), with its events.
        cli_gone: the last round's stream ran to its end and closed in time, so its CLI
            has exited (what it started is no longer the run's to stop): the run's end
            has nothing to look for.
    """

    tracker: Tracker = field(default_factory=Tracker)
    cli_state: str | None = None
    stderr_tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=_STDERR_LINES)
    )
    last_parsed: tuple[object, list[TrackedEvent]] | None = field(default=None, repr=False)
    cli_gone: bool = False

    def heard(self, line: str) -> None:
        """One stderr line of the CLI: kept in :attr:`stderr_tail` unless it is blank."""
        if line.strip():
            self.stderr_tail.append(line.strip())

    def events_of(self, item: object) -> list[TrackedEvent]:
        """What the run made of ``item``, the message it fed last (see :meth:`RunState.feed`); no
        events for anything else. Every layer over the rounds passes each item on at once,
        so a reader of the stream asks here instead of parsing it again."""
        parsed = self.last_parsed
        return list(parsed[1]) if parsed is not None and parsed[0] is item else []


@dataclass
class Outside:
    """What reaches the run from outside while it goes.

    Attributes:
        permissions: the permission requests waiting for an answer (``can_use_tool``'s).
        control: the user's live control of the run, if any.
        lease: the run's hold on :attr:`control`, while it serves the run.
    """

    permissions: PermissionRequests
    control: RunControl | None = None
    lease: ControlLease | None = None

    def use_control(
        self, control: RunControl, admission: Admission, *, on_loop: bool = False
    ) -> None:
        """Let ``control`` amend ``admission`` (its cap and subagent model) from now on, each
        amend published as a :class:`~teamlead.events.RunAmended` event; ``on_loop``: called
        on the run's running event loop (``teamlead amend`` on a run started without a
        control), which its amends are applied through from now.

        Raises:
            AmendRefused: ``control`` already serves a run that has not ended.
        """
        self.lease = control.serve(admission)
        self.control = control
        if on_loop:
            self.lease.bind_loop()


@dataclass
class Deadline:
    """The run's deadline and the wrap-up point before it, on the run's clock.

    Attributes:
        at: the deadline (a ``clock.monotonic()`` value, set by
            :meth:`RunState.start_clock`).
        wrap_at: the wrap-up point: the deadline less the gate's reserve.
    """

    at: float = 0.0
    wrap_at: float = 0.0


@dataclass
class RunState:
    """The context of one coordinated run: its parts, each owning its data (see the module
    docstring); a step asks the part it needs.

    Attributes:
        ask: what the run was asked and with what policy (:class:`Asked`).
        stream: what it makes of its CLI's stream (:class:`Streamed`).
        admission: who lets the run's agents start (:attr:`Admission.gated`: with the
            spawn gate on).
        agents: every agent of the run: the relay's ledger, the timeout and budgets.
        outside: what reaches the run from outside (:class:`Outside`).
        events: the run's event bus: every producer of the run publishes to it, every
            consumer subscribes (:mod:`.bus`).
        delivered: what it collected and delivered, and its result's ledger.
        relay: the run's relay hookup once attached (:meth:`attach_relay`; its ``run`` is
            ``None`` when the run goes direct).
        clock: the time source of every deadline, wait and backoff.
        deadline: the run's deadline and wrap-up point.
        stop: a stop asked from outside (a signal to the command): the run ends at once,
            with its ``Finished``.
        process: what the run shares with the process's other runs.
    """

    ask: Asked
    stream: Streamed
    admission: Admission
    agents: RunAgents
    outside: Outside
    events: EventBus
    clock: Clock
    delivered: Delivered = field(default_factory=Delivered)
    relay: RelayHookup | None = None
    deadline: Deadline = field(default_factory=Deadline)
    stop: RunStop = field(default_factory=RunStop)
    process: ProcessState = field(default_factory=default_process_state)

    def start_clock(self) -> None:
        """Set the run's deadline from now, and the wrap-up point the gate reserves."""
        policy = self.ask.policy
        self.deadline.at = self.clock.monotonic() + policy.deadline_s
        self.deadline.wrap_at = self.deadline.at
        if self.outside.lease is not None:
            self.outside.lease.bind_loop()
        if self.admission.gated:
            self.admission.set_deadline(policy.deadline_s)
            self.deadline.wrap_at -= policy.spawn.reserve_for(policy.deadline_s)

    def open_relay(self) -> AbstractAsyncContextManager[RelayHookup]:
        """The run's hookup to its process's relay (see :func:`.relayed.relayed`), opened on
        its options: the relay counts and governs its requests per agent in its agent
        ledger, and holds them while its pause is on. :meth:`attach_relay` it once entered."""
        return relayed(
            self.ask.options,
            self.ask.policy,
            process=self.process,
            on_event=self.events.publish,
            agents=self.agents.book,
            pause=self.admission.pause,
            clock=self.clock,
        )

    def attach_relay(self, hookup: RelayHookup) -> None:
        """Send the run's requests through ``hookup``, from :meth:`open_relay` (the options
        get ``ANTHROPIC_BASE_URL`` at the relay, when it is up)."""
        self.relay = hookup
        self.ask.wire(relay_base_url=hookup.base_url)

    async def end(self) -> None:
        """The run's stream is closed, whichever way: in ``query`` mode any CLI process of
        the run still alive (its stream was closed from another task, say by the garbage
        collector, and the SDK could not stop it) is stopped by its mark, unless the last
        round's CLI is known to have exited (:attr:`Streamed.cli_gone`), then every slot is
        let go (:meth:`close`). A client's CLI is the client's own: it is left alone."""
        if self.ask.mode == "query" and not self.stream.cli_gone:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_END_TIMEOUT_S):
                await self.end_cli()
        self.close()

    async def end_cli(self) -> bool:
        """End the run's CLI process tree (by its mark; its agents end with it): whether it
        had a process to end."""
        return await anyio.to_thread.run_sync(stop_marked, RUN_MARK_VAR, self.ask.mark) > 0

    def close(self, reason: str = "the run is ending") -> None:
        """The run ends, whichever way (finished, raised, cancelled, closed early): let go
        of every slot it holds, in the process-wide spawn cap and in the agent ledger, and
        deny what still waits in the gate with ``reason``. Idempotent; its CLI processes
        have been stopped by then (the stream was closed). A held run's turn ends here
        (:attr:`Asked.held`), not the run: nothing is let go."""
        if self.ask.held:
            return
        self.stop.done()
        if self.outside.lease is not None:
            self.outside.lease.end()
        self.admission.end(reason)
        self.agents.close()

    def spill(self, key: str, text: str) -> str | None:
        """Write the whole ``text`` of the result ``key`` (secrets redacted) to a file of its
        own in the session's run directory (mode 0600), for a prompt that quotes only its
        head and tail; returns the path, or ``None`` if it could not be written."""
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in key)[:80]
        session = self.stream.tracker.session_id
        if session is None or not is_session_id(session):  # the stream's text: no path in it
            session = self.ask.mark
        folder = self.ask.config_dir / "teamlead-runs" / session
        path = folder / f"result-{safe}.txt"
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private(path, redact(text))
        except OSError:
            return None
        return str(path)

    def feed(self, message: Any) -> list[TrackedEvent]:
        """Fold one SDK message (typed or raw) into the stream's tracker and the agents'
        book; returns its events (the gate is fed after the message is yielded, see
        :class:`.round.Round`)."""
        events = self.stream.tracker.feed(message)
        self.stream.last_parsed = (message, events)
        self.agents.observe(events, self.stream.tracker)
        return events

    async def sync_journals(self) -> None:
        """Mirror the run's workflow journals into the session store (their new lines)."""
        store = self.ask.store
        if store is None:
            return
        tracker = self.stream.tracker
        runs = [
            t.workflow.run_id
            for t in tracker.tasks.values()
            if t.workflow is not None and t.workflow.run_id
        ]
        await store.sync_journals(tracker.session_id, runs)

    @property
    def watches_journals(self) -> bool:
        """A workflow of the run is still open and there is a store to mirror it to."""
        return self.ask.store is not None and any(
            t.workflow is not None and not t.terminal for t in self.stream.tracker.tasks.values()
        )


def prepare_options(
    options: ClaudeAgentOptions | None, policy: Policy, *, client: bool = False
) -> ClaudeAgentOptions:
    """A copy of ``options`` whose CLI will not stop background agents before our deadline.

    With ``client=True`` the CLI also reports its session state, so the client helper knows
    exactly when the CLI is idle rather than guessing from results (queued notification
    turns can follow a result). User-set values of either variable are kept. The SDK's
    largest message becomes :data:`MAX_MESSAGE_BYTES` unless ``max_buffer_size`` is set.
    (The first rule of :func:`~.options.build_options`, with nothing of a run wired in.)

    Args:
        options: the caller's options (default: ``ClaudeAgentOptions()``); never mutated.
        policy: the run's policy (``deadline_s`` sets the wait ceiling).
        client: the options are for a ``ClaudeSDKClient``.
    """
    return build_options(options, policy, Wiring(client=client))


def _starting_model(options: ClaudeAgentOptions, policy: Policy) -> str | None:
    """The subagent model the run starts with: the policy's, else the user's variable."""
    if policy.spawn.subagent_model is not None:
        return policy.spawn.subagent_model
    raw = options.env.get(SUBAGENT_MODEL_VAR, os.environ.get(SUBAGENT_MODEL_VAR))
    return raw.strip() if isinstance(raw, str) and raw.strip() else None


def new_run(
    mode: Mode,
    options: ClaudeAgentOptions | None,
    policy: Policy,
    clock: Clock,
    *,
    gated: bool = True,
    verbatim: bool = False,
    control: RunControl | None = None,
    process: ProcessState | None = None,
) -> RunState:
    """A fresh run state in ``mode`` (``query`` or ``client``): its admission (the gate)
    built on ``clock``, and its options built from the caller's ``options`` (never mutated)
    with the run's pieces (:func:`~.options.build_options`).

    Args:
        gated: build the spawn gate when ``policy.spawn`` is on. ``False`` for a client
            that connected without it (its hooks were fixed then).
        verbatim: the strict drop-in's run: its CLI gets ``options`` as given (no gate,
            no stderr tail, no run mark, the user's own session store), and the run keeps
            no status of its own in the store.
        control: the user's live control of the run (its cap and subagent model).
        process: what the run shares with the process's other runs (default: the
            process's own :class:`~.process.ProcessState`).

    Raises:
        AmendRefused: ``control`` already serves a run that has not ended.
    """
    shared = process or default_process_state()
    user = options or ClaudeAgentOptions()
    bus = EventBus()
    admission = Admission(
        policy,
        clock,
        cap=shared.spawn_cap,
        env=user.env,
        starting_model=_starting_model(user, policy),
        gated=gated and not verbatim,
        publish=bus.publish,
    )
    permissions = PermissionRequests(clock)
    mark = uuid.uuid4().hex
    config_dir = claude_config_dir({**os.environ, **dict(user.env)})
    store = None
    if user.session_store is not None and not verbatim:
        store = RunStore(user.session_store, config_dir=config_dir, cwd=user.cwd)
    stream = Streamed(tracker=Tracker(clock=clock))
    wiring = Wiring(
        client=mode == "client",
        hook=admission.hook_matcher(),
        workflow_cap=admission.limit,
        subagent_model=policy.spawn.subagent_model,
        permissions=permissions.wrap,  # the run lists what waits for an answer
        store_view=store.view if store is not None else None,
        run_mark=mark,
        stderr=stream.heard,
        verbatim=verbatim,
    )
    ask = Asked(
        mode=mode,
        user_options=user,
        wiring=wiring,
        options=build_options(user, policy, wiring),
        policy=policy,
        config_dir=config_dir,
        mark=mark,
        store=store,
    )
    state = RunState(
        ask=ask,
        stream=stream,
        admission=admission,
        agents=RunAgents(policy, clock, admission, publish=bus.publish),
        outside=Outside(permissions=permissions),
        events=bus,
        clock=clock,
        process=shared,
        stop=RunStop(on_request=admission.stopped),
    )
    if control is not None:
        state.outside.use_control(control, admission)
    state.delivered.ledger.one_process = mode == "client"
    shared.enter(state.stop)
    return state
