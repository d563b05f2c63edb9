"""Play an external teammate: create a team and post to the team-lead inbox.

The writer follows Claude Code's protocol (create the inbox with ``[]`` if missing, take
the ``<inbox>.lock`` directory, re-read, append, write ``<inbox>.tmp.<hex>`` and rename),
so it is a faithful stand-in for a teammate process in tests.

Example:
    >>> team = create_team(config_dir, session_id, members=["researcher"])  # doctest: +SKIP
    >>> inbox = team_inbox(config_dir, team)  # doctest: +SKIP
    >>> post_to_inbox(inbox, idle_notification("researcher", result="..."))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .._claude import implicit_team_name, sanitize_team_name
from ..errors import InboxError

__all__ = ["create_team", "idle_notification", "plain_message", "post_to_inbox", "team_inbox"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def create_team(
    config_dir: Path,
    session_id: str,
    *,
    members: Sequence[str] = (),
    name: str | None = None,
    lead_process: Any = None,
) -> str:
    """Write ``teams/<team>/config.json`` for a lead session; returns the team's dir name."""
    team = name or implicit_team_name(session_id)
    team_dir = Path(config_dir) / "teams" / sanitize_team_name(team)
    (team_dir / "inboxes").mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000)
    config = {
        "name": team,
        "createdAt": now,
        "leadAgentId": f"team-lead@{team}",
        "leadSessionId": session_id,
        "leadProcess": lead_process,
        "members": [
            {
                "agentId": f"team-lead@{team}",
                "name": "team-lead",
                "agentType": "team-lead",
                "joinedAt": now,
            }
        ]
        + [
            {
                "agentId": f"{m}@{team}",
                "name": m,
                "agentType": "general-purpose",
                "joinedAt": now,
                "backendType": "external",
            }
            for m in members
        ],
    }
    (team_dir / "config.json").write_text(json.dumps(config, indent=2))
    return sanitize_team_name(team)


def team_inbox(config_dir: Path, team_dir_name: str, agent: str = "team-lead") -> Path:
    """``<config>/teams/<team>/inboxes/<agent>.json``."""
    return Path(config_dir) / "teams" / team_dir_name / "inboxes" / f"{agent}.json"


def idle_notification(
    sender: str,
    *,
    result: str | None = None,
    summary: str | None = None,
    completed_status: str = "resolved",
    failure_reason: str | None = None,
    idle_reason: str = "available",
) -> dict[str, Any]:
    """An inbox entry whose text is an ``idle_notification`` frame (a teammate's report)."""
    frame = {
        "type": "idle_notification",
        "from": sender,
        "timestamp": _now(),
        "idleReason": idle_reason,
        "summary": summary,
        "completedStatus": completed_status,
        "failureReason": failure_reason,
        "result": result[:4000] if result else result,
    }
    return plain_message(sender, json.dumps(frame), summary=summary)


def plain_message(sender: str, text: str, *, summary: str | None = None) -> dict[str, Any]:
    """A plain SendMessage entry."""
    entry: dict[str, Any] = {
        "from": sender,
        "text": text,
        "timestamp": _now(),
        "read": False,
        "type": "message",
        "msgV": 1,
        "msg_id": str(uuid.uuid4()),
    }
    if summary:
        entry["summary"] = summary
    return entry


def post_to_inbox(path: Path, *entries: Mapping[str, Any], attempts: int = 10) -> None:
    """Append ``entries`` to an inbox the way a Claude Code writer does.

    Raises:
        InboxError: the lock could not be taken within ``attempts`` tries.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("x") as fh:
            fh.write("[]")
    except FileExistsError:
        pass
    lock = path.with_name(path.name + ".lock")
    delay = 0.005
    for _ in range(attempts):
        try:
            lock.mkdir()
            break
        except FileExistsError:
            time.sleep(delay)
            delay = min(0.1, delay * 2)
    else:
        raise InboxError(f"could not lock {path.name} after {attempts} tries", path=str(path))
    try:
        current = json.loads(path.read_text().strip(" \t\n\r") or "[]")  # 0 bytes: empty
        if not isinstance(current, list):
            current = []
        current.extend(dict(e) for e in entries)
        tmp = path.with_name(f"{path.name}.tmp.{secrets.token_hex(6)}")
        tmp.write_text(json.dumps(current, indent=2))
        tmp.replace(path)
    finally:
        lock.rmdir()
