"""Drop-in: swap ``claude_agent_sdk.query`` for ``teamlead.query`` and lose no agent's result.

An SDK app that has the lead delegate to parallel subagents loses work in two common ways:
the lead's synthesis turn fails (429/529) after the agents have finished, or the stream
ends while background agents or teammates are still busy. ``teamlead.query`` takes the
same arguments, yields the SDK's own messages and raises its exceptions; when the stream
ends it collects whatever was not used yet and resumes the session with it, so the last
``ResultMessage`` is the answer that used every result. (``teamlead.run`` is the same run
with teamlead's own events, ending with a ``Finished`` that says what became of each
result.)

The only change to an existing app is the import. The ``delegation`` strategy is
optional: it appends teamlead's delegation guidance to Claude Code's system prompt, so
the lead splits independent work across agents running in parallel.

Run it in the repository you want reviewed (it only reads files)::

    ANTHROPIC_API_KEY=sk-ant-... python examples/drop_in_query.py

Exit code: 0 when the final result is a success, 1 when it is an error.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ResultMessage,
    TaskNotificationMessage,
    TaskStartedMessage,
)

import teamlead
from teamlead import query  # the one-line change; was: from claude_agent_sdk import query

PROMPT = (
    "Review the code in the current directory. Have one agent map its architecture and "
    "another look for security problems, in parallel, then combine their findings into a "
    "short report with file references."
)


def app_options() -> ClaudeAgentOptions:
    """The app's own SDK options: read-only tools, plus ``Agent`` so the lead can delegate."""
    return ClaudeAgentOptions(allowed_tools=["Read", "Glob", "Grep", "Agent"], max_turns=40)


def describe(message: Any) -> str | None:
    """One progress line for an SDK message worth showing, else ``None``."""
    if isinstance(message, TaskStartedMessage):
        return f"[agent] started: {message.description}"
    if isinstance(message, TaskNotificationMessage):
        return f"[agent] {message.status}: {message.summary or message.task_id}"
    if isinstance(message, ResultMessage):
        outcome = (
            f"error {message.api_error_status or message.subtype}" if message.is_error else "ok"
        )
        return f"[lead] turn ended ({outcome})"
    return None


async def main(options: ClaudeAgentOptions | None = None, prompt: str = PROMPT) -> ResultMessage:
    """Ask the lead, print progress, and return the final ``ResultMessage``.

    Args:
        options: SDK options to start from (default :func:`app_options`); tests pass
            options that point the CLI at a scripted model server.
        prompt: what to ask.

    Returns:
        The last ``ResultMessage``: the answer that used every agent's result.

    Raises:
        ClaudeSDKError: as ``claude_agent_sdk.query`` raises it (the CLI is missing, or
            the final round failed after teamlead retried and resumed what it could).
    """
    strategy = teamlead.load_strategy("delegation")
    options = teamlead.apply_strategy(options or app_options(), strategy)
    final: ResultMessage | None = None
    # The same loop an SDK app already has: the SDK's own messages, nothing else.
    async for message in query(prompt=prompt, options=options):
        line = describe(message)
        if line:
            print(line, flush=True)
        if isinstance(message, ResultMessage):
            final = message
    if final is None:
        raise RuntimeError("the CLI ended without a result")
    print(f"\nanswer ({'error' if final.is_error else 'ok'}, ${final.total_cost_usd or 0:.4f}):")
    print(final.result or "(no answer)")
    return final


if __name__ == "__main__":
    if not os.environ.get("ANTHROPIC_API_KEY"):
        print("drop_in_query: set ANTHROPIC_API_KEY to run this example", file=sys.stderr)
        sys.exit(2)
    sys.exit(1 if anyio.run(main).is_error else 0)
