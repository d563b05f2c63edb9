"""ClaudeSDKClient apps: ``teamlead.receive_all`` instead of ``client.receive_response()``.

``receive_response()`` returns at the first ``ResultMessage``. When the lead has sent
agents to work in the background, that first result is only its "I dispatched them"
turn: the agents' findings arrive later, in turns the app never reads. ``receive_all``
keeps reading until every background task has ended and a lead turn came after it; if
a result was still not used (the synthesis turn failed, a teammate reported through the
inbox) it sends a resume prompt on the same client, and it ends with ``teamlead.Finished``.

The client's CLI starts with the client's options, so teamlead cannot raise the CLI's
background-wait ceiling afterwards: ``teamlead.ClientRun`` sets it from the policy's
deadline before connecting (with the spawn gate's hook and the request relay), so the
CLI does not stop agents before teamlead gives up on them.

Run it in the repository you want surveyed (it only reads files)::

    ANTHROPIC_API_KEY=sk-ant-... python examples/client_helper.py

Exit code: 0 when every result was used, 3 for a partial answer, 1 when it failed.
"""

from __future__ import annotations

import os
import sys

import anyio
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ResultMessage,
    ToolUseBlock,
)

import teamlead
from teamlead.events import Resuming

PROMPT = (
    "Survey the tests in the current directory. Send one agent to list modules without "
    "tests and another to find slow or flaky tests, both in the background, then merge "
    "what they report into one prioritised list."
)

#: ``Finished.status`` -> exit code, as ``teamlead ask`` uses them.
EXIT_CODES = {"completed": 0, "partial": 3, "failed": 1}

#: teamlead's limits. ``deadline_s`` also becomes the CLI's background-wait ceiling.
POLICY = teamlead.Policy(deadline_s=900, wait_s=60, max_resumes=2)


def app_options() -> ClaudeAgentOptions:
    """The app's own SDK options: read-only tools, plus ``Agent`` so the lead can delegate."""
    return ClaudeAgentOptions(allowed_tools=["Read", "Glob", "Grep", "Agent"], max_turns=40)


async def main(
    options: ClaudeAgentOptions | None = None, prompt: str = PROMPT
) -> teamlead.Finished:
    """Run one client conversation to the end of its background work.

    Args:
        options: SDK options to start from (default :func:`app_options`); tests pass
            options that point the CLI at a scripted model server.
        prompt: what to ask.

    Returns:
        The ``Finished`` event with the final answer, status and reasons.
    """
    finished: teamlead.Finished | None = None
    # the run's state (wait ceiling, spawn gate, request relay) is made before the client
    # connects: a client's options are fixed then
    async with (
        teamlead.ClientRun(options or app_options(), POLICY) as run,
        ClaudeSDKClient(options=run.options) as client,
    ):
        await client.query(prompt)
        # was: async for message in client.receive_response():
        async for item in teamlead.receive_all(client, run):
            if isinstance(item, AssistantMessage) and item.parent_tool_use_id is None:
                for block in item.content:  # the lead's own messages, not its agents'
                    if isinstance(block, ToolUseBlock) and block.name in ("Agent", "Task"):
                        print(f"[lead] delegated: {block.input.get('description')}", flush=True)
            elif isinstance(item, ResultMessage):
                error = item.api_error_status or item.subtype
                outcome = f"error {error}" if item.is_error else "ok"
                print(f"[lead] turn ended ({outcome})", flush=True)
            elif isinstance(item, Resuming):
                unused = len(item.deliveries)
                print(f"[teamlead] resuming with {unused} unused result(s)", flush=True)
            elif isinstance(item, teamlead.Finished):
                finished = item
    if finished is None:  # receive_all always ends with exactly one Finished
        raise RuntimeError("teamlead.receive_all ended without a Finished event")
    print(f"\nstatus: {finished.status} (resumes: {finished.resumes})")
    for reason in finished.reasons:
        print(f"  - {reason}")
    print(f"\n{finished.result or '(no answer)'}")
    return finished


if __name__ == "__main__":
    if not os.environ.get("ANTHROPIC_API_KEY"):
        print("client_helper: set ANTHROPIC_API_KEY to run this example", file=sys.stderr)
        sys.exit(2)
    sys.exit(EXIT_CODES[anyio.run(main).status])
