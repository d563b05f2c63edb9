"""The person's side of one ``teamlead ask`` run: the approval queue, the keys, the hint.

:func:`controls_for` decides once, before the run, who answers a permission request: in
the modes that ask (``default``, ``acceptEdits``), an :class:`~.approvals.ApprovalQueue`,
answered by key at a terminal (not ``--json``), else denying at once; in other modes
nothing asks. :class:`Controls` holds that choice for
:func:`~teamlead._cli.running.run_session` and shows the prompt and key hint at the foot
of the live view.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from claude_agent_sdk import CanUseToolShadowedWarning
from claude_agent_sdk.types import CanUseTool

from .._redact import terminal_safe
from .._run import labels_from
from ..clock import SYSTEM_CLOCK
from ..control import RunControl
from ..errors import AmendRefused
from ..tracker import StreamParse
from .approvals import ASKING_MODES, ApprovalQueue
from .focus import AgentFocus, Focus
from .keys import Binding, KeyMap, read_keys, terminal_fd
from .options import Output

__all__ = ["Controls", "controls_for", "live_bindings"]

_FOCUS_TTL_S = 1.0


class Controls:
    """The approval queue and the key map of one run.

    Args:
        approvals: the queue of permission requests, when any are asked.
        stdin: the terminal keys are read from (``None``: no keys are read).
    """

    def __init__(
        self,
        *,
        approvals: ApprovalQueue | None = None,
        stdin: IO[str] | None = None,
    ) -> None:
        self.approvals = approvals
        self.stdin = stdin
        self.keymap = KeyMap(approvals)
        self.focus: Focus | None = None  # the agents' last calls and lines, when keys are read
        self._focus_dir: Path | None = None
        self._wants_focus = False  # the focus is made at attach, on the run's parse
        self.focused: str | None = None  # the agent in focus (``f``/Tab), if any
        self._focus_cache: tuple[str, float, AgentFocus | None] | None = None
        self._progress: Any = None
        self._stderr: IO[str] = sys.stderr
        self._shown: str | None = None

    @property
    def interactive(self) -> bool:
        """Whether keys are read (a person at a terminal answers)."""
        return self.stdin is not None and terminal_fd(self.stdin) is not None

    def can_use_tool(self) -> CanUseTool | None:
        """The ``can_use_tool`` of this run, for its options (``None`` when nothing asks)."""
        if self.approvals is None:
            return None
        # an --allowed-tools entry that allows a whole tool means "do not ask me about it":
        # the SDK's warning that it shadows the callback says what the user asked for
        warnings.filterwarnings("ignore", category=CanUseToolShadowedWarning)
        return self.approvals.can_use_tool

    def follow_agents(self, config_dir: Path | None) -> None:
        """Focus on one agent at a time (``f``/Tab), finding transcripts under ``config_dir``."""
        self._wants_focus, self._focus_dir = True, config_dir
        self.keymap.bind(
            Binding(("f", "tab"), "focus", self.move_focus),
            Binding(("F", "backtab"), "back", lambda: self.move_focus(-1)),
        )

    def attach(self, progress: Any, run: StreamParse, stderr: IO[str]) -> None:
        """Connect to the run's progress output and its parse of the stream (before the run
        starts): the approvals' labels and the focus read the run's own tracker."""
        self._progress = progress
        self._stderr = stderr
        if self._wants_focus:
            self.focus = Focus(run, self._focus_dir)
        if self.approvals is not None:
            self.approvals.label_for = labels_from(run)
            if progress is not None:
                self.approvals.on_decision = progress.handle
            self.approvals.on_change = self._changed
            self.approvals.say = self.say
        if hasattr(progress, "footer"):
            progress.footer = self.footer

    def feed(self, item: Any) -> None:
        """Follow one stream item (for the focus on one agent)."""
        if self.focus is not None:
            self.focus.feed(item)

    def move_focus(self, step: int = 1) -> None:
        """Focus the next agent (``step`` -1: the one before); past the last one, none."""
        if self.focus is None:
            return
        agents = self.focus.agents
        if not agents:  # the run has no agent yet: nothing to focus
            self.focused = None
            return
        edge = agents[-1] if step >= 0 else agents[0]
        if self.focused is not None and self.focused == edge:
            self.focused = None
        else:
            self.focused = self.focus.next_agent(self.focused, step)
        self._focus_cache = None

    def focus_lines(self) -> list[tuple[str, str]]:
        """The focused agent's last tool calls and lines (plain text; the view escapes it)."""
        if self.focus is None or self.focused is None:
            return []
        now = SYSTEM_CLOCK.monotonic()
        cached = self._focus_cache
        if cached is not None and cached[0] == self.focused and now - cached[1] < _FOCUS_TTL_S:
            seen = cached[2]
        else:  # a workflow agent's comes from its transcript: read at most once a second
            seen = self.focus.of(self.focused)
            self._focus_cache = (self.focused, now, seen)
        if seen is None:
            return [(f"focus: agent {self.focused[:12]} (nothing seen yet)", "cyan")]
        kind = "workflow agent" if seen.kind == "workflow_agent" else "agent"
        head = f"focus [{seen.description or seen.agent_id[:12]}] {kind}, {seen.status}"
        lines = [(head if seen.source != "none" else head + " (nothing seen yet)", "bold cyan")]
        for call in seen.calls:
            lines.append((f"  {call.name}: {call.summary} ({call.outcome})", "cyan"))
        for text in seen.lines[-3:]:
            lines.append((f"  | {text}", "dim cyan"))
        return lines

    def footer(self) -> list[tuple[str, str]]:
        """The lines at the foot of the live view: the prompt in front, the focused agent,
        then the key hint."""
        lines: list[tuple[str, str]] = []
        prompt = self.approvals.prompt() if self.approvals is not None else None
        if prompt is not None:
            lines.append((f"approve? {prompt}", "bold yellow"))
        lines.extend(self.focus_lines())
        hint = self.keymap.hint() if self.interactive else ""
        if hint:
            lines.append((hint, "dim"))
        return lines

    async def read_keys(self) -> None:
        """Read and dispatch keys until the run ends (returns at once without a terminal)."""
        fd = terminal_fd(self.stdin)
        if fd is not None:
            await read_keys(fd, self.keymap, on_key=self._changed)

    def close(self) -> None:
        """The run ends or is stopped: what still waits for an answer is denied."""
        if self.approvals is not None:
            self.approvals.close()

    # -- internals ---------------------------------------------------------------------------
    def say(self, line: str) -> None:
        """One line of teamlead's own: in the view's log, else on stderr."""
        note: Callable[[str], None] | None = getattr(self._progress, "note", None)
        if note is not None:
            note(line)
        else:
            self._stderr.write(terminal_safe(line) + "\n")
            self._stderr.flush()

    def _changed(self) -> None:
        refresh = getattr(self._progress, "refresh", None)
        if callable(refresh):
            refresh()
            return
        if self.approvals is None:  # no live view: the prompt is a line on stderr
            return
        prompt = self.approvals.prompt()
        if prompt is not None and prompt != self._shown:
            hint = self.keymap.hint()
            self._stderr.write(f"teamlead: approve? {prompt}  [{hint}]\n")
            self._stderr.flush()
        self._shown = prompt


def controls_for(
    permission_mode: str | None,
    output: Output,
    *,
    stdin: IO[str] | None = None,
    stderr: IO[str] | None = None,
    wait_limit_s: float = 1800.0,
    control: RunControl | None = None,
    config_dir: Path | None = None,
) -> Controls:
    """The controls of a run: an approval queue in a mode that asks (answered at a terminal,
    else denying at once), none in a mode that never asks; and, at a terminal, the
    live-control keys of ``control`` and the focus on one agent (whose transcripts are
    found under ``config_dir``)."""
    stdin = sys.stdin if stdin is None else stdin
    stderr = sys.stderr if stderr is None else stderr
    at_terminal = (
        output != "json" and terminal_fd(stdin) is not None and terminal_fd(stderr) is not None
    )
    queue = ApprovalQueue(wait_limit_s=wait_limit_s, at_terminal=at_terminal)
    controls = Controls(
        approvals=queue if permission_mode in ASKING_MODES else None,
        stdin=stdin if at_terminal else None,
    )
    if at_terminal and control is not None:
        controls.keymap.bindings.extend(live_bindings(control, controls.say))
    if at_terminal and output != "quiet":  # the focus is shown in the live view only
        controls.follow_agents(config_dir)
    return controls


#: The subagent models ``m`` cycles through after the run's own (aliases the CLI knows).
MODEL_CYCLE = ("haiku", "sonnet", "opus")


def live_bindings(control: RunControl, say: Callable[[str], None]) -> list[Binding]:
    """``+``/``-`` raise and lower the agent cap, ``m`` cycles the subagent model of the
    agents not yet started. A refused change (the cap at its bound, no run yet) is said in
    one line; an applied one comes back as the run's ``run_amended`` event."""

    def attempt(change: Callable[[], object]) -> None:
        try:
            change()
        except AmendRefused as exc:
            say(f"not changed: {exc}")

    def next_model() -> None:
        default, now = control.default_subagent_model, control.subagent_model
        cycle = [None, *(m for m in MODEL_CYCLE if m != default)]
        at = cycle.index(now) if now in cycle and now != default else 0
        attempt(lambda: control.set_subagent_model(cycle[(at + 1) % len(cycle)]))

    def cap_hint() -> str:
        return f"cap up ({control.cap})" if control.cap is not None else "cap up"

    return [
        Binding(("+",), cap_hint, lambda: attempt(control.raise_cap)),
        Binding(("-",), "down", lambda: attempt(control.lower_cap)),
        Binding(("m",), lambda: f"model ({control.subagent_model or 'their own'})", next_model),
    ]
