"""The experiment spec: a TOML file parsed once, at the edge, into typed objects.

A spec names the variants (a prompt strategy each, one of them the control), the tasks
and how many trials to run of every (variant, task) pair. Every problem becomes one
:class:`~teamlead.errors.UsageError` line of the form ``FILE:LINE: FIELD: PROBLEM``, so a
typo points straight at its line.

Example:
    >>> spec = parse_spec('''
    ... [experiment]
    ... name = "demo"
    ... trials = 2
    ... control = "baseline"
    ... [[variants]]
    ... name = "baseline"
    ... strategy = "baseline"
    ... [[variants]]
    ... name = "delegation"
    ... strategy = "delegation"
    ... [[tasks]]
    ... id = "t1"
    ... prompt = "Review the repo."
    ... ''')
    >>> spec.total_trials
    4
"""

from __future__ import annotations

import difflib
import os
import re
import string
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ...errors import UsageError
from ...policy import MAX_SECONDS, SpawnPolicy
from ._toml_lines import LineIndex, dotted
from .records import TrialKey
from .steps import PrimaryMetric, StepKeys, Steps, resolve_steps

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "ExperimentSettings",
    "ExperimentSpec",
    "GraderSpec",
    "SpawnSettings",
    "TaskSpec",
    "VariantSpec",
    "load_spec",
    "parse_spec",
]

StrategyCheck = Callable[[str], bool]

# A name: non-empty, no surrounding whitespace (names end up in file keys and tables).
Name = Annotated[str, Field(min_length=1, pattern=r"^\S(?:.*\S)?$")]

_GRADER_FIELDS = ("task", "rubric", "answer")
# Options the experiment itself sets per trial: a variant may not override them.
_RESERVED_OPTIONS = {
    "system_prompt": "set by the variant's strategy",
    "model": "use the variant's `model` key",
    "cwd": "use the task's or experiment's `cwd` key",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SpawnSettings(SpawnPolicy):
    """A ``spawn`` table: the spawn gate's limits for a trial
    (:class:`~teamlead.policy.SpawnPolicy`, a misspelt key refused). The strategy prompt
    states the same limits, as with ``teamlead ask``."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class GraderSpec(_Strict):
    """How to grade a trial's final answer with a model.

    ``rubric`` is a ``str.format`` template with the fields ``{task}`` (the task prompt),
    ``{rubric}`` (the task's own rubric) and ``{answer}`` (the trial's final text).
    """

    model: str | None = None
    rubric: str = Field(min_length=1)
    max_tokens: int = Field(default=1024, ge=1, le=1_000_000)

    @field_validator("rubric")
    @classmethod
    def _known_fields(cls, value: str) -> str:
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
        except ValueError as exc:
            raise ValueError(f"bad template: {exc}") from None
        for name in names:
            if name not in _GRADER_FIELDS:
                allowed = ", ".join("{" + f + "}" for f in _GRADER_FIELDS)
                raise ValueError(f"unknown template field {{{name}}}; allowed: {allowed}")
        return value

    def render(self, *, task: str, rubric: str | None, answer: str) -> str:
        """Fill the template for one trial."""
        return self.rubric.format(task=task, rubric=rubric or "", answer=answer)


#: Absurd sizes are spec errors, not hours of memory growth before the first trial.
MAX_TRIALS = 10_000
MAX_CONCURRENCY = 256


class ExperimentSettings(StepKeys):
    """The ``[experiment]`` table.

    ``deadline_s`` bounds one trial's wall time; ``max_cost_usd`` bounds the whole
    experiment (trials and grading). ``model`` and ``cwd`` are defaults that a variant's
    ``model`` or a task's ``cwd`` override, as do a task's workspace and command keys
    (:class:`~teamlead.experiment.specs.steps.StepKeys`). ``primary_metric`` is the metric whose
    p-values are Holm-adjusted. ``spawn`` is the spawn gate's limits for every trial, unless
    a variant has its own ``spawn`` table.
    """

    name: Name
    trials: int = Field(ge=1, le=MAX_TRIALS, description="trials per task per variant")
    seed: int = Field(default=0, ge=0, lt=2**63)
    concurrency: int = Field(
        default=1, ge=1, le=MAX_CONCURRENCY, description="ceiling for concurrent trials"
    )
    control: Name
    deadline_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    model: str | None = None
    cwd: str | None = None
    grader: GraderSpec | None = None
    primary_metric: PrimaryMetric = "parallel"
    spawn: SpawnSettings | None = None


class VariantSpec(_Strict):
    """One ``[[variants]]`` entry: a prompt strategy (a prompt name or a file path)."""

    name: Name
    strategy: Name
    model: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    spawn: SpawnSettings | None = None

    @field_validator("options")
    @classmethod
    def _no_reserved(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, why in _RESERVED_OPTIONS.items():
            if key in value:
                raise ValueError(f"option {key!r} is not allowed here: {why}")
        return value


class TaskSpec(StepKeys):
    """One ``[[tasks]]`` entry (with :class:`~teamlead.experiment.specs.steps.StepKeys`)."""

    id: Name
    prompt: str = Field(min_length=1)
    cwd: str | None = None
    tags: list[str] = Field(default_factory=list)
    rubric: str | None = None

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("prompt is blank")
        return value


class ExperimentSpec(_Strict):
    """A validated experiment: settings, at least two variants and at least one task."""

    experiment: ExperimentSettings
    variants: list[VariantSpec] = Field(min_length=2)
    tasks: list[TaskSpec] = Field(min_length=1)

    @property
    def control(self) -> VariantSpec:
        """The control variant every other variant is compared with."""
        return self.variant(self.experiment.control)

    def variant(self, name: str) -> VariantSpec:
        """The variant called ``name``; :class:`KeyError` if there is none."""
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise KeyError(name)

    def task(self, task_id: str) -> TaskSpec:
        """The task with id ``task_id``; :class:`KeyError` if there is none."""
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def model_for(self, variant: VariantSpec) -> str | None:
        """The variant's model, else the experiment's default (None: the SDK's default)."""
        return variant.model or self.experiment.model

    def spawn_for(self, variant: VariantSpec) -> SpawnPolicy | None:
        """The variant's ``spawn`` table, else the experiment's (None: the run's policy)."""
        return variant.spawn or self.experiment.spawn

    def cwd_for(self, task: TaskSpec) -> str | None:
        """The task's working directory, else the experiment's."""
        return task.cwd or self.experiment.cwd

    def steps_for(self, task: TaskSpec) -> Steps:
        """The task's workspace kind, setup and check, else the experiment's."""
        return resolve_steps(task, self.experiment)

    @property
    def total_trials(self) -> int:
        """How many trials the whole experiment runs."""
        return len(self.variants) * len(self.tasks) * self.experiment.trials

    def trial_keys(self) -> Iterator[TrialKey]:
        """Every planned trial, interleaving variants so a partial run stays balanced.

        Trial indices are 0-based. Pair with :func:`~teamlead.experiment.finished_keys` to
        resume: skip the keys already finished.
        """
        for trial in range(self.experiment.trials):
            for task in self.tasks:
                for variant in self.variants:
                    yield TrialKey(variant.name, task.id, trial)


def load_spec(path: str | Path, *, strategy_exists: StrategyCheck | None = None) -> ExperimentSpec:
    """Read and validate an experiment spec file.

    Relative ``cwd`` values and strategies that are paths (they end in ``.md`` or contain
    ``/``, as for :func:`teamlead.prompts.load_strategy`) are resolved against the spec
    file's directory, so a spec works from anywhere.

    Args:
        path: the TOML file.
        strategy_exists: called with each variant's strategy (after path resolution);
            returning False, or raising :class:`UsageError`, rejects the spec with the
            variant's line. Prompts live elsewhere, so the caller knows.

    Raises:
        UsageError: one line, ``FILE:LINE: FIELD: PROBLEM``.

    Example:
        >>> from teamlead.prompts import load_strategy
        >>> spec = load_spec(
        ...     "experiment.toml", strategy_exists=lambda s: bool(load_strategy(s))
        ... )  # doctest: +SKIP
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"spec file not found: {file}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read spec file {file}: {exc}") from None
    return parse_spec(text, source=str(file), base_dir=file.parent, strategy_exists=strategy_exists)


def parse_spec(
    text: str,
    *,
    source: str = "<spec>",
    base_dir: Path | None = None,
    strategy_exists: StrategyCheck | None = None,
) -> ExperimentSpec:
    """Validate spec text; see :func:`load_spec`. ``source`` names the file in errors."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise UsageError(f"{source}:1: invalid TOML: arrays or tables nested too deeply") from None
    except ValueError as exc:  # TOMLDecodeError, or a number of more than 4300 digits
        message = str(exc).partition("; use sys.set_int_max_str_digits()")[0]
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        line = int(match.group(1)) if match else 1
        detail = re.sub(r"\s*\(at line \d+, column \d+\)", "", message) or "invalid TOML"
        raise UsageError(f"{source}:{line}: invalid TOML: {detail}") from None
    lines = LineIndex(text)
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, lines, source) from None
    _check_relations(spec, lines, source)
    if base_dir is not None:
        spec = _resolve_paths(spec, base_dir)
    if strategy_exists is not None:
        for index, variant in enumerate(spec.variants):
            loc = ("variants", index, "strategy")
            try:
                problem: str | None = (
                    None if strategy_exists(variant.strategy) else "unknown strategy"
                )
            except UsageError as exc:  # e.g. the check loads the prompt and it is broken
                problem = str(exc)
            if problem is not None:
                if variant.strategy not in problem:
                    problem += f" {variant.strategy!r}"
                raise UsageError(f"{source}:{lines.find(loc)}: {dotted(loc)}: {problem}")
    return spec


def _check_relations(spec: ExperimentSpec, lines: LineIndex, source: str) -> None:
    def fail(loc: tuple[str | int, ...], problem: str) -> UsageError:
        return UsageError(f"{source}:{lines.find(loc)}: {dotted(loc)}: {problem}")

    seen: set[str] = set()
    for index, variant in enumerate(spec.variants):
        if variant.name in seen:
            raise fail(("variants", index, "name"), f"duplicate variant {variant.name!r}")
        seen.add(variant.name)
    if spec.experiment.control not in seen:
        names = ", ".join(repr(v.name) for v in spec.variants)
        raise fail(
            ("experiment", "control"),
            f"control {spec.experiment.control!r} is not a variant (variants: {names})",
        )
    ids: set[str] = set()
    for index, task in enumerate(spec.tasks):
        if task.id in ids:
            raise fail(("tasks", index, "id"), f"duplicate task id {task.id!r}")
        ids.add(task.id)
        if spec.experiment.primary_metric == "passed" and spec.steps_for(task).check is None:
            raise fail(
                ("tasks", index, "id"),
                f"task {task.id!r} has no check command, but the primary metric is 'passed'",
            )


def _resolve_paths(spec: ExperimentSpec, base_dir: Path) -> ExperimentSpec:
    def resolve(value: str | None) -> str | None:
        if value is None:
            return None
        return str((base_dir / Path(value).expanduser()).resolve())

    experiment = spec.experiment.model_copy(update={"cwd": resolve(spec.experiment.cwd)})
    variants = [
        v.model_copy(update={"strategy": resolve(v.strategy)}) if _is_path(v.strategy) else v
        for v in spec.variants
    ]
    tasks = [t.model_copy(update={"cwd": resolve(t.cwd)}) for t in spec.tasks]
    return spec.model_copy(update={"experiment": experiment, "variants": variants, "tasks": tasks})


def _is_path(strategy: str) -> bool:
    # The same rule as teamlead.prompts.load_strategy: a .md file or anything with a slash.
    return strategy.endswith(".md") or "/" in strategy or os.sep in strategy


def _first_error(exc: ValidationError, lines: LineIndex, source: str) -> UsageError:
    """Turn pydantic's errors into one line: the error nearest the top of the file."""
    errors = exc.errors()
    # A typo'd key shows up twice: as an unknown key and as a required key gone missing
    # from the same table. The unknown key (with its "did you mean") is the useful one.
    typo_tables = {tuple(e["loc"][:-1]) for e in errors if e["type"] == "extra_forbidden"}
    errors = [
        e for e in errors if not (e["type"] == "missing" and tuple(e["loc"][:-1]) in typo_tables)
    ]
    best: tuple[int, str] | None = None
    for error in errors:
        loc = tuple(error["loc"])
        line = lines.find(loc)
        if error["type"] == "extra_forbidden":
            key = str(loc[-1])
            allowed = _allowed_keys(loc[:-1])
            hint = difflib.get_close_matches(key, allowed, n=1)
            problem = f"unknown key {key!r}"
            if hint:
                problem += f"; did you mean {hint[0]!r}?"
            elif allowed:
                problem += f"; allowed: {', '.join(allowed)}"
        elif error["type"] == "missing":
            what = "table" if loc and loc[-1] in ("experiment", "variants", "tasks") else "key"
            problem = f"missing required {what}"
        else:
            problem = error["msg"].removeprefix("Value error, ")
        text = f"{source}:{line}: {dotted(loc)}: {problem}"
        if best is None or line < best[0]:
            best = (line, text)
    assert best is not None  # a ValidationError always carries at least one error
    return UsageError(best[1])


def _allowed_keys(parent: tuple[str | int, ...]) -> list[str]:
    model: type[BaseModel] = ExperimentSpec
    sections: dict[str, type[BaseModel]] = {
        "experiment": ExperimentSettings,
        "variants": VariantSpec,
        "tasks": TaskSpec,
        "grader": GraderSpec,
    }
    for part in parent:
        if isinstance(part, str):
            if part not in sections:
                return []
            model = sections[part]
    return list(model.model_fields)
