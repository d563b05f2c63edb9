"""One run in detail (``teamlead view``'s run page), without a model: the governor's limits
kept over time, a finished run read back from its NDJSON log (an unfinished one:
test_unfinished_log.py), and the permission requests that wait for an answer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from teamlead._cli.board import Board
from teamlead._control.detail import MAX_NODES, LimitHistory
from teamlead._control.endpoint import parse_request
from teamlead._control.runlog import detail_of_log, read_log
from teamlead._run.permissions import PermissionRequests
from teamlead.errors import UsageError
from teamlead.events import ConcurrencyChanged
from teamlead.testing import FakeClock


def _change(
    at: float, cap: int, previous: int, key: str = "anthropic/claude-x"
) -> ConcurrencyChanged:
    return ConcurrencyChanged(
        key=key,
        reason="rate_limited",
        cap=cap,
        previous_cap=previous,
        effective=cap,
        epoch=1,
        at=at,
    )


def test_the_limit_history_starts_each_bucket_where_it_was_and_stays_bounded() -> None:
    history = LimitHistory()
    history.record(_change(10.0, 3, 32))
    history.record(_change(20.0, 4, 3))
    (bucket,) = history.to_json()
    assert bucket["points"] == [
        [10.0, 32, 32, "start"],
        [10.0, 3, 3, "rate_limited"],
        [20.0, 4, 4, "rate_limited"],
    ]
    for i in range(2000):
        history.record(_change(30.0 + i, 5, 4))
    for i in range(40):
        history.record(_change(1.0, 2, 3, key=f"anthropic/m{i}"))
    buckets = history.to_json()
    assert len(buckets) == 16 and len(buckets[0]["points"]) == 600


def _line(record: dict[str, Any]) -> str:
    return json.dumps({"version": 4, **record})


def _completed(rows: list[dict[str, Any]]) -> str:
    """The ``finished`` line of a run that used every one of its ``rows``' results."""
    finished = {"status": "completed", "reason": "all_results_used", "result": "ok"}
    return _line({"type": "finished", **finished, "session_id": "s", "resumes": 0, "tasks": rows})


def _row(id_: str, kind: str = "task", **fields: Any) -> dict[str, Any]:
    return {
        "id": id_,
        "kind": kind,
        "description": id_,
        "status": "completed",
        "disposition": "included",
        "source": "summary",
        **fields,
    }


def test_a_log_is_read_back_as_a_tree_with_nested_agents_and_workflow_phases() -> None:
    rows = [
        _row("a1", tokens_in=5, tokens_out=1, requests=2, duration_s=1.5),
        _row("a2", parent="a1", status="failed", disposition="failed"),
        _row("wf", description="probe"),
        _row("w1", "workflow_agent", parent="wf", phase="Scan", label="wf:a"),
        _row("w2", "workflow_agent", parent="wf", phase="Check", label="check:a"),
        _row("c1", "call", status="denied", disposition="not_run"),
    ]
    lines = [
        "not json",
        "[1, 2]",
        _line(
            {
                "type": "agent_usage",
                "agent_id": "",
                "kind": "lead",
                "requests": 3,
                "input_tokens": 10,
                "output_tokens": 2,
            }
        ),
        _line(
            {
                "type": "agent_usage",
                "agent_id": "a1",
                "kind": "agent",
                "requests": 2,
                "last_tool": "Grep",
            }
        ),
        _line({"type": "agent_usage", "agent_id": "bad"}),  # malformed: skipped
        _line(
            {
                "type": "concurrency_changed",
                "key": "anthropic/claude-x",
                "reason": "rate_limited",
                "cap": 2,
                "previous_cap": 8,
                "effective": 2,
                "epoch": 1,
                "at": 5.0,
            }
        ),
        _line({"type": "mystery", "x": 1}),
        _line(
            {
                "type": "finished",
                "status": "partial",
                "reason": "work_failed",
                "result": None,
                "session_id": "s-1",
                "resumes": 0,
                "tasks": rows,
            }
        ),
    ]
    detail = detail_of_log(lines).to_json()
    assert (detail["run"], detail["source"], detail["status"]) == ("s-1", "log", "partial")
    lead = detail["tree"]
    assert (lead["tokens"], lead["requests"]) == (12, 3)
    first, workflow, call = lead["children"]
    assert (first["id"], first["state"], first["tokens"], first["last_tool"]) == (
        "a1",
        "done",
        6,
        "Grep",
    )
    assert [(c["id"], c["state"]) for c in first["children"]] == [("a2", "failed")]
    assert workflow["kind"] == "workflow"
    assert [p["label"] for p in workflow["children"]] == ["Scan", "Check"]
    assert [a["label"] for p in workflow["children"] for a in p["children"]] == ["wf:a", "check:a"]
    assert (call["kind"], call["state"]) == ("call", "denied")
    assert detail["limits"][0]["points"][-1] == [5.0, 2, 2, "rate_limited"]


def test_every_row_of_a_log_has_a_node_whatever_ids_the_rows_repeat() -> None:
    # the second "a" would be renamed "a#2", the id of the row before it
    rows = [_row("a"), _row("a#2"), _row("a")]
    tree = detail_of_log([_completed(rows)]).to_json()["tree"]
    ids = [child["id"] for child in tree["children"]]
    assert len(ids) == 3 and len(set(ids)) == 3, ids


def test_agents_whose_parents_make_a_loop_still_hang_in_the_tree() -> None:
    # a's parent is b and b's is a: neither reached the lead, so both were left out
    rows = [_row("a", parent="b"), _row("b", parent="a"), _row("c", parent="c")]
    tree = detail_of_log([_completed(rows)]).to_json()["tree"]

    def ids(node: dict[str, Any]) -> list[str]:
        return [node["id"], *(i for child in node["children"] for i in ids(child))]

    assert sorted(ids(tree)) == ["a", "b", "c", "lead"]


def test_a_file_that_is_not_a_runs_log_is_refused() -> None:
    with pytest.raises(UsageError, match="holds no record of a run"):
        detail_of_log(["not json", json.dumps({"type": "result", "subtype": "success"})])


@pytest.mark.timeout(20)
def test_a_log_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "run.ndjson"
    os.mkfifo(fifo)  # nothing will ever write to it
    with pytest.raises(UsageError, match="not a regular file"):
        read_log(fifo)


def test_a_logs_tree_is_bounded_and_counts_what_it_left_out() -> None:
    rows = [_row(f"a{i}") for i in range(MAX_NODES + 50)]
    finished = {
        "type": "finished",
        "status": "completed",
        "result": "x",
        "session_id": None,
        "resumes": 0,
        "tasks": rows,
    }
    detail = detail_of_log([_line(finished)], name="run")
    assert len(detail.lead.children) == MAX_NODES - 1 and detail.omitted == 51
    assert detail.run == "run"


def test_a_logs_text_has_its_secrets_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-ant-api03-FAKE-0123456789abcdefXYZ"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    finished = {
        "type": "finished",
        "status": "completed",
        "result": "x",
        "session_id": "s",
        "resumes": 0,
        "tasks": [_row("a1", description=f"use {secret}")],
    }
    (child,) = detail_of_log([_line(finished)]).lead.children
    assert secret not in child.label


def test_the_endpoint_takes_the_detail_op() -> None:
    assert parse_request(b'{"version": 1, "op": "detail"}').op == "detail"


@pytest.mark.anyio
async def test_a_permission_request_is_listed_while_it_waits_for_its_answer() -> None:
    clock = FakeClock()
    requests = PermissionRequests(clock)
    answered = anyio.Event()

    class Context:
        agent_id = "a83b"
        tool_use_id = "toolu_1"

    async def ask(tool: str, tool_input: dict[str, Any], context: Any) -> str:
        await answered.wait()
        return "allowed"

    callback = requests.wrap(ask)
    async with anyio.create_task_group() as tg:

        async def asking() -> None:
            assert await callback("Bash", {"command": "rm -rf build"}, Context()) == "allowed"

        tg.start_soon(asking)
        await anyio.wait_all_tasks_blocked()
        (waiting,) = requests.waiting
        assert (waiting.tool, waiting.agent_id, waiting.what) == ("Bash", "a83b", "rm -rf build")
        answered.set()
    assert requests.waiting == [] and requests.count == 0


@pytest.mark.anyio
async def test_the_view_sends_a_logs_run_as_json_whatever_numbers_the_log_holds() -> None:
    # Python reads NaN and Infinity in a log line; the page's JSON.parse refuses them
    rows = [_row("a", duration_s=float("nan")), _row("b", duration_s=float("inf"))]
    detail = detail_of_log([_completed(rows)]).to_json()
    token = "t" * 32
    board = Board(token=token, port=1, rows=list, detail=lambda run: detail)
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/detail",
        "query_string": f"token={token}&run=s".encode(),
        "headers": [(b"host", b"127.0.0.1:1")],
    }
    bodies: list[bytes] = []
    first = anyio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            bodies.append(message["body"])
            first.set()

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(board, scope, receive, send)
            await first.wait()
            tg.cancel_scope.cancel()
    event, data = bodies[0].decode().split("\n")[:2]
    assert event == "event: detail"

    def refused(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    tree = json.loads(data.removeprefix("data: "), parse_constant=refused)["tree"]
    assert [child["duration_s"] for child in tree["children"]] == [None, None]


@pytest.mark.anyio
@pytest.mark.parametrize("op", [["stop"], {"stop": 1}, None, 7, "reboot"])
async def test_a_button_naming_no_operation_gets_one_line_not_a_server_error(op: Any) -> None:
    token = "t" * 32
    acted: list[str] = []
    board = Board(
        token=token,
        port=1,
        rows=list,
        detail=lambda run: {},
        act=lambda run, a: acted.append(run) or "",
    )
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/act",
        "query_string": f"token={token}".encode(),
        "headers": [
            (b"host", b"127.0.0.1:1"),
            (b"origin", b"http://127.0.0.1:1"),
            (b"content-type", b"application/json"),
        ],
    }
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        body = json.dumps({"run": "r", "op": op}).encode()
        return {"type": "http.request", "body": body, "more_body": False}

    with anyio.fail_after(10):
        await board(scope, receive, send)
    (start, body) = sent
    assert start["status"] == 400 and not acted
    assert json.loads(body["body"])["message"].startswith("a button names a run and one of: ")
