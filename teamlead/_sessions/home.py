"""Bringing a session from a store to this machine's Claude config dir.

``teamlead resume`` on a machine that never ran the session finds nothing under its
``<config>/projects``: the session lives in the store. :func:`bring_home` writes it there,
laid out as the CLI writes it (what the SDK's own resume-from-store writes to a temp dir,
which is gone after each round): ``projects/<project>/<session>.jsonl``, each subkey at
``<session>/<subpath>.jsonl`` (subagent transcripts; a workflow's journal, which teamlead
mirrors as ``subagents/workflows/<wf_…>/journal``) and each subagent's ``.meta.json`` from
its ``agent_metadata`` entries. From then on the CLI resumes the session from local files,
writes its new lines beside them, and the SDK mirrors those to the store as on the first
machine; teamlead's readers read the local files.

Local files win while they are as far along as the store: the main transcript is written
only when the store holds lines (by uuid) that the local one lacks and not the other way
round (another machine went on with the session); otherwise only the subkeys missing here
are written. Everything from the store is untrusted: the session id and every subpath
must be plain (``subagents/…``, no ``..``, no absolute path), the files go under the
session's own folder only (never through a symlink out of it), each written whole (a temp
file renamed over it), mode 0600.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from claude_agent_sdk.types import SessionKey, SessionStore, SessionStoreEntry

from .._claude import FileProblem, loads, open_regular, within
from .._private import write_private
from .stored import WarnOnce, dump_entry, entry_uuid

__all__ = ["Brought", "bring_home", "implements", "safe_subpath"]

_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_MAX_PARTS = 6
_MAX_SUBKEYS = 10_000
_MAX_LOCAL_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Brought:
    """What :func:`bring_home` did.

    Attributes:
        source: ``store`` (the main transcript was written from the store), ``local`` (the
            local one was kept: as far along), ``none`` (the store has no such session).
        files: the files written (transcripts, journals, sidecars).
        transcript: the session's local transcript after it, if any.
    """

    source: Literal["store", "local", "none"]
    files: int
    transcript: Path | None


def implements(store: SessionStore, method: str) -> bool:
    """Whether ``store`` has ``method`` of its own (not the protocol's absent default)."""
    found = getattr(type(store), method, None)
    return found is not None and found is not getattr(SessionStore, method, None)


def safe_subpath(subpath: str) -> bool:
    """Whether a subpath from a store may name a file under the session's folder.

    Example:
        >>> safe_subpath("subagents/workflows/wf_1-a/journal")
        True
        >>> safe_subpath("subagents/../../.ssh/id"), safe_subpath("/etc/passwd")
        (False, False)
    """
    parts = subpath.split("/")
    return (
        1 < len(parts) <= _MAX_PARTS
        and parts[0] == "subagents"
        and all(_PART.fullmatch(p) and ".." not in p for p in parts)
    )


def _local_uuids(path: Path) -> set[str] | None:
    """The uuids of a local transcript's lines, or ``None`` when it cannot be read."""
    try:
        fh = open_regular(path)
    except FileProblem:
        return None
    found: set[str] = set()
    with fh:
        if os.fstat(fh.fileno()).st_size > _MAX_LOCAL_BYTES:
            return None
        for line in fh:
            try:
                record = loads(line.decode("utf-8", errors="replace"))
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("uuid"), str):
                found.add(record["uuid"])
    return found


def _write(path: Path, text: str) -> None:
    """``text`` as ``path``, whole: a temp file beside it renamed over it (mode 0600)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, text)


def _jsonl(entries: list[SessionStoreEntry]) -> str:
    return "".join(dump_entry(e) + "\n" for e in entries)


async def bring_home(
    store: SessionStore,
    projects: Path,
    project_key: str,
    session_id: str,
    *,
    local: Path | None,
    warn: WarnOnce,
) -> Brought:
    """Write the store's copy of ``session_id`` under ``projects/<project_key>`` where the
    local files are missing or behind (see the module docstring).

    Args:
        store: where the session is kept.
        projects: this machine's ``<config>/projects``.
        project_key: the session's project key in the store (the working dir's).
        session_id: a plain session id (checked by the caller).
        local: the session's local transcript, if this machine has one.
        warn: where a skipped subpath is told, once.

    Raises:
        Exception: whatever the store raises (the caller bounds and reports it).
    """
    key: SessionKey = {"project_key": project_key, "session_id": session_id}
    entries = await store.load(key)
    if not entries:
        return Brought("none", 0, local)
    home = projects / project_key
    transcript = home / f"{session_id}.jsonl"
    ahead = local is None
    if local is not None:
        here = _local_uuids(local)
        there = {u for u in (entry_uuid(e) for e in entries) if u}
        # the store is further along: it holds lines this machine lacks, and none is missing
        ahead = here is not None and bool(there - here) and not (here - there)
        transcript = local if not ahead else transcript
    written = 0
    if ahead:
        _write(transcript, _jsonl(entries))
        written += 1
    folder = transcript.with_suffix("")
    subkeys = (
        await store.list_subkeys({"project_key": project_key, "session_id": session_id})
        if implements(store, "list_subkeys")
        else []
    )
    for subpath in subkeys[:_MAX_SUBKEYS]:
        target = folder / f"{subpath}.jsonl"
        if not isinstance(subpath, str) or not safe_subpath(subpath) or not within(target, folder):
            warn("subpath", f"session store: skipped an unsafe subpath {str(subpath)[:80]!r}")
            continue
        if target.exists() and not ahead:
            continue  # the local file is the one the CLI keeps writing
        sub = await store.load({**key, "subpath": subpath})
        if not sub:
            continue
        metadata = [e for e in sub if e.get("type") == "agent_metadata"]
        lines = [e for e in sub if e.get("type") != "agent_metadata"]
        if lines:
            _write(target, _jsonl(lines))
            written += 1
        if metadata:
            meta = {k: v for k, v in metadata[-1].items() if k != "type"}
            _write(target.with_name(f"{target.name[: -len('.jsonl')]}.meta.json"), json.dumps(meta))
            written += 1
    return Brought("store" if ahead else "local", written, transcript)
