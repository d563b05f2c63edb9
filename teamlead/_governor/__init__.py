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
    from .accounts import Account as Account
    from .accounts import AccountError as AccountError
    from .accounts import WarnOnce as WarnOnce
    from .accounts import check_limits_spec as check_limits_spec
    from .accounts import open_account as open_account
    from .accounts.base import Bounds as Bounds
    from .accounts.base import Lease as Lease
    from .accounts.base import provider_of as provider_of
    from .accounts.machine import MachineAccount as MachineAccount
    from .accounts.machine import default_path as default_path
    from .accounts.namespaced import NamespacedAccount as NamespacedAccount
    from .accounts.process import ProcessAccount as ProcessAccount
    from .accounts.redis import RedisAccount as RedisAccount
    from .aimd import Limits as Limits
    from .knobs import BucketState as BucketState
    from .knobs import GovernorPolicy as GovernorPolicy
    from .knobs import bucket_key as bucket_key
    from .knobs import check_seconds as check_seconds
    from .ratelimit_headers import faulty_window as faulty_window
    from .ratelimit_headers import pace_pause as pace_pause
    from .ratelimit_headers import read_windows as read_windows
    from .retry_after import faulty_retry_after as faulty_retry_after
    from .retry_after import parse_retry_after as parse_retry_after
    from .retry_after import retry_after_from_headers as retry_after_from_headers
    from .token_budget import Budget as Budget
    from .token_estimate import InputEstimate as InputEstimate
    from .token_estimate import estimate_input as estimate_input
    from .usage import Usage as Usage
    from .usage import UsageScan as UsageScan

__getattr__ = lazy_exports(__name__)
