"""Trial records: durable append, tolerant read, older versions, resume keys."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from teamlead.errors import UsageError
from teamlead.experiment.specs.records import (
    RECORD_VERSION,
    TrialKey,
    TrialRecord,
    TrialWriter,
    append_record,
    finished_keys,
    latest_records,
    read_records,
)


def make(
    variant: str = "delegation", task: str = "t1", trial: int = 0, **fields: object
) -> TrialRecord:
    values: dict[str, object] = {"status": "completed", "wall_s": 12.5}
    values.update(fields)
    return TrialRecord(variant=variant, task=task, trial=trial, **values)  # type: ignore[arg-type]


FULL = make(
    delegated=True,
    agent_calls=3,
    max_agent_calls_per_message=2,
    parallel=True,
    time_to_first_agent_s=1.25,
    turns=7,
    input_tokens=12_000,
    output_tokens=900,
    cost_usd=0.0831,
    resumes=1,
    retried=True,
    attempts=2,
    final_text="Findings: ✓ auth, ✗ logging",
    grade=8.5,
    grader_cost_usd=0.002,
    prompt_name="delegation",
    prompt_version="3",
    prompt_sha256="ab" * 32,
    model="claude-opus",
    sdk_version="0.2.189",
    cli_version="2.1.332",
    teamlead_version="0.1.0",
    git_sha="deadbeef",
    started_at=datetime(2026, 5, 1, 12, 30, tzinfo=timezone.utc),
)


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    path = tmp_path / "out" / "trials.jsonl"
    second = make(trial=1, status="failed", error_class="model")
    with TrialWriter(path) as writer:
        writer.append(FULL)
        writer.append(second)
    result = read_records(path)
    assert result.warnings == []
    assert result.records == [FULL, second]
    assert result.records[0].key == TrialKey("delegation", "t1", 0)
    assert result.records[0].tokens == 12_900
    assert path.read_text(encoding="utf-8").count("\n") == 2
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[0])["version"] == RECORD_VERSION


def test_corrupt_lines_are_reported_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    good = [make(trial=i) for i in range(3)]
    lines = [
        good[0].to_json_line(),
        '{"variant": "delegation", "task": "t1", "tri',  # torn mid-write
        good[1].to_json_line(),
        "",
        json.dumps({"variant": "x", "task": "t", "trial": 0, "status": "done", "wall_s": 1}),
        "[1, 2]",
        good[2].to_json_line(),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = read_records(path)
    assert result.records == good
    assert [w.line for w in result.warnings] == [2, 5, 6]
    assert "not a trial record" in str(result.warnings[0])
    assert str(result.warnings[1]).startswith("line 5: status:")


def test_writer_starts_a_fresh_line_after_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    path.write_text(make(trial=0).to_json_line() + '\n{"variant": "del', encoding="utf-8")
    append_record(path, make(trial=1))
    result = read_records(path)
    assert [r.trial for r in result.records] == [0, 1]
    assert [w.line for w in result.warnings] == [2]


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    with TrialWriter(path) as writer:

        def write_task(task: str) -> None:
            for trial in range(20):
                writer.append(make(task=task, trial=trial))

        threads = [threading.Thread(target=write_task, args=(f"t{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    result = read_records(path)
    assert result.warnings == []
    assert len({r.key for r in result.records}) == 80


def test_older_records_are_accepted(tmp_path: Path) -> None:
    # The first version-1 writers had no provenance, grading or retry fields, and the
    # very first lines carried no version at all.
    path = tmp_path / "trials.jsonl"
    minimal = {"variant": "baseline", "task": "t1", "trial": 0, "status": "partial", "wall_s": 3}
    versioned = dict(
        minimal, trial=1, version=1, agent_calls=1, delegated=True, max_agent_calls_per_message=1
    )
    path.write_text(json.dumps(minimal) + "\n" + json.dumps(versioned) + "\n", encoding="utf-8")
    result = read_records(path)
    assert result.warnings == []
    first, second = result.records
    # read as the current version: a version 1 record counted no workflow agents
    assert first.version == RECORD_VERSION and first.grade is None and first.attempts == 1
    assert first.started_at is None and first.model is None
    assert second.delegated and not second.parallel
    assert (second.workflow_agents, second.workflow_agents_at_once, second.agents_at_once) == (
        0,
        0,
        0,
    )


def test_unknown_fields_from_a_newer_writer_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    raw = json.loads(make().to_json_line())
    raw["subagent_failures"] = 2
    path.write_text(json.dumps(raw) + "\n", encoding="utf-8")
    record = read_records(path).records[0]
    assert record.model_extra == {"subagent_failures": 2}
    assert json.loads(record.to_json_line())["subagent_failures"] == 2


def test_a_newer_version_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    raw = json.loads(make().to_json_line())
    raw["version"] = RECORD_VERSION + 1
    path.write_text(json.dumps(raw) + "\n" + make(trial=1).to_json_line() + "\n", encoding="utf-8")
    result = read_records(path)
    assert [r.trial for r in result.records] == [1]
    assert "upgrade teamlead" in result.warnings[0].message


@pytest.mark.parametrize(
    "fields",
    [
        {"delegated": True},
        {"agent_calls": 2, "delegated": True, "max_agent_calls_per_message": 2},
        {"agent_calls": 1, "delegated": True, "max_agent_calls_per_message": 2, "parallel": True},
        {"time_to_first_agent_s": 3.0},
        {"status": "done"},
        {"wall_s": -1.0},
    ],
)
def test_inconsistent_records_are_rejected(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        make("delegation", "t1", 0, **fields)


def test_latest_record_of_a_key_wins() -> None:
    first = make(status="failed", error_class="infrastructure")
    rerun = make(status="completed")
    other = make(trial=1)
    assert latest_records([first, other, rerun]) == [other, rerun]


def test_finished_keys_for_resuming(tmp_path: Path) -> None:
    path = tmp_path / "trials.jsonl"
    assert finished_keys(path) == set()
    for record in (
        make(trial=0),
        make(trial=1, status="failed", error_class="infrastructure"),
        make(trial=2, status="failed", error_class="model"),
        make(trial=3, status="partial"),
    ):
        append_record(path, record)
    with path.open("a", encoding="utf-8") as file:
        file.write("garbage\n")
    keys = {k.trial for k in finished_keys(path)}
    assert keys == {0, 2, 3}
    assert {k.trial for k in finished_keys(path, retry_infrastructure=False)} == {0, 1, 2, 3}


def test_missing_file_is_a_usage_error_unless_allowed(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="trials file not found"):
        read_records(tmp_path / "none.jsonl")
    assert read_records(tmp_path / "none.jsonl", missing_ok=True).records == []
