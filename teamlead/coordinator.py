"""The auto-resume coordinator: one final, honest answer that used every result.

:func:`query` wraps any streaming query generator (``claude_agent_sdk.query`` by default).
It yields every SDK message unchanged while a :class:`~teamlead.tracker.Tracker` follows
the session. When the stream ends (normally, or with ``ResultError``/``ProcessError``)
it decides what is still outstanding:

- a started task that is not terminal;
- a terminal task whose result no successful lead turn came after;
- a teammate of the session's team that has not reported;
- unread entries in the team-lead inbox.

It waits for teammates on the inbox (event-driven, with polling retries), falls back to
task summaries and transcripts, and re-queries with ``resume=session_id`` with the
collected results quoted as data. It loops until nothing is outstanding or the
:class:`~teamlead.policy.Policy` stops it, and ends with a :class:`Finished` event.

:func:`receive_all` does the same for ``ClaudeSDKClient`` users: it keeps receiving past
the first result until the background work is absorbed, then resumes on the same client.

This module holds only the entry points; the machinery (rounds, collection, retries,
the resume prompt, the final ledger) is private, in :mod:`teamlead._run`.

Example:
    >>> async for item in teamlead.query("Audit the repo", options=opts):  # doctest: +SKIP
    ...     if isinstance(item, teamlead.Finished):
    ...         print(item.status, item.result)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import AbstractAsyncContextManager, aclosing
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions

from ._otel import trace_run
from ._run.relayed import hookup_for, relayed_stream, with_relay_events
from ._run.relayed import relay_for as _relay_for
from ._run.session import Client, Coordinator, QueryFn, prepare_options
from .clock import SYSTEM_CLOCK, Clock
from .policy import Policy

__all__ = [
    "QueryFn",
    "prepare_options",
    "query",
    "receive_all",
    "relay_for",
    "resume_session",
]


def _coordinator(
    options: ClaudeAgentOptions | None,
    query_fn: QueryFn | None,
    policy: Policy | None,
    clock: Clock,
) -> Coordinator:
    """A coordinator wrapping ``query_fn``, by default ``claude_agent_sdk.query``."""
    if query_fn is None:
        from claude_agent_sdk import query as sdk_query

        query_fn = sdk_query
    return Coordinator(
        options=options or ClaudeAgentOptions(),
        query_fn=query_fn,
        policy=policy or Policy(),
        clock=clock,
    )


async def query(
    prompt: str,
    options: ClaudeAgentOptions | None = None,
    *,
    query_fn: QueryFn | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> AsyncIterator[Any]:
    """Drop-in for ``claude_agent_sdk.query`` that never loses a delegated result.

    Yields every SDK message unchanged, plus teamlead events
    (:class:`~teamlead.events.WaitingForTeam`, :class:`~teamlead.events.InboxCollected`,
    :class:`~teamlead.events.FallbackUsed`, :class:`~teamlead.events.Resuming`,
    :class:`~teamlead.events.ResumeFailed`), and ends with one
    :class:`~teamlead.events.Finished`.

    Args:
        prompt: the user's prompt.
        options: SDK options; ``resume`` is set by teamlead for its own rounds.
        query_fn: the generator to wrap (default ``claude_agent_sdk.query``).
        policy: limits and waits (default :class:`~teamlead.policy.Policy()`).
        clock: time source (tests inject a fake).

    Every API request of the run (the lead's and its subagents') goes through the process's
    request relay unless ``Policy(relay=False)`` or ``TEAMLEAD_NO_RELAY=1``; its
    ``rate_limited``/``concurrency_changed`` events come in the stream, and ``Finished.relay``
    sums them up (see the README's "Rate limits").

    Example:
        >>> async for item in teamlead.query("Review the auth module", options=opts):
        ...     if isinstance(item, teamlead.Finished):  # doctest: +SKIP
        ...         print(item.status, item.result)
    """
    policy = policy or Policy()

    def start(relayed_options: ClaudeAgentOptions) -> AsyncGenerator[Any, None]:
        return _coordinator(relayed_options, query_fn, policy, clock).run(prompt)

    stream = relayed_stream(options or ClaudeAgentOptions(), policy, start, prompt=prompt)
    async with aclosing(stream) as items:
        async for item in items:
            yield item


async def receive_all(
    client: Client,
    *,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> AsyncIterator[Any]:
    """For ``ClaudeSDKClient``: receive past the first result until the work is absorbed.

    Call it instead of ``client.receive_response()`` after ``client.query(...)``. It keeps
    reading while background tasks run, resumes on the same client when results were not
    used (a failed synthesis turn, teammates' inbox reports), and ends with
    :class:`~teamlead.events.Finished`.

    Note: the client's CLI was started with the client's options, so set
    ``CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS`` there (see :func:`prepare_options`), and start
    the client inside :func:`relay_for` for its requests to be paced; then the relay's
    events come in this stream and ``Finished.relay`` carries its summary.

    Example:
        >>> async with ClaudeSDKClient(options) as client:  # doctest: +SKIP
        ...     await client.query("Audit the repo")
        ...     async for item in teamlead.receive_all(client):
        ...         print(item)
    """
    coordinator = Coordinator(options=client.options, policy=policy or Policy(), clock=clock)
    hookup = hookup_for(client.options)
    items = coordinator.run_client(client)
    items = with_relay_events(items, hookup) if hookup else items
    run_trace = trace_run("client", client.options)
    if run_trace is not None:  # telemetry on; the client's CLI started without our TRACEPARENT
        run_trace.attach(hookup.run if hookup else None)
        items = run_trace.observe(items)
    async with aclosing(items) as stream:
        async for item in stream:
            yield item


def relay_for(
    options: ClaudeAgentOptions | None = None, policy: Policy | None = None
) -> AbstractAsyncContextManager[ClaudeAgentOptions]:
    """Client options whose CLI goes through the request relay while the block runs.

    The client's CLI lives as long as the user's ``ClaudeSDKClient``, so the relay it talks
    to must too: open the client inside this block. The options come back with
    ``ANTHROPIC_BASE_URL`` at the process's shared relay (unchanged when the relay is off,
    not applicable, or failed to start: then with a one-line warning). Leaving the block
    while the client still runs cuts its connection to the model.

    Example:
        >>> opts = teamlead.prepare_options(opts, teamlead.Policy(), client=True)  # doctest: +SKIP
        >>> async with teamlead.relay_for(opts) as opts:  # doctest: +SKIP
        ...     async with ClaudeSDKClient(opts) as client:
        ...         await client.query("Audit the repo")
        ...         async for item in teamlead.receive_all(client):
        ...             print(item)
    """
    return _relay_for(options, policy)


async def resume_session(
    session_id: str,
    options: ClaudeAgentOptions | None = None,
    *,
    query_fn: QueryFn | None = None,
    policy: Policy | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> AsyncIterator[Any]:
    """Collect and resume a session that ended with work outstanding.

    Rebuilds the session's state from its transcript under the Claude config dir (from
    ``options.env`` or the environment), gathers unused task results and inbox reports,
    and resumes the lead, exactly like the tail of :func:`query`.

    Raises:
        UsageError: the session does not exist under the config dir.

    Example:
        >>> async for item in teamlead.resume_session("3d33...", options):  # doctest: +SKIP
        ...     ...
    """
    policy = policy or Policy()

    def start(relayed_options: ClaudeAgentOptions) -> AsyncGenerator[Any, None]:
        return _coordinator(relayed_options, query_fn, policy, clock).resume(session_id)

    stream = relayed_stream(
        options or ClaudeAgentOptions(), policy, start, mode="resume", session_id=session_id
    )
    async with aclosing(stream) as items:
        async for item in items:
            yield item
