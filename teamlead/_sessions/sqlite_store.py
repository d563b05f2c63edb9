"""Sessions in one embedded SQLite file: :class:`SQLiteSessionStore`.

For one machine (or a disk whose locking SQLite trusts): no server to run, every process
of the machine sees the same sessions. The tables (``PRAGMA user_version`` 1):

- ``teamlead_session_entries``: one row per entry (``seq`` keeps append order), with its
  ``uuid`` unique per key, so a batch the SDK retried is stored once;
- ``teamlead_session_keys``: the keys that have entries, each with its last write
  (epoch ms, strictly increasing per key);
- ``teamlead_session_summaries``: the SDK's folded summary per session, folded inside the
  append's transaction (two writers never lose each other's fold);
- ``teamlead_session_status``: teamlead's status record of the session's last run.

The file is opened in WAL mode with a busy timeout, and every call runs in a worker
thread, so the event loop never waits on the disk. What is read back is untrusted
(:mod:`.stored`): an unreadable row is skipped with one warning per kind. A file that is
no SQLite database, or a disk error, raises :class:`~teamlead.errors.SessionStoreError`.

teamlead changes no file it did not make: the database is made (mode 0600) only where no
file is; an existing file that is not an SQLite database, or is empty, is refused untouched
(its mode and content unchanged), never converted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from claude_agent_sdk import fold_session_summary
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from ..clock import SYSTEM_CLOCK
from ..errors import SessionStoreError
from .status import SessionStatus, read_status
from .stored import (
    EntryReader,
    WarnOnce,
    dump_entry,
    dump_json,
    entry_uuid,
    log,
    read_summary,
    readable_summaries,
    subpath_of,
)

__all__ = ["SQLiteSessionStore"]

_T = TypeVar("_T")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS teamlead_session_keys (
    project_key TEXT NOT NULL, session_id TEXT NOT NULL, subpath TEXT NOT NULL,
    mtime INTEGER NOT NULL, PRIMARY KEY (project_key, session_id, subpath));
CREATE TABLE IF NOT EXISTS teamlead_session_entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    project_key TEXT NOT NULL, session_id TEXT NOT NULL, subpath TEXT NOT NULL,
    uuid TEXT, body TEXT NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS teamlead_session_entries_uuid
    ON teamlead_session_entries (project_key, session_id, subpath, uuid)
    WHERE uuid IS NOT NULL;
CREATE INDEX IF NOT EXISTS teamlead_session_entries_key
    ON teamlead_session_entries (project_key, session_id, subpath, seq);
CREATE TABLE IF NOT EXISTS teamlead_session_summaries (
    project_key TEXT NOT NULL, session_id TEXT NOT NULL, mtime INTEGER NOT NULL,
    data TEXT NOT NULL, PRIMARY KEY (project_key, session_id));
CREATE TABLE IF NOT EXISTS teamlead_session_status (
    project_key TEXT NOT NULL, session_id TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (project_key, session_id));
PRAGMA user_version = 1;
"""
_BUSY_MS = 10_000
_MAX_INTEGER = 2**63 - 1
#: The first bytes of every SQLite database file.
_SQLITE_HEADER = b"SQLite format 3\x00"


class SQLiteSessionStore(SessionStore):
    """A :class:`~claude_agent_sdk.types.SessionStore` in one SQLite file (see the module
    docstring for its tables), with every optional method.

    Args:
        path: the database file (made, with its directory, if missing; an existing file
            must be an SQLite database).

    Example:
        >>> store = SQLiteSessionStore(Path("~/.cache/teamlead/sessions.db").expanduser())
        >>> options = ClaudeAgentOptions(session_store=store)  # doctest: +SKIP
    """

    def __init__(self, path: Path | str, *, warnings: WarnOnce | None = None) -> None:
        self.path = Path(path)
        self.where = f"SQLite at {self.path}"
        self._warn = warnings if warnings is not None else WarnOnce(log)
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._last_mtime = 0

    def __repr__(self) -> str:
        return f"SQLiteSessionStore({str(self.path)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """A copy in another process (a Ray task's on this machine) opens the same file
        there, on first use (a connection and its lock do not travel)."""
        return (type(self), (self.path,))

    # -- the connection ------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if not self._exists():
            self._create()
        db = sqlite3.connect(  # the timeout is SQLite's busy timeout
            self.path, timeout=_BUSY_MS / 1000, isolation_level=None, check_same_thread=False
        )
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.executescript(_SCHEMA)
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def _exists(self) -> bool:
        """Whether the file is there, checked to be an SQLite database without changing
        it (a file teamlead did not make keeps its mode and content).

        Raises:
            SessionStoreError: the path names something else: a file that is not an SQLite
                database, an empty file (never silently made one), not a regular file.
        """
        try:
            # O_NONBLOCK: a FIFO there is refused, never waited on for a writer
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            with os.fdopen(fd, "rb") as file:
                regular = stat.S_ISREG(os.fstat(file.fileno()).st_mode)
                head = file.read(len(_SQLITE_HEADER)) if regular else b""
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise SessionStoreError(
                f"session store {self.where}: cannot read it: {exc.strerror or exc}",
                store=self.where,
            ) from None
        if head == _SQLITE_HEADER:
            return True
        what = (
            "is not a regular file"
            if not regular
            else "is an empty file"
            if not head
            else ("is not an SQLite database")
        )
        raise SessionStoreError(
            f"session store {self.where}: {what}; teamlead leaves it as it is and makes its "
            "database only where no file is: name a new path",
            store=self.where,
        )

    def _create(self) -> None:
        """Make the database (mode 0600) where no file is: built under a temporary name and
        linked into place, so no other process ever finds it half made (an empty file it
        would refuse), and a file that appeared meanwhile is never replaced."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            with contextlib.closing(sqlite3.connect(temp)) as made:
                made.executescript(_SCHEMA)
            try:
                os.link(temp, self.path)
            except FileExistsError:
                pass  # another process made it first
            except OSError:  # a file system without hard links: renamed, if still no file
                if not self.path.exists():
                    temp.replace(self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()

    async def _run(self, what: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """``work(connection)`` in a worker thread, one at a time; a failure of the file or
        the disk as :class:`SessionStoreError`."""

        def call() -> _T:
            with self._lock:
                try:
                    return work(self._connect())
                except (sqlite3.Error, OSError) as exc:
                    if self._db is not None:  # a broken connection is opened afresh
                        self._db.close()
                        self._db = None
                    raise SessionStoreError(
                        f"session store {self.where}: {what} failed: {exc}", store=self.where
                    ) from None

        return await anyio.to_thread.run_sync(call)

    async def aclose(self) -> None:
        """Close the file (a store can be used again after: it opens it again)."""

        def close() -> None:
            with self._lock:
                if self._db is not None:
                    self._db.close()
                    self._db = None

        await anyio.to_thread.run_sync(close)

    async def ping(self) -> None:
        """Check the file opens as this store's database.

        Raises:
            SessionStoreError: it does not.
        """
        await self._run("open", lambda db: db.execute("SELECT 1").fetchone())

    def _mtime(self, db: sqlite3.Connection, key: tuple[str, str, str]) -> int:
        """Now in epoch ms, past the key's last write (so every write moves it on)."""
        row = db.execute(
            "SELECT mtime FROM teamlead_session_keys "
            "WHERE project_key = ? AND session_id = ? AND subpath = ?",
            key,
        ).fetchone()
        last = row[0] if row and isinstance(row[0], int) else 0
        now = int(SYSTEM_CLOCK.time() * 1000)
        # never past SQLite's largest INTEGER, whatever the file says the last write was
        mtime = min(max(now, last + 1, self._last_mtime + 1), _MAX_INTEGER)
        self._last_mtime = mtime
        return mtime

    # -- the protocol --------------------------------------------------------------------
    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Append ``entries`` (an entry whose uuid is stored already is skipped).

        Raises:
            SessionStoreError: the file could not be written.
        """
        if not entries:
            return
        pk, sid, subpath = key["project_key"], key["session_id"], subpath_of(key)
        rows = [(pk, sid, subpath, entry_uuid(e) or None, dump_entry(e)) for e in entries]

        def work(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            with db:  # commits, or rolls back on any exception
                db.executemany(
                    "INSERT OR IGNORE INTO teamlead_session_entries "
                    "(project_key, session_id, subpath, uuid, body) VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
                mtime = self._mtime(db, (pk, sid, subpath))
                db.execute(
                    "INSERT INTO teamlead_session_keys VALUES (?, ?, ?, ?) "
                    "ON CONFLICT DO UPDATE SET mtime = excluded.mtime",
                    (pk, sid, subpath, mtime),
                )
                if not subpath:
                    self._fold(db, key, entries, mtime)

        await self._run("append", work)

    def _fold(
        self, db: sqlite3.Connection, key: SessionKey, entries: list[SessionStoreEntry], mtime: int
    ) -> None:
        pk, sid = key["project_key"], key["session_id"]
        row = db.execute(
            "SELECT mtime, data FROM teamlead_session_summaries "
            "WHERE project_key = ? AND session_id = ?",
            (pk, sid),
        ).fetchone()
        prev = read_summary(_text(row[1]), sid, mtime=row[0]) if row else None
        folded = fold_session_summary(prev, key, entries)
        folded["mtime"] = max(mtime, prev["mtime"] if prev else 0)
        db.execute(
            "INSERT INTO teamlead_session_summaries VALUES (?, ?, ?, ?) "
            "ON CONFLICT DO UPDATE SET mtime = excluded.mtime, data = excluded.data",
            (pk, sid, folded["mtime"], dump_json(folded["data"])),
        )

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """The entries of ``key`` in append order, or ``None`` when it has none.

        Unreadable rows are skipped (one warning); at most 256 MiB is read.

        Raises:
            SessionStoreError: the file could not be read.
        """
        pk, sid, subpath = key["project_key"], key["session_id"], subpath_of(key)

        def work(db: sqlite3.Connection) -> EntryReader:
            reader = EntryReader()
            rows = db.execute(
                "SELECT body FROM teamlead_session_entries "
                "WHERE project_key = ? AND session_id = ? AND subpath = ? ORDER BY seq",
                (pk, sid, subpath),
            )
            for (body,) in rows:
                if not reader.add(_text(body)):
                    break
            return reader

        return (await self._run("load", work)).result(self._warn, self.where)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's sessions (main transcripts) with their last write, epoch ms."""

        def work(db: sqlite3.Connection) -> list[SessionStoreListEntry]:
            rows = db.execute(
                "SELECT session_id, mtime FROM teamlead_session_keys "
                "WHERE project_key = ? AND subpath = ''",
                (project_key,),
            ).fetchall()
            return [
                {"session_id": sid, "mtime": mtime}
                for sid, mtime in rows
                if isinstance(sid, str) and isinstance(mtime, int)
            ]

        return await self._run("list_sessions", work)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summaries of the project's sessions (unreadable ones skipped)."""

        def work(db: sqlite3.Connection) -> list[SessionSummaryEntry | None]:
            rows = db.execute(
                "SELECT session_id, mtime, data FROM teamlead_session_summaries "
                "WHERE project_key = ?",
                (project_key,),
            ).fetchall()
            return [
                read_summary(_text(data), sid, mtime=mtime) if isinstance(sid, str) else None
                for sid, mtime, data in rows
            ]

        found = await self._run("list_session_summaries", work)
        return readable_summaries(found, self._warn, self.where)

    async def delete(self, key: SessionKey) -> None:
        """Delete ``key``; a main transcript's delete takes its subkeys, summary and status.

        Raises:
            SessionStoreError: the file could not be written.
        """
        pk, sid, subpath = key["project_key"], key["session_id"], subpath_of(key)

        def work(db: sqlite3.Connection) -> None:
            scope = "project_key = ? AND session_id = ?"
            args: tuple[str, ...] = (pk, sid)
            tables = ["teamlead_session_entries", "teamlead_session_keys"]
            if subpath:
                scope += " AND subpath = ?"
                args = (pk, sid, subpath)
            else:
                tables += ["teamlead_session_summaries", "teamlead_session_status"]
            db.execute("BEGIN IMMEDIATE")
            with db:  # commits, or rolls back on any exception
                for table in tables:
                    db.execute(f"DELETE FROM {table} WHERE {scope}", args)

        await self._run("delete", work)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The session's subpaths (subagent transcripts, workflow journals), sorted."""

        def work(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(
                "SELECT subpath FROM teamlead_session_keys "
                "WHERE project_key = ? AND session_id = ? AND subpath != '' ORDER BY subpath",
                (key["project_key"], key["session_id"]),
            ).fetchall()
            return [s for (s,) in rows if isinstance(s, str) and s]

        return await self._run("list_subkeys", work)

    # -- teamlead's own ------------------------------------------------------------------
    async def list_project_keys(self) -> list[str]:
        """Every project key with a session in the store, most recently written first."""

        def work(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(
                "SELECT project_key, MAX(mtime) AS m FROM teamlead_session_keys "
                "WHERE subpath = '' GROUP BY project_key ORDER BY m DESC"
            ).fetchall()
            return [p for p, _ in rows if isinstance(p, str)]

        return await self._run("list_projects", work)

    async def put_status(self, status: SessionStatus) -> None:
        """Write the status record of ``status.session_id``.

        Raises:
            SessionStoreError: the file could not be written.
        """
        row = (status.project_key, status.session_id, status.model_dump_json())
        await self._run(
            "status",
            lambda db: db.execute(
                "INSERT INTO teamlead_session_status VALUES (?, ?, ?) "
                "ON CONFLICT DO UPDATE SET body = excluded.body",
                row,
            ),
        )

    async def get_status(self, project_key: str, session_id: str) -> SessionStatus | None:
        """The session's status record, or ``None`` (none, or unreadable: one warning)."""
        row = await self._run(
            "status",
            lambda db: db.execute(
                "SELECT body FROM teamlead_session_status WHERE project_key = ? AND session_id = ?",
                (project_key, session_id),
            ).fetchone(),
        )
        return None if row is None else read_status(row[0], self._warn, self.where)


def _text(value: object) -> str | None:
    """A column's value as stored text, ``None`` when it is none (SQLite columns are untyped)."""
    return value if isinstance(value, str) else None
