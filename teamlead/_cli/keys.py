"""Single keys from the terminal while a run goes: approval answers and live control.

:func:`cbreak` puts the terminal in cbreak mode for the run (keys arrive at once, unechoed;
Ctrl-C still sends SIGINT) and restores it however the run ends. :func:`read_keys` hands
each key to a :class:`KeyMap`: while an approval prompt is in front, ``y``/``n``/``a``
answer it; otherwise the live-control bindings act. Other keys and escape sequences are
ignored.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from .approvals import ApprovalQueue

__all__ = ["Binding", "KeyMap", "cbreak", "decode_keys", "read_keys", "terminal_fd"]

#: The approval answers and what the hint calls them.
APPROVAL_KEYS: tuple[tuple[str, str], ...] = (
    ("y", "allow"),
    ("n", "deny"),
    ("a", "always (this agent, this tool)"),
)

_NAMED = {"\t": "tab", "\r": "enter", "\n": "enter", " ": "space"}


def terminal_fd(stream: IO[str] | None) -> int | None:
    """The file descriptor of ``stream`` when it is a terminal, else ``None``."""
    if stream is None:
        return None
    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):  # no descriptor, or a closed stream
        return None
    return fd if os.isatty(fd) else None


@contextlib.contextmanager
def cbreak(stream: IO[str] | None) -> Iterator[int | None]:
    """Cbreak mode on ``stream``'s terminal for the block; yields its fd, ``None`` if no tty.

    The saved attributes are put back however the block ends.
    """
    fd = terminal_fd(stream)
    if fd is None:
        yield None
        return
    import termios
    import tty

    try:
        saved = termios.tcgetattr(fd)
    except termios.error:  # a terminal that refuses its attributes: read no keys
        yield None
        return
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        yield fd
    finally:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def decode_keys(data: bytes) -> list[str]:
    """The keys in one read: characters as themselves, tab/enter/space by name,
    ``backtab`` for shift-tab; other escape sequences, and keys pressed with Alt (ESC and
    the key), are dropped."""
    text = data.decode("utf-8", errors="ignore")
    keys: list[str] = []
    at = 0
    while at < len(text):
        char = text[at]
        if char == "\x1b":
            if text.startswith("\x1b[Z", at):
                keys.append("backtab")
                at += 3
                continue
            at += 1  # ESC [ or ESC O, then parameters, then one final letter or ~
            if at < len(text) and text[at] in "[O":
                at += 1
                while at < len(text) and not (text[at].isalpha() or text[at] == "~"):
                    at += 1
            at += 1  # the final letter, or the key an Alt press sent after ESC
            continue
        if char in _NAMED:
            keys.append(_NAMED[char])
        elif char.isprintable():
            keys.append(char)
        at += 1
    return keys


@dataclass(frozen=True)
class Binding:
    """A live-control key: the keys that trigger it, the hint's words (a text, or a
    function giving the current one, e.g. with the cap now), and the action."""

    keys: tuple[str, ...]
    hint: str | Callable[[], str]
    action: Callable[[], None]


class KeyMap:
    """Dispatch keys: ``y``/``n``/``a`` answer the approval prompt in front (and do nothing
    when none is shown); every other key goes to the live-control bindings.

    Args:
        approvals: the run's approval queue (``None`` when nothing is ever asked).
        bindings: the live-control keys.
    """

    def __init__(
        self, approvals: ApprovalQueue | None = None, bindings: Sequence[Binding] = ()
    ) -> None:
        self.approvals = approvals
        self.bindings: list[Binding] = []
        self.bind(*bindings)

    def bind(self, *bindings: Binding) -> None:
        """Add live-control keys.

        Raises:
            ValueError: one of them is ``y``, ``n`` or ``a``, which answer approval prompts.
        """
        taken = [key for b in bindings for key in b.keys if key in ("y", "n", "a")]
        if taken:
            raise ValueError(f"the keys {taken} answer approval prompts; bind others")
        self.bindings += bindings

    def press(self, key: str) -> bool:
        """Act on ``key``; ``False`` when it means nothing now."""
        if key in ("y", "n", "a"):  # only ever answers: no binding may use these keys
            if self.approvals is None or self.approvals.front is None:
                return False
            return self.approvals.answer(key)  # type: ignore[arg-type]
        for binding in self.bindings:
            if key in binding.keys:
                binding.action()
                return True
        return False

    def hint(self) -> str:
        """The one-line hint for what the keys do now: the answers while a prompt is in
        front, else the live-control keys."""
        pairs = tuple(
            ("/".join(b.keys), b.hint() if callable(b.hint) else b.hint) for b in self.bindings
        )
        if self.approvals is not None and self.approvals.front is not None:
            pairs = APPROVAL_KEYS  # the other keys still act; the line stays one line
        return "keys: " + " · ".join(f"{key} {what}" for key, what in pairs) if pairs else ""


async def read_keys(fd: int, keymap: KeyMap, *, on_key: Callable[[], None] = lambda: None) -> None:
    """Read keys from ``fd`` until end of input (or cancellation), dispatching each.

    ``on_key`` runs after each read that acted (to re-render the view).
    """
    while True:
        await anyio.wait_readable(fd)
        try:
            data = os.read(fd, 256)
        except BlockingIOError:
            continue
        except OSError:  # the terminal went away
            return
        if not data:
            return
        acted = False
        for key in decode_keys(data):
            acted = keymap.press(key) or acted
        if acted:
            on_key()
