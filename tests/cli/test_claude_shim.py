"""``teamlead-claude`` in an SDK app's CLI path: unmodified apps get the answer that used
every agent's result.

Each app breaks at its first ``result``, as claude-code-action did: on the bare CLI that is
the lead's dispatch turn (0 of 3 findings); through ``teamlead-claude`` it is the one final
answer. The Python SDK names the command with ``cli_path``, the official TypeScript SDK
(``tests/sdk_ts``, installed by ``npm ci --omit=optional``) with
``pathToClaudeCodeExecutable``. The app's own hooks and ``can_use_tool`` still run, and a
stop signal stops the command and its CLI.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    PermissionResultAllow,
    ResultMessage,
    StreamEvent,
    TaskStartedMessage,
    create_sdk_mcp_server,
    query,
    tool,
)

from teamlead._claude.binary import bundled_cli_path
from teamlead.testing import OfflineClaude, Reply, ScriptedRequest, ToolUse
from teamlead.testing.scripts import FanOut, bash, findings_in

from ..isolated import run_to_the_end, warm_idle
from ..polling import poll
from .conftest import (
    TEAMLEAD,
    OfflineFactory,
    cli_processes,
    shim_asked,
    shim_with_agents_running,
    warm_processes,
)

pytestmark = [pytest.mark.cli, pytest.mark.slow]

#: The command as the package installs it, next to this interpreter.
SHIM = Path(sys.executable).with_name("teamlead-claude")
SDK_TS = Path(__file__).resolve().parents[1] / "sdk_ts"
ALL_THREE = ["agent-1", "agent-2", "agent-3"]


def _all_ended(state_dir: Path) -> bool:
    """The command and every CLI it started end soon after the app's last read."""
    return poll(lambda: not cli_processes(state_dir), within_s=20) is not None


def _fan_out() -> FanOut:
    return FanOut.of(3, delays=[1, 2, 3])


async def _first_result(prompt: Any, options: ClaudeAgentOptions) -> str | None:
    """The app: read until the first ``ResultMessage``, and take its text."""
    with anyio.fail_after(60):
        async for message in query(prompt=prompt, options=options):
            if isinstance(message, ResultMessage):
                return message.result
    return None


def test_a_python_app_reading_to_its_first_result_gets_every_finding(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(_fan_out())
    bare = anyio.run(_first_result, "Investigate.", claude.options(cli_path=bundled_cli_path()))
    assert findings_in(bare or "") == []  # the dispatch turn: 0 of 3

    answer = anyio.run(_first_result, "Investigate.", claude.options(cli_path=SHIM))

    assert sorted(findings_in(answer or "")) == ALL_THREE
    assert _all_ended(claude.state_dir)


def test_the_spawn_gate_holds_the_apps_agents_to_the_policy(offline: OfflineFactory) -> None:
    server, claude = offline(FanOut.of(3, delays=[1, 1, 1]))
    env = {**claude.env, "TEAMLEAD_MAX_CONCURRENT_AGENTS": "1"}  # the policy, as a variable

    answer = anyio.run(_first_result, "Investigate.", claude.options(cli_path=SHIM, env=env))

    assert sorted(findings_in(answer or "")) == ALL_THREE
    assert server.max_concurrent_agents() == 1  # the gate let one agent run at a time
    assert _all_ended(claude.state_dir)


def test_the_relay_absorbs_the_429s_the_apps_cli_would_lose(offline: OfflineFactory) -> None:
    # one subagent stream at a time upstream; the CLI itself does not retry (max_retries 0)
    server, claude = offline(
        FanOut.of(3, delays=[1, 1, 1]), concurrency_limit=1, retry_after=1, limit_roles={"subagent"}
    )

    answer = anyio.run(_first_result, "Investigate.", claude.options(cli_path=SHIM))

    assert sorted(findings_in(answer or "")) == ALL_THREE
    assert any(r.status == 429 for r in server.recorded("subagent"))
    assert _all_ended(claude.state_dir)


def test_the_apps_own_mcp_tool_serves_its_cli(offline: OfflineFactory) -> None:
    fan_out = _fan_out()

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "lead" and not req.tool_uses_sent:  # the app's in-process tool first
            return Reply.tools(ToolUse("mcp__facts__lookup", {"key": "scope"}))
        return fan_out(req)

    server, claude = offline(script)
    looked_up: list[str] = []

    @tool("lookup", "Look a fact up", {"key": str})
    async def lookup(args: dict[str, Any]) -> dict[str, Any]:
        looked_up.append(args["key"])
        return {"content": [{"type": "text", "text": "FACT: the scope is the auth module"}]}

    facts = create_sdk_mcp_server("facts", tools=[lookup])
    options = claude.options(cli_path=SHIM, mcp_servers={"facts": facts})
    answer = anyio.run(_first_result, "Investigate.", options)

    assert sorted(findings_in(answer or "")) == ALL_THREE
    assert looked_up == ["scope"]
    lead_saw = [r.request.all_text for r in server.recorded("lead")]
    assert any("FACT: the scope is the auth module" in text for text in lead_saw)
    assert _all_ended(claude.state_dir)


def test_a_failed_synthesis_is_resumed_in_a_new_cli_and_the_app_reads_one_answer(
    offline: OfflineFactory,
) -> None:
    server, claude = offline(FanOut.of(3, delays=[1, 2, 3], synthesis_fault=Reply.error(529)))
    results: list[str | None] = []

    async def app() -> None:  # every message to the end, not only the first result
        options = claude.options(cli_path=SHIM)
        with anyio.fail_after(60):
            async for message in query(prompt="Investigate.", options=options):
                if isinstance(message, ResultMessage):
                    results.append(message.result)

    anyio.run(app)

    assert len(results) == 1
    assert sorted(findings_in(results[0] or "")) == ALL_THREE
    resumed = [
        r for r in server.recorded("lead") if "<teamlead-results" in r.request.last_user_text
    ]
    assert len(resumed) == 1  # the lead was resumed once, in a CLI of its own
    assert _all_ended(claude.state_dir)


def test_a_claude_path_pointing_nowhere_is_one_line_and_a_cli_failure(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    server, claude = offline(_fan_out())
    nowhere = tmp_path / "no-such-claude"
    said: list[str] = []
    options = claude.options(
        cli_path=SHIM, env={**claude.env, "TEAMLEAD_CLAUDE_PATH": str(nowhere)}, stderr=said.append
    )

    with pytest.raises(Exception) as failed:
        anyio.run(_first_result, "Investigate.", options)

    assert "exit code 1" in str(failed.value)
    assert said == [
        f"teamlead-claude: the Claude Code CLI {str(nowhere)!r} does not exist "
        "(TEAMLEAD_CLAUDE_PATH)"
    ]
    assert server.recorded("lead") == []


def _noted_session(
    offline: OfflineFactory, tmp_path: Path, **env: str
) -> tuple[OfflineClaude, ClaudeAgentOptions, Path, list[str]]:
    """The offline CLI's set-up, and an app's options for a session through the shim on a
    CLI that notes its starts (:func:`_noting_cli`) with ``env`` added; the file of
    starts, and what the app's stderr callback is given."""
    _, claude = offline(lambda request: Reply.text("Hello."))
    cli, starts = _noting_cli(tmp_path)
    said: list[str] = []
    env = {**claude.env, **env, "TEAMLEAD_CLAUDE_PATH": str(cli)}
    return claude, claude.options(cli_path=SHIM, env=env, stderr=said.append), starts, said


def _refusing_url() -> str:
    """An ``http`` URL on this machine where nothing listens: connections are refused."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{closed.getsockname()[1]}"


def _noting_cli(tmp_path: Path) -> tuple[Path, Path]:
    """A Claude Code CLI that notes each start (its pid and ``ANTHROPIC_BASE_URL``) in a
    file, then runs as the bundled one; the command and the file."""
    starts = tmp_path / "starts"
    cli = tmp_path / "claude"
    cli.write_text(
        "#!/bin/sh\n"
        f'echo "$$ $ANTHROPIC_BASE_URL" >> {shlex.quote(str(starts))}\n'
        f'exec {shlex.quote(str(bundled_cli_path()))} "$@"\n'
    )
    cli.chmod(0o755)
    return cli, starts


def test_the_cli_started_before_the_run_is_set_up_is_the_one_that_answers(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    # the first CLI starts on the relay address drawn ahead for the run, while the run sets
    # itself up; the first round takes it: no second CLI, and its requests are the run's
    server, claude = offline(lambda request: Reply.text("Hello."))
    cli, starts = _noting_cli(tmp_path)
    env = {**claude.env, "TEAMLEAD_CLAUDE_PATH": str(cli)}

    assert (
        anyio.run(_first_result, "Say hello.", claude.options(cli_path=SHIM, env=env)) == "Hello."
    )

    [start] = starts.read_text().splitlines()
    _pid, base_url = start.split()
    assert base_url.startswith("http://127.0.0.1:") and "/run-" in base_url  # the relay's
    assert len(server.recorded("lead")) == 1
    assert _all_ended(claude.state_dir)


def test_a_cli_started_for_a_run_that_cannot_start_is_stopped(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    # the upstream refuses connections: the run ends in one line before its first round,
    # and the CLI started for it meanwhile is stopped and reaped, not left running
    claude, options, starts, said = _noted_session(
        offline, tmp_path, ANTHROPIC_BASE_URL=_refusing_url()
    )

    with pytest.raises(Exception, match="exit code 1"):
        anyio.run(_first_result, "Say hello.", options)

    assert len(said) == 1 and "connection refused" in said[0], said
    [start] = starts.read_text().splitlines()  # started before the run found out
    pid = int(start.split()[0])
    assert not psutil.pid_exists(pid)  # reaped before the command exited
    assert _all_ended(claude.state_dir)


def test_a_cli_started_ahead_for_a_relay_that_cannot_start_is_stopped_and_the_run_goes_direct(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    # the first CLI starts on the relay address drawn ahead; then the relay cannot start (a
    # proxy variable holds no URL, and the upstream is not in NO_PROXY), so the run goes
    # direct: its first round starts a CLI of its own on the upstream, and the one started
    # ahead is stopped and reaped while the session still runs
    server, claude = offline(lambda request: Reply.text("Hello."))
    cli, starts = _noting_cli(tmp_path)
    env = {**os.environ, **claude.env, "TEAMLEAD_CLAUDE_PATH": str(cli), "WS_PROXY": "http://[x"}
    env.update(NO_PROXY="example.invalid", no_proxy="example.invalid")
    with (tmp_path / "stderr").open("w+") as err:
        shim = shim_asked(SHIM, env, claude.cwd, prompt="Say hello.", stderr=err)
        assert shim.stdout is not None
        result = next(m for m in map(json.loads, shim.stdout) if m.get("type") == "result")
        noted = [line.split() for line in starts.read_text().splitlines()]
        ahead = [int(pid) for pid, url in noted if "/run-" in url]
        assert poll(lambda: not any(psutil.pid_exists(pid) for pid in ahead), within_s=20)
        assert shim.poll() is None  # reaped by the session, which waits for the next turn
        shim.communicate(timeout=30)
        err.seek(0)
        said = err.read()

    assert result["result"] == "Hello."
    assert len(ahead) <= 1  # noted, unless it was stopped before it could note its start
    assert [url for _, url in noted if "/run-" not in url] == [claude.env["ANTHROPIC_BASE_URL"]]
    assert "request relay off, running direct: the proxy setting (" in said, said
    assert len(server.recorded("lead")) == 1
    assert _all_ended(claude.state_dir)


def test_no_cli_is_started_ahead_for_a_run_the_relay_does_not_serve(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    # Bedrock's requests are signed for its own host, so the run goes direct: a CLI started
    # ahead on the relay's address could never be the run's, and none is
    claude, options, starts, said = _noted_session(
        offline,
        tmp_path,
        CLAUDE_CODE_USE_BEDROCK="1",
        CLAUDE_CODE_SKIP_BEDROCK_AUTH="1",
        ANTHROPIC_BEDROCK_BASE_URL=_refusing_url(),  # refused: the CLI fails at once
        CLAUDE_CODE_MAX_RETRIES="0",
    )

    with contextlib.suppress(Exception):  # the CLI cannot reach its Bedrock: its failure
        anyio.run(_first_result, "Say hello.", options)

    assert "request relay off: Bedrock (CLAUDE_CODE_USE_BEDROCK) is not relayed" in said
    runs = starts.read_text().splitlines()
    assert runs and not any("/run-" in line for line in runs), runs  # none on the relay
    assert _all_ended(claude.state_dir)


def test_partial_messages_pass_through_and_spell_the_one_answer(offline: OfflineFactory) -> None:
    server, claude = offline(_fan_out())
    options = claude.options(cli_path=SHIM, include_partial_messages=True)

    async def app() -> tuple[str, str | None]:  # the text streamed last, and the result
        streamed = ""
        with anyio.fail_after(60):
            async for message in query(prompt="Investigate.", options=options):
                if isinstance(message, StreamEvent) and message.parent_tool_use_id is None:
                    event = message.event
                    if event.get("type") == "message_start":
                        streamed = ""
                    delta = event.get("delta") or {}
                    if event.get("type") == "content_block_delta" and "text" in delta:
                        streamed += delta["text"]
                if isinstance(message, ResultMessage):
                    return streamed, message.result
        raise AssertionError("no result")

    streamed, answer = anyio.run(app)

    assert sorted(findings_in(answer or "")) == ALL_THREE
    assert streamed == answer  # the app saw the answer stream in, as from the bare CLI
    assert _all_ended(claude.state_dir)


def test_the_apps_own_hook_and_permission_callback_are_still_called(
    offline: OfflineFactory,
) -> None:
    fan_out = _fan_out()

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "lead" and not req.tool_uses_sent:  # a tool that asks permission first
            return Reply.tools(bash("echo checked | tee checked.txt"))
        return fan_out(req)

    server, claude = offline(script)
    hooked: list[str] = []
    asked: list[str] = []

    async def on_agent(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        hooked.append(data["tool_input"]["description"])
        return {}

    async def can_use_tool(name: str, data: dict[str, Any], context: Any) -> Any:
        asked.append(name)
        return PermissionResultAllow()

    async def prompt() -> AsyncIterator[dict[str, Any]]:  # can_use_tool needs a stream
        yield {"type": "user", "message": {"role": "user", "content": "Investigate."}}

    options = claude.options(
        cli_path=SHIM,
        permission_mode="default",
        can_use_tool=can_use_tool,
        hooks={"PreToolUse": [HookMatcher(matcher="Agent", hooks=[on_agent])]},
    )
    answer = anyio.run(_first_result, prompt(), options)

    assert sorted(findings_in(answer or "")) == ALL_THREE
    assert sorted(hooked) == ALL_THREE
    assert asked == ["Bash"]
    assert (claude.cwd / "checked.txt").read_text() == "checked\n"


def test_a_permission_prompt_left_by_an_app_whose_input_ends_is_refused_as_on_the_bare_cli(
    offline: OfflineFactory,
) -> None:
    # the app asks no more: the bare CLI denies the tool and ends its turn; so does the shim
    def script(req: ScriptedRequest) -> Reply:
        if req.role == "lead" and not req.tool_uses_sent:
            return Reply.tools(bash("echo ran > ran.txt"))
        return Reply.text("Done without it.")

    server, claude = offline(script)
    args = ["--permission-prompt-tool", "stdio", "--permission-mode", "default"]
    shim = shim_asked(SHIM, {**os.environ, **claude.env}, claude.cwd, *args)
    assert shim.stdin is not None and shim.stdout is not None
    asked = next(m for m in map(json.loads, shim.stdout) if m["type"] == "control_request")
    shim.stdin.close()
    shim.stdin = None  # closed: communicate has nothing to write
    try:
        shim.wait(timeout=30)
        rest = list(map(json.loads, shim.stdout))  # what its buffer read ahead too
    finally:
        if shim.poll() is None:
            shim.kill()
        shim.communicate(timeout=10)

    assert asked["request"]["subtype"] == "can_use_tool"
    [result] = [m for m in rest if m["type"] == "result"]
    assert result["result"] == "Done without it."
    assert shim.returncode == 0
    assert not (claude.cwd / "ran.txt").exists()
    assert _all_ended(claude.state_dir)


def test_a_setting_sent_once_the_runs_cli_takes_no_more_input_is_answered(
    offline: OfflineFactory, tmp_path: Path
) -> None:
    # the CLI's input is closed (its turn settled) and it has not ended yet: the setting
    # sent then is answered once the turn is, not left for a next CLI that may never come
    server, claude = offline(FanOut.of(1, delays=[0]))
    ended = tmp_path / "ended"
    cli = tmp_path / "claude"
    cli.write_text(
        "#!/bin/sh\n"
        f'{shlex.quote(str(bundled_cli_path()))} "$@"\n'
        f"touch {shlex.quote(str(ended))}\n"
        "sleep 2\n"  # the round goes on, its CLI's input closed
    )
    cli.chmod(0o755)
    env = {**os.environ, **claude.env, "TEAMLEAD_CLAUDE_PATH": str(cli)}
    shim = shim_asked(SHIM, env, claude.cwd)
    assert shim.stdin is not None and shim.stdout is not None
    try:
        assert poll(ended.exists, within_s=60)
        mode = {"subtype": "set_permission_mode", "mode": "plan"}
        request = {"type": "control_request", "request_id": "req_mode", "request": mode}
        shim.stdin.write(json.dumps(request).encode() + b"\n")
        shim.stdin.flush()
        said = [json.loads(shim.stdout.readline())]
        while said[-1]["type"] != "result":
            said.append(json.loads(shim.stdout.readline()))
        shim.stdin.close()
        shim.stdin = None  # closed: communicate has nothing to write
        shim.wait(timeout=30)
        said += map(json.loads, shim.stdout)  # what its buffer read ahead too
    finally:
        if shim.poll() is None:
            shim.kill()
        shim.communicate(timeout=10)

    answered = [m["response"] for m in said if m["type"] == "control_response"]
    assert answered == [{"subtype": "success", "request_id": "req_mode", "response": {}}]
    assert _all_ended(claude.state_dir)


def test_a_client_app_gets_one_answer_per_turn_on_one_session(offline: OfflineFactory) -> None:
    fan_out = _fan_out()
    next_step = "And the next step?"

    def script(req: ScriptedRequest) -> Reply:
        ran = any(u.get("name") == "Bash" for u in req.tool_uses_sent)
        if req.role == "lead" and req.last_user_text.rstrip().endswith(next_step):
            return Reply.tools(bash("echo planned"))
        if req.role == "lead" and ran:
            return Reply.text("NEXT: fix what the findings show.")
        return fan_out(req)

    server, claude = offline(script)
    answers: list[tuple[str, str | None]] = []
    hooked: list[str] = []

    async def on_bash(data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        hooked.append(data["tool_input"]["command"])
        return {}

    hooks: Any = {"PreToolUse": [HookMatcher(matcher="Bash", hooks=[on_bash])]}
    options = claude.options(cli_path=SHIM, hooks=hooks)

    async def app() -> None:  # a multi-turn ClaudeSDKClient app, unchanged
        with anyio.fail_after(90):
            async with ClaudeSDKClient(options) as client:
                for prompt in ("Investigate.", next_step):
                    await client.query(prompt)
                    async for message in client.receive_response():
                        if isinstance(message, ResultMessage):
                            answers.append((message.session_id, message.result))
                    await client.set_model("claude-haiku-5-5")  # between the turns

    anyio.run(app)

    assert len(answers) == 2
    (first_session, first), (second_session, second) = answers
    assert sorted(findings_in(first or "")) == ALL_THREE
    assert second == "NEXT: fix what the findings show."
    assert second_session == first_session  # the next turn resumed the same session
    assert hooked == ["echo planned"]  # the app's hook served the next turn's CLI too
    last_turn = [r.request for r in server.recorded("lead") if r.request.tool_uses_sent]
    assert last_turn[-1].model == "claude-haiku-5-5"  # the setting reached the next CLI
    assert _all_ended(claude.state_dir)


def test_a_message_sent_before_the_last_is_answered_gets_a_result_of_its_own(
    offline: OfflineFactory,
) -> None:
    fan_out = FanOut.of(1, delays=[1])

    def script(req: ScriptedRequest) -> Reply:
        if req.role == "lead" and "Second." in req.last_user_text:
            return Reply.text("Second answer.")
        return fan_out(req)

    server, claude = offline(script)

    async def app(cli: Path) -> list[str | None]:  # sends both, then reads an answer to each
        answers: list[str | None] = []
        with anyio.fail_after(60):
            async with ClaudeSDKClient(claude.options(cli_path=cli)) as client:
                await client.query("Investigate.")
                await client.query("Second.")
                for _ in range(2):
                    async for message in client.receive_response():
                        if isinstance(message, ResultMessage):
                            answers.append(message.result)
        return answers

    assert len(anyio.run(app, bundled_cli_path())) == 2

    first, second = anyio.run(app, SHIM)

    assert findings_in(first or "") == ["agent-1"]
    assert second == "Second answer."
    assert _all_ended(claude.state_dir)


def test_an_interrupt_ends_the_turn_as_on_the_bare_cli(offline: OfflineFactory) -> None:
    fan_out = FanOut.of(3, delays=[30, 30, 30])

    def script(req: ScriptedRequest) -> Reply:
        after_launch = req.role == "lead" and req.tool_uses_sent
        if after_launch and "<task-notification>" not in req.last_user_text:
            return Reply.text("Dispatched.", delay=30)  # the turn goes on past the interrupt
        return fan_out(req)

    server, claude = offline(script)

    async def app(cli: Path) -> list[str]:  # interrupts once its agents run
        results: list[str] = []
        with anyio.fail_after(60):
            async with ClaudeSDKClient(claude.options(cli_path=cli)) as client:
                await client.query("Investigate.")
                interrupted = False
                async for message in client.receive_response():
                    if isinstance(message, TaskStartedMessage) and not interrupted:
                        interrupted = True
                        await client.interrupt()
                    if isinstance(message, ResultMessage):
                        results.append(message.subtype)
        return results

    assert anyio.run(app, bundled_cli_path()) == ["error_during_execution"]

    assert anyio.run(app, SHIM) == ["error_during_execution"]
    resumed = [
        r for r in server.recorded("lead") if "<teamlead-results" in r.request.last_user_text
    ]
    assert resumed == []  # the run stopped with the turn: the lead was not resumed
    assert _all_ended(claude.state_dir)


def test_a_setting_sent_as_soon_as_a_plain_answer_comes_is_taken(offline: OfflineFactory) -> None:
    # the lead answers at once, so the app has its result while the run still ends (its
    # CLI exiting): the turn is over for the app, and so is it for a setting it sends now
    def script(req: ScriptedRequest) -> Reply:
        return Reply.text("Second answer." if "Second." in req.last_user_text else "First answer.")

    server, claude = offline(script)
    answers: list[str | None] = []

    async def app() -> None:
        with anyio.fail_after(90):
            async with ClaudeSDKClient(claude.options(cli_path=SHIM)) as client:
                for prompt in ("First.", "Second."):
                    await client.query(prompt)
                    async for message in client.receive_response():
                        if isinstance(message, ResultMessage):
                            answers.append(message.result)
                    with anyio.fail_after(10):  # answered, not left for a CLI that is ending
                        await client.set_model("claude-haiku-5-5")

    anyio.run(app)

    assert answers == ["First answer.", "Second answer."]
    turns = [
        r.request.model
        for r in server.recorded()
        if any(p in r.request.last_user_text for p in ("First.", "Second."))
    ]
    assert turns == ["claude-opus-5-5", "claude-haiku-5-5"]  # the setting reached the next CLI
    assert _all_ended(claude.state_dir)


def test_a_setting_sent_during_a_turn_holds_for_the_next_turns(offline: OfflineFactory) -> None:
    # on the bare CLI one process keeps it for the session; here each turn has its own CLI
    def script(req: ScriptedRequest) -> Reply:
        return Reply.text("Second answer." if "Second." in req.last_user_text else "First answer.")

    server, claude = offline(script)

    async def app() -> None:
        with anyio.fail_after(90):
            async with ClaudeSDKClient(claude.options(cli_path=SHIM)) as client:
                await client.query("First.")
                await client.set_model("claude-haiku-5-5")  # while the turn runs
                async for _message in client.receive_response():
                    pass
                await client.query("Second.")
                async for _message in client.receive_response():
                    pass

    anyio.run(app)

    [second] = [r.request for r in server.recorded() if "Second." in r.request.last_user_text]
    assert second.model == "claude-haiku-5-5"
    assert _all_ended(claude.state_dir)


@pytest.mark.parametrize("warm", [warm_idle(300), "0"], ids=["warm", "cold"])
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_stops_the_command_and_its_cli(
    offline: OfflineFactory, stop: signal.Signals, warm: str
) -> None:
    server, claude = offline(FanOut.of(3, delays=[30, 30, 30]))
    env = {**os.environ, **claude.env, "TEAMLEAD_CLAUDE_WARM": warm}
    shim = shim_with_agents_running(SHIM, env, claude.cwd)
    try:
        listed = run_to_the_end([*TEAMLEAD, "ps", "--json"], timeout=60, env=env)
        # the app's turn is a run teamlead ps lists: the command's own, or the one of the
        # warm process's worker that took the command's session
        ((pid, status),) = [(r["pid"], r["status"]) for r in json.loads(listed.stdout)]
        assert status == "running"
        if warm == "0":
            assert pid == shim.pid
        else:
            assert psutil.Process(pid).ppid() in {p.pid for p in warm_processes()}
        shim.send_signal(stop)
        rest, _ = shim.communicate(timeout=30)
    finally:
        if shim.poll() is None:
            shim.kill()
            shim.communicate(timeout=10)
    assert shim.returncode == 128 + stop
    assert b'"type": "result"' not in rest and b'"type":"result"' not in rest
    assert _all_ended(claude.state_dir)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_typescript_app_reading_to_its_first_result_gets_every_finding(
    offline: OfflineFactory,
) -> None:
    if not (SDK_TS / "node_modules" / "@anthropic-ai" / "claude-agent-sdk").is_dir():
        pytest.skip(
            "tests/sdk_ts/node_modules is missing: run "
            "`npm ci --prefix tests/sdk_ts --omit=optional` (as CI does)"
        )
    server, claude = offline(_fan_out())

    def app(cli: Path) -> dict[str, Any]:
        done = subprocess.run(
            ["node", str(SDK_TS / "first-result.mjs"), str(cli), str(claude.cwd)],
            env={**os.environ, **claude.env},
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        printed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return printed

    assert findings_in(app(bundled_cli_path())["result"]) == []

    answer = app(SHIM)

    assert answer["subtype"] == "success"
    assert sorted(findings_in(answer["result"])) == ALL_THREE
    assert _all_ended(claude.state_dir)
