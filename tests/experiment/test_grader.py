"""The model grader against the scripted server: a grade comes with its cost, a missing
grade with its reason and no cost, and a scripted reply is marked as scripted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions

from teamlead.experiment import RunSummary, read_records, run_experiment
from teamlead.experiment.running.grader import Grade, grade_answer, parse_score
from teamlead.experiment.specs.spec import GraderSpec, TaskSpec, parse_spec
from teamlead.policy import Policy
from teamlead.testing import Reply, ScriptedRequest, ScriptedServer

GRADER = GraderSpec(rubric="Task: {task}\nRubric: {rubric}\nAnswer: {answer}", max_tokens=64)
TASK = TaskSpec(id="t", prompt="Review the parser.", rubric="names the bug")


def _grade(reply: Reply) -> tuple[Grade, list[ScriptedRequest]]:
    seen: list[ScriptedRequest] = []

    def script(req: ScriptedRequest) -> Reply:
        seen.append(req)
        return reply

    with ScriptedServer(script) as server:
        env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-ant-offline"}
        grade = anyio.run(
            lambda: grade_answer(GRADER, TASK, "the answer", env=env, default_model=None)
        )
    return grade, seen


def test_a_scored_reply_is_a_grade_with_its_cost() -> None:
    grade, seen = _grade(Reply.text("Covers it well. SCORE: 7"))
    assert (grade.score, grade.error, grade.scripted) == (0.7, None, True)
    assert grade.cost_usd is not None and grade.cost_usd > 0 and grade.billed_usd == grade.cost_usd
    prompt = seen[0].first_user_text
    assert "Review the parser." in prompt and "names the bug" in prompt and "the answer" in prompt


def test_a_reply_without_a_score_is_no_grade_and_no_cost_but_says_why() -> None:
    grade, _ = _grade(Reply.text("Scripted side reply."))
    assert (grade.score, grade.cost_usd) == (None, None)
    assert grade.error == "the grader's reply has no 'SCORE: <0-10>' line: 'Scripted side reply.'"
    assert grade.billed_usd > 0  # the call itself was answered: the budget still counts it


def test_a_failed_call_is_no_grade_with_the_api_error() -> None:
    grade, seen = _grade(Reply.error(400, message="max_tokens is too large"))
    assert (grade.score, grade.cost_usd, grade.billed_usd) == (None, None, 0.0)
    assert grade.error is not None and grade.error.startswith("BadRequestError: ")
    assert "max_tokens is too large" in grade.error and len(seen) == 1  # a 400 is not retried


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("SCORE: 8", 0.8),
        ("fine\nSCORE: 10", 1.0),
        ("SCORE: 12", 1.0),
        ("SCORE: 6.5", 0.65),
        # the reply ends with its score, as asked; an earlier one is the scale, quoted
        ("SCORE: 10 needs all three parts; this has two.\nSCORE: 6", 0.6),
    ],
)
def test_the_score_line_is_read_and_capped_at_ten(text: str, score: float) -> None:
    assert parse_score(text) == pytest.approx(score)
    assert parse_score("score: eight") is None


SPEC = """
[experiment]
name = "ab"
trials = 2
seed = 7
control = "baseline"
grader = { rubric = "Task: {task}\\nAnswer: {answer}" }
[[variants]]
name = "baseline"
strategy = "baseline"
[[variants]]
name = "delegation"
strategy = "delegation"
[[tasks]]
id = "t"
prompt = "Question."
"""


def _lead(answer: str, *, scripted: bool) -> Any:
    """A scripted ``query_fn``: one assistant message (an API's id), then the result."""

    async def query_fn(*, prompt: str, options: ClaudeAgentOptions) -> AsyncIterator[Any]:
        session = str(options.session_id)
        message_id = "msg_scripted_0a1b" if scripted else "msg_01AbCdEf"
        yield {"type": "system", "subtype": "init", "session_id": session, "cwd": "/"}
        yield {
            "type": "assistant",
            "session_id": session,
            "message": {
                "id": message_id, "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": answer}],
            },
        }  # fmt: skip
        yield {
            "type": "result", "subtype": "success", "is_error": False, "result": answer,
            "session_id": session, "num_turns": 1, "total_cost_usd": 0.001,
        }  # fmt: skip

    return query_fn


def test_the_runner_records_each_grade_or_why_there_is_none(tmp_path: Path) -> None:
    spec = parse_spec(SPEC)
    with ScriptedServer(lambda req: Reply.text("Fine. SCORE: 6")) as server:
        env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "sk-ant-offline"}

        async def run(answer: str, scripted: bool, out: Path) -> RunSummary:
            return await run_experiment(
                spec,
                out,
                base_options=ClaudeAgentOptions(env=env),
                query_fn=_lead(answer, scripted=scripted),
                policy=Policy(relay=False),
            )

        graded = anyio.run(run, "the answer", True, tmp_path / "graded")
        assert len(server.recorded()) == 4  # one grading request per trial
        anyio.run(run, "", False, tmp_path / "failed")
        assert len(server.recorded()) == 4  # a failed trial is not sent to the grader
    records = read_records(tmp_path / "graded" / "trials.jsonl").records
    assert [(r.status, r.grade, r.grader_error, r.scripted_model) for r in records] == [
        ("completed", 0.6, None, True)
    ] * 4
    assert all(r.grader_cost_usd and r.grader_cost_usd > 0 for r in records)
    grader_cost = sum(r.grader_cost_usd or 0 for r in records)
    assert graded.cost_usd == pytest.approx(4 * 0.001 + grader_cost)
    unanswered = read_records(tmp_path / "failed" / "trials.jsonl").records
    assert {(r.status, r.grade, r.grader_cost_usd, r.grader_error) for r in unanswered} == {
        ("failed", None, None, "the trial failed")
    }
    assert {r.scripted_model for r in unanswered} == {False}  # the lead's ids were an API's
