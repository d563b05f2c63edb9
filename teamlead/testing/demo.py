"""The scripted model behind ``teamlead demo``.

The lead delegates three research agents in one message and has an external teammate
("reviewer") who reports through the team-lead inbox after the lead's stream ended.
Every synthesis turn the CLI injects fails with 529 overloaded, so only teamlead's
resume can produce the final answer, which quotes all four findings.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .replies import AgentCall, Reply, ScriptedRequest, ToolUse
from .scripts import finding_text, subagent_answers, synthesize
from .teammate import create_team, idle_notification, post_to_inbox, team_inbox

__all__ = ["DEMO_FINDINGS", "DEMO_PROMPT", "DemoScript"]

DEMO_PROMPT = (
    "Assess whether our service can move from REST polling to webhooks: check the current "
    "API surface, the security implications, and the load profile, then recommend."
)

_AGENTS = [
    AgentCall(
        "api-surface",
        "SCAN-API: list every polling endpoint and its callers.",
        subagent_type="explorer",
        model="haiku",
    ),
    AgentCall(
        "security",
        "AUDIT-SEC: review webhook signing, replay and secret rotation.",
        subagent_type="security-auditor",
    ),
    AgentCall(
        "load-profile",
        "MEASURE-LOAD: estimate request volume before and after.",
        subagent_type="researcher",
    ),
]


_GLOB = ToolUse("Glob", {"pattern": "**/*.py"})
#: Each agent's first tool call (read-only; the CLI really runs it in the demo's empty
#: project), so the live view's "last tool" column shows what the agents are doing.
_FIRST_LOOK = {
    "api-surface": _GLOB,
    "security": ToolUse("Grep", {"pattern": "signature|hmac", "path": "."}),
    "load-profile": ToolUse("Grep", {"pattern": "requests_per_second", "path": "."}),
}

#: Every finding the demo's final answer should quote: three agents and the teammate.
DEMO_FINDINGS = ("api-surface", "security", "load-profile", "reviewer")


@dataclass
class DemoScript:
    """The demo's scripted model. ``config_dir`` is where the CLI keeps its teams."""

    config_dir: Path
    teammate_delay_s: float = 2.0
    delays: dict[str, float] = field(
        default_factory=lambda: {"api-surface": 1.0, "security": 2.0, "load-profile": 1.5}
    )
    stream_ended: threading.Event = field(default_factory=threading.Event)
    _team: str | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent":
            if not req.tool_uses_sent:  # look around first, as a real agent would
                return Reply.tools(_FIRST_LOOK.get(req.agent_description or "", _GLOB))
            return subagent_answers(self.delays)(req)
        if req.role == "other":
            return Reply.text("Webhook migration assessment")
        if not req.tool_uses_sent:
            self._start_teammate(req.session_id or "")
            return Reply.agents(
                *_AGENTS,
                text=(
                    "I'll split this: three independent investigations in parallel, "
                    "and the reviewer is already on the rollout plan."
                ),
            )
        last = req.last_user_text
        if "<teamlead-results" in last:
            reply = synthesize(req)
            return Reply.text(
                "Recommendation: move to webhooks behind a feature flag.\n\n"
                + reply.content
                + "\nEvery finding above came from a delegated agent or teammate."
            )
        if "<task-notification>" in last:
            return Reply.error(529, should_retry=False)  # the CLI's synthesis turn fails
        return Reply.text("The agents are working; I will synthesize when they report.")

    def _start_teammate(self, session_id: str) -> None:
        with self._lock:
            if self._team is not None or not session_id:
                return
            self._team = create_team(self.config_dir, session_id, members=["reviewer"])
        threading.Thread(target=self._teammate, daemon=True, name="demo-teammate").start()

    def _teammate(self) -> None:
        # The reviewer is a separate process in real life; it reports after the lead's
        # stream has ended, which is exactly the result SDK apps lose.
        self.stream_ended.wait(timeout=120)
        time.sleep(self.teammate_delay_s)
        assert self._team is not None
        post_to_inbox(
            team_inbox(self.config_dir, self._team),
            idle_notification(
                "reviewer",
                summary="rollout plan reviewed",
                result=finding_text("reviewer") + " Roll out per tenant with a 2-week dual-run.",
            ),
        )
