"""Claude Code's on-disk formats and its binary, private to teamlead.

What Claude Code writes and teamlead reads lives here, one module per format: teams
(``team``), the team-lead inbox (``inbox``), session transcripts rebuilt into tracker
state (``saved_session``), the task notifications the lead was given (``notification``),
subagent transcripts (``transcript``), workflow journals and results (``workflow_journal``),
the bundled CLI's path and version (``binary``) and the loopback check on a base URL
(``loopback``); ``files`` reads each of those files as hostile input (regular files only,
bounded, depth-safe), and ``scripted`` is the mark teamlead's scripted model server puts
on what it writes. These follow Claude Code, not a promise of teamlead's, so nothing here
is public API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .binary import bundled_cli_path, cli_version
    from .files import FileProblem, is_session_id, loads, open_regular, read_regular
    from .inbox import consume_inbox, read_inbox, wait_for_inbox
    from .inbox.model import InboxRead, TeammateMessage
    from .loopback import ensure_loopback
    from .notification import Notification, turn_limit
    from .saved_session import (
        find_session_file,
        load_session,
        replay,
        session_messages,
        session_notifications,
    )
    from .scripted import SCRIPTED_MESSAGE_PREFIX, api_message_id, is_scripted_message
    from .team import (
        Team,
        claude_config_dir,
        find_team,
        implicit_team_name,
        load_team,
        resolve_team,
        sanitize_team_name,
        validate_name,
    )
    from .transcript import (
        TranscriptEnd,
        find_subagent_transcript,
        last_assistant_text,
        transcript_end,
        transcript_tail,
    )
    from .workflow_journal import JournalResult, find_journal, journal_results, workflow_result

__all__ = [
    "FileProblem",
    "InboxRead",
    "JournalResult",
    "Notification",
    "SCRIPTED_MESSAGE_PREFIX",
    "Team",
    "TeammateMessage",
    "TranscriptEnd",
    "api_message_id",
    "bundled_cli_path",
    "claude_config_dir",
    "cli_version",
    "consume_inbox",
    "ensure_loopback",
    "find_journal",
    "find_session_file",
    "find_subagent_transcript",
    "find_team",
    "implicit_team_name",
    "is_session_id",
    "is_scripted_message",
    "journal_results",
    "last_assistant_text",
    "load_session",
    "load_team",
    "loads",
    "open_regular",
    "read_inbox",
    "read_regular",
    "replay",
    "resolve_team",
    "sanitize_team_name",
    "session_messages",
    "session_notifications",
    "transcript_end",
    "transcript_tail",
    "turn_limit",
    "validate_name",
    "wait_for_inbox",
    "workflow_result",
]

__getattr__ = lazy_exports(__name__)
