"""One real Claude Code CLI process under ``teamlead-claude``: its pipes, and its end.

A :class:`Child` starts the CLI with the app's argv (amended for the round: the session to
resume, no tools for the wrap-up), writes stream-json lines to its stdin, reads its stdout
line by line and passes each stderr line on as it comes. Its end is bounded: the input is
closed, then SIGTERM, then SIGKILL, and the process is always reaped.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from subprocess import PIPE

import anyio
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.buffered import BufferedByteReceiveStream

from .._run import MAX_MESSAGE_BYTES

__all__ = ["Child", "round_argv"]

_EXIT_GRACE_S = 5.0  # a CLI whose input is closed ends its session in this
_TERM_GRACE_S = 2.0
# flags that pick the session: a resume round names its own
_SESSION_FLAGS = ("--resume", "-r", "--session-id")
_SESSION_SWITCHES = ("--continue", "-c", "--fork-session")


def round_argv(argv: Sequence[str], *, resume: str | None, tools_off: bool) -> list[str]:
    """The app's CLI ``argv`` for one round: on session ``resume`` (the app's own choice of
    session dropped), and with no tools at all when ``tools_off``.

    Example:
        >>> round_argv(["cli", "--resume", "a", "--verbose"], resume="b", tools_off=False)
        ['cli', '--verbose', '--resume', 'b']
    """
    if resume is None and not tools_off:
        return list(argv)
    dropped = (*_SESSION_FLAGS, "--tools") if tools_off else _SESSION_FLAGS
    switches = _SESSION_SWITCHES if resume is not None else ()
    kept: list[str] = [argv[0]] if argv else []
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in dropped and (resume is not None or name == "--tools"):
            skip = "=" not in arg
            continue
        if arg in switches:
            continue
        kept.append(arg)
    if resume is not None:
        kept += ["--resume", resume]
    if tools_off:
        kept += ["--tools", ""]
    return kept


class Child:
    """One CLI process; :meth:`start` it, read :meth:`lines`, :meth:`stop` it.

    Args:
        argv: the command line.
        env: its whole environment.
        on_stderr: each stderr line (decoded, newline kept), as :meth:`pump_stderr` reads
            it (it can be set until then).
    """

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        on_stderr: Callable[[str], None] | None = None,
    ) -> None:
        self.argv = argv
        self.env = dict(env)
        self.on_stderr = on_stderr
        self._process: Process | None = None
        #: whether its stdin still takes lines
        self.input_open = False
        self._write_lock = anyio.Lock()

    async def start(self) -> None:
        """Start the process.

        Raises:
            OSError: it cannot be started.
        """
        self._process = await anyio.open_process(
            self.argv, stdin=PIPE, stdout=PIPE, stderr=PIPE, env=self.env
        )
        self.input_open = True

    @property
    def returncode(self) -> int | None:
        """Its exit code once it has ended (negative: the signal that ended it)."""
        return self._process.returncode if self._process is not None else None

    async def send(self, line: bytes) -> bool:
        """Write one line to its stdin; ``False`` if the input is closed (or broke)."""
        process = self._process
        if process is None or process.stdin is None or not self.input_open:
            return False
        async with self._write_lock:
            try:
                await process.stdin.send(line if line.endswith(b"\n") else line + b"\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                self.input_open = False
                return False
        return True

    async def end_input(self) -> None:
        """Close its stdin: the CLI ends its session once its turn and its agents are done."""
        process = self._process
        if process is None or process.stdin is None or not self.input_open:
            return
        self.input_open = False
        async with self._write_lock:
            with contextlib.suppress(Exception):
                await process.stdin.aclose()

    async def lines(self) -> AsyncIterator[bytes]:
        """Its stdout, line by line (without the newline, blank lines left out), until it
        closes."""
        if self._process is not None and self._process.stdout is not None:
            async for line in _lines_of(self._process.stdout):
                if line.strip():
                    yield line

    async def pump_stderr(self) -> None:
        """Pass every stderr line on until it closes."""
        if self._process is not None and self._process.stderr is not None:
            async for line in _lines_of(self._process.stderr):
                if self.on_stderr is not None:
                    self.on_stderr(line.decode("utf-8", "replace") + "\n")

    def signal(self, signum: signal.Signals) -> None:
        """Send it ``signum`` (a stop signal the app sent us), if it still runs."""
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)

    async def stop(self) -> None:
        """End it, bounded, however it stands: input closed, then SIGTERM, then SIGKILL;
        always reaped. Shielded: it runs to its end inside a cancelled scope too."""
        process = self._process
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            await self.end_input()
            for grace, then in ((_EXIT_GRACE_S, process.terminate), (_TERM_GRACE_S, process.kill)):
                with anyio.move_on_after(grace):
                    await process.wait()
                    return
                with contextlib.suppress(ProcessLookupError):
                    then()
            await process.wait()


async def _lines_of(stream: ByteReceiveStream) -> AsyncIterator[bytes]:
    """``stream``'s lines until it ends (a line over :data:`MAX_MESSAGE_BYTES` ends it)."""
    buffered = BufferedByteReceiveStream(stream)
    while True:
        try:
            yield await buffered.receive_until(b"\n", MAX_MESSAGE_BYTES)
        except (
            anyio.IncompleteRead,
            anyio.EndOfStream,
            anyio.ClosedResourceError,
            anyio.DelimiterNotFound,
        ):
            return
