"""The default subagents and the roster the strategy prompts show."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from claude_agent_sdk import AgentDefinition

from teamlead import default_agents, render_roster

WRITING_TOOLS = {"Edit", "Write", "MultiEdit", "NotebookEdit"}


def test_the_four_roles_with_their_models_and_tools() -> None:
    agents = default_agents()
    assert list(agents) == ["explorer", "researcher", "code-reviewer", "security-auditor"]
    expected = {
        "explorer": ("haiku", {"Read", "Grep", "Glob", "Bash"}),
        "researcher": ("sonnet", {"WebSearch", "WebFetch", "Read"}),
        "code-reviewer": ("sonnet", {"Read", "Grep", "Glob"}),
        "security-auditor": ("sonnet", {"Read", "Grep", "Glob"}),
    }
    for name, (model, required_tools) in expected.items():
        agent = agents[name]
        assert isinstance(agent, AgentDefinition)
        assert agent.model == model
        assert agent.tools is not None
        assert required_tools <= set(agent.tools)
        assert not WRITING_TOOLS & set(agent.tools), f"{name} must stay read-only"


@pytest.mark.parametrize("name", ["explorer", "researcher", "code-reviewer", "security-auditor"])
def test_each_role_has_a_one_line_description_and_a_short_prompt_that_reports(name: str) -> None:
    agent = default_agents()[name]
    assert "\n" not in agent.description
    assert agent.description.endswith(".")
    assert 3 <= len(agent.prompt.splitlines()) <= 12
    assert "final message is your whole report" in agent.prompt
    assert "Use " in agent.description


def test_explorer_prompt_keeps_bash_read_only() -> None:
    prompt = default_agents()["explorer"].prompt
    assert "Never modify anything" in prompt
    assert "read-only commands" in prompt


def test_definitions_serialise_the_way_the_sdk_sends_them() -> None:
    # The SDK sends {k: v for k, v in asdict(agent).items() if v is not None} to the CLI.
    for agent in default_agents().values():
        sent = {key: value for key, value in asdict(agent).items() if value is not None}
        assert set(sent) == {"description", "prompt", "tools", "model"}


def test_each_call_returns_fresh_definitions() -> None:
    first = default_agents()
    assert first["explorer"].tools is not None
    first["explorer"].tools.append("Write")
    first["explorer"].model = "opus"
    del first["researcher"]
    second = default_agents()
    assert second["explorer"].tools == ["Read", "Grep", "Glob", "Bash"]
    assert second["explorer"].model == "haiku"
    assert "researcher" in second


def test_roster_lists_name_description_and_model_in_order() -> None:
    agents = default_agents()
    lines = render_roster(agents).splitlines()
    assert lines == [
        f"- {name}: {agent.description} (model: {agent.model})" for name, agent in agents.items()
    ]


def test_roster_uses_first_description_line_and_inherit_for_no_model() -> None:
    roster = render_roster(
        {
            "helper": AgentDefinition(description="  Does things.\nDetails here.", prompt="p"),
            "blank": AgentDefinition(description="   ", prompt="p", model="opus"),
        }
    )
    assert roster == (
        "- helper: Does things. (model: inherit)\n- blank: no description (model: opus)"
    )


def test_empty_roster_points_at_the_built_in_agent() -> None:
    assert "built-in general-purpose agent" in render_roster({})
