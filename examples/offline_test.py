"""Test your own SDK app offline: the real Claude Code CLI against a scripted model.

``teamlead.testing`` gives you two pieces:

- ``ScriptedServer`` speaks the streaming Messages API on 127.0.0.1 and answers from a
  script (any ``(ScriptedRequest) -> Reply`` callable). ``FanOut`` is a ready-made one:
  the lead sends N ``Agent`` calls in one message, each subagent answers with a
  recognisable ``FINDING[agent-N]`` after a delay, and the lead synthesizes every
  finding it has seen.
- ``OfflineClaude`` builds ``ClaudeAgentOptions`` that run the CLI bundled with
  ``claude_agent_sdk`` against that server, with all Claude state in a temp dir.
  It refuses any base URL that is not loopback, so a test can never reach the real API.

Nothing is mocked: your app, the SDK and the CLI all run for real, only the model is
scripted. Copy this file into your tests and replace ``answer`` with your app's entry
point. Run it with::

    pytest examples/offline_test.py
"""

from __future__ import annotations

from pathlib import Path

import anyio
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage

import teamlead
from teamlead.testing import OfflineClaude, Reply, ScriptedServer
from teamlead.testing.scripts import FanOut, findings_in


# -- the app under test ---------------------------------------------------------------------
async def answer(question: str, options: ClaudeAgentOptions) -> str:
    """A tiny SDK app: ask the lead (who may delegate) and return its final answer.

    An ordinary ``claude_agent_sdk.query`` app, with ``teamlead.query`` in its place: the
    last ``ResultMessage`` is the answer that used every agent's result.
    """
    last = ""
    async for message in teamlead.query(prompt=question, options=options):
        if isinstance(message, ResultMessage):
            last = message.result or ""
    return last


# -- its test ----------------------------------------------------------------------------------
def test_app_uses_every_finding(tmp_path: Path) -> None:
    """Three agents report; the app's answer must quote all three findings.

    The script makes every synthesis turn the CLI injects after an agent finishes fail
    with 529 overloaded. An app that reads the last result of the stream would then
    answer without the findings; this one must still use them all.
    """
    script = FanOut.of(3, delays=[0.2, 0.4, 0.6], synthesis_fault=Reply.error(529))
    with (
        ScriptedServer(script) as server,
        OfflineClaude(server.base_url, state_dir=tmp_path / "claude") as claude,
    ):
        text = anyio.run(answer, "Investigate the three parts.", claude.options())

    assert sorted(findings_in(text)) == ["agent-1", "agent-2", "agent-3"]
    # the lead really delegated: one request per subagent reached the scripted model
    served = {r.request.agent_description for r in server.recorded("subagent")}
    assert served == {"agent-1", "agent-2", "agent-3"}
