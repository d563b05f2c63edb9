"""Strategy prompts: loading, front matter, placeholders, applying to options, the wheel."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from claude_agent_sdk import AgentDefinition, ClaudeAgentOptions

from teamlead import default_agents
from teamlead.errors import UsageError
from teamlead.prompts import (
    DEFAULT_MAX_AGENTS_PER_TURN,
    DEFAULT_MAX_CONCURRENT_AGENTS,
    Strategy,
    StrategyMeta,
    apply_strategy,
    default_values,
    list_strategies,
    load_strategy,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("baseline", "delegation", "parallel-first")

FRONT = """---
name: custom
version: 2
description: A test strategy.
intended_use: Tests.
---
"""


def write_prompt(tmp_path: Path, body: str, front: str = FRONT, name: str = "custom.md") -> Path:
    path = tmp_path / name
    path.write_text(front + body, encoding="utf-8")
    return path


def appended(options: ClaudeAgentOptions) -> str:
    """The text a strategy appended to Claude Code's preset prompt."""
    system_prompt = options.system_prompt
    assert isinstance(system_prompt, dict)
    assert system_prompt["type"] == "preset"
    assert system_prompt.get("preset") == "claude_code"
    append = system_prompt.get("append")
    assert isinstance(append, str)
    return append


# -- loading ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_strategy_loads_by_name_from_its_file(name: str) -> None:
    strategy = load_strategy(name)
    assert strategy.name == name == strategy.meta.name
    assert Path(strategy.source).name == f"{name}.md"
    assert strategy.meta.version and strategy.meta.description and strategy.meta.intended_use


def test_load_by_path_as_str_and_as_path(tmp_path: Path) -> None:
    path = write_prompt(tmp_path, "Hello {who}.\n")
    for given in (str(path), path):
        strategy = load_strategy(given)
        assert strategy.meta == StrategyMeta(
            name="custom", version="2", description="A test strategy.", intended_use="Tests."
        )
        assert strategy.source == str(path)
        assert strategy.placeholders == frozenset({"who"})
        assert strategy.render({"who": "lead"}) == "Hello lead."


def test_load_by_path_with_the_same_name_as_a_shipped_one_reads_the_file(tmp_path: Path) -> None:
    front = FRONT.replace("name: custom", "name: delegation")
    path = write_prompt(tmp_path, "Only this.\n", front=front, name="delegation.md")
    assert load_strategy(path).render() == "Only this."


def test_unknown_name_lists_the_known_names() -> None:
    with pytest.raises(UsageError) as info:
        load_strategy("delegate-everything")
    message = str(info.value)
    assert "'delegate-everything'" in message
    for name in SHIPPED:
        assert name in message


def test_missing_file_and_directory_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="strategy file not found: .*nope.md"):
        load_strategy(tmp_path / "nope.md")
    with pytest.raises(UsageError, match="cannot read prompt file"):
        load_strategy(tmp_path)


def test_list_strategies_includes_the_shipped_ones_sorted() -> None:
    metas = list_strategies()
    names = [meta.name for meta in metas]
    assert set(SHIPPED) <= set(names)
    assert names == sorted(names)
    assert all(isinstance(meta, StrategyMeta) for meta in metas)


# -- front matter ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("---\nname: custom\nversion: 1\n", "front matter is not closed"),
        ("---\nname custom\n---\n", "line 2: front matter lines must be 'key: value'"),
        (
            "---\nname: a\nname: b\nversion: 1\ndescription: d\nintended_use: u\n---\n",
            "line 3: duplicate key 'name'",
        ),
        (
            "---\nname: custom\nversion:\ndescription: d\nintended_use: u\n---\n",
            "version: String should have at least 1 character",
        ),
        (
            "---\nname: Has Spaces\nversion: 1\ndescription: d\nintended_use: u\n---\n",
            "name: String should match pattern",
        ),
    ],
)
def test_bad_front_matter_names_the_file_and_the_problem(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "broken.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_strategy(path)
    message = str(info.value)
    assert str(path) in message
    assert expected in message
    assert "\n" not in message


def test_a_plain_body_is_a_strategy_named_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "Terse Arm.md"
    path.write_text("Answer in one sentence; use {max_concurrent_agents} agents at most.\n")
    strategy = load_strategy(path)
    assert strategy.name == "terse-arm"
    assert (strategy.meta.version, strategy.meta.description, strategy.meta.intended_use) == (
        None,
        None,
        None,
    )
    assert strategy.render() == "Answer in one sentence; use 4 agents at most."
    assert strategy.source == str(path) and len(strategy.sha256) == 64
    # Front matter without a name (or other fields) takes the stem too.
    partial = tmp_path / "fast.md"
    partial.write_text("---\nauthor: me\n---\nBe fast.\n")
    loaded = load_strategy(partial)
    assert loaded.name == "fast" and loaded.body_template == "Be fast."
    assert loaded.meta.model_extra == {"author": "me"}
    nameless = tmp_path / "___.md"
    nameless.write_text("Body.\n")
    with pytest.raises(UsageError, match="give it a 'name:'"):
        load_strategy(nameless)


def test_front_matter_accepts_quotes_comments_hyphens_crlf_and_keeps_extra_keys(
    tmp_path: Path,
) -> None:
    text = (
        "---\r\n# a comment\r\nname: \"quoted\"\r\nversion: 1.2\r\n\r\ndescription: 'd: with colon'"
        "\r\nintended-use: u\r\nauthor: someone\r\n---\r\nBody line one.\r\nBody line two.\r\n"
    )
    path = tmp_path / "x.md"
    path.write_bytes(("\ufeff" + text).encode("utf-8"))
    strategy = load_strategy(path)
    assert strategy.meta.name == "quoted"
    assert strategy.meta.version == "1.2"
    assert strategy.meta.description == "d: with colon"
    assert strategy.meta.intended_use == "u"
    assert strategy.meta.model_extra == {"author": "someone"}
    assert strategy.render() == "Body line one.\nBody line two."


def test_non_utf8_file_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.md"
    path.write_bytes(FRONT.encode() + "caf\xe9\n".encode("latin-1"))
    with pytest.raises(UsageError, match="is not UTF-8 text"):
        load_strategy(path)


# -- placeholders and escaping ---------------------------------------------------------------


def test_placeholders_are_filled_over_the_defaults(tmp_path: Path) -> None:
    path = write_prompt(
        tmp_path, "Run {max_concurrent_agents}, send {max_agents_per_turn}, ask {reviewer}.\n"
    )
    strategy = load_strategy(path)
    text = strategy.render({"max_concurrent_agents": 7, "reviewer": "code-reviewer"})
    assert text == f"Run 7, send {DEFAULT_MAX_AGENTS_PER_TURN}, ask code-reviewer."


def test_missing_placeholder_names_the_placeholder_and_the_file(tmp_path: Path) -> None:
    path = write_prompt(tmp_path, "Budget: {budget_usd} dollars.\n")
    strategy = load_strategy(path)
    with pytest.raises(UsageError) as info:
        strategy.render({"max_concurrent_agents": 2})
    message = str(info.value)
    assert "{budget_usd}" in message
    assert str(path) in message
    assert strategy.render({"budget_usd": 1.5}) == "Budget: 1.5 dollars."


def test_double_braces_are_literal_braces(tmp_path: Path) -> None:
    body = 'JSON: {{"agents": {max_concurrent_agents}}} and {{not_a_placeholder}}.\n'
    strategy = load_strategy(write_prompt(tmp_path, body))
    assert strategy.placeholders == frozenset({"max_concurrent_agents"})
    assert strategy.render({"max_concurrent_agents": 3}) == (
        'JSON: {"agents": 3} and {not_a_placeholder}.'
    )


@pytest.mark.parametrize(
    ("body", "token", "line"),
    [
        ("line one\nA lone { brace\n", "'{'", 2),
        ("closing } alone\n", "'}'", 1),
        ("{not a name}\n", "'{'", 1),
        ("{1abc}\n", "'{'", 1),
    ],
)
def test_stray_braces_fail_at_load_with_the_line(
    tmp_path: Path, body: str, token: str, line: int
) -> None:
    path = write_prompt(tmp_path, body)
    with pytest.raises(UsageError) as info:
        load_strategy(path)
    message = str(info.value)
    assert str(path) in message
    assert f"stray {token} on body line {line}" in message
    assert "{{" in message


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_prompts_render_fully_with_defaults(name: str) -> None:
    text = load_strategy(name).render()
    assert "{" not in text
    assert "}" not in text


def test_default_values_reject_bad_limits() -> None:
    values = default_values()
    assert values["max_concurrent_agents"] == str(DEFAULT_MAX_CONCURRENT_AGENTS)
    assert values["max_agents_per_turn"] == str(DEFAULT_MAX_AGENTS_PER_TURN)
    assert "- explorer:" in values["agent_roster"]
    for bad in (0, -1, True):
        with pytest.raises(UsageError, match="max_agents_per_turn must be a positive integer"):
            default_values(max_agents_per_turn=bad)
    with pytest.raises(UsageError, match="max_concurrent_agents must be a positive integer"):
        default_values(max_concurrent_agents="3")  # type: ignore[arg-type]


def test_strategy_built_directly_is_validated_too() -> None:
    meta = StrategyMeta(name="inline", version="1", description="d", intended_use="u")
    with pytest.raises(UsageError, match="stray '}'"):
        Strategy(meta=meta, body_template="oops }", source="<inline>", sha256="0")


# -- sha256 ----------------------------------------------------------------------------------


def test_sha256_is_of_the_raw_file_and_stable(tmp_path: Path) -> None:
    path = write_prompt(tmp_path, "Body.\n")
    first = load_strategy(path)
    assert first.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert load_strategy(path).sha256 == first.sha256
    path.write_text(path.read_text(encoding="utf-8") + "More.\n", encoding="utf-8")
    assert load_strategy(path).sha256 != first.sha256


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_sha256_matches_the_repo_file(name: str) -> None:
    raw = (REPO_ROOT / "prompts" / f"{name}.md").read_bytes()
    assert load_strategy(name).sha256 == hashlib.sha256(raw).hexdigest()


# -- shape of the shipped prompts ------------------------------------------------------------


def body_lines(name: str) -> int:
    return len(load_strategy(name).body_template.strip().splitlines())


def test_shipped_prompt_sizes_match_their_intent() -> None:
    assert load_strategy("baseline").body_template == ""
    assert 60 <= body_lines("delegation") <= 100
    assert 15 <= body_lines("parallel-first") <= 25


def test_delegation_covers_every_topic_of_the_strategy() -> None:
    text = load_strategy("delegation").render().lower()
    for phrase in (
        "explore before editing",
        "research before a technical decision",
        "review after writing code",
        "security-auditor",
        "handful of tool calls",
        "single small file",
        "re-check your own work",
        "`haiku`",
        "`sonnet`",
        "`opus` only for hard architecture",
        "in one message",
        "good, one message",
        "bad:",
        "goal:",
        "context:",
        "constraints:",
        "what to return:",
        "done when:",
        "task notification",
        "one final answer that uses every result",
    ):
        assert phrase in text, phrase


# -- apply_strategy --------------------------------------------------------------------------


def test_baseline_leaves_preset_options_unchanged() -> None:
    options = ClaudeAgentOptions(
        system_prompt={"type": "preset", "preset": "claude_code", "append": "Be brief."},
        agents={"mine": AgentDefinition(description="d", prompt="p")},
        max_turns=5,
    )
    before = dataclasses.replace(options)
    applied = apply_strategy(options, load_strategy("baseline"))
    assert applied == before
    assert applied is not options


def test_baseline_without_options_uses_claude_codes_prompt_and_no_agents() -> None:
    applied = apply_strategy(None, load_strategy("baseline"))
    assert applied.system_prompt == {"type": "preset", "preset": "claude_code"}
    assert applied.agents is None


def test_baseline_keeps_a_replacing_prompt_since_it_adds_nothing() -> None:
    options = ClaudeAgentOptions(system_prompt="You are a pirate.")
    assert apply_strategy(options, load_strategy("baseline")) == options


def test_delegation_appends_filled_limits_and_roster() -> None:
    applied = apply_strategy(
        None,
        load_strategy("delegation"),
        values={"max_concurrent_agents": 3, "max_agents_per_turn": 2},
    )
    append = appended(applied)
    assert "At most 3 agents running at once." in append
    assert "At most 2 Agent calls in one message." in append
    for name, agent in default_agents().items():
        assert f"- {name}: {agent.description} (model: {agent.model})" in append
    assert applied.agents is not None
    assert set(applied.agents) == set(default_agents())


def test_delegation_keeps_the_users_append_and_preset_keys_and_does_not_mutate() -> None:
    user_prompt = {
        "type": "preset",
        "preset": "claude_code",
        "append": "Always run make test.",
        "exclude_dynamic_sections": True,
    }
    options = ClaudeAgentOptions(system_prompt=user_prompt)  # type: ignore[arg-type]
    strategy = load_strategy("delegation")
    applied = apply_strategy(options, strategy)
    append = appended(applied)
    assert append.startswith("Always run make test.\n\n# Delegation strategy")
    assert isinstance(applied.system_prompt, dict)
    assert applied.system_prompt.get("exclude_dynamic_sections") is True
    assert user_prompt["append"] == "Always run make test."
    assert options.system_prompt is user_prompt
    assert options.agents is None

    again = apply_strategy(applied, strategy)
    assert again.system_prompt == applied.system_prompt


def test_users_agents_win_on_a_name_clash_and_are_listed() -> None:
    mine = AgentDefinition(description="My own explorer.", prompt="p", model="sonnet")
    extra = AgentDefinition(description="Writes docs.\nSecond line.", prompt="p")
    user_agents = {"explorer": mine, "doc-writer": extra}
    options = ClaudeAgentOptions(
        system_prompt={"type": "preset", "preset": "claude_code"}, agents=user_agents
    )
    applied = apply_strategy(options, load_strategy("parallel-first"))
    assert applied.agents is not None
    assert applied.agents["explorer"] is mine
    assert applied.agents["doc-writer"] is extra
    assert set(applied.agents) == set(default_agents()) | {"doc-writer"}
    assert user_agents == {"explorer": mine, "doc-writer": extra}
    append = appended(applied)
    assert "- explorer: My own explorer. (model: sonnet)" in append
    assert "- doc-writer: Writes docs. (model: inherit)" in append
    assert "Second line" not in append


def test_without_registering_the_roster_lists_only_what_exists() -> None:
    applied = apply_strategy(None, load_strategy("delegation"), register_agents=False)
    assert applied.agents is None
    append = appended(applied)
    assert "- explorer:" not in append
    assert "no custom agents registered: use the built-in general-purpose agent" in append


def test_explicit_roster_value_wins(tmp_path: Path) -> None:
    applied = apply_strategy(
        None, load_strategy("parallel-first"), values={"agent_roster": "- only: me"}
    )
    append = appended(applied)
    assert append.endswith("Agents you can name in `subagent_type`:\n- only: me")


@pytest.mark.parametrize(
    ("system_prompt", "kind"),
    [
        ("You are a pirate.", "a plain string"),
        ({"type": "custom", "prompt": "You are a pirate."}, "type 'custom'"),
        ({"type": "file", "path": "prompt.txt"}, "type 'file'"),
    ],
)
def test_a_prompt_that_replaces_claude_codes_is_refused(system_prompt: object, kind: str) -> None:
    options = ClaudeAgentOptions(system_prompt=system_prompt)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as info:
        apply_strategy(options, load_strategy("delegation"))
    message = str(info.value)
    assert "'delegation'" in message
    assert kind in message
    assert "strategy.render()" in message


def test_missing_placeholder_surfaces_through_apply(tmp_path: Path) -> None:
    strategy = load_strategy(write_prompt(tmp_path, "Spend {budget_usd}.\n"))
    with pytest.raises(UsageError, match=r"\{budget_usd\}"):
        apply_strategy(None, strategy)
    applied = apply_strategy(None, strategy, values={"budget_usd": 2})
    assert appended(applied) == "Spend 2."


# -- the wheel -------------------------------------------------------------------------------


@pytest.mark.slow
def test_wheel_ships_the_prompts_and_loads_them_as_resources(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    # hatchling's own PEP 517 hook, as any installer calls it (hatchling is in the test
    # extra): offline, no build isolation, and a packaging fault fails the test
    hook = "import sys, hatchling.build as b; print(b.build_wheel(sys.argv[1]))"
    build = subprocess.run(
        [sys.executable, "-c", hook, str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert build.returncode == 0, f"the wheel did not build: {build.stderr.strip()[-2000:]}"
    (wheel,) = out.glob("teamlead-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for name in SHIPPED:
            assert f"teamlead/prompts/{name}.md" in names
        assert "teamlead/prompts.py" in names
        site = tmp_path / "site"
        archive.extractall(site)

    # Import teamlead from the unpacked wheel, ahead of the editable install, and check the
    # prompts come from the package resources there rather than from the checkout.
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import teamlead.prompts as p; s = p.load_strategy('delegation');"
        "print(p.__file__); print(s.source); print(s.sha256);"
        "print(','.join(m.name for m in p.list_strategies()))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(site)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    module_file, source, sha, names_line = run.stdout.strip().splitlines()
    assert Path(module_file).is_relative_to(site)
    assert Path(source).is_relative_to(site / "teamlead" / "prompts")
    assert sha == hashlib.sha256((REPO_ROOT / "prompts" / "delegation.md").read_bytes()).hexdigest()
    assert set(SHIPPED) <= set(names_line.split(","))
