"""Property-based fuzzing of the parsers of files others write.

For the inbox, team config, session transcript and trial-record parsers:
- only teamlead's own errors or warnings come out, never a stray exception;
- valid entries are never lost among invalid ones;
- consuming never grows the inbox past what the reader can read back.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teamlead._claude.inbox import consume_inbox, read_inbox
from teamlead._claude.inbox.model import entry_key
from teamlead._claude.saved_session import load_session
from teamlead._claude.team import load_team
from teamlead.errors import TeamleadError
from teamlead.experiment.specs.records import TrialRecord, read_records

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SESSION = "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"

texts = st.text(max_size=40)  # includes lone surrogates, controls, non-BMP
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
frames = st.fixed_dictionaries(
    {"type": st.sampled_from(["idle_notification", "shutdown_approved", "x"])},
    optional={"result": json_values, "completedStatus": json_values, "summary": json_values},
).map(json.dumps)
valid_entries = st.fixed_dictionaries(
    {"from": texts, "text": texts | frames, "timestamp": texts},
    optional={
        "msg_id": texts,
        "read": st.just(False),
        "summary": texts,
        "color": texts,
        "extra": json_values,
    },
)
junk_entries = json_values | st.fixed_dictionaries({"from": json_values, "text": json_values})
deep = st.integers(1, 3000).map(lambda n: "[" * n + "]" * n)


def inbox_in(tmp: Path) -> Path:
    path = tmp / "teams" / "t" / "inboxes" / "team-lead.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def is_valid(raw: Any) -> bool:
    if not isinstance(raw, dict):
        return False
    if not all(isinstance(raw.get(k), str) for k in ("from", "text", "timestamp")):
        return False
    return raw.get("read") in (None, False, True) and all(
        raw.get(k) is None or isinstance(raw.get(k), str) for k in ("msg_id", "summary", "color")
    )


@FUZZ
@given(entries=st.lists(valid_entries | junk_entries, max_size=12))
def test_inbox_keeps_every_valid_entry(entries: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = inbox_in(Path(tmp))
        path.write_text(json.dumps(entries))
        read = read_inbox(path, config_dir=Path(tmp), log=False)
    assert read.status == "ok"
    keys = {m.key for m in read.messages}
    wanted = [e for e in entries if is_valid(e)]
    assert len(keys) == len(read.messages)
    assert len(read.messages) <= len(wanted)  # duplicates by key collapse, nothing else
    assert read.skipped == len(entries) - len(wanted)
    expected = {r.get("msg_id") or entry_key(r["from"], r["timestamp"], r["text"]) for r in wanted}
    assert keys == expected  # every valid entry is there, by its key


@FUZZ
@given(blob=st.binary(max_size=200) | deep.map(str.encode) | json_values.map(
    lambda v: json.dumps(v).encode()))  # fmt: skip
def test_inbox_arbitrary_bytes_give_a_status_not_an_exception(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = inbox_in(Path(tmp))
        path.write_bytes(blob)
        read = read_inbox(path, config_dir=Path(tmp), log=False)
    assert read.status in {"ok", "invalid"}
    assert (read.status == "ok") == (not read.warnings or read.skipped > 0)


@FUZZ
@given(
    entries=st.lists(valid_entries | junk_entries, max_size=12),
    pick=st.lists(st.integers(0, 11), max_size=6),
    indent=st.sampled_from([None, 2]),
)
def test_consume_never_grows_past_what_it_reads_back(
    entries: list[Any], pick: list[int], indent: int | None
) -> None:
    text = json.dumps(entries, indent=indent)
    # a NaN or an infinity (written NaN, Infinity) JSON cannot hold: an inbox whose rewrite
    # would keep one is refused, and left as it was
    finite = "NaN" not in text and "Infinity" not in text
    with tempfile.TemporaryDirectory() as tmp:
        path = inbox_in(Path(tmp))
        path.write_text(text)
        size = path.stat().st_size
        before = read_inbox(path, config_dir=Path(tmp), log=False)
        keys = [before.messages[i].key for i in pick if i < len(before.messages)]
        done = anyio.run(lambda: consume_inbox(path, keys, config_dir=Path(tmp), max_bytes=size))
        after = read_inbox(path, config_dir=Path(tmp), max_bytes=size, log=False)
        if done.refused is not None:  # refused only for what it would have to write back
            assert not finite and path.read_text() == text
            return
    assert path.stat().st_size <= size if path.exists() else True
    assert after.status == "ok"
    assert after.keys == before.keys - set(keys) - {m.key for m in before.messages if m.read}


@FUZZ
@given(config=json_values | deep | st.fixed_dictionaries(
    {"name": texts, "members": st.lists(json_values | st.fixed_dictionaries({"name": texts}))},
    optional={"leadSessionId": texts, "leadProcess": json_values},
))  # fmt: skip
def test_team_config_is_a_team_or_none(config: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        team = Path(tmp) / "teams" / "t"
        team.mkdir(parents=True)
        (team / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
        found = load_team(team, Path(tmp))
    if found is not None:
        assert isinstance(found.config.name, str)
        assert all(isinstance(m.name, str) for m in found.config.members)


assistant_texts = texts.map(
    lambda t: json.dumps(
        {"type": "assistant", "isSidechain": False,
         "message": {"content": [{"type": "text", "text": t + "!"}]}}
    )
)  # fmt: skip


@FUZZ
@given(
    lines=st.lists(
        assistant_texts | deep | json_values.map(json.dumps) | texts, min_size=1, max_size=10
    )
)
def test_transcript_keeps_every_lead_text(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "projects" / "-w" / f"{SESSION}.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("\n".join(line.replace("\n", " ") for line in lines) + "\n")
        try:
            tracker = load_session(Path(tmp), SESSION)
        except TeamleadError:
            raise AssertionError("a readable transcript must load") from None
    wanted = sum(1 for line in lines if line.startswith('{"type": "assistant", "isSidechain"'))
    assert len(tracker.lead_texts) >= wanted


good_records = st.builds(
    lambda v, t, n: TrialRecord(variant=v, task=t, trial=n, status="completed", wall_s=1.0),
    st.sampled_from(["a", "b"]),
    st.sampled_from(["t1", "t2"]),
    st.integers(0, 5),
).map(lambda r: r.to_json_line())


@FUZZ
@given(lines=st.lists(good_records | deep | json_values.map(json.dumps), max_size=10))
def test_trial_records_keep_every_valid_line(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trials.jsonl"
        path.write_text("\n".join(lines) + "\n")
        result = read_records(path)
    valid = sum(1 for line in lines if line.startswith('{"version"'))
    assert len(result.records) >= valid
    assert len(result.records) + len(result.warnings) <= len(lines)
