"""Test your Claude Agent SDK app offline: a scripted model server and the real CLI.

``ScriptedServer`` speaks the streaming Messages API on loopback and answers from a
script; ``OfflineClaude`` runs the real bundled Claude Code CLI against it with all state
in a temp dir. Nothing reaches the network.
"""

from __future__ import annotations

from .replies import AgentCall, Fault, Reply, Role, ScriptedRequest, ToolUse
from .runner import OfflineClaude, bundled_cli_path, cli_version, ensure_loopback, offline_env
from .server import RecordedRequest, Script, ScriptedServer, ServerStats

__all__ = [
    "AgentCall",
    "Fault",
    "OfflineClaude",
    "RecordedRequest",
    "Reply",
    "Role",
    "Script",
    "ScriptedRequest",
    "ScriptedServer",
    "ServerStats",
    "ToolUse",
    "bundled_cli_path",
    "cli_version",
    "ensure_loopback",
    "offline_env",
]
