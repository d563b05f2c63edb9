"""Sessions in one Redis database, shared by every machine: :class:`RedisSessionStore`.

Every key is under the namespace ``teamlead:session:`` and expires ``ttl_s`` (30 days by
default) after the last write to it, so a store never grows without bound. ``<p>`` is the
project key and ``<s>`` the session id, ``%``-encoded (so a ``:`` cannot come from them):

- ``entries:<p>:<s>`` (a list) holds the main transcript's entries in append order, and
  ``entries:<p>:<s>:<subpath>`` a subagent's (``subagents/agent-<id>``) or a workflow
  journal's; ``uuids:…`` beside each (a set) holds the uuids already appended, so a batch
  the SDK retried is stored once;
- ``subkeys:<p>:<s>`` (a set): the subpaths of the session;
- ``index:<p>`` (a sorted set): the project's sessions by last write (epoch ms, on the
  server's clock, strictly increasing per session), and ``projects``: the projects;
- ``summary:<p>:<s>``: the SDK's incrementally folded summary (JSON), written by
  compare-and-set so two writers never lose each other's fold;
- ``status:<p>:<s>``: teamlead's status record of the session's last run
  (:mod:`.status`).

An append is one Lua script (entries, uuids, indexes and expiries in one atomic step);
a key of the wrong type found there (written by something else) is dropped first. What is
read back is untrusted (:mod:`.stored`): an unreadable entry or summary is skipped with one
warning per kind, a key of the wrong type reads as missing. Every call is bounded
(``timeout_s`` to connect and to answer, no retries); an unreachable or failing Redis
raises :class:`~teamlead.errors.SessionStoreError`.

The client belongs to the event loop it was first used in, and is closed as that loop
shuts down (:func:`asyncio.run` and :func:`anyio.run` close its async generators before
they close it); a store used from another loop opens a client of its own there.
``redis`` (redis-py) is the optional ``redis`` extra.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from .._redact import without_password
from ..errors import SessionStoreError, SetupError
from .status import SessionStatus, read_status
from .stored import (
    EntryReader,
    WarnOnce,
    dump_entry,
    dump_json,
    encode,
    entry_uuid,
    log,
    read_summary,
    readable_summaries,
    subpath_of,
)

__all__ = ["DEFAULT_TTL_S", "NAMESPACE", "RedisSessionStore"]

_T = TypeVar("_T")

#: Every key expires this long after its last write: 30 days.
DEFAULT_TTL_S = 30 * 24 * 3600.0
NAMESPACE = "teamlead:session:"
_PAGE = 1000  # entries read per LRANGE
_CAS_TRIES = 16

#: KEYS: entries list, uuid set, subkeys set, project index, projects.
#: ARGV: ttl ms, session id, project key, subpath ("" for the main transcript), then one
#: (uuid or "", JSON) pair per entry. Returns {mtime, keys of a wrong type dropped}.
_APPEND = """
local function want(key, kind)
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= kind then redis.call('DEL', key); return 1 end
  return 0
end
local dropped = want(KEYS[1], 'list') + want(KEYS[2], 'set') + want(KEYS[3], 'set')
  + want(KEYS[4], 'zset') + want(KEYS[5], 'zset')
local ttl = tonumber(ARGV[1])
local sid, pk, subpath = ARGV[2], ARGV[3], ARGV[4]
for i = 5, #ARGV, 2 do
  local uuid = ARGV[i]
  if uuid == '' or redis.call('SADD', KEYS[2], uuid) == 1 then
    redis.call('RPUSH', KEYS[1], ARGV[i + 1])
  end
end
redis.call('PEXPIRE', KEYS[1], ttl)
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ttl) end
local now = redis.call('TIME')
local mtime = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if subpath == '' then
  local last = tonumber(redis.call('ZSCORE', KEYS[4], sid) or '0') or 0
  if mtime <= last then mtime = last + 1 end
  redis.call('ZADD', KEYS[4], mtime, sid)
  redis.call('PEXPIRE', KEYS[4], ttl)
  local seen = tonumber(redis.call('ZSCORE', KEYS[5], pk) or '0') or 0
  if mtime > seen then redis.call('ZADD', KEYS[5], mtime, pk) end
  redis.call('PEXPIRE', KEYS[5], ttl)
else
  redis.call('SADD', KEYS[3], subpath)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return {mtime, dropped}
"""


class RedisSessionStore(SessionStore):
    """A :class:`~claude_agent_sdk.types.SessionStore` in one Redis database (see the
    module docstring for its keys), with every optional method.

    Args:
        url: ``redis://[:password@]host[:port]/db`` or ``rediss://`` (TLS).
        ttl_s: every key expires this long after its last write (default 30 days).
        namespace: the prefix of every key (tests give each store its own).
        timeout_s: to connect and to answer, per call.

    Raises:
        SetupError: redis-py is not installed (the ``redis`` extra).

    Example:
        >>> store = RedisSessionStore("redis://127.0.0.1:6379/0")  # doctest: +SKIP
        >>> options = ClaudeAgentOptions(session_store=store)  # doctest: +SKIP
    """

    def __init__(
        self,
        url: str,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        namespace: str = NAMESPACE,
        timeout_s: float = 5.0,
        warnings: WarnOnce | None = None,
    ) -> None:
        try:
            import redis.asyncio  # noqa: F401 - checked here, used when a client is made
        except ImportError:
            raise SetupError(
                "a Redis session store needs redis-py: pip install 'teamlead[redis]'"
            ) from None
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s!r}")
        self.url = url
        self.where = f"Redis at {without_password(url)}"
        self.ttl_s = float(ttl_s)
        self._ttl_ms = max(1, round(self.ttl_s * 1000))
        self._ns = namespace
        self._timeout = timeout_s
        self._warn = warnings if warnings is not None else WarnOnce(log)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._append: Any = None
        self._closer: Any = None

    def __repr__(self) -> str:
        return f"RedisSessionStore({without_password(self.url)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy in another process (a Ray task's) is the same store with no client yet:
        it connects there, on first use (a client, its lock and its loop do not travel)."""
        again = functools.partial(
            type(self), self.url, ttl_s=self.ttl_s, namespace=self._ns, timeout_s=self._timeout
        )
        return (again, ())

    # -- the client ----------------------------------------------------------------------
    def _redis(self) -> Any:
        """The client of the running event loop (made on first use in it)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            import redis.asyncio as aioredis
            from redis.asyncio.retry import Retry  # an asyncio client takes the asyncio retry
            from redis.backoff import NoBackoff

            try:
                self._client = aioredis.Redis.from_url(
                    self.url,
                    socket_timeout=self._timeout,
                    socket_connect_timeout=self._timeout,
                    retry=Retry(NoBackoff(), 0),
                    retry_on_timeout=False,
                    health_check_interval=0,
                    decode_responses=True,
                    encoding_errors="replace",
                    client_name="teamlead",
                )
            except ValueError as exc:
                raise SessionStoreError(f"bad Redis URL: {exc}", store=self.where) from None
            self._append = self._client.register_script(_APPEND)
            self._loop = loop
            self._closer = _closed_at_shutdown(self._client)  # held: its loop's set is weak
            asyncio.ensure_future(self._closer.asend(None))
        return self._client

    async def _call(
        self, what: str, coro: Any, *, key: str | None = None, missing: Any = None
    ) -> Any:
        """Await one call, its failure as :class:`SessionStoreError`; with ``key``, a key of
        the wrong type there (written by something else) is told once and reads as
        ``missing`` (what the call gives for a key that is not there)."""
        import redis

        try:
            return await coro
        except (redis.RedisError, OSError, asyncio.TimeoutError) as exc:
            message = str(exc) or type(exc).__name__
            wrong_type = isinstance(exc, redis.ResponseError) and message.startswith("WRONGTYPE")
            if key is not None and wrong_type:
                self._warn(
                    "wrong-type",
                    f"session store {self.where}: a key of the wrong type ({key}) reads as missing",
                )
                return missing
            raise SessionStoreError(
                f"session store {self.where}: {what} failed: {message}", store=self.where
            ) from None

    async def aclose(self) -> None:
        """Close the client of the running loop (a store can be used again after); one of
        another loop was closed as that loop shut down, and cannot be awaited here."""
        client, loop, self._client, self._loop = self._client, self._loop, None, None
        if client is not None and loop is asyncio.get_running_loop():
            await client.aclose()

    async def ping(self) -> None:
        """Check the store answers.

        Raises:
            SessionStoreError: it does not.
        """
        await self._call("ping", self._redis().ping())

    # -- keys ----------------------------------------------------------------------------
    def _key(self, kind: str, *parts: str) -> str:
        """``<namespace><kind>:<part>:…``, each part %-encoded (see the module docstring)."""
        return self._ns + ":".join([kind, *(encode(part) for part in parts)])

    def _entries(self, key: SessionKey, kind: str = "entries") -> str:
        subpath = subpath_of(key)
        return self._key(
            kind, key["project_key"], key["session_id"], *([subpath] if subpath else [])
        )

    # -- the protocol --------------------------------------------------------------------
    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Append ``entries`` (an entry whose uuid is stored already is skipped).

        Raises:
            SessionStoreError: the store could not be reached or failed.
        """
        if not entries:
            return
        client = self._redis()
        pk, sid, subpath = key["project_key"], key["session_id"], subpath_of(key)
        args: list[Any] = [self._ttl_ms, sid, pk, subpath]
        for entry in entries:
            args += [entry_uuid(entry), dump_entry(entry)]
        keys = [
            self._entries(key),
            self._entries(key, "uuids"),
            self._key("subkeys", pk, sid),
            self._key("index", pk),
            self._key("projects"),
        ]
        mtime, dropped = await self._call("append", self._append(keys=keys, args=args))
        if dropped:
            self._warn(
                "wrong-type-dropped",
                f"session store {self.where}: dropped {dropped} key(s) of the wrong type",
            )
        if subpath:
            return
        await self._fold(key, entries, int(mtime), client)

    async def _fold(
        self, key: SessionKey, entries: list[SessionStoreEntry], mtime: int, client: Any
    ) -> None:
        """Fold ``entries`` into the session's summary by compare-and-set."""
        import redis

        name = self._key("summary", key["project_key"], key["session_id"])

        async def fold() -> None:
            async with client.pipeline(transaction=True) as pipe:
                for _ in range(_CAS_TRIES):
                    try:
                        await pipe.watch(name)
                        try:
                            raw = await pipe.get(name)
                        except redis.ResponseError:  # not a string: replaced
                            raw = None
                        prev = read_summary(raw, key["session_id"])
                        folded = fold_session_summary(prev, key, entries)
                        folded["mtime"] = max(mtime, prev["mtime"] if prev else 0)
                        pipe.multi()
                        pipe.set(name, dump_json(folded), px=self._ttl_ms)
                        await pipe.execute()
                        return
                    except redis.WatchError:
                        continue
            self._warn(
                "summary-busy",
                f"session store {self.where}: a session summary was left behind (busy)",
            )

        await self._call("summary", fold())

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The entries of ``key`` in append order, or ``None`` when it has none.

        Unreadable entries are skipped (one warning); at most 256 MiB is read.

        Raises:
            SessionStoreError: the store could not be reached or failed.
        """
        client = self._redis()
        name = self._entries(key)
        count = await self._call("load", client.llen(name), key=name, missing=0)
        if not count:
            return None
        reader = EntryReader()
        for start in range(0, int(count), _PAGE):
            page = await self._call(
                "load", client.lrange(name, start, start + _PAGE - 1), key=name, missing=[]
            )
            if not page or not all(reader.add(raw) for raw in page):
                break
        return reader.result(self._warn, self.where)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's sessions (main transcripts) with their last write, epoch ms."""
        client = self._redis()
        index = self._key("index", project_key)
        pairs = await self._members(index)
        if not pairs:
            return []
        sessions = [s for s, _ in pairs]
        keys = [self._entries({"project_key": project_key, "session_id": s}) for s in sessions]
        live = await self._live(sessions, keys, lambda *gone: client.zrem(index, *gone))
        # a score is anything ZADD took: one of +inf is no last write, and is skipped
        return [
            {"session_id": s, "mtime": int(score)}
            for s, score in pairs
            if s in live and math.isfinite(score)
        ]

    async def _members(self, name: str) -> list[tuple[str, float]]:
        """A sorted set's members and scores (a key of another type reads as empty)."""
        pairs = await self._call(
            "list", self._redis().zrange(name, 0, -1, withscores=True), key=name, missing=[]
        )
        return [(str(m), float(s)) for m, s in pairs]

    async def _live(
        self, members: list[str], keys: list[str], drop: Callable[..., Awaitable[Any]]
    ) -> set[str]:
        """The members whose entries (``keys``, in order) still exist; the others expired or
        were deleted behind the index or set that lists them, and are dropped from it."""
        async with self._redis().pipeline(transaction=False) as pipe:
            for name in keys:
                pipe.exists(name)
            found = await self._call("exists", pipe.execute())
        gone = [m for m, n in zip(members, found, strict=True) if not n]
        if gone:
            await self._call("list", drop(*gone))
        return {m for m, n in zip(members, found, strict=True) if n}

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summaries of the project's sessions (unreadable ones skipped)."""
        listed = await self.list_sessions(project_key)
        if not listed:
            return []
        async with self._redis().pipeline(transaction=False) as pipe:
            for item in listed:
                pipe.get(self._key("summary", project_key, item["session_id"]))
            raws = await self._call("list_session_summaries", pipe.execute(raise_on_error=False))
        found = [
            read_summary(raw if isinstance(raw, str) else None, item["session_id"])
            for item, raw in zip(listed, raws, strict=True)
            if raw is not None
        ]
        return readable_summaries(found, self._warn, self.where)

    async def delete(self, key: SessionKey) -> None:
        """Delete ``key``; a main transcript's delete takes its subkeys, summary and status.

        Raises:
            SessionStoreError: the store could not be reached or failed.
        """
        client = self._redis()
        pk, sid, subpath = key["project_key"], key["session_id"], subpath_of(key)
        subkeys = self._key("subkeys", pk, sid)
        if subpath:
            async with client.pipeline(transaction=True) as pipe:
                pipe.delete(self._entries(key), self._entries(key, "uuids"))
                pipe.srem(subkeys, subpath)
                await self._call("delete", pipe.execute(raise_on_error=False))
            return
        subs = await self._subpaths(pk, sid)
        names = [self._entries(key), self._entries(key, "uuids"), subkeys]
        for sub in subs:
            sub_key: SessionKey = {"project_key": pk, "session_id": sid, "subpath": sub}
            names += [self._entries(sub_key), self._entries(sub_key, "uuids")]
        names += [self._key("summary", pk, sid), self._key("status", pk, sid)]
        index = self._key("index", pk)
        async with client.pipeline(transaction=True) as pipe:
            pipe.delete(*names)
            pipe.zrem(index, sid)
            await self._call("delete", pipe.execute(raise_on_error=False))
        left = await self._call("delete", client.zcard(index), key=index, missing=0)
        if not left:
            await self._call("delete", client.zrem(self._key("projects"), pk))

    async def _subpaths(self, project_key: str, session_id: str) -> list[str]:
        name = self._key("subkeys", project_key, session_id)
        found = await self._call(
            "list_subkeys", self._redis().smembers(name), key=name, missing=set()
        )
        return sorted(str(s) for s in found if isinstance(s, str) and s)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The session's subpaths (subagent transcripts, workflow journals), sorted."""
        pk, sid = key["project_key"], key["session_id"]
        subs = await self._subpaths(pk, sid)
        if not subs:
            return []
        keys = [self._entries({"project_key": pk, "session_id": sid, "subpath": s}) for s in subs]
        subkeys = self._key("subkeys", pk, sid)
        live = await self._live(subs, keys, lambda *gone: self._redis().srem(subkeys, *gone))
        return [s for s in subs if s in live]

    # -- teamlead's own ------------------------------------------------------------------
    async def list_project_keys(self) -> list[str]:
        """Every project key with a session in the store, most recently written first."""
        pairs = await self._members(self._key("projects"))
        return [p for p, _ in sorted(pairs, key=lambda pair: -pair[1])]

    async def put_status(self, status: SessionStatus) -> None:
        """Write the status record of ``status.session_id`` (it expires like the rest).

        Raises:
            SessionStoreError: the store could not be reached or failed.
        """
        name = self._key("status", status.project_key, status.session_id)
        await self._call(
            "status", self._redis().set(name, status.model_dump_json(), px=self._ttl_ms)
        )

    async def get_status(self, project_key: str, session_id: str) -> SessionStatus | None:
        """The session's status record, or ``None`` (none, or unreadable: one warning)."""
        name = self._key("status", project_key, session_id)
        raw = await self._call("status", self._redis().get(name), key=name)
        if raw is None:
            return None
        return read_status(raw, self._warn, self.where)


async def _closed_at_shutdown(client: Any) -> AsyncIterator[None]:
    """Wait, once started, until the event loop closes its async generators, then close
    ``client`` there: a client left open outlives its loop, which alone can close it."""
    try:
        yield
    finally:
        await client.aclose()
