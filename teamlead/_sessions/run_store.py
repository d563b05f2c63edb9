"""A run's view of its session store: local files first, every call bounded, one warning.

A run with ``ClaudeAgentOptions.session_store`` set makes one :class:`RunStore` of it. The
SDK gets :attr:`RunStore.view` in its place, a store that:

- forwards the SDK's mirror (``append``) and reads to the user's store, each call bounded
  by ``timeout_s``;
- answers ``load`` of a session's main transcript with ``None`` while this machine holds
  the session's local transcript, so the SDK resumes the CLI from the local files (which
  hold everything the store does, and more when the store missed some) instead of from a
  temp copy of the store's, which would be gone after the round, journals and all;
- never raises: the first failure of the store (unreachable, erroring, too slow) is told in
  one warning line and ends the store's part in the run: nothing more is written to it, so
  what it holds stays a consistent beginning of the session, and every read answers
  empty. The run goes on with the local files.

The run also calls the RunStore itself, through the same bounded calls: :meth:`~RunStore.check`
at its start, :meth:`~RunStore.bring_home`, :meth:`~RunStore.sync_journals` and
:meth:`~RunStore.put_status`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from claude_agent_sdk import project_key_for_directory
from claude_agent_sdk.types import (
    SessionKey,
    SessionListSubkeysKey,
    SessionStore,
    SessionStoreEntry,
    SessionStoreListEntry,
    SessionSummaryEntry,
)

from .._claude import is_session_id
from .._redact import redact
from ..clock import SYSTEM_CLOCK
from ..errors import UsageError
from .home import Brought, bring_home, implements
from .journals import JournalMirror
from .status import status_of
from .stored import WarnOnce

if TYPE_CHECKING:
    from ..events import Finished

__all__ = ["RunStore"]

log = logging.getLogger("teamlead.sessions")

_T = TypeVar("_T")
#: What one store call may take before the store counts as failed.
STORE_TIMEOUT_S = 10.0


class RunStore:
    """One run's session store (see the module docstring).

    Args:
        store: the user's store (``ClaudeAgentOptions.session_store``).
        config_dir: the run's Claude config dir.
        cwd: the run's working directory (its project key files the session).
        timeout_s: the most one store call may take.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        config_dir: Path,
        cwd: str | Path | None,
        timeout_s: float = STORE_TIMEOUT_S,
    ) -> None:
        self.store = store
        self.where = str(getattr(store, "where", type(store).__name__))
        self.config_dir = Path(config_dir)
        self.project_key = project_key_for_directory(cwd)
        self.timeout_s = timeout_s
        self.failed: str | None = None  #: why the store was given up, once it was
        self.warn = WarnOnce(log)
        self.view: SessionStore = _View(self)
        self._journals = JournalMirror(self.store, self.config_dir)

    # -- bounded calls -------------------------------------------------------------------
    def give_up(self, why: str, *, at_start: bool = False) -> None:
        """Stop using the store, telling why in one warning line (the first time)."""
        if self.failed is not None:
            return
        self.failed = why
        what = (
            "cannot be reached (%s): the run goes on with the local files only"
            if at_start
            else "failed (%s): the run goes on with the local files; the store keeps this "
            "session only up to here"
        )
        log.warning("session store %s " + what, self.where, why)

    async def call(
        self, what: str, work: Callable[[], Awaitable[_T]], default: _T, *, at_start: bool = False
    ) -> _T:
        """``await work()`` within ``timeout_s``; on any failure the store is given up (one
        warning, the start's when ``at_start``) and ``default`` returned. Once given up,
        ``default`` at once."""
        if self.failed is not None:
            return default
        try:
            with anyio.fail_after(self.timeout_s):
                return await work()
        except TimeoutError:
            self.give_up(f"{what} took over {self.timeout_s:g} s", at_start=at_start)
        except Exception as exc:  # noqa: BLE001 - a failing store must never end the run
            self.give_up(redact(str(exc) or type(exc).__name__)[:300], at_start=at_start)
        return default

    async def check(self) -> bool:
        """Whether the store answers (its ``ping``, else nothing to ask): when it does not,
        it is given up with the one warning of a store down at the start."""
        ping = getattr(self.store, "ping", None)
        if ping is None:
            return True

        async def answered() -> bool:
            await ping()
            return True

        return await self.call("a ping", answered, False, at_start=True)

    # -- the session on this machine -----------------------------------------------------
    def local_transcript(self, session_id: str) -> Path | None:
        """The session's transcript on this machine, if there is one."""
        if not is_session_id(session_id):
            return None
        for path in sorted((self.config_dir / "projects").glob(f"*/{session_id}.jsonl")):
            if path.is_file():
                return path
        return None

    async def bring_home(self, session_id: str) -> Brought | None:
        """Bring ``session_id`` from the store where this machine lacks it or is behind
        (see :mod:`.home`); ``None`` when the store could not be asked.

        Raises:
            UsageError: the session is neither on this machine nor in the store (the
                message says which store, and under which project key it was looked for).
        """
        if not is_session_id(session_id):
            return None  # the session reader refuses it with its own message
        local = self.local_transcript(session_id)
        brought = await self.call(
            "bringing the session home",
            lambda: bring_home(
                self.store,
                self.config_dir / "projects",
                self.project_key,
                session_id,
                local=local,
                warn=self.warn,
            ),
            None,
        )
        if local is not None:
            if brought is not None and brought.source == "none":
                log.warning(
                    "session store %s holds no copy of session %s: resuming this machine's "
                    "files (the store gets the session's new lines from now on)",
                    self.where,
                    session_id,
                )
            if brought is not None and brought.source == "store":
                log.info("session %s: the store was further along; brought it here", session_id)
            return brought
        if brought is None:
            raise UsageError(
                f"session {session_id} is not on this machine, and the session store "
                f"{self.where} could not be asked for it ({self.failed})"
            )
        if brought.source == "none":
            elsewhere = await self._project_of(session_id)
            hint = (
                f"; the store has it under project {elsewhere!r}: run teamlead resume in the "
                "directory the session ran in"
                if elsewhere
                else ""
            )
            raise UsageError(
                f"no session {session_id} on this machine nor in the session store "
                f"{self.where} (project {self.project_key!r}, this directory's){hint}"
            )
        return brought

    async def _project_of(self, session_id: str) -> str | None:
        """The store's project key of ``session_id`` when it is not this directory's."""
        lister = getattr(self.store, "list_project_keys", None)
        if lister is None:
            return None

        async def find() -> str | None:
            for project in await lister():
                if project == self.project_key:
                    continue
                listed = await self.store.list_sessions(project)
                if any(item.get("session_id") == session_id for item in listed):
                    return str(project)
            return None

        return await self.call("finding the session's project", find, None)

    # -- what the run adds to the store ------------------------------------------------
    async def sync_journals(self, session_id: str | None, run_ids: list[str]) -> None:
        """Mirror the new lines of the runs' journals (bounded, shielded: a line counted as
        sent was sent)."""
        if not session_id or not run_ids or self.failed is not None:
            return
        with anyio.CancelScope(shield=True):
            await self.call(
                "mirroring a workflow journal",
                lambda: self._journals.sync(session_id, run_ids),
                0,
            )

    async def put_status(self, finished: Finished) -> None:
        """Write the status record of the run's session (teamlead's stores only)."""
        put = getattr(self.store, "put_status", None)
        session_id = finished.session_id
        if put is None or not session_id or self.failed is not None:
            return
        local = self.local_transcript(session_id)
        project = local.parent.name if local is not None else self.project_key
        record = status_of(
            finished,
            session_id=session_id,
            project_key=project,
            ended_at=int(SYSTEM_CLOCK.time() * 1000),
        )
        with anyio.CancelScope(shield=True):
            await self.call("writing the session's status", lambda: put(record), None)


class _View(SessionStore):
    """What the SDK gets as the run's ``session_store`` (see the module docstring)."""

    def __init__(self, run: RunStore) -> None:
        self._run = run

    def __repr__(self) -> str:
        return f"<the run's view of {self._run.where}>"

    def _has(self, method: str) -> bool:
        return implements(self._run.store, method)

    async def _forward(self, method: str, default: _T, *args: Any) -> _T:
        """The user's store's ``method(*args)``, bounded (:meth:`RunStore.call`)."""
        call = getattr(self._run.store, method)
        return await self._run.call(method, lambda: call(*args), default)

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        await self._forward("append", None, key, entries)

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        if not key.get("subpath") and self._run.local_transcript(key["session_id"]) is not None:
            return None  # this machine has the session: the CLI resumes its local files
        return await self._forward("load", None, key)

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        if not self._has("list_sessions"):
            raise NotImplementedError
        return await self._forward("list_sessions", [], project_key)

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        if not self._has("list_session_summaries"):
            raise NotImplementedError
        return await self._forward("list_session_summaries", [], project_key)

    async def delete(self, key: SessionKey) -> None:
        if self._has("delete"):
            await self._forward("delete", None, key)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        if not self._has("list_subkeys"):
            return []
        return list(await self._forward("list_subkeys", [], key))
