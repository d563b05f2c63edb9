"""``teamlead limits``: what the shared store of learnt limits holds, and clearing it.

Every teamlead process's governor keeps each account's learnt limits (a cap per model, a
pause after a 429 or an overload) in a store the account's processes share: this machine's
file, or a Redis. An account is its upstream's host and a one-way hash of the upstream and
credential, never the credential. Clearing never touches running processes' leases.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from .._redact import terminal_safe
from ..clock import SYSTEM_CLOCK
from .exitcodes import SafeErrorsGroup, handle_errors
from .history import ago
from .options import option

__all__ = ["limits"]


def _opened(spec: str) -> Any:
    """The shared account of ``spec`` (``machine`` or a Redis URL), or ``None`` when this
    machine has no store file yet."""
    from .._governor import MachineAccount, check_limits_spec, default_path
    from ..errors import UsageError

    spec = check_limits_spec(spec)
    if spec == "process":
        raise UsageError("--limits process keeps nothing to show: use machine or redis://…")
    if spec == "machine":
        path = default_path()
        return MachineAccount(path) if path.is_file() else None
    from .._governor import RedisAccount

    return RedisAccount(spec)


def _row(entry: Any, now: float) -> dict[str, Any]:
    limits = entry.limits
    paused = limits.cooldown_until if limits.cooldown_until > now else None
    return {
        "key": entry.key,
        "account": entry.account,
        "bucket": entry.bucket,
        "limit": limits.cap,
        "last_good": limits.last_good,
        "paused_until": paused,
        "updated": entry.updated,
        "host": entry.host,
    }


def _line(row: dict[str, Any], now: float) -> str:
    parts = [row["account"] or "(no account)", row["bucket"], f"limit {row['limit']}"]
    if row["last_good"] is not None:
        parts[-1] += f" (last good {row['last_good']})"
    if row["paused_until"] is not None:
        until = time.strftime("%H:%M:%S", time.localtime(row["paused_until"]))
        parts.append(f"paused {row['paused_until'] - now:.0f} s more (until {until})")
    where = f" on {row['host']}" if row["host"] else ""
    parts.append(f"learnt {ago(now - row['updated'])}{where}")
    return terminal_safe("  ".join(str(p) for p in parts))


@click.group("limits", cls=SafeErrorsGroup, invoke_without_command=True)
@option(
    "--limits",
    "limits_shared",
    default="machine",
    show_default=True,
    help="The store to read: machine (this machine's file) or redis://host:port/db.",
)
@option("--json", "json_", is_flag=True, help="One JSON array of the entries.")
@click.pass_context
@handle_errors
def limits(ctx: click.Context, limits_shared: str, json_: bool) -> None:
    """Show or clear the limits the relay learnt per account.

    An entry's key is its account (the upstream's host and a hash of it and the
    credential), then provider/model.
    """
    ctx.obj = limits_shared
    if ctx.invoked_subcommand is not None:
        return
    account = _opened(limits_shared)
    now = SYSTEM_CLOCK.time()
    try:
        rows = [_row(e, now) for e in account.stored()] if account is not None else []
    finally:
        if account is not None:
            account.close()
    if json_:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("teamlead: no learnt limits in the store")
        return
    for row in rows:
        click.echo(_line(row, now))


@limits.command("clear")
@click.argument("key", required=False)
@click.pass_obj
@handle_errors
def clear(spec: str, key: str | None) -> None:
    """Drop the learnt limits of KEY, or every entry.

    KEY is a key as listed, or an account (all its entries); without KEY every entry is
    dropped. The next run starts from the relay's own start.
    """
    account = _opened(spec)
    if account is None:
        click.echo("teamlead: no learnt limits in the store: nothing to clear")
        return
    try:
        dropped = account.forget(key)
    finally:
        account.close()
    what = f"matching {key}" if key else "in the store"
    click.echo(f"teamlead: cleared {dropped} learnt limit(s) {what}")
