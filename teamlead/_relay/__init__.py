"""The loopback request relay: every API request of a run, paced by the governor.

The CLI's ``ANTHROPIC_BASE_URL`` points at a relay in teamlead's own process
(``127.0.0.1``, an ephemeral port, a random path prefix per process). The relay forwards
each request untouched to the user's upstream, but first takes a slot from the
:class:`~teamlead.governor.Governor` (a bucket per model; the lead's requests before its
subagents'), holds 429s and retries them once the Retry-After has passed, feeds 529s to the
governor as overload, and paces ahead of 429s from the ``anthropic-ratelimit-*`` headers:
each request's estimated input (:func:`.routing.classify`) waits until the token windows
cover it, and the ``usage`` of each answer (:mod:`.usage`) corrects the estimates.

Modules: :mod:`.routing` (what is accepted; model and role of a request), :mod:`.forward`
(one exchange with the upstream under a slot), :mod:`.app` (the ASGI app: stream back,
disconnects), :mod:`.protocol` (the client connections' bounds: prefix first, header limits,
timeouts, a connection cap), :mod:`.keepalive` (a held streaming request kept alive),
:mod:`.usage` (a streamed answer's usage), :mod:`.blame` (errors name the user's upstream,
never the relay), :mod:`.reach` (an upstream that cannot be reached ends a run at its
start), :mod:`.observe` (the seam for observers of its requests: telemetry),
:mod:`.stats` (counters, events), :mod:`.server` (uvicorn, lifecycle), :mod:`.shared` (the
pool of relays and governors a process shares between its runs, applicability). Each run's
requests are counted per agent by its ledger in :mod:`teamlead._metering` and admitted by
its admission (:mod:`teamlead._gate`: the pause, the run's own ceilings, the timeout and
budgets).

Example:
    >>> applicable = relay_applicable(os.environ)  # doctest: +SKIP
    >>> if applicable.ok:  # doctest: +SKIP
    ...     async with RelayPool().run(applicable.upstream, on_event=emit) as run:
    ...         env["ANTHROPIC_BASE_URL"] = run.base_url
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from ..errors import RelayError
    from .forward import RelayConfig
    from .protocol import GuardedSocket
    from .reach import UpstreamUnreachable, check_reachable
    from .routing import RequestInfo, Role, classify
    from .server import RELAY_POLICY, Relay, RelayRun, bounded_server, loopback_socket, start_relay
    from .shared import (
        DEFAULT_UPSTREAM,
        Applicability,
        RelayPool,
        account_of,
        governor_policy,
        relay_applicable,
    )
    from .stats import RelayEvent, RelayListener

__all__ = [
    "Applicability",
    "DEFAULT_UPSTREAM",
    "GuardedSocket",
    "RELAY_POLICY",
    "Relay",
    "RelayConfig",
    "RelayError",
    "RelayEvent",
    "RelayListener",
    "RelayPool",
    "RelayRun",
    "RequestInfo",
    "Role",
    "UpstreamUnreachable",
    "account_of",
    "bounded_server",
    "check_reachable",
    "classify",
    "governor_policy",
    "loopback_socket",
    "relay_applicable",
    "start_relay",
]

__getattr__ = lazy_exports(__name__)
