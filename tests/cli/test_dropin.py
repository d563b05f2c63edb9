"""The strict drop-in and the client's run, on the real bundled CLI against the scripted model.

:func:`teamlead.query` yields only the SDK's message types, ends with the answer that used
every agent's result, and raises the SDK's exceptions; a :class:`teamlead.ClientRun`
serves every turn of its client with the same gate and relay. (The SDK's own ``query()``
tests against the drop-in are in ``tests/test_sdk_suite.py``.)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, get_args

import anyio
import pytest
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    CLINotFoundError,
    Message,
    ResultError,
    ResultMessage,
)

import teamlead
from teamlead.events import Finished, SpawnDecided
from teamlead.policy import Policy, SpawnPolicy
from teamlead.testing import AgentCall, Reply, ScriptedRequest, ToolUse
from teamlead.testing.scripts import FanOut, findings_in, subagent_answers, synthesize

from .conftest import OfflineFactory

pytestmark = [pytest.mark.cli, pytest.mark.anyio]


async def _messages(prompt: str, options: ClaudeAgentOptions) -> list[Any]:
    with anyio.fail_after(120):
        return [m async for m in teamlead.query(prompt=prompt, options=options)]


async def test_the_drop_in_yields_the_sdks_messages_and_the_answer_that_used_every_result(
    offline: OfflineFactory,
) -> None:
    # every synthesis turn of the CLI fails (529): only teamlead's resume can answer
    script = FanOut.of(3, delays=[0.2, 0.4, 0.6], synthesis_fault=Reply.error(529))
    server, claude = offline(script)
    messages = await _messages("Investigate three parts.", claude.options())

    sdk_types = get_args(Message)
    assert [m for m in messages if not isinstance(m, sdk_types)] == []
    final = messages[-1]
    assert isinstance(final, ResultMessage) and not final.is_error, final
    assert sorted(findings_in(final.result or "")) == ["agent-1", "agent-2", "agent-3"]
    resumed = [
        r for r in server.recorded("lead") if "<teamlead-results" in r.request.last_user_text
    ]
    assert len(resumed) == 1
    results = [m for m in messages if isinstance(m, ResultMessage)]
    # the final result's cost is the whole run's: the first CLI's and the resumed one's
    assert final.total_cost_usd is not None
    assert final.total_cost_usd > max(r.total_cost_usd or 0.0 for r in results[:-1])


async def test_the_drop_in_raises_the_sdks_error_when_the_cli_is_missing(tmp_path: Path) -> None:
    options = ClaudeAgentOptions(cli_path=str(tmp_path / "no-such-claude"))
    with pytest.raises(CLINotFoundError):
        await _messages("Hello", options)


async def test_the_drop_in_raises_result_error_on_error_max_turns(offline: OfflineFactory) -> None:
    def script(req: ScriptedRequest) -> Reply:  # the lead calls a tool on every turn
        if req.role != "lead":
            return Reply.text("Scripted side reply.")
        return Reply.tools(ToolUse("Glob", {"pattern": "*.md"}))

    server, claude = offline(script)
    options = claude.options(ClaudeAgentOptions(max_turns=1, allowed_tools=["Glob"]))
    messages: list[Any] = []
    with pytest.raises(ResultError) as raised, anyio.fail_after(120):
        async for message in teamlead.query(prompt="Look around.", options=options):
            messages.append(message)
    assert raised.value.data is not None and raised.value.data["subtype"] == "error_max_turns"
    # as the SDK does: the error result first, then the exception
    assert isinstance(messages[-1], ResultMessage) and messages[-1].subtype == "error_max_turns"


def _two_turns(delays: dict[str, float]) -> Any:
    """A lead that sends two Agent calls for each user prompt (``part-1`` and ``part-2``
    for ``Part one.``, ``part-3`` and ``part-4`` for ``Part two.``) and synthesizes every
    finding once a result comes."""
    calls = {
        "Part one.": [AgentCall(f"part-{i}", f"SUBTASK-{i}: report one finding.") for i in (1, 2)],
        "Part two.": [AgentCall(f"part-{i}", f"SUBTASK-{i}: report one finding.") for i in (3, 4)],
    }

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "subagent":
            return subagent_answers(delays)(req)
        if req.role == "other":
            return Reply.text("Scripted side reply.")
        last = req.last_user_text
        if "<task-notification>" in last or "<teamlead-results" in last:
            return synthesize(req)
        asked = [prompt for prompt in calls if prompt in last]  # a user prompt, reminders and all
        if asked:
            return Reply.agents(*calls[asked[0]])
        return Reply.text("Dispatched the agents.")

    return script


async def test_a_client_run_serves_every_turn_with_one_gate_and_relay(
    offline: OfflineFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server, claude = offline(_two_turns({f"part-{i}": 0.3 for i in range(1, 5)}))
    # three agents for the whole run: the second turn's second call is over the budget
    policy = Policy(spawn=SpawnPolicy(spawn_budget=3))
    turns: list[list[Any]] = []
    with caplog.at_level(logging.WARNING, logger="teamlead"), anyio.fail_after(150):
        async with (
            teamlead.ClientRun(claude.options(), policy) as run,
            ClaudeSDKClient(options=run.options) as client,
        ):
            for prompt in ("Part one.", "Part two."):
                await client.query(prompt)
                turns.append([i async for i in teamlead.receive_all(client, run)])
    first, second = turns
    assert [isinstance(t[-1], Finished) for t in turns] == [True, True]
    assert [
        i.description for i in first if isinstance(i, SpawnDecided) and i.outcome == "admitted"
    ] == ["part-1", "part-2"]
    assert [
        i.description for i in second if isinstance(i, SpawnDecided) and i.outcome == "admitted"
    ] == ["part-3"]
    denied = [i for i in second if isinstance(i, SpawnDecided) and i.outcome == "denied"]
    assert [(d.description, d.code) for d in denied] == [("part-4", "spawn_budget")]
    done_first, done_second = first[-1], second[-1]
    assert isinstance(done_first, Finished) and isinstance(done_second, Finished)
    assert done_first.status == "completed", done_first.reasons
    assert sorted(findings_in(done_first.result or "")) == ["part-1", "part-2"]
    assert sorted(findings_in(done_second.result or "")) == ["part-1", "part-2", "part-3"]
    # the second turn's Finished reports the run so far: every turn's agents
    rows = {t.description: t.disposition for t in done_second.tasks}
    assert rows == {
        "part-1": "included",
        "part-2": "included",
        "part-3": "included",
        "part-4": "not_run",
    }
    # both turns' requests went through the run's one relay
    assert done_second.relay.requests > done_first.relay.requests > 0
    assert [r.getMessage() for r in caplog.records] == []


async def test_the_drop_in_leaves_the_clis_stderr_to_the_app(
    offline: OfflineFactory, capfd: pytest.CaptureFixture[str]
) -> None:
    # no stderr callback: the SDK lets the CLI write to the app's own stderr, and so does
    # the drop-in (teamlead.run reads it, for the run's errors)
    server, claude = offline(FanOut.of(1, delays=0.1))
    options = claude.options(ClaudeAgentOptions(extra_args={"debug-to-stderr": None}))
    capfd.readouterr()
    messages = await _messages("Investigate one part.", options)
    assert isinstance(messages[-1], ResultMessage)
    debug = [line for line in capfd.readouterr().err.splitlines() if " [DEBUG] " in line]
    assert debug, "the CLI's --debug-to-stderr lines never reached the app's stderr"
