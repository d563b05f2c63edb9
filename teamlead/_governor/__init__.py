"""The governor's machinery: pure AIMD rules, header parsing and where its state lives.

:mod:`teamlead.governor` is the public face (``Governor``, ``GovernorPolicy``, ``Slot``);
the modules here hold the parts that need no event loop, so they are tested alone:

* :mod:`.aimd`: the rules that move one bucket's learnt limit (pure functions).
* :mod:`.retry_after`: ``Retry-After`` / ``retry-after-ms`` parsing.
* :mod:`.ratelimit_headers`: the ``anthropic-ratelimit-*`` headers and the pause they ask for.
* :mod:`.token_estimate`: a request's input tokens, estimated from its body before it goes.
* :mod:`.token_budget`: the rate-limit windows as token buckets, and when a request fits.
* :mod:`.usage`: what a reply counted (``usage``), read from its SSE events as they pass.
* :mod:`.knobs`: the knobs (``GovernorPolicy``, static ceilings), the bucket snapshot.
* :mod:`.accounts`: what every process of one account shares (learnt limits and one lease
  per slot held), one variant per module; ``open_account`` chooses one from a ``--limits``
  value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .accounts import Account, WarnOnce, check_limits_spec, open_account
    from .accounts.base import Bounds, Lease, provider_of
    from .accounts.machine import MachineAccount, default_path
    from .accounts.namespaced import NamespacedAccount
    from .accounts.process import ProcessAccount
    from .accounts.redis import RedisAccount
    from .aimd import Limits
    from .knobs import BucketState, GovernorPolicy, bucket_key, check_seconds
    from .ratelimit_headers import faulty_window, pace_pause, read_windows
    from .retry_after import faulty_retry_after, parse_retry_after, retry_after_from_headers
    from .token_budget import Budget
    from .token_estimate import InputEstimate, estimate_input
    from .usage import Usage, UsageScan

__all__ = [
    "Account",
    "Bounds",
    "BucketState",
    "Budget",
    "GovernorPolicy",
    "InputEstimate",
    "Lease",
    "Limits",
    "MachineAccount",
    "NamespacedAccount",
    "ProcessAccount",
    "RedisAccount",
    "Usage",
    "UsageScan",
    "WarnOnce",
    "bucket_key",
    "check_limits_spec",
    "check_seconds",
    "default_path",
    "estimate_input",
    "faulty_retry_after",
    "faulty_window",
    "open_account",
    "pace_pause",
    "parse_retry_after",
    "provider_of",
    "read_windows",
    "retry_after_from_headers",
]

__getattr__ = lazy_exports(__name__)
