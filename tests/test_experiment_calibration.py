"""Simulation checks of the report's statistics at the edges (issue #24): coverage, false
positives, power at the printed MDE, and the family-wise error.

Each check draws thousands of seeded experiments, so its numbers are the same on every run;
the tolerances are stated beside each goal and allow for the simulation's own standard error.
Task effects follow the audit's design: per-task rates from a Beta with an intra-class
correlation of 0.2, times log-normal around a per-task scale. All are ``slow``.

Run them with ``pytest -m slow tests/test_experiment_calibration.py -n 0``; the closing note
of issue #24 lists the figures they measured.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from teamlead.experiment import TrialRecord, build_report, synthetic_records
from teamlead.experiment.stats.estimates import clustered_mean, paired_test
from teamlead.experiment.stats.power import simulate_mde
from teamlead.experiment.stats.rates import clustered_wilson
from teamlead.experiment.stats.verdicts import verdict

pytestmark = pytest.mark.slow

ALPHA = 0.05
TASKS, TRIALS = 10, 4
ICC = 0.2
CONCENTRATION = 1 / ICC - 1  # a Beta(mu * c, (1 - mu) * c) has this intra-class correlation


def _coverage(hits: int, experiments: int) -> float:
    return hits / experiments


# -- means with skew: the geometric mean's interval ----------------------------------------------
@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.5])
@pytest.mark.parametrize("task_spread", [0.0, 1.0], ids=["same-tasks", "varied-tasks"])
def test_mean_interval_covers_93_to_97_percent_under_skew(sigma: float, task_spread: float) -> None:
    """Goal 93-97%; 2000 experiments (standard error 0.005): each cell within [0.925, 0.975]."""
    rng = np.random.default_rng([24, int(sigma * 10), int(task_spread * 10)])
    experiments, hits = 2000, 0
    for _ in range(experiments):
        scale = rng.normal(0.0, task_spread, size=(TASKS, 1))
        values = np.exp(scale + rng.normal(0.0, sigma, size=(TASKS, TRIALS)))
        estimate = clustered_mean(list(values), alpha=ALPHA, log_scale=True)
        hits += estimate.ci_low <= 1.0 <= estimate.ci_high  # the geometric mean is exp(0)
    assert 0.925 <= _coverage(hits, experiments) <= 0.975, hits / experiments


@pytest.mark.parametrize("sigma", [0.5, 1.5])
def test_ratio_interval_covers_93_to_97_percent_under_skew(sigma: float) -> None:
    """Goal 93-97% for the ratio of geometric means, tasks of widely varying length (their
    log scale spread 1.0); 1500 experiments (standard error 0.006): within [0.92, 0.98]."""
    rng = np.random.default_rng([2424, int(sigma * 10)])
    experiments, hits, ratio = 1500, 0, 0.7
    for _ in range(experiments):
        scale = rng.normal(3.0, 1.0, size=(TASKS, 1))
        control = np.exp(scale + rng.normal(0.0, sigma, size=(TASKS, TRIALS)))
        variant = ratio * np.exp(scale + rng.normal(0.0, sigma, size=(TASKS, TRIALS)))
        result = paired_test(list(variant), list(control), scale="ratio", rng=rng, n_permutations=1)
        assert result.estimand == "ratio of geometric means"
        hits += result.ci_low <= ratio <= result.ci_high
    assert 0.92 <= _coverage(hits, experiments) <= 0.98, hits / experiments


# -- rates from 0.05 to 0.95 -------------------------------------------------------------------
@pytest.mark.parametrize("tasks", [5, 10, 20])
def test_rate_interval_covers_93_to_97_percent_from_005_to_095(tasks: int) -> None:
    """Goal 93-97% at every rate; 2000 experiments per rate (standard error 0.005): each
    within [0.925, 0.975]. Tasks that do not differ at all (ICC 0) may overshoot, but stay
    below 98%."""
    rng = np.random.default_rng([7, tasks])
    experiments = 2000
    coverage: dict[tuple[str, float], float] = {}
    for mu in (0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95):
        for icc in (ICC, 0.0):
            if icc == 0.0 and mu not in (0.05, 0.5, 0.95):
                continue
            hits = 0
            for _ in range(experiments):
                if icc:
                    rates = rng.beta(mu * CONCENTRATION, (1 - mu) * CONCENTRATION, size=tasks)
                else:
                    rates = np.full(tasks, mu)
                clusters = list(rng.random((tasks, TRIALS)) < rates[:, None])
                estimate = clustered_wilson([c.astype(float) for c in clusters], alpha=ALPHA)
                hits += estimate.ci_low <= mu <= estimate.ci_high
            coverage[("icc 0.2" if icc else "icc 0", mu)] = hits / experiments
    clustered = {key: value for key, value in coverage.items() if key[0] == "icc 0.2"}
    assert all(0.925 <= value <= 0.975 for value in clustered.values()), coverage
    assert all(value < 0.98 for value in coverage.values()), coverage


# -- false positives and the family-wise error -------------------------------------------------
def test_wall_time_false_positive_rate_stays_at_alpha_under_skew() -> None:
    """Identical variants, log-normal wall times on tasks of varied length: the verdict on
    the ratio is not inconclusive at most alpha + 2 standard errors of the time."""
    experiments, calls = 300, 0
    for index in range(experiments):
        rng = np.random.default_rng([99, index])
        records = synthetic_records({"a": [0.4] * TASKS, "b": [0.4] * TASKS}, trials=4, rng=rng)
        report = build_report(
            records, control="a", seed=index, n_permutations=300, mde_simulations=0
        )
        wall = next(c for c in report.comparisons if c.metric == "wall_s")
        calls += wall.verdict != "inconclusive"
    se = math.sqrt(ALPHA * (1 - ALPHA) / experiments)
    assert calls / experiments <= ALPHA + 2 * se, calls / experiments


def test_family_wise_error_with_three_variants_stays_at_alpha() -> None:
    """Three variants identical to the control, Holm on parallel: any call is an error;
    at most alpha + 2 standard errors of the experiments make one."""
    experiments, errors = 200, 0
    for index in range(experiments):
        rng = np.random.default_rng([2025, index])
        rates = list(rng.beta(0.4 * CONCENTRATION, 0.6 * CONCENTRATION, size=TASKS))
        arms = dict.fromkeys(("a", "b", "c", "d"), rates)
        records: list[TrialRecord] = synthetic_records(arms, trials=4, rng=rng)
        report = build_report(
            records, control="a", seed=index, n_permutations=300, mde_simulations=0
        )
        errors += any(
            c.verdict != "inconclusive" for c in report.comparisons if c.metric == "parallel"
        )
    se = math.sqrt(ALPHA * (1 - ALPHA) / experiments)
    assert errors / experiments <= ALPHA + 2 * se, errors / experiments


# -- power at the printed MDE ------------------------------------------------------------------
def _power_at(mu: float, mde: float, direction: str, rng: np.random.Generator) -> float:
    """The rule's real power when the population's control rate is ``mu`` and the variant
    moves it by ``mde`` (tasks drawn anew for every experiment, as the population varies)."""
    experiments, calls = 150, 0
    for _ in range(experiments):
        base = rng.beta(mu * CONCENTRATION, (1 - mu) * CONCENTRATION, size=TASKS)
        if direction == "rise":
            treated = base + mde / (1 - mu) * (1 - base)
        else:
            treated = base * (1 - mde / mu)
        control = [(rng.random(TRIALS) < p).astype(float) for p in base]
        variant = [(rng.random(TRIALS) < q).astype(float) for q in treated]
        r = paired_test(variant, control, rng=rng, n_permutations=500)
        called = verdict(
            r.effect, r.ci_low, r.ci_high, r.p_value, scale="difference",
            higher_is_better=True, tasks=r.tasks,
        )  # fmt: skip
        calls += called == ("better" if direction == "rise" else "worse")
    return calls / experiments


@pytest.mark.parametrize("mu", [0.05, 0.5, 0.95])
def test_power_at_the_printed_mde_is_75_to_85_percent(mu: float) -> None:
    """Goal 75-85% on average over pilots: 30 pilots of 10 tasks x 4 trials drawn from the
    truth, each one's printed MDE (a rise below one half, a drop above) checked on 150 fresh
    experiments; the average's standard error is about 0.02."""
    rng = np.random.default_rng([80, int(mu * 100)])
    direction = "rise" if mu <= 0.5 else "drop"
    powers = []
    for pilot in range(30):
        base = rng.beta(mu * CONCENTRATION, (1 - mu) * CONCENTRATION, size=TASKS)
        control = [list((rng.random(TRIALS) < p).astype(float)) for p in base]
        result = simulate_mde(
            control, control, kind="rate", scale="difference",
            rng=np.random.default_rng(pilot), simulations=200, permutations=200,
        )  # fmt: skip
        mde = result.rise if direction == "rise" else result.drop
        assert math.isfinite(mde), result
        powers.append(_power_at(mu, mde, direction, rng))
    assert 0.75 <= float(np.mean(powers)) <= 0.85, (np.mean(powers), powers)
