"""The auto-resume coordinator's entry points: one final, honest answer that used every result.

:func:`run` (with teamlead's events), :func:`query` (the strict drop-in for
``claude_agent_sdk.query``), :func:`receive_all` on a :class:`ClientRun` (for a
``ClaudeSDKClient``) and :func:`resume_session` each create the run's state and hand it to
a driver; the machinery is private, in :mod:`teamlead._run`.

Example:
    >>> async for item in teamlead.run("Audit the repo", options=opts):  # doctest: +SKIP
    ...     if isinstance(item, teamlead.Finished):
    ...         print(item.status, item.result)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from typing import Any, TypeAlias

import claude_agent_sdk
from claude_agent_sdk import ClaudeAgentOptions, Message, Transport

from ._control.registered import registered
from ._otel import trace_run
from ._run import (
    Client,
    ProcessState,
    QueryFn,
    RelayHookup,
    RunState,
    RunStream,
    SdkRounds,
    allow_workflows,
    new_run,
    prepare_options,
    relay_for,
    run_client,
    run_query,
    run_resume,
    sdk_view,
    with_run_events,
)
from .clock import SYSTEM_CLOCK, Clock
from .control import RunControl
from .events import Finished, TeamleadEvent
from .policy import MAX_SECONDS, Policy

__all__ = [
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
]

#: What a run's stream yields: every SDK message as the query function gave it, and
#: teamlead's own events (:data:`~teamlead.events.TeamleadEvent`), ending with one
#: :class:`~teamlead.events.Finished`. Match on it::
#:
#:     async for item in teamlead.run(prompt, options):
#:         match item:
#:             case AssistantMessage(): ...
#:             case SpawnDecided(outcome="queued", position=n): ...
#:             case teamlead.Finished(status=status): ...
#:
#: (A scripted ``query_fn`` in a test may yield raw dicts; they come through unchanged.)
StreamItem: TypeAlias = Message | TeamleadEvent


async def _relayed_run(
    state: RunState,
    start: Callable[[RunState], AsyncGenerator[Any, None]],
    *,
    mode: str = "query",
    prompt: str | None = None,
    session_id: str | None = None,
) -> AsyncGenerator[Any, None]:
    """The stream ``start`` makes from ``state``, with the run hooked up to the relay.

    A ``query``-mode run opens its hookup here, before ``start`` runs (its options then
    point at the relay); a ``client`` run's CLI is already connected, through its
    :class:`ClientRun`'s hookup, if any. The run's events come in the stream as they are
    published (:func:`~teamlead._run.bus.with_run_events`); with telemetry on, its spans
    are made from this stream (``mode``, ``prompt`` and ``session_id`` describe the run).
    ``Finished`` comes last, once the run has let go of everything (its stream ended, it
    left the relay): an app that stops reading at ``Finished`` leaves nothing to the event
    loop's generator finaliser, which may run too late to finish it.
    """
    finished: Finished | None = None
    client = mode == "client"
    try:
        async with nullcontext(state.relay) if client else state.open_relay() as hookup:
            if hookup is not None and not client:
                state.attach_relay(hookup)
            run_trace = trace_run(
                mode,
                state.ask.options,
                state.stream,
                source=state.process.telemetry,
                prompt=prompt,
                session_id=session_id,
            )
            if run_trace is not None:
                run_trace.attach(hookup.run if hookup is not None else None)
                if not client:
                    state.ask.wire(trace_env=run_trace.trace_env())
            items = with_run_events(start(state), state.events)
            if run_trace is not None:
                items = run_trace.observe(items)
            try:
                async with aclosing(items) as stream:
                    async for item in stream:
                        if isinstance(item, Finished):
                            finished = item
                        else:
                            yield item
            finally:  # the stream is closed: a query run's CLI is stopped, then its slots freed
                await state.end()
    finally:  # also when the relay's hookup failed to open or to close; a ClientRun's run
        state.close()  # is held for the client's next turns, until its block ends
    if finished is not None:
        if state.ask.store is not None:  # how the run ended, for `teamlead sessions`
            await state.ask.store.put_status(finished)
        yield finished


async def query(
    *,
    prompt: str | AsyncIterable[dict[str, Any]],
    options: ClaudeAgentOptions | None = None,
    transport: Transport | None = None,
) -> AsyncIterator[Message]:
    """The strict drop-in for ``claude_agent_sdk.query``: its arguments, its messages, its
    exceptions, and an answer that used every delegated result.

    The CLI gets ``options`` as given. When the stream ends with work outstanding
    (background agents, teammates, unread inbox reports, results the lead never used),
    teamlead waits for it, collects it and resumes the session with it (a new CLI process
    on the same session, ``resume=session_id``), as :func:`run` does. The app sees only
    the SDK's own message types: every round's messages, except the last
    ``ResultMessage`` of a round teamlead goes on from, which is held back and dropped once
    the next round brings its own; the last ``ResultMessage`` is the final answer. The
    spawn gate, the request relay and teamlead's events need options of teamlead's making:
    they are :func:`run`'s (see docs/library.md, "What differs from the SDK").

    Args:
        prompt: a string, or an async iterable of the SDK's message dicts.
        options: the SDK's options (default ``ClaudeAgentOptions()``); teamlead's resume
            rounds add ``resume`` to them.
        transport: a custom transport for the first round (a transport is connected once:
            a resume round starts the CLI ``options`` name, as the SDK does without one).

    Raises:
        CLINotFoundError, CLIConnectionError, ProcessError, ResultError: as
            ``claude_agent_sdk.query`` raises them, from the run's last round, after its
            messages (and after teamlead retried or resumed what it could).
        OSError: the transport's own, likewise.

    Example:
        >>> async for message in teamlead.query(prompt="Audit the repo"):  # doctest: +SKIP
        ...     if isinstance(message, ResultMessage):
        ...         print(message.result)
    """
    rounds = SdkRounds(transport)
    stream = _query_mode_stream(
        lambda run: run_query(run, rounds, prompt),
        options,
        Policy(relay=False, deadline_s=MAX_SECONDS),
        prompt=prompt if isinstance(prompt, str) else None,
        verbatim=True,
    )
    async with aclosing(sdk_view(stream, rounds)) as messages:
        async for message in messages:
            yield message


async def run(
    prompt: str | AsyncIterable[dict[str, Any]],
    options: ClaudeAgentOptions | None = None,
    *,
    query_fn: QueryFn | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    control: RunControl | None = None,
    process: ProcessState | None = None,
) -> AsyncIterator[StreamItem]:
    """A run that never loses a delegated result, with teamlead's own events.

    :func:`query` is the strict drop-in; this is the same run with all of teamlead: the
    spawn gate, the request relay, live control, and its events. Yields every SDK message
    unchanged, plus teamlead events
    (:class:`~teamlead.events.WaitingForTeam`, :class:`~teamlead.events.InboxCollected`,
    :class:`~teamlead.events.FallbackUsed`, :class:`~teamlead.events.Resuming`,
    :class:`~teamlead.events.ResumeFailed`), and ends with one
    :class:`~teamlead.events.Finished`.

    Args:
        prompt: the user's prompt (a string, or an async iterable of messages as the SDK
            takes it).
        options: SDK options; ``resume`` is set by teamlead for its own rounds.
        query_fn: the generator to wrap (default ``claude_agent_sdk.query``).
        policy: limits and waits (default :class:`~teamlead.policy.Policy()`).
        clock: time source (tests inject a fake).
        control: a :class:`~teamlead.control.RunControl` that changes the run's agent cap
            and subagent model while it goes (its amends are
            :class:`~teamlead.events.RunAmended` events in the stream).
        process: what the run shares with the process's other runs (relays, governors,
            the spawn cap; a signal's stop): default the process's own
            :class:`~teamlead.ProcessState`. Pass one of your own to keep runs apart.

    Raises:
        AmendRefused: ``control`` already serves another run that has not ended.

    While it goes, the run is registered in the user's runtime directory, so ``teamlead
    ps`` lists it and ``teamlead stop``, ``pause``, ``unpause``, ``amend`` and ``watch``
    reach it (see the README's "Runs you can see and steer"); ``ProcessState(registry=
    False)`` or ``TEAMLEAD_NO_REGISTRY=1`` leaves it out.

    Every API request of the run (the lead's and its subagents') goes through the process's
    request relay unless ``Policy(relay=False)`` or ``TEAMLEAD_NO_RELAY=1``; its
    ``rate_limited``/``concurrency_changed`` events come in the stream, and ``Finished.relay``
    sums them up (see the docs' "Rate limits", docs/rate-limits.md).

    Example:
        >>> async for item in teamlead.run("Review the auth module", options=opts):
        ...     if isinstance(item, teamlead.Finished):  # doctest: +SKIP
        ...         print(item.status, item.result)
    """
    stream = run_stream(
        prompt,
        options,
        query_fn=query_fn,
        policy=policy,
        clock=clock,
        control=control,
        process=process,
    )
    async with aclosing(stream) as items:
        async for item in items:
            yield item


def run_stream(
    prompt: str | AsyncIterable[dict[str, Any]],
    options: ClaudeAgentOptions | None = None,
    *,
    query_fn: QueryFn | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    control: RunControl | None = None,
    process: ProcessState | None = None,
) -> RunStream:
    """:func:`run`'s run as a :class:`~teamlead._run.stream.RunStream`: the same items,
    and the run's own parse of them, for teamlead's readers of the stream (the CLI, the
    experiment runner). Takes :func:`run`'s arguments."""
    fn = query_fn or claude_agent_sdk.query  # looked up now, not at import
    text = prompt if isinstance(prompt, str) else None
    world = (options, policy, clock, control, process)
    return _query_mode_stream(lambda run: run_query(run, fn, prompt), *world, prompt=text)


def _query_mode_stream(
    start: Callable[[RunState], AsyncGenerator[Any, None]],
    options: ClaudeAgentOptions | None,
    policy: Policy | None,
    clock: Clock = SYSTEM_CLOCK,
    control: RunControl | None = None,
    process: ProcessState | None = None,
    *,
    mode: str = "query",
    prompt: str | None = None,
    session_id: str | None = None,
    verbatim: bool = False,
) -> RunStream:
    """The stream of a ``query``-mode run that ``start`` drives (``mode`` ``query`` or
    ``resume`` for its spans): its state made when the stream is first read, the relay,
    telemetry and the registry around it (``verbatim``: the drop-in's, with the user's
    options as given)."""

    def make() -> RunState:
        world = policy or Policy()
        return new_run(
            "query", options, world, clock, verbatim=verbatim, control=control, process=process
        )

    def items(state: RunState) -> AsyncGenerator[Any, None]:
        run = _relayed_run(state, start, mode=mode, prompt=prompt, session_id=session_id)
        return registered(state, run, mode=mode, prompt=prompt)

    return RunStream(make, items)


class ClientRun:
    """The state of one ``ClaudeSDKClient``'s run, made before the client connects, for
    every turn of the client.

    A client's options (its hooks, its environment) are fixed when it connects, so the
    run's state is made first: the options come back with the CLI's background-wait
    ceiling, its session-state events, the spawn gate's hook (on the injected clock) and,
    inside ``async with``, the request relay's base URL. Connect the client with
    :attr:`options` inside the block, and pass the run to :func:`receive_all` after each
    ``client.query(...)``: every turn is a turn of this one run, so the gate (its slots,
    its spawn budget, the agents still running), the relay and a ``control`` serve them
    all, and each turn's stream ends with a :class:`~teamlead.events.Finished` that reports
    the run so far (every turn's agents).

    Args:
        options: the client's options (default ``ClaudeAgentOptions()``); never mutated.
        policy: limits and waits (default :class:`~teamlead.policy.Policy()`).
        clock: time source of the run's deadline, waits and the gate (tests inject a fake).
        control: a :class:`~teamlead.control.RunControl` for the run's live cap and
            subagent model (it serves the run from here until it ends).
        process: as for :func:`run`.

    Raises:
        AmendRefused: ``control`` already serves another run that has not ended.

    Example:
        >>> async with teamlead.ClientRun(options, policy) as run:  # doctest: +SKIP
        ...     async with ClaudeSDKClient(run.options) as client:
        ...         for prompt in ("Audit the repo", "Now fix what you found"):
        ...             await client.query(prompt)
        ...             async for item in teamlead.receive_all(client, run):
        ...                 print(item)
    """

    def __init__(
        self,
        options: ClaudeAgentOptions | None = None,
        policy: Policy | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        control: RunControl | None = None,
        process: ProcessState | None = None,
    ) -> None:
        self._state = new_run(
            "client", options, policy or Policy(), clock, control=control, process=process
        )
        self._state.ask.held = True  # each turn's end leaves the run to the next turn
        self._relay: AbstractAsyncContextManager[RelayHookup] | None = None

    @property
    def options(self) -> ClaudeAgentOptions:
        """The options to connect the client with (through the relay inside the block)."""
        return self._state.ask.options

    @property
    def policy(self) -> Policy:
        """The run's policy."""
        return self._state.ask.policy

    async def __aenter__(self) -> ClientRun:
        """Start the request relay for the client's life (direct when off or failing)."""
        context = self._state.open_relay()
        self._state.attach_relay(await context.__aenter__())
        self._relay = context
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Leave the relay; a client still running loses its connection to the model."""
        context, self._relay = self._relay, None
        try:
            if context is not None:
                await context.__aexit__(None, None, None)
        finally:
            self._state.ask.held = False
            self._state.close("the client's run ended")


async def receive_all(
    client: Client,
    run: ClientRun | None = None,
    *,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    process: ProcessState | None = None,
) -> AsyncIterator[StreamItem]:
    """For ``ClaudeSDKClient``: receive past the first result until the work is absorbed.

    Call it instead of ``client.receive_response()`` after ``client.query(...)``. It keeps
    reading while background tasks run, resumes on the same client when results were not
    used (a failed synthesis turn, teammates' inbox reports), and ends with
    :class:`~teamlead.events.Finished`.

    Args:
        client: the connected client whose query was sent.
        run: the :class:`ClientRun` the client was connected with: its spawn gate, relay
            and clock serve this turn, as every other turn of the client (its policy and
            clock win over ``policy`` and ``clock``). Without it the turn has no spawn gate
            and no relay events: the client's hooks were fixed when it connected.
        policy: limits and waits when there is no ``run``.
        clock: time source when there is no ``run``.
        process: whose live runs it joins when there is no ``run`` (default: the
            process's own :class:`~teamlead.ProcessState`).

    Note: without a ``run``, build the client's options with :func:`prepare_options`
    (``client=True``), so its CLI does not stop background agents before the deadline.

    Example:
        >>> async with teamlead.ClientRun(options) as run:  # doctest: +SKIP
        ...     async with ClaudeSDKClient(run.options) as client:
        ...         await client.query("Audit the repo")
        ...         async for item in teamlead.receive_all(client, run):
        ...             print(item)
    """
    if run is not None:
        state = run._state  # the client's run, for this turn as for the others
    else:
        state = new_run(
            "client", client.options, policy or Policy(), clock, gated=False, process=process
        )
    items = _relayed_run(state, lambda run: run_client(run, client), mode="client")
    async with aclosing(registered(state, items)) as stream:  # seen from outside (teamlead ps)
        async for item in stream:
            yield item


async def resume_session(
    session_id: str,
    options: ClaudeAgentOptions | None = None,
    *,
    query_fn: QueryFn | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    control: RunControl | None = None,
    process: ProcessState | None = None,
) -> AsyncIterator[StreamItem]:
    """Collect and resume a session that ended with work outstanding.

    Rebuilds the session's state from its transcript under the Claude config dir (from
    ``options.env`` or the environment), gathers unused task results and inbox reports,
    and resumes the lead, exactly like the tail of :func:`query`. With
    ``options.session_store`` (see :mod:`teamlead.sessions`), a session this machine lacks
    (it ran on another machine) or holds an older copy of is first brought from the store
    to the config dir; run it in the directory the session ran in.

    Args:
        session_id: the session to finish.
        options: SDK options for the resumed rounds.
        query_fn: as for :func:`run`.
        policy: as for :func:`run`.
        clock: as for :func:`run`.
        control: as for :func:`run`.
        process: as for :func:`run`.

    Raises:
        UsageError: the session does not exist under the config dir, nor in the store.
        AmendRefused: ``control`` already serves another run that has not ended.

    Example:
        >>> async for item in teamlead.resume_session("3d33...", options):  # doctest: +SKIP
        ...     ...
    """
    stream = resume_stream(
        session_id,
        options,
        query_fn=query_fn,
        policy=policy,
        clock=clock,
        control=control,
        process=process,
    )
    async with aclosing(stream) as items:
        async for item in items:
            yield item


def resume_stream(
    session_id: str,
    options: ClaudeAgentOptions | None = None,
    *,
    query_fn: QueryFn | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    control: RunControl | None = None,
    process: ProcessState | None = None,
) -> RunStream:
    """:func:`resume_session`'s run as a :class:`~teamlead._run.stream.RunStream` (see
    :func:`run_stream`). Takes :func:`resume_session`'s arguments."""
    fn = query_fn or claude_agent_sdk.query  # looked up now, not at import
    world = (options, policy, clock, control, process)
    return _query_mode_stream(
        lambda run: run_resume(run, fn, session_id), *world, mode="resume", session_id=session_id
    )
