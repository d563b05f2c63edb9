"""The bridge between an SDK app and the real CLI: teamlead's run in the middle.

The app's SDK speaks stream-json with ``teamlead-claude`` as it would with the CLI. The
bridge runs each of the app's turns as a teamlead run (:func:`teamlead.coordinator.run_stream`)
whose query function starts the real CLI with the app's argv: every round of the run is
one CLI process, the first fed the app's own input, a resume round (``--resume <session>``)
fed the app's initialize request again and the resume prompt. So the relay, the spawn
gate, the wait for background agents and teammates, collection and resume are teamlead's
own machinery; the bridge only carries lines:

- app -> CLI: every line is passed to the current CLI as it comes (control requests,
  control responses to the CLI's hooks, permission and MCP requests, the turn's user
  message; one sent while the run has its own waits for the next run and its result);
  the app's ``initialize`` gets the run's own hooks (the spawn gate) appended, and the
  bridge answers those hook callbacks itself;
- CLI -> app: every line is passed on at once (partial messages included), except each
  ``result`` and session-state frame: those are held, and only the run's last result
  (and the CLI's last state) reach the app when the run has finished, so the app reads
  exactly one ``result``, the one that used every result. A first turn the lead answered
  by itself (:func:`teamlead._run.answered_alone`) is the run's answer already: its result
  reaches the app as the CLI writes it, without waiting for the CLI's exit.

The session's first CLI is started before its run is set up (the run's relay and
registration then overlap the CLI's own start), on the relay address drawn ahead for the
run; the first round takes it when it is the CLI the round would start.

A CLI is kept running while its work goes on (its input open, so it can ask the app's
callbacks), and its input is closed once it is idle with no task running
(:func:`teamlead._run.round.settled`): it then ends its session and the round ends.

An app's interrupt goes to the running CLI, and the run stops at the result that ends the
interrupted turn. Between the app's turns no CLI runs: the app's next user message starts
the next run on the same session (every CLI of it gets the app's initialize again), a
setting the app changes (then, or in a turn) is given to every later CLI, and a request
nothing can answer is refused at once, never left waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from claude_agent_sdk import ClaudeAgentOptions

from .._private import json_object
from .._procs import started_here
from .._run import (
    MAX_MESSAGE_BYTES,
    ProcessState,
    RunStream,
    answered_alone,
    default_process_state,
    relay_wanted,
    settled,
)
from ..coordinator import run_stream
from ..events import Finished
from ..policy import Policy
from .child import Child, round_argv

__all__ = ["Bridge", "rehearse", "serve"]

# a small request of the CLI's shape (tools, a cached system prompt, a user message)
_REHEARSED_REQUEST = (
    b'{"model":"-","stream":true,"tools":[{"name":"Agent"}],"system":[{"type":"text",'
    b'"text":"-","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"-"}]}'
)
_REHEARSED_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
)
_REHEARSAL_S = 5.0

#: Asks the CLI for its session state (for the SDK host, not shown by an SDK), so the
#: bridge knows exactly when a CLI is idle.
_HOST_STATE_VAR = "CLAUDE_CODE_SDK_READS_SESSION_STATE"
_OWN_PREFIX = "teamlead_"
_IDLE_CHECK_S = 0.5
_READ_GRACE_S = 5.0  # from a CLI's exit to the last of its stdout read


class _Line(NamedTuple):
    """One line of the app's, as it came and parsed once (``{}``: not a JSON object)."""

    raw: bytes
    message: dict[str, Any]


def _session_state_frame(message: Mapping[str, Any]) -> bool:
    return message.get("type") == "system" and message.get("subtype") == "session_state_changed"


@dataclass
class _Held:
    """What the app has not been shown yet (the last ``result`` and the last state frame),
    and the exit code of the last CLI, which becomes the command's."""

    result: bytes | None = None
    state: bytes | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class _OwnHook:
    """A hook of the run's own (the spawn gate's): where it goes and its callback."""

    event: str
    matcher: str | None
    timeout: float | None
    callback: Callable[..., Any]


@dataclass
class _Round:
    """The CLI process of one round, and what the bridge owns of its control protocol."""

    child: Child
    first: bool = False  # the run's first round (the app's own turn)
    hooks: dict[str, _OwnHook] = field(default_factory=dict)
    own_requests: set[str] = field(default_factory=set)
    user_messages: int = 0
    read: anyio.Event = field(default_factory=anyio.Event)
    interrupted: bool = False
    asked: set[str] = field(default_factory=set)  # the app's requests it has not answered
    waiting: set[str] = field(default_factory=set)  # its requests the app has not answered


class Bridge:
    """Carries one app's stream-json session through teamlead's runs (module docstring).

    Args:
        cli: the real CLI's path.
        argv: the app's arguments for the CLI (without the program name).
        policy: each run's policy.
        env: the CLI's environment (the one the app's SDK gave ``teamlead-claude``).
        cwd: the app's working directory.
        out: where the app reads the CLI's stdout lines.
        err: where the app reads the CLI's stderr.
    """

    def __init__(
        self,
        cli: str,
        argv: Sequence[str],
        policy: Policy,
        env: Mapping[str, str],
        cwd: str,
        out: IO[bytes],
        err: IO[str],
    ) -> None:
        self._argv = [cli, *argv]
        self._policy = policy
        self._env = {**env}
        self._env.setdefault(_HOST_STATE_VAR, "1")
        self._cwd = cwd
        self._out = out
        self._err = err
        self._init: dict[str, Any] | None = None
        self._pending: list[_Line] = []  # app lines waiting for the next CLI
        self._turns: list[_Line] = []  # user messages waiting for the next run
        self._settings: list[dict[str, Any]] = []  # settings the app changed between turns
        self._app_open = True
        self._app_event = anyio.Event()
        self._round: _Round | None = None
        self._early: Child | None = None  # the first run's CLI, started before the run
        self._held = _Held()
        self._run: RunStream | None = None
        self._tg: TaskGroup | None = None
        self._requests = 0
        self._running = False
        self._taken = False  # the run has its user message
        self._out_closed = False
        self._process = default_process_state()
        self.stopped_by: signal.Signals | None = None

    # -- the whole session ---------------------------------------------------------------
    async def serve(self, stdin: asyncio.StreamReader) -> int:
        """Serve the app until its input ends and its last run has finished; returns the
        exit code for the app (the last CLI's, or ``128 + signal`` after a stop)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._read_app, stdin)
            tg.start_soon(self._watch_signals, tg.cancel_scope)
            session: str | None = None
            while True:
                await self._run_turn(session)
                session = self._run.tracker.session_id if self._run and self._run.tracker else None
                self._show_held()
                if session is None or not await self._next_turn():
                    break
            tg.cancel_scope.cancel()
        if self.stopped_by is not None:
            return 128 + int(self.stopped_by)
        code = self._held.exit_code
        return 1 if code is None else (128 - code if code < 0 else code)

    def _show_held(self) -> None:
        """The held result and state frame, to the app (a run's last)."""
        held = self._held
        for line in (held.result, held.state):
            if line is not None:
                self._write(line)
        held.result = held.state = None

    async def _next_turn(self) -> bool:
        """Wait for the app's next user message (a multi-turn app); ``False`` at its end.
        A user message that came while the last run's CLI took no more input starts it, and
        a control request that came then is answered as one between turns."""
        pending, self._pending = self._pending, []
        for line in pending:
            if line.message.get("type") == "user":
                self._turns.append(line)
            elif _control_subtype(line.message) is not None:
                self._between_turns(line.message)
            else:
                self._pending.append(line)
        while not self._turns and self._app_open:
            await self._app_event.wait()
            self._app_event = anyio.Event()
        return bool(self._turns)

    async def _run_turn(self, session: str | None) -> None:
        """One teamlead run: the app's turn, from its user message to one final result."""
        user = ClaudeAgentOptions(env=dict(self._env), cwd=self._cwd, resume=session)
        self._taken = bool(self._turns)
        self._pending += self._turns[:1]
        self._turns = self._turns[1:]
        first = [True]

        def query_fn(*, prompt: str, options: ClaudeAgentOptions) -> AsyncGenerator[Any, None]:
            is_first, first[0] = first[0], False
            return self._round_messages(None if is_first else prompt, options)

        run = run_stream("", user, query_fn=query_fn, policy=self._policy, process=self._process)
        early = self._run is None  # the session's first run
        self._run, self._running = run, True
        try:
            if early:
                await self._start_early(run)
            async with contextlib.aclosing(run) as items:
                async for item in items:
                    if isinstance(item, Finished):
                        if self._round is None:  # every CLI has ended: the turn is over
                            self._running = False  # for the app, which has its answer
                            self._show_held()  # before the run lets go of its relay
                        break
        finally:
            self._running = False
            untaken, self._early = self._early, None
            if untaken is not None:  # the run ended before its first round
                self._process.relays.release()
                await self._drop_early(untaken)

    async def _start_early(self, run: RunStream) -> None:
        """Start the first run's CLI now, so that the run's setup (its relay, its
        registration) overlaps the CLI's own start: on the relay address drawn ahead for
        the run (:meth:`~teamlead._relay.RelayPool.reserve`) and the run's options. The
        first round takes it if it would start that very CLI (:meth:`_take_early`); else
        it is stopped. Not tried without the relay (turned off, or not for this upstream:
        Bedrock's and Vertex's requests are signed for their own hosts), or with telemetry
        on (the CLI's trace context comes from the started run)."""
        if not relay_wanted(self._policy, self._env) or any(
            name.startswith("OTEL_") for name in self._env
        ):
            return
        ask = run.made().ask
        try:
            from .._relay import relay_applicable

            if not relay_applicable(self._env).ok:
                return
            base_url = self._process.relays.reserve()
        except (OSError, ImportError):  # the run finds out, and says why
            return
        options = ask.options_with(relay_base_url=base_url)
        child = Child(self._argv, {**self._env, **options.env})
        try:
            await child.start()
        except OSError:  # the first round fails as it would have, and says why
            self._process.relays.release()
            return
        self._early = child

    def _take_early(self, argv: list[str], env: Mapping[str, str]) -> Child | None:
        """The CLI :meth:`_start_early` started, if it runs ``argv`` on ``env``; one that
        does not is stopped."""
        early, self._early = self._early, None
        if early is None:
            return None
        self._process.relays.release()  # the run's relay took the address, or never will
        if early.argv == argv and early.env == env:
            return early
        assert self._tg is not None
        self._tg.start_soon(self._drop_early, early)
        return None

    @staticmethod
    async def _drop_early(early: Child) -> None:
        """Stop a CLI started early that no round took (bounded, reaped)."""
        early.signal(signal.SIGTERM)
        await early.stop()

    # -- one round: one CLI process ------------------------------------------------------
    async def _round_messages(
        self, prompt: str | None, options: ClaudeAgentOptions
    ) -> AsyncGenerator[Any, None]:
        """One round's messages for the run, from a CLI started on the run's ``options``:
        fed the app's pending lines (``prompt`` ``None``), or the app's initialize again
        and ``prompt`` (a resume round)."""
        argv = round_argv(self._argv, resume=options.resume, tools_off=options.tools == [])
        tee = options.stderr

        def on_stderr(line: str) -> None:
            with contextlib.suppress(OSError):  # the app's stderr closed: the tail still has it
                self._err.write(line)
                self._err.flush()
            if tee is not None:
                tee(line.rstrip("\n"))

        env = {**self._env, **options.env}
        child = self._take_early(argv, env) if prompt is None else None
        if child is None:
            child = Child(argv, env)
            try:
                await child.start()
            except OSError as exc:  # the round fails; the SDK is told why on stderr
                on_stderr(f"teamlead-claude: cannot start the Claude Code CLI {argv[0]!r}: {exc}\n")
                raise
        child.on_stderr = on_stderr
        this = _Round(child, first=prompt is None, hooks=self._own_hooks(options))
        send, receive = anyio.create_memory_object_stream[dict[str, Any]](float("inf"))
        assert self._tg is not None
        self._round = this
        try:
            self._tg.start_soon(child.pump_stderr)
            self._tg.start_soon(self._read_cli, this, send)
            await self._feed(this, prompt)
            async for message in self._settling(this, receive):
                yield message
        finally:
            if self._round is this:
                self._round = None
            await child.stop()
            with anyio.CancelScope(shield=True), anyio.move_on_after(_READ_GRACE_S):
                await this.read.wait()  # its last lines reach the app (and the held result)
            for request_id in sorted(this.asked):  # what it never answered, the app is told
                self._write(_response(request_id, error="the Claude Code CLI has ended"))
            self._held.exit_code = child.returncode
            receive.close()

    async def _settling(
        self, this: _Round, receive: MemoryObjectReceiveStream[dict[str, Any]]
    ) -> AsyncGenerator[Any, None]:
        """The CLI's messages; its input is closed once it is idle with nothing running
        (or, when the app gave it no turn, once the app's input has ended)."""
        run = self._run
        start = len(run.tracker.results) if run is not None and run.tracker else 0
        reports_state = False
        async with receive:
            while True:
                try:
                    message = await self._receive(receive, this)
                except anyio.EndOfStream:
                    return
                yield message
                if run is None or run.tracker is None:
                    continue
                events = run.events_of(message)
                if this.first and self._held.result and answered_alone(run.tracker, start):
                    self._write(self._held.result)  # the run's answer: nothing can follow it
                    self._held.result = None
                    self._running = False  # for the app, whose turn is over (as at the end)
                reports_state = reports_state or _session_state_frame(message)
                if settled(run.tracker, start, events, reports_state=reports_state):
                    await this.child.end_input()

    async def _receive(
        self, receive: MemoryObjectReceiveStream[dict[str, Any]], this: _Round
    ) -> dict[str, Any]:
        """The next message; while none comes, a CLI given no turn is let go once the app's
        input ends (checked every :data:`_IDLE_CHECK_S`)."""
        while True:
            with anyio.move_on_after(_IDLE_CHECK_S):
                return await receive.receive()
            if not this.user_messages and not self._app_open:
                await this.child.end_input()

    async def _feed(self, this: _Round, prompt: str | None) -> None:
        """Start the round's CLI on the app's pending lines, or on a resume ``prompt``; a
        CLI that will not see the app's initialize gets it again (and the settings the app
        changed between turns), as requests of the bridge's own."""
        if prompt is None:
            lines, self._pending = self._pending, []
        else:
            lines = [_user_line(prompt)]
        initializes = any(_control_subtype(line.message) == "initialize" for line in lines)
        if self._init is not None and not initializes:
            await self._send_own(this, self._init["request"])
        for request in self._settings:
            await self._send_own(this, request)
        for line in lines:
            await self._to_cli(this, line)

    def _own_hooks(self, options: ClaudeAgentOptions) -> dict[str, _OwnHook]:
        """The run's own hook callbacks (the spawn gate's), by the id the CLI will call."""
        return {
            f"{_OWN_PREFIX}{event}_{i}_{j}": _OwnHook(event, matcher.matcher, matcher.timeout, hook)
            for event, matchers in (options.hooks or {}).items()
            for i, matcher in enumerate(matchers)
            for j, hook in enumerate(matcher.hooks)
        }

    @staticmethod
    def _hooks_config(this: _Round, app_hooks: Mapping[str, Any] | None) -> Any:
        """The app's hooks config with the run's own after the app's (as the SDK would
        list them: the app's hooks run first)."""
        merged: dict[str, list[Any]] = {
            event: list(matchers) for event, matchers in dict(app_hooks or {}).items()
        }
        for callback_id, own in this.hooks.items():
            entry: dict[str, Any] = {"matcher": own.matcher, "hookCallbackIds": [callback_id]}
            if own.timeout is not None:
                entry["timeout"] = own.timeout
            merged.setdefault(own.event, []).append(entry)
        return merged or None

    # -- app -> CLI ----------------------------------------------------------------------
    async def _read_app(self, stdin: asyncio.StreamReader) -> None:
        """Every line of the app's input, to the current CLI (or kept for the next one); at
        its end, what the CLI asked the app and still waits for is refused."""
        try:
            line = b"\n"
            while line.endswith(b"\n"):  # a line without one is the last, at the end
                try:
                    line = await stdin.readuntil(b"\n")
                except asyncio.IncompleteReadError as end:
                    line = end.partial
                except asyncio.LimitOverrunError:
                    return
                if line.strip():
                    await self._from_app(line)
        finally:
            self._app_open = False
            self._app_event.set()
            if (this := self._round) is not None:
                for request_id in sorted(this.waiting):  # as the bare CLI does
                    await this.child.send(_response(request_id, error="the app's input has ended"))

    async def _from_app(self, raw: bytes) -> None:
        line = _Line(raw, json_object(raw) or {})
        message = line.message
        subtype = _control_subtype(message)
        if subtype == "initialize":
            self._init = message
        this = self._round
        if message.get("type") == "user" and (self._taken or not self._running):
            self._turns.append(line)
            self._app_event.set()
        elif subtype == "interrupt":
            await self._interrupt(line)
        elif not self._running and subtype is not None:
            self._between_turns(message)
        elif this is None or not this.child.input_open:
            self._pending.append(line)
        else:
            await self._to_cli(this, line)
        self._taken = self._taken or message.get("type") == "user"

    async def _interrupt(self, line: _Line) -> None:
        """The app ends its turn: the CLI running it is told, answers, and ends the turn with
        its result; the run stops at that result rather than resuming the lead. With no CLI
        to tell, the bridge answers (nothing is left to interrupt) and the run stops now."""
        this = self._round
        if this is not None and this.child.input_open:
            this.interrupted = True
            await self._to_cli(this, line)
            return
        self._write(_response(line.message.get("request_id"), result={}))
        if self._running:
            self._process.stop_every_run("the app interrupted the turn")

    def _between_turns(self, message: Mapping[str, Any]) -> None:
        """A control request while no CLI runs (between the app's turns): a setting
        (``set_model``, ``set_permission_mode``, ...) is taken and given to every later
        CLI; anything else is refused at once, rather than left unanswered."""
        subtype = _control_subtype(message) or ""
        request_id = message.get("request_id")
        if subtype.startswith("set_"):
            self._settings.append(dict(message["request"]))
            self._write(_response(request_id, result={}))
        else:
            error = f"no Claude Code CLI runs between turns to answer {subtype!r}"
            self._write(_response(request_id, error=error))

    async def _to_cli(self, this: _Round, line: _Line) -> None:
        message, raw = line.message, line.raw
        subtype = _control_subtype(message)
        if subtype is not None:
            this.asked.add(str(message.get("request_id")))
        if subtype is not None and subtype.startswith("set_"):  # for the later CLIs too
            self._settings.append(dict(message["request"]))
        elif subtype == "initialize":
            request = dict(message.get("request") or {})
            request["hooks"] = self._hooks_config(this, request.get("hooks"))
            raw = json.dumps({**message, "request": request}).encode()
        elif message.get("type") == "control_response":
            this.waiting.discard(str(_answered(message)))
        elif message.get("type") == "user":
            if not this.user_messages and self._init is None and this.hooks:
                await self._send_own(this, {"subtype": "initialize", "hooks": None})
            this.user_messages += 1
        await this.child.send(raw)

    async def _send_own(self, this: _Round, request: Mapping[str, Any]) -> None:
        """Send the CLI a control request of the bridge's own (its answer is not the app's)."""
        self._requests += 1
        request_id = f"{_OWN_PREFIX}req_{self._requests}"
        this.own_requests.add(request_id)
        body = dict(request)
        if body.get("subtype") == "initialize":
            body["hooks"] = self._hooks_config(this, body.get("hooks"))
        line = {"type": "control_request", "request_id": request_id, "request": body}
        await this.child.send(json.dumps(line).encode())

    # -- CLI -> app ----------------------------------------------------------------------
    async def _read_cli(self, this: _Round, send: MemoryObjectSendStream[dict[str, Any]]) -> None:
        """The CLI's stdout: control lines answered or passed on, messages to the app (a
        result held) and to the run."""
        async with send:
            try:
                await self._pass_lines(this, send)
            finally:
                this.read.set()

    async def _pass_lines(self, this: _Round, send: MemoryObjectSendStream[dict[str, Any]]) -> None:
        async for line in this.child.lines():
            message = json_object(line) or {}
            kind = message.get("type")
            if kind == "control_request":
                await self._cli_request(this, message, line)
                continue
            if kind == "control_response":
                rid = _answered(message)
                if rid not in this.own_requests:
                    this.asked.discard(str(rid))
                    self._write(line)
                continue
            if kind == "result":
                self._held.result = line
                if this.interrupted:  # the interrupted turn's end: the run ends with it
                    self._process.stop_every_run("the app interrupted the turn")
            elif _session_state_frame(message):
                self._held.state = line
            else:
                self._write(line)
            if message:
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await send.send(message)  # the round may have ended: the app still reads

    async def _cli_request(self, this: _Round, message: dict[str, Any], line: bytes) -> None:
        request = message.get("request")
        request = request if isinstance(request, dict) else {}
        own = this.hooks.get(str(request.get("callback_id")))
        if request.get("subtype") == "hook_callback" and own is not None:
            assert self._tg is not None
            self._tg.start_soon(self._answer_hook, this, message, own.callback)
        elif self._app_open:
            this.waiting.add(str(message.get("request_id")))
            self._write(line)
        else:  # nobody can answer: the CLI is told so rather than left waiting
            await this.child.send(
                _response(message.get("request_id"), error="the app's input has ended")
            )

    async def _answer_hook(
        self, this: _Round, message: dict[str, Any], callback: Callable[..., Any]
    ) -> None:
        request = message["request"]
        try:
            output = await callback(
                request.get("input"), request.get("tool_use_id"), {"signal": None}
            )
            line = _response(message.get("request_id"), result=_for_cli(output or {}))
        except Exception as exc:  # the CLI's own rule for a failed hook applies
            line = _response(message.get("request_id"), error=str(exc) or type(exc).__name__)
        await this.child.send(line)

    def _write(self, line: bytes) -> None:
        """One line to the app (dropped once the app stopped reading: it closed the pipe)."""
        if self._out_closed:
            return
        try:
            self._out.write(line if line.endswith(b"\n") else line + b"\n")
            self._out.flush()
        except OSError:  # BrokenPipeError: the app is gone; the run ends on its own bounds
            self._out_closed = True

    # -- stop signals --------------------------------------------------------------------
    async def _watch_signals(self, scope: anyio.CancelScope) -> None:
        """A stop signal is passed to the current CLI, and the session ends (its CLI
        stopped, bounded)."""
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async for signum in signals:
                self.stopped_by = signal.Signals(signum)
                if self._round is not None:
                    self._round.child.signal(self.stopped_by)
                scope.cancel()
                return


def _control_subtype(message: Mapping[str, Any]) -> str | None:
    request = message.get("request")
    if message.get("type") != "control_request" or not isinstance(request, dict):
        return None
    subtype = request.get("subtype")
    return subtype if isinstance(subtype, str) else None


def _answered(response: Mapping[str, Any]) -> Any:
    """The id of the request a ``control_response`` answers."""
    body = response.get("response")
    return body.get("request_id") if isinstance(body, dict) else None


def _user_line(prompt: str) -> _Line:
    message: dict[str, Any] = {
        "type": "user",
        "message": {"role": "user", "content": prompt},
        "parent_tool_use_id": None,
    }
    return _Line(json.dumps(message).encode(), message)


def _response(request_id: Any, *, result: Any = None, error: str | None = None) -> bytes:
    if error is not None:
        body: dict[str, Any] = {"subtype": "error", "request_id": request_id, "error": error}
    else:
        body = {"subtype": "success", "request_id": request_id, "response": result}
    return json.dumps({"type": "control_response", "response": body}).encode()


def _for_cli(output: Mapping[str, Any]) -> dict[str, Any]:
    """A Python hook's output as the CLI reads it (``async_``/``continue_`` renamed)."""
    names = {"async_": "async", "continue_": "continue"}
    return {names.get(k, k): v for k, v in output.items()}


async def serve(
    cli: str, argv: Sequence[str], policy: Policy, env: Mapping[str, str], cwd: str
) -> int:
    """Serve the app on this process's stdin and stdout; returns the exit code."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    bridge = Bridge(cli, argv, policy, env, cwd, sys.stdout.buffer, sys.stderr)
    return await bridge.serve(reader)


async def _through_relay(body: bytes) -> int:
    """``body`` sent through a relay of its own to an upstream on this loop that answers
    at once (the relay's start, and its reading, forwarding and answering of a request);
    the relay's status."""
    import aiohttp  # here: a session whose relay cannot load runs direct, and says why

    from .._relay import start_relay

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            head = (await reader.readuntil(b"\r\n\r\n")).lower()
            length = head.partition(b"content-length:")[2].split(b"\r\n", 1)[0]
            await reader.readexactly(int(length or 0))
            writer.write(_REHEARSED_ANSWER)
            await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    async with (
        upstream,
        start_relay(f"http://127.0.0.1:{port}") as relay,
        aiohttp.ClientSession() as client,
        client.post(relay.base_url + "/v1/messages", data=body) as answered,
    ):
        await answered.read()
        return answered.status


def rehearse() -> int:
    """Go once through what a session does before its CLI starts, with nothing to serve: an
    event loop, a run's state and options on a relay address drawn and given up, a child
    process started (``true``) and reaped, a relay started and a request through it (to
    an upstream of its own), a host checked against a ``NO_PROXY``, the worker's
    start read for its runs' registration. A warm worker does this while it waits for its
    session (:mod:`.warm`), so the session does not wait for each piece's first run in a
    forked process (its pages copied, itself set up). Returns the relay's status for the
    request (200: the whole way was taken)."""

    async def no_rounds(**_options: Any) -> AsyncGenerator[Any, None]:
        yield None  # never read

    async def start() -> int:
        process = ProcessState(registry=False, history=False)
        run = run_stream("", query_fn=no_rounds, process=process)
        try:
            run.made().ask.options_with(relay_base_url=process.relays.reserve())
        finally:
            process.relays.release()
        child = Child(["true"], {"PATH": os.defpath})  # a CLI's start, on a command that ends
        with contextlib.suppress(OSError):
            await child.start()
        await child.stop()
        with anyio.fail_after(_REHEARSAL_S):
            status = await _through_relay(_REHEARSED_REQUEST)
        # the proxy lookup's parser of a NO_PROXY host, compiled once per process
        proxy_bypass_environment("localhost:1", {"no": "example.invalid"})
        started_here()
        return status

    return anyio.run(start)
