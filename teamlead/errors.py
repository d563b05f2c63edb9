"""The errors teamlead raises: a small tree with fields.

::

    TeamleadError                 base; catch this to catch everything teamlead raises
    ├── UsageError                the user's fix: bad option, spec, prompt file, scenario
    │   ├── AmendRefused          a run-control amend that changes nothing or cannot apply
    │   └── AmbiguousRun          a run id prefix that names several runs (``ref``, ``matches``)
    ├── NoSuchRun                 no live run of yours is named so (``ref``, ``why``)
    ├── ControlError              a run's control endpoint refused or failed (``code``), or
    │                             the runtime directory of the runs cannot be used
    ├── SetupError                the environment: CLI missing or not starting, no API setup,
    │                             a base URL off loopback, a port in use, an
    │                             ANTHROPIC_BASE_URL that refuses, does not resolve or fails TLS
    ├── InboxError                a team-lead inbox could not be read or consumed safely
    ├── ResumeError               re-querying the lead failed (``session_id``, ``attempt``)
    ├── BudgetExceeded            a policy limit (cost, rounds, deadline) stopped the work
    ├── GovernorCleared           the concurrency governor was cleared while a caller waited
    ├── RelayError                the loopback request relay could not start (run direct)
    └── SessionStoreError         a session store could not be reached or failed (``store``);
                                  a run warns in one line and goes on with the local files

The CLI maps each to one line on stderr and an exit code; none of them shows a traceback.

Example:
    >>> try:
    ...     raise ResumeError("resume failed: 529 overloaded", session_id="abc", attempt=2)
    ... except TeamleadError as exc:
    ...     print(exc, exc.session_id)
    resume failed: 529 overloaded abc
"""

from __future__ import annotations

__all__ = [
    "AmbiguousRun",
    "AmendRefused",
    "ControlError",
    "NoSuchRun",
    "BudgetExceeded",
    "GovernorCleared",
    "RelayError",
    "InboxError",
    "ResumeError",
    "SessionStoreError",
    "SetupError",
    "TeamleadError",
    "UsageError",
]


class TeamleadError(Exception):
    """Base class of every error teamlead raises on purpose."""


class UsageError(TeamleadError):
    """Bad input the user can fix: an option, a spec file, a prompt file, a scenario name."""


class AmendRefused(UsageError):
    """A :meth:`teamlead.RunControl.amend` that was not applied: it changes nothing, a value
    is out of range, or no run is using the control. The run goes on unchanged.

    Attributes:
        field: the field at fault (``cap``, ``subagent_model``), or ``None`` for the
            amend as a whole.

    Example:
        >>> try:
        ...     control.lower_cap()  # doctest: +SKIP
        ... except teamlead.AmendRefused as exc:
        ...     print(exc)
        the cap is already 1, the lowest it goes
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class AmbiguousRun(UsageError):
    """A run id or session id prefix that names more than one live run.

    Attributes:
        ref: what was typed.
        matches: the run ids it names.

    Example:
        >>> raise AmbiguousRun("3f", ["3f0a9c1d22b4", "3fe01b77aa10"])  # doctest: +SKIP
    """

    def __init__(self, ref: str, matches: list[str]) -> None:
        names = ", ".join(matches[:5]) + (" ..." if len(matches) > 5 else "")
        super().__init__(f"{ref!r} names {len(matches)} runs ({names}): give more of the id")
        self.ref = ref
        self.matches = matches


class NoSuchRun(TeamleadError):
    """No live run of this user is named ``ref`` (or, for ``teamlead show``, no finished
    run the run history keeps).

    Attributes:
        ref: the run id, session id or prefix asked for.
        why: ``none`` (nothing is named so), ``finished`` (it ended, or ended while asked),
            ``not_yours`` (it belongs to another user), ``running`` (``show``: it has not
            finished yet).

    Example:
        >>> try:
        ...     teamlead_stop("0123")  # doctest: +SKIP
        ... except NoSuchRun as exc:
        ...     print(exc.why)
        none
    """

    def __init__(self, message: str, *, ref: str, why: str = "none") -> None:
        super().__init__(message)
        self.ref = ref
        self.why = why


class ControlError(TeamleadError):
    """A run's control endpoint refused a request or could not be reached, or the runtime
    directory the runs register in cannot be used.

    Attributes:
        code: why, as a code: ``refused`` (the request changes nothing or cannot apply),
            ``state`` (the run is not in a state for it: already paused, not paused,
            stopping), ``unreachable`` (the endpoint does not answer), ``bad_request``,
            ``busy``, ``directory`` (the runtime directory).
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class SetupError(TeamleadError):
    """The environment is not ready: the CLI is missing or fails to start, and the like."""


class InboxError(TeamleadError):
    """A team-lead inbox could not be read or consumed safely.

    Attributes:
        path: the inbox file concerned, when known.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ResumeError(TeamleadError):
    """Re-querying the lead with ``resume=session_id`` failed.

    Attributes:
        session_id: the session that could not be resumed; resume it later by hand.
        attempt: the 1-based attempt that failed last.
    """

    def __init__(self, message: str, *, session_id: str | None, attempt: int) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.attempt = attempt


class BudgetExceeded(TeamleadError):
    """A policy limit stopped the work.

    Attributes:
        limit: which limit: ``"cost"``, ``"resumes"`` or ``"deadline"``.
    """

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class GovernorCleared(TeamleadError):
    """Raised in every caller still waiting for a slot when ``Governor.clear`` runs.

    Example:
        >>> try:
        ...     slot = await governor.acquire("anthropic/claude-opus-5-5")  # doctest: +SKIP
        ... except GovernorCleared:
        ...     return  # the run is shutting down
    """


class RelayError(TeamleadError):
    """The loopback relay could not start; callers run direct with a one-line warning.

    Example:
        >>> try:
        ...     async with RelayPool().run(upstream) as relay:  # doctest: +SKIP
        ...         ...
        ... except RelayError as exc:
        ...     print(f"warning: {exc}; running without the relay")
    """


class SessionStoreError(TeamleadError):
    """A session store (``teamlead.open_session_store``) could not be reached, or failed.

    What a store *holds* never raises (an unreadable entry is skipped with one warning);
    this is the store itself failing. A run that meets it warns in one line and goes on
    with the local files.

    Attributes:
        store: where the store is (its URL, without a password).

    Example:
        >>> try:
        ...     await store.load(key)  # doctest: +SKIP
        ... except teamlead.SessionStoreError as exc:
        ...     print(f"warning: {exc}; using the local files")
    """

    def __init__(self, message: str, *, store: str) -> None:
        super().__init__(message)
        self.store = store
