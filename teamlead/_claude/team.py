"""Where a Claude Code team lives on disk, and who is in it.

Claude Code keeps teams under ``<config>/teams/<team>/``: a ``config.json`` that names the
lead session and the members, and ``inboxes/<agent>.json`` files. This module finds the
team of a lead session and turns its ``config.json`` into a :class:`TeamConfig`. Names read
from disk are validated and every path is confined to the config dir, because a teammate
(or anything else able to write there) controls those files.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from .._redact import redact
from ..errors import InboxError
from .files import FileProblem, is_session_id, loads, open_regular, read_regular

__all__ = [
    "LEAD_AGENT_NAME",
    "Team",
    "TeamConfig",
    "TeamMember",
    "claude_config_dir",
    "first_error",
    "find_team",
    "implicit_team_name",
    "inbox_path",
    "TeamResolution",
    "load_team",
    "resolve_team",
    "sanitize_agent_name",
    "sanitize_team_name",
    "within",
]

logger = logging.getLogger(__name__)

LEAD_AGENT_NAME = "team-lead"
"""The lead's agent name in every team; its agent id is ``team-lead@<team>``."""

_MAX_CONFIG_BYTES = 1 << 20
_MAX_NAME_LEN = 200
_PID_LIMIT = 2**31
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
        InboxError: a name looks like a path.
    """
    validate_name(team, what="team")
    return _inbox_in(config_dir / "teams" / sanitize_team_name(team), agent)


def _inbox_in(team_dir: Path, agent: str) -> Path:
    """``agent``'s inbox in ``team_dir``. Where it resolves is for its readers to check: each
    refuses a symlink out of the config dir with a status and one warning."""
    validate_name(agent, what="agent")
    return team_dir / "inboxes" / f"{sanitize_agent_name(agent)}.json"


def _checked_name(what: str) -> AfterValidator:
    """A pydantic check that refuses a ``what`` name read from disk that could steer a path."""

    def check(value: str) -> str:
        try:
            return validate_name(value, what=what)
        except InboxError as exc:
            raise ValueError(str(exc)) from None

    return AfterValidator(check)


class TeamMember(BaseModel):
    """One member of a team's ``config.json``; fields we do not use are kept."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    name: Annotated[str, _checked_name("agent")]
    agent_id: str | None = Field(default=None, alias="agentId")
    agent_type: str | None = Field(default=None, alias="agentType")


class TeamConfig(BaseModel):
    """A team's ``config.json``; unknown fields are kept, invalid members dropped with a warning."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    name: Annotated[str, _checked_name("team")]
    lead_agent_id: str | None = Field(default=None, alias="leadAgentId")
    lead_session_id: str | None = Field(default=None, alias="leadSessionId")
    lead_process: Any = Field(default=None, alias="leadProcess")
    members: tuple[TeamMember, ...] = ()

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
                logger.warning("team config: skipped member %d: %s", index, first_error(exc))
        return tuple(kept)

    @property
    def teammates(self) -> tuple[TeamMember, ...]:
        """The members other than the lead (``name != "team-lead"``)."""
        return tuple(m for m in self.members if m.name != LEAD_AGENT_NAME)

    @property
    def lead_pid(self) -> int | None:
        """The lead's pid from ``leadProcess`` (an int, a digit string or ``{"pid": ...}``);
        ``None`` for anything that is no pid."""
        raw = self.lead_process
        if isinstance(raw, dict):
            raw = raw.get("pid")
        if isinstance(raw, bool):
            return None
        digits = raw.strip() if isinstance(raw, str) else ""
        # not "²" (a digit to isdigit(), not to int()), nor thousands of digits (int()
        # refuses past 4300): a pid has ten at most
        if digits.isascii() and digits.isdigit() and len(digits) <= 10:
            raw = int(digits)
        # a pid is a C int: a larger one names no process (psutil would overflow on it)
        return raw if isinstance(raw, int) and 0 < raw < _PID_LIMIT else None


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
        """The inbox of ``agent`` in this team (:func:`_inbox_in`)."""
        return _inbox_in(self.dir, agent)


def first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``<field path>: <message>``, redacted."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "entry"
    return redact(f"{where}: {err.get('msg', 'invalid')}")


def load_team(team_dir: Path, config_dir: Path) -> Team | None:
    """Parse ``<team_dir>/config.json``; ``None`` (with a warning) when missing or invalid.

    Only a regular file is read (a FIFO there never blocks), at most 1 MiB, and JSON
    nested too deeply counts as invalid. Never writes anything: ``config.json`` belongs
    to Claude Code.
    """
    config_path = team_dir / "config.json"
    if not within(config_path, config_dir):
        logger.warning("team config %s resolves outside the config dir; ignored", config_path)
        return None
    try:
        raw = loads(read_regular(config_path, _MAX_CONFIG_BYTES).decode("utf-8"))
        config = TeamConfig.model_validate(raw)
    except FileProblem as problem:
        if problem.kind != "missing":
            logger.warning("team config %s; ignored", problem.message)
        return None
    except ValueError as exc:  # not UTF-8, not JSON (or nested too deeply), not a config
        if isinstance(exc, ValidationError):
            reason = first_error(exc)
        else:
            reason = str(exc) if "nested" in str(exc) else type(exc).__name__
        logger.warning("team config %s is invalid (%s); ignored", config_path, reason)
        return None
    return Team(config_dir=config_dir, dir=team_dir, config=config)


def find_team(session_id: str, *, config_dir: Path | None = None) -> Team | None:
    """The team whose lead is ``session_id``, or ``None``.

    Scans ``teams/*/config.json`` for ``leadSessionId == session_id`` and tries the
    implicit ``session-<first 8 chars>`` team, accepted when its config names no other
    lead. A ``session-*`` team without ``config.json`` counts as deleted in Claude Code,
    so it is not returned. When more than one team claims the session (anyone able to
    write the config dir can forge a claim), see :func:`resolve_team`: only a team that
    is provably the session's is returned, else ``None``.

    Example:
        >>> team = find_team(session_id)                 # doctest: +SKIP
        >>> [m.name for m in team.config.teammates]      # doctest: +SKIP
        ['alpha', 'beta']
    """
    return resolve_team(session_id, config_dir=config_dir).team


@dataclass(frozen=True)
class TeamResolution:
    """Which team is the session's, and which others claimed it.

    Attributes:
        team: the session's team, or ``None``.
        claimants: every team that claims the session, the chosen one included.
        ambiguous: one line saying that several teams claim it (logged once), or ``None``.
    """

    team: Team | None
    claimants: tuple[Team, ...] = ()
    ambiguous: str | None = None


def resolve_team(session_id: str, *, config_dir: Path | None = None) -> TeamResolution:
    """Find the session's team, refusing to guess between rival claims.

    One claimant is the team. Among several, the implicit ``session-<8>`` team wins, then
    the single claimant the lead's own transcript names (``team_name`` in its records);
    if neither settles it, no team is used. Either way one warning names the claimants.
    """
    root = claude_config_dir() if config_dir is None else config_dir
    teams = root / "teams"
    try:
        candidates = sorted(p for p in teams.iterdir() if p.is_dir())
    except OSError:
        return TeamResolution(None)
    implicit_dir = teams / implicit_team_name(session_id)
    claimants: list[Team] = []
    implicit: Team | None = None
    for team_dir in candidates:
        if not (team_dir / "config.json").exists():
            continue
        team = load_team(team_dir, root)
        if team is None:
            continue
        lead = team.config.lead_session_id
        if team_dir == implicit_dir and lead in (None, session_id):
            implicit = team
            claimants.append(team)
        elif lead == session_id:
            claimants.append(team)
    if len(claimants) <= 1:
        return TeamResolution(claimants[0] if claimants else None, tuple(claimants))
    chosen = implicit or _named_by_transcript(root, session_id, claimants)
    names = ", ".join(repr(redact(t.dir.name)) for t in claimants)
    verdict = (
        f"using {chosen.dir.name!r}, the session's own"
        if chosen is not None
        else "none is provably the session's, so none is used"
    )
    warning = f"{len(claimants)} teams claim session {session_id} ({names}); {verdict}"
    logger.warning("%s", warning)
    return TeamResolution(chosen, tuple(claimants), warning)


_MAX_TRANSCRIPT_SCAN = 64 * 1024 * 1024


def _named_by_transcript(root: Path, session_id: str, claimants: list[Team]) -> Team | None:
    """The one claimant whose name the lead's own transcript gives as ``team_name``."""
    if not is_session_id(session_id):
        return None
    named: set[str] = set()
    for path in sorted((root / "projects").glob(f"*/{session_id}.jsonl"))[:1]:
        if not within(path, root):
            continue
        try:
            fh = open_regular(path)
        except FileProblem:
            continue
        with fh:
            for line in fh.read(_MAX_TRANSCRIPT_SCAN).split(b"\n"):
                if b'"team_name"' in line:
                    named.update(_team_names(line))
    by_dir = {sanitize_team_name(n) for n in named}
    found = [t for t in claimants if t.dir.name in by_dir]
    return found[0] if len(found) == 1 else None


def _team_names(line: bytes) -> list[str]:
    """``team_name`` values in the lead's (main-thread) tool calls and tool results."""
    try:
        record = loads(line)
    except ValueError:
        return []
    if not isinstance(record, dict) or record.get("isSidechain"):
        return []
    found: list[str] = []
    result = record.get("toolUseResult")
    if isinstance(result, dict) and isinstance(result.get("team_name"), str):
        found.append(result["team_name"])
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            value = block.get("input", {})
            if isinstance(value, dict) and isinstance(value.get("team_name"), str):
                found.append(value["team_name"])
    return found
