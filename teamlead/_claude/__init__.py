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
