"""``teamlead inbox show``: a team's config and its team-lead inbox, read-only.

:func:`find_cli_team` resolves ``--session`` / ``--team`` to a team and
:func:`inbox_document` builds the ``--json`` document (``version`` 1); the command only
prints. Nothing here writes to the inbox or the team directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .._redact import terminal_safe
from ..errors import InboxError, UsageError
from .exitcodes import SafeErrorsGroup, handle_errors
from .options import option

if TYPE_CHECKING:
    from .._claude import InboxRead, Team

__all__ = ["find_cli_team", "inbox", "inbox_document"]

INBOX_DOCUMENT_VERSION = 1


def find_cli_team(session_id: str | None, team: str | None, config_dir: Path) -> Team:
    """The team of lead session ``session_id``, or the team named ``team`` (give exactly one).

    Raises:
        UsageError: neither or both given, a bad team name, or no such team.
    """
    from .._claude import find_team, load_team, sanitize_team_name, validate_name

    if bool(session_id) == bool(team):
        raise UsageError("give exactly one of --session ID or --team NAME")
    if session_id:
        found = find_team(session_id, config_dir=config_dir)
        if found is None:
            raise UsageError(f"no team of session {session_id} under {config_dir}/teams")
        return found
    assert team is not None
    try:
        validate_name(team, what="team")
    except InboxError as exc:  # a bad --team is the user's to fix
        raise UsageError(str(exc)) from None
    found = load_team(config_dir / "teams" / sanitize_team_name(team), config_dir)
    if found is None:
        raise UsageError(f"no team {team!r} under {config_dir}/teams")
    return found


def inbox_document(found: Team, read: InboxRead) -> dict[str, Any]:
    """The ``inbox show --json`` document: the team, its members and the lead's inbox."""
    return {
        "version": INBOX_DOCUMENT_VERSION,
        "team": found.name,
        "lead_session_id": found.config.lead_session_id,
        "members": [m.name for m in found.config.members],
        "inbox": str(found.lead_inbox),
        "status": read.status,
        "messages": [m.model_dump(mode="json") for m in read.messages],
        "warnings": list(read.warnings),
    }


@click.group(cls=SafeErrorsGroup)
def inbox() -> None:
    """Read the team-lead inboxes (read-only)."""


@inbox.command("show")
@option("--session", "session_id", help="Lead session id.")
@option("--team", help="Team name.")
@option("--json", "json_", is_flag=True, help="One JSON document.")
@handle_errors
def inbox_show(session_id: str | None, team: str | None, json_: bool) -> None:
    """Show a team's config and its team-lead inbox (read-only)."""
    from .._claude import claude_config_dir, read_inbox

    config_dir = claude_config_dir()
    found = find_cli_team(session_id, team, config_dir)
    read = read_inbox(found.lead_inbox, config_dir=config_dir, log=False)  # shown below
    if json_:
        click.echo(json.dumps(inbox_document(found, read), indent=2))
        return
    safe = terminal_safe  # every line below carries text a teammate or the CLI wrote
    click.echo(safe(f"team {found.name}  lead session {found.config.lead_session_id}"))
    click.echo(safe("members: " + (", ".join(m.name for m in found.config.members) or "(none)")))
    click.echo(f"inbox: {read.status}, {len(read.messages)} message(s), {read.skipped} invalid")
    for message in read.messages:
        body = message.result or message.summary or message.text
        line = f"  {message.timestamp}  {message.sender:<16} {message.kind:<10} {body[:100]!r}"
        click.echo(safe(line))
    for warning in read.warnings:
        click.echo(safe(f"  warning: {warning}"), err=True)
