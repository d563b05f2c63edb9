"""Claude Code's on-disk formats and its binary, private to teamlead.

What Claude Code writes and teamlead reads lives here, one module per format (docs/layout.md
names them); ``files`` reads each of those files as hostile input. These follow Claude
Code, not a promise of teamlead's, so nothing here is public API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._door import lazy_exports

if TYPE_CHECKING:
    from .binary import bundled_cli_path as bundled_cli_path
    from .binary import cli_version as cli_version
    from .files import FileProblem as FileProblem
    from .files import is_session_id as is_session_id
    from .files import loads as loads
    from .files import open_regular as open_regular
    from .files import read_regular as read_regular
    from .inbox import consume_inbox as consume_inbox
    from .inbox import read_inbox as read_inbox
    from .inbox import wait_for_inbox as wait_for_inbox
    from .inbox.model import InboxRead as InboxRead
    from .inbox.model import TeammateMessage as TeammateMessage
    from .loopback import ensure_loopback as ensure_loopback
    from .notification import Notification as Notification
    from .notification import turn_limit as turn_limit
    from .saved_session import find_session_file as find_session_file
    from .saved_session import load_session as load_session
    from .saved_session import replay as replay
    from .saved_session import session_messages as session_messages
    from .saved_session import session_notifications as session_notifications
    from .scripted import SCRIPTED_MESSAGE_PREFIX as SCRIPTED_MESSAGE_PREFIX
    from .scripted import api_message_id as api_message_id
    from .scripted import is_scripted_message as is_scripted_message
    from .team import Team as Team
    from .team import claude_config_dir as claude_config_dir
    from .team import find_team as find_team
    from .team import implicit_team_name as implicit_team_name
    from .team import load_team as load_team
    from .team import resolve_team as resolve_team
    from .team import sanitize_team_name as sanitize_team_name
    from .team import validate_name as validate_name
    from .team import within as within
    from .transcript import TranscriptCall as TranscriptCall
    from .transcript import TranscriptEnd as TranscriptEnd
    from .transcript import find_subagent_transcript as find_subagent_transcript
    from .transcript import last_assistant_text as last_assistant_text
    from .transcript import transcript_end as transcript_end
    from .transcript import transcript_tail as transcript_tail
    from .workflow_journal import JournalResult as JournalResult
    from .workflow_journal import find_journal as find_journal
    from .workflow_journal import journal_results as journal_results
    from .workflow_journal import workflow_result as workflow_result

__getattr__ = lazy_exports(__name__)
