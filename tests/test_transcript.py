"""The transcript fallback: last assistant text, read backwards (teamlead._claude.transcript)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from teamlead._claude.transcript import (
    TranscriptEnd,
    find_subagent_transcript,
    last_assistant_text,
    transcript_end,
)
from teamlead.errors import UsageError

TRACES = Path(__file__).parent / "fixtures" / "traces"
SESSION = "d6b404c3-7aec-40d7-9803-56ebb9cb00ba"
AGENT = "ac8d9a5d9dba98ead"


def assistant(*blocks: dict[str, Any], agent_id: str = AGENT, **extra: Any) -> dict[str, Any]:
    """An assistant record shaped like the subagent messages in the reference traces."""
    return {
        "type": "assistant",
        "message": {
            "id": "msg_20",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-5-5",
            "content": list(blocks),
        },
        "parent_tool_use_id": "toolu_B",
        "agent_id": agent_id,
        "session_id": SESSION,
        "isSidechain": True,
        **extra,
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use() -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_X", "name": "Bash", "input": {"command": "ls"}}


def user(content: Any) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": content}}


def write_jsonl(path: Path, records: list[Any], *, trailing_newline: bool = True) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""))
    return path


def test_last_assistant_text_of_a_subagent_transcript(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "agent.jsonl",
        [
            user("SUBTASK-B do it"),
            assistant(text("thinking out loud"), tool_use()),
            user([{"type": "tool_result", "tool_use_id": "toolu_X", "content": "assistant"}]),
            assistant(text("finding for SUBTASK-B:"), text("ok")),
            assistant(tool_use()),  # a later record without text does not hide the answer
            {"type": "system", "subtype": "turn_duration"},
        ],
    )
    assert last_assistant_text(path) == "finding for SUBTASK-B:\nok"


@pytest.mark.parametrize("trailing_newline", [True, False])
@pytest.mark.parametrize("block_bytes", [1, 7, 64, 65536])
def test_block_size_and_line_ends_do_not_matter(
    tmp_path: Path, block_bytes: int, trailing_newline: bool
) -> None:
    records = [assistant(text(f"answer {i} " + "é" * i)) for i in range(12)]
    path = write_jsonl(tmp_path / "t.jsonl", records, trailing_newline=trailing_newline)
    got = last_assistant_text(path, block_bytes=block_bytes)
    assert got == "answer 11 " + "é" * 11


def test_reference_trace_records_are_understood(tmp_path: Path) -> None:
    trace = TRACES / "parallel-agents.query.jsonl"
    if not trace.exists():
        pytest.skip("reference traces are not in tests/fixtures/traces")
    subagent = [
        line for line in trace.read_text().splitlines() if json.loads(line).get("agent_id") == AGENT
    ]
    path = write_jsonl(tmp_path / f"agent-{AGENT}.jsonl", subagent)
    assert last_assistant_text(path) == "finding for SUBTASK-B: ok"


def test_string_content_and_crlf(tmp_path: Path) -> None:
    record = assistant()
    record["message"]["content"] = "plain string answer"
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(record).encode() + b"\r\n")
    assert last_assistant_text(path) == "plain string answer"


def test_malformed_lines_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.jsonl"
    good = json.dumps(assistant(text("the real answer")))
    path.write_bytes(
        good.encode()
        + b"\n"
        + b'{"type": "assistant", "message": {"content": [{"type": "text", "te'  # truncated
        + b'\n\xff\xfe\x00binary garbage "assistant"\n'
        + b'["assistant"]\n'
        + b"\n"
    )
    with caplog.at_level(logging.WARNING):
        assert last_assistant_text(path) == "the real answer"
    assert caplog.text.count("skipped a malformed line") == 2


def test_overlong_records_are_skipped_not_buffered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [assistant(text("short answer")), assistant(text("x" * 5000))],
    )
    with caplog.at_level(logging.WARNING):
        got = last_assistant_text(path, max_line_bytes=1000, block_bytes=256)
    assert got == "short answer"
    assert "skipped a record over 1000 bytes" in caplog.text


def test_scan_stops_at_the_byte_cap(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    filler = [user("y" * 500) for _ in range(20)]
    path = write_jsonl(tmp_path / "t.jsonl", [assistant(text("early answer")), *filler])
    with caplog.at_level(logging.WARNING):
        assert last_assistant_text(path, max_bytes=4096) is None
    assert "only the last 4096 are searched" in caplog.text
    assert last_assistant_text(path) == "early answer"


def test_no_assistant_text(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [user("hi"), assistant(tool_use()), assistant()])
    assert last_assistant_text(path) is None
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert last_assistant_text(empty) is None


def test_missing_file_and_non_regular_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with caplog.at_level(logging.WARNING):
        assert last_assistant_text(tmp_path / "missing.jsonl") is None
        assert last_assistant_text(tmp_path) is None
        assert last_assistant_text(fifo) is None  # would block if opened
    assert caplog.text.count("missing or not a regular file") == 3


def test_output_file_symlink_is_followed(tmp_path: Path) -> None:
    transcript = write_jsonl(tmp_path / "agent.jsonl", [assistant(text("via symlink"))])
    output_file = tmp_path / "tasks" / f"{AGENT}.output"
    output_file.parent.mkdir()
    output_file.symlink_to(transcript)
    assert last_assistant_text(output_file) == "via symlink"


def test_secret_env_values_are_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-ant-fake-9876543210fedcba"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    path = write_jsonl(tmp_path / "t.jsonl", [assistant(text(f"I found {secret} in env"))])
    with caplog.at_level(logging.DEBUG):
        got = last_assistant_text(path)
    assert got == "I found [redacted] in env"
    assert secret not in caplog.text


# -- locating ------------------------------------------------------------------------------


def make_transcript(config_dir: Path, project: str) -> Path:
    path = config_dir / "projects" / project / SESSION / "subagents" / f"agent-{AGENT}.jsonl"
    path.parent.mkdir(parents=True)
    write_jsonl(path, [assistant(text("located"))])
    return path


def test_find_subagent_transcript_in_any_project(tmp_path: Path) -> None:
    expected = make_transcript(tmp_path, "-some-long-shortened-name-1234")
    assert find_subagent_transcript(tmp_path, SESSION, AGENT) == expected
    found = find_subagent_transcript(tmp_path, SESSION, AGENT)
    assert found is not None and last_assistant_text(found) == "located"


def test_find_subagent_transcript_missing(tmp_path: Path) -> None:
    assert find_subagent_transcript(tmp_path, SESSION, AGENT) is None
    assert find_subagent_transcript(tmp_path / "nowhere", SESSION, AGENT) is None


@pytest.mark.parametrize(
    ("session", "agent"),
    [("../../etc", AGENT), (SESSION, "../x"), ("/abs", AGENT), (SESSION, "a*"), ("", AGENT)],
)
def test_path_like_ids_are_refused(tmp_path: Path, session: str, agent: str) -> None:
    with pytest.raises(UsageError, match="not a plain id"):
        find_subagent_transcript(tmp_path, session, agent)


def ended(
    message_id: str, stop_reason: str, *blocks: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """An assistant record of the API message ``message_id`` that stopped for ``stop_reason``."""
    record = assistant(*blocks, **extra)
    record["message"] = {**record["message"], "id": message_id, "stop_reason": stop_reason}
    return record


def test_a_transcripts_end_is_its_last_messages_stop_reason_and_final_text(tmp_path: Path) -> None:
    finished = write_jsonl(
        tmp_path / "done.jsonl",
        [
            ended("m1", "tool_use", text("looking"), tool_use()),
            user([{"type": "tool_result", "tool_use_id": "toolu_X", "content": "ok"}]),
            ended("m2", "end_turn", text("FINDING: part one")),
            ended("m2", "end_turn", text("and part two")),  # one message, two records
        ],
    )
    end = transcript_end(finished)
    assert end == TranscriptEnd("end_turn", "FINDING: part one\nand part two")
    assert end.natural_end
    stopped = write_jsonl(
        tmp_path / "stopped.jsonl",
        [
            ended("m1", "tool_use", text("working on step 2")),
            ended("m1", "tool_use", tool_use()),
            user([{"type": "tool_result", "tool_use_id": "toolu_X", "content": "step2"}]),
        ],
    )
    end = transcript_end(stopped)
    assert end == TranscriptEnd("tool_use", None) and not end.natural_end
    cut = write_jsonl(
        tmp_path / "cut.jsonl",
        [
            ended("m1", "max_tokens", text("the first half")),
            ended("e1", "stop_sequence", text("API Error: output token maximum"),
                  isApiErrorMessage=True),  # the CLI's own line, not the agent's
        ],
    )  # fmt: skip
    assert transcript_end(cut) == TranscriptEnd("max_tokens", None)
    # a final text whose stop the file does not say is no proof of a natural end
    unsaid = write_jsonl(tmp_path / "unsaid.jsonl", [assistant(text("half of it"))])
    assert not transcript_end(unsaid).natural_end
    assert transcript_end(write_jsonl(tmp_path / "none.jsonl", [user("AGENTJOB")])) == (
        TranscriptEnd(None, None)
    )
    assert transcript_end(tmp_path / "missing.jsonl") is None


def test_the_last_answer_is_the_agents_own_not_the_clis_error_line(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "cut.jsonl",
        [
            ended("m1", "max_tokens", text("the first half")),
            ended("e1", "stop_sequence", text("API Error: output token maximum"),
                  isApiErrorMessage=True),  # the CLI's own line, in the agent's place
        ],
    )  # fmt: skip
    assert last_assistant_text(path) == "the first half"


def test_only_the_clis_own_note_opening_a_result_names_a_turn_limit() -> None:
    from teamlead._claude.notification import turn_limit

    note = "NOTE: this agent stopped at its 3-turn limit before finishing. The text below is"
    assert turn_limit(note) == 3
    assert turn_limit('Agent "deep" stopped at its 12-turn limit (partial result; …)') == 12
    assert turn_limit("FINDING: done. NOTE: this agent stopped at its 3-turn limit") is None
    assert turn_limit(None) is None


def test_a_shells_output_file_is_no_evidence_of_how_an_agent_ended(tmp_path: Path) -> None:
    from teamlead._run.ending import read_end
    from teamlead.tracker import TaskInfo

    output = tmp_path / "b1.output"
    output.write_text("build ok\n")
    shell = TaskInfo("b1", task_type="local_bash", status="completed", output_file=str(output))
    agent = TaskInfo("a1", task_type="local_agent", status="completed", output_file=str(output))
    assert read_end(tmp_path, shell, None).kind == "finished"  # the CLI's word stands
    assert read_end(tmp_path, agent, None).kind == "no_final_message"  # no reply in it
