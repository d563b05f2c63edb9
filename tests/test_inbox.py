"""Reading, decoding and consuming the team-lead inbox (teamlead._claude.inbox)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from teamlead._claude.inbox import consume_inbox, read_inbox
from teamlead._claude.inbox.model import (
    DEFAULT_MAX_INBOX_BYTES,
    EntryFields,
    InboxEntry,
    decode_entry,
    entry_key,
)
from teamlead.errors import InboxError
from teamlead.policy import LockPolicy
from teamlead.testing import FakeClock
from teamlead.testing.teammate import post_to_inbox

TEAM = "research"

pytestmark = pytest.mark.anyio


TS = "2026-11-30T01:34:05.099Z"


def entry(sender: str, text: Any, ts: str = TS, **extra: Any) -> dict[str, Any]:
    return {"from": sender, "text": text, "timestamp": ts, **extra}


def frame(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "from": "alpha", "timestamp": "t", **fields})


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    root = tmp_path / "claude"
    (root / "teams" / TEAM / "inboxes").mkdir(parents=True)
    return root


@pytest.fixture
def inbox(config_dir: Path) -> Path:
    return config_dir / "teams" / TEAM / "inboxes" / "team-lead.json"


def write(path: Path, entries: Any) -> None:
    path.write_text(json.dumps(entries, indent=2))


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def put_bytes(path: Path, content: bytes) -> None:
    path.write_bytes(content)


def get_bytes(path: Path) -> bytes:
    return path.read_bytes()


def fingerprint(path: Path) -> tuple[int, int, int, int]:
    """Size, mtime, mode and inode: what changes when a file is rewritten or replaced."""
    info = path.stat()
    return info.st_size, info.st_mtime_ns, info.st_mode & 0o777, info.st_ino


def exists(path: Path) -> bool:
    return path.exists()


def make_symlink(link: Path, target: Path) -> None:
    link.symlink_to(target)


def set_mode(path: Path, mode: int) -> None:
    path.chmod(mode)


# -- decoding ------------------------------------------------------------------------------


def decode(text: str, **extra: Any) -> Any:
    return decode_entry(InboxEntry.model_validate(entry("alpha", text, **extra)))


def test_idle_notification_carries_the_result() -> None:
    msg = decode(
        frame(
            "idle_notification",
            idleReason="available",
            summary="found it",
            completedTaskId="7",
            completedStatus="resolved",
            result="the answer is 42",
        )
    )
    assert msg.kind == "idle" and msg.frame_type == "idle_notification"
    assert (msg.result, msg.summary, msg.completed_status) == (
        "the answer is 42",
        "found it",
        "resolved",
    )
    assert (msg.idle_reason, msg.completed_task_id, msg.failure_reason) == ("available", "7", None)
    assert msg.is_result and msg.is_report


def test_idle_without_result_is_a_report_not_a_result() -> None:
    msg = decode(
        frame(
            "idle_notification",
            idleReason="failed",
            completedStatus="failed",
            failureReason="tool crashed",
        )
    )
    assert msg.is_report and not msg.is_result
    assert msg.failure_reason == "tool crashed"


def test_plain_message_is_a_result() -> None:
    msg = decode("Here is my report: all good.", summary="report", msg_id="m-1")
    assert msg.kind == "message" and msg.text == "Here is my report: all good."
    assert msg.summary == "report" and msg.key == "m-1"
    assert msg.is_result and not msg.is_report
    assert not decode("   ").is_result


@pytest.mark.parametrize(
    ("frame_type", "kind", "reports"),
    [
        ("permission_request", "permission", False),
        ("permission_response", "permission", False),
        ("plan_approval_request", "plan", False),
        ("plan_approval_response", "plan", False),
        ("shutdown_request", "shutdown", False),
        ("shutdown_rejected", "shutdown", False),
        ("shutdown_approved", "shutdown", True),
        ("task_assignment", "task_assignment", False),
        ("task_completed", "task_completed", False),
        ("teammate_terminated", "terminated", True),
        ("something_new", "unknown_frame", False),
    ],
)
def test_protocol_frames_are_reported_by_kind(frame_type: str, kind: str, reports: bool) -> None:
    msg = decode(frame(frame_type, result="not a result"))
    assert msg.kind == kind and msg.frame_type == frame_type
    assert not msg.is_result
    assert msg.is_report is reports
    assert msg.result is None


def test_json_text_without_type_is_a_plain_message() -> None:
    assert decode('{"answer": 42}').kind == "message"
    assert decode("{not json").kind == "message"


def test_non_string_frame_fields_are_kept_as_json() -> None:
    msg = decode(frame("idle_notification", result={"rows": [1, 2]}))
    assert msg.result == '{"rows": [1, 2]}'


def test_key_is_msg_id_else_from_timestamp_text() -> None:
    plain = EntryFields.of(InboxEntry.model_validate(entry("alpha", "hi", ts="T")))
    assert plain.key == entry_key("alpha", "T", "hi")
    assert plain.key == "sha256:" + hashlib.sha256(b"alpha|T|hi").hexdigest()
    assert entry_key("alpha", "T", "hi!") != plain.key
    assert (
        EntryFields.of(InboxEntry.model_validate(entry("alpha", "hi", msg_id="u-1"))).key == "u-1"
    )


# -- reading -------------------------------------------------------------------------------


def test_read_keeps_valid_entries_and_skips_bad_ones(
    inbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(
        inbox,
        [
            entry("alpha", "one", color="blue", msgV=1, msg_id="a", lead_sig="s", brand_new=True),
            {"from": "beta", "timestamp": "t"},  # no text
            entry("beta", 42),  # text not a string
            "a bare string",
            entry("gamma", frame("idle_notification", result="r")),
            entry("alpha", "one", color="blue", msgV=1, msg_id="a"),  # duplicate key
            entry("delta", "read already", read=True),
        ],
    )
    with caplog.at_level(logging.WARNING):
        read = read_inbox(inbox)
    assert read.status == "ok"
    assert [m.sender for m in read.messages] == ["alpha", "gamma", "delta"]
    assert read.messages[2].read
    assert read.skipped == 3 and len(read.warnings) == 3
    assert "skipped entry 1: text: Field required" in read.warnings[0]
    assert "skipped entry 2: text: Input should be a valid string" in read.warnings[1]
    assert caplog.text.count("skipped entry") == 3
    ts = "2026-11-30T01:34:05.099Z"
    assert read.keys == {
        "a",
        entry_key("gamma", ts, frame("idle_notification", result="r")),
        entry_key("delta", ts, "read already"),
    }


def test_missing_inbox_and_missing_directories(tmp_path: Path) -> None:
    for path in (
        tmp_path / "claude" / "teams" / TEAM / "inboxes" / "team-lead.json",
        tmp_path / "nothing" / "at" / "all.json",
    ):
        read = read_inbox(path)
        assert read.status == "missing" and read.messages == () and read.warnings == ()
        assert not path.exists()


@pytest.mark.parametrize(
    ("content", "status", "phrase"),
    [
        (
            b'[{"from": "a", "text": "x", "timestamp": "t"}, {"from": "b", "te',
            "invalid",
            "not valid JSON at line 1",
        ),
        (b'{"from": "a", "text": "x", "timestamp": "t"}', "invalid", "JSON dict, not an array"),
        (b'"just a string"', "invalid", "JSON str, not an array"),
        (b"[{", "invalid", "not valid JSON at line 1 (truncated?)"),
        (b"[", "invalid", "not valid JSON at line 1 (truncated?)"),
        (b" \n[", "invalid", "not valid JSON at line 2 (truncated?)"),
        (b"\xc2\xa0", "invalid", "not valid JSON"),  # a no-break space is not JSON whitespace
        (bytes(range(256)) * 64, "invalid", "not UTF-8"),
        (b"\x00\x01\x02garbage\xff", "invalid", "not UTF-8"),
    ],
)
def test_malformed_inboxes_warn_and_are_left_alone(
    inbox: Path, content: bytes, status: str, phrase: str, caplog: pytest.LogCaptureFixture
) -> None:
    inbox.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        read = read_inbox(inbox)
    assert read.status == status and read.messages == ()
    assert len(read.warnings) == 1 and phrase in read.warnings[0]
    assert phrase in caplog.text
    assert inbox.read_bytes() == content


@pytest.mark.parametrize("content", [b"", b" ", b"\n", b" \t\r\n  \n"])
def test_a_0_byte_or_blank_inbox_reads_as_empty_without_a_warning(
    inbox: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # A writer creates the inbox with flag wx and only then writes [], so an unlocked
    # read can see 0 bytes; Claude Code's reader takes that (and blank text) as empty.
    put_bytes(inbox, content)
    with caplog.at_level(logging.WARNING):
        read = read_inbox(inbox)
    assert (read.status, read.messages, read.skipped, read.warnings) == ("ok", (), 0, ())
    assert caplog.records == []
    assert get_bytes(inbox) == content


def past_mtime(path: Path) -> None:
    """Set the file's times far in the past, so a rewrite cannot keep its mtime."""
    os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))


@pytest.mark.parametrize("content", [b"", b"\n"])
async def test_consume_on_a_0_byte_inbox_writes_nothing(
    inbox: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    put_bytes(inbox, content)
    past_mtime(inbox)
    before = fingerprint(inbox)
    with caplog.at_level(logging.WARNING):
        result = await consume_inbox(inbox, [entry_key("alpha", TS, "x"), "d1"])
    assert (result.removed, result.remaining, result.refused) == (0, 0, None)
    assert fingerprint(inbox) == before  # not rewritten, not replaced
    assert get_bytes(inbox) == content
    assert sorted(p.name for p in inbox.parent.iterdir()) == ["team-lead.json"]  # lock gone
    assert caplog.records == []


async def test_a_writer_filling_a_0_byte_inbox_after_a_consume_loses_nothing(
    inbox: Path,
) -> None:
    put_bytes(inbox, b"")  # the writer's create (flag wx), before it writes []
    assert (await consume_inbox(inbox, ["k"])).refused is None
    post_to_inbox(inbox, entry("alpha", "first"), entry("beta", "second"))
    read = read_inbox(inbox)
    assert read.status == "ok" and [m.text for m in read.messages] == ["first", "second"]
    result = await consume_inbox(inbox, read.keys)
    assert (result.removed, result.remaining, result.refused) == (2, 0, None)
    assert load(inbox) == []


async def test_consume_leaves_a_malformed_inbox_alone(inbox: Path) -> None:
    content = b'[{"from": "a", "text": "x", "timestamp": "t"}, {"fro'
    put_bytes(inbox, content)
    result = await consume_inbox(inbox, [entry_key("a", "t", "x")])
    assert result.removed == 0 and result.refused is not None
    assert "not valid JSON" in result.refused
    assert get_bytes(inbox) == content


def big_inbox(path: Path, size: int) -> None:
    head = b'[{"from": "alpha", "timestamp": "t", "text": "'
    tail = b'"}]'
    with path.open("wb") as fh:
        fh.write(head)
        chunk = b"x" * (1 << 20)
        left = size - len(head) - len(tail)
        while left > 0:
            fh.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        fh.write(tail)


async def test_a_50_mb_inbox_gives_a_warning_and_is_left_alone(
    inbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    big_inbox(inbox, 50 * 1024 * 1024)
    before = fingerprint(inbox)
    with caplog.at_level(logging.WARNING):
        read = read_inbox(inbox)
        result = await consume_inbox(inbox, [entry_key("alpha", "t", "x")])
    assert read.status == "too_large" and read.messages == ()
    assert f"over the {DEFAULT_MAX_INBOX_BYTES}-byte cap" in read.warnings[0]
    assert result.refused is not None and "cap" in result.refused
    assert fingerprint(inbox) == before
    assert "over the" in caplog.text


def test_size_cap_is_configurable(inbox: Path) -> None:
    write(inbox, [entry("alpha", "x" * 2000)])
    assert read_inbox(inbox, max_bytes=1000).status == "too_large"
    assert read_inbox(inbox, max_bytes=10_000).status == "ok"


def test_inbox_that_is_a_directory(inbox: Path) -> None:
    inbox.mkdir()
    read = read_inbox(inbox)
    assert read.status == "invalid" and "not a regular file" in read.warnings[0]


# -- security ------------------------------------------------------------------------------


async def test_inbox_symlinked_out_of_config_dir_is_refused(
    tmp_path: Path, inbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "outside.json"
    write(outside, [entry("alpha", "secret plans")])
    make_symlink(inbox, outside)
    with caplog.at_level(logging.WARNING):
        read = read_inbox(inbox)
        result = await consume_inbox(inbox, [entry_key("alpha", TS, "secret plans")])
    assert read.status == "refused" and read.messages == ()
    assert "outside" in read.warnings[0]
    assert result.refused is not None and result.removed == 0
    assert load(outside) == [entry("alpha", "secret plans")]
    assert "symlink out" in caplog.text


def test_explicit_config_dir_confines_any_path(tmp_path: Path) -> None:
    stray = tmp_path / "elsewhere" / "inbox.json"
    stray.parent.mkdir()
    write(stray, [entry("alpha", "x")])
    assert read_inbox(stray, config_dir=tmp_path / "claude").status == "refused"
    assert read_inbox(stray, config_dir=tmp_path).status == "ok"


def test_inbox_symlink_inside_config_dir_is_followed(config_dir: Path, inbox: Path) -> None:
    real = inbox.with_name("real.json")
    write(real, [entry("alpha", "x")])
    inbox.symlink_to(real)
    assert read_inbox(inbox).status == "ok"


async def test_secret_env_values_never_appear_in_output(
    inbox: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-ant-fake-0123456789abcdef"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    write(
        inbox,
        [
            entry("alpha", f"my key is {secret}", summary=f"key {secret}"),
            entry(
                "beta",
                frame(
                    "idle_notification",
                    result=f"env: {secret}",
                    summary=secret,
                    failureReason=secret,
                ),
            ),
            {"from": secret, "text": 7, "timestamp": secret},
        ],
    )
    with caplog.at_level(logging.DEBUG):
        read = read_inbox(inbox)
    emitted = [m.model_dump_json() for m in read.messages] + list(read.warnings) + [caplog.text]
    assert read.messages[0].text == "my key is [redacted]"
    assert read.messages[1].result == "env: [redacted]"
    assert all(secret not in text for text in emitted)


# -- consuming -----------------------------------------------------------------------------


async def test_consume_removes_delivered_and_read_entries_only(
    config_dir: Path, inbox: Path
) -> None:
    team_config = {"name": TEAM, "leadSessionId": "s", "members": []}
    config_path = config_dir / "teams" / TEAM / "config.json"
    config_path.write_text(json.dumps(team_config))
    write(
        inbox,
        [
            entry("alpha", "delivered", msg_id="d1", extra_field={"kept": True}),
            entry("beta", "delivered too"),
            entry("gamma", "seen by a terminal lead", read=True),
            entry("delta", "arrived after our read", custom=[1, 2]),
            {"from": "broken", "timestamp": "t"},  # invalid: not ours to delete
        ],
    )
    set_mode(inbox, 0o640)
    delivered = ["d1", entry_key("beta", TS, "delivered too")]
    result = await consume_inbox(inbox, delivered)
    assert (result.removed, result.remaining, result.refused) == (3, 2, None)
    assert load(inbox) == [
        entry("delta", "arrived after our read", custom=[1, 2]),
        {"from": "broken", "timestamp": "t"},
    ]
    assert fingerprint(inbox)[2] == 0o640
    leftovers = sorted(p.name for p in inbox.parent.iterdir())
    assert leftovers == ["team-lead.json"]  # no lock, no temp file
    assert json.loads(config_path.read_text()) == team_config


async def test_consume_with_nothing_to_remove_does_not_rewrite(inbox: Path) -> None:
    write(inbox, [entry("alpha", "new")])
    before = fingerprint(inbox)
    result = await consume_inbox(inbox, ["unknown-key"])
    assert (result.removed, result.remaining) == (0, 1)
    assert fingerprint(inbox) == before


async def test_consume_never_creates_the_inbox(tmp_path: Path, inbox: Path) -> None:
    result = await consume_inbox(inbox, ["k"])
    assert result.removed == 0 and not exists(inbox)
    missing_dir = tmp_path / "claude" / "teams" / "gone" / "inboxes" / "team-lead.json"
    assert (await consume_inbox(missing_dir, ["k"])).removed == 0
    assert not exists(missing_dir.parent)


async def test_stale_lock_is_removed_then_consume_succeeds(
    inbox: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    write(inbox, [entry("alpha", "x", msg_id="k")])
    lock = inbox.with_name("team-lead.json.lock")
    lock.mkdir()
    old = clock.time() - 11
    os.utime(lock, (old, old))
    with caplog.at_level(logging.WARNING):
        result = await consume_inbox(inbox, ["k"], clock=clock)
    assert result.removed == 1 and load(inbox) == []
    assert not lock.exists()
    assert "removed stale inbox lock" in caplog.text
    assert clock.sleeps == []


async def test_live_lock_makes_consume_give_up_within_its_budget_until_it_is_stale(
    inbox: Path,
) -> None:
    clock = FakeClock()
    write(inbox, [entry("alpha", "x", msg_id="k")])
    lock = inbox.with_name("team-lead.json.lock")
    lock.mkdir()
    now = clock.time() - 9  # 9 s old: a live holder, not stale yet
    os.utime(lock, (now, now))
    policy = LockPolicy(budget_s=1.0)
    with pytest.raises(InboxError, match="lock still busy") as caught:
        await consume_inbox(inbox, ["k"], clock=clock, lock_policy=policy)
    assert caught.value.path == str(inbox)
    assert lock.is_dir()  # the live lock is never deleted
    assert load(inbox) == [entry("alpha", "x", msg_id="k")]
    assert sum(clock.sleeps) <= policy.budget_s
    assert clock.sleeps[:4] == [0.002, 0.004, 0.008, 0.016]
    assert max(clock.sleeps) == policy.max_delay_s
    # Time passes and nobody touches the lock: once it is over the stale age its holder is
    # taken for dead, the lock is removed and the same consume goes through.
    assert clock.time() - lock.stat().st_mtime <= policy.stale_after_s
    clock.advance(policy.stale_after_s)
    done = await consume_inbox(inbox, ["k"], clock=clock, lock_policy=policy)
    assert (done.removed, done.remaining) == (1, 0) and load(inbox) == []
    assert not lock.exists()


class ReleasingClock(FakeClock):
    """A fake clock whose n-th sleep releases the lock, as a writer finishing would."""

    def __init__(self, lock: Path, after: int) -> None:
        super().__init__()
        self.lock = lock
        self.after = after

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds)
        if len(self.sleeps) == self.after:
            self.lock.rmdir()


async def test_live_lock_released_then_consume_succeeds(inbox: Path) -> None:
    write(inbox, [entry("alpha", "x", msg_id="k"), entry("beta", "y")])
    lock = inbox.with_name("team-lead.json.lock")
    lock.mkdir()
    clock = ReleasingClock(lock, after=4)
    os.utime(lock, (clock.time(), clock.time()))
    result = await consume_inbox(inbox, ["k"], clock=clock)
    assert (result.removed, result.remaining) == (1, 1)
    assert len(clock.sleeps) == 4
    assert not lock.exists()


async def test_lock_is_released_when_the_rewrite_fails(inbox: Path) -> None:
    write(inbox, [entry("alpha", "x", msg_id="k")])
    inbox.parent.chmod(0o500)  # temp file cannot be created
    try:
        if os.access(inbox.parent, os.W_OK):
            pytest.skip("running as root: directory permissions are not enforced")
        with pytest.raises(InboxError, match="cannot"):
            await consume_inbox(inbox, ["k"])
    finally:
        inbox.parent.chmod(0o700)
    assert not inbox.with_name("team-lead.json.lock").exists()


async def test_lock_in_missing_directory_is_an_inbox_error(tmp_path: Path) -> None:
    from teamlead._claude.inbox.lock import with_lock

    with pytest.raises(InboxError, match="directory is missing"):
        await with_lock(tmp_path / "no" / "inbox.json", lambda: None)


# -- the live lead reads its own inbox -------------------------------------------------------


@pytest.fixture
def live_pid() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def set_lead(config_dir: Path, lead_process: Any) -> None:
    config = {"name": TEAM, "leadSessionId": "s", "leadProcess": lead_process, "members": []}
    (config_dir / "teams" / TEAM / "config.json").write_text(json.dumps(config))


async def test_no_consume_while_another_live_lead_reads_the_inbox(
    config_dir: Path, inbox: Path, live_pid: int
) -> None:
    write(inbox, [entry("alpha", "x", msg_id="k")])
    for shape in (live_pid, str(live_pid), {"pid": live_pid}):
        set_lead(config_dir, shape)
        result = await consume_inbox(inbox, ["k"])
        assert result.removed == 0
        assert (
            result.refused
            == f"lead process {live_pid} is alive and reads its own inbox; not consuming"
        )
    assert load(inbox) == [entry("alpha", "x", msg_id="k")]
    # A lead process we started ourselves (the CLI we drive) does not count.
    assert (await consume_inbox(inbox, ["k"], own_pids={live_pid})).removed == 1


@pytest.fixture
def dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


async def test_consume_when_lead_is_us_or_gone(
    config_dir: Path, inbox: Path, dead_pid: int
) -> None:
    for lead in ({"pid": os.getpid()}, dead_pid, "not-a-pid"):
        write(inbox, [entry("alpha", "x", msg_id="k")])
        set_lead(config_dir, lead)
        assert (await consume_inbox(inbox, ["k"])).removed == 1


async def test_a_lead_pid_past_any_pid_or_not_ascii_is_no_live_lead(
    config_dir: Path, inbox: Path
) -> None:
    for lead in (2**31, "9" * 30, {"pid": 2**70}, "\u00b2", {"pid": "\u0663"}, "9" * 5000):
        write(inbox, [entry("alpha", "x", msg_id="k")])
        set_lead(config_dir, lead)
        assert (await consume_inbox(inbox, ["k"])).removed == 1
