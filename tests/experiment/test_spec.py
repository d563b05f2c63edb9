"""The experiment spec: valid files load; each bad input names its field and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from teamlead.errors import UsageError
from teamlead.experiment.specs.records import TrialKey
from teamlead.experiment.specs.spec import ExperimentSpec, load_spec, parse_spec

VALID = """\
# A two-variant experiment.
[experiment]
name = "delegation-ab"
trials = 3
seed = 7
concurrency = 6
control = "baseline"
deadline_s = 900
grader = { model = "claude-haiku", rubric = "Task: {task}\\nRubric: {rubric}\\nAnswer: {answer}" }

[[variants]]
name = "baseline"
strategy = "baseline"

[[variants]]
name = "delegation"
strategy = "delegation"
model = "claude-opus"
options = { max_turns = 40 }

[[tasks]]
id = "arch-and-security"
prompt = \"\"\"
Review the architecture and the security of this repository.
key = "not a key, inside a multi-line string"
\"\"\"
tags = ["review"]
rubric = "Mentions the auth layer."

[[tasks]]
id = "tests"
prompt = "Find the untested modules."
cwd = "repo"
"""

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "experiment.toml"


def line_of(text: str, snippet: str, occurrence: int = 1) -> int:
    """The 1-based line of the ``occurrence``-th line containing ``snippet``."""
    seen = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if snippet in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{snippet!r} not found")


def error_for(text: str, **kwargs: object) -> str:
    with pytest.raises(UsageError) as info:
        parse_spec(text, source="exp.toml", **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


def test_valid_spec_loads_with_defaults_and_paths(tmp_path: Path) -> None:
    (tmp_path / "exp.toml").write_text(VALID, encoding="utf-8")
    checked: list[str] = []

    def exists(strategy: str) -> bool:
        checked.append(strategy)
        return True

    spec = load_spec(tmp_path / "exp.toml", strategy_exists=exists)

    assert isinstance(spec, ExperimentSpec)
    assert checked == ["baseline", "delegation"]
    assert spec.experiment.name == "delegation-ab"
    assert spec.experiment.deadline_s == 900.0
    assert spec.control.name == "baseline"
    assert [v.name for v in spec.variants] == ["baseline", "delegation"]
    assert spec.variant("delegation").options == {"max_turns": 40}
    assert spec.model_for(spec.variant("delegation")) == "claude-opus"
    assert spec.model_for(spec.variant("baseline")) is None
    assert "inside a multi-line string" in spec.task("arch-and-security").prompt
    assert spec.cwd_for(spec.task("tests")) == str((tmp_path / "repo").resolve())
    assert spec.total_trials == 2 * 2 * 3
    keys = list(spec.trial_keys())
    assert len(set(keys)) == spec.total_trials
    assert keys[:2] == [
        TrialKey("baseline", "arch-and-security", 0),
        TrialKey("delegation", "arch-and-security", 0),
    ]
    grader = spec.experiment.grader
    assert grader is not None and grader.max_tokens == 1024
    assert grader.render(task="T", rubric=None, answer="A") == "Task: T\nRubric: \nAnswer: A"


def test_strategy_that_is_a_path_is_resolved_against_the_spec_dir(tmp_path: Path) -> None:
    text = VALID.replace('strategy = "delegation"', 'strategy = "prompts/mine.md"')
    (tmp_path / "exp.toml").write_text(text, encoding="utf-8")
    spec = load_spec(tmp_path / "exp.toml")
    assert spec.variant("delegation").strategy == str((tmp_path / "prompts/mine.md").resolve())
    assert spec.variant("baseline").strategy == "baseline"


def test_example_spec_is_valid() -> None:
    spec = load_spec(EXAMPLE, strategy_exists=lambda s: True)
    assert spec.experiment.control in {v.name for v in spec.variants}
    assert spec.total_trials > 0


@pytest.mark.parametrize(
    ("old", "new", "field", "anchor", "occurrence", "problem"),
    [
        pytest.param(
            'name = "delegation"',
            'name = "baseline"',
            "variants[1].name",
            'name = "baseline"',
            2,
            "duplicate variant 'baseline'",
            id="duplicate-variant",
        ),
        pytest.param(
            'control = "baseline"',
            'control = "baselin"',
            "experiment.control",
            "control =",
            1,
            "not a variant",
            id="control-not-a-variant",
        ),
        pytest.param(
            "trials = 3",
            "trials = 0",
            "experiment.trials",
            "trials =",
            1,
            "greater than or equal to 1",
            id="zero-trials",
        ),
        pytest.param(
            'prompt = "Find the untested modules."',
            "",
            "tasks[1].prompt",
            "[[tasks]]",
            2,
            "missing required key",
            id="missing-prompt",
        ),
        pytest.param(
            'id = "tests"',
            'id = "arch-and-security"',
            "tasks[1].id",
            'id = "arch-and-security"',
            2,
            "duplicate task id",
            id="duplicate-task",
        ),
        pytest.param(
            'strategy = "delegation"',
            'stratgy = "delegation"',
            "variants[1].stratgy",
            "stratgy",
            1,
            "did you mean 'strategy'",
            id="typo-key",
        ),
        pytest.param(
            "concurrency = 6",
            "concurency = 6",
            "experiment.concurency",
            "concurency",
            1,
            "did you mean 'concurrency'",
            id="typo-experiment-key",
        ),
        pytest.param(
            "trials = 3",
            'trials = "3"',
            "experiment.trials",
            "trials =",
            1,
            "valid integer",
            id="string-for-int",
        ),
        pytest.param(
            "trials = 3",
            "trials = true",
            "experiment.trials",
            "trials =",
            1,
            "valid integer",
            id="bool-for-int",
        ),
        pytest.param(
            'tags = ["review"]',
            'tags = "review"',
            "tasks[0].tags",
            "tags =",
            1,
            "valid list",
            id="string-for-list",
        ),
        pytest.param(
            "options = { max_turns = 40 }",
            'options = { system_prompt = "x" }',
            "variants[1].options",
            "options =",
            1,
            "set by the variant's strategy",
            id="reserved-option",
        ),
        pytest.param(
            "Answer: {answer}",
            "Answer: {anwser}",
            "experiment.grader.rubric",
            "grader =",
            1,
            "unknown template field {anwser}",
            id="grader-template-field",
        ),
        pytest.param(
            'name = "delegation-ab"',
            'name = " padded"',
            "experiment.name",
            "name =",
            1,
            "pattern",
            id="name-with-whitespace",
        ),
        pytest.param(
            "options = { max_turns = 40 }",
            "options = { max_turns = 40 }\nspawn = { max_concurent_agents = 3 }",
            "variants[1].spawn.max_concurent_agents",
            "spawn =",
            1,
            "unknown key 'max_concurent_agents'",
            id="spawn-typo",
        ),
        pytest.param(
            "options = { max_turns = 40 }",
            "options = { max_turns = 40 }\nspawn = { spawn_budget = 2, max_agents_per_turn = 5 }",
            "variants[1].spawn",
            "spawn =",
            1,
            "larger than spawn_budget",
            id="spawn-inconsistent",
        ),
        pytest.param(
            'model = "claude-opus"',
            "model = 5",
            "variants[1].model",
            "model = 5",
            1,
            "valid string",
            id="number-for-string",
        ),
    ],
)
def test_bad_input_names_field_and_line(
    old: str, new: str, field: str, anchor: str, occurrence: int, problem: str
) -> None:
    assert old in VALID
    text = VALID.replace(old, new, 1)
    message = error_for(text)
    expected_line = line_of(text, anchor, occurrence)
    assert message.startswith(f"exp.toml:{expected_line}: {field}: "), message
    assert problem in message


def test_variants_as_a_table_in_sub_headers_are_located() -> None:
    text = VALID.replace("options = { max_turns = 40 }", "[variants.options]\nmax_turns = 40")
    spec = parse_spec(text)
    assert spec.variant("delegation").options == {"max_turns": 40}
    bad = text.replace("[variants.options]", "[variants.options]\nsystem_prompt = 'x'")
    message = error_for(bad)
    # The check is on the whole table, so the error points at its header.
    header = line_of(bad, "[variants.options]")
    assert message.startswith(f"exp.toml:{header}: variants[1].options: option 'system_prompt'")


def test_unknown_strategy_is_checked_by_the_callers_hook() -> None:
    message = error_for(VALID, strategy_exists=lambda s: s != "delegation")
    line = line_of(VALID, 'strategy = "delegation"')
    assert message == f"exp.toml:{line}: variants[1].strategy: unknown strategy 'delegation'"


def test_a_failing_strategy_check_keeps_its_message_and_gains_the_line() -> None:
    def check(strategy: str) -> bool:
        if strategy == "delegation":
            raise UsageError("prompt file has a stray brace")
        return True

    message = error_for(VALID, strategy_exists=check)
    line = line_of(VALID, 'strategy = "delegation"')
    assert message == (
        f"exp.toml:{line}: variants[1].strategy: prompt file has a stray brace 'delegation'"
    )


def test_shipped_strategies_pass_the_prompts_check(tmp_path: Path) -> None:
    from teamlead.prompts import load_strategy

    spec = load_spec(EXAMPLE, strategy_exists=lambda s: bool(load_strategy(s)))
    assert {v.strategy for v in spec.variants} <= {"baseline", "delegation", "parallel-first"}
    text = VALID.replace('strategy = "delegation"', 'strategy = "missing.md"')
    (tmp_path / "exp.toml").write_text(text, encoding="utf-8")
    with pytest.raises(UsageError) as info:
        load_spec(tmp_path / "exp.toml", strategy_exists=lambda s: bool(load_strategy(s)))
    line = line_of(text, "missing.md")
    assert str(info.value).startswith(f"{tmp_path / 'exp.toml'}:{line}: variants[1].strategy: ")
    assert "strategy file not found" in str(info.value)


def test_one_variant_is_not_an_experiment() -> None:
    start = VALID.index("[[variants]]", VALID.index("[[variants]]") + 1)
    end = VALID.index("[[tasks]]")
    text = VALID[:start] + VALID[end:]
    message = error_for(text)
    assert message.startswith(f"exp.toml:{line_of(text, '[[variants]]')}: variants: ")
    assert "at least 2" in message


def test_missing_table_points_at_the_top() -> None:
    text = VALID[VALID.index("[[variants]]") :]
    assert error_for(text).startswith("exp.toml:1: experiment: missing required table")


def test_toml_syntax_error_keeps_its_line() -> None:
    text = VALID.replace("seed = 7", "seed = = 7")
    message = error_for(text)
    assert message.startswith(f"exp.toml:{line_of(text, 'seed = = 7')}: invalid TOML: ")


@pytest.mark.parametrize(
    ("value", "problem"),
    [("[" * 100_000 + "]" * 100_000, "nested too deeply"), ("9" * 5000, "value has 5000 digits")],
    ids=["nested", "digits"],
)
def test_toml_python_cannot_read_is_one_line(value: str, problem: str) -> None:
    # tomllib raises RecursionError and a plain ValueError for these, not TOMLDecodeError
    message = error_for(VALID.replace("seed = 7", f"seed = {value}"))
    assert message.startswith("exp.toml:") and "invalid TOML: " in message, message
    assert problem in message and "sys.set_int_max_str_digits" not in message, message


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="spec file not found"):
        load_spec(tmp_path / "nope.toml")


def test_first_error_in_file_order_is_reported() -> None:
    text = (
        VALID.replace("trials = 3", "trials = 0")
        .replace("stratgy", "strategy")
        .replace('id = "tests"', 'idd = "tests"')
    )
    assert error_for(text).startswith(f"exp.toml:{line_of(text, 'trials =')}: experiment.trials")


def test_spawn_limits_come_from_the_variant_else_the_experiment() -> None:
    text = VALID.replace(
        "deadline_s = 900\n", "deadline_s = 900\nspawn = { max_concurrent_agents = 2 }\n", 1
    ).replace(
        "options = { max_turns = 40 }",
        "options = { max_turns = 40 }\nspawn = { max_concurrent_agents = 5, stagger_s = 0.5 }",
    )
    spec = parse_spec(text, source="exp.toml")
    baseline, delegation = spec.variants
    assert spec.spawn_for(baseline) == spec.experiment.spawn
    assert spec.spawn_for(baseline).max_concurrent_agents == 2  # type: ignore[union-attr]
    spawn = spec.spawn_for(delegation)
    assert spawn is not None and (spawn.max_concurrent_agents, spawn.stagger_s) == (5, 0.5)
    assert parse_spec(VALID, source="exp.toml").spawn_for(baseline) is None
