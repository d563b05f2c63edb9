"""Static ceilings: per model (name or glob), per provider, a default and a global cap, from
the policy, the CLI options and their ``TEAMLEAD_*`` variables; unset means no limit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import click
import httpx2
import pytest
from click.testing import CliRunner

from teamlead._cli import main
from teamlead._cli.ask import ask
from teamlead._cli.options import limits_from_options
from teamlead._cli.relay import relay
from teamlead._relay.shared import governor_policy
from teamlead.errors import GovernorCleared, SetupError
from teamlead.governor import Governor, GovernorPolicy
from teamlead.policy import LimitsPolicy
from teamlead.testing import FakeClock, Reply, ScriptedServer

from .governors import HAIKU, OPUS
from .polling import settle

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("models", "key", "ceiling"),
    [
        ({}, OPUS, 8),
        ({"claude-opus-5-5": 2}, OPUS, 2),
        ({"claude-haiku-*": 5}, HAIKU, 5),
        ({"claude-haiku-*": 5, "claude-*": 3}, HAIKU, 3),  # the lowest matching pattern
        ({"claude-haiku-5": 6, "claude-*": 3}, HAIKU, 6),  # a name before any pattern
        ({"claude-haiku-*": 5}, OPUS, 8),
    ],
)
def test_a_model_s_ceiling_is_its_own_else_the_default(
    models: dict[str, int], key: str, ceiling: int
) -> None:
    assert GovernorPolicy(ceiling=8, model_ceilings=models).ceiling_for(key) == ceiling


def test_unset_limits_leave_the_relay_learning_from_32_with_no_cap() -> None:
    policy = governor_policy(LimitsPolicy())
    assert (policy.ceiling, policy.model_ceilings, policy.provider_ceilings) == (32, {}, {})
    assert policy.max_total is None


@pytest.mark.anyio
async def test_the_learnt_limit_never_rises_above_a_model_s_ceiling() -> None:
    gov = Governor(governor_policy(LimitsPolicy(models={"claude-opus-5-5": 2})), clock=FakeClock())
    held = [await gov.acquire(OPUS) for _ in range(2)]
    assert gov.state(OPUS).effective == 2

    async def queue() -> None:
        with pytest.raises(GovernorCleared):
            await gov.acquire(OPUS)

    async with anyio.create_task_group() as tg:
        tg.start_soon(queue)  # one queues on the ceiling
        await settle()
        for _ in range(20):
            held[0].success()
        assert gov.state(OPUS).cap == 2
        gov.clear()
    for slot in held:
        slot.release()


@pytest.mark.anyio
async def test_a_provider_ceiling_bounds_all_its_models_together() -> None:
    gov = Governor(governor_policy(LimitsPolicy(providers={"anthropic": 3})), clock=FakeClock())
    held = [await gov.acquire(OPUS) for _ in range(2)] + [await gov.acquire(HAIKU)]
    with pytest.raises(TimeoutError):
        await gov.acquire(HAIKU, timeout=0)
    assert (await gov.acquire("other/model", timeout=0)).key == "other/model"
    held[0].release()
    granted = await gov.acquire(HAIKU, timeout=0)
    for slot in [*held[1:], granted]:
        slot.release()


@pytest.mark.anyio
async def test_the_total_limit_is_the_governor_s_global_cap() -> None:
    policy = governor_policy(LimitsPolicy(total=2, default=5))
    assert (policy.max_total, policy.ceiling_for(OPUS)) == (2, 5)
    gov = Governor(policy, clock=FakeClock())
    held = [await gov.acquire(OPUS), await gov.acquire(HAIKU)]
    with pytest.raises(TimeoutError):
        await gov.acquire("other/model", timeout=0)
    for slot in held:
        slot.release()


def test_limits_options_read_name_equals_number_pairs() -> None:
    limits = limits_from_options(
        "process", ("claude-opus-5-5=3", "claude-haiku-*=5,x=1"), ("anthropic=10",), 4, 9
    )
    assert limits == LimitsPolicy(
        models={"claude-opus-5-5": 3, "claude-haiku-*": 5, "x": 1},
        providers={"anthropic": 10},
        default=4,
        total=9,
        shared="process",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model-limit", "opus"], "--model-limit takes NAME=N"),
        (["--model-limit", "opus=0"], "the limit must be 1..10000"),
        (["--provider-limit", "=3"], "--provider-limit takes NAME=N"),
        (["--limits", "memcached://x"], "--limits must be"),
        (["--total-limit", "0"], "--total-limit"),
    ],
)
def test_bad_limits_options_are_one_line_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["ask", "hi", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [ask, relay])
def test_limits_options_read_their_teamlead_variables(
    command: click.Command, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAMLEAD_MODEL_LIMIT", "claude-opus-5-5=3 claude-haiku-*=5")
    monkeypatch.setenv("TEAMLEAD_PROVIDER_LIMIT", "anthropic=6")
    monkeypatch.setenv("TEAMLEAD_DEFAULT_LIMIT", "4")
    monkeypatch.setenv("TEAMLEAD_TOTAL_LIMIT", "7")
    monkeypatch.setenv("TEAMLEAD_LIMITS", "process")
    parent = click.Context(main, info_name="teamlead", **main.context_settings)
    ctx = command.make_context(command.name, ["hi"] if command is ask else [], parent=parent)
    names = ("limits_shared", "model_limit", "provider_limit", "default_limit", "total_limit")
    limits = limits_from_options(**{name: ctx.params[name] for name in names})
    assert limits == LimitsPolicy(
        models={"claude-opus-5-5": 3, "claude-haiku-*": 5},
        providers={"anthropic": 6},
        default=4,
        total=7,
        shared="process",
    )


def test_the_scripted_server_refuses_a_bad_header_timing() -> None:
    with pytest.raises(SetupError, match="headers_after"):
        ScriptedServer(lambda req: Reply.text("x"), headers_after=-1)


# -- teamlead relay, without the Claude CLI ----------------------------------------------------


@pytest.mark.slow  # a fresh interpreter or child process: seconds
@pytest.mark.parametrize("variable", ["TEAMLEAD_PORT", "TEAMLEAD_RELAY_PORT"])
def test_teamlead_relay_prints_its_url_first_forwards_and_closes_on_sigterm(
    tmp_path: Path, variable: str
) -> None:
    """``--port`` (one name with ``view``'s) keeps the relay's port; ``--relay-port``, its
    old name, is still read, with a one-line warning."""
    with socket.socket() as probe:  # a port free a moment ago: the relay is told to take it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with ScriptedServer(lambda req: Reply.text("relayed", delay=0)) as server:
        env = {
            **os.environ,
            "XDG_CACHE_HOME": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            variable: str(port),  # every option also reads its variable
        }
        relay = subprocess.Popen(
            [sys.executable, "-m", "teamlead", "relay", "--upstream", server.base_url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert relay.stdout is not None
            name, _, base_url = relay.stdout.readline().strip().partition("=")
            assert name == "ANTHROPIC_BASE_URL"
            assert base_url.startswith(f"http://127.0.0.1:{port}/")
            reply = httpx2.post(
                f"{base_url}/v1/messages",
                json={
                    "model": "claude-opus-5-5",
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": "hi"}],
                },
                headers={"x-api-key": "test"},
                timeout=30,
            )
            assert reply.status_code == 200 and "relayed" in reply.text
            relay.send_signal(signal.SIGTERM)
            _, err = relay.communicate(timeout=30)
        finally:
            if relay.poll() is None:
                relay.kill()
                relay.communicate(timeout=30)
    assert relay.returncode == 0, err
    renamed = ["teamlead: warning: --relay-port is now --port"]
    assert [line for line in err.splitlines() if "warning" in line] == (
        renamed if variable == "TEAMLEAD_RELAY_PORT" else []
    )
    assert len(server.recorded()) == 1
    assert (tmp_path / "teamlead" / "limits.sqlite3").is_file()  # it shares the store
    with pytest.raises(httpx2.TransportError):
        httpx2.get(base_url, timeout=2)


def test_teamlead_relay_refuses_an_upstream_it_cannot_relay() -> None:
    result = CliRunner().invoke(main, ["relay", "--upstream", "ftp://example.invalid"])
    assert result.exit_code == 2
    assert "not an http(s) URL" in result.output


def test_teamlead_relay_names_the_flag_or_the_variable_that_gave_a_bad_upstream() -> None:
    flag = CliRunner().invoke(
        main, ["relay", "--upstream", "ftp://x"], env={"ANTHROPIC_BASE_URL": ""}
    )
    assert flag.exit_code == 2
    assert flag.output.startswith("teamlead: error: --upstream 'ftp://x' is not an http(s) URL")
    assert "ANTHROPIC_BASE_URL" not in flag.output and len(flag.output.splitlines()) == 1
    variable = CliRunner().invoke(main, ["relay"], env={"ANTHROPIC_BASE_URL": "ftp://y"})
    assert variable.exit_code == 2
    assert variable.output.startswith(
        "teamlead: error: ANTHROPIC_BASE_URL 'ftp://y' is not an http(s) URL"
    )


@pytest.mark.anyio
async def test_the_live_relay_line_counts_requests_and_shows_models_as_plain_text() -> None:
    from teamlead._cli.relay import _status
    from teamlead._relay import RELAY_POLICY, start_relay

    with ScriptedServer(lambda req: Reply.text("ok")) as server:
        async with (
            start_relay(server.base_url, Governor(RELAY_POLICY)) as running,
            httpx2.AsyncClient(timeout=30) as http,
        ):
            for model in ("claude-opus-5-5", "evil\x1b[2J"):
                body = {
                    "model": model,
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": "hi"}],
                }
                reply = await http.post(f"{running.base_url}/v1/messages", json=body)
                assert reply.status_code == 200
            line = _status(running)
    assert line.startswith("teamlead relay: 2 requests, 0 429s held, 0 passed on; ")
    assert "claude-opus-5-5: limit 32, 0 running (0 on the account), 0 waiting" in line
    assert "\x1b" not in line and "evil\\x1b[2J" in line
