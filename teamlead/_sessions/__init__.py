"""Session stores: a session's transcripts kept off the machine, so a run survives it.

The SDK mirrors every transcript line the CLI writes to ``ClaudeAgentOptions.session_store``
(the :class:`~claude_agent_sdk.types.SessionStore` protocol). This package holds teamlead's
two stores and what a run does with one, one concept per module:

- ``stored``: what a store holds, read back as untrusted input (entries, summaries, keys);
- ``redis_store``: :class:`~.redis_store.RedisSessionStore`, one Redis database shared by
  every machine (``teamlead:session:`` keys, each with a TTL);
- ``sqlite_store``: :class:`~.sqlite_store.SQLiteSessionStore`, one embedded SQLite file;
- ``status``: the small status record teamlead writes into its stores when a run ends;
- ``url``: :func:`~.url.open_session_store`, a store from a ``redis://``/``rediss://``/``sqlite:``
  URL;
- ``home``: bringing a session from a store to this machine's Claude config dir;
- ``journals``: mirroring workflow journals (which the CLI does not mirror) into the store;
- ``run_store``: a run's view of its store: local files first, every call bounded, one
  warning when the store fails, and the run goes on with the local files.

Nothing here is public API; :mod:`teamlead.sessions` re-exports what users call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .redis_store import DEFAULT_TTL_S as DEFAULT_TTL_S
    from .redis_store import RedisSessionStore as RedisSessionStore
    from .run_store import RunStore as RunStore
    from .sqlite_store import SQLiteSessionStore as SQLiteSessionStore
    from .status import SessionStatus as SessionStatus
    from .url import close_store as close_store
    from .url import open_session_store as open_session_store

__getattr__ = lazy_exports(__name__)
