"""Hostile text is printed as text, never as markup or terminal escapes."""

from __future__ import annotations

import io
import json
import os
import pty
import termios
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console, Group

from teamlead._cli import main
from teamlead._cli.running import run_session
from teamlead._cli.team_view import LiveTeamView, PlainProgress
from teamlead._redact import redact, terminal_safe
from teamlead.events import Finished, InboxCollected, Resuming, WaitingForTeam
from teamlead.experiment import TrialRecord, TrialWriter

from .parsing import HandFed

TRACE = Path(__file__).parent / "fixtures" / "traces" / "parallel-agents.query.jsonl"
CSI_CLEAR = "\x1b[2J"
OSC_TITLE = "\x1b]0;pwned\x07"
C1_CSI = "\x9b2J"
HOSTILE = f"[/etc] [/bold] [link=x]{CSI_CLEAR}{OSC_TITLE}{C1_CSI}\x08\u202e"
RAW = (CSI_CLEAR, OSC_TITLE, C1_CSI, "\x1b", "\x07", "\x9b", "\x08", "\u202e")


def _hostile_items() -> list[Any]:
    text = TRACE.read_text().replace("probe A", json.dumps(HOSTILE)[1:-1])
    items: list[Any] = [json.loads(line) for line in text.splitlines() if line.strip()]
    items += [
        WaitingForTeam(session_id="s", pending_members=[HOSTILE], team="t", wait_s=5),
        InboxCollected(team="t", messages=[{"from": "[/bold]" + OSC_TITLE, "kind": "idle"}]),
        Resuming(session_id="s", round=1, deliveries=["inbox:k"]),
        Finished(status="completed", result="answer", session_id="s", resumes=1),
    ]
    return items


def test_redaction_follows_the_environment_as_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    # the secret values are looked up again only when the environment changed: a key set
    # after the first redaction is redacted too, and one unset is text again
    assert redact("sk-late-0123456789") == "sk-late-0123456789"
    monkeypatch.setenv("LATE_API_KEY", "sk-late-0123456789")
    assert redact("x sk-late-0123456789 y") == "x [redacted] y"
    monkeypatch.setenv("LATE_API_KEY", "sk-other-0123456789")
    assert redact("sk-late-0123456789 sk-other-0123456789") == "sk-late-0123456789 [redacted]"
    monkeypatch.delenv("LATE_API_KEY")
    assert redact("sk-other-0123456789") == "sk-other-0123456789"


def test_terminal_safe_escapes_every_control() -> None:
    safe = terminal_safe(HOSTILE + "\n\t\x00\x7f")
    for raw in (*RAW, "\n", "\t", "\x00", "\x7f"):
        assert raw not in safe
    assert "[/etc]" in safe and "\\x1b]0;pwned\\x07" in safe
    assert terminal_safe("a\nb", keep_newlines=True) == "a\nb"


def test_terminal_safe_escapes_every_bidi_control() -> None:
    """The embeddings, overrides, isolates and marks that reorder what a terminal or the
    view's page shows."""
    bidi = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    assert terminal_safe(f"a{bidi}b") == "a" + "".join(f"\\u{ord(c):04x}" for c in bidi) + "b"


def test_live_view_renders_markup_as_text() -> None:
    out = io.StringIO()
    view = LiveTeamView(Console(file=out, force_terminal=True, width=200), HandFed())
    for item in _hostile_items():
        view.handle(item)
    view.close()
    screen = out.getvalue()
    assert "[/etc]" in screen and "[/bold]" in screen
    for raw in (CSI_CLEAR, OSC_TITLE, C1_CSI, "\x9b", "\x08", "\u202e", "]0;pwned\x07"):
        assert raw not in screen
    assert screen.rstrip().endswith("\x1b[?25h")  # the cursor is shown again


class _BrokenView(LiveTeamView):
    def __rich__(self) -> Group:
        raise RuntimeError("render failed")


def test_cursor_restored_when_rendering_fails() -> None:
    out = io.StringIO()
    view = _BrokenView(Console(file=out, force_terminal=True, width=120), HandFed())
    with pytest.raises(RuntimeError):
        view.close()
    assert "\x1b[?25l" in out.getvalue()
    assert out.getvalue().endswith("\x1b[?25h")


def test_plain_lines_escape_controls() -> None:
    out = io.StringIO()
    progress = PlainProgress(out, HandFed())
    for item in _hostile_items():
        progress.handle(item)
    text = out.getvalue()
    assert "[/etc]" in text
    for raw in RAW:
        assert raw not in text
    assert all(line.startswith("[") for line in text.splitlines())


def test_inbox_show_escapes_osc_and_csi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    team = tmp_path / "teams" / "t1"
    (team / "inboxes").mkdir(parents=True)
    member = {"name": "worker", "agentId": "worker@t1"}
    config = {"name": "t1", "leadSessionId": "s-1", "members": [member]}
    (team / "config.json").write_text(json.dumps(config))
    entry = {
        "from": "worker" + OSC_TITLE,
        "text": "hello " + CSI_CLEAR + OSC_TITLE,
        "timestamp": "2026-01-01T00:00:00Z" + OSC_TITLE,
    }
    (team / "inboxes" / "team-lead.json").write_text(json.dumps([entry]))
    result = CliRunner().invoke(main, ["inbox", "show", "--team", "t1"])
    assert result.exit_code == 0, result.output
    assert "hello" in result.output
    for raw in RAW:
        assert raw not in result.output


ANSWER = f"line one\ttabbed\nline two {CSI_CLEAR}{OSC_TITLE}{C1_CSI}\r\x08 end"


def _answer_items() -> AsyncIterator[Any]:
    async def items() -> AsyncIterator[Any]:
        yield Finished(status="completed", result=ANSWER, session_id="s", resumes=0)

    return items()


def test_the_answer_on_a_terminal_is_escaped_but_keeps_newlines_and_tabs() -> None:
    main_fd, tty_fd = pty.openpty()
    try:
        attrs = termios.tcgetattr(tty_fd)
        attrs[1] &= ~termios.OPOST  # the bytes as written: no "\n" -> "\r\n" on the way
        termios.tcsetattr(tty_fd, termios.TCSANOW, attrs)
        with os.fdopen(tty_fd, "w", encoding="utf-8", closefd=False) as terminal:
            assert terminal.isatty()
            code = run_session(
                _answer_items, HandFed(), output="quiet", stdout=terminal, stderr=io.StringIO()
            )
        shown = os.read(main_fd, 65536).decode()
    finally:
        os.close(main_fd)
        os.close(tty_fd)
    assert code == 0
    assert shown == ("line one\ttabbed\nline two \\x1b[2J\\x1b]0;pwned\\x07\\x9b2J\\x0d\\x08 end\n")
    for raw in RAW:
        assert raw not in shown


def test_the_answer_piped_keeps_every_character_for_the_pipeline() -> None:
    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "w", encoding="utf-8") as pipe:
        assert not pipe.isatty()
        code = run_session(
            _answer_items, HandFed(), output="quiet", stdout=pipe, stderr=io.StringIO()
        )
    with os.fdopen(read_fd, encoding="utf-8", newline="") as reader:
        assert reader.read() == ANSWER + "\n"
    assert code == 0


def test_an_answer_with_half_a_surrogate_pair_is_written_piped() -> None:
    # a JavaScript cut can leave half a pair, which no UTF-8 stream can write as it is
    def items() -> AsyncIterator[Any]:
        async def one() -> AsyncIterator[Any]:
            yield Finished(status="completed", result="cut \ud83d here", session_id="s", resumes=0)

        return one()

    read_fd, write_fd = os.pipe()
    with os.fdopen(write_fd, "w", encoding="utf-8") as pipe:
        code = run_session(items, HandFed(), output="quiet", stdout=pipe, stderr=io.StringIO())
    with os.fdopen(read_fd, encoding="utf-8") as reader:
        assert reader.read() == "cut \ufffd here\n"
    assert code == 0


@pytest.mark.parametrize(
    "args",
    [
        ["ask", "hi", "--max-resumes", "1" + OSC_TITLE],  # a bad option value
        ["ask", "hi", "--deadline", "9" + OSC_TITLE + CSI_CLEAR],
        ["ask", "hi", "extra" + OSC_TITLE + CSI_CLEAR],  # an unexpected extra argument
        ["ask", "hi", "--max-res" + OSC_TITLE],  # an unknown option
        ["no-such-command" + OSC_TITLE],
    ],
)
def test_usage_errors_escape_what_was_typed(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()  # one line, in teamlead's own style
    assert line.startswith("teamlead: error: ") and "\\x1b]0;pwned\\x07" in line
    for raw in RAW:
        assert raw not in result.stderr


def test_experiment_progress_bar_shows_the_spec_name_as_text(tmp_path: Path) -> None:
    # Every trial is already recorded, so the run starts no CLI: only the bar is drawn.
    name = "[/bold] [/etc] ab" + OSC_TITLE
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[experiment]\nname = {json.dumps(name)}\ntrials = 1\ncontrol = "a"\n'
        '[[variants]]\nname = "a"\nstrategy = "baseline"\n'
        '[[variants]]\nname = "b"\nstrategy = "baseline"\n'
        '[[tasks]]\nid = "t"\nprompt = "Question."\n'
    )
    out = tmp_path / "out"
    out.mkdir()
    with TrialWriter(out / "trials.jsonl") as writer:
        for variant in ("a", "b"):
            writer.append(
                TrialRecord(variant=variant, task="t", trial=0, status="completed", wall_s=1.0)
            )
    args = ["experiment", "run", str(spec), "--out", str(out), "--no-relay"]
    # the bar draws as on a wide terminal (rich reads FORCE_COLOR and COLUMNS)
    env = {"ANTHROPIC_API_KEY": "sk-test-only-not-real", "FORCE_COLOR": "1", "COLUMNS": "200"}
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    shown = result.stderr
    assert "[/bold] [/etc] ab\\x1b]0;pwned\\x07" in shown and "in flight 0" in shown
    assert "]0;pwned\x07" not in shown
