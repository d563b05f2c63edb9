"""The loopback guard parses URLs strictly and never resolves names."""

from __future__ import annotations

from pathlib import Path

import pytest

from teamlead._claude.loopback import ensure_loopback, loopback_problem
from teamlead.errors import SetupError
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ScriptedServer
from teamlead.testing.offline import offline_env


def _echo(req: ScriptedRequest) -> Reply:
    return Reply.text("x")


GOOD = [
    "http://127.0.0.1:8080",
    "http://127.0.0.1",
    "https://127.0.0.1:1/prefix/v1",
    "http://127.1.2.3:9/",
    "http://[::1]:8080",
    "http://127.0.0.1:8080/p?q=1#f",
]
BAD = [
    "http://192.0.2.2:1\\@127.0.0.1:2",  # Node connects to 192.0.2.2
    "http://192.0.2.2:1@127.0.0.1:2",
    "http://user:pw@127.0.0.1:2",
    "http://@127.0.0.1:2",
    "http://localhost:8080",  # only the resolver knows where this goes
    "http://127.0.0.1.nip.io:80",
    "http://127.evil.example:80",
    "http://127.1:80",  # Node reads 127.0.0.1, ipaddress refuses: refused, no guessing
    "http://2130706433:80",
    "http://0x7f.0.0.1:80",
    "http://[::ffff:192.0.2.2]:80",
    "http://127.0.0.1:8080\t.evil",
    "http://127.0.0.1:99999",
    " http://127.0.0.1:80",
    "ftp://127.0.0.1:21",
    "http:/127.0.0.1:80",
    "https://example.com",
    "http://192.0.2.2:80/127.0.0.1",
    "",
]


@pytest.mark.parametrize("url", GOOD)
def test_literal_loopback_urls_pass(url: str) -> None:
    assert loopback_problem(url) is None
    ensure_loopback(url)


@pytest.mark.cli  # OfflineClaude is the thing under test (it refuses before starting)
@pytest.mark.parametrize("url", BAD)
def test_userinfo_names_and_odd_urls_are_refused(url: str, tmp_path: Path) -> None:
    assert loopback_problem(url) is not None
    with pytest.raises(SetupError, match="refusing to run offline"):
        ensure_loopback(url)
    with pytest.raises(SetupError):
        OfflineClaude(url, state_dir=tmp_path)
    with pytest.raises(SetupError):
        offline_env(tmp_path, "http://127.0.0.1:1", extra={"ANTHROPIC_BASE_URL": url})


@pytest.mark.parametrize("host", ["127.evil.example", "127.0.0.1.nip.io", "192.0.2.2", "::2"])
def test_scripted_server_binds_literal_loopback_only(host: str) -> None:
    with pytest.raises(SetupError, match="literal IPv4 loopback"):
        ScriptedServer(_echo, host=host)


def test_localhost_is_mapped_not_resolved() -> None:
    assert ScriptedServer(_echo, host="localhost").host == "127.0.0.1"
    assert ScriptedServer(_echo, host="127.0.0.2").host == "127.0.0.2"


def test_offline_env_routes_straight_to_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://192.0.2.9:3128")
    env = offline_env(tmp_path, "http://127.0.0.1:1")
    assert env["HTTPS_PROXY"] == "" and env["https_proxy"] == ""
    assert env["CLAUDE_CODE_USE_BEDROCK"] == ""
