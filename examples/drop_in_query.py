"""Drop-in: swap ``claude_agent_sdk.query`` for ``teamlead.query`` and lose no agent's result.

An SDK app that has the lead delegate to parallel subagents loses work in two common ways:
the lead's synthesis turn fails (429/529) after the agents have finished, or the stream
ends while background agents or teammates are still busy. ``teamlead.query`` takes the
same arguments and yields the same messages; when the stream ends it collects whatever
was not used yet, resumes the session with it, and ends with one ``teamlead.Finished``
that says honestly whether every result made it into the answer.

The only change to an existing app is the import. The ``delegation`` strategy is
optional: it appends teamlead's delegation guidance to Claude Code's system prompt, so
the lead splits independent work across agents running in parallel.

Run it in the repository you want reviewed (it only reads files)::

    ANTHROPIC_API_KEY=sk-ant-... python examples/drop_in_query.py

Exit code: 0 when every result was used, 3 for a partial answer, 1 when it failed
(the same codes as ``teamlead ask``).
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

#: ``Finished.status`` -> exit code, as ``teamlead ask`` uses them.
EXIT_CODES = {"completed": 0, "partial": 3, "failed": 1}


def app_options() -> ClaudeAgentOptions:
    """The app's own SDK options: read-only tools, plus ``Agent`` so the lead can delegate."""
    return ClaudeAgentOptions(allowed_tools=["Read", "Glob", "Grep", "Agent"], max_turns=40)


def describe(item: Any) -> str | None:
    """One progress line for a message or teamlead event worth showing, else ``None``."""
    if isinstance(item, TaskStartedMessage):
        return f"[agent] started: {item.description}"
    if isinstance(item, TaskNotificationMessage):
        return f"[agent] {item.status}: {item.summary or item.task_id}"
    if isinstance(item, ResultMessage):
        outcome = f"error {item.api_error_status or item.subtype}" if item.is_error else "ok"
        return f"[lead] turn ended ({outcome})"
    if isinstance(item, teamlead.WaitingForTeam):
        waiting = [*item.open_tasks, *item.pending_members]
        return f"[teamlead] waiting up to {item.wait_s:g} s for: {', '.join(waiting)}"
    if isinstance(item, teamlead.InboxCollected):
        return f"[teamlead] {len(item.messages)} message(s) from team {item.team}"
    if isinstance(item, teamlead.FallbackUsed):
        return f"[teamlead] recovered {item.description!r} from its {item.source}"
    if isinstance(item, teamlead.Resuming):
        return (
            f"[teamlead] resuming the session (round {item.round}, attempt {item.attempt}) "
            f"with {len(item.deliveries)} unused result(s)"
        )
    if isinstance(item, teamlead.ResumeFailed):
        retry = f"; retrying in {item.retry_in_s:g} s" if item.retry_in_s is not None else ""
        return f"[teamlead] resume attempt {item.attempt} failed: {item.error}{retry}"
    return None


async def main(
    options: ClaudeAgentOptions | None = None, prompt: str = PROMPT
) -> teamlead.Finished:
    """Ask the lead, print progress, and return teamlead's final verdict.

    Args:
        options: SDK options to start from (default :func:`app_options`); tests pass
            options that point the CLI at a scripted model server.
        prompt: what to ask.

    Returns:
        The ``Finished`` event: ``result`` is the final answer, ``status`` is
        ``completed``, ``partial`` or ``failed``, ``reasons`` says what went wrong.
    """
    strategy = teamlead.load_strategy("delegation")
    options = teamlead.apply_strategy(options or app_options(), strategy)
    finished: teamlead.Finished | None = None
    # The same loop an SDK app already has: every SDK message still comes through.
    async for item in query(prompt=prompt, options=options):
        line = describe(item)
        if line:
            print(line, flush=True)
        if isinstance(item, teamlead.Finished):
            finished = item
    if finished is None:  # teamlead.query always ends with exactly one Finished
        raise RuntimeError("teamlead.query ended without a Finished event")
    print(f"\nstatus: {finished.status} (resumes: {finished.resumes})")
    for reason in finished.reasons:
        print(f"  - {reason}")
    print(f"\n{finished.result or '(no answer)'}")
    return finished


if __name__ == "__main__":
    if not os.environ.get("ANTHROPIC_API_KEY"):
        print("drop_in_query: set ANTHROPIC_API_KEY to run this example", file=sys.stderr)
        sys.exit(2)
    sys.exit(EXIT_CODES[anyio.run(main).status])
