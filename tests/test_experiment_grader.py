"""The model grader against the scripted server: a grade comes with its cost, a missing
grade with its reason and no cost, and a scripted reply is marked as scripted."""

from __future__ import annotations

import anyio
import pytest

from teamlead.experiment.running.grader import Grade, grade_answer, parse_score
from teamlead.experiment.specs.spec import GraderSpec, TaskSpec
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
    [("SCORE: 8", 0.8), ("fine\nSCORE: 10", 1.0), ("SCORE: 12", 1.0), ("SCORE: 6.5", 0.65)],
)
def test_the_score_line_is_read_and_capped_at_ten(text: str, score: float) -> None:
    assert parse_score(text) == pytest.approx(score)
    assert parse_score("score: eight") is None
