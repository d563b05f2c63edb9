"""The account of every teamlead process of the user on this machine: one SQLite file.

:class:`MachineAccount` keeps the learnt limits and the in-flight leases in
``<user cache dir>/teamlead/limits.sqlite3`` (:func:`default_path`), each change in one
``BEGIN IMMEDIATE`` transaction, so processes that start together still stay under one
limit and never lose each other's cut. No server is needed.

A lease names its process (host, pid and the process's start time, so a reused pid is not
mistaken for the holder) and expires ``lease_ttl_s`` after its last renewal; a thread of
the holding process renews its leases while it holds any. A lease of a dead process on
this host is dropped at the next grant (checked at most once a second), and any lease
that was not renewed in time (a hung process, another host on a shared home) expires. So
a crash never leaks a slot for longer than the lease time.

A lease also carries the file's sequence number when it was taken, whether the upstream
rejected it, and the sequence number when its answer was complete (``answered``); a lease
given back that was not rejected stays in ``released`` (its key and the sequence number it
ended at) while a live lease is older, so a rejection counts the requests that ended while
its 429 was on its way (see :meth:`Account.update_rejected`). A file of an
older teamlead gets the new columns and tables on first use; its processes keep working.

Learnt limits that nobody touched for ``forget_after_s`` read as never seen (the idle
reset of a process alone). Times are stored as wall-clock seconds. Any SQLite failure
(corrupt file, unwritable directory, a lock held too long) raises
:class:`~teamlead._governor.account.AccountError`, which the caller turns into one warning
and a fallback to this process alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from ..clock import SYSTEM_CLOCK, Clock
from .account import (
    AccountError,
    Bounds,
    CountedRule,
    Lease,
    LeaseRenewer,
    Rule,
    from_wall,
    limits_from_json,
    limits_to_json,
    to_wall,
)
from .aimd import Limits, Step

__all__ = ["MachineAccount", "default_path"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS limits (
    key TEXT PRIMARY KEY, data TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    token TEXT PRIMARY KEY, key TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    started REAL NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS released (key TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS released_by_seq ON released (seq);
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL);
"""
#: The columns a lease gained after the first release (a file made then has to get them).
_LEASE_COLUMNS = {
    "taken": "INTEGER NOT NULL DEFAULT 0",
    "rejected": "INTEGER NOT NULL DEFAULT 0",
    "answered": "INTEGER",
}
_NO_LEASE = 2**63 - 1
_LIVENESS_EVERY_S = 1.0


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


def _started(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return None
    except psutil.Error:  # not ours to inspect: assume it is alive
        return -1.0


class MachineAccount:
    """The account shared by this machine's processes through an SQLite file.

    Args:
        path: the database file (made, with its folder, on first use).
        clock: the governor's clock (rules run on its monotonic time; the file holds wall).
        lease_ttl_s: how long a lease lives without renewal.
        forget_after_s: learnt limits older than this (and no lease) read as never seen.
        busy_s: the longest wait for another process's transaction.
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
    ) -> None:
        self.path = path if path is not None else default_path()
        self._clock = clock
        self._ttl = lease_ttl_s
        self._forget = forget_after_s
        self._busy = busy_s
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._me = _started(self._pid) or 0.0
        self._nonce = os.urandom(4).hex()  # two accounts of one process never collide
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._held: set[str] = set()
        self._tokens = 0
        self._checked = -1e18
        self._renewer = LeaseRenewer(self.renew, lease_ttl_s / 3, "teamlead-lease-renewer")
        self._closed = False

    def describe(self) -> str:
        """Where the state is, for a warning line."""
        return f"the limits shared on this machine ({self.path})"

    # -- the connection -------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            db = sqlite3.connect(
                str(self.path), timeout=self._busy, isolation_level=None, check_same_thread=False
            )
            try:
                db.execute("PRAGMA journal_mode=WAL")
                # a cache: losing the last changes to a power cut is fine, a wait per
                # commit for the disk is not
                db.execute("PRAGMA synchronous=OFF")
                db.executescript(_SCHEMA)
                _add_lease_columns(db)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise AccountError("the machine's limits store was closed")
            try:
                db = self._connect()
                db.execute("BEGIN IMMEDIATE")
            except (sqlite3.Error, OSError) as exc:
                raise AccountError(f"{self.path}: {_reason(exc)}") from None
            try:
                yield db
                db.execute("COMMIT")
            except (sqlite3.Error, OSError) as exc:
                _rollback(db)
                raise AccountError(f"{self.path}: {_reason(exc)}") from None
            except BaseException:
                _rollback(db)
                raise

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads: one statement at a time, no write lock taken."""
        with self._lock:
            if self._closed:
                raise AccountError("the machine's limits store was closed")
            try:
                yield self._connect()
            except (sqlite3.Error, OSError) as exc:
                raise AccountError(f"{self.path}: {_reason(exc)}") from None

    def _offset(self) -> float:
        return self._clock.time() - self._clock.monotonic()

    # -- limits ---------------------------------------------------------------------------
    def limits(self, key: str) -> Limits | None:
        with self._reading() as db:
            return self._read(db, key)

    def _read(self, db: sqlite3.Connection, key: str) -> Limits | None:
        row = db.execute("SELECT data, updated FROM limits WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        now = self._clock.time()
        if now - float(row[1]) >= self._forget and self._count(db, key, now) == 0:
            return None  # learnt long ago and idle since: start afresh
        try:
            stored = limits_from_json(json.loads(row[0]))
        except ValueError:
            stored = None
        return None if stored is None else from_wall(stored, self._offset())

    def _write(self, db: sqlite3.Connection, key: str, limits: Limits) -> None:
        data = json.dumps(limits_to_json(to_wall(limits, self._offset())))
        db.execute(
            "INSERT OR REPLACE INTO limits (key, data, updated) VALUES (?, ?, ?)",
            (key, data, self._clock.time()),
        )

    def update(self, key: str, rule: Rule) -> Step:
        # Most reports change nothing (a stream that starts, a success at the ceiling): a
        # rule that leaves what it read as it was needs no write, nor the write lock.
        with self._reading() as db:
            seen = self._read(db, key)
        if seen is not None:
            limits, change = rule(seen)
            if limits == seen and change is None:
                return limits, change
        with self._transaction() as db:
            limits, change = rule(self._read(db, key))
            self._write(db, key, limits)
            return limits, change

    def update_rejected(self, lease: Lease, prefix: str, rule: CountedRule) -> Step:
        with self._transaction() as db:
            now = self._clock.time()
            since = _seq(db)
            if lease.token in self._held:
                db.execute("UPDATE leases SET rejected = 1 WHERE token = ?", (lease.token,))
                row = db.execute("SELECT taken FROM leases WHERE token = ?", (lease.token,))
                taken = row.fetchone()
                since = since if taken is None else int(taken[0])
            match, args = _key_matches(prefix)
            running = db.execute(
                "SELECT COUNT(*) FROM leases WHERE expires > ? AND rejected = 0 "
                f"AND (answered IS NULL OR answered > ?) AND {match}",
                (now, since, *args),
            ).fetchone()
            ended = db.execute(
                f"SELECT COUNT(*) FROM released WHERE seq > ? AND {match}", (since, *args)
            ).fetchone()
            limits, change = rule(self._read(db, lease.key), int(running[0]) + int(ended[0]))
            self._write(db, lease.key, limits)
            return limits, change

    # -- leases ---------------------------------------------------------------------------
    def _count(self, db: sqlite3.Connection, prefix: str, now: float) -> int:
        """Live leases of ``prefix``."""
        match, args = _key_matches(prefix)
        row = db.execute(
            f"SELECT COUNT(*) FROM leases WHERE expires > ? AND {match}", (now, *args)
        ).fetchone()
        return int(row[0])

    def _purge(self, db: sqlite3.Connection, now: float, *, force: bool = False) -> None:
        """Drop expired leases and those of dead processes of this host (the counts skip
        expired ones anyway, so this runs at most once a second unless ``force``)."""
        if not force and now - self._checked < _LIVENESS_EVERY_S:
            return
        self._checked = now
        db.execute("DELETE FROM leases WHERE expires <= ?", (now,))
        # no live lease is older than these: no rejection will count them again
        db.execute(
            "DELETE FROM released WHERE seq <= "
            "COALESCE((SELECT MIN(taken) FROM leases WHERE expires > ?), ?)",
            (now, _NO_LEASE),
        )
        rows = db.execute(
            "SELECT DISTINCT pid, started FROM leases WHERE host = ? AND pid != ?",
            (self._host, self._pid),
        ).fetchall()
        for pid, started in rows:
            actual = _started(int(pid))
            if actual is None or (actual >= 0 and abs(actual - float(started)) > 1.0):
                db.execute(
                    "DELETE FROM leases WHERE host = ? AND pid = ? AND started = ?",
                    (self._host, pid, started),
                )

    def _room(self, db: sqlite3.Connection, bounds: Bounds, now: float) -> bool:
        if self._count(db, bounds.key, now) >= bounds.limit:
            return False
        if bounds.provider_limit is not None and (
            self._count(db, bounds.provider, now) >= bounds.provider_limit
        ):
            return False
        if bounds.total_limit is not None:
            total = db.execute("SELECT COUNT(*) FROM leases WHERE expires > ?", (now,)).fetchone()
            if int(total[0]) >= bounds.total_limit:
                return False
        return True

    def take(self, bounds: Bounds) -> Lease | None:
        with self._transaction() as db:
            now = self._clock.time()
            self._purge(db, now)
            if not self._room(db, bounds, now):
                self._purge(db, now, force=True)  # a dead holder may be what fills it
                if not self._room(db, bounds, now):
                    return None
            limits = self._read(db, bounds.key)
            if limits is None:  # forgotten (or never seen): so it stays once a lease is live
                db.execute("DELETE FROM limits WHERE key = ?", (bounds.key,))
            self._tokens += 1
            token = f"{self._host}:{self._pid}:{self._nonce}:{self._tokens}"
            db.execute(
                "INSERT INTO leases (token, key, host, pid, started, expires, taken) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (token, bounds.key, self._host, self._pid, self._me, now + self._ttl, _next(db)),
            )
            self._held.add(token)
        self._renewer.start()
        return Lease(bounds.key, token, self, limits)

    def give_back(self, lease: Lease) -> None:
        if lease.token not in self._held:
            return
        self._held.discard(lease.token)
        with self._transaction() as db:
            row = db.execute(
                "SELECT key, rejected, answered FROM leases WHERE token = ?", (lease.token,)
            ).fetchone()
            db.execute("DELETE FROM leases WHERE token = ?", (lease.token,))
            seq = _next(db)
            if row is not None and not row[1]:
                ended = seq if row[2] is None else int(row[2])
                db.execute("INSERT INTO released (key, seq) VALUES (?, ?)", (row[0], ended))

    def answered(self, lease: Lease) -> None:
        if lease.token not in self._held:
            return
        with self._transaction() as db:
            db.execute(
                "UPDATE leases SET answered = ? WHERE token = ? AND answered IS NULL",
                (_next(db), lease.token),
            )

    def in_flight(self, prefix: str) -> int:
        with self._reading() as db:
            return self._count(db, prefix, self._clock.time())

    def renew(self) -> None:
        """Move the expiry of this process's leases ``lease_ttl_s`` ahead."""
        if not self._held:
            return
        with self._transaction() as db:
            db.execute(
                "UPDATE leases SET expires = ? WHERE host = ? AND pid = ? AND started = ?",
                (self._clock.time() + self._ttl, self._host, self._pid, self._me),
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


def _key_matches(prefix: str) -> tuple[str, tuple[object, ...]]:
    """The SQL condition (and its arguments) for the keys equal to ``prefix``, or starting
    with it when it ends with ``/``."""
    if prefix.endswith("/"):
        return "substr(key, 1, ?) = ?", (len(prefix), prefix)
    return "key = ?", (prefix,)


def _seq(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT seq FROM counter WHERE id = 1").fetchone()
    return 0 if row is None else int(row[0])


def _next(db: sqlite3.Connection) -> int:
    """The file's next sequence number (inside the caller's transaction)."""
    if db.execute("UPDATE counter SET seq = seq + 1 WHERE id = 1").rowcount == 0:
        db.execute("INSERT INTO counter (id, seq) VALUES (1, 1)")
    return _seq(db)


def _add_lease_columns(db: sqlite3.Connection) -> None:
    """Give a file made by an older teamlead the lease columns it lacks (once, atomically:
    two processes may open it together)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(leases)")}
    if have >= _LEASE_COLUMNS.keys():
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        have = {row[1] for row in db.execute("PRAGMA table_info(leases)")}
        for name, kind in _LEASE_COLUMNS.items():
            if name not in have:
                db.execute(f"ALTER TABLE leases ADD COLUMN {name} {kind}")
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]


def _rollback(db: sqlite3.Connection) -> None:
    # an error here means no transaction is open (it failed to begin, or already ended)
    with contextlib.suppress(sqlite3.Error):
        db.execute("ROLLBACK")
