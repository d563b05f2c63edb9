"""Errors raised inside a run are one line with the right exit code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from teamlead._claude.inbox import read_inbox
from teamlead._claude.inbox.model import entry_key
from teamlead._cli import main
from teamlead._cli.exitcodes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, handle_errors
from teamlead.errors import InboxError, UsageError

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup


def _command(exc: BaseException) -> click.Command:
    @click.command()
    @handle_errors
    def run() -> None:
        raise exc

    return run


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (ExceptionGroup("g", [UsageError("bad spec")]), EXIT_USAGE, "bad spec"),
        (
            BaseExceptionGroup("outer", [ExceptionGroup("inner", [InboxError("refused link")])]),
            EXIT_FAILED,
            "refused link",
        ),
        (
            ExceptionGroup("g", [InboxError("second"), UsageError("first")]),
            EXIT_USAGE,
            "first",
        ),
        (BaseExceptionGroup("g", [KeyboardInterrupt()]), EXIT_INTERRUPTED, "interrupted"),
    ],
)
def test_exception_groups_are_one_line(exc: BaseException, code: int, line: str) -> None:
    result = CliRunner().invoke(_command(exc))
    assert result.exit_code == code
    assert result.output.count("\n") == 1
    assert line in result.output and "Traceback" not in result.output


def test_foreign_errors_in_a_group_are_not_hidden() -> None:
    result = CliRunner().invoke(_command(ExceptionGroup("g", [ValueError("bug")])))
    assert isinstance(result.exception, ExceptionGroup)


def test_a_lone_surrogate_without_msg_id_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert entry_key("a\ud83d", "T", "x\udc00") != entry_key("a", "T", "x")
    assert entry_key("alpha", "T", "hi") == entry_key("alpha", "T", "hi")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    team = tmp_path / "teams" / "t1"
    (team / "inboxes").mkdir(parents=True)
    config = {"name": "t1", "leadSessionId": "s-1", "members": [{"name": "w"}]}
    (team / "config.json").write_text(json.dumps(config))
    raw = '[{"from": "w\\ud83d", "text": "hi \\ud83d there", "timestamp": "T"}]'
    (team / "inboxes" / "team-lead.json").write_text(raw)
    read = read_inbox(team / "inboxes" / "team-lead.json", config_dir=tmp_path)
    assert [m.key.startswith("sha256:") for m in read.messages] == [True]
    result = CliRunner().invoke(main, ["inbox", "show", "--team", "t1"])
    assert result.exit_code == 0, result.output
    assert "\\ud83d" in result.output
