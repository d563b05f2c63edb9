"""Interop: real, independent Node writers (proper-lockfile) append while teamlead consumes.

Four ``node tests/interop/inbox-writer.js`` processes follow Claude Code's writer protocol
(create with ``wx`` as ``[]``, proper-lockfile with ~10 retries 5..100 ms apart, re-read,
append, ``<inbox>.tmp.<hex>``, rename, unlock) and append 10,000 messages in all, while
:func:`wait_for_inbox` + :func:`consume_inbox` deliver and delete them concurrently. A
writer that runs out of lock retries drops its messages, as Claude Code's would, and says
so on stdout and in its exit code.

Writers append in batches of 10 with a random pause (mean 25 ms) between batches: five
processes still contend for the lock the whole time, but on a shared 2-core machine
message-at-a-time writers at full speed starve *each other* out of proper-lockfile's
0.65 s retry window, whatever the consumer does (seen: a few writer give-ups per 10,000
with no pause, none with it).

Needs node and ``npm ci --prefix tests/interop`` (as CI runs it); skipped otherwise.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import anyio
import pytest

from teamlead._claude.inbox import consume_inbox, wait_for_inbox
from teamlead.policy import InboxWaitPolicy

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

INTEROP = Path(__file__).parent / "interop"
WRITER = INTEROP / "inbox-writer.js"
WRITERS = 4
TOTAL = 10_000
BATCH = 10
TEXT_BYTES = 100
PAUSE_MS = 25

NODE = shutil.which("node")
if NODE is None:
    pytest.skip("node is not installed", allow_module_level=True)
if not (INTEROP / "node_modules" / "proper-lockfile").is_dir():
    pytest.skip(
        "tests/interop/node_modules is missing: run `npm ci --prefix tests/interop` (as CI does)",
        allow_module_level=True,
    )


async def test_node_writers_and_teamlead_consumer_lose_nothing(tmp_path: Path) -> None:
    assert NODE is not None
    inbox = tmp_path / "claude" / "teams" / "interop" / "inboxes" / "team-lead.json"
    inbox.parent.mkdir(parents=True)
    per_writer = TOTAL // WRITERS
    delivered: Counter[str] = Counter()  # message body -> times delivered
    consumed_keys: set[str] = set()
    reappeared = 0
    consumes = 0
    fast = InboxWaitPolicy(first_delay_s=0.05, max_delay_s=0.2, tries=1, span_s=0.2)

    with anyio.fail_after(110):
        procs = [
            await anyio.open_process(
                [
                    NODE,
                    str(WRITER),
                    str(inbox),
                    f"w{i}",
                    str(per_writer),
                    str(BATCH),
                    str(TEXT_BYTES),
                    str(PAUSE_MS),
                ]
            )
            for i in range(WRITERS)
        ]
        try:
            while True:
                writers_done = all(p.returncode is not None for p in procs)
                done = await wait_for_inbox(inbox, until=lambda r: bool(r.messages), policy=fast)
                assert done.read.status in ("ok", "missing"), done.read.warnings
                for message in done.read.messages:
                    # Consumed entries must never come back: that would be a duplicate.
                    reappeared += message.key in consumed_keys
                    delivered[message.text.split(" ", 1)[0]] += 1
                if done.read.messages:
                    result = await consume_inbox(inbox, done.read.keys)
                    assert result.refused is None
                    assert result.removed >= len(done.read.messages)
                    consumed_keys |= done.read.keys
                    consumes += 1
                if writers_done and not done.read.messages:
                    break
            reports = []
            for proc in procs:
                await proc.wait()
                assert proc.stdout is not None
                out = b""
                async for chunk in proc.stdout:
                    out += chunk
                reports.append((proc.returncode, json.loads(out.decode())))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                for proc in procs:  # stopped and reaped, its pipes closed, whatever failed
                    if proc.returncode is None:
                        proc.kill()
                    await proc.aclose()

    for code, report in reports:
        assert report.get("gave_up") == 0 and report.get("errors") == [], report
        assert code == 0 and report["written"] == per_writer, report
    expected = {f"w{i}#{n}" for i in range(WRITERS) for n in range(per_writer)}
    assert set(delivered) == expected  # 0 lost
    assert reappeared == 0 and max(delivered.values()) == 1  # 0 duplicated
    assert sum(delivered.values()) == TOTAL
    assert json.loads(inbox.read_text()) == []
    leftovers = sorted(p.name for p in inbox.parent.iterdir())
    assert leftovers == ["team-lead.json"]  # no lock and no temp file left behind
    assert consumes > 1
