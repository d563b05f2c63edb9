"""The loopback request relay: every API request of a run, paced by the governor.

The CLI's ``ANTHROPIC_BASE_URL`` points at a relay in teamlead's own process
(``127.0.0.1``, an ephemeral port, a random path prefix per process). The relay forwards
each request untouched to the user's upstream, but first takes a slot from the
:class:`~teamlead.governor.Governor` (a bucket per model; the lead's requests before its
subagents'), holds 429s and 529s and retries them, and paces ahead of 429s from the
``anthropic-ratelimit-*`` headers and each answer's ``usage``. One concern per module:
what is accepted (``routing``), one exchange (``forward``), the ASGI app (``app``), the
connections' bounds (``protocol``), the server (``server``), the pool a process shares
between its runs (``shared``), and the helpers named after what they do. Each run's
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
    from ..errors import RelayError as RelayError
    from .forward import RelayConfig as RelayConfig
    from .protocol import GuardedSocket as GuardedSocket
    from .reach import UpstreamUnreachable as UpstreamUnreachable
    from .routing import RequestInfo as RequestInfo
    from .routing import classify as classify
    from .server import RELAY_POLICY as RELAY_POLICY
    from .server import Relay as Relay
    from .server import RelayRun as RelayRun
    from .server import bounded_server as bounded_server
    from .server import loopback_socket as loopback_socket
    from .server import start_relay as start_relay
    from .shared import RelayPool as RelayPool
    from .shared import account_of as account_of
    from .shared import governor_policy as governor_policy
    from .shared import relay_applicable as relay_applicable
    from .stats import RelayListener as RelayListener

__getattr__ = lazy_exports(__name__)
