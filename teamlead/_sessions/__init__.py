"""Session stores: a session's transcripts kept off the machine, so a run survives it.

The SDK mirrors every transcript line the CLI writes to ``ClaudeAgentOptions.session_store``
(the :class:`~claude_agent_sdk.types.SessionStore` protocol). This package holds teamlead's
two stores and what a run does with one, one concept per module (docs/layout.md names
them). Nothing here is public API; :mod:`teamlead.sessions` re-exports what users call.
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
