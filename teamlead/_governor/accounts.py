"""Choosing where the governor's state lives, from a ``--limits`` value.

``process`` keeps it in this process; ``machine`` (the default) shares it with every
teamlead process of the user on this machine through an SQLite file; ``redis://host:port/db``
shares it with every machine using that Redis. A shared account that fails is replaced by
the next one down (Redis, then the machine's file, then this process), with one warning
line: the run goes on, and a slot held in the failed one expires there by itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

from .._redact import without_password
from ..clock import SYSTEM_CLOCK, Clock
from ..errors import UsageError
from ..policy import SHARED_LIMITS, redis_url_problem
from .account import Account, AccountError, FallbackAccount, ProcessAccount, describe
from .store import LimitStore
from .stored import WarnOnce

__all__ = ["check_limits_spec", "open_account"]

log = logging.getLogger("teamlead.governor")


def check_limits_spec(spec: str) -> str:
    """``spec`` stripped, or a :class:`~teamlead.errors.UsageError` saying what is accepted
    (a Redis URL whose database or port is no number is refused: see
    :func:`~teamlead.policy.redis_url_problem`).

    Example:
        >>> check_limits_spec(" redis://127.0.0.1:6379/0 ")
        'redis://127.0.0.1:6379/0'
    """
    text = spec.strip()
    if text in SHARED_LIMITS:
        return text
    if not text.startswith(("redis://", "rediss://")):
        raise UsageError(
            f"--limits must be 'machine', 'process' or redis://host:port/db, got {spec!r}"
        )
    problem = redis_url_problem(text)
    if problem is not None:
        raise UsageError(f"--limits {without_password(text)}: {problem}")
    return text


def open_account(
    spec: str = "machine",
    *,
    clock: Clock = SYSTEM_CLOCK,
    store: LimitStore | None = None,
    machine_path: Path | None = None,
    lease_ttl_s: float = 30.0,
    forget_after_s: float = 300.0,
    warnings: WarnOnce | None = None,
) -> Account:
    """The account for ``spec`` (see the module docstring), with its fallbacks.

    Args:
        spec: ``process``, ``machine`` or a ``redis://`` URL.
        clock: the governor's clock.
        store: where a process-alone account keeps its learnt limits (e.g. a Ray replica).
        machine_path: the SQLite file (default: in the user's cache directory).
        lease_ttl_s: how long a shared lease lives without renewal.
        forget_after_s: learnt limits untouched this long are forgotten.
        warnings: where a bad entry found in a shared store is told, once per kind
            (default: one of the account's own).

    Raises:
        UsageError: ``spec`` is none of those, or a Redis URL whose database is no number.
    """
    spec = check_limits_spec(spec)
    told = warnings if warnings is not None else WarnOnce()  # one for the account's fallbacks

    def process() -> Account:
        return ProcessAccount(store)

    if spec == "process":
        return process()

    def machine() -> Account:
        from .sqlite_account import MachineAccount

        local = MachineAccount(
            machine_path,
            clock=clock,
            lease_ttl_s=lease_ttl_s,
            forget_after_s=forget_after_s,
            warnings=told,
        )
        return FallbackAccount(local, process)

    if spec == "machine":
        return machine()
    from .redis_account import RedisAccount

    try:
        remote = RedisAccount(
            spec,
            clock=clock,
            lease_ttl_s=lease_ttl_s,
            forget_after_s=forget_after_s,
            warnings=told,
        )
    except AccountError as exc:
        fallback = machine()
        log.warning(
            "the shared limits (Redis) cannot be used: %s; going on with %s",
            exc,
            describe(fallback),
        )
        return fallback
    return FallbackAccount(remote, machine)
