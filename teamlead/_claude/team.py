"""Where a Claude Code team lives on disk, and who is in it.

Claude Code keeps teams under ``<config>/teams/<team>/``: a ``config.json`` that names the
lead session and the members, and ``inboxes/<agent>.json`` files. This module finds the
team of a lead session and turns its ``config.json`` into a :class:`TeamConfig`. Names read
from disk are validated and every path is confined to the config dir, because a teammate
(or anything else able to write there) controls those files.

Example:
    >>> team = find_team("d6b404c3-7aec-40d7-9803-56ebb9cb00ba")  # doctest: +SKIP
    >>> team.lead_inbox                                             # doctest: +SKIP
    PosixPath('/home/me/.claude/teams/session-d6b404c3/inboxes/team-lead.json')
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._redact import redact
from ..errors import InboxError

__all__ = [
    "LEAD_AGENT_NAME",
    "Team",
    "TeamConfig",
    "TeamMember",
    "claude_config_dir",
    "find_team",
    "implicit_team_name",
    "inbox_path",
    "load_team",
    "sanitize_agent_name",
    "sanitize_team_name",
    "within",
]

logger = logging.getLogger(__name__)

LEAD_AGENT_NAME = "team-lead"
"""The lead's agent name in every team; its agent id is ``team-lead@<team>``."""

_MAX_CONFIG_BYTES = 1 << 20
_MAX_NAME_LEN = 200
_UNSAFE_NAME = re.compile(r"[/\\\x00-\x1f\x7f]")


def claude_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The Claude Code config dir: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``.

    Args:
        env: environment to read (default ``os.environ``); tests pass their own.
    """
    env = os.environ if env is None else env
    configured = env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".claude"


def sanitize_team_name(name: str) -> str:
    """The team's directory name, as Claude Code derives it.

    Every character outside ``[a-zA-Z0-9]`` becomes ``-`` and the result is lowercased.

    Example:
        >>> sanitize_team_name("My Team_1")
        'my-team-1'
    """
    return re.sub(r"[^a-zA-Z0-9]", "-", name).lower()


def sanitize_agent_name(name: str) -> str:
    """The inbox file stem for an agent, as Claude Code derives it.

    Example:
        >>> sanitize_agent_name("team-lead")
        'team-lead'
        >>> sanitize_agent_name("a.b c")
        'a-b-c'
    """
    return re.sub(r"[^a-zA-Z0-9_-]", "-", name)


def implicit_team_name(session_id: str) -> str:
    """The team a session gets without asking: ``session-<first 8 chars of its id>``."""
    return sanitize_team_name(f"session-{session_id[:8]}")


def validate_name(name: str, *, what: str) -> str:
    """Refuse a team or agent name that could steer a path: separators, control chars, dots.

    Raises:
        InboxError: the name is empty, too long, absolute or contains a path separator.
    """
    if not name or len(name) > _MAX_NAME_LEN:
        raise InboxError(f"refused {what} name: empty or longer than {_MAX_NAME_LEN} characters")
    if _UNSAFE_NAME.search(name) or name in {".", ".."} or Path(name).is_absolute():
        raise InboxError(f"refused {what} name {redact(name)!r}: it looks like a path")
    return name


def within(path: Path, root: Path) -> bool:
    """True when ``path``, with every symlink resolved, stays inside ``root``."""
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def inbox_path(config_dir: Path, team: str, agent: str = LEAD_AGENT_NAME) -> Path:
    """``<config>/teams/<team>/inboxes/<agent>.json`` with Claude Code's name sanitizing.

    Raises:
        InboxError: a name looks like a path, or the result leaves the config dir.
    """
    validate_name(team, what="team")
    validate_name(agent, what="agent")
    path = config_dir / "teams" / sanitize_team_name(team) / "inboxes"
    path = path / f"{sanitize_agent_name(agent)}.json"
    if not within(path, config_dir):
        raise InboxError("refused inbox: it resolves outside the config dir", path=str(path))
    return path


class TeamMember(BaseModel):
    """One member of a team's ``config.json``; fields we do not use are kept."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    name: str
    agent_id: str | None = Field(default=None, alias="agentId")
    agent_type: str | None = Field(default=None, alias="agentType")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        try:
            return validate_name(value, what="agent")
        except InboxError as exc:
            raise ValueError(str(exc)) from None


class TeamConfig(BaseModel):
    """A team's ``config.json``; unknown fields are kept, invalid members dropped with a warning."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    name: str
    lead_agent_id: str | None = Field(default=None, alias="leadAgentId")
    lead_session_id: str | None = Field(default=None, alias="leadSessionId")
    lead_process: Any = Field(default=None, alias="leadProcess")
    members: tuple[TeamMember, ...] = ()

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        try:
            return validate_name(value, what="team")
        except InboxError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("members", mode="before")
    @classmethod
    def _valid_members(cls, value: Any) -> Any:
        if not isinstance(value, list):
            if value is not None:
                logger.warning("team config: 'members' is not a list; ignoring it")
            return ()
        kept: list[TeamMember] = []
        for index, raw in enumerate(value):
            try:
                kept.append(TeamMember.model_validate(raw))
            except ValidationError as exc:
                logger.warning("team config: skipped member %d: %s", index, _first_error(exc))
        return tuple(kept)

    @property
    def teammates(self) -> tuple[TeamMember, ...]:
        """The members other than the lead (``name != "team-lead"``)."""
        return tuple(m for m in self.members if m.name != LEAD_AGENT_NAME)

    @property
    def lead_pid(self) -> int | None:
        """The lead's pid from ``leadProcess`` (an int, a digit string or ``{"pid": ...}``)."""
        raw = self.lead_process
        if isinstance(raw, dict):
            raw = raw.get("pid")
        if isinstance(raw, bool):
            return None
        if isinstance(raw, str) and raw.strip().isdigit():
            raw = int(raw.strip())
        return raw if isinstance(raw, int) and raw > 0 else None


@dataclass(frozen=True)
class Team:
    """A team found on disk: its directory and parsed config.

    Attributes:
        config_dir: the Claude Code config dir it lives in.
        dir: ``<config>/teams/<team>``.
        config: the parsed ``config.json``.
    """

    config_dir: Path
    dir: Path
    config: TeamConfig

    @property
    def name(self) -> str:
        """The team's name as written in its config."""
        return self.config.name

    @property
    def lead_inbox(self) -> Path:
        """The lead's inbox: ``<team dir>/inboxes/team-lead.json``."""
        return self.inbox(LEAD_AGENT_NAME)

    def inbox(self, agent: str) -> Path:
        """The inbox of ``agent`` in this team, confined to the config dir."""
        validate_name(agent, what="agent")
        path = self.dir / "inboxes" / f"{sanitize_agent_name(agent)}.json"
        if not within(path, self.config_dir):
            raise InboxError("refused inbox: it resolves outside the config dir", path=str(path))
        return path


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "entry"
    return redact(f"{where}: {err.get('msg', 'invalid')}")


def load_team(team_dir: Path, config_dir: Path) -> Team | None:
    """Parse ``<team_dir>/config.json``; ``None`` (with a warning) when missing or invalid.

    Never writes anything: ``config.json`` belongs to Claude Code.
    """
    config_path = team_dir / "config.json"
    if not within(config_path, config_dir):
        logger.warning("team config %s resolves outside the config dir; ignored", config_path)
        return None
    try:
        size = config_path.stat().st_size
        if size > _MAX_CONFIG_BYTES:
            logger.warning("team config %s is %d bytes, over the cap; ignored", config_path, size)
            return None
        raw = json.loads(config_path.read_bytes())
        config = TeamConfig.model_validate(raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        reason = _first_error(exc) if isinstance(exc, ValidationError) else type(exc).__name__
        logger.warning("team config %s is invalid (%s); ignored", config_path, reason)
        return None
    return Team(config_dir=config_dir, dir=team_dir, config=config)


def find_team(session_id: str, *, config_dir: Path | None = None) -> Team | None:
    """The team whose lead is ``session_id``, or ``None``.

    Scans ``teams/*/config.json`` for ``leadSessionId == session_id``; then tries the
    implicit ``session-<first 8 chars>`` team, accepted when its config names no other lead.
    A ``session-*`` team without ``config.json`` counts as deleted in Claude Code, so it is
    not returned.

    Example:
        >>> team = find_team(session_id)                 # doctest: +SKIP
        >>> [m.name for m in team.config.teammates]      # doctest: +SKIP
        ['alpha', 'beta']
    """
    root = claude_config_dir() if config_dir is None else config_dir
    teams = root / "teams"
    try:
        candidates = sorted(p for p in teams.iterdir() if p.is_dir())
    except OSError:
        return None
    for team_dir in candidates:
        if not (team_dir / "config.json").exists():
            continue
        team = load_team(team_dir, root)
        if team is not None and team.config.lead_session_id == session_id:
            return team
    implicit = teams / implicit_team_name(session_id)
    team = load_team(implicit, root) if implicit.is_dir() else None
    if team is not None and team.config.lead_session_id in (None, session_id):
        return team
    return None
