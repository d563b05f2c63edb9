"""The CLI options of a run: one pure builder, the only place a run's options are written.

Each layer computes its rule's input (the admission's hook and workflow cap, the permission
list's wrapper, the store's view, the relay's URL, the trace context, the run mark, the
stderr tail) and the run hands them over in one :class:`Wiring`; :func:`build_options`
turns the user's options, the policy and the wiring into the CLI's. A piece known only
later makes the run build its options again from the user's, with the new wiring.

The rules, in the order they apply (the user's options are never mutated):

1. ``CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS`` from ``policy.bg_wait_ceiling_ms``, and with
   ``client`` ``CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS=1``: the user's own values are kept.
   ``max_buffer_size`` becomes :data:`MAX_MESSAGE_BYTES` unless the user set one.
2. The admission's hook goes under ``PreToolUse`` after the user's own hooks (once).
3. ``CLAUDE_CODE_WORKFLOW_MAX_CONCURRENT_AGENTS`` is the admission's limit, or the user's
   value (their env, else this process's) when that is lower.
4. ``CLAUDE_CODE_SUBAGENT_MODEL`` is the policy's subagent model when it names one (over
   the user's); else the user's stays.
5. The user's ``can_use_tool`` goes through the permission list's wrapper (none: none).
6. The user's session store is replaced by the run's view of it (flushed eagerly), or
   dropped when the run gave it up (it did not answer).
7. ``ANTHROPIC_BASE_URL`` points at the relay when the run goes through it.
8. ``TRACEPARENT``/``TRACESTATE`` carry the run's span, unless the user set a
   ``TRACEPARENT``.
9. ``TEAMLEAD_RUN_MARK`` marks the run's CLI processes, and each stderr line goes to the
   run's tail, then to the user's own ``stderr`` callback.

A run of the strict drop-in (:func:`teamlead.query`) wires ``verbatim``: its CLI gets the
user's options as given, none of the rules above applies (see docs/library.md).

Each round then starts from the run's options, with the session to resume (and, for the
wrap-up, no tools): :func:`round_options`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher
from claude_agent_sdk.types import CanUseTool, SessionStore

from ..policy import Policy
from .agents import WORKFLOW_CAP_VAR

__all__ = [
    "BG_WAIT_CEILING_VAR",
    "MAX_MESSAGE_BYTES",
    "RUN_MARK_VAR",
    "SESSION_STATE_VAR",
    "SUBAGENT_MODEL_VAR",
    "Wiring",
    "build_options",
    "merge_hook",
    "round_options",
    "with_base_url",
]

#: The largest single message the SDK reads from the CLI (its ``max_buffer_size``) unless
#: the options set one: 64 MiB, where the SDK's default of 1 MiB let one Agent call with a
#: 1 MB description end the run.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: How long the CLI waits for background agents before it ends a ``--print`` run.
BG_WAIT_CEILING_VAR = "CLAUDE_CODE_PRINT_BG_WAIT_CEILING_MS"
#: Makes the CLI report its session state (``session_state_changed``), for a client.
SESSION_STATE_VAR = "CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"
#: The CLI's model for every subagent (workflow agents included), fixed when it starts.
SUBAGENT_MODEL_VAR = "CLAUDE_CODE_SUBAGENT_MODEL"
#: Marks a run's CLI processes, so the wrap-up can end exactly their tree.
RUN_MARK_VAR = "TEAMLEAD_RUN_MARK"
_BASE_URL_VAR = "ANTHROPIC_BASE_URL"


@dataclass(frozen=True)
class Wiring:
    """What the run's layers hand :func:`build_options`, one field per rule of the module
    docstring (``client``: the options are for a ``ClaudeSDKClient``; ``verbatim``: the
    strict drop-in's, given to the CLI as they are); each field's default changes nothing.
    """

    client: bool = False
    hook: HookMatcher | None = None
    workflow_cap: int | None = None
    subagent_model: str | None = None
    permissions: Callable[[CanUseTool], CanUseTool] | None = None
    store_view: SessionStore | None = None
    store_off: bool = False
    relay_base_url: str | None = None
    trace_env: Mapping[str, str] = field(default_factory=dict)
    run_mark: str | None = None
    stderr: Callable[[str], None] | None = None
    verbatim: bool = False


def build_options(
    options: ClaudeAgentOptions | None,
    policy: Policy,
    wiring: Wiring | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> ClaudeAgentOptions:
    """The CLI options of a run: ``options`` with the module docstring's rules applied.

    Args:
        options: the user's options (default: ``ClaudeAgentOptions()``); never mutated.
        policy: the run's policy (``bg_wait_ceiling_ms``).
        wiring: the pieces the run's layers computed (default: none of them).
        environ: this process's environment, where a user's workflow cap may be set too
            (default: ``os.environ``).

    Example:
        >>> opts = build_options(ClaudeAgentOptions(), Policy(), Wiring(client=True))
        >>> opts.env["CLAUDE_CODE_EMIT_SESSION_STATE_EVENTS"]
        '1'
    """
    user = options or ClaudeAgentOptions()
    wired = wiring or Wiring()
    if wired.verbatim:
        return user
    env = dict(user.env)
    fields: dict[str, Any] = {}
    env.setdefault(BG_WAIT_CEILING_VAR, str(policy.bg_wait_ceiling_ms))
    if wired.client:
        env.setdefault(SESSION_STATE_VAR, "1")
    if user.max_buffer_size is None:
        fields["max_buffer_size"] = MAX_MESSAGE_BYTES
    if wired.hook is not None:
        hooks = _with_hook(user.hooks, wired.hook)
        if hooks is not None:
            fields["hooks"] = hooks
    if wired.workflow_cap is not None:
        outer = os.environ if environ is None else environ
        env[WORKFLOW_CAP_VAR] = str(_workflow_cap(wired.workflow_cap, env, outer))
    if wired.subagent_model is not None:
        env[SUBAGENT_MODEL_VAR] = wired.subagent_model
    if wired.permissions is not None and user.can_use_tool is not None:
        fields["can_use_tool"] = wired.permissions(user.can_use_tool)
    if wired.store_off:
        fields["session_store"] = None
    elif wired.store_view is not None:  # mirrored eagerly: a dead machine loses ~0.1 s
        fields["session_store"] = wired.store_view
        fields["session_store_flush"] = "eager"
    if wired.relay_base_url is not None:
        env[_BASE_URL_VAR] = wired.relay_base_url
    if "TRACEPARENT" not in env:
        env.update(wired.trace_env)
    if wired.run_mark is not None:
        env[RUN_MARK_VAR] = wired.run_mark
    if wired.stderr is not None:
        fields["stderr"] = _tee(wired.stderr, user.stderr)
    return dataclasses.replace(user, env=env, **fields)


def round_options(
    options: ClaudeAgentOptions, session_id: str, *, tools_off: bool = False
) -> ClaudeAgentOptions:
    """A round's options: the run's ``options`` on session ``session_id`` (a resume), with
    no tools at all for the wrap-up (``tools_off``)."""
    if tools_off:
        return dataclasses.replace(options, resume=session_id, tools=[])
    return dataclasses.replace(options, resume=session_id)


def with_base_url(options: ClaudeAgentOptions, base_url: str | None) -> ClaudeAgentOptions:
    """``options`` whose CLI sends its requests to ``base_url`` (``None``: unchanged), for a
    client's options through the relay (:func:`teamlead.relay_for`), outside any run."""
    if base_url is None:
        return options
    return dataclasses.replace(options, env={**dict(options.env), _BASE_URL_VAR: base_url})


def merge_hook(options: ClaudeAgentOptions, matcher: HookMatcher) -> ClaudeAgentOptions:
    """``options`` with ``matcher`` appended under ``PreToolUse``; the user's hooks stay.

    Adding the same callback twice is a no-op (``options`` itself comes back). For the spawn
    gate on its own (a run adds its hook with :func:`build_options`).

    Example:
        >>> opts = merge_hook(ClaudeAgentOptions(), gate.hook_matcher())  # doctest: +SKIP
    """
    hooks = _with_hook(options.hooks, matcher)
    return options if hooks is None else dataclasses.replace(options, hooks=hooks)


def _with_hook(hooks: Mapping[Any, Any] | None, matcher: HookMatcher) -> dict[Any, Any] | None:
    """``hooks`` with ``matcher`` last under ``PreToolUse``; ``None`` when it is there already."""
    merged = dict(hooks or {})
    existing = list(merged.get("PreToolUse") or [])
    if any(cb in m.hooks for m in existing for cb in matcher.hooks):
        return None
    merged["PreToolUse"] = [*existing, matcher]
    return merged


def _workflow_cap(cap: int, env: Mapping[str, str], environ: Mapping[str, str]) -> int:
    """``cap``, or the user's workflow cap (``env``'s, else ``environ``'s) when lower."""
    user = env.get(WORKFLOW_CAP_VAR, environ.get(WORKFLOW_CAP_VAR))
    try:
        wanted = int(str(user).strip()) if user is not None else None
    except ValueError:
        wanted = None
    return min(cap, wanted) if wanted is not None and wanted >= 1 else cap


def _tee(sink: Callable[[str], None], user: Callable[[str], None] | None) -> Callable[[str], None]:
    """One stderr callback: each line to the run's ``sink``, then to the user's."""

    def on_stderr(line: str) -> None:
        sink(line)
        if user is not None:
            user(line)

    return on_stderr
