"""Live control of a running fan-out: its agent cap and its subagent model.

A :class:`RunControl` passed to :func:`teamlead.run`, :func:`teamlead.resume_session` or
:class:`teamlead.ClientRun` reads and changes those two limits while the run goes
(:meth:`RunControl.amend`). The cap applies to the next admissions (never above the CLI's
own subagent cap, fixed when it starts), the subagent model to agents that have not
started; how each reaches the CLI, the workflow engine and the relay is in
docs/runtime-control.md.

The control amends the run's :class:`~teamlead._gate.admission.Admission`, nothing else: a
run takes it with :meth:`RunControl.serve` and holds the :class:`ControlLease` until it
ends. Every applied amend is a :class:`~teamlead.events.RunAmended` event in the run's
stream. The control may be called from the run's event loop or from any other thread: the
change is applied on the run's loop.

Example:
    >>> control = teamlead.RunControl()  # doctest: +SKIP
    >>> async for item in teamlead.run("Audit", opts, control=control):  # doctest: +SKIP
    ...     if too_busy():
    ...         control.amend(cap=2, subagent_model="claude-haiku-5-5")
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import anyio.from_thread
import anyio.lowlevel

from .errors import AmendRefused
from .events import AmendField, RunAmended

if TYPE_CHECKING:
    from ._gate import Admission

__all__ = ["UNSET", "ControlLease", "RunControl", "Unset"]


class Unset(enum.Enum):
    """The type of :data:`UNSET`: a field an amend leaves as it is."""

    UNSET = "unset"


#: An amend field left out: it changes nothing (the default of every field).
UNSET: Final = Unset.UNSET

_MAX_MODEL = 200


class RunControl:
    """A handle on one run's live limits (see the module docstring).

    Make one, pass it as ``control=`` to :func:`teamlead.run`,
    :func:`teamlead.resume_session` or :class:`teamlead.ClientRun`, and call it while the
    run goes. One control serves one run at a time; it can serve the next one after.
    Reading a value before the run starts (or without the spawn gate, for the cap) gives
    ``None``.

    Example:
        >>> control = RunControl()
        >>> control.cap is None  # no run yet
        True
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._run: ControlLease | None = None
        self._cap: int | None = None
        self._model: str | None = None

    # -- what it reads -----------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """Whether a run is using this control now."""
        with self._lock:
            return self._run is not None and not self._run.ended

    @property
    def cap(self) -> int | None:
        """The run's agent cap now (``None``: no run, or no spawn gate)."""
        with self._lock:
            return self._cap

    @property
    def default_cap(self) -> int | None:
        """The cap the run started with (what ``amend(cap=None)`` restores)."""
        with self._lock:
            return self._run.default_cap if self._run is not None else None

    @property
    def max_cap(self) -> int | None:
        """The highest cap this run can take (the CLI's own subagent cap, fixed at start)."""
        with self._lock:
            return self._run.admission.most if self._run is not None else None

    @property
    def subagent_model(self) -> str | None:
        """The model agents that start from now on run on (``None``: their own)."""
        with self._lock:
            return self._model

    @property
    def default_subagent_model(self) -> str | None:
        """The subagent model the run started with (what ``subagent_model=None`` restores)."""
        with self._lock:
            return self._run.default_model if self._run is not None else None

    # -- what it changes ---------------------------------------------------------------------
    def amend(
        self,
        *,
        cap: int | None | Unset = UNSET,
        subagent_model: str | None | Unset = UNSET,
    ) -> RunAmended:
        """Change the run's live limits, each field in one of three states: left out, it
        changes nothing; ``None`` restores the value the run started with; a value sets it.

        Args:
            cap: agents running at once, every kind (1 up to :attr:`max_cap`).
            subagent_model: the model of agents that start from now on.

        Returns:
            The :class:`~teamlead.events.RunAmended` event, also in the run's stream.

        Raises:
            AmendRefused: the amend changes nothing, a value is out of range, the run has no
                spawn gate (for ``cap``), or no run is using this control.

        Example:
            >>> control.amend(cap=2)  # doctest: +SKIP
            >>> control.amend(cap=None, subagent_model="claude-haiku-5-5")  # doctest: +SKIP
        """
        with self._lock:
            run = self._run
            if run is None or run.ended:
                raise AmendRefused("no run is using this control now; nothing was changed")
            new_cap, new_model = self._cap, self._model
            if not isinstance(cap, Unset):
                new_cap = self._checked_cap(run, cap)
            if not isinstance(subagent_model, Unset):
                new_model = _checked_model(run, subagent_model)
            changed: list[AmendField] = []
            if new_cap != self._cap:
                changed.append("cap")
            if new_model != self._model:
                changed.append("subagent_model")
            if not changed:
                raise AmendRefused(_unchanged(cap, subagent_model, self._cap, self._model))
            event = RunAmended(
                changed=changed,
                cap=new_cap,
                previous_cap=self._cap,
                default_cap=run.default_cap,
                subagent_model=new_model,
                previous_subagent_model=self._model,
                default_subagent_model=run.default_model,
                at=_now(run),
            )
            self._cap, self._model = new_cap, new_model
        self._apply(run, event)
        return event

    def raise_cap(self, by: int = 1) -> RunAmended:
        """Let ``by`` more agents run at once (at most :attr:`max_cap`).

        Raises:
            AmendRefused: the cap is already at its highest, or no run uses the control.
        """
        with self._lock:  # released before the amend: it may wait for the run's loop
            current = self._need_cap()
            most = self.max_cap or current
        if current >= most:
            raise AmendRefused(
                f"the cap is already {current}, the most the CLI allows for this run",
                field="cap",
            )
        return self.amend(cap=min(most, current + max(1, by)))

    def lower_cap(self, by: int = 1) -> RunAmended:
        """Let ``by`` fewer agents run at once (at least 1); running agents go on.

        Raises:
            AmendRefused: the cap is already 1, or no run uses the control.
        """
        with self._lock:
            current = self._need_cap()
        if current <= 1:
            raise AmendRefused("the cap is already 1, the lowest it goes", field="cap")
        return self.amend(cap=max(1, current - max(1, by)))

    def set_subagent_model(self, name: str | None) -> RunAmended:
        """Run agents that have not started on ``name`` (``None``: the run's starting model).

        Raises:
            AmendRefused: that is the model already, or no run uses the control.
        """
        return self.amend(subagent_model=name)

    def _need_cap(self) -> int:
        run = self._run
        if run is None or run.ended:
            raise AmendRefused("no run is using this control now; nothing was changed")
        if self._cap is None:
            raise AmendRefused(_NO_GATE, field="cap")
        return self._cap

    def _checked_cap(self, run: ControlLease, cap: int | None) -> int | None:
        most = run.admission.most
        if most is None:
            raise AmendRefused(_NO_GATE, field="cap")
        if cap is None:
            return run.default_cap
        if isinstance(cap, bool) or not isinstance(cap, int):
            raise AmendRefused(f"the cap must be a whole number, not {cap!r}", field="cap")
        if not 1 <= cap <= most:
            raise AmendRefused(
                f"the cap must be between 1 and {most} (the CLI's own subagent cap), not {cap}",
                field="cap",
            )
        return cap

    def _apply(self, run: ControlLease, event: RunAmended) -> None:
        """Apply ``event`` on the run's loop: at once when called there, else through it."""
        if run.token is None or run.thread == threading.get_ident():
            self._apply_here(run, event)
        else:
            try:
                anyio.from_thread.run_sync(self._apply_here, run, event, token=run.token)
            except RuntimeError:  # the run's loop is gone: the run ended meanwhile
                raise AmendRefused("the run ended before the amend could apply") from None

    def _apply_here(self, run: ControlLease, event: RunAmended) -> None:
        """Put the control's values *now* into the run (so amends racing from two threads
        end with the run on the last one), with the event its admission publishes."""
        with self._lock:
            if run.ended or self._run is not run:
                return
            cap, model = self._cap, self._model
        run.admission.amend(cap=cap, subagent_model=model, event=event)

    # -- the run's side ------------------------------------------------------------------------
    def serve(self, admission: Admission) -> ControlLease:
        """A run starts using this control; teamlead's run calls it (users pass the control
        as ``control=`` instead).

        Args:
            admission: the run's admission, which every amend changes (and which publishes
                each applied amend's event to the run's stream).

        Returns:
            The run's hold on the control, until :meth:`ControlLease.end`.

        Raises:
            AmendRefused: the control already serves a run that has not ended.
        """
        run = ControlLease(
            self._lock,
            admission=admission,
            default_cap=admission.cap,
            default_model=admission.starting_model,
        )
        with self._lock:
            if self._run is not None and not self._run.ended:
                raise AmendRefused("this RunControl already serves a running run; make one per run")
            self._run = run
            self._cap = run.default_cap
            self._model = run.default_model
        return run


@dataclass(eq=False)
class ControlLease:
    """A run's hold on the :class:`RunControl` that serves it (from :meth:`RunControl.serve`):
    what the control changes in the run; the run binds it to its event loop, and ends it
    when the run ends."""

    lock: threading.RLock
    admission: Admission
    default_cap: int | None
    default_model: str | None
    token: anyio.lowlevel.EventLoopToken | None = None
    thread: int | None = None
    ended: bool = False

    def bind_loop(self) -> None:
        """Called on the run's event loop: amends from other threads are applied through it."""
        with self.lock:
            self.token = anyio.lowlevel.current_token()
            self.thread = threading.get_ident()

    def end(self) -> None:
        """The run ended: later amends are refused; the values read stay the last ones."""
        with self.lock:
            self.ended = True


_NO_GATE = "this run has no spawn gate (SpawnPolicy(enabled=False)), so its cap cannot change"


def _checked_model(run: ControlLease, model: str | None) -> str | None:
    if model is None:
        return run.default_model
    if not isinstance(model, str) or not model.strip():
        raise AmendRefused(
            "the subagent model must be a model name such as claude-haiku-5-5",
            field="subagent_model",
        )
    name = model.strip()
    if len(name) > _MAX_MODEL or any(not c.isprintable() or c.isspace() for c in name):
        raise AmendRefused(
            "the subagent model must be one printable word (a model id or alias)",
            field="subagent_model",
        )
    return name


def _unchanged(
    cap: int | None | Unset, model: str | None | Unset, now_cap: int | None, now_model: str | None
) -> str:
    if isinstance(cap, Unset) and isinstance(model, Unset):
        return "the amend names no field (cap, subagent_model); nothing was changed"
    parts = []
    if not isinstance(cap, Unset):
        parts.append(f"the cap is already {now_cap}")
    if not isinstance(model, Unset):
        parts.append(f"the subagent model is already {now_model or 'their own'}")
    return " and ".join(parts) + ": the amend changes nothing and was refused"


def _now(run: ControlLease) -> float:
    try:
        return run.admission.clock.time()
    except Exception:  # a broken clock must not stop an amend
        return 0.0
