"""The deny reasons the spawn gate gives the model: each says what happened and what to do.

The model reads them as ``PreToolUse:Agent hook error: <reason>`` tool results, so they are
short, plain, and end with the next step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class WorkflowRefusal:
    """Why a workflow agent does not start.

    Attributes:
        code: ``spawn_budget``: the run's spawn budget is spent (every later request of the
            agent is refused too); ``no_slot``: no slot, or no turn in the stagger, came
            before the run's wrap-up point.
        reason: what the agent (and the run's rows) are told.
    """

    code: Literal["spawn_budget", "no_slot"]
    reason: str


#: The call had no usable input.
BAD_INPUT = (
    "the Agent call had no usable input (a prompt string is required); "
    "the agent was not started. Send the call again with a prompt."
)
#: The call was cancelled while it waited (a rejection, not a deny: no next step).
CANCELLED = "the call was cancelled while it waited for an agent slot (hook timeout or run ended)"
#: A workflow agent's first request got no slot before the run's wrap-up point (the relay's
#: refusal: the agent reads it as an API error).
WORKFLOW_NO_SLOT = "teamlead: no agent slot came before the run's wrap-up; this agent does not run"
#: A workflow agent's turn in the run's stagger comes after the wrap-up point.
WORKFLOW_LATE_TURN = (
    "teamlead: this agent's turn in the run's stagger comes after the run's wrap-up; "
    "this agent does not run"
)


def budget(limit: int) -> str:
    """The spawn budget is used up."""
    return (
        f"spawn budget of {limit} is used up ({limit} agents already started in this run); "
        "do not retry. Answer with the results you have, or do the remaining work yourself."
    )


def per_message(limit: int) -> str:
    """This message reached the per-message limit."""
    return (
        f"at most {limit} agents may be started from one message and this message reached it; "
        "send the remaining agents in a later message, or do that work yourself."
    )


def depth(max_depth: int) -> str:
    """The call is nested deeper than the policy allows."""
    if max_depth <= 1:
        return (
            "subagents may not start agents of their own (max depth 1); "
            "do this work yourself and report back."
        )
    return (
        f"agents nested deeper than {max_depth} levels are not allowed; "
        "do this work yourself and report back."
    )


def deadline(left_s: float, reserve_s: float) -> str:
    """Too close to the deadline for another agent."""
    return (
        f"the run's deadline is near ({max(0.0, left_s):.0f} s left, {reserve_s:.0f} s kept for "
        "the final answer), so no more agents start. Answer with the results you have."
    )


def wait_limit(waited_s: float, limit: int) -> str:
    """No slot opened within the longest wait."""
    return (
        f"no agent slot opened within {waited_s:.0f} s (at most {limit} agents run at once); "
        "answer with the results you have, or try this agent again later."
    )


def starved(limit: int) -> str:
    """The call waited for the process-wide cap, which other runs held (said first)."""
    return f"other runs of this process held all {limit} agent slots:"


def nested_busy(limit: int) -> str:
    """Every slot is busy and a nested call cannot wait."""
    return (
        f"all {limit} agent slots are busy, and a nested agent cannot wait for one (its parent "
        "holds a slot); do this work yourself and report back."
    )


def closed(why: str) -> str:
    """The run (or the CLI process) is ending: ``why`` says which."""
    return f"{why}; no more agents start. Answer with the results you have."


def error(exc: BaseException) -> str:
    """A fault inside the gate."""
    text = str(exc).replace("\n", " ")[:160]
    return (
        f"the spawn gate failed on this call ({type(exc).__name__}: {text}); the agent was not "
        "started. Try it once more, or do the work yourself."
    )


def workflow_closed(why: str) -> str:
    """A workflow agent's first request came, or waited, as the run closed (``why``)."""
    return f"teamlead: {why}; this agent does not run"
