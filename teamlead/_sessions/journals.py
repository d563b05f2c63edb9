"""Mirroring workflow journals into the store, which the CLI does not.

The SDK mirrors what the CLI writes through its transcript writer: the session's
transcript and every agent's, workflow agents' included. A ``Workflow`` run's journal
(``<session>/subagents/workflows/<wf_…>/journal.jsonl``: the ``started`` and ``result``
line of each agent) is written apart and never reaches the store, yet it is what lets a
resume replay the finished agents instead of running them again. So teamlead mirrors it:
:class:`JournalMirror` appends each journal's new complete lines to the store under the
subpath ``subagents/workflows/<wf_…>/journal``, which is where the SDK's resume and
:func:`~.home.bring_home` write it back as ``journal.jsonl``.

A journal's first mirror counts the lines the store holds already (mirrored by an earlier
run, or the very lines this machine's copy was brought home from) and goes on after
them, so no line is stored twice. A line that is no JSON object is skipped (the CLI's own
reader skips it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from claude_agent_sdk.types import SessionKey, SessionStore, SessionStoreEntry

from .._claude import FileProblem, find_journal, read_regular
from .stored import read_entry

__all__ = ["JournalMirror", "journal_subpath"]

_MAX_BYTES = 32 * 1024 * 1024  # the journal reader's cap


def journal_subpath(run_id: str) -> str:
    """The store subpath of run ``run_id``'s journal."""
    return f"subagents/workflows/{run_id}/journal"


@dataclass
class _Synced:
    lines: int  # complete lines of the file already in the store
    size: int  # the file's size when last read


class JournalMirror:
    """Each journal's lines mirrored so far, for one run (see the module docstring).

    Args:
        store: where the journals go.
        config_dir: the Claude config dir the CLI writes the journals under.
    """

    def __init__(self, store: SessionStore, config_dir: Path) -> None:
        self._store = store
        self._config_dir = config_dir
        self._synced: dict[Path, _Synced] = {}

    async def sync(self, session_id: str, run_ids: list[str]) -> int:
        """Append the new lines of each run's journal; returns how many were appended.

        Raises:
            Exception: whatever the store raises (the caller bounds and reports it).
        """
        appended = 0
        for run_id in run_ids:
            path = find_journal(self._config_dir, session_id, run_id)
            if path is None:
                continue
            try:
                size = path.stat().st_size
            except OSError:
                continue
            key: SessionKey = {
                "project_key": path.parents[4].name,
                "session_id": session_id,
                "subpath": journal_subpath(run_id),
            }
            synced = self._synced.get(path)
            if synced is None:
                already = await self._store.load(key)
                synced = self._synced[path] = _Synced(len(already or []), -1)
            if size == synced.size:
                continue
            try:
                data = read_regular(path, _MAX_BYTES)
            except FileProblem:
                continue
            complete = data.split(b"\n")[:-1]  # the last piece is a line still being written
            good = [e for e in (read_entry(c) for c in complete if c.strip()) if e is not None]
            entries: list[SessionStoreEntry] = good[synced.lines :]
            if entries:
                await self._store.append(key, entries)
                appended += len(entries)
            synced.lines = len(good)
            synced.size = size
        return appended
