"""The model grader of an experiment: scores a trial's final answer against its rubric.

It sits apart from the runner because it is the one part that calls the Messages API
directly (through ``anthropic``), and its cost is counted beside the trial's own.

A grade either happens or says why not: :class:`Grade` carries the score and its cost,
or an error (the call failed, or the reply had no ``SCORE:`` line) and no cost. What such
a reply was billed is still in :attr:`Grade.billed_usd`, so the experiment's budget counts
it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from ..._claude import is_scripted_message
from ..._redact import redact
from ..specs.spec import GraderSpec, TaskSpec

__all__ = ["Grade", "grade_answer", "parse_score"]

_PRICES: dict[str, tuple[float, float]] = {
    "haiku": (1.0, 5.0),
    "sonnet": (3.0, 15.0),
    "opus": (5.0, 25.0),
    "": (5.0, 25.0),
}
_SCORE = re.compile(r"SCORE:\s*([0-9]+(?:\.[0-9]+)?)")
_QUOTED = 80  # characters of a reply without a score quoted in the error


def _price(model: str | None) -> tuple[float, float]:
    name = (model or "").lower()
    return next((p for key, p in _PRICES.items() if key and key in name), _PRICES[""])


class Grade(NamedTuple):
    """What grading one answer gave.

    ``score`` (0..1) and ``cost_usd`` are None when no grade came back, and ``error``
    says why. ``billed_usd`` is what the call cost whatever came of it (0 when it failed
    before a reply). ``scripted`` is True when teamlead's scripted model answered.
    """

    score: float | None
    cost_usd: float | None
    error: str | None
    billed_usd: float = 0.0
    scripted: bool = False


def parse_score(text: str) -> float | None:
    """The score (0..1) in a grader's reply ``SCORE: <0-10>``; None without one.

    The last one counts: the reply was asked to end with it, and one before may quote
    the rubric's scale.

    Example:
        >>> parse_score("Solid. SCORE: 7"), parse_score("no number")
        (0.7, None)
    """
    scores = _SCORE.findall(text)
    return min(10.0, float(scores[-1])) / 10.0 if scores else None


async def grade_answer(
    grader: GraderSpec,
    task: TaskSpec,
    answer: str,
    *,
    env: Mapping[str, str],
    default_model: str | None,
) -> Grade:
    """Score ``answer`` against the task's rubric with a model; never raises for its failure.

    The grader is asked for a line ``SCORE: <0-10>``. A failed call (after the client's
    own two retries) or a reply without a score is a :class:`Grade` with ``error`` set and
    no score or cost.

    Example:
        >>> grade = await grade_answer(spec.experiment.grader, task, text, env=env,
        ...                            default_model=None)  # doctest: +SKIP
        >>> grade.score if grade.error is None else grade.error  # doctest: +SKIP
        0.8
    """
    import anthropic

    model = grader.model or default_model or "claude-sonnet-5-5"
    prompt = grader.render(task=task.prompt, rubric=task.rubric, answer=answer)
    prompt += "\n\nEnd your reply with one line: SCORE: <a number from 0 to 10>."
    try:
        client = anthropic.AsyncAnthropic(
            api_key=env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN") or None,
            base_url=env.get("ANTHROPIC_BASE_URL") or None,
            max_retries=2,
        )
        async with client:
            message = await client.messages.create(
                model=model,
                max_tokens=grader.max_tokens,
                messages=[{"role": "user", "content": prompt}],
            )
    except Exception as exc:  # noqa: BLE001 - a failed grade is recorded, never fatal
        detail = " ".join(str(exc).split())[:300]
        return Grade(None, None, redact(f"{type(exc).__name__}: {detail}", env))
    text = "".join(getattr(b, "text", "") for b in message.content)
    price_in, price_out = _price(model)
    cost = (message.usage.input_tokens * price_in + message.usage.output_tokens * price_out) / 1e6
    scripted = is_scripted_message(message.id)
    score = parse_score(text)
    if score is None:
        quoted = " ".join(text.split())
        quoted = quoted[:_QUOTED] + ("…" if len(quoted) > _QUOTED else "")
        error = f"the grader's reply has no 'SCORE: <0-10>' line: {quoted!r}"
        return Grade(None, None, redact(error, env), cost, scripted)
    return Grade(score, cost, None, cost, scripted)
