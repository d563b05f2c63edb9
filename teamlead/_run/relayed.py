"""The request relay around one coordinated run: on by default, off with one switch.

:func:`relayed` puts the relay of the run's process in front of a run's CLI (the options
then carry its base URL), publishes the relay's events to the run's event bus and gives the
run its :class:`~teamlead.events.RelaySummary`. The relay is skipped, with one line saying
why, when it is turned off, does not apply (Bedrock, Vertex, a non-HTTP base URL) or cannot
start: the run then goes direct (docs/rate-limits.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING

from claude_agent_sdk import ClaudeAgentOptions

from ..clock import SYSTEM_CLOCK, Clock
from ..events import RelaySummary
from ..policy import Policy
from .options import with_base_url
from .process import ProcessState, default_process_state

if TYPE_CHECKING:
    from .._gate import Pause
    from .._metering import AgentBook
    from .._relay import RelayListener, RelayRun

__all__ = [
    "RelayHookup",
    "relay_for",
    "relay_wanted",
    "relayed",
]

log = logging.getLogger("teamlead.relay")

_TRUE = frozenset({"1", "true", "yes", "on"})
_OFF_VARIABLE = "TEAMLEAD_NO_RELAY"


def relay_wanted(policy: Policy, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the run should use the relay: ``policy.relay`` and no ``TEAMLEAD_NO_RELAY``."""
    env = os.environ if environ is None else environ
    return policy.relay and (env.get(_OFF_VARIABLE) or "").strip().lower() not in _TRUE


@dataclass
class RelayHookup:
    """One run's connection to the relay.

    Attributes:
        base_url: the relay's base URL, for the CLI's ``ANTHROPIC_BASE_URL`` (``None`` when
            the run goes direct).
        run: the relay run, or ``None`` when the run goes direct.
    """

    base_url: str | None = None
    run: RelayRun | None = None

    def summary(self) -> RelaySummary | None:
        """What the relay did for this run so far (``None`` when the run goes direct), for
        the run's :class:`~teamlead.events.Finished`."""
        return self.run.summary() if self.run is not None else None

    def in_user_terms(self, text: str) -> str:
        """``text`` naming the run's upstream where the CLI named the relay (its only
        gateway); unchanged when the run went direct, where the CLI names the right one."""
        return text if self.run is None else self.run.in_user_terms(text)


@dataclass(eq=False)  # one hookup per block: compared by identity
class relayed:
    """The run's hookup to its process's relay for the block (direct when off or failing).

    The run's relay events go to ``on_event`` (the run's event bus; ``None``: nowhere).
    ``process`` is whose relays the run uses (default: the process's own). ``agents`` is
    the run's agent ledger, which counts and governs its requests per agent at the relay,
    and ``pause`` its pause, which holds its new requests there while it is on. ``clock``
    is the run's: the relay's governor, its deadline, ceilings and pause read it.

    A class (named as :class:`contextlib.aclosing` is), not a generator-based context: a run
    abandoned mid-stream is finalised by the event loop's async-generator hook, which would
    also close a generator-based context on its own, a second time and from another task.
    """

    options: ClaudeAgentOptions
    policy: Policy
    _: KW_ONLY
    on_event: RelayListener | None = None
    process: ProcessState | None = None
    agents: AgentBook | None = None
    pause: Pause | None = None
    clock: Clock = SYSTEM_CLOCK
    _run: AbstractAsyncContextManager[RelayRun] | None = field(default=None, init=False)

    async def __aenter__(self) -> RelayHookup:
        if not relay_wanted(self.policy):
            return RelayHookup()
        try:  # imported here: a broken server stack must not break teamlead, only the relay
            from .._relay import RelayError, account_of, relay_applicable

            pool = (self.process or default_process_state()).relays
        except ImportError as exc:
            log.warning("request relay off, running direct: %s", _one_line(exc))
            return RelayHookup()
        env = {**os.environ, **dict(self.options.env)}
        applicable = relay_applicable(env)
        if not applicable.ok:
            log.warning("%s", applicable.note)
            return RelayHookup()
        context = pool.run(
            applicable.upstream,
            on_event=self.on_event,
            deadline_s=self.policy.deadline_s,
            limits=self.policy.limits,
            port=self.policy.relay_port,
            account=account_of(applicable.upstream, env),
            overload_hold_s=self.policy.overload_hold_s,
            agents=self.agents,
            pause=self.pause,
            clock=self.clock,
        )
        try:
            run = await context.__aenter__()
        except (RelayError, RuntimeError, OSError) as exc:
            # RuntimeError: no asyncio loop (the relay runs on asyncio only)
            log.warning("request relay off, running direct: %s", _one_line(exc))
            return RelayHookup()
        self._run = context
        return RelayHookup(run.base_url, run)

    async def __aexit__(self, *exc_info: object) -> None:
        context, self._run = self._run, None
        if context is not None:
            await context.__aexit__(None, None, None)


@asynccontextmanager
async def relay_for(
    options: ClaudeAgentOptions | None = None,
    policy: Policy | None = None,
    *,
    process: ProcessState | None = None,
) -> AsyncIterator[ClaudeAgentOptions]:
    """Client options whose CLI goes through the request relay while the block runs.

    The client's CLI lives as long as the user's ``ClaudeSDKClient``, so the relay it talks
    to must too: open the client inside this block. The options come back with
    ``ANTHROPIC_BASE_URL`` at the relay of ``process`` (default: the process's own
    :class:`~teamlead.ProcessState`) for the options' upstream and account (unchanged when
    the relay is off, not applicable, or failed to start: then with a one-line warning).
    Leaving the block while the client still runs cuts its connection to the model.
    :class:`~teamlead.ClientRun` does this and more (the spawn gate, the relay's events in
    :func:`~teamlead.receive_all`).

    Example:
        >>> async with teamlead.relay_for(opts) as opts:  # doctest: +SKIP
        ...     async with ClaudeSDKClient(opts) as client:
        ...         await client.query("Audit the repo")
        ...         async for item in teamlead.receive_all(client):
        ...             print(item)
    """
    base = options or ClaudeAgentOptions()
    async with relayed(base, policy or Policy(), process=process) as hookup:
        yield with_base_url(base, hookup.base_url)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
