"""The model grader of an experiment: scores a trial's final answer against its rubric.

It sits apart from the runner because it is the one part that calls the Messages API
directly (through ``anthropic``), and its cost is counted beside the trial's own.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..specs.spec import GraderSpec, TaskSpec

__all__ = ["grade_answer"]

_PRICES: dict[str, tuple[float, float]] = {
    "haiku": (1.0, 5.0),
    "sonnet": (3.0, 15.0),
    "opus": (5.0, 25.0),
    "": (5.0, 25.0),
}


def _price(model: str | None) -> tuple[float, float]:
    name = (model or "").lower()
    return next((p for key, p in _PRICES.items() if key and key in name), _PRICES[""])


async def grade_answer(
    grader: GraderSpec,
    task: TaskSpec,
    answer: str,
    *,
    env: Mapping[str, str],
    default_model: str | None,
) -> tuple[float | None, float]:
    """Score ``answer`` against the task's rubric with a model; returns (score 0..1, cost USD).

    The grader is asked for a line ``SCORE: <0-10>``; an answer without one scores None.
    """
    import re

    import anthropic

    model = grader.model or default_model or "claude-sonnet-5-5"
    client = anthropic.AsyncAnthropic(
        api_key=env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN") or None,
        base_url=env.get("ANTHROPIC_BASE_URL") or None,
        max_retries=2,
    )
    prompt = grader.render(task=task.prompt, rubric=task.rubric, answer=answer)
    prompt += "\n\nEnd your reply with one line: SCORE: <a number from 0 to 10>."
    async with client:
        message = await client.messages.create(
            model=model,
            max_tokens=grader.max_tokens,
            messages=[{"role": "user", "content": prompt}],
        )
    text = "".join(getattr(b, "text", "") for b in message.content)
    price_in, price_out = _price(model)
    cost = (message.usage.input_tokens * price_in + message.usage.output_tokens * price_out) / 1e6
    match = re.search(r"SCORE:\s*([0-9]+(?:\.[0-9]+)?)", text)
    score = min(10.0, float(match.group(1))) / 10.0 if match else None
    return score, cost
