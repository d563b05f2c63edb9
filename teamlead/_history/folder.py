"""Where the run history lives, whether it is kept, and the one rule for a private folder.

The history directory is, in order:

- ``TEAMLEAD_HISTORY_DIR`` when set (each test world has its own);
- else ``$XDG_DATA_HOME/teamlead/history`` when ``XDG_DATA_HOME`` is an absolute path;
- else ``~/.local/share/teamlead/history``.

``TEAMLEAD_NO_HISTORY=1`` (``true``, ``yes``, ``on``) keeps no history.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "HISTORY_DIR_VAR",
    "NO_HISTORY_VAR",
    "history_dir",
    "history_wanted",
]

#: Where the history is kept, when set.
HISTORY_DIR_VAR = "TEAMLEAD_HISTORY_DIR"
#: ``1`` (``true``, ``yes``, ``on``): no run is recorded.
NO_HISTORY_VAR = "TEAMLEAD_NO_HISTORY"
_TRUE = frozenset({"1", "true", "yes", "on"})


def history_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory this user's run history is kept in (see the module docstring); not made.

    Example:
        >>> history_dir({"TEAMLEAD_HISTORY_DIR": "/tmp/h"})
        PosixPath('/tmp/h')
        >>> history_dir({"XDG_DATA_HOME": "/d", "HOME": "/home/u"})
        PosixPath('/d/teamlead/history')
        >>> history_dir({"HOME": "/home/u"})
        PosixPath('/home/u/.local/share/teamlead/history')
    """
    env = os.environ if env is None else env
    own = (env.get(HISTORY_DIR_VAR) or "").strip()
    if own:
        return Path(own).expanduser()
    data = (env.get("XDG_DATA_HOME") or "").strip()
    if data and Path(data).is_absolute():
        return Path(data) / "teamlead" / "history"
    home = (env.get("HOME") or "").strip()
    base = Path(home) if home else Path.home()
    return base / ".local" / "share" / "teamlead" / "history"


def history_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether runs are recorded (they are unless ``TEAMLEAD_NO_HISTORY`` is set)."""
    env = os.environ if env is None else env
    return (env.get(NO_HISTORY_VAR) or "").strip().lower() not in _TRUE
