"""Test your Claude Agent SDK app offline: a scripted model server and the real CLI.

``ScriptedServer`` speaks the streaming Messages API on loopback and answers from a
script (``FanOut`` is the common one: a lead that fans out N agents and synthesizes);
``OfflineClaude`` runs the real bundled Claude Code CLI against it with all state in a temp
dir; ``FakeClock`` runs the coordinator's waits in virtual time. Nothing reaches the
network.

A script is a function from a ``ScriptedRequest`` (with its ``Role``) to a ``Reply``
(text and ``ToolUse`` blocks, or a ``Fault`` instead; an ``AgentCall`` is the lead
delegating a subagent); the server records each request (``RecordedRequest``) and its
counters (``ServerStats``), and a ``TokenBucket`` emulates the API's rate limits. The
modules behind them: ``scripted_server``, ``replies``, ``scripts`` (ready-made scripts and
the ``serve-scripted`` scenarios), ``wire`` (the API's SSE events and bodies),
``recorded``, ``rate_buckets``, ``offline``, ``fake_clock``, ``teammate`` (an external
teammate posting to the lead's inbox), ``otlp`` (a loopback OTLP receiver) and ``demo``
(the script of ``teamlead demo``).
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
