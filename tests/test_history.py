"""The run history's store and its hook in a run, on a scripted ``query_fn``: what a
record holds, the bounds it is kept within, the folder it is kept in, and a history that
cannot be written costing the run one warning line, never the run."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path
from typing import Any

import pytest

import teamlead
from teamlead._cli.history import _text, past_detail, past_rows, shown
from teamlead._control.registry import labelled
from teamlead._history import History, RunRecord, history_dir
from teamlead._history.record import INLINE_RESULT_CHARS, AgentRecord
from teamlead._private import private_dir, unsafe_dir
from teamlead._run.process import ProcessState
from teamlead.errors import AmbiguousRun, NoSuchRun
from teamlead.testing import FakeClock

from .scripted_query import SESSION, Script, fan_out, fast_policy, lead, notified, result

RUNS = ["0123456789ab", "0123456789ac", "fedcba987654"]


def _record(run: str, ended: float, **fields: object) -> RunRecord:
    return RunRecord(run=run, started=ended - 5, ended=ended, status="completed", **fields)


def _names(history: History) -> list[str]:
    return [r.run for r in history.records()]


def test_the_history_lives_under_the_users_data_dir_unless_told_otherwise() -> None:
    assert history_dir({"HOME": "/home/u"}) == Path("/home/u/.local/share/teamlead/history")
    assert history_dir({"XDG_DATA_HOME": "/data", "HOME": "/h"}) == Path("/data/teamlead/history")
    assert history_dir({"XDG_DATA_HOME": "relative", "HOME": "/h"}) == Path(
        "/h/.local/share/teamlead/history"
    )
    assert history_dir({"TEAMLEAD_HISTORY_DIR": "/x/h", "XDG_DATA_HOME": "/d"}) == Path("/x/h")


def test_records_come_back_newest_first_in_a_private_folder(tmp_path: Path) -> None:
    history = History(tmp_path / "h")
    for n, run in enumerate(RUNS):
        history.add(_record(run, 1_800_000_000 + 60 * n, prompt=f"task {n}"))
    assert _names(history) == list(reversed(RUNS))
    assert stat.S_IMODE((tmp_path / "h").stat().st_mode) == 0o700
    files = sorted((tmp_path / "h").iterdir())
    assert [stat.S_IMODE(f.stat().st_mode) for f in files] == [0o600] * 3
    assert [json.loads(f.read_text())["version"] for f in files] == [1, 1, 1]


def test_the_oldest_runs_go_beyond_the_count(tmp_path: Path) -> None:
    history = History(tmp_path / "h", max_runs=2)
    for n, run in enumerate(RUNS):
        history.add(_record(run, 1_800_000_000 + 60 * n))
    assert _names(history) == ["fedcba987654", "0123456789ac"]
    assert len(list((tmp_path / "h").iterdir())) == 2


def test_the_oldest_runs_and_their_result_files_go_beyond_the_size(tmp_path: Path) -> None:
    big = "x" * (INLINE_RESULT_CHARS + 1)
    agent = AgentRecord(id="t1", description="probe", status="completed", result=big)
    history = History(tmp_path / "h", max_bytes=2 * len(big) + 3000)
    for n, run in enumerate(RUNS):
        history.add(_record(run, 1_800_000_000 + 60 * n, agents=[agent]))
    assert _names(history) == ["fedcba987654", "0123456789ac"]
    kept = sorted(p.suffix for p in (tmp_path / "h").iterdir())
    assert kept == [".json", ".json", ".txt", ".txt"]


def test_the_newest_run_is_kept_however_large(tmp_path: Path) -> None:
    history = History(tmp_path, max_bytes=10)
    history.add(_record(RUNS[0], 1_800_000_000, result="a long answer" * 10))
    assert _names(history) == [RUNS[0]]


def test_a_long_result_is_kept_in_a_file_beside_its_record(tmp_path: Path) -> None:
    whole = "FINDING " * INLINE_RESULT_CHARS
    short = AgentRecord(id="t1", description="a", status="completed", result="short")
    long = AgentRecord(id="t2", description="b", status="completed", result=whole)
    history = History(tmp_path)
    path = history.add(_record(RUNS[0], 1_800_000_000, agents=[short, long]))
    kept = json.loads(path.read_text())["agents"]
    assert [a["result"] for a in kept] == ["short", None]
    assert kept[1]["result_ref"] == path.name.replace(".json", ".1.txt")
    record = history.find(RUNS[0])
    assert [history.result_of(a) for a in record.agents] == ["short", whole]


def test_a_result_file_named_outside_the_history_is_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    history = History(tmp_path / "h")
    agent = AgentRecord(id="t1", result_ref="../secret.txt")
    assert history.result_of(agent) is None


def test_runs_are_found_by_id_session_or_prefix(tmp_path: Path) -> None:
    history = History(tmp_path)
    for n, run in enumerate(RUNS):
        history.add(_record(run, 1_800_000_000 + n, session_id=f"5e55{n}0000-aaaa"))
    assert history.find("fedc").run == "fedcba987654"
    assert history.find("5e5510000-AAAA").run == "0123456789ac"
    with pytest.raises(AmbiguousRun, match="names 2 runs"):
        history.find("01234")
    with pytest.raises(NoSuchRun, match="no run 'abc' in the history"):
        history.find("abc")


def test_files_that_are_not_records_are_skipped(tmp_path: Path) -> None:
    history = History(tmp_path)
    history.add(_record(RUNS[0], 1_800_000_000))
    (tmp_path / "20260101T000000Z-aaaaaaaaaaaa.json").write_text("[1, 2")
    (tmp_path / "20260101T000000Z-bbbbbbbbbbbb.json").write_text('{"run": "cccccccccccc"}')
    (tmp_path / "notes.json").write_text("{}")
    (tmp_path / "20260101T000000Z-dddddddddddd.json").symlink_to(tmp_path / "notes.json")
    assert _names(history) == [RUNS[0]]


@pytest.mark.parametrize(
    "number", ["NaN", "Infinity", "-Infinity", "1e400"], ids=["nan", "inf", "-inf", "1e400"]
)
@pytest.mark.parametrize("where", ["started", "cost_usd", "an unknown field"])
def test_a_record_with_a_number_json_has_not_is_no_record(
    tmp_path: Path, number: str, where: str
) -> None:
    history = History(tmp_path)
    history.add(_record(RUNS[0], 1_800_000_000))
    text = f'{{"run": "{RUNS[1]}", "status": "completed", "{where}": {number}}}'
    (tmp_path / f"20260101T000000Z-{RUNS[1]}.json").write_text(text)
    assert _names(history) == [RUNS[0]]
    # what `ps --all --json` and `show --json` print of the records is JSON, strictly
    json.dumps([r.model_dump(mode="json") for r in history.records()], allow_nan=False)


def test_a_finished_runs_tree_has_every_agent_once_whatever_its_ids_and_parents(
    tmp_path: Path,
) -> None:
    history = History(tmp_path)
    agents = [
        AgentRecord(id="a", parent="a"),  # its own parent
        AgentRecord(id="b", description="first b"),
        AgentRecord(id="b", description="second b"),  # a repeated id
        AgentRecord(id="c", parent="d"),  # c under d under c
        AgentRecord(id="d", parent="c"),
        AgentRecord(id="e", parent="b"),
    ]
    record = _record(RUNS[0], 1_800_000_000, agents=agents)
    tree = past_detail(record, history)["tree"]

    def labels(node: dict[str, Any]) -> list[str]:
        return [node["label"], *(x for child in node["children"] for x in labels(child))]

    assert sorted(labels(tree)) == ["a", "c", "d", "e", "first b", "lead", "second b"]
    json.dumps(tree)  # a tree, not a graph with a loop


def test_a_run_whose_texts_hold_lone_surrogates_is_kept(tmp_path: Path) -> None:
    # half a surrogate pair, as a cut made in JavaScript leaves it: no UTF-8 file holds it
    half = "\ud83d"
    agents = [
        AgentRecord(id="a", result=f"short {half}", prompt=f"do {half}"),
        AgentRecord(id="b", result=half + "x" * INLINE_RESULT_CHARS),  # kept in a file
    ]
    history = History(tmp_path)
    history.add(
        _record(RUNS[0], 1_800_000_000, result=f"answer {half}", reasons=[half], agents=agents)
    )
    [kept] = history.records()
    assert (kept.result, kept.reasons) == ("answer \ufffd", ["\ufffd"])
    assert [history.result_of(a)[:7] for a in kept.agents] == ["short \ufffd", "\ufffd" + "x" * 6]
    assert kept.agents[0].prompt == "do \ufffd"


def test_a_folder_others_can_write_to_is_refused_in_one_line(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    open_dir.chmod(0o777)
    with pytest.raises(PermissionError) as refused:
        History(open_dir).add(_record(RUNS[0], 1_800_000_000))
    assert str(refused.value) == (
        f"{str(open_dir)!r} is shared (mode 777), and teamlead changes nothing it did not create"
    )
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    assert unsafe_dir(link) == f"{str(link)!r} is not a directory (a symlink?)"
    assert private_dir(tmp_path / "new" / "h") == tmp_path / "new" / "h"
    assert stat.S_IMODE((tmp_path / "new" / "h").stat().st_mode) == 0o700


def _script() -> Script:
    return Script(
        [*fan_out(("t1", "probe")), notified("t1", summary="T1: the bug is in auth")],
        [lead("Synthesis: auth"), result("Synthesis: auth", cost=0.25)],
    )


async def _run(process: ProcessState, prompt: str = "Find the bug.") -> teamlead.Finished:
    done = None
    async for item in teamlead.run(
        prompt,
        query_fn=_script(),
        policy=fast_policy(),
        clock=FakeClock(),
        process=process,
    ):
        done = item
    assert isinstance(done, teamlead.Finished)
    return done


@pytest.mark.anyio
async def test_a_library_run_is_kept_with_its_prompt_answer_and_agents(tmp_path: Path) -> None:
    process = ProcessState(env={"TEAMLEAD_HISTORY_DIR": str(tmp_path)}, registry=False)
    with labelled("arm delegation · task auth · trial 2"):
        done = await _run(process)
    (record,) = History(tmp_path).records()
    assert (record.prompt, record.result, record.status) == (
        "Find the bug.",
        done.result,
        done.status,
    )
    assert (record.session_id, record.cost_usd, record.mode) == (SESSION, 0.25, "query")
    assert record.label == "arm delegation · task auth · trial 2"
    assert (record.started, record.ended) == (1_700_000_000.0, 1_700_000_000.0)  # its clock's
    (agent,) = record.agents
    assert (agent.id, agent.description, agent.status) == ("t1", "probe", "completed")
    assert agent.result == "T1: the bug is in auth"


@pytest.mark.anyio
async def test_runs_are_not_kept_when_the_history_is_turned_off(tmp_path: Path) -> None:
    where = {"TEAMLEAD_HISTORY_DIR": str(tmp_path / "h")}
    await _run(ProcessState(env=where, history=False))
    await _run(ProcessState(env={**where, "TEAMLEAD_NO_HISTORY": "1"}, registry=False))
    assert not (tmp_path / "h").exists()
    await _run(ProcessState(env=where, registry=False))  # and kept when on
    assert len(History(tmp_path / "h").records()) == 1


@pytest.mark.anyio
async def test_a_history_that_cannot_be_written_is_one_warning_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    process = ProcessState(env={"TEAMLEAD_HISTORY_DIR": str(blocked)}, registry=False)
    with caplog.at_level(logging.WARNING, logger="teamlead.history"):
        done = await _run(process)
    assert done.status == "completed"
    said = [r.getMessage() for r in caplog.records if r.name == "teamlead.history"]
    assert said == [
        f"this run is not kept in the run history: {str(blocked)!r} is not a directory (a "
        "symlink?), and teamlead changes nothing it did not create"
    ]


def test_the_bounds_come_from_the_environment_and_a_bad_value_keeps_the_default(
    tmp_path: Path,
) -> None:
    env = {"TEAMLEAD_HISTORY_MAX_RUNS": "2", "TEAMLEAD_HISTORY_MAX_MB": "3"}
    history = History(tmp_path / "h", env=env)
    assert (history.max_runs, history.max_bytes) == (2, 3 * 1024 * 1024)
    for n, run in enumerate(RUNS):
        history.add(_record(run, 1_800_000_000 + 60 * n))
    assert _names(history) == ["fedcba987654", "0123456789ac"]
    bad = History(env={"TEAMLEAD_HISTORY_MAX_RUNS": "-1", "TEAMLEAD_HISTORY_MAX_MB": "lots"})
    assert (bad.max_runs, bad.max_bytes) == (1000, 200 * 1024 * 1024)


def test_a_run_of_many_long_agents_stays_one_readable_record(tmp_path: Path) -> None:
    many = [
        AgentRecord(id=f"t{n}", status="completed", prompt="p" * 9000, result="r" * 7000)
        for n in range(2000)
    ]
    history = History(tmp_path / "h")
    path = history.add(_record(RUNS[0], 1_800_000_000, prompt="q" * 2_000_000, agents=many))
    assert path.stat().st_size < 8 * 1024 * 1024
    (record,) = history.records()
    assert [history.result_of(a) for a in record.agents] == ["r" * 7000] * 2000
    assert len(record.agents[0].prompt or "") < 8100 and len(record.agents[-1].prompt or "") < 400
    assert record.prompt is not None and record.prompt.endswith("[… 951424 characters cut …]")


def test_ps_all_counts_a_reported_teammate_done_and_a_call_that_never_ran_neither(
    tmp_path: Path,
) -> None:
    statuses = ["completed", "cached", "reported", "failed", "timeout", "lost", "pending"]
    agents = [AgentRecord(id=f"t{n}", status=s) for n, s in enumerate(statuses)]
    agents += [AgentRecord(id="c1", kind="call", status="denied")]
    agents += [AgentRecord(id="c2", kind="call", status="rejected")]
    history = History(tmp_path / "h")
    history.add(_record(RUNS[0], 1_800_000_000, agents=agents))
    (row,) = past_rows(history)
    assert row["agents"] == {"running": 0, "queued": 0, "done": 3, "failed": 4}


def test_an_agent_the_cli_called_completed_that_was_cut_is_shown_cut_and_not_counted_done(
    tmp_path: Path,
) -> None:
    cut = AgentRecord(id="t1", status="completed", disposition="missing", ended="turn_limit")
    whole = AgentRecord(id="t2", status="completed", disposition="included", ended="finished")
    history = History(tmp_path / "h")
    history.add(_record(RUNS[0], 1_800_000_000, agents=[cut, whole]))
    (row,) = past_rows(history)
    assert row["agents"] == {"running": 0, "queued": 0, "done": 1, "failed": 1}
    record = history.find(RUNS[0])
    states = [n["state"] for n in past_detail(record, history)["tree"]["children"]]
    assert states == ["turn_limit", "completed"]
    text = _text(shown(record, history))
    assert "[turn_limit] t1 (task, missing)" in text and "[completed] t2 (task, included)" in text
