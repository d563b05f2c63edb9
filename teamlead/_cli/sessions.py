"""``teamlead sessions``: the sessions a session store holds, and how their runs ended."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from .._redact import terminal_safe
from .exitcodes import handle_errors
from .options import option, session_store_option
from .output import moment

if TYPE_CHECKING:
    from ..sessions import StoredSession

__all__ = ["sessions"]

#: The version of each ``--json`` line.
SESSIONS_VERSION = 1


@click.command()
@session_store_option(
    help="List the sessions this store holds: redis://HOST:PORT/DB, rediss://… or "
    "sqlite:///PATH [default: this machine's, Claude Code's files in its config dir]."
)
@option("--json", "json_", is_flag=True, help="One JSON object per session (NDJSON).")
@handle_errors
def sessions(session_store: str | None, json_: bool) -> None:
    """List the sessions a session store holds, newest first.

    Each row: the session id (for `teamlead resume`), its project (the sanitized directory
    it ran in), when the store last got a line of it, and how its last teamlead run ended:
    its status and how many agents' results the answer used or lost ("-": no run ended,
    it is running or its machine died, or the store keeps no status: the local files
    keep none).
    """
    if session_store and session_store.strip():
        found, where = _in_store(session_store)
    else:
        found, where = _local()
    for item in found:
        click.echo(_json_line(item) if json_ else _row(item))
    if not found and not json_:
        click.echo(f"no sessions in {where}", err=True)


def _in_store(url: str) -> tuple[list[StoredSession], str]:
    """The sessions the store at ``url`` holds, and where that is (no credentials)."""
    import anyio

    from ..sessions import open_session_store, stored_sessions

    store = open_session_store(url)

    async def listed() -> list[StoredSession]:
        try:
            return await stored_sessions(store)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await store.aclose()

    return anyio.run(listed), store.where


def _local() -> tuple[list[StoredSession], str]:
    """The sessions Claude Code keeps on this machine (``CLAUDE_CONFIG_DIR``, else
    ``~/.claude``), newest first, and where they are."""
    from claude_agent_sdk import list_sessions, project_key_for_directory

    from .._claude import claude_config_dir
    from ..sessions import StoredSession

    found = [
        StoredSession(
            info.session_id,
            project_key_for_directory(info.cwd) if info.cwd else "-",
            info.last_modified,
        )
        for info in list_sessions()
    ]
    return found, str(claude_config_dir() / "projects")


def _row(item: StoredSession) -> str:
    status = item.status
    if status is None:
        how = "-"
    else:
        how = f"{status.status} ({status.reason or 'no reason'})"
        if status.agents:
            how += f": {status.used} of {status.agents} agents used"
            how += f", {status.lost} lost" if status.lost else ""
    # each cell escaped before it is padded: a control character in an id is shown as its
    # escape, and the columns stay aligned on what the terminal shows
    session_id, project, how = (
        terminal_safe(text) for text in (item.session_id, item.project_key, how)
    )
    when = moment(item.last_modified, per_second=1000, local=True) or "-"
    return f"{session_id:<38} {when:<19}  {project}  {how}"


def _json_line(item: StoredSession) -> str:
    return json.dumps(
        {
            "version": SESSIONS_VERSION,
            "session_id": item.session_id,
            "project_key": item.project_key,
            "last_modified": item.last_modified,
            "status": item.status.model_dump(mode="json") if item.status else None,
        },
        ensure_ascii=False,
    )
