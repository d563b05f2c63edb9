"""Help a person can scan: a command's options under headed sections.

``teamlead ask --help`` has some thirty options; :class:`SectionedCommand` lists them under
a few headings (output, the lead, time and cost, agents, the relay), each once; an option
no section names goes under "Other options", so none is ever hidden. :func:`headed` places
``teamlead --help``'s commands the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import click

__all__ = ["RUN_SECTIONS", "SectionedCommand", "headed"]

#: ``ask`` and ``resume``'s options, by what they are about: a heading, and the parameter
#: names under it in order.
RUN_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (title, tuple(names.split()))
    for title, names in (
        ("Output", "json_ quiet verbose no_history"),
        (
            "The lead",
            "strategy model cwd allowed_tools allow_workflows permission_mode cli_path "
            "session_store",
        ),
        (
            "Time, resumes and cost",
            "deadline_s wait_s max_resumes max_cost wrap_up_reserve_s token_budget request_budget",
        ),
        (
            "Agents (the spawn gate)",
            "max_concurrent_agents max_agents_per_turn spawn_budget stagger_s max_depth "
            "agent_timeout_s subagent_model no_spawn_gate",
        ),
        (
            "Request relay (pacing against the API's limits)",
            "no_relay overload_hold_s limits_shared model_limit provider_limit default_limit "
            "total_limit",
        ),
    )
)


class SectionedCommand(click.Command):
    """A click command whose ``--help`` lists its options under headed sections.

    Args:
        sections: each section's heading and the names of its parameters, in order;
            options no section names follow under "Other options" (``--help`` among them).
    """

    def __init__(
        self, *args: Any, sections: Sequence[tuple[str, Sequence[str]]] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.sections = tuple((title, tuple(names)) for title, names in sections)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {
            param.name: record
            for param in self.get_params(ctx)
            if isinstance(param, click.Option) and (record := param.get_help_record(ctx))
        }
        for title, names in headed(self.sections, records, "Other options"):
            with formatter.section(title):
                formatter.write_dl([records[name] for name in names])


def headed(
    sections: Sequence[tuple[str, Sequence[str]]], names: Iterable[str | None], other: str
) -> list[tuple[str, list[str]]]:
    """``names`` under the headings of ``sections``, in each section's order, those no
    section names under ``other``; a heading with none of them is left out."""
    left = [name for name in names if name is not None]
    found = []
    for title, members in sections:
        shown = [name for name in members if name in left]
        left = [name for name in left if name not in shown]
        found.append((title, shown))
    found.append((other, left))
    return [(title, shown) for title, shown in found if shown]
