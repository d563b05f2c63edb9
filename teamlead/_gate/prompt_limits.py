"""The limits a strategy prompt states, taken from the limits the spawn gate enforces.

``teamlead ask`` and every experiment trial render the strategy with these values, so the
numbers the model reads ("at most 3 agents running at once") are the numbers the gate holds
it to.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..policy import SpawnPolicy
from ..prompts import DEFAULT_MAX_AGENTS_PER_TURN, DEFAULT_MAX_CONCURRENT_AGENTS, default_values
from .slots import cli_subagent_cap

__all__ = ["prompt_limits"]


def prompt_limits(spawn: SpawnPolicy, env: Mapping[str, str]) -> dict[str, str]:
    """The strategy prompt's limit placeholders for a run with ``spawn`` and CLI ``env``.

    A limit the user set is stated as is. Otherwise the prompt keeps its advice (at most
    4 at once, 4 per message), never above what the gate enforces: the CLI's cap and the
    spawn budget. ``{agent_roster}`` is left out: :func:`~teamlead.prompts.apply_strategy`
    lists the agents actually registered.

    Example:
        >>> prompt_limits(SpawnPolicy(max_concurrent_agents=3), {})["max_concurrent_agents"]
        '3'
        >>> prompt_limits(SpawnPolicy(), {"CLAUDE_CODE_MAX_CONCURRENT_SUBAGENTS": "2"})
        {'max_concurrent_agents': '2', 'max_agents_per_turn': '2'}
    """
    user = spawn if spawn.enabled else SpawnPolicy()  # a gate that is off sets no limit
    cli = cli_subagent_cap(env)
    concurrent = min(cli, user.max_concurrent_agents or DEFAULT_MAX_CONCURRENT_AGENTS)
    enforced = min(cli, user.max_concurrent_agents or cli)
    per_turn = min(enforced, user.max_agents_per_turn or DEFAULT_MAX_AGENTS_PER_TURN)
    if user.spawn_budget is not None:
        per_turn = min(per_turn, max(1, user.spawn_budget))
    values = default_values(max_concurrent_agents=concurrent, max_agents_per_turn=per_turn)
    values.pop("agent_roster")
    return values
