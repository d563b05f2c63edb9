"""The account of every teamlead process of the user on this machine: one SQLite file.

:class:`MachineAccount` keeps the learnt limits and the in-flight leases in
``<user cache dir>/teamlead/limits.sqlite3`` (:func:`default_path`), each change in one
``BEGIN IMMEDIATE`` transaction, so processes that start together still stay under one
limit and never lose each other's cut. No server is needed.

A lease names its process (host, pid and the process's start time, so a reused pid is not
mistaken for the holder) and expires ``lease_ttl_s`` after its last renewal by a thread of
that process; a lease of a dead process on this host is dropped at the next grant. So a
crash never leaks a slot for longer than the lease time. A lease also carries the sequence
numbers a rejection counts by (see :meth:`Account.update_rejected`), and one given back
that was not rejected stays in ``released`` while a live lease is older. A file of an older
teamlead gets the new columns and tables on first use. Learnt limits that nobody touched
for ``forget_after_s`` read as never seen (the idle reset of a process alone). Times are
stored as wall-clock seconds.

The file is untrusted input (see :mod:`.codecs`): SQLite keeps any type in any column, so
every row is read with its type, range and age checked, and one that fails is dropped where
it is found, with one warning per kind for the process. A file that is not an SQLite
database, or one that is damaged or whose tables are not teamlead's, is moved aside
(``limits.sqlite3.corrupt-<UTC time>``) and made afresh, with one warning saying where it
went. Any other SQLite failure (an unwritable directory, a lock held too long) raises
:class:`~teamlead._governor.accounts.base.AccountError`, which the caller turns into one
warning and a fallback to this process alone.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..._procs import runs, started_here
from ...clock import SYSTEM_CLOCK, Clock, block_until
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
    from_wall,
    not_learnt,
    read_clamped,
    read_count,
    read_time,
    stored_limits,
)
from .renewer import LeaseRenewer

__all__ = ["MachineAccount", "default_path"]

_T = TypeVar("_T")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS limits ("
    " key TEXT PRIMARY KEY, data TEXT NOT NULL, updated REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS leases ("
    " token TEXT PRIMARY KEY, key TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
    " started REAL NOT NULL, expires REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS released (key TEXT NOT NULL, seq INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS released_by_seq ON released (seq)",
    "CREATE TABLE IF NOT EXISTS counter ("
    " id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL)",
)
#: The columns a lease gained after the first release (a file made then has to get them).
_LEASE_COLUMNS = {
    "taken": "INTEGER NOT NULL DEFAULT 0",
    "rejected": "INTEGER NOT NULL DEFAULT 0",
    "answered": "INTEGER",
}
#: The columns each table has had from the first release; a file whose tables lack one is
#: not teamlead's.
_COLUMNS = {
    "limits": {"key", "data", "updated"},
    "leases": {"token", "key", "host", "pid", "started", "expires"},
    "released": {"key", "seq"},
    "counter": {"id", "seq"},
}
_NO_LEASE = 2**63 - 1
_LIVENESS_EVERY_S = 1.0
#: A lease counts while its expiry is ahead, and not too far ahead to be believed. (SQLite
#: orders text above every number: a lease whose expiry is text would else never expire.)
_LIVE = "expires > ? AND expires <= ?"
#: A lease none of whose fields may be trusted: a process, a start or an expiry that is no
#: number in range, a flag or a sequence number that is no integer. (A start is the
#: operating system's time, not the account clock's: it need only be a finite number.)
#: Arguments: the latest expiry, the largest sequence number (twice).
_VOID_LEASE = """
    typeof(token) != 'text' OR typeof(key) != 'text' OR typeof(host) != 'text'
    OR typeof(pid) != 'integer' OR pid < 1 OR pid > 4294967295
    OR typeof(started) NOT IN ('integer', 'real') OR started < -1 OR started > 1e15
    OR typeof(expires) NOT IN ('integer', 'real') OR expires > ?
    OR typeof(taken) != 'integer' OR taken < 0 OR taken > ?
    OR typeof(rejected) != 'integer' OR rejected NOT IN (0, 1)
    OR (answered IS NOT NULL
        AND (typeof(answered) != 'integer' OR answered < 0 OR answered > ?))
"""
_VOID_RELEASED = "typeof(key) != 'text' OR typeof(seq) != 'integer' OR seq < 0 OR seq > ?"
#: The sequence numbers in use (the counter must stay past them).
_SEQS_IN_USE = """
SELECT MAX(n) FROM (
    SELECT taken AS n FROM leases WHERE typeof(taken) = 'integer' AND taken BETWEEN 0 AND ?1
    UNION ALL SELECT answered FROM leases
        WHERE typeof(answered) = 'integer' AND answered BETWEEN 0 AND ?1
    UNION ALL SELECT seq FROM released WHERE typeof(seq) = 'integer' AND seq BETWEEN 0 AND ?1)
"""
#: SQLite's result codes for a file that is no database, or a damaged one.
_CORRUPT_CODES = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
_BUSY = 5  # SQLITE_BUSY


class _Unfit(Exception):
    """The file opens as an SQLite database but cannot be used: a check found it damaged,
    or its tables are not teamlead's."""


def default_path(environ: dict[str, str] | None = None) -> Path:
    """``limits.sqlite3`` in teamlead's folder of the user's cache directory.

    ``$XDG_CACHE_HOME`` (else ``~/.cache``) on Linux, ``~/Library/Caches`` on macOS,
    ``%LOCALAPPDATA%`` on Windows.
    """
    env = os.environ if environ is None else environ
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif sys.platform == "win32" and env.get("LOCALAPPDATA"):
        base = Path(env["LOCALAPPDATA"])
    else:
        base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "teamlead" / "limits.sqlite3"


class MachineAccount:
    """The account shared by this machine's processes through an SQLite file.

    Args:
        path: the database file (made, with its folder, on first use).
        clock: the governor's clock (rules run on its monotonic time; the file holds wall).
        lease_ttl_s: how long a lease lives without renewal (at most
            :data:`~.codecs.MAX_LEASE_S`: the others would read a longer one as void).
        forget_after_s: learnt limits older than this (and no lease) read as never seen.
        busy_s: the longest wait for another process's transaction.
        warnings: where a bad row found in the file is told, once per kind (default: the
            account's own).
    """

    shared = True

    def __init__(
        self,
        path: Path | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        lease_ttl_s: float = 30.0,
        forget_after_s: float = 300.0,
        busy_s: float = 0.5,
        warnings: WarnOnce | None = None,
    ) -> None:
        self.path = path if path is not None else default_path()
        self._clock = clock
        self._ttl = min(lease_ttl_s, MAX_LEASE_S)
        self._forget = forget_after_s
        self._busy = busy_s
        self._warnings = warnings if warnings is not None else WarnOnce()
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._me = started_here() or 0.0
        self._nonce = os.urandom(4).hex()  # two accounts of one process never collide
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._held: set[str] = set()
        self._parsed: dict[str, tuple[object, object, float, float, tuple[Limits, bool]]] = {}
        self._tokens = 0
        self._checked = -1e18
        self._far_told = False  # the leases set far ahead were told of
        self._renewer = LeaseRenewer(
            self.renew, self._ttl / 3, "teamlead-lease-renewer", stop_s=2 * busy_s
        )
        self._closed = False

    def describe(self) -> str:
        return f"the limits shared on this machine ({self.path})"

    def _warn(self, kind: str, message: str) -> None:
        self._warnings(f"machine:{kind}", f"shared limits: {message}")

    # -- the connection -------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            db = sqlite3.connect(
                str(self.path), timeout=self._busy, isolation_level=None, check_same_thread=False
            )
            try:
                _check(db)  # before anything is written: a file moved aside stays as found
                _to_wal(db, self._busy)
                # a cache: losing the last changes to a power cut is fine, a wait per
                # commit for the disk is not
                db.execute("PRAGMA synchronous=OFF")
                if not _made(db):  # made under the write lock: two may make them at once
                    _transaction(db, _make_tables)
            except BaseException:
                db.close()
                raise
            self._db = db
            self._renewer.start()  # now, not on the first lease's way (it renews none yet)
        return self._db

    def _run(self, body: Callable[[sqlite3.Connection], _T], *, write: bool) -> _T:
        """``body`` on the file: in one ``BEGIN IMMEDIATE`` transaction when ``write``,
        else one statement at a time with no write lock taken. A file found corrupt is
        moved aside and ``body`` runs once more on a fresh one; any other SQLite failure
        (or a corrupt file that cannot be moved) is an :class:`AccountError`."""
        with self._lock:
            for retry in (False, True):
                if self._closed:
                    raise AccountError("the machine's limits store was closed")
                try:
                    db = self._connect()
                    return _transaction(db, body) if write else body(db)
                except (sqlite3.Error, OSError, _Unfit) as exc:
                    if retry or not _corrupt(exc):
                        raise AccountError(f"{self.path}: {_reason(exc)}") from None
                    self._set_aside(_reason(exc))
            raise AssertionError("unreachable: the second try returns or raises")

    def _set_aside(self, reason: str) -> None:
        """Move the corrupt file (with its ``-wal`` and ``-shm``) aside, so the next
        connection makes a fresh one.

        Another process may have found it corrupt too and made the fresh one already: the
        file is checked again first, and moved only if it is still the one found corrupt.

        Raises:
            AccountError: it is no regular file (a symlink, a FIFO: not ours to move), or
                it cannot be moved (a read-only folder).
        """
        db, self._db, path = self._db, None, self.path
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
        try:
            found = path.lstat()
        except FileNotFoundError:
            return  # moved aside by another process already
        except OSError as exc:
            raise AccountError(f"{path}: {reason}") from exc
        if not stat.S_ISREG(found.st_mode):
            raise AccountError(f"{path}: {reason}")
        if _damage(path) is None:
            return  # another process has made it afresh meanwhile
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock.time()))
        dest = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while dest.exists():
            n += 1
            dest = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        try:
            now = path.lstat()
            if (now.st_dev, now.st_ino) != (found.st_dev, found.st_ino):
                return  # replaced by another process meanwhile: use that one
            path.rename(dest)
        except FileNotFoundError:
            return
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise AccountError(f"{path}: {reason}; it cannot be moved aside: {why}") from None
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(OSError):
                Path(f"{path}{suffix}").rename(f"{dest}{suffix}")
        self._warn(
            "corrupt", f"{path} was corrupt ({reason}); moved it to {dest}, and a fresh one is used"
        )

    @staticmethod
    def _live(now: float) -> tuple[float, float]:
        """The arguments of :data:`_LIVE`: now, and the latest expiry to be believed."""
        return now, now + MAX_LEASE_S + MAX_AHEAD_S

    # -- limits ---------------------------------------------------------------------------
    def limits(self, key: str) -> Limits | None:
        return self._run(lambda db: self._read_marked(db, key)[0], write=False)

    def _read_marked(self, db: sqlite3.Connection, key: str) -> tuple[Limits | None, bool]:
        """``key``'s limits, and whether their pause was clamped (see
        :func:`~.codecs.read_clamped`: it is not written back)."""
        row = db.execute("SELECT data, updated FROM limits WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None, False
        data, updated = row
        now = self._clock.time()
        written, found = self._parse(key, data, updated, now)
        if written is None or found is None:
            self._warn("limits", f"dropped the unreadable learnt limits of {key!r} in {self.path}")
            # best effort (a writer holding the file only delays it): this exact row, so
            # one another process has just written in its place stays
            with contextlib.suppress(sqlite3.OperationalError):
                db.execute(
                    "DELETE FROM limits WHERE key = ? AND data IS ? AND updated IS ?",
                    (key, data, updated),
                )
            return None, False
        if now - written >= self._forget and self._count(db, key, now) == 0:
            return None, False  # learnt long ago and idle since: start afresh
        stored, clamped = found
        if clamped:
            self._warn("pause", clamped_note(key, str(self.path), stored, now))
        return from_wall(stored, self._clock), clamped

    def _parse(
        self, key: str, data: object, updated: object, now: float
    ) -> tuple[float | None, tuple[Limits, bool] | None]:
        """A row's write time and limits read at ``now`` (:func:`read_clamped`); a key's last
        parse is kept while it reads the same later (written before, ``bad_at`` past)."""
        kept = self._parsed.get(key)
        if kept is not None and kept[0] == data and kept[1] == updated and now >= kept[2]:
            return kept[3], kept[4]
        written = read_time(updated, latest=now + MAX_AHEAD_S)
        found = None if written is None else read_clamped(data, now=now, written=written)
        if found is not None and written is not None and written <= now and found[0].bad_at < now:
            self._parsed[key] = (data, updated, now, written, found)
        return written, found

    def _store(self, db: sqlite3.Connection, key: str, rule: Rule) -> Step:
        """Apply ``rule`` to ``key``'s limits and write its result (inside the caller's
        transaction)."""
        read, clamped = self._read_marked(db, key)
        limits, change = rule(read)
        limits = not_learnt(limits, read, clamped)
        db.execute(
            "INSERT OR REPLACE INTO limits (key, data, updated) VALUES (?, ?, ?)",
            (key, dump_limits(limits, self._clock, self._host), self._clock.time()),
        )
        return limits, change

    def update(self, key: str, rule: Rule) -> Step:
        # Most reports change nothing (a stream that starts, a success at the ceiling): a
        # rule that leaves what it read as it was needs no write, nor the write lock.
        seen = self.limits(key)
        if seen is not None:
            limits, change = rule(seen)
            if limits == seen and change is None:
                return limits, change

        return self._run(lambda db: self._store(db, key, rule), write=True)

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        def write(db: sqlite3.Connection) -> Step:
            now = self._clock.time()
            since = self._seq(db)
            if lease.token in self._held:
                db.execute("UPDATE leases SET rejected = 1 WHERE token = ?", (lease.token,))
                row = db.execute("SELECT taken FROM leases WHERE token = ?", (lease.token,))
                taken = row.fetchone()
                if taken is not None:
                    found = read_count(taken[0], high=since)
                    since = since if found is None else found
            match, args = _key_matches(prefix)
            running = db.execute(
                f"SELECT COUNT(*) FROM leases WHERE {_LIVE} AND rejected = 0 "
                f"AND (answered IS NULL OR answered > ?) AND {match}",
                (*self._live(now), since, *args),
            ).fetchone()
            ended = db.execute(
                f"SELECT COUNT(*) FROM released WHERE seq > ? AND {match}", (since, *args)
            ).fetchone()
            counted = int(running[0]) + int(ended[0])
            return self._store(db, lease.key, lambda read: rule(read, counted))

        return self._run(write, write=True)

    # -- leases ---------------------------------------------------------------------------
    def _count(self, db: sqlite3.Connection, prefix: str, now: float) -> int:
        """Live leases of ``prefix``."""
        match, args = _key_matches(prefix)
        row = db.execute(
            f"SELECT COUNT(*) FROM leases WHERE {_LIVE} AND {match}", (*self._live(now), *args)
        ).fetchone()
        return int(row[0])

    def _purge(self, db: sqlite3.Connection, now: float, *, force: bool = False) -> None:
        """Drop void and expired leases, those of dead processes of this host, and the
        unreadable ``released`` rows (the counts skip expired leases anyway, so this runs at
        most once a second unless ``force``)."""
        if not force and now - self._checked < _LIVENESS_EVERY_S:
            return
        self._checked = now
        latest = self._live(now)[1]
        void = db.execute(
            f"DELETE FROM leases WHERE {_VOID_LEASE}", (latest, MAX_SEQ, MAX_SEQ)
        ).rowcount
        if void > 0:
            self._warn(
                "lease",
                f"dropped a lease that cannot be read (its expiry, process or start is not "
                f"a number in range) from {self.path}",
            )
        if db.execute(f"DELETE FROM released WHERE {_VOID_RELEASED}", (MAX_SEQ,)).rowcount > 0:
            self._warn(
                "released", f"dropped an unreadable record of an ended request from {self.path}"
            )
        db.execute("DELETE FROM leases WHERE expires <= ?", (now,))
        # this host's clock wrote every expiry of this host: none further ahead than a
        # lease lives was set by a renewal, so it expires by that bound from when seen
        db.execute(
            "UPDATE leases SET expires = ?1 WHERE host = ?2 AND expires > ?1",
            (now + MAX_LEASE_S, self._host),
        )
        # no live lease is older than these: no rejection will count them again
        db.execute(
            "DELETE FROM released WHERE seq <= "
            f"COALESCE((SELECT MIN(taken) FROM leases WHERE {_LIVE}), ?)",
            (*self._live(now), _NO_LEASE),
        )
        rows = db.execute(
            "SELECT DISTINCT pid, started FROM leases WHERE host = ? AND pid != ?",
            (self._host, self._pid),
        ).fetchall()
        for pid, started in rows:
            # 0: its process could not read its start; one not ours to inspect is alive
            if not runs(pid, started or None, unreadable=True):
                db.execute(
                    "DELETE FROM leases WHERE host = ? AND pid = ? AND started = ?",
                    (self._host, pid, started),
                )

    def _warn_far(self, db: sqlite3.Connection, bounds: Bounds, now: float) -> None:
        """Say once when leases of other processes of this host that no renewal put so far
        ahead (an expiry further than twice a lease's time to live; this host's clock
        wrote them, so no skew explains it) are among those that fill ``bounds``: a row
        written by hand, or naming a live process that is no teamlead, holds the run's
        slots until it expires."""
        if self._far_told:
            return
        match, args = _key_matches(bounds.provider)
        count, latest = db.execute(
            f"SELECT COUNT(*), MAX(expires) FROM leases WHERE {_LIVE} AND {match} "
            "AND expires > ? AND host = ? AND NOT (pid = ? AND started = ?)",
            (*self._live(now), *args, now + 2 * self._ttl, self._host, self._pid, self._me),
        ).fetchone()
        if count:
            self._far_told = True
            self._warn(
                "far",
                f"{count} slot(s) of {bounds.provider}* are held by leases in {self.path} "
                f"that no renewal set so far ahead; requests wait for them to expire (within "
                f"{float(latest) - now:.0f} s)",
            )

    def _room(self, db: sqlite3.Connection, bounds: Bounds, now: float) -> bool:
        def total() -> int:
            row = db.execute(f"SELECT COUNT(*) FROM leases WHERE {_LIVE}", self._live(now))
            return int(row.fetchone()[0])

        return bounds.admit(lambda prefix: self._count(db, prefix, now), total)

    def take(self, bounds: Bounds) -> Lease | None:
        def write(db: sqlite3.Connection) -> Lease | None:
            now = self._clock.time()
            self._purge(db, now)
            if not self._room(db, bounds, now):
                self._purge(db, now, force=True)  # a dead holder may be what fills it
                if not self._room(db, bounds, now):
                    self._warn_far(db, bounds, now)
                    return None
            limits = self._read_marked(db, bounds.key)[0]
            if limits is None:  # forgotten (or never seen): so it stays once a lease is live
                db.execute("DELETE FROM limits WHERE key = ?", (bounds.key,))
            self._tokens += 1
            token = f"{self._host}:{self._pid}:{self._nonce}:{self._tokens}"
            db.execute(
                "INSERT INTO leases (token, key, host, pid, started, expires, taken) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    token,
                    bounds.key,
                    self._host,
                    self._pid,
                    self._me,
                    now + self._ttl,
                    self._next(db),
                ),
            )
            self._held.add(token)
            return Lease(bounds.key, token, self, limits)

        return self._run(write, write=True)

    def give_back(self, lease: Lease) -> None:
        if lease.token not in self._held:
            return
        self._held.discard(lease.token)

        def write(db: sqlite3.Connection) -> None:
            row = db.execute(
                "SELECT key, rejected, answered FROM leases WHERE token = ?", (lease.token,)
            ).fetchone()
            db.execute("DELETE FROM leases WHERE token = ?", (lease.token,))
            seq = self._next(db)
            if row is None:
                return
            key, rejected, answered = row
            if isinstance(key, str) and read_count(rejected, high=0) == 0:
                ended = read_count(answered, high=seq)
                ended = seq if ended is None else ended
                db.execute("INSERT INTO released (key, seq) VALUES (?, ?)", (key, ended))

        self._run(write, write=True)

    def answered(self, lease: Lease) -> None:
        if lease.token not in self._held:
            return
        self._run(
            lambda db: db.execute(
                "UPDATE leases SET answered = ? WHERE token = ? AND answered IS NULL",
                (self._next(db), lease.token),
            ),
            write=True,
        )

    def in_flight(self, prefix: str) -> int:
        return self._run(lambda db: self._count(db, prefix, self._clock.time()), write=False)

    def stored(self) -> list[StoredLimits]:
        """Every bucket's learnt limits the file holds, readable ones only (for
        ``teamlead limits``; a request's read drops the others)."""
        now = self._clock.time()
        rows = self._run(
            lambda db: db.execute("SELECT key, data, updated FROM limits ORDER BY key").fetchall(),
            write=False,
        )
        found = (stored_limits(key, data, updated, now=now) for key, data, updated in rows)
        return [entry for entry in found if entry is not None]

    def forget(self, key: str | None = None) -> int:
        """Drop the learnt limits (pauses included) of ``key``: a stored key, or an
        account (its every bucket); all of them when ``None``. Leases are left alone: their
        processes hold them. Returns how many were dropped."""

        def drop(db: sqlite3.Connection) -> int:
            if key is None:
                return db.execute("DELETE FROM limits").rowcount
            match, args = _key_matches(key + "/")
            return db.execute(f"DELETE FROM limits WHERE key = ? OR {match}", (key, *args)).rowcount

        return int(self._run(drop, write=True))

    def renew(self) -> None:
        """Move the expiry of this process's leases ``lease_ttl_s`` ahead."""
        if not self._held:
            return
        self._run(
            lambda db: db.execute(
                "UPDATE leases SET expires = ? WHERE host = ? AND pid = ? AND started = ?",
                (self._clock.time() + self._ttl, self._host, self._pid, self._me),
            ),
            write=True,
        )

    def close(self) -> None:
        """Stop renewing, give back this process's leases, close the file; idempotent."""
        self._renewer.stop()
        with self._lock:
            if self._closed:
                return
            db, self._db = self._db, None
            self._closed = True
            if db is None:
                return
            try:
                if self._held:
                    db.execute(
                        "DELETE FROM leases WHERE host = ? AND pid = ? AND started = ?",
                        (self._host, self._pid, self._me),
                    )
            except sqlite3.Error:
                pass  # they expire by themselves
            finally:
                self._held.clear()
                db.close()

    # -- the sequence counter -------------------------------------------------------------
    def _seq(self, db: sqlite3.Connection) -> int:
        """The file's sequence number (inside the caller's transaction); one that cannot be
        read is set past every number in use, so the order of what is stored holds."""
        row = db.execute("SELECT seq FROM counter WHERE id = 1").fetchone()
        if row is None:
            return 0
        seq = read_count(row[0], high=MAX_SEQ - 1)
        if seq is not None:
            return seq
        in_use = db.execute(_SEQS_IN_USE, (MAX_SEQ,)).fetchone()[0]
        seq = read_count(in_use) or 0
        db.execute("UPDATE counter SET seq = ? WHERE id = 1", (seq,))
        self._warn(
            "counter", f"the sequence number in {self.path} could not be read; set it to {seq}"
        )
        return seq

    def _next(self, db: sqlite3.Connection) -> int:
        """The file's next sequence number (inside the caller's transaction)."""
        seq = self._seq(db) + 1
        if db.execute("UPDATE counter SET seq = ? WHERE id = 1", (seq,)).rowcount == 0:
            db.execute("INSERT INTO counter (id, seq) VALUES (1, ?)", (seq,))
        return seq


def _key_matches(prefix: str) -> tuple[str, tuple[object, ...]]:
    """The SQL condition (and its arguments) for the keys equal to ``prefix``, or starting
    with it when it ends with ``/``."""
    if prefix.endswith("/"):
        return "substr(key, 1, ?) = ?", (len(prefix), prefix)
    return "key = ?", (prefix,)


def _transaction(db: sqlite3.Connection, body: Callable[[sqlite3.Connection], _T]) -> _T:
    """``body`` in one ``BEGIN IMMEDIATE`` transaction, rolled back if it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = body(db)
        db.execute("COMMIT")
    except BaseException:
        # an error here means no transaction is open (it failed to begin, or already ended)
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    return result


def _to_wal(db: sqlite3.Connection, busy_s: float) -> None:
    """Put the file in WAL mode (once per file). Processes that make the file together are
    refused at once, not after a wait (SQLite does not wait where waiting could deadlock):
    each tries again, for ``busy_s``."""

    refused: list[sqlite3.OperationalError] = []

    def switched() -> bool:
        try:
            db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) != _BUSY and "locked" not in str(exc):
                raise
            refused.append(exc)
            return False
        return True

    if not block_until(switched, busy_s, first_s=0.002, most_s=0.05):
        raise refused[-1]


def _made(db: sqlite3.Connection) -> bool:
    """Whether the file has every table, the index and the lease columns (read without a
    lock: a file made already is not written to on each start)."""
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    have = {row[1] for row in db.execute("PRAGMA table_info(leases)")}
    return names >= {*_COLUMNS, "released_by_seq"} and have >= _LEASE_COLUMNS.keys()


def _make_tables(db: sqlite3.Connection) -> None:
    """The tables, and the lease columns a file made by an older teamlead lacks."""
    for statement in _SCHEMA:
        db.execute(statement)
    have = {row[1] for row in db.execute("PRAGMA table_info(leases)")}
    for name, kind in _LEASE_COLUMNS.items():
        if name not in have:
            db.execute(f"ALTER TABLE leases ADD COLUMN {name} {kind}")


def _check(db: sqlite3.Connection) -> None:
    """Raise :class:`_Unfit` when SQLite's quick check finds the file damaged (a truncated
    file opens, and fails only at the page it lacks), or a table lacks a column teamlead has
    always used (a missing table is made, a missing later column added, by
    :meth:`MachineAccount._connect`)."""
    found = db.execute("PRAGMA quick_check(1)").fetchone()
    if found is None or found[0] != "ok":
        detail = "" if found is None else str(found[0]).splitlines()[0]
        raise _Unfit(f"database disk image is malformed ({detail[:120]})")
    for table, columns in _COLUMNS.items():
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if have and not columns <= have:
            missing = ", ".join(sorted(columns - have))
            raise _Unfit(f"its {table} table is not teamlead's: it lacks {missing}")


def _damage(path: Path) -> str | None:
    """What is wrong with the database at ``path`` (``None``: nothing), found without
    writing to it."""
    try:
        with contextlib.closing(sqlite3.connect(str(path), timeout=0.1)) as db:
            _check(db)
    except (sqlite3.Error, _Unfit) as exc:
        return _reason(exc) if _corrupt(exc) else None
    return None


def _corrupt(exc: BaseException) -> bool:
    """Whether ``exc`` says the file is no SQLite database, or a damaged one."""
    if isinstance(exc, _Unfit):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if isinstance(code, int):
        return code & 0xFF in _CORRUPT_CODES
    text = str(exc)
    return "file is not a database" in text or "malformed" in text


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]
