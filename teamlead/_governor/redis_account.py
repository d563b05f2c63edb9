"""The account shared by every machine: the governor's state in Redis.

:class:`RedisAccount` keeps what :class:`~teamlead._governor.sqlite_account.MachineAccount`
keeps, in one Redis database (``--limits redis://host:port/db``):

* ``teamlead:limits:<key>``: a bucket's learnt limits as JSON (wall-clock times), written
  by compare-and-set (a Lua script), so two machines never lose each other's cut; it
  expires ``forget_after_s`` after its last change, as an idle bucket is forgotten;
* ``teamlead:leases`` (a sorted set, token by expiry in the *server's* milliseconds, so
  the machines' clocks need not agree) and ``teamlead:lease-keys`` (token to bucket key):
  one lease per slot held anywhere. A Lua script drops the expired leases, counts the rest
  against the bounds and adds one, in one atomic step. A thread renews the leases of this
  process; a machine that dies stops renewing, and its leases expire after ``lease_ttl_s``;
* ``teamlead:seq`` (a counter moved on by every lease taken, answered or given back),
  ``teamlead:lease-taken`` and ``teamlead:lease-answered`` (token to the counter when it
  was taken, and when its answer was complete), ``teamlead:lease-rejected`` (the tokens the
  upstream rejected) and ``teamlead:released`` (``seq|key`` of leases given back that were
  not rejected, by the sequence number they ended at, while a live lease is older): what a
  rejection counts as the requests the upstream may have been running (see
  :meth:`Account.update_rejected`); its cut is written only if the counter did not move
  since it counted.

Every call is bounded (``timeout_s`` to connect and to answer, no retries), so an
unreachable or failing Redis costs at most that once: it raises
:class:`~teamlead._governor.account.AccountError`, and the caller warns in one line and
goes on with this machine's store. ``redis`` (redis-py) is an optional dependency
(``pip install -e '.[redis]'`` from the checkout), imported when a Redis account is first made.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..clock import SYSTEM_CLOCK, Clock
from .account import AccountError, Bounds, CountedRule, Lease, LeaseRenewer, Rule
from .aimd import Limits, Step
from .stored import PROCESS_WARNINGS, WarnOnce, from_wall, limits_to_json, read_limits, to_wall

__all__ = ["RedisAccount"]

_T = TypeVar("_T")
_PREFIX = "teamlead:"
_CAS_TRIES = 8

#: Every script gets the same KEYS: leases, lease-keys, lease-taken, lease-rejected,
#: released, seq, lease-answered, and the bucket's limits key (when the script needs one).
_NOW_MS = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms)
for _, token in ipairs(expired) do
  redis.call('HDEL', KEYS[2], token)
  redis.call('HDEL', KEYS[3], token)
  redis.call('SREM', KEYS[4], token)
  redis.call('HDEL', KEYS[7], token)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
local function matches(k, prefix)
  if string.sub(prefix, -1) == '/' then return string.sub(k, 1, #prefix) == prefix end
  return k == prefix
end
"""

#: ARGV: key, limit, provider, provider limit (-1: none), total limit (-1: none), token,
#: ttl ms. Returns {1, the bucket's limits ('' when none)} when the lease was added, {0}
#: when the account is at a bound.
_TAKE = (
    _NOW_MS
    + """
local key, limit, provider = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local plimit, tlimit = tonumber(ARGV[4]), tonumber(ARGV[5])
local all = redis.call('HGETALL', KEYS[2])
local nkey, nprov, ntotal = 0, 0, 0
for i = 1, #all, 2 do
  local k = all[i + 1]
  ntotal = ntotal + 1
  if k == key then nkey = nkey + 1 end
  if matches(k, provider) then nprov = nprov + 1 end
end
if nkey >= limit then return {0} end
if plimit >= 0 and nprov >= plimit then return {0} end
if tlimit >= 0 and ntotal >= tlimit then return {0} end
local seq = redis.call('INCR', KEYS[6])
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[7]), ARGV[6])
redis.call('HSET', KEYS[2], ARGV[6], key)
redis.call('HSET', KEYS[3], ARGV[6], seq)
return {1, redis.call('GET', KEYS[8]) or ''}
"""
)

#: ARGV: tokens... Ends those leases; keeps the ones not rejected in released while a
#: live lease is older, and drops the released entries no live lease can count.
_GIVE_BACK = (
    _NOW_MS
    + """
for i = 1, #ARGV do
  local token = ARGV[i]
  local key = redis.call('HGET', KEYS[2], token)
  if key then
    local rejected = redis.call('SISMEMBER', KEYS[4], token)
    local answered = redis.call('HGET', KEYS[7], token)
    redis.call('ZREM', KEYS[1], token)
    redis.call('HDEL', KEYS[2], token)
    redis.call('HDEL', KEYS[3], token)
    redis.call('SREM', KEYS[4], token)
    redis.call('HDEL', KEYS[7], token)
    local seq = redis.call('INCR', KEYS[6])
    local ended = tonumber(answered) or seq
    if rejected == 0 then redis.call('ZADD', KEYS[5], ended, seq .. '|' .. key) end
  end
end
local oldest = nil
for _, taken in ipairs(redis.call('HVALS', KEYS[3])) do
  local n = tonumber(taken)
  if oldest == nil or n < oldest then oldest = n end
end
if oldest == nil then redis.call('DEL', KEYS[5])
else redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', oldest) end
return 1
"""
)

#: ARGV: token, prefix. Marks the lease rejected; returns {the leases of prefix not rejected
#: whose request ran at any moment since it was taken, the counter now, the bucket's limits}.
_REJECT = (
    _NOW_MS
    + """
local token, prefix = ARGV[1], ARGV[2]
local since = tonumber(redis.call('GET', KEYS[6]) or '0')
if redis.call('HEXISTS', KEYS[2], token) == 1 then
  redis.call('SADD', KEYS[4], token)
  since = tonumber(redis.call('HGET', KEYS[3], token) or since)
end
local n = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if matches(all[i + 1], prefix) and redis.call('SISMEMBER', KEYS[4], all[i]) == 0 then
    local answered = tonumber(redis.call('HGET', KEYS[7], all[i]))
    if answered == nil or answered > since then n = n + 1 end
  end
end
for _, entry in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. since, '+inf')) do
  local k = string.sub(entry, string.find(entry, '|', 1, true) + 1)
  if matches(k, prefix) then n = n + 1 end
end
return {n, redis.call('GET', KEYS[6]) or '0', redis.call('GET', KEYS[8]) or ''}
"""
)

#: ARGV: token. Marks the lease's answer complete (once).
_ANSWERED = """
local live = redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1
if live and redis.call('HEXISTS', KEYS[7], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[7], ARGV[1], redis.call('INCR', KEYS[6]))
end
return 1
"""

#: ARGV: prefix. Returns the live leases of matching keys.
_COUNT = (
    _NOW_MS
    + """
local n = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if matches(all[i + 1], ARGV[1]) then n = n + 1 end
end
return n
"""
)

#: KEYS: leases. ARGV: ttl ms, tokens... Moves the expiry of the tokens still held.
_RENEW = """
local now = redis.call('TIME')
local until_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', until_ms, ARGV[i]) end
return 1
"""

#: KEYS: the limits key, seq. ARGV: the value read ('' when none), the new value, expiry
#: ms, and the counter read ('' to not check it).
_CAS = """
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then return 0 end
if ARGV[4] ~= '' and (redis.call('GET', KEYS[2]) or '0') ~= ARGV[4] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""


class RedisAccount:
    """The account shared through one Redis database; see the module docstring.

    Args:
        url: ``redis://host:port/db`` (``rediss://`` for TLS; a password in the URL works).
        clock: the governor's clock (rules run on its monotonic time).
        lease_ttl_s: how long a lease lives without renewal.
        forget_after_s: learnt limits untouched this long are forgotten.
        timeout_s: the longest wait to connect and for each answer.
        warnings: where a bad entry found in Redis is told, once per kind (default: the
            process's own, :data:`~.stored.PROCESS_WARNINGS`).
    """

    shared = True

    def __init__(
        self,
        url: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        lease_ttl_s: float = 30.0,
        forget_after_s: float = 300.0,
        timeout_s: float = 0.5,
        warnings: WarnOnce = PROCESS_WARNINGS,
    ) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise AccountError(
                "Redis limits need redis-py: pip install -e '.[redis]' in the teamlead checkout"
            ) from None
        self.url = url
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        try:
            self._redis: Any = redis.Redis.from_url(
                url,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), 0),
                retry_on_timeout=False,
                health_check_interval=0,
                decode_responses=True,
                client_name="teamlead",
            )
        except (ValueError, *self._errors) as exc:
            raise AccountError(f"bad Redis URL: {exc}") from None
        self._take = self._redis.register_script(_TAKE)
        self._give_back = self._redis.register_script(_GIVE_BACK)
        self._reject = self._redis.register_script(_REJECT)
        self._answered = self._redis.register_script(_ANSWERED)
        self._count = self._redis.register_script(_COUNT)
        self._renew = self._redis.register_script(_RENEW)
        self._cas = self._redis.register_script(_CAS)
        self._clock = clock
        self._warnings = warnings
        self._ttl_ms = max(1, round(lease_ttl_s * 1000))
        self._ttl = lease_ttl_s
        self._forget_ms = max(1, round(forget_after_s * 1000))
        self._leases = _PREFIX + "leases"
        self._seq = _PREFIX + "seq"
        self._keys = [
            self._leases,
            _PREFIX + "lease-keys",
            _PREFIX + "lease-taken",
            _PREFIX + "lease-rejected",
            _PREFIX + "released",
            self._seq,
            _PREFIX + "lease-answered",
        ]
        self._me = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self._tokens = 0
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._renewer = LeaseRenewer(self.renew, lease_ttl_s / 3, "teamlead-redis-lease-renewer")

    def describe(self) -> str:
        """Where the state is, for a warning line (the URL without its password)."""
        return f"the limits shared in Redis ({_safe(self.url)})"

    def _call(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except self._errors as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise AccountError(f"Redis at {_safe(self.url)}: {reason.rstrip('.')}") from None

    def _offset(self) -> float:
        return self._clock.time() - self._clock.monotonic()

    # -- limits ---------------------------------------------------------------------------
    def _get(self, key: str) -> str:
        value = self._call(lambda: self._redis.get(_limits_key(key)))
        return value if isinstance(value, str) else ""

    def _decode(self, raw: str) -> Limits | None:
        if not raw:
            return None
        stored = read_limits(raw, now=self._clock.time())
        return None if stored is None else from_wall(stored, self._offset())

    def limits(self, key: str) -> Limits | None:
        return self._decode(self._get(key))

    def update(self, key: str, rule: Rule) -> Step:
        def snapshot() -> tuple[Limits | None, Limits | None, str, str]:
            raw = self._get(key)
            seen = self._decode(raw)
            return seen, seen, raw, ""

        return self._compare_and_set(key, snapshot, rule)

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        keys = [*self._keys, _limits_key(lease.key)]

        def snapshot() -> tuple[tuple[Limits | None, int], Limits | None, str, str]:
            counted, seq, raw = self._call(
                lambda: self._reject(keys=keys, args=[lease.token, prefix])
            )
            seen = self._decode(str(raw))
            return (seen, int(counted)), seen, str(raw), str(seq)

        return self._compare_and_set(lease.key, snapshot, lambda seen: rule(*seen))

    def _compare_and_set(
        self,
        key: str,
        snapshot: Callable[[], tuple[_T, Limits | None, str, str]],
        rule: Callable[[_T], Step],
    ) -> Step:
        """Apply ``rule`` to what ``snapshot`` read (the rule's input, the stored limits
        and their raw value, and the counter when the write must also find no lease taken
        or given back since: else ``''``), and write its result if the store still holds
        what was read; else read again."""
        name = _limits_key(key)
        for attempt in range(_CAS_TRIES):
            given, stored, raw, seq = snapshot()
            limits, change = rule(given)
            if stored is not None and limits == stored and change is None:
                return limits, change  # nothing to write
            value = json.dumps(limits_to_json(to_wall(limits, self._offset())))
            if attempt == _CAS_TRIES - 1:  # another machine kept winning: overwrite
                raw, seq = self._get(key), ""
            args: list[str | int] = [raw, value, self._forget_ms, seq]
            done = self._call(lambda a=args: self._cas(keys=[name, self._seq], args=a))  # type: ignore[misc]
            if int(done):
                return limits, change
        return limits, change

    # -- leases ---------------------------------------------------------------------------
    def take(self, bounds: Bounds) -> Lease | None:
        with self._lock:
            self._tokens += 1
            token = f"{self._me}:{self._tokens}"
        args: list[str | int] = [
            bounds.key,
            bounds.limit,
            bounds.provider,
            -1 if bounds.provider_limit is None else bounds.provider_limit,
            -1 if bounds.total_limit is None else bounds.total_limit,
            token,
            self._ttl_ms,
        ]
        keys = [*self._keys, _limits_key(bounds.key)]
        added = self._call(lambda: self._take(keys=keys, args=args))
        if not int(added[0]):
            return None
        with self._lock:
            self._held.add(token)
        self._renewer.start()
        return Lease(bounds.key, token, self, self._decode(str(added[1])))

    def give_back(self, lease: Lease) -> None:
        with self._lock:
            if lease.token not in self._held:
                return
            self._held.discard(lease.token)

        self._call(lambda: self._give_back(keys=self._keys, args=[lease.token]))

    def answered(self, lease: Lease) -> None:
        if lease.token in self._held:
            self._call(lambda: self._answered(keys=self._keys, args=[lease.token]))

    def in_flight(self, prefix: str) -> int:
        counted = self._call(lambda: self._count(keys=self._keys, args=[prefix]))
        return int(counted)

    def renew(self) -> None:
        """Move the expiry of this process's leases ``lease_ttl_s`` ahead."""
        with self._lock:
            tokens = sorted(self._held)
        if tokens:
            self._call(lambda: self._renew(keys=[self._leases], args=[self._ttl_ms, *tokens]))

    def close(self) -> None:
        """Stop renewing and give back this process's leases (best effort); idempotent."""
        self._renewer.stop()
        with self._lock:
            tokens, self._held = sorted(self._held), set()
        try:
            if tokens:
                self._give_back(keys=self._keys, args=tokens)
        except self._errors:
            pass  # they expire by their time to live
        finally:
            with contextlib.suppress(*self._errors):
                self._redis.close()


def _limits_key(key: str) -> str:
    return _PREFIX + "limits:" + key


def _safe(url: str) -> str:
    """``url`` without a password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://***@{rest.rpartition('@')[2]}"
