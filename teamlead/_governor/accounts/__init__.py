"""Where the governor's state lives: the accounts, one variant per module, and choosing one.

Every account implements :class:`~.base.Account`: :class:`~.process.ProcessAccount` (this
process alone, ``--limits process``), :class:`~.machine.MachineAccount` (every process of
the user on this machine, an SQLite file; the default), :class:`~.redis.RedisAccount`
(every machine, ``--limits redis://host:port/db``), :class:`~.namespaced.NamespacedAccount`
(one upstream account's part of a shared store) and :class:`~.fallback.FallbackAccount` (a
shared account that fails is replaced by the next one down, with one warning line).
:func:`open_account` makes the account for a ``--limits`` value; the machine's and
Redis's modules are imported only then (they load SQLite and psutil, or redis-py).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..._redact import without_password
from ...clock import SYSTEM_CLOCK, Clock
from ...errors import UsageError
from ...policy import check_shared
from .base import Account, AccountError
from .codecs import WarnOnce
from .fallback import FallbackAccount
from .process import ProcessAccount

__all__ = [
    "Account",
    "AccountError",
    "FallbackAccount",
    "ProcessAccount",
    "WarnOnce",
    "check_limits_spec",
    "open_account",
]

log = logging.getLogger("teamlead.governor")


def check_limits_spec(spec: str) -> str:
    """``spec`` stripped, or a :class:`~teamlead.errors.UsageError` saying what is accepted
    (see :func:`~teamlead.policy.check_shared`).

    Example:
        >>> check_limits_spec(" redis://127.0.0.1:6379/0 ")
        'redis://127.0.0.1:6379/0'
    """
    try:
        return check_shared(spec)
    except ValueError as exc:
        text = spec.strip()
        url = f" {without_password(text)}:" if text.startswith(("redis://", "rediss://")) else ""
        raise UsageError(f"--limits{url} {exc}") from None


def open_account(
    spec: str = "machine",
    *,
    clock: Clock = SYSTEM_CLOCK,
    alone: Account | None = None,
    machine_path: Path | None = None,
    warnings: WarnOnce | None = None,
) -> Account:
    """The account for ``spec`` (``process``, ``machine`` or a Redis URL), with its
    fallbacks (see the module docstring).

    Args:
        spec: ``process``, ``machine`` or a ``redis://`` URL.
        clock: the governor's clock.
        alone: the account ``process`` stands for, also the last fallback (default: a new
            :class:`ProcessAccount`; a Ray worker passes its ``RayAccount``).
        machine_path: the SQLite file (default: in the user's cache directory).
        warnings: where a bad entry found in a shared store is told, once per kind
            (default: one of the account's own).

    Raises:
        UsageError: ``spec`` is none of those, or a Redis URL whose database is no number.
    """
    spec = check_limits_spec(spec)
    told = warnings if warnings is not None else WarnOnce()  # one for the account's fallbacks

    def process() -> Account:
        return alone if alone is not None else ProcessAccount()

    if spec == "process":
        return process()

    def machine() -> Account:
        from .machine import MachineAccount

        local = MachineAccount(machine_path, clock=clock, warnings=told)
        return FallbackAccount(local, process)

    if spec == "machine":
        return machine()
    from .redis import RedisAccount

    try:
        remote = RedisAccount(spec, clock=clock, warnings=told)
    except AccountError as exc:
        fallback = machine()
        log.warning(
            "the shared limits (Redis) cannot be used: %s; going on with %s",
            exc,
            fallback.describe(),
        )
        return fallback
    return FallbackAccount(remote, machine)
