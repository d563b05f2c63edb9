"""A run's CLI options come from one pure builder, rule by rule, and from nowhere else.

:func:`teamlead._run.options.build_options` turns the user's options, the policy and the
pieces the run's layers computed (a :class:`~teamlead._run.options.Wiring`) into the CLI's
options. The table has one row per rule: what the rule writes, and where it keeps the
user's own value. Then: no input is mutated, a run's options are the builder's, and no
module but the builder copies ``ClaudeAgentOptions`` with a field changed.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, InMemorySessionStore

from teamlead._run.agents import WORKFLOW_CAP_VAR
from teamlead._run.options import (
    MAX_MESSAGE_BYTES,
    RUN_MARK_VAR,
    SUBAGENT_MODEL_VAR,
    Wiring,
    build_options,
    merge_hook,
    round_options,
    with_base_url,
)
from teamlead._run.state import new_run, prepare_options
from teamlead.policy import Policy, SpawnPolicy
from teamlead.testing import FakeClock

PACKAGE = Path(__file__).parent.parent / "teamlead"
CEILING = "CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS"
STATE_EVENTS = "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"
TRACE = {"TRACEPARENT": "00-" + "a" * 32 + "-" + "b" * 16 + "-01", "TRACESTATE": "k=v"}


async def _gate_hook(*_: Any) -> Any:
    return {}


async def _users_hook(*_: Any) -> Any:
    return {}


async def _users_can_use_tool(*_: Any) -> Any:
    return None


GATE = HookMatcher(matcher="Agent|Workflow", hooks=[_gate_hook], timeout=60)
USERS = HookMatcher(matcher="Bash", hooks=[_users_hook])
STORE = InMemorySessionStore()
VIEW = InMemorySessionStore()


def _wrapped(callback: Any) -> Any:
    async def listed(*args: Any) -> Any:
        return await callback(*args)

    listed.wraps = callback  # type: ignore[attr-defined]
    return listed


@dataclass
class Row:
    """One rule: the inputs, and what the built options must show."""

    user: ClaudeAgentOptions = field(default_factory=ClaudeAgentOptions)
    wiring: Wiring = field(default_factory=Wiring)
    policy: Policy = field(default_factory=lambda: Policy(deadline_s=600))
    environ: dict[str, str] = field(default_factory=dict)
    env: dict[str, str | None] = field(default_factory=dict)  # None: not set
    check: Callable[[ClaudeAgentOptions], object] = lambda built: True


ROWS = {
    # 1. the wait ceiling, the session-state events, the largest message
    "the ceiling comes from the deadline": Row(env={CEILING: "600000", STATE_EVENTS: None}),
    "the user's ceiling is kept": Row(
        user=ClaudeAgentOptions(env={CEILING: "5"}), env={CEILING: "5"}
    ),
    "a client reports its session state": Row(wiring=Wiring(client=True), env={STATE_EVENTS: "1"}),
    "a client's own session-state value is kept": Row(
        user=ClaudeAgentOptions(env={STATE_EVENTS: "0"}),
        wiring=Wiring(client=True),
        env={STATE_EVENTS: "0"},
    ),
    "the largest message is 64 MiB": Row(check=lambda b: b.max_buffer_size == MAX_MESSAGE_BYTES),
    "the user's largest message is kept": Row(
        user=ClaudeAgentOptions(max_buffer_size=1000), check=lambda b: b.max_buffer_size == 1000
    ),
    # 2. the admission's hook, after the user's own
    "the gate's hook goes after the user's hooks": Row(
        user=ClaudeAgentOptions(hooks={"PreToolUse": [USERS], "Stop": [USERS]}),
        wiring=Wiring(hook=GATE),
        check=lambda b: b.hooks == {"PreToolUse": [USERS, GATE], "Stop": [USERS]},
    ),
    "the gate's hook is added once": Row(
        user=ClaudeAgentOptions(hooks={"PreToolUse": [GATE]}),
        wiring=Wiring(hook=GATE),
        check=lambda b: b.hooks == {"PreToolUse": [GATE]},
    ),
    "no gate, the user's hooks alone": Row(
        user=ClaudeAgentOptions(hooks={"PreToolUse": [USERS]}),
        check=lambda b: b.hooks == {"PreToolUse": [USERS]},
    ),
    # 3. the workflow engine's cap
    "the workflow cap is the admission's limit": Row(
        wiring=Wiring(workflow_cap=4), env={WORKFLOW_CAP_VAR: "4"}
    ),
    "a lower workflow cap of the user's is kept": Row(
        user=ClaudeAgentOptions(env={WORKFLOW_CAP_VAR: "2"}),
        wiring=Wiring(workflow_cap=4),
        env={WORKFLOW_CAP_VAR: "2"},
    ),
    "a higher workflow cap of the user's is lowered": Row(
        user=ClaudeAgentOptions(env={WORKFLOW_CAP_VAR: "9"}),
        wiring=Wiring(workflow_cap=4),
        env={WORKFLOW_CAP_VAR: "4"},
    ),
    "the process's workflow cap counts when the options set none": Row(
        wiring=Wiring(workflow_cap=4), environ={WORKFLOW_CAP_VAR: "3"}, env={WORKFLOW_CAP_VAR: "3"}
    ),
    "a workflow cap that is no positive number is ignored": Row(
        user=ClaudeAgentOptions(env={WORKFLOW_CAP_VAR: "lots"}),
        wiring=Wiring(workflow_cap=4),
        environ={WORKFLOW_CAP_VAR: "0"},
        env={WORKFLOW_CAP_VAR: "4"},
    ),
    "no gate, no workflow cap": Row(env={WORKFLOW_CAP_VAR: None}),
    # 4. the subagent model
    "the policy's subagent model wins over the user's": Row(
        user=ClaudeAgentOptions(env={SUBAGENT_MODEL_VAR: "opus"}),
        wiring=Wiring(subagent_model="haiku"),
        env={SUBAGENT_MODEL_VAR: "haiku"},
    ),
    "without one, the user's subagent model stays": Row(
        user=ClaudeAgentOptions(env={SUBAGENT_MODEL_VAR: "opus"}), env={SUBAGENT_MODEL_VAR: "opus"}
    ),
    # 5. can_use_tool through the permission list
    "the user's can_use_tool is listed while it waits": Row(
        user=ClaudeAgentOptions(can_use_tool=_users_can_use_tool),
        wiring=Wiring(permissions=_wrapped),
        check=lambda b: getattr(b.can_use_tool, "wraps", None) is _users_can_use_tool,
    ),
    "no can_use_tool, nothing to list": Row(
        wiring=Wiring(permissions=_wrapped), check=lambda b: b.can_use_tool is None
    ),
    # 6. the session store
    "the store is mirrored through the run's view, eagerly": Row(
        user=ClaudeAgentOptions(session_store=STORE),
        wiring=Wiring(store_view=VIEW),
        check=lambda b: b.session_store is VIEW and b.session_store_flush == "eager",
    ),
    "a store the run gave up is dropped": Row(
        user=ClaudeAgentOptions(session_store=STORE),
        wiring=Wiring(store_off=True),
        check=lambda b: b.session_store is None,
    ),
    "without a view, the user's store is theirs": Row(
        user=ClaudeAgentOptions(session_store=STORE), check=lambda b: b.session_store is STORE
    ),
    # 7. the relay
    "the relay's base URL replaces the user's": Row(
        user=ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": "https://up.example"}),
        wiring=Wiring(relay_base_url="http://127.0.0.1:9"),
        env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"},
    ),
    "going direct, the user's base URL stays": Row(
        user=ClaudeAgentOptions(env={"ANTHROPIC_BASE_URL": "https://up.example"}),
        env={"ANTHROPIC_BASE_URL": "https://up.example"},
    ),
    # 8. the trace context
    "the CLI gets the run's span": Row(wiring=Wiring(trace_env=TRACE), env=dict(TRACE)),
    "the user's TRACEPARENT is kept, with no TRACESTATE of ours": Row(
        user=ClaudeAgentOptions(env={"TRACEPARENT": "mine"}),
        wiring=Wiring(trace_env=TRACE),
        env={"TRACEPARENT": "mine", "TRACESTATE": None},
    ),
    # 9. the run mark and the stderr tail
    "the run's CLI processes carry its mark": Row(
        wiring=Wiring(run_mark="m1"), env={RUN_MARK_VAR: "m1"}
    ),
    "outside a run, no mark and the user's stderr": Row(
        user=ClaudeAgentOptions(stderr=print),
        env={RUN_MARK_VAR: None},
        check=lambda b: b.stderr is print,
    ),
}


@pytest.mark.parametrize("row", list(ROWS.values()), ids=list(ROWS))
def test_each_rule_of_the_builder(row: Row) -> None:
    built = build_options(row.user, row.policy, row.wiring, environ=row.environ)
    for name, value in row.env.items():
        assert built.env.get(name) == value, name
    assert row.check(built)


def test_the_cli_stderr_goes_to_the_runs_tail_then_to_the_users() -> None:
    seen: list[str] = []
    user = ClaudeAgentOptions(stderr=lambda line: seen.append(f"user {line}"))
    built = build_options(user, Policy(), Wiring(stderr=lambda line: seen.append(f"run {line}")))
    assert built.stderr is not None
    built.stderr("boom")
    assert seen == ["run boom", "user boom"]


def test_no_input_is_mutated() -> None:
    user = ClaudeAgentOptions(
        env={WORKFLOW_CAP_VAR: "9", "ANTHROPIC_BASE_URL": "https://up.example"},
        hooks={"PreToolUse": [USERS]},
        can_use_tool=_users_can_use_tool,
        session_store=STORE,
    )
    wiring = Wiring(
        client=True,
        hook=GATE,
        workflow_cap=4,
        subagent_model="haiku",
        permissions=_wrapped,
        store_view=VIEW,
        relay_base_url="http://127.0.0.1:9",
        trace_env=dict(TRACE),
        run_mark="m1",
        stderr=print,
    )
    environ = {WORKFLOW_CAP_VAR: "3"}
    before = (copy.copy(user), dict(user.env), dict(user.hooks or {}), dict(environ))
    built = build_options(user, Policy(), wiring, environ=environ)
    assert (user, dict(user.env), dict(user.hooks or {}), environ) == before
    assert user.hooks == {"PreToolUse": [USERS]} and user.session_store is STORE
    assert built is not user and built.env is not user.env
    assert built.env[WORKFLOW_CAP_VAR] == "4"  # the options' own 9 over the process's, lowered


def test_nothing_wired_is_prepare_options() -> None:
    user = ClaudeAgentOptions(model="sonnet", env={"X": "1"}, stderr=print, session_store=STORE)
    built = build_options(user, Policy(deadline_s=60))
    assert built == prepare_options(user, Policy(deadline_s=60))
    assert built.env == {"X": "1", CEILING: "60000"}
    assert (built.model, built.stderr, built.session_store) == ("sonnet", print, STORE)


def test_a_rounds_options_and_a_clients_through_the_relay() -> None:
    run = build_options(ClaudeAgentOptions(tools=["Read"]), Policy(), Wiring(run_mark="m1"))
    resumed = round_options(run, "s1")
    assert (resumed.resume, resumed.tools, resumed.env) == ("s1", ["Read"], run.env)
    wrap = round_options(run, "s1", tools_off=True)
    assert (wrap.resume, wrap.tools) == ("s1", [])
    assert run.resume is None
    user = ClaudeAgentOptions(env={"X": "1"})
    assert with_base_url(user, None) is user
    assert with_base_url(user, "http://127.0.0.1:9").env == {
        "X": "1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
    }
    assert merge_hook(merge_hook(user, GATE), GATE).hooks == {"PreToolUse": [GATE]}


def test_a_runs_options_are_the_builders_and_built_again_with_each_piece() -> None:
    user = ClaudeAgentOptions(
        env={WORKFLOW_CAP_VAR: "9"}, can_use_tool=_users_can_use_tool, session_store=STORE
    )
    policy = Policy(
        deadline_s=300, spawn=SpawnPolicy(max_concurrent_agents=3, subagent_model="haiku")
    )
    state = new_run("query", user, policy, FakeClock())
    try:
        assert state.ask.user_options is user and user.env == {WORKFLOW_CAP_VAR: "9"}
        again = build_options(user, policy, state.ask.wiring)  # the same, but for new callbacks
        assert (again.env, again.hooks) == (state.ask.options.env, state.ask.options.hooks)
        env = state.ask.options.env
        assert env[WORKFLOW_CAP_VAR] == "3" and env[SUBAGENT_MODEL_VAR] == "haiku"
        assert env[RUN_MARK_VAR] == state.ask.mark and env[CEILING] == "300000"
        assert state.ask.options.hooks and state.ask.options.session_store is not STORE
        assert (
            state.ask.store is not None and state.ask.options.session_store is state.ask.store.view
        )
        state.ask.wire(relay_base_url="http://127.0.0.1:9", trace_env=TRACE)
        assert state.ask.options.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
        assert state.ask.options.env["TRACEPARENT"] == TRACE["TRACEPARENT"]
        assert state.ask.options.env[RUN_MARK_VAR] == state.ask.mark  # every piece is still in
        state.ask.wire(store_view=None, store_off=True)
        assert state.ask.options.session_store is None
    finally:
        state.close()


# -- nobody else writes the options -----------------------------------------------------------
#: The one module that copies a ClaudeAgentOptions with a field changed.
BUILDER = "_run/options.py"
#: Modules that build the *user's* options, the builder's input, never a run's:
USERS_OPTIONS = {
    "prompts.py": "apply_strategy: a public helper the user calls on their own options",
    "_run/workflow_permission.py": "allow_workflows: a public helper on the user's options",
    "experiment/running/runner.py": "a trial's options from its spec: the runner is the user",
    "experiment/running/trial.py": "a trial's options in its workspace (CLAUDE_CONFIG_DIR)",
    "testing/offline.py": "the test bed's options for an offline CLI: a test's user options",
}


def _names_of_options(func: ast.AST) -> set[str]:
    """The names in ``func`` that hold a ClaudeAgentOptions: annotated so, or assigned one."""
    names: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if "ClaudeAgentOptions" in ast.unparse(node.annotation):
                names.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if "ClaudeAgentOptions" in ast.unparse(node.annotation):
                names.add(node.target.id)
        elif isinstance(node, ast.Assign) and "ClaudeAgentOptions(" in ast.unparse(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _copies_of_options() -> dict[str, list[int]]:
    """Where ``teamlead`` calls ``dataclasses.replace`` on a ClaudeAgentOptions, by module."""
    found: dict[str, list[int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "replace(" not in text:
            continue
        tree = ast.parse(text)
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            options = _names_of_options(func)
            for node in ast.walk(func):
                if not (isinstance(node, ast.Call) and node.args):
                    continue
                called = ast.unparse(node.func)
                first = ast.unparse(node.args[0])
                if called in ("replace", "dataclasses.replace") and (
                    first in options or first.endswith("options")
                ):
                    found.setdefault(path.relative_to(PACKAGE).as_posix(), []).append(node.lineno)
    return found


def test_only_the_builder_copies_the_options_with_a_field_changed() -> None:
    copies = _copies_of_options()
    assert BUILDER in copies  # the check sees the builder's own copies: it is not blind
    outside = {module: lines for module, lines in copies.items() if module != BUILDER}
    assert set(outside) <= set(USERS_OPTIONS), outside
