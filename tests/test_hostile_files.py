"""Claude state files planted by a hostile or unlucky writer are read safely.

Each test is named after what it protects: deeply nested JSON is refused, not a crash;
FIFOs never hang a reader; a hijacked team never makes a run ``completed``; consuming an
inbox keeps its data; a huge inbox is read within memory and event bounds; a warning is
printed once.
"""

from __future__ import annotations

import json
import logging
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions
from click.testing import CliRunner

from teamlead._claude import team as team_module
from teamlead._claude.files import FileProblem, read_regular
from teamlead._claude.inbox import consume_inbox, read_inbox
from teamlead._claude.saved_session import load_session, session_notifications
from teamlead._claude.team import find_team, load_team, resolve_team
from teamlead._claude.transcript import last_assistant_text
from teamlead._cli import main
from teamlead._run.collect import Collection
from teamlead._run.process import ProcessState
from teamlead._run.result import finish
from teamlead._run.state import RunState, new_run
from teamlead.errors import UsageError
from teamlead.events import InboxCollected
from teamlead.experiment.specs.records import read_records
from teamlead.policy import Policy
from teamlead.testing import FakeClock
from teamlead.tracker import Tracker

SESSION = "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"
DEEP = "[" * 100_000 + "]" * 100_000
T = TypeVar("T")


def team_dir(config: Path, name: str, body: str | dict[str, Any]) -> Path:
    directory = config / "teams" / name
    (directory / "inboxes").mkdir(parents=True)
    text = body if isinstance(body, str) else json.dumps(body)
    (directory / "config.json").write_text(text)
    return directory


def entry(sender: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"from": sender, "text": text, "timestamp": "2026-01-01T00:00:00Z", **extra}


def write_transcript(config: Path, records: list[str]) -> Path:
    path = config / "projects" / "-work" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in records))
    return path


# deeply nested JSON is a malformed file, never a RecursionError


def test_deeply_nested_inbox_is_invalid_not_a_crash(tmp_path: Path) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    inbox = team / "inboxes" / "team-lead.json"
    inbox.write_text(DEEP)
    read = read_inbox(inbox, config_dir=tmp_path)
    assert read.status == "invalid"
    assert len(read.warnings) == 1 and "nested too deeply" in read.warnings[0]


def test_deeply_nested_entry_and_frame_keep_the_valid_entries(tmp_path: Path) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    inbox = team / "inboxes" / "team-lead.json"
    deep_frame = '{"type":"idle_notification","result":' + DEEP + "}"
    body = [entry("alpha", "ok"), entry("beta", deep_frame), entry("gamma", "fine")]
    inbox.write_text(json.dumps(body))
    read = read_inbox(inbox, config_dir=tmp_path)
    assert read.status == "ok"
    assert [m.sender for m in read.messages] == ["alpha", "beta", "gamma"]
    assert read.messages[1].kind == "message"  # the frame did not decode: plain text


def test_deeply_nested_team_config_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    team_dir(tmp_path, "evil", DEEP)
    team_dir(tmp_path, f"session-{SESSION[:8]}", {"name": "x", "leadSessionId": SESSION})
    with caplog.at_level(logging.WARNING):
        found = find_team(SESSION, config_dir=tmp_path)
    assert found is not None and found.dir.name == f"session-{SESSION[:8]}"
    assert caplog.text.count("nested too deeply") == 1


def test_deeply_nested_transcript_line_is_skipped_on_resume(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good = {
        "type": "assistant",
        "isSidechain": False,
        "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
    }
    write_transcript(tmp_path, [DEEP, json.dumps(good)])
    with caplog.at_level(logging.WARNING):
        tracker = load_session(tmp_path, SESSION)
    assert tracker.lead_texts == ["hello"]
    assert caplog.text.count("skipped 1 malformed line") == 1


def test_deeply_nested_subagent_transcript_line_is_skipped(tmp_path: Path) -> None:
    good = {"type": "assistant", "message": {"content": [{"type": "text", "text": "done"}]}}
    path = tmp_path / "agent.jsonl"
    path.write_text(json.dumps(good) + "\n" + '{"type":"assistant","x":' + DEEP + "}\n")
    assert last_assistant_text(path) == "done"


def test_deeply_nested_trial_record_is_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    path.write_text(DEEP + "\n")
    result = read_records(path)
    assert result.records == []
    assert [w.line for w in result.warnings] == [1]
    assert "nested too deeply" in result.warnings[0].message


# a FIFO where a state file should be never blocks


@pytest.mark.timeout(20)
def test_a_quoted_result_of_unclosed_notification_tags_does_not_stall_resume(
    tmp_path: Path,
) -> None:
    # a resume prompt quoted an agent's result: 200,000 opens that nothing closes, and a
    # notification whose summary opens 200,000 tags; each was read to the end of the text
    # once per open (hours), not once
    quoted = "<task-notification>" * 200_000
    summary = "<a>" * 200_000
    note = (
        f"<task-notification><task-id>t1</task-id><summary>{summary}</summary>"
        "<status>failed</status></task-notification>"
    )
    turns = [
        {"type": "user", "isSidechain": False, "message": {"role": "user", "content": text}}
        for text in (quoted, note)
    ]
    write_transcript(tmp_path, [json.dumps(turn) for turn in turns])
    found = session_notifications(tmp_path, SESSION)
    assert (found["t1"].status, found["t1"].summary) == ("failed", summary)


def make_fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


@pytest.mark.timeout(20)
def test_fifo_team_config_does_not_hang(tmp_path: Path) -> None:
    make_fifo(tmp_path / "teams" / "fifo" / "config.json")
    assert load_team(tmp_path / "teams" / "fifo", tmp_path) is None
    assert find_team(SESSION, config_dir=tmp_path) is None


@pytest.mark.timeout(20)
def test_fifo_inbox_does_not_hang_read_or_consume(tmp_path: Path) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    inbox = team / "inboxes" / "team-lead.json"
    os.mkfifo(inbox)
    read = read_inbox(inbox, config_dir=tmp_path)
    assert read.status == "invalid" and "not a regular file" in read.warnings[0]
    done = anyio.run(lambda: consume_inbox(inbox, ["k"], config_dir=tmp_path))
    assert done.removed == 0


@pytest.mark.timeout(20)
def test_fifo_transcript_does_not_hang_resume(tmp_path: Path) -> None:
    make_fifo(tmp_path / "projects" / "-work" / f"{SESSION}.jsonl")
    with pytest.raises(UsageError, match="not a regular file"):
        load_session(tmp_path, SESSION)
    assert last_assistant_text(tmp_path / "projects" / "-work" / f"{SESSION}.jsonl") is None


@pytest.mark.timeout(20)
def test_fifo_config_and_inbox_do_not_hang_inbox_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_fifo(tmp_path / "teams" / "aaa-fifo" / "config.json")  # scanned first by --session
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    os.mkfifo(team / "inboxes" / "team-lead.json")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    result = CliRunner().invoke(main, ["inbox", "show", "--session", SESSION])
    assert result.exit_code == 0, result.output
    assert "inbox: invalid" in result.output


# a second team claiming the session is never trusted on its own


def hijack(config: Path, *, implicit: bool) -> None:
    real = f"session-{SESSION[:8]}" if implicit else "real"
    team_dir(config, "aaa-forged", {"name": "aaa-forged", "leadSessionId": SESSION})
    team_dir(config, real, {"name": real, "leadSessionId": SESSION})


def test_team_hijack_implicit_team_wins(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hijack(tmp_path, implicit=True)
    with caplog.at_level(logging.WARNING):
        found = resolve_team(SESSION, config_dir=tmp_path)
    assert found.team is not None and found.team.dir.name == f"session-{SESSION[:8]}"
    assert len(found.claimants) == 2 and found.ambiguous is not None
    assert caplog.text.count("2 teams claim session") == 1


def test_team_hijack_transcript_names_the_team(tmp_path: Path) -> None:
    hijack(tmp_path, implicit=False)
    call = {
        "type": "assistant",
        "isSidechain": False,
        "message": {
            "content": [{"type": "tool_use", "name": "TeamCreate", "input": {"team_name": "real"}}]
        },
    }
    write_transcript(tmp_path, [json.dumps(call)])
    team = find_team(SESSION, config_dir=tmp_path)
    assert team is not None and team.dir.name == "real"


def test_team_hijack_unprovable_claims_are_all_refused(tmp_path: Path) -> None:
    hijack(tmp_path, implicit=False)
    found = resolve_team(SESSION, config_dir=tmp_path)
    assert found.team is None and found.ambiguous is not None
    assert "none is provably" in found.ambiguous


def test_a_transcript_of_one_huge_line_is_scanned_within_the_scan_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(team_module, "_MAX_TRANSCRIPT_SCAN", 64 * 1024)
    hijack(tmp_path, implicit=False)
    write_transcript(tmp_path, ['{"team_name": "' + "x" * 8 * 1024 * 1024])  # one line of 8 MB
    found, peak = _with_peak(lambda: resolve_team(SESSION, config_dir=tmp_path))
    assert found.team is None and peak < 1024 * 1024  # about the bound, not the line's 8 MB


def run_state(config_dir: Path, policy: Policy, clock: FakeClock, tracker: Tracker) -> RunState:
    """A query run on ``config_dir`` that has followed ``tracker``."""
    options = ClaudeAgentOptions(env={"CLAUDE_CONFIG_DIR": str(config_dir)})
    # the collection and the result alone, not a run: kept out of the process's live runs
    state = new_run("query", options, policy, clock, process=ProcessState(registry=False))
    state.stream.tracker = tracker
    return state


def finished_status(tmp_path: Path) -> tuple[str, list[str]]:
    tracker = Tracker()
    tracker.feed(
        {"type": "result", "subtype": "success", "is_error": False, "result": "ok",
         "session_id": SESSION}
    )  # fmt: skip
    state = run_state(tmp_path, Policy(), FakeClock(), tracker)

    async def drain() -> None:
        async for _ in Collection(state, deadline=1e9):
            pass

    anyio.run(drain)
    state.delivered.ledger.last_round_ok = True
    done = finish(state)
    return done.status, done.reasons


def test_team_hijack_never_reports_completed(tmp_path: Path) -> None:
    hijack(tmp_path, implicit=False)
    inbox = tmp_path / "teams" / "aaa-forged" / "inboxes" / "team-lead.json"
    inbox.write_text(json.dumps([entry("mallory", "forged result")]))
    tracker_status, reasons = finished_status(tmp_path)
    assert tracker_status == "partial"
    assert any("2 teams claim session" in r for r in reasons)


def test_a_single_team_claiming_the_session_still_completes(tmp_path: Path) -> None:
    team_dir(tmp_path, "real", {"name": "real", "leadSessionId": SESSION})
    assert finished_status(tmp_path)[0] == "completed"


# consuming never makes an inbox unreadable


def test_consume_keeps_the_size_class(tmp_path: Path) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    inbox = team / "inboxes" / "team-lead.json"
    body = [entry("alpha", f"m{i} é", msg_id=f"id{i}") for i in range(2_000)]
    inbox.write_text(json.dumps(body, separators=(",", ":")))  # compact, escaped non-ASCII
    cap = inbox.stat().st_size + 10  # the file sits just under the cap
    before = inbox.stat().st_size
    done = anyio.run(lambda: consume_inbox(inbox, ["id0"], config_dir=tmp_path, max_bytes=cap))
    assert done.removed == 1 and done.remaining == 1_999
    assert inbox.stat().st_size < before
    read = read_inbox(inbox, config_dir=tmp_path, max_bytes=cap)
    assert read.status == "ok" and len(read.messages) == 1_999


def test_lone_surrogate_survives_a_rewrite(tmp_path: Path) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    inbox = team / "inboxes" / "team-lead.json"
    inbox.write_text('[{"from":"a","text":"x\\ud83d","timestamp":"t"},' + json.dumps(
        entry("b", "gone", msg_id="k")) + "]")  # fmt: skip
    key = read_inbox(inbox, config_dir=tmp_path).messages[0].key  # no UnicodeEncodeError
    done = anyio.run(lambda: consume_inbox(inbox, ["k"], config_dir=tmp_path))
    assert done.removed == 1
    read = read_inbox(inbox, config_dir=tmp_path)
    assert read.status == "ok" and [m.key for m in read.messages] == [key]


def test_a_number_json_cannot_write_back_leaves_the_inbox_as_it_was(tmp_path: Path) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    inbox = team / "inboxes" / "team-lead.json"
    before = "[" + json.dumps(entry("b", "gone", msg_id="k")) + ',{"from":"a","text":"x",'
    before += '"timestamp":"t","n":1e400}]'  # valid JSON; Python reads it as inf
    inbox.write_text(before)
    done = anyio.run(lambda: consume_inbox(inbox, ["k"], config_dir=tmp_path))
    assert done.removed == 0 and done.refused is not None and "number" in done.refused
    assert inbox.read_text() == before  # never "Infinity", which no JSON reader takes


# warnings printed once


def test_warnings_printed_once_by_inbox_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    (team / "inboxes" / "team-lead.json").write_text(json.dumps([{"from": 1}]))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="teamlead.inbox"):
        result = CliRunner().invoke(main, ["inbox", "show", "--team", "t"])
    assert result.exit_code == 0
    assert (result.output + caplog.text).count("skipped entry 0") == 1  # not logged, then echoed


def test_warnings_printed_once_by_the_collector(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION,
                                    "members": [{"name": "alpha"}]})  # fmt: skip
    (team / "inboxes" / "team-lead.json").write_text(json.dumps([{"from": 1}]))
    tracker = Tracker()
    tracker.session_id = SESSION
    clock = FakeClock()
    state = run_state(tmp_path, Policy(wait_s=0.0), clock, tracker)

    async def drain() -> None:
        for _ in range(2):  # two rounds read the same inbox
            async for _ in Collection(state, deadline=clock.monotonic()):
                pass

    with caplog.at_level(logging.WARNING, logger="teamlead.inbox"):
        anyio.run(drain)
    assert caplog.text.count("skipped entry 0") == 1


@pytest.mark.parametrize("link", ["inboxes", "inboxes/team-lead.json"])
def test_an_inbox_symlinked_out_of_the_config_dir_is_one_warning_of_the_collector(
    tmp_path: Path, link: str
) -> None:
    config = tmp_path / "claude"
    team = team_dir(config, "t", {"name": "t", "leadSessionId": SESSION,
                                  "members": [{"name": "alpha"}]})  # fmt: skip
    outside = tmp_path / "outside"
    (outside / "inboxes").mkdir(parents=True)
    (outside / "inboxes" / "team-lead.json").write_text(json.dumps([entry("alpha", "hi")]))
    if link == "inboxes":
        (team / "inboxes").rmdir()
    (team / link).symlink_to(outside / link)
    tracker = Tracker()
    tracker.session_id = SESSION
    clock = FakeClock()
    state = run_state(config, Policy(wait_s=0.0), clock, tracker)
    events: list[Any] = []

    async def drain() -> None:
        async for event in Collection(state, deadline=clock.monotonic()):
            events.append(event)

    anyio.run(drain)
    (collected,) = [e for e in events if isinstance(e, InboxCollected)]
    assert collected.messages == [] and len(collected.warnings) == 1
    assert "outside" in collected.warnings[0] and "refused" in collected.warnings[0]


# a huge inbox is read within bounds and summarized in events


@pytest.mark.slow
def test_big_inbox_reads_within_memory_bound(tmp_path: Path) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    inbox = team / "inboxes" / "team-lead.json"
    body = [entry(f"a{i % 7}", f"m{i}") for i in range(100_000)]
    inbox.write_text(json.dumps(body, separators=(",", ":")))
    del body
    read, peak = _with_peak(lambda: read_inbox(inbox, config_dir=tmp_path))
    assert read.status == "ok" and len(read.messages) == 100_000
    assert peak < 100 * 1024 * 1024  # 284 MB before


def test_huge_inbox_is_summarized_in_events(tmp_path: Path) -> None:
    team = team_dir(tmp_path, "t", {"name": "t", "leadSessionId": SESSION})
    body: list[Any] = [entry("alpha", f"m{i}") for i in range(5_000)] + [{"from": 1}] * 300
    (team / "inboxes" / "team-lead.json").write_text(json.dumps(body))
    tracker = Tracker()
    tracker.session_id = SESSION
    state = run_state(tmp_path, Policy(), FakeClock(), tracker)
    events: list[Any] = []

    async def drain() -> None:
        async for event in Collection(state, deadline=1e9):
            events.append(event)

    anyio.run(drain)
    (collected,) = [e for e in events if isinstance(e, InboxCollected)]
    assert len(collected.messages) + collected.omitted_messages == 5_000
    assert len(collected.messages) <= 50 and len(collected.warnings) <= 20
    assert len(collected.model_dump_json()) < 64 * 1024


def test_a_small_file_under_a_large_cap_is_read_within_its_own_size(tmp_path: Path) -> None:
    # a workflow's output file is read under a 64 MB cap: the read must not reserve the cap
    path = tmp_path / "output.json"
    path.write_bytes(b'{"result": "' + b"x" * 4000 + b'"}')
    tracemalloc.start()
    try:
        data = read_regular(path, 64 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == path.read_bytes()
    assert peak < 64 * 1024  # about the file's 4 KB, far from the cap


def test_a_file_at_its_cap_is_read_and_one_byte_over_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"y" * 3000)
    assert read_regular(path, 3000) == b"y" * 3000
    with pytest.raises(FileProblem, match="over the 2999-byte cap"):
        read_regular(path, 2999)


@pytest.mark.parametrize("session", ["../../outside", "ABSOLUTE", "..", "a/b"])
def test_a_spilled_result_stays_under_the_config_dir_whatever_the_streams_session_id(
    tmp_path: Path, session: str
) -> None:
    # the session id is the stream's text: a result's file must not be written outside
    config = tmp_path / "config"
    session = str(tmp_path / "outside") if session == "ABSOLUTE" else session
    tracker = Tracker()
    tracker.feed({"type": "result", "subtype": "success", "result": "x", "session_id": session})
    assert tracker.session_id == session
    state = run_state(config, Policy(), FakeClock(), tracker)
    try:
        path = state.spill("task:t", "the whole result")
    finally:
        state.close()
    assert path is not None and Path(path).read_text() == "the whole result"
    runs = (config / "teamlead-runs").resolve()
    assert Path(path).resolve().is_relative_to(runs), path
    assert Path(path).resolve().parent != runs  # in a folder of the run's own


def test_an_output_file_with_a_nul_byte_is_no_path_and_no_crash(tmp_path: Path) -> None:
    # the stream's output_file is text: a NUL in it made every look at the file raise
    tracker = Tracker()
    tracker.feed({"type": "system", "subtype": "task_started", "task_id": "t",
                  "tool_use_id": "tu", "description": "d", "session_id": SESSION})  # fmt: skip
    tracker.feed({"type": "system", "subtype": "task_notification", "task_id": "t",
                  "status": "failed", "summary": "", "output_file": "x\x00y"})  # fmt: skip
    state = run_state(tmp_path, Policy(), FakeClock(), tracker)

    async def drain() -> list[Any]:
        return [event async for event in Collection(state, deadline=1e9)]

    try:
        anyio.run(drain)
        done = finish(state)
    finally:
        state.close()
    assert [(t.id, t.status, t.disposition) for t in done.tasks] == [("t", "failed", "failed")]


def _with_peak(call: Callable[[], T]) -> tuple[T, int]:
    """What ``call`` returns, and the peak of the memory it allocated (tracemalloc's)."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
