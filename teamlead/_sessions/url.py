"""A session store from a URL: :func:`open_session_store`.

A Redis URL's database must be a number: redis-py would read any other as database 0,
sharing it with whatever else uses that one, and nothing would say so. Opening connects to
nothing: the first call does (a run checks the store first, with one warning if it does
not answer). :func:`close_store` closes what a store opened in the running event loop,
which owns its connections.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio

from .._redact import without_password
from ..errors import UsageError
from ..policy import redis_url_problem
from .redis_store import DEFAULT_TTL_S, RedisSessionStore
from .sqlite_store import SQLiteSessionStore

__all__ = ["ACCEPTED", "close_store", "open_session_store"]

ACCEPTED = "redis://HOST:PORT/DB, rediss://HOST:PORT/DB or sqlite:///PATH"
_MAX_TTL_S = 10 * 365 * 24 * 3600.0
_CLOSE_S = 5.0


def open_session_store(url: str) -> RedisSessionStore | SQLiteSessionStore:
    """The session store ``url`` names (no other URL is accepted); it connects on first use.

    Args:
        url: ``redis://[:password@]host[:port]/db`` (``db`` a number; ``?ttl=SECONDS``
            sets the keys' life after their last write, default 30 days; other query
            parameters go to redis-py), ``rediss://…`` (TLS), or
            ``sqlite:///absolute/path.db`` / ``sqlite:relative/path.db``.

    Raises:
        UsageError: anything but the URLs accepted, a Redis database that is no number, a
            ``ttl`` that is no positive number of seconds, or an SQLite URL without a path.
        SetupError: a Redis URL without redis-py (the ``redis`` extra).

    Example:
        >>> open_session_store("sqlite:///tmp/sessions.db")
        SQLiteSessionStore('/tmp/sessions.db')
        >>> open_session_store("postgres://db/1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        teamlead.errors.UsageError: a session store is redis://HOST:PORT/DB, ...
        >>> open_session_store("redis://127.0.0.1:6379/x")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        teamlead.errors.UsageError: session store ...: the Redis database must be a number, ...
    """
    text = url.strip()
    shown = without_password(text)
    scheme = text.partition(":")[0].lower()
    if scheme in ("redis", "rediss") and text[len(scheme) :].startswith("://"):
        problem = redis_url_problem(text)
        if problem is not None:
            raise UsageError(f"session store {shown}: {problem}")
        parts = urlsplit(text)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ttls = [_ttl(value, shown) for name, value in query if name == "ttl"]
        rest = [(name, value) for name, value in query if name != "ttl"]
        bare = urlunsplit(parts._replace(query=urlencode(rest)))
        return RedisSessionStore(bare, ttl_s=ttls[-1] if ttls else DEFAULT_TTL_S)
    if scheme == "sqlite":
        parts = urlsplit(text)
        if parts.netloc or parts.query or parts.fragment or parts.path in ("", "/"):
            raise UsageError(
                f"session store {shown}: an SQLite store is sqlite:///ABSOLUTE/PATH or "
                "sqlite:RELATIVE/PATH (a file, no host)"
            )
        return SQLiteSessionStore(Path(parts.path).expanduser())
    raise UsageError(f"a session store is {ACCEPTED}; got {shown!r}")


def _ttl(value: str, shown: str) -> float:
    try:
        ttl = float(value)
    except ValueError:
        ttl = math.nan
    if not (math.isfinite(ttl) and 0 < ttl <= _MAX_TTL_S):
        raise UsageError(
            f"session store {shown}: ttl is the seconds a key lives after its last write, "
            f"a number from 1 to {_MAX_TTL_S:.0f}; got {value!r}"
        )
    return ttl


async def close_store(store: Any) -> None:
    """Close the connections ``store`` (any session store, or ``None``) opened in the running
    event loop: shielded, so a cancelled run still closes them, and for at most 5 s."""
    close = getattr(store, "aclose", None)
    if close is not None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_S):
            await close()
