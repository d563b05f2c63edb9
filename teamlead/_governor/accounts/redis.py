"""The account shared by every machine: the governor's state in Redis.

:class:`RedisAccount` keeps what :class:`~teamlead._governor.accounts.machine.MachineAccount`
keeps, in one Redis database (``--limits redis://host:port/db``), every step one Lua
script, so it is atomic across machines:

* ``teamlead:limits:<key>``: a bucket's learnt limits as JSON (wall-clock times), written
  by compare-and-set; it expires ``forget_after_s`` after its last change;
* ``teamlead:leases`` (token by expiry in the *server's* milliseconds, so the machines'
  clocks need not agree) and ``teamlead:lease-keys`` (token to bucket key): one lease per
  slot held anywhere, renewed by a thread of its process, expired ``lease_ttl_s`` after a
  machine stops renewing;
* ``teamlead:seq`` (moved on by every lease taken, answered or given back),
  ``teamlead:lease-taken`` and ``teamlead:lease-answered`` (token to the counter then),
  ``teamlead:lease-rejected`` and ``teamlead:released`` (``seq|key`` of leases given back,
  not rejected, while a live lease is older): what a rejection counts (see
  :meth:`Account.update_rejected`). Its cut is written only if the counter did not move
  since it counted, and marks its lease rejected in that same write.

Every key expires (the shared ones past the longest a lease lives). What the database holds
is untrusted input (see :mod:`.codecs`): every script first drops the keys of the wrong
type and the void leases, and sets an unreadable counter past the numbers in use; each kind
is told in one warning per process. Every call is bounded (``timeout_s``, no retries): a
failing Redis raises :class:`~teamlead._governor.accounts.base.AccountError` and the
caller goes on with this machine's store. ``redis`` (redis-py) is an optional dependency
(``pip install -e '.[redis]'``), imported when a Redis account is first made.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..._redact import without_password
from ...clock import SYSTEM_CLOCK, Clock
from ..aimd import Limits, Step
from .base import AccountError, Bounds, CountedRule, Lease, Rule
from .codecs import (
    MAX_AHEAD_S,
    MAX_LEASE_S,
    MAX_SEQ,
    StoredLimits,
    WarnOnce,
    clamped_note,
    dump_limits,
    field_of,
    from_wall,
    not_learnt,
    read_clamped,
    read_time,
    stored_limits,
)
from .renewer import LeaseRenewer, bounded

__all__ = ["RedisAccount"]

_T = TypeVar("_T")
_PREFIX = "teamlead:"
_CAS_TRIES = 8
#: How long the account's shared keys (leases, counter, ended requests) outlive the last
#: call that touched them: past the longest a lease lives, so no live lease loses them.
_STATE_TTL_MS = round(2 * MAX_LEASE_S * 1000)

#: What every script may use: ``dropped(kind)`` notes a bad entry it removed (the script
#: returns the kinds first, for one warning each), ``count(v)`` reads a stored integer,
#: ``limits_of(key, forget_ms)`` reads a bucket's limits (a key of another type is dropped,
#: one with no expiry, or a longer one than ``forget_ms``, gets that).
_COMMON = f"""
local dropped, told = {{}}, {{}}
local function drop(kind)
  if not told[kind] then told[kind] = true; table.insert(dropped, kind) end
end
local function count(v)
  if type(v) ~= 'string' or #v > 16 or not string.match(v, '^%d+$') then return nil end
  local n = tonumber(v)
  if n > {MAX_SEQ} then return nil end
  return n
end
local function matches(k, prefix)
  if string.sub(prefix, -1) == '/' then return string.sub(k, 1, #prefix) == prefix end
  return k == prefix
end
local function limits_of(k, forget)
  local kind = redis.call('TYPE', k)['ok']
  if kind == 'none' then return '' end
  if kind ~= 'string' then redis.call('DEL', k); drop('key'); return '' end
  local left = redis.call('PTTL', k)
  if left < 0 or left > tonumber(forget) then redis.call('PEXPIRE', k, forget) end
  return redis.call('GET', k)
end
"""

#: Every lease script gets the same KEYS: leases, lease-keys, lease-taken, lease-rejected,
#: released, seq, lease-answered, and the bucket's limits key (when it needs one). It drops
#: the bad entries first (see the module), and ends with ``finish(...)``: the shared keys'
#: expiry moved on, and the kinds dropped before the script's own values.
_PRELUDE = (
    _COMMON
    + f"""
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local kinds = {{'zset', 'hash', 'hash', 'set', 'zset', 'string', 'hash'}}
for i, kind in ipairs(kinds) do
  local found = redis.call('TYPE', KEYS[i])['ok']
  if found ~= 'none' and found ~= kind then redis.call('DEL', KEYS[i]); drop('key') end
end
local function forget_lease(token)
  redis.call('ZREM', KEYS[1], token)
  redis.call('HDEL', KEYS[2], token)
  redis.call('HDEL', KEYS[3], token)
  redis.call('SREM', KEYS[4], token)
  redis.call('HDEL', KEYS[7], token)
end
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms)) do
  forget_lease(token)
end
local latest = ms + {round(MAX_LEASE_S * 1000)}
local expiries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #expiries, 2 do
  local token = expiries[i]
  local taken = redis.call('HGET', KEYS[3], token)  -- none from a teamlead before it
  local answered = redis.call('HGET', KEYS[7], token)
  if tonumber(expiries[i + 1]) > latest or redis.call('HEXISTS', KEYS[2], token) == 0
      or (taken and count(taken) == nil) or (answered and count(answered) == nil) then
    forget_lease(token); drop('lease')
  end
end
for _, token in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not redis.call('ZSCORE', KEYS[1], token) then forget_lease(token); drop('lease') end
end
local seq = redis.call('GET', KEYS[6])
if (seq and count(seq) == nil) or (not seq and redis.call('HLEN', KEYS[3]) > 0) then
  local top = 0
  for _, hash in ipairs({{KEYS[3], KEYS[7]}}) do
    for _, v in ipairs(redis.call('HVALS', hash)) do top = math.max(top, count(v) or 0) end
  end
  redis.call('SET', KEYS[6], top)
  drop('counter')
end
-- a request cannot have ended at a number the counter has not reached
local current = redis.call('GET', KEYS[6]) or '0'
if redis.call('ZREMRANGEBYSCORE', KEYS[5], '(' .. current, '+inf') > 0 then drop('released') end
local function finish(...)
  for i = 1, 7 do redis.call('PEXPIRE', KEYS[i], {_STATE_TTL_MS}) end
  local out = {{table.concat(dropped, ',')}}
  for _, v in ipairs({{...}}) do table.insert(out, v) end
  return out
end
"""
)

#: ARGV: key, limit, provider, provider limit (-1: none), total limit (-1: none), token,
#: ttl ms, forget ms. Returns {1, the bucket's limits ('' when none)} when the lease was
#: added, {0} when the account is at a bound.
_TAKE = (
    _PRELUDE
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
if nkey >= limit then return finish(0) end
if plimit >= 0 and nprov >= plimit then return finish(0) end
if tlimit >= 0 and ntotal >= tlimit then return finish(0) end
local seq = redis.call('INCR', KEYS[6])
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[7]), ARGV[6])
redis.call('HSET', KEYS[2], ARGV[6], key)
redis.call('HSET', KEYS[3], ARGV[6], seq)
return finish(1, limits_of(KEYS[8], ARGV[8]))
"""
)

#: ARGV: tokens... Ends those leases; keeps the ones not rejected in released while a
#: live lease is older, and drops the released entries no live lease can count.
_GIVE_BACK = (
    _PRELUDE
    + """
for i = 1, #ARGV do
  local token = ARGV[i]
  local key = redis.call('HGET', KEYS[2], token)
  if key then
    local rejected = redis.call('SISMEMBER', KEYS[4], token)
    local answered = redis.call('HGET', KEYS[7], token)
    forget_lease(token)
    local seq = redis.call('INCR', KEYS[6])
    local ended = count(answered) or seq
    if rejected == 0 then redis.call('ZADD', KEYS[5], ended, seq .. '|' .. key) end
  end
end
local oldest = nil
for _, taken in ipairs(redis.call('HVALS', KEYS[3])) do
  local n = count(taken)
  if n and (oldest == nil or n < oldest) then oldest = n end
end
if oldest == nil then redis.call('DEL', KEYS[5])
else redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', oldest) end
return finish(1)
"""
)

#: ARGV: token, prefix, forget ms. Returns {the leases of prefix, the token's own left out,
#: not rejected whose request ran at any moment since it was taken, the counter now, the
#: bucket's limits}. The lease is marked rejected by the write of its rule (``_CAS``).
_REJECT = (
    _PRELUDE
    + """
local token, prefix = ARGV[1], ARGV[2]
local since = count(redis.call('GET', KEYS[6]) or '0') or 0
if redis.call('HEXISTS', KEYS[2], token) == 1 then
  since = count(redis.call('HGET', KEYS[3], token)) or since
end
local n = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if all[i] ~= token and matches(all[i + 1], prefix)
      and redis.call('SISMEMBER', KEYS[4], all[i]) == 0 then
    local answered = count(redis.call('HGET', KEYS[7], all[i]))
    if answered == nil or answered > since then n = n + 1 end
  end
end
for _, entry in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. since, '+inf')) do
  local bar = string.find(entry, '|', 1, true)
  if bar == nil then
    redis.call('ZREM', KEYS[5], entry); drop('released')
  elseif matches(string.sub(entry, bar + 1), prefix) then
    n = n + 1
  end
end
return finish(n, redis.call('GET', KEYS[6]) or '0', limits_of(KEYS[8], ARGV[3]))
"""
)

#: ARGV: token. Marks the lease's answer complete (once).
_ANSWERED = (
    _PRELUDE
    + """
local live = redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1
if live and redis.call('HEXISTS', KEYS[7], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[7], ARGV[1], redis.call('INCR', KEYS[6]))
end
return finish(1)
"""
)

#: ARGV: prefix. Returns the live leases of matching keys.
_COUNT = (
    _PRELUDE
    + """
local n = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if matches(all[i + 1], ARGV[1]) then n = n + 1 end
end
return finish(n)
"""
)

#: ARGV: ttl ms, tokens... Moves the expiry of the tokens still held.
_RENEW = (
    _PRELUDE
    + """
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', ms + tonumber(ARGV[1]), ARGV[i]) end
return finish(1)
"""
)

#: KEYS: the limits key. ARGV: forget ms. Returns {dropped kinds, the value ('' if none)}.
_READ = (
    _COMMON
    + """
local value = limits_of(KEYS[1], ARGV[1])
return {table.concat(dropped, ','), value}
"""
)

#: KEYS: the limits key. ARGV: the value read. Deletes it if it still holds that value (an
#: unreadable one, so one another machine has written in its place stays).
_DROP = """
if redis.call('TYPE', KEYS[1])['ok'] == 'string' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 1
"""

#: KEYS: the limits key, seq, lease-keys, lease-rejected. ARGV: the value read ('' when
#: none), the new value, expiry ms, the counter read ('' to not check it), and the token of
#: the lease whose rejection the value holds ('' for none): marked rejected in the same
#: step, so no count leaves it out before its rule is written (another machine's cut
#: then counted it neither as running nor, later, as settled: one below the limit).
_CAS = """
local function value_of(k)
  if redis.call('TYPE', k)['ok'] == 'string' then return redis.call('GET', k) end
  return false
end
if (value_of(KEYS[1]) or '') ~= ARGV[1] then return 0 end
if ARGV[4] ~= '' and (value_of(KEYS[2]) or '0') ~= ARGV[4] then return 0 end
local rejected = ARGV[5] ~= '' and redis.call('TYPE', KEYS[3])['ok'] == 'hash'
  and redis.call('HEXISTS', KEYS[3], ARGV[5]) == 1
if rejected and redis.call('TYPE', KEYS[4])['ok'] ~= 'set' then redis.call('DEL', KEYS[4]) end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if rejected then redis.call('SADD', KEYS[4], ARGV[5]) end
return 1
"""


#: What each kind of entry dropped is, for its one warning.
_DROPPED = {
    "key": "dropped a key of the wrong type from {where}",
    "lease": "dropped a lease that cannot be read (its expiry or sequence number) from {where}",
    "counter": "the sequence number in {where} could not be read; set it past the numbers in use",
    "released": "dropped an unreadable record of an ended request from {where}",
}


class RedisAccount:
    """The account shared through one Redis database; see the module docstring.

    Args:
        url: ``redis://host:port/db`` (``rediss://`` for TLS; a password in the URL works).
        clock: the governor's clock (rules run on its monotonic time).
        lease_ttl_s: how long a lease lives without renewal (at most
            :data:`~.codecs.MAX_LEASE_S`: the others would read a longer one as void).
        forget_after_s: learnt limits untouched this long are forgotten.
        timeout_s: the longest wait to connect and for each answer.
        warnings: where a bad entry found in Redis is told, once per kind (default: the
            account's own).
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
        warnings: WarnOnce | None = None,
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
        self._where = f"Redis at {without_password(url)}"  # for messages: no password
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._refused: type[BaseException] = redis.AuthenticationError
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
        self._read = self._redis.register_script(_READ)
        self._drop = self._redis.register_script(_DROP)
        self._cas = self._redis.register_script(_CAS)
        self._clock = clock
        self._warnings = warnings if warnings is not None else WarnOnce()
        self._timeout = timeout_s
        self._ttl = min(lease_ttl_s, MAX_LEASE_S)
        self._ttl_ms = max(1, round(self._ttl * 1000))
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
        self._far_told = False
        self._far_checked = -1e18
        self._held: set[str] = set()
        self._lock = threading.Lock()
        # a renewal is one script: its connection, handshake and answer, each bounded
        self._renewer = LeaseRenewer(
            self.renew, self._ttl / 3, "teamlead-redis-lease-renewer", stop_s=4 * timeout_s
        )

    def describe(self) -> str:
        return f"the limits shared in Redis ({without_password(self.url)})"

    def _call(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except self._errors as exc:
            if isinstance(exc, self._refused):
                raise AccountError(_refusal(self.url)) from None
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise AccountError(f"{self._where}: {reason.rstrip('.')}") from None

    def _script(self, script: Any, keys: list[str], args: list[str | int]) -> list[Any]:
        """Run one of the scripts that report what they dropped: its own values."""
        result: list[Any] = self._call(lambda: script(keys=keys, args=args))
        for kind in str(result[0]).split(","):
            if kind in _DROPPED:
                self._warn(kind, _DROPPED[kind].format(where=self._where))
        return result[1:]

    def _warn(self, kind: str, message: str) -> None:
        self._warnings(f"redis:{kind}", f"shared limits: {message}")

    # -- limits ---------------------------------------------------------------------------
    def _get(self, key: str) -> str:
        (value,) = self._script(self._read, [_limits_key(key)], [self._forget_ms])
        return value if isinstance(value, str) else ""

    def _decode(self, key: str, raw: str) -> tuple[Limits | None, bool]:
        """``key``'s limits in ``raw``, and whether their pause was clamped (see
        :func:`~.codecs.read_clamped`: it is not written back)."""
        if not raw:
            return None, False
        now = self._clock.time()
        written = read_time(field_of(raw, "updated", now), latest=now + MAX_AHEAD_S)
        found = read_clamped(raw, now=now, written=written)
        if found is None:
            self._warn(
                "limits", f"dropped the unreadable learnt limits of {key!r} in {self._where}"
            )
            self._call(lambda: self._drop(keys=[_limits_key(key)], args=[raw]))
            return None, False
        stored, clamped = found
        if clamped:
            self._warn("pause", clamped_note(key, self._where, stored, now))
        return from_wall(stored, self._clock), clamped

    def limits(self, key: str) -> Limits | None:
        return self._decode(key, self._get(key))[0]

    def _stored_keys(self) -> list[str]:
        """The bucket keys whose learnt limits Redis holds, sorted."""
        prefix = _limits_key("")
        names = self._redis.scan_iter(match=prefix + "*", count=500)
        return sorted(str(name)[len(prefix) :] for name in names)

    def stored(self) -> list[StoredLimits]:
        """Every bucket's learnt limits Redis holds, readable ones only (for
        ``teamlead limits``)."""
        now = self._clock.time()

        def read() -> list[StoredLimits]:
            texts = [(key, self._redis.get(_limits_key(key))) for key in self._stored_keys()]
            found = [stored_limits(k, t, field_of(t, "updated", now), now=now) for k, t in texts]
            return [entry for entry in found if entry is not None]

        return self._call(read)

    def forget(self, key: str | None = None) -> int:
        """Drop the learnt limits (pauses included) of ``key`` (a stored key, or an account's
        every bucket), all of them when ``None``; leases are left alone. Returns how many."""

        def drop() -> int:
            names = [
                _limits_key(name)
                for name in self._stored_keys()
                if key is None or name == key or name.startswith(key + "/")
            ]
            return int(self._redis.delete(*names)) if names else 0

        return self._call(drop)

    def update(self, key: str, rule: Rule) -> Step:
        return self._compare_and_set(key, lambda: (0, self._get(key), ""), lambda got, _: rule(got))

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        keys = [*self._keys, _limits_key(lease.key)]

        def snapshot() -> tuple[int, str, str]:
            counted, seq, raw = self._script(
                self._reject, keys, [lease.token, prefix, self._forget_ms]
            )
            return int(counted), str(raw), str(seq)

        return self._compare_and_set(lease.key, snapshot, rule, rejected=lease.token)

    def _compare_and_set(
        self,
        key: str,
        snapshot: Callable[[], tuple[int, str, str]],
        rule: CountedRule,
        *,
        rejected: str = "",
    ) -> Step:
        """Apply ``rule`` to what ``snapshot`` read (the count the rule is given, the raw
        stored limits, and the counter when the write must also find no lease taken or
        given back since: else ``''``), and write its result if the store still holds what
        was read; else read again. ``rejected``: the token of the lease the rule reports the
        rejection of, marked in the step that writes (so written even when the limits stay
        as they were)."""
        cas_keys = [_limits_key(key), self._seq, self._keys[1], self._keys[3]]
        for attempt in range(_CAS_TRIES):
            counted, raw, seq = snapshot()
            stored, clamped = self._decode(key, raw)
            raw = raw if stored is not None else ""  # an unreadable value was dropped
            limits, change = rule(stored, counted)
            if not rejected and stored is not None and limits == stored and change is None:
                return limits, change  # nothing to write
            limits = not_learnt(limits, stored, clamped)
            value = dump_limits(limits, self._clock, _HOST, self._clock.time())
            if attempt == _CAS_TRIES - 1:  # another machine kept winning: overwrite
                raw, seq = self._get(key), ""
            args: list[str | int] = [raw, value, self._forget_ms, seq, rejected]
            done = self._call(lambda a=args: self._cas(keys=cas_keys, args=a))  # type: ignore[misc]
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
            self._forget_ms,
        ]
        added = self._script(self._take, [*self._keys, _limits_key(bounds.key)], args)
        if not int(added[0]):
            self._warn_far()
            return None
        with self._lock:
            self._held.add(token)
        self._renewer.start()
        return Lease(bounds.key, token, self, self._decode(bounds.key, str(added[1]))[0])

    def _warn_far(self) -> None:
        """Say once when leases of others that no renewal put so far ahead (an expiry
        further than twice a lease's time to live: written by hand, or by a holder that is
        no teamlead) are held while a grant is refused; they hold the run's slots until
        they expire. Looked at no more than once a second, and not once told."""
        now = self._clock.monotonic()
        if self._far_told or now - self._far_checked < 1.0:
            return
        self._far_checked = now

        def far() -> tuple[int, float]:
            seconds, micros = self._redis.time()
            ms = int(seconds) * 1000 + int(micros) // 1000
            found = self._redis.zrangebyscore(
                self._leases, ms + 2 * self._ttl_ms, "+inf", withscores=True
            )
            theirs = [float(at) for token, at in found if str(token) not in self._held]
            return len(theirs), (max(theirs, default=ms) - ms) / 1000

        count, within = self._call(far)
        if count:
            self._far_told = True
            self._warn(
                "far",
                f"{count} slot(s) are held by leases in {self._where} that no renewal set so "
                f"far ahead; requests wait for them to expire (within {within:.0f} s)",
            )

    def give_back(self, lease: Lease) -> None:
        with self._lock:
            if lease.token not in self._held:
                return
            self._held.discard(lease.token)
        self._script(self._give_back, self._keys, [lease.token])

    def answered(self, lease: Lease) -> None:
        if lease.token in self._held:
            self._script(self._answered, self._keys, [lease.token])

    def in_flight(self, prefix: str) -> int:
        (counted,) = self._script(self._count, self._keys, [prefix])
        return int(counted)

    def renew(self) -> None:
        """Move the expiry of this process's leases ``lease_ttl_s`` ahead."""
        with self._lock:
            tokens = sorted(self._held)
        if tokens:
            self._script(self._renew, self._keys, [self._ttl_ms, *tokens])

    def close(self) -> None:
        """Stop renewing and give back this process's leases (best effort, waiting a few
        times ``timeout_s`` at most: what is not given back expires by itself); idempotent."""
        self._renewer.stop()
        with self._lock:
            tokens, self._held = sorted(self._held), set()

        def release() -> None:
            try:
                if tokens:
                    self._give_back(keys=self._keys, args=tokens)
            finally:
                self._redis.close()

        bounded(release, 4 * self._timeout, "teamlead-redis-close")


_HOST = socket.gethostname()


def _limits_key(key: str) -> str:
    return _PREFIX + "limits:" + key


def _refusal(url: str) -> str:
    """What to do when Redis refused the connection for want of the right password."""
    parts = urlsplit(url)
    place = parts.netloc.rpartition("@")[2] or "localhost:6379"
    if parts.password is None:
        user = parts.username or ""
        db = parts.path.strip("/") or "0"
        return (
            f"Redis at {place} needs a password: put it in the URL, "
            f"{parts.scheme}://{user}:PASSWORD@{place}/{db}"
        )
    return f"Redis at {place} refused the user name or password in the URL"
