"""Session stores: keep a run's transcripts off the machine, so another machine can resume it.

The SDK mirrors every transcript line the CLI writes to ``ClaudeAgentOptions.session_store``
(the :class:`~claude_agent_sdk.types.SessionStore` protocol). teamlead ships two stores
that implement all of it (the optional ``list_sessions``, ``list_session_summaries``,
``delete`` and ``list_subkeys`` too), and :func:`open_session_store` opens one from a URL:

- :class:`RedisSessionStore` (``redis://host:port/db``, ``rediss://`` for TLS): one Redis
  database shared by every machine. Its keys are under ``teamlead:session:`` and each
  expires 30 days (:data:`DEFAULT_TTL_S`; ``?ttl=SECONDS`` in the URL) after its last write.
- :class:`SQLiteSessionStore` (``sqlite:///path/to/sessions.db``): one embedded file, for
  one machine.

With a store in the options, a teamlead run (:func:`teamlead.run`,
:func:`teamlead.resume_session`, ``teamlead ask/resume --session-store URL``, each trial of
``teamlead experiment run --session-store URL``, on whichever Ray node runs it):

- mirrors eagerly (``session_store_flush="eager"``): a machine that dies loses at most the
  lines of its last tenth of a second;
- mirrors each workflow's journal (``subagents/workflows/<wf_…>/journal``), which the CLI
  does not, so another machine can resume the workflow with its finished agents replayed;
- resumes from the local files while they exist on this machine (they hold everything the
  store does, and more if the store missed some), and brings the session from the store
  to this machine's Claude config dir when they do not, or when the store is further
  along (another machine went on with it);
- writes a status record (:class:`SessionStatus`) into teamlead's stores when it ends;
- warns in one line when the store cannot be reached or fails, and goes on with the local
  files. What a store holds is read as untrusted input: an unreadable entry is skipped
  with one warning, never raised into a run.

Resume on the other machine from the same working directory: the store files a session
under its project key, the sanitized working directory (``project_key_for_directory``).

Example:
    >>> store = teamlead.open_session_store("redis://HOST:6379/0")  # doctest: +SKIP
    >>> options = ClaudeAgentOptions(session_store=store)  # doctest: +SKIP
    >>> async for item in teamlead.run("Audit the repo", options):  # doctest: +SKIP
    ...     ...
    >>> # on another machine, same directory:
    >>> async for item in teamlead.resume_session(session_id, options):  # doctest: +SKIP
    ...     ...
"""

from __future__ import annotations

import dataclasses
import typing

from . import errors
from ._sessions import (
    DEFAULT_TTL_S,
    RedisSessionStore,
    SessionStatus,
    SQLiteSessionStore,
    open_session_store,
)

if typing.TYPE_CHECKING:
    from claude_agent_sdk.types import SessionStore

__all__ = [
    "DEFAULT_TTL_S",
    "RedisSessionStore",
    "SQLiteSessionStore",
    "SessionStatus",
    "StoredSession",
    "open_session_store",
    "stored_sessions",
]


@dataclasses.dataclass(frozen=True)
class StoredSession:
    """One session a store holds.

    Attributes:
        session_id: the session (``teamlead resume SESSION_ID``).
        project_key: its project key: the sanitized working directory it ran in.
        last_modified: the store's last write to its transcript, Unix epoch milliseconds.
        status: how its last teamlead run ended, when teamlead's store knows it (``None``:
            running, died with its machine, or not a teamlead run).
    """

    session_id: str
    project_key: str
    last_modified: int
    status: SessionStatus | None = None


async def stored_sessions(
    store: SessionStore, project_key: str | None = None
) -> list[StoredSession]:
    """The sessions ``store`` holds, most recently modified first.

    Args:
        store: any session store; teamlead's add the status of each session's last run.
        project_key: only this project's (``project_key_for_directory(cwd)``); ``None`` for
            every project, which only teamlead's stores can list.

    Raises:
        UsageError: ``project_key`` is ``None`` and the store cannot list its projects.
        SessionStoreError: the store could not be reached or failed.

    Example:
        >>> for s in await stored_sessions(store):  # doctest: +SKIP
        ...     print(s.session_id, s.status.status if s.status else "-")
    """
    lister = getattr(store, "list_project_keys", None)
    if project_key is not None:
        projects = [project_key]
    elif lister is not None:
        projects = list(await lister())
    else:
        raise errors.UsageError(f"{type(store).__name__} cannot list its projects: name one")
    status_of = getattr(store, "get_status", None)
    out: list[StoredSession] = []
    for project in projects:
        for item in await store.list_sessions(project):
            status = await status_of(project, item["session_id"]) if status_of else None
            out.append(StoredSession(item["session_id"], project, item["mtime"], status))
    out.sort(key=lambda s: -s.last_modified)
    return out
