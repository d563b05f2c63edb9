"""``teamlead view``: a local web page of this user's runs, updated live, with buttons to
steer them (what it shows is in the command's ``--help``).

The page (``board.html``, beside this module) gets the rows of ``teamlead ps --all`` as
server-sent events whenever they change, and for the run picked a second stream with its
detail; its buttons do what ``pause``, ``unpause``, ``stop`` and ``stop --now`` do.

:class:`Board` is a plain ASGI app, served by the relay's uvicorn on ``127.0.0.1`` only.
Every request for the runs must carry the printed URL's random token (:func:`kept_token`;
the page itself carries nothing of them, so a reload of it, its token kept by its tab, is
served without), and every request a ``Host`` of ``127.0.0.1:PORT`` or ``localhost:PORT``
(no DNS rebinding); a button is a
``POST`` of at most 1 KiB of JSON from the page's own ``Origin``. The page runs only its
own nonce'd script under a strict ``Content-Security-Policy``, and every string it is sent
is made safe as the terminal's are (:func:`~teamlead._redact.shown_safe`). Event streams
and connections are bounded (:mod:`teamlead._relay.protocol`), so a flood of silent
connections never keeps the page from its owner.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import re
import secrets
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import anyio
import click

from .._control import UNFINISHED, Registry, read_log, runtime_dir
from .._history import History
from .._private import json_object, private_dir, read_small, write_private
from .._redact import shown_safe, terminal_safe
from .._relay import GuardedSocket, RelayConfig, bounded_server, loopback_socket
from ..clock import SYSTEM_CLOCK
from ..errors import ControlError, NoSuchRun, UsageError
from .exitcodes import handle_errors
from .history import past_detail, past_rows
from .options import port_option
from .output import stdout_lost
from .runs import act, ps_rows, run_detail
from .signals import run_interruptible

__all__ = ["Board", "kept_token", "view"]

log = logging.getLogger("teamlead.view")
_PAGE_FILE = Path(__file__).with_name("board.html")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_OPS: dict[str, dict[str, Any]] = {
    "stop": {"op": "stop", "now": False},
    "stop_now": {"op": "stop", "now": True},
    "pause": {"op": "pause"},
    "unpause": {"op": "unpause"},
}
_MAX_BODY = 1024
_MAX_STREAMS = 8
#: How often an event stream reads the runs.
_EVERY_S = 1.0
_KEEPALIVE_S = 15.0
_RUN_CHARS = 64
#: Finished runs the page lists at most, the newest.
_PAST_ROWS = 200
_TOKEN_FILE = "view-token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,64}")
#: Client connections' bounds, the relay's own rules: a page needs a few connections (the
#: page, two event streams, a button), so past 64 the oldest idle one is closed.
_BOUNDS = RelayConfig(max_connections=64, max_body_bytes=_MAX_BODY)


class Board:
    """The page's ASGI app (see the module docstring).

    Args:
        token: the secret every request must carry.
        port: the port it is served on (the only ``Host`` it answers).
        rows: the runs as ``teamlead ps --json`` has them (called in a worker thread).
        detail: one run's detail (``detail(run)``, the ``detail`` op's JSON; called in a
            worker thread).
        act: does one op on a run (``act(run, request)``), returns what the run said;
            ``None`` for one run read from its log (read-only: the buttons' endpoint
            refuses).
    """

    def __init__(
        self,
        *,
        token: str,
        port: int,
        rows: Callable[[], list[dict[str, Any]]],
        detail: Callable[[str], dict[str, Any]],
        act: Callable[[str, dict[str, Any]], str] | None = None,
    ) -> None:
        self._token = token
        self._hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}
        self._origins = {f"http://{host}" for host in self._hosts}
        self._rows = rows
        self._act = act
        self._detail = detail
        self._mode = "live" if act is not None else "log"
        self._streams = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if headers.get("host") not in self._hosts:
            await _answer(send, 403, "text/plain", b"teamlead view: wrong host")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = (query.get("token") or [""])[0] or headers.get("x-teamlead-token", "")
        method, path = scope["method"], scope["path"]
        if method == "GET" and path == "/":
            await self._page(send)
        elif not secrets.compare_digest(given.encode(), self._token.encode()):
            await _answer(send, 403, "text/plain", b"teamlead view: a token is needed")
        elif method == "GET" and path == "/events":
            await self._events(receive, send, lambda: ("runs", self._rows(), False))
        elif method == "GET" and path == "/detail":
            run = (query.get("run") or [""])[0]
            if not 0 < len(run) <= _RUN_CHARS:
                await _answer(send, 400, "text/plain", b"teamlead view: name one run")
                return
            await self._events(receive, send, lambda: self._run_detail(run))
        elif method == "POST" and path == "/act":
            await self._button(headers, receive, send)
        else:
            await _answer(send, 404, "text/plain", b"teamlead view: not found")

    async def _page(self, send: Send) -> None:
        nonce = secrets.token_urlsafe(16)
        body = _page_text().replace("{nonce}", nonce).replace("{mode}", self._mode).encode()
        policy = (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
            "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'"
        )
        page = "text/html; charset=utf-8"
        await _answer(send, 200, page, body, {"content-security-policy": policy})

    def _run_detail(self, run: str) -> tuple[str, Any, bool]:
        """The run's detail event, or the last one (``gone``) when it cannot be asked."""
        try:
            return "detail", self._detail(run), False
        except NoSuchRun as exc:
            return "gone", {"message": str(exc)}, True
        except (ControlError, UsageError) as exc:
            return "trouble", {"message": str(exc)}, False

    async def _events(
        self, receive: Receive, send: Send, read: Callable[[], tuple[str, Any, bool]]
    ) -> None:
        if self._streams >= _MAX_STREAMS:
            await _answer(send, 503, "text/plain", b"teamlead view: too many pages open")
            return
        self._streams += 1
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": _headers("text/event-stream", {"x-accel-buffering": "no"}),
                }
            )
            async with anyio.create_task_group() as tg:

                async def gone() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(gone)
                await self._stream(send, read)
                tg.cancel_scope.cancel()
        finally:
            self._streams -= 1

    async def _stream(self, send: Send, read: Callable[[], tuple[str, Any, bool]]) -> None:
        """Send what ``read`` gives (``(event, data, last)``) whenever it changes, until
        a ``last`` one."""
        last: str | None = None
        quiet_since = SYSTEM_CLOCK.monotonic()
        while True:
            name, value, final = await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
            # every string as the terminal shows it (controls and bidi escaped, secrets
            # redacted); ASCII: no raw line breaks in an event
            data = json.dumps(_finite(shown_safe(value)), ensure_ascii=True)
            if data != last:
                last, quiet_since = data, SYSTEM_CLOCK.monotonic()
                chunk = f"event: {name}\ndata: {data}\n\n".encode()
            elif SYSTEM_CLOCK.monotonic() - quiet_since >= _KEEPALIVE_S:
                quiet_since = SYSTEM_CLOCK.monotonic()
                chunk = b": still here\n\n"
            else:
                chunk = b""
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if final:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await SYSTEM_CLOCK.sleep(_EVERY_S)

    async def _button(self, headers: dict[str, str], receive: Receive, send: Send) -> None:
        if self._act is None:
            await _answer(send, 403, "text/plain", b"teamlead view: a run's log is read-only")
            return
        if headers.get("origin") not in self._origins:
            await _answer(send, 403, "text/plain", b"teamlead view: not from the page")
            return
        if not headers.get("content-type", "").startswith("application/json"):
            await _answer(send, 415, "text/plain", b"teamlead view: JSON only")
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > _MAX_BODY:
                await _answer(send, 413, "text/plain", b"teamlead view: too large")
                return
            if not message.get("more_body"):
                break
        data = json_object(body) or {}
        run, op = data.get("run"), data.get("op")
        action = _OPS.get(op) if isinstance(op, str) else None
        if not isinstance(run, str) or not 0 < len(run) <= _RUN_CHARS or action is None:
            await _reply(send, 400, False, "a button names a run and one of: " + ", ".join(_OPS))
            return
        try:
            said = await anyio.to_thread.run_sync(self._act, run, dict(action))
        except (NoSuchRun, UsageError, ControlError) as exc:
            await _reply(send, 200, False, str(exc))
            return
        await _reply(send, 200, True, said)


def _finite(value: Any) -> Any:
    """A JSON value with each number JSON has not (``nan``, ``inf``: a log line can hold
    them, and Python reads them) as ``null``, which the page's ``JSON.parse`` takes."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _headers(kind: str, extra: dict[str, str] | None = None) -> list[tuple[bytes, bytes]]:
    values = {
        "content-type": kind,
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "x-frame-options": "DENY",
        **(extra or {}),
    }
    return [(k.encode(), v.encode()) for k, v in values.items()]


async def _answer(
    send: Send, status: int, kind: str, body: bytes, extra: dict[str, str] | None = None
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": _headers(kind, extra)})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _reply(send: Send, status: int, ok: bool, message: str) -> None:
    body = json.dumps({"ok": ok, "message": terminal_safe(message[:2000])}).encode()
    await _answer(send, status, "application/json", body)


# -- the command -------------------------------------------------------------------------
async def _serve(sock: GuardedSocket, board: Board) -> None:
    """Serve ``board`` with the relay's connection bounds (:data:`_BOUNDS`).

    Descriptors (or memory) running out at an ``accept`` is one warning for the process
    (none when the connection guard has warned), not a traceback per retry.
    """
    server = bounded_server(board, sock, config=_BOUNDS, root=b"", name="teamlead view")
    loop = asyncio.get_running_loop()
    warned = False

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        nonlocal warned
        if not str(context.get("message", "")).startswith("socket.accept() out of system"):
            loop.default_exception_handler(context)
        elif not (warned or (sock.guard is not None and sock.guard.saturated)):
            warned = True
            error = context.get("exception")
            why = error.strerror if isinstance(error, OSError) else "out of system resources"
            log.warning("teamlead view cannot accept connections (%s): retrying", why)

    loop.set_exception_handler(handle)
    await server.serve(sockets=[sock])


@click.command()
@click.argument(
    "log",
    required=False,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@port_option("The loopback port to serve the page on (0: any free one).")
@handle_errors
def view(log: Path | None, port: int) -> None:
    """Serve a live web page of your runs, to watch and steer them.

    For a run picked, the page shows its agent tree (state, tokens, requests, last tool,
    duration of each agent), its queue, held requests and waiting approvals, and the
    governor's limit per model over time. Finished runs are listed too, from the run
    history: each with its prompt, answer, reasons and agents (each agent's prompt and
    result unfold). With LOG (a run's `ask --json` output), it
    shows that run the same way, read-only; a log without the `finished` line (the run
    was killed, or still runs) shows the agents it holds, marked unfinished, and the
    page follows it as it grows.

    Prints the page's URL first: it carries a random token, kept for you in the runtime
    directory (so with the same --port, the link still works after a restart), and the
    page answers only requests with it, from this machine (127.0.0.1).
    """
    logged = _FollowedLog(log) if log is not None else None
    if logged is not None:
        logged.read()  # a file that is not a run's log fails here, before serving
    try:
        sock = loopback_socket(port)
    except OSError as exc:
        raise UsageError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    token = kept_token()
    chosen = sock.getsockname()[1]
    registry = Registry()
    history = History()
    if logged is not None:
        board = Board(token=token, port=chosen, rows=list, detail=lambda run: logged.read())
    else:
        board = Board(
            token=token,
            port=chosen,
            rows=lambda: _rows(registry, history),
            act=lambda run, request: act(run, request, registry=registry),
            detail=lambda run: _detail(run, registry, history),
        )
    click.echo(f"http://127.0.0.1:{chosen}/?token={token}")
    sys.stdout.flush()
    if stdout_lost():
        sock.close()
        return  # no one can open a page whose URL was never shown (the entry point: exit 74)
    run_interruptible(lambda: _serve(sock, board), stop=lambda: None)


def _rows(registry: Registry, history: History) -> list[dict[str, Any]]:
    """The live runs, then the newest finished ones the history keeps."""
    live = ps_rows(registry)
    return live + past_rows(history, skip=[row["run"] for row in live], limit=_PAST_ROWS)


def _detail(run: str, registry: Registry, history: History) -> dict[str, Any]:
    """A live run's detail, asked of the run; a finished run's, from the history."""
    try:
        return run_detail(run, registry=registry)
    except NoSuchRun as live:
        try:
            record = history.find(run)
        except (NoSuchRun, UsageError):
            raise live from None
        return past_detail(record, history)


def kept_token() -> str:
    """The page's token: kept per user in the runtime directory (``view-token``, mode
    0600), so the link of a view served again, on the same ``--port``, still works; a new
    one each start when the directory cannot be used (said in one warning line)."""
    path = runtime_dir() / _TOKEN_FILE
    raw = read_small(path, 256)
    token = raw.decode("ascii", "replace").strip() if raw is not None else ""
    if _TOKEN.fullmatch(token):
        return token
    token = secrets.token_urlsafe(24)
    try:
        write_private(private_dir(path.parent) / _TOKEN_FILE, token + "\n")
    except OSError as exc:
        click.echo(f"teamlead: the page's link will not outlive this view: {exc}", err=True)
    return token


class _FollowedLog:
    """A run's NDJSON log, read again whenever it has changed, until it holds the run's
    ``finished`` line."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seen: tuple[int, int] | None = None
        self._detail: dict[str, Any] = {}

    def read(self) -> dict[str, Any]:
        """The run as its log tells it now.

        Raises:
            UsageError: the file cannot be read (any more), or holds no record of a run.
        """
        if self._detail.get("status") not in (None, UNFINISHED):
            return self._detail  # finished: the log is whole
        try:
            stat = self._path.stat()
        except OSError as exc:
            raise UsageError(f"cannot read {self._path}: {exc.strerror or exc}") from None
        if (stat.st_size, stat.st_mtime_ns) != self._seen:
            self._detail = read_log(self._path).to_json()
            self._seen = (stat.st_size, stat.st_mtime_ns)
        return self._detail


@functools.cache
def _page_text() -> str:
    """The page (HTML, style and script, with ``{nonce}`` and ``{mode}`` to fill in)."""
    return _PAGE_FILE.read_text(encoding="utf-8")
