"""Test your Claude Agent SDK app offline: a scripted model server and the real CLI.

``ScriptedServer`` speaks the streaming Messages API on loopback and answers from a
script (``FanOut`` is the common one: a lead that fans out N agents and synthesizes);
``OfflineClaude`` runs the real bundled Claude Code CLI against it with all state in a temp
dir; ``FakeClock`` runs the coordinator's waits in virtual time. Nothing reaches the
network.
"""

from __future__ import annotations

from .fake_clock import FakeClock
from .offline import OfflineClaude, bundled_cli_path, cli_version, ensure_loopback, offline_env
from .rate_buckets import TokenBucket
from .replies import AgentCall, Fault, Reply, Role, ScriptedRequest, ToolUse
from .scripted_server import RecordedRequest, Script, ScriptedServer, ServerStats
from .scripts import FanOut

__all__ = [
    "AgentCall",
    "FakeClock",
    "FanOut",
    "Fault",
    "OfflineClaude",
    "RecordedRequest",
    "Reply",
    "Role",
    "Script",
    "ScriptedRequest",
    "ScriptedServer",
    "ServerStats",
    "TokenBucket",
    "ToolUse",
    "bundled_cli_path",
    "cli_version",
    "ensure_loopback",
    "offline_env",
]
