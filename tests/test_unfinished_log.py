"""``teamlead view run.ndjson`` on the log of a run that never wrote its ``finished`` line
(killed, its machine lost, or still running), without a model: the tree is rebuilt from the
records there are, the run and each agent whose end is missing show ``unfinished``, and a
file that holds no record of a run is refused in one line. The lead's last tool is tracked
in the log's tree and in the run's own parse (what the live tree reads).

The real logs in ``fixtures/logs`` are ``teamlead ask --json`` runs on the scripted server
(a fan-out of three agents that met 429s, and a two-phase workflow), their paths rewritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from teamlead._control.detail import MAX_NODES
from teamlead._control.runlog import UNFINISHED, UNFINISHED_REASON, detail_of_log, read_log
from teamlead.errors import UsageError
from teamlead.tracker import LeadTurn, Tracker

from .browser import detail_events, serving_view
from .isolated import isolated_env

LOGS = Path(__file__).parent / "fixtures" / "logs"


def _lines(name: str) -> list[bytes]:
    return (LOGS / name).read_bytes().splitlines(keepends=True)


def _upto(lines: list[bytes], marker: str, nth: int = 1) -> list[bytes]:
    """``lines`` up to the ``nth`` one holding ``marker``, that one included."""
    hits = [i for i, line in enumerate(lines) if marker in line.decode()]
    return lines[: hits[nth - 1] + 1]


def _nodes(tree: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every node of ``tree`` by its label."""
    out = {tree["label"]: tree}
    for child in tree["children"]:
        out.update(_nodes(child))
    return out


def _without(tree: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in tree.items() if k not in keys}


@pytest.mark.parametrize(
    ("log", "tool"), [("fan-out.ndjson", "Agent"), ("workflow.ndjson", "Workflow")]
)
def test_a_real_log_cut_before_its_finished_line_shows_the_same_tree_unfinished(
    log: str, tool: str
) -> None:
    lines = _lines(log)
    assert b'"type": "finished"' in lines[-1]
    finished = read_log(LOGS / log).to_json()
    cut = detail_of_log(lines[:-1]).to_json()
    assert (finished["status"], cut["status"]) == ("completed", UNFINISHED)
    assert (finished["reason"], cut["reason"]) == ("all_results_used", UNFINISHED_REASON)
    assert cut["run"] == finished["run"] and cut["source"] == "log"
    # the records tell what the rows do: every agent, its state, tokens, requests, duration
    assert cut["tree"]["children"] == finished["tree"]["children"]
    lead = ("state", "duration_s", "children")
    assert _without(cut["tree"], *lead) == _without(finished["tree"], *lead)
    assert cut["tree"]["state"] == UNFINISHED and cut["tree"]["last_tool"] == tool
    assert cut["limits"] == finished["limits"]


def test_a_fan_out_killed_after_its_first_agent_shows_the_others_unfinished() -> None:
    detail = detail_of_log(_upto(_lines("fan-out.ndjson"), '"type": "task_ended"')).to_json()
    assert detail["status"] == UNFINISHED
    nodes = _nodes(detail["tree"])
    assert [c["label"] for c in detail["tree"]["children"]] == ["agent-1", "agent-2", "agent-3"]
    first = nodes["agent-1"]
    assert (first["state"], first["tokens"], first["requests"]) == ("done", 32, 1)
    assert first["duration_s"] is not None and first["duration_s"] > 0  # the CLI's
    for label in ("agent-2", "agent-3"):
        assert (nodes[label]["state"], nodes[label]["duration_s"]) == (UNFINISHED, None)
    lead = detail["tree"]
    assert (lead["state"], lead["last_tool"], lead["requests"]) == (UNFINISHED, "Agent", 2)
    (bucket,) = detail["limits"]
    assert [p[3] for p in bucket["points"]] == ["start", "rate_limited"]


def test_a_workflow_cut_mid_phase_shows_its_phases_and_the_agents_seen() -> None:
    lines = _upto(_lines("workflow.ndjson"), '"state": "done"')
    detail = detail_of_log(lines).to_json()
    (workflow,) = detail["tree"]["children"]
    assert (workflow["kind"], workflow["label"], workflow["state"]) == (
        "workflow",
        "scan workflow",
        UNFINISHED,
    )
    assert [p["label"] for p in workflow["children"]] == ["Scan", "Check"]
    scan, check = workflow["children"]
    states = {a["label"]: a["state"] for a in scan["children"]}
    assert states == {"wf:a": "done", "wf:b": UNFINISHED}
    assert [a["id"] for a in scan["children"]][1].endswith("#2")  # no agent id yet
    assert check["children"] == []
    assert detail["tree"]["last_tool"] == "Workflow"


def _line(record: dict[str, Any]) -> str:
    return json.dumps({"version": 4, **record})


def _started(task_id: str, tool_use_id: str | None = None, **fields: Any) -> str:
    return _line(
        {
            "type": "task_started",
            "task_id": task_id,
            "tool_use_id": tool_use_id,
            "description": task_id,
            **fields,
        }
    )


def _call(tool_use_id: str, description: str) -> str:
    return _line(
        {
            "type": "agent_call",
            "tool_use_id": tool_use_id,
            "message_id": "m1",
            "description": description,
            "prompt": "p",
        }
    )


def _spawn(outcome: str, tool_use_id: str, *, before_6: bool, **fields: Any) -> str:
    """A spawn gate record: ``spawn_decided``, or (``before_6``) one type per outcome, as
    event version 5 and before wrote it."""
    kind = (
        {"type": f"spawn_{outcome}"} if before_6 else {"type": "spawn_decided", "outcome": outcome}
    )
    return _line({**kind, "tool_use_id": tool_use_id, "description": "d", **fields})


def _workflow_agent(index: int, state: str, **fields: Any) -> str:
    record = {
        "type": "workflow_agent",
        "task_id": "wf",
        "run_id": "wf_1",
        "index": index,
        "label": f"wf:{index}",
        "state": state,
        "previous": None,
        "phase": "Scan",
        **fields,
    }
    return _line(record)


@pytest.mark.parametrize("before_6", [False, True], ids=["spawn_decided", "before_version_6"])
def test_nested_tasks_calls_and_the_spawn_gates_verdicts_are_rebuilt_from_the_records(
    before_6: bool,
) -> None:
    lines = [
        _line({"type": "session", "session_id": "s-9"}),
        _call("t1", "security"),
        _call("t2", "denied one"),
        _call("t3", "queued one"),
        _call("t4", "rejected one"),
        _spawn("admitted", "t1", before_6=before_6, waited_s=0, running=1, limit=2),
        _spawn("denied", "t2", before_6=before_6, code="spawn_budget", reason="budget spent"),
        _spawn("queued", "t3", before_6=before_6, position=1, running=2, limit=2),
        _spawn("rejected", "t4", before_6=before_6, reason="the CLI refused it"),
        _started("a1", "t1", description="security"),
        _started("a2", "t9", description="nested", parent_task_id="a1"),
        _line({"type": "task_progress", "task_id": "a2", "tokens": 40, "last_tool": "Read"}),
        _line(
            {
                "type": "subagent_turn",
                "parent_tool_use_id": "t1",
                "text": "",
                "tool_names": ["Grep", "Bash"],
                "tokens": 7,
            }
        ),
        _line(
            {
                "type": "task_ended",
                "task_id": "a1",
                "status": "failed",
                "source": "task_notification",
                "usage": {"total_tokens": 90, "tool_uses": 2, "duration_ms": 1500},
            }
        ),
        _line(
            {
                "type": "agent_usage",
                "agent_id": "",
                "kind": "lead",
                "requests": 2,
                "input_tokens": 5,
                "output_tokens": 5,
            }
        ),
        _line(
            {
                "type": "lead_turn",
                "message_id": "m1",
                "text": "",
                "error": None,
                "tool_names": ["Agent"],
            }
        ),
        _line(
            {
                "type": "lead_turn",
                "message_id": "m2",
                "text": "waiting",
                "error": None,
                "tool_names": [],
            }
        ),
        "{truncated mid-lin",
    ]
    detail = detail_of_log(lines, name="run-7").to_json()
    assert (detail["run"], detail["status"]) == ("s-9", UNFINISHED)
    lead = detail["tree"]
    assert (lead["tokens"], lead["requests"], lead["last_tool"]) == (10, 2, "Agent")
    first, *calls = lead["children"]
    assert (first["label"], first["state"], first["duration_s"]) == ("security", "failed", 1.5)
    assert (first["tokens"], first["last_tool"]) == (90, "Bash")  # the CLI's: no relay count
    (nested,) = first["children"]
    assert (nested["label"], nested["state"], nested["tokens"], nested["last_tool"]) == (
        "nested",
        UNFINISHED,
        40,
        "Read",
    )
    assert [(c["kind"], c["label"], c["state"]) for c in calls] == [
        ("call", "denied one", "denied"),
        ("call", "queued one", "queued"),
        ("call", "rejected one", "rejected"),
    ]


def test_a_workflows_agents_it_ended_without_are_lost_and_the_rest_as_they_ended() -> None:
    lines = [
        _started("wf", "t1", description="probe", task_type="local_workflow"),
        _line(
            {
                "type": "workflow_phase",
                "task_id": "wf",
                "run_id": "wf_1",
                "index": 1,
                "title": "Scan",
            }
        ),
        _workflow_agent(1, "start", agent_id="a1"),
        _workflow_agent(2, "start"),
        _workflow_agent(3, "start", agent_id="a3"),
        _workflow_agent(1, "done", previous="start", tokens=21, duration_ms=377),
        _workflow_agent(3, "error", previous="start", error="boom"),
        _line(
            {
                "type": "workflow_ended",
                "task_id": "wf",
                "run_id": "wf_1",
                "status": "failed",
                "agents": 3,
                "done": 1,
                "errors": 1,
                "cached": 0,
                "lost": ["wf:2"],
            }
        ),
    ]
    (workflow,) = detail_of_log(lines).lead.children
    assert (workflow.kind, workflow.state, workflow.tokens) == ("workflow", UNFINISHED, 21)
    (scan,) = workflow.children
    agents = [(a.id, a.state, a.tokens, a.duration_s) for a in scan.children]
    assert agents == [
        ("a1", "done", 21, 0.377),
        ("wf#2", "lost", None, None),
        ("a3", "failed", None, None),
    ]


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n\n",
        b"\x00\xff\xfe garbage \x89PNG\r\n",
        b"not json\n[1, 2]\n42\n",
        b'{"hello": "world"}\n{"type": "mystery", "version": 4}\n',
        b'{"type": "system", "subtype": "init", "session_id": "x"}\n',  # the CLI's own stream
        b'{"type": "task_started", "version": 4}\n',  # a run's type, not a run's record
        b"[" * 100_000 + b"\n",
    ],
)
def test_a_file_with_no_record_of_a_run_is_refused_in_one_line(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "x.ndjson"
    path.write_bytes(content)
    with pytest.raises(UsageError) as refused:
        read_log(path)
    (line,) = str(refused.value).splitlines()
    assert "holds no record of a run" in line


def test_a_log_of_only_its_first_line_is_the_lead_of_an_unfinished_run() -> None:
    detail = detail_of_log([_line({"type": "session", "session_id": "s-1"})])
    assert (detail.run, detail.status, detail.lead.children) == ("s-1", UNFINISHED, [])


def test_an_unfinished_logs_text_is_plain_and_its_tree_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "sk-ant-api03-FAKE-0123456789abcdefXYZ"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    hostile = f"<img src=x onerror=alert(1)>\n{secret}\n" + "x" * 5000
    lines = [
        _started("h" * 5000, description=hostile),
        _line(
            {
                "type": "lead_turn",
                "message_id": "m",
                "text": "",
                "error": None,
                "tool_names": [hostile],
            }
        ),
        *(_started(f"a{i}") for i in range(MAX_NODES + 50)),
    ]
    detail = detail_of_log(lines)
    first = detail.lead.children[0]
    for text in (first.label, first.id, detail.lead.last_tool or ""):
        assert secret not in text and "\n" not in text and len(text) <= 200
    assert len(detail.lead.children) == MAX_NODES - 1
    assert detail.omitted == 52  # past the tree's bound; the hostile one is in it
    assert len(json.dumps(detail.to_json())) < 2_000_000


def test_the_runs_parse_keeps_the_leads_last_tool() -> None:
    tracker = Tracker()
    assert tracker.lead_last_tool is None
    tracker.apply(LeadTurn(message_id="m1", text="", error=None, tool_names=("Bash", "Agent")))
    tracker.apply(LeadTurn(message_id="m2", text="waiting", error=None))
    assert tracker.lead_last_tool == "Agent"
    tracker.apply(LeadTurn(message_id="m3", text="", error=None, tool_names=("Workflow",)))
    assert tracker.lead_last_tool == "Workflow"


@pytest.mark.slow
def test_the_page_of_a_log_still_being_written_follows_it_to_its_finished_line(
    tmp_path: Path,
) -> None:
    # the real command serving a log a run is still writing: a line half written is
    # skipped until whole, each landed line shows, and the finished line ends it
    lines = _lines("fan-out.ndjson")
    first = _upto(lines, '"type": "task_ended"')
    log = tmp_path / "run.ndjson"
    log.write_bytes(b"".join(first))
    with serving_view(isolated_env(tmp_path), str(log)) as url:
        events = detail_events(url)
        seen = next(events)
        assert seen == detail_of_log(first).to_json() and seen["status"] == UNFINISHED
        rest = lines[len(first) : -1]
        half = len(lines[-1]) // 2
        with log.open("ab") as out:
            out.write(b"".join(rest) + lines[-1][:half])
        # (a read may land mid-write: such a state shows, then the whole one)
        grown = detail_of_log(lines[:-1]).to_json()
        assert next(d for d in events if d == grown)["status"] == UNFINISHED
        done = [[n["state"] for n in d["tree"]["children"]].count("done") for d in (seen, grown)]
        assert done == [1, 3]
        with log.open("ab") as out:
            out.write(lines[-1][half:])
        whole = read_log(LOGS / "fan-out.ndjson").to_json()
        assert next(d for d in events if d["status"] != UNFINISHED) == whole


def test_a_finished_logs_agent_cut_at_its_turn_limit_shows_the_cut_not_done() -> None:
    from teamlead.events import Finished, TaskDisposition

    rows = [
        TaskDisposition(id="t1", kind="task", description="deep", status="completed",
                        disposition="missing", source="lead", ended="turn_limit"),
        TaskDisposition(id="t2", kind="task", description="quick", status="completed",
                        disposition="included", source="lead", ended="finished"),
    ]  # fmt: skip
    done = Finished(status="partial", result="x", session_id="s", resumes=3, tasks=rows)
    detail = detail_of_log([done.to_json().encode()]).to_json()
    states = [(c["label"], c["state"]) for c in detail["tree"]["children"]]
    assert states == [("deep", "turn_limit"), ("quick", "done")]
