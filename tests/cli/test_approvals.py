"""The approval queue on the real CLI offline, at a real terminal: `teamlead ask` in tmux.

Two subagents of the scripted lead each run a Bash command that needs approval
(``echo X | tee X.txt``, reference: subagents' permissions) at about the same time. The
test reads the prompts from the pane, answers with single keys, and checks what reached
whom: the files the commands wrote, and the tool results the scripted server saw in each
agent's next request. A piped run needs no terminal: it is denied with the one-line reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from teamlead.events import EVENT_VERSION
from teamlead.testing import OfflineClaude, ScriptedServer
from teamlead.testing.replies import AgentCall, Reply, ScriptedRequest, ToolUse
from teamlead.testing.scripts import bash, synthesize
from tests.polling import poll
from tests.tmux import Pane, needs_tmux

from .conftest import TEAMLEAD, ask, cli_processes

pytestmark = [pytest.mark.cli, pytest.mark.slow, needs_tmux, pytest.mark.timeout(240)]

PROMPT = re.compile(r"approve\? \((\d+)/(\d+)\) \[([^\]]*)\] Bash: (.*)")


class BashAgents:
    """The lead sends one Agent call per entry of ``commands`` in one message; each
    subagent runs its commands one per turn, then reports every tool result it got."""

    def __init__(self, commands: Mapping[str, Sequence[str]]) -> None:
        self.commands = commands

    def __call__(self, req: ScriptedRequest) -> Reply:
        if req.role == "subagent":
            assert req.agent is not None
            steps = self.commands[req.agent.description]
            if req.assistant_turns < len(steps):
                return Reply.tools(bash(steps[req.assistant_turns]))
            label = re.sub(r"\W", "", req.agent.description)[:10] or "agent"
            return Reply.text(f"FINDING[{label}]: done.")
        if req.role == "other":
            return Reply.text("ok")
        if not any(u.get("name") == "Agent" for u in req.tool_uses_sent):
            calls = [AgentCall(d, f"RUN: {d}") for d in self.commands]
            return Reply.agents(*calls)
        if "<task-notification>" in req.last_user_text or "<teamlead-results" in req.last_user_text:
            return synthesize(req)
        return Reply.text("Waiting for the agents.")


def tool_results(server: ScriptedServer, description: str) -> str:
    """Every tool result the named subagent's requests carried, as one text."""
    texts = []
    for record in server.recorded("subagent"):
        agent = record.request.agent
        if agent is not None and agent.description == description:
            texts.append(json.dumps(record.request.messages))
    return "\n".join(texts)


def ask_in_pane(pane: Pane, claude: OfflineClaude, *extra: str) -> None:
    env = {**os.environ, **claude.env, "TEAMLEAD_AGENT_TIMEOUT": "120"}
    argv = [*TEAMLEAD, "ask", "Run the commands.", "--permission-mode", "default", *extra]
    pane.start(argv, env=env, cwd=claude.cwd)


def front(pane: Pane, place: str, *, within_s: float = 90) -> tuple[str, str]:
    """Wait for the prompt ``(k/n)`` = ``place``; return its agent and command."""
    screen = pane.wait_for(f"approve? ({place})", within_s=within_s)
    for line in screen.splitlines():
        match = PROMPT.search(line)
        if match and f"{match.group(1)}/{match.group(2)}" == place:
            return match.group(3), match.group(4).strip()
    raise AssertionError(f"no prompt line {place} in:\n{screen}")


def test_two_agents_prompts_show_place_and_agent_and_each_answer_reaches_its_agent(
    tmp_path: Path,
) -> None:
    script = BashAgents(
        {"alpha": ["echo alpha | tee alpha.txt"], "beta": ["echo beta | tee beta.txt"]}
    )
    with ScriptedServer(script) as server, Pane(tmp_path) as pane:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        ask_in_pane(pane, claude)
        first, first_command = front(pane, "1/2")
        second = "beta" if first == "alpha" else "alpha"
        assert first in ("alpha", "beta") and first_command == f"echo {first} | tee {first}.txt"
        pane.send("y")
        agent, command = front(pane, "2/2", within_s=30)
        assert (agent, command) == (second, f"echo {second} | tee {second}.txt")
        pane.send("n")
        assert pane.wait_exit(within_s=120) == 0, pane.screen()
        screen = pane.screen()
        assert (claude.cwd / f"{first}.txt").read_text() == f"{first}\n"
        assert not (claude.cwd / f"{second}.txt").exists()
        # the allowed agent got its command's output, the denied one the denial; not crossed
        assert "denied this tool call at the terminal" in tool_results(server, second)
        assert "denied this tool call" not in tool_results(server, first)
    assert f"allowed Bash for [{first}]" in screen and f"denied Bash for [{second}]" in screen
    assert "SYNTHESIS of 2 findings" in screen


def test_always_stops_later_prompts_for_that_agent_and_tool(tmp_path: Path) -> None:
    script = BashAgents(
        {
            "alpha": ["echo one | tee one.txt", "echo two | tee two.txt"],
            "beta": ["echo three | tee three.txt"],
        }
    )
    with ScriptedServer(script) as server, Pane(tmp_path) as pane:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        ask_in_pane(pane, claude)
        agent, _ = front(pane, "1/2")
        if agent == "beta":  # beta first: allow it once, then alpha's prompt is in front
            pane.send("y")
            agent, _ = front(pane, "2/2", within_s=30)
        assert agent == "alpha"
        pane.send("a")
        # alpha's second command runs with no prompt: its file appears, nobody pressed a key
        assert poll(lambda: (claude.cwd / "two.txt").exists(), within_s=60), pane.screen()
        if not (claude.cwd / "three.txt").exists():  # beta still asks: the a was alpha's only
            pane.wait_for("[beta] Bash: echo three", within_s=30)
            pane.send("y")
        assert pane.wait_exit(within_s=120) == 0, pane.screen()
        alpha_saw = tool_results(server, "alpha")
    assert (claude.cwd / "one.txt").exists() and (claude.cwd / "three.txt").exists()
    assert "denied" not in alpha_saw


def test_a_piped_run_denies_with_the_one_line_reason(tmp_path: Path) -> None:
    script = BashAgents(
        {"alpha": ["echo alpha | tee alpha.txt"], "beta": ["echo beta | tee beta.txt"]}
    )
    with ScriptedServer(script) as server:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        proc = ask(
            claude, "--json", prompt="Run the commands.",
            extra={"TEAMLEAD_AGENT_TIMEOUT": "120"}, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        told = tool_results(server, "alpha")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("teamlead: denied")]
    assert len(lines) == 1, proc.stderr  # one line for the tool, not one per request
    assert "--allowed-tools 'Bash'" in lines[0] and "--permission-mode" in lines[0]
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    decided = [r for r in records if r["type"] == "permission_decided"]
    assert sorted(r["agent"] for r in decided) == ["alpha", "beta"]
    assert {(r["decision"], r["by"], r["version"]) for r in decided} == {
        ("deny", "no_terminal", EVENT_VERSION)
    }
    assert not (claude.cwd / "alpha.txt").exists() and not (claude.cwd / "beta.txt").exists()
    assert "--allowed-tools" in told  # the agent was told how it could be allowed


def test_ctrl_c_at_a_prompt_exits_130_and_leaves_no_process(tmp_path: Path) -> None:
    script = BashAgents(
        {"alpha": ["echo alpha | tee alpha.txt"], "beta": ["echo beta | tee beta.txt"]}
    )
    state = tmp_path / "s"
    with ScriptedServer(script) as server, Pane(tmp_path) as pane:
        claude = OfflineClaude(server.base_url, state_dir=state)
        ask_in_pane(pane, claude)
        pane.wait_for("approve? (1/", within_s=90)
        assert cli_processes(state), "the CLI should be running while the prompt is shown"
        pane.send("C-c", literal=False)
        assert pane.wait_exit(within_s=60) == 130, pane.screen()
        screen = pane.screen()
        modes = pane.terminal_modes()  # cbreak was undone: lines and echo are back
        assert {"icanon", "echo", "isig"} <= modes, modes
        left = poll(lambda: not cli_processes(state), within_s=15)
        assert left, [p.info for p in cli_processes(state)]
    assert "teamlead: interrupted" in screen
    assert not (claude.cwd / "alpha.txt").exists() and not (claude.cwd / "beta.txt").exists()


EVIL = "x\x1b]0;PWNED\x07[bold red]MARKUP[/bold red]\x1b[2J"


def test_hostile_descriptions_and_commands_stay_inert_in_the_pane(tmp_path: Path) -> None:
    # the CLI refuses a command with control characters before it asks, so the command
    # carries markup and the description the escape sequences
    command = "echo '[blink]CMD[/blink]' | tee evil.txt"
    script = BashAgents({EVIL: [command]})
    with ScriptedServer(script) as server, Pane(tmp_path) as pane:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        ask_in_pane(pane, claude)
        screen = pane.wait_for("approve? (1/1)", within_s=90)
        title = pane.title()
        pane.send("n")
        assert pane.wait_exit(within_s=120) == 0, pane.screen()
        del server
    prompt = next(line for line in screen.splitlines() if "approve?" in line)
    # shown as text: the escapes spelled out, the markup's brackets kept
    assert "[x\\x1b]0;PWNED\\x07[bold red]MARKUP[/bold red]" in prompt
    assert prompt.endswith(f"Bash: {command}")
    assert "PWNED" not in title
    assert "teamlead" in screen  # the screen was not cleared by a \x1b[2J


WORKFLOW = (
    "export const meta = { name: 'scan', description: 'scan the parts', "
    "phases: [{ title: 'Scan' }, { title: 'Sum' }] }\n"
    "const r = await agent('WFJOB a', { label: 'wf:a', phase: 'Scan' })\n"
    "return { r }\n"
)


def workflow_with_bash(req: ScriptedRequest) -> Reply:
    """The lead runs a one-agent workflow whose agent runs a Bash command that asks."""
    if "WFJOB a" in req.first_user_text:
        if req.assistant_turns == 0:
            return Reply.tools(bash("echo wf | tee wf.txt"))
        return Reply.text("FINDING[a]: done.")
    if req.role != "lead":
        return Reply.text("ok")
    if req.assistant_turns == 0:
        return Reply.tools(ToolUse(id="toolu_wf_1", name="Workflow", input={"script": WORKFLOW}))
    return synthesize(req)


def test_a_workflow_shows_its_script_and_its_agents_ask_under_their_label(
    tmp_path: Path,
) -> None:
    with ScriptedServer(workflow_with_bash) as server, Pane(tmp_path) as pane:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        ask_in_pane(pane, claude)
        pane.wait_for(
            "approve? (1/1) [lead] Workflow: workflow scan · “scan the parts” · phases Scan → Sum",
            within_s=90,
        )
        pane.send("y")
        pane.wait_for("approve? (1/1) [wf:a] Bash: echo wf | tee wf.txt", within_s=90)
        pane.send("y")
        assert pane.wait_exit(within_s=120) == 0, pane.screen()
        assert {"icanon", "echo"} <= pane.terminal_modes()
        del server
    assert (claude.cwd / "wf.txt").read_text() == "wf\n"


def test_quiet_at_a_terminal_still_asks_with_a_prompt_line(tmp_path: Path) -> None:
    script = BashAgents({"solo": ["echo solo | tee solo.txt"]})
    with ScriptedServer(script) as server, Pane(tmp_path) as pane:
        claude = OfflineClaude(server.base_url, state_dir=tmp_path / "s")
        ask_in_pane(pane, claude, "-q")
        pane.wait_for(
            "teamlead: approve? (1/1) [solo] Bash: echo solo | tee solo.txt  [keys: y allow",
            within_s=90,
        )
        pane.send("y")
        assert pane.wait_exit(within_s=120) == 0, pane.screen()
        del server
    assert (claude.cwd / "solo.txt").read_text() == "solo\n"
