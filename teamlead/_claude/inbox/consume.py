"""Consuming an inbox: remove delivered entries under the writers' lock.

Claude Code's own reader empties the lead's inbox as it delivers; a lead driven through
the SDK never does, so :func:`consume_inbox` does it for teamlead with the same protocol.
With nothing to remove nothing is written (see :func:`~.read.load_array` for the 0-byte
inbox a writer is about to fill).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Collection
from pathlib import Path
from typing import Any

import psutil

from ..._redact import escape_surrogates, redact
from ...clock import SYSTEM_CLOCK, Clock
from ...errors import InboxError
from ...policy import LockPolicy
from ..team import load_team, within
from .lock import with_lock
from .model import DEFAULT_MAX_INBOX_BYTES, ConsumeResult
from .read import confine_root, load_array, logger, scan_entry

__all__ = ["consume_inbox"]


def _lead_refusal(path: Path, root: Path, own_pids: Collection[int]) -> str | None:
    """Why not to consume: the lead recorded in config.json is alive and is not us."""
    team_dir = path.parent.parent
    if not (team_dir / "config.json").exists():
        return None
    team = load_team(team_dir, root)
    pid = None if team is None else team.config.lead_pid
    if pid is None or pid == os.getpid() or pid in own_pids or not psutil.pid_exists(pid):
        return None
    return f"lead process {pid} is alive and reads its own inbox; not consuming"


def _compact(kept: list[Any]) -> bytes | None:
    """The entries as compact UTF-8 JSON, or ``None`` when one is nested too deeply or holds
    a number JSON has no text for (``1e400`` reads as infinity, which would be written as
    ``Infinity``: no JSON reader, Claude Code's included, takes the file back).

    Compact, because the file we read was at most this size: escapes read as one
    character come back as that character, and whitespace goes, so the rewrite never
    grows past the cap the reader applies. A lone surrogate (legal in JSON text, not in
    UTF-8) is written back as its ``\\uXXXX`` escape.
    """
    try:
        text = json.dumps(kept, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (RecursionError, ValueError):
        return None
    return escape_surrogates(text).encode("utf-8")


def _rewrite(path: Path, keys: frozenset[str], max_bytes: int) -> ConsumeResult:
    """Under the lock: re-read, drop delivered and read entries, replace atomically."""
    status, raw, problem = load_array(path, max_bytes)
    if raw is None:
        return ConsumeResult(refused=redact(problem or f"inbox is {status}"))
    kept: list[Any] = []
    for item in raw:
        entry = scan_entry(item)
        if not isinstance(entry, str) and (entry.read or entry.key in keys):
            continue
        kept.append(item)
    removed = len(raw) - len(kept)
    if removed == 0:
        return ConsumeResult(removed=0, remaining=len(kept))
    data = _compact(kept)
    if data is None:
        why = "an entry too deep, or a number too large, to rewrite"
        return ConsumeResult(refused=f"inbox {path} holds {why}; left alone")
    if len(data) > max_bytes:  # never write a file the reader would then refuse
        return ConsumeResult(
            refused=f"inbox {path} would be {len(data)} bytes rewritten, over the cap; left alone"
        )
    mode = path.stat().st_mode & 0o777
    tmp = path.with_name(f"{path.name}.tmp.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ConsumeResult(removed=removed, remaining=len(kept))


async def consume_inbox(
    path: Path,
    keys: Collection[str],
    *,
    config_dir: Path | None = None,
    own_pids: Collection[int] = (),
    lock_policy: LockPolicy | None = None,
    clock: Clock = SYSTEM_CLOCK,
    max_bytes: int = DEFAULT_MAX_INBOX_BYTES,
) -> ConsumeResult:
    """Remove delivered entries (by key) and entries marked ``read: true`` from an inbox.

    Follows Claude Code's lock protocol: make ``<inbox>.lock``, re-read under it, write
    ``<inbox>.tmp.<hex>`` in the same directory, fsync, replace, remove the lock in
    ``finally``. Entries that arrived since the caller's read stay. The inbox is never
    created and ``config.json`` is never touched. While the lead process recorded in the
    team config is alive (and is neither us nor in ``own_pids``) nothing is removed.

    Args:
        path: the inbox file.
        keys: :attr:`TeammateMessage.key` of every delivered message.
        config_dir: the config dir the inbox must stay in (inferred by default).
        own_pids: processes we started, e.g. the CLI we drive, that do not count as a
            live interactive lead.
        lock_policy: lock retries, budget and stale age.
        clock: time source for backoff and lock ages.
        max_bytes: an inbox larger than this is left alone.

    Returns:
        What was removed; ``refused`` says why nothing was.

    Raises:
        InboxError: the lock stayed busy past its budget, or the file could not be written.

    Example:
        >>> read = read_inbox(team.lead_inbox)                           # doctest: +SKIP
        >>> await consume_inbox(team.lead_inbox, [m.key for m in read.messages])  # doctest: +SKIP
        ConsumeResult(removed=3, remaining=0, refused=None)
    """
    path = Path(path)
    root = confine_root(path, config_dir)
    if not within(path, root):
        reason = redact(f"inbox {path} resolves outside {root} (a symlink out?); refused")
        logger.warning("%s", reason)
        return ConsumeResult(refused=reason)
    refusal = _lead_refusal(path, root, own_pids)
    if refusal is not None:
        return ConsumeResult(refused=refusal)
    if not path.is_file():  # missing, or not a regular file: nothing of ours to rewrite
        return ConsumeResult()
    wanted = frozenset(keys)
    try:
        result = await with_lock(
            path, lambda: _rewrite(path, wanted, max_bytes), policy=lock_policy, clock=clock
        )
    except OSError as exc:
        raise InboxError(f"cannot rewrite inbox: {exc.strerror}", path=str(path)) from None
    if result.refused is not None:
        logger.warning("%s", result.refused)
    return result
