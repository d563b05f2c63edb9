"""Team discovery, name sanitizing and path confinement (teamlead._claude.team)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from teamlead._claude.team import (
    LEAD_AGENT_NAME,
    TeamConfig,
    claude_config_dir,
    find_team,
    implicit_team_name,
    inbox_path,
    sanitize_agent_name,
    sanitize_team_name,
    within,
)
from teamlead.errors import InboxError

SESSION = "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"


def write_team(config_dir: Path, dirname: str, config: dict[str, Any]) -> Path:
    team_dir = config_dir / "teams" / dirname
    team_dir.mkdir(parents=True, exist_ok=True)
    (team_dir / "config.json").write_text(json.dumps(config))
    return team_dir


def team_config(name: str, session: str = SESSION, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "createdAt": 1796002440000,
        "leadAgentId": f"team-lead@{name}",
        "leadSessionId": session,
        "members": [
            {"agentId": f"team-lead@{name}", "name": "team-lead", "agentType": "team-lead"},
            {
                "agentId": f"alpha@{name}",
                "name": "alpha",
                "agentType": "general-purpose",
                "tmuxPaneId": "%3",
                "cwd": "/x",
                "backendType": "in-process",
            },
        ],
        **extra,
    }


def test_config_dir_from_env_or_home(tmp_path: Path) -> None:
    assert claude_config_dir({"CLAUDE_CONFIG_DIR": str(tmp_path)}) == tmp_path
    assert claude_config_dir({}) == Path.home() / ".claude"
    assert claude_config_dir() == Path(os.environ["CLAUDE_CONFIG_DIR"])


@pytest.mark.parametrize(
    ("raw", "team", "agent"),
    [
        ("My Team_1", "my-team-1", "My-Team_1"),
        ("session-d6b404c3", "session-d6b404c3", "session-d6b404c3"),
        ("a.b/c", "a-b-c", "a-b-c"),
        ("Ünïcode", "-n-code", "-n-code"),
    ],
)
def test_sanitizing_matches_claude_code(raw: str, team: str, agent: str) -> None:
    assert sanitize_team_name(raw) == team
    assert sanitize_agent_name(raw) == agent


def test_implicit_team_name_uses_first_eight_chars() -> None:
    assert implicit_team_name(SESSION) == "session-d6b404c3"


def test_inbox_path_layout(tmp_path: Path) -> None:
    path = inbox_path(tmp_path, "My Team", "alpha.1")
    assert path == tmp_path / "teams" / "my-team" / "inboxes" / "alpha-1.json"
    assert inbox_path(tmp_path, "t").name == f"{LEAD_AGENT_NAME}.json"


def test_find_team_by_lead_session(tmp_path: Path) -> None:
    write_team(tmp_path, "other", team_config("other", session="someone-else"))
    team_dir = write_team(tmp_path, "research", team_config("research", color="blue"))
    team = find_team(SESSION, config_dir=tmp_path)
    assert team is not None
    assert team.dir == team_dir
    assert team.name == "research"
    assert team.lead_inbox == team_dir / "inboxes" / "team-lead.json"
    assert [m.name for m in team.config.teammates] == ["alpha"]
    alpha = team.config.teammates[0]
    assert alpha.agent_id == "alpha@research" and alpha.agent_type == "general-purpose"
    # Unknown fields are kept, on the team and on members.
    assert team.config.model_extra == {"createdAt": 1796002440000, "color": "blue"}
    assert alpha.model_extra is not None and alpha.model_extra["tmuxPaneId"] == "%3"


def test_find_team_uses_default_config_dir(tmp_path: Path) -> None:
    config_dir = Path(os.environ["CLAUDE_CONFIG_DIR"])
    write_team(config_dir, "research", team_config("research"))
    team = find_team(SESSION)
    assert team is not None and team.config_dir == config_dir


def test_find_team_implicit_session_team(tmp_path: Path) -> None:
    config = team_config("session-d6b404c3")
    del config["leadSessionId"]
    write_team(tmp_path, "session-d6b404c3", config)
    team = find_team(SESSION, config_dir=tmp_path)
    assert team is not None and team.name == "session-d6b404c3"


def test_implicit_team_of_another_session_is_not_taken(tmp_path: Path) -> None:
    other = "d6b404c3-0000-0000-0000-000000000000"
    write_team(tmp_path, "session-d6b404c3", team_config("session-d6b404c3", session=other))
    assert find_team(SESSION, config_dir=tmp_path) is None


def test_implicit_team_without_config_counts_as_deleted(tmp_path: Path) -> None:
    (tmp_path / "teams" / "session-d6b404c3" / "inboxes").mkdir(parents=True)
    assert find_team(SESSION, config_dir=tmp_path) is None


def test_find_team_without_teams_dir(tmp_path: Path) -> None:
    assert find_team(SESSION, config_dir=tmp_path / "nowhere") is None


def test_invalid_configs_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "teams" / "broken"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text('{"name": "broken", "leadSess')
    write_team(tmp_path, "nameless", {"leadSessionId": SESSION})
    good = write_team(tmp_path, "zz-good", team_config("zz-good"))
    with caplog.at_level(logging.WARNING):
        team = find_team(SESSION, config_dir=tmp_path)
    assert team is not None and team.dir == good
    assert "broken" in caplog.text and "nameless" in caplog.text


def test_config_json_is_never_written(tmp_path: Path) -> None:
    team_dir = write_team(tmp_path, "research", team_config("research"))
    before = (team_dir / "config.json").stat()
    find_team(SESSION, config_dir=tmp_path)
    after = (team_dir / "config.json").stat()
    assert (before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, after.st_size)


@pytest.mark.parametrize(
    ("lead_process", "pid"),
    [
        (4242, 4242),
        ("4242", 4242),
        ({"pid": 4242, "tty": "x"}, 4242),
        ({"pid": "17"}, 17),
        (None, None),
        ("abc", None),
        (True, None),
        (-3, None),
        ({"no": 1}, None),
    ],
)
def test_lead_pid_shapes(lead_process: Any, pid: int | None) -> None:
    config = TeamConfig.model_validate({"name": "t", "leadProcess": lead_process})
    assert config.lead_pid == pid


# -- security: names read from files never steer a path ----------------------------------


@pytest.mark.parametrize("bad", ["../evil", "/etc/passwd", "a/b", "..", "x\\y", "nul\x00", ""])
def test_path_like_names_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InboxError, match="refused"):
        inbox_path(tmp_path, bad)
    with pytest.raises(InboxError, match="refused"):
        inbox_path(tmp_path, "team", bad)


def test_team_with_path_like_name_in_config_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_team(tmp_path, "evil", team_config("../../outside"))
    write_team(tmp_path, "evil2", team_config("/abs/team"))
    with caplog.at_level(logging.WARNING):
        assert find_team(SESSION, config_dir=tmp_path) is None
    assert "looks like a path" in caplog.text


def test_members_with_path_like_names_are_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = team_config("research")
    config["members"] += [{"name": "../../../escape"}, {"name": "/abs"}, {"agentId": "no-name"}]
    write_team(tmp_path, "research", config)
    with caplog.at_level(logging.WARNING):
        team = find_team(SESSION, config_dir=tmp_path)
    assert team is not None
    assert [m.name for m in team.config.members] == ["team-lead", "alpha"]
    assert caplog.text.count("skipped member") == 3
    with pytest.raises(InboxError):
        team.inbox("../../../escape")


def test_team_dir_symlinked_out_of_config_dir_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config_dir = tmp_path / "config"
    outside = tmp_path / "outside"
    write_team(outside, "research", team_config("research"))
    (config_dir / "teams").mkdir(parents=True)
    (config_dir / "teams" / "research").symlink_to(outside / "teams" / "research")
    with caplog.at_level(logging.WARNING):
        assert find_team(SESSION, config_dir=config_dir) is None
    assert "outside the config dir" in caplog.text


def test_within(tmp_path: Path) -> None:
    assert within(tmp_path / "a" / "b", tmp_path)
    assert not within(tmp_path / ".." / "x", tmp_path)
    link = tmp_path / "link"
    link.symlink_to("/")
    assert not within(link / "etc", tmp_path)
