"""The run context's :class:`Delivered` part: what collection (:mod:`.collect`) found and
handed to the lead, and the :class:`~.ledger.Ledger` its ``Finished`` is made from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from .._claude import Team
from .ending import AgentEnd
from .ledger import Ledger
from .resume_prompt import Delivery

__all__ = ["Collected", "CutResult", "Delivered", "Member", "MemberStatus"]

MemberStatus: TypeAlias = Literal["pending", "reported"]


@dataclass
class Member:
    """A teammate of the session's team and whether it has reported."""

    name: str
    status: MemberStatus = "pending"
    detail: str = ""
    failed: bool = False


@dataclass(frozen=True)
class CutResult:
    """A workflow's result the CLI cut in the lead's notification: the lead saw its head.

    Attributes:
        shown: what the lead was shown of the result.
        cut: how many characters the CLI's note says it left out.
        rest: how many characters of the result teamlead delivered in its place.
        results: each finished agent's result by agent id, as it reads inside the
            workflow's result (to tell which part of it each one was in).
    """

    shown: str
    cut: int
    rest: int
    results: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class Collected:
    """What the run has collected and delivered; only :mod:`.collect` changes it.

    Attributes:
        deliveries: every result collected, by key (``task:<id>``, ``inbox:<key>``).
        absorbed: the keys of deliveries a successful lead turn used.
        members: the session's teammates, by name.
        seen_inbox_keys: inbox entries already turned into deliveries.
        ambiguous_team: why the session's team is unproven (several teams claim it); such
            a run never reports ``completed``.
        team: the session's team, once found.
        waited_s: the part of ``Policy.wait_s`` (one budget per run) already spent.
        logged: inbox warnings already logged, so each is shown once.
        cuts: the workflow results the CLI cut in the lead's notification, by task id;
            the rest of each is the delivery ``task:<id>``.
        ends: how each ended task's agent ended, by task id, with the end (the tracker's
            ``ended_seq``) it was judged at: a task that ends again is judged again.
        continue_asks: how often a resume prompt asked the lead to continue each task
            stopped at a limit, by task id.
        unread: the deliveries a resume prompt handed over partly by path (it quoted their
            head and tail) whose file the lead never read, by key, with the path: never
            counted as used.
        delivered_ends: the end (the tracker's ``ended_seq``) each task's delivery
            ``task:<id>`` was made of: a task that ends again (it was continued) is
            delivered again.
    """

    deliveries: dict[str, Delivery] = field(default_factory=dict)
    absorbed: set[str] = field(default_factory=set)
    members: dict[str, Member] = field(default_factory=dict)
    seen_inbox_keys: set[str] = field(default_factory=set)
    ambiguous_team: str | None = None
    team: Team | None = None
    waited_s: float = 0.0
    logged: set[str] = field(default_factory=set)
    cuts: dict[str, CutResult] = field(default_factory=dict)
    ends: dict[str, tuple[int | None, AgentEnd]] = field(default_factory=dict)
    continue_asks: dict[str, int] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)
    delivered_ends: dict[str, int | None] = field(default_factory=dict)

    def missing_lines(self) -> list[str]:
        """The teammates the resume prompt names as not reported or failed."""
        lines = [
            f'teammate "{m.name}" has not reported'
            for m in self.members.values()
            if m.status == "pending"
        ]
        lines += [
            f'teammate "{m.name}" failed: {m.detail}' for m in self.members.values() if m.failed
        ]
        return lines


@dataclass
class Delivered:
    """What the run collected and delivered, and the bookkeeping of its result.

    Attributes:
        collected: what was collected and delivered (only :mod:`.collect` changes it).
        ledger: the bookkeeping :class:`~teamlead.events.Finished` is made from.
    """

    collected: Collected = field(default_factory=Collected)
    ledger: Ledger = field(default_factory=Ledger)
