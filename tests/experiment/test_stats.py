"""Statistics: known cases, calibration by simulation, power, multiple testing, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests  # type: ignore[import-untyped]
from statsmodels.stats.proportion import proportion_confint  # type: ignore[import-untyped]

from teamlead.experiment import TrialRecord, build_report, synthetic_records
from teamlead.experiment.stats.estimates import cluster_bootstrap_mean, paired_test
from teamlead.experiment.stats.rates import clustered_wilson, design_effect, icc_anova
from teamlead.experiment.stats.verdicts import adjust_pvalues, mde_from_se, mde_rate, verdict

ALPHA = 0.05


def test_icc_of_a_hand_computed_case() -> None:
    # n=6, k=3, grand mean 0.5, task means 1, 0, 0.5:
    # MSB = 2*(0.25 + 0.25 + 0)/2 = 0.5, MSW = 0.5/3, m0 = 2 -> ICC = (1/3) / (2/3) = 0.5.
    assert icc_anova([[1, 1], [0, 0], [1, 0]]) == pytest.approx(0.5)
    # Shrunk towards the prior 0.2 worth 4 tasks: (2 * 0.5 + 4 * 0.2) / 6 = 0.3.
    assert design_effect([[1, 1], [0, 0], [1, 0]]) == pytest.approx((0.3, 1.3))
    assert icc_anova([[1, 1, 1], [0, 0, 0]]) == 1.0
    assert icc_anova([[1, 0], [1, 0]]) == 0.0  # negative estimate, clipped
    assert icc_anova([[1, 0, 1]]) == 0.0  # one task: not estimable


def test_clustered_wilson_is_wilson_at_the_effective_sample_size() -> None:
    clusters = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]  # every task at 0.5: raw ICC < 0
    estimate = clustered_wilson(clusters, alpha=ALPHA)
    # The negative raw estimate (-1/3) pulls the prior down: (2 * -1/3 + 4 * 0.2) / 6.
    assert estimate.icc == pytest.approx((2 * -1 / 3 + 0.8) / 6)
    assert estimate.design_effect == pytest.approx(1 + 3 * estimate.icc)
    assert estimate.n_eff == pytest.approx(12 / estimate.design_effect)
    low, high = proportion_confint(
        0.5 * estimate.n_eff, estimate.n_eff, alpha=ALPHA, method="wilson"
    )
    assert estimate.estimate == 0.5
    assert estimate.ci_low == pytest.approx(low, abs=1e-12)
    assert estimate.ci_high == pytest.approx(high, abs=1e-12)


def test_clustering_widens_the_wilson_interval() -> None:
    clustered = [[1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]]
    estimate = clustered_wilson(clustered)
    low, high = proportion_confint(8, 16, method="wilson")
    assert estimate.icc > 0.3
    assert estimate.n_eff == pytest.approx(16 / estimate.design_effect)
    assert estimate.ci_low < low and estimate.ci_high > high
    # The same interval as plain Wilson at the effective size.
    low_eff, high_eff = proportion_confint(0.5 * estimate.n_eff, estimate.n_eff, method="wilson")
    assert (estimate.ci_low, estimate.ci_high) == pytest.approx((low_eff, high_eff))


def test_cluster_bootstrap_mean_is_seeded_and_covers_the_mean() -> None:
    clusters = [[10.0, 12.0], [30.0, 28.0], [20.0, 21.0], [15.0, 14.0]]
    first = cluster_bootstrap_mean(clusters, rng=np.random.default_rng(3), n_bootstrap=2000)
    again = cluster_bootstrap_mean(clusters, rng=np.random.default_rng(3), n_bootstrap=2000)
    assert first == again
    assert first.mean == pytest.approx(18.75) and first.median == pytest.approx(17.5)
    assert first.ci_low < first.mean < first.ci_high
    # Only whole tasks are resampled: the interval cannot leave the range of task means.
    assert first.ci_low >= 11.0 and first.ci_high <= 29.0


def test_exact_permutation_p_value_of_a_tiny_case() -> None:
    # One task, variant 1,1 vs control 0,0: of the C(4,2)=6 relabelings two are as
    # extreme (|diff| = 1) and none more, so the classic p is 2/6 and the mid-p 1/6.
    classic = paired_test([[1, 1]], [[0, 0]], rng=np.random.default_rng(0), mid_p=False)
    mid = paired_test([[1, 1]], [[0, 0]], rng=np.random.default_rng(0))
    assert classic.exact and mid.exact
    assert classic.effect == 1.0
    assert classic.p_value == pytest.approx(2 / 6)
    assert mid.p_value == pytest.approx(1 / 6)


def test_sampled_permutations_approach_the_exact_p_value() -> None:
    variant = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    control = [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]  # C(6,3)^2 = 400 relabelings
    exact = paired_test(variant, control, rng=np.random.default_rng(0), n_permutations=400)
    sampled = paired_test(variant, control, rng=np.random.default_rng(0), n_permutations=399)
    assert exact.exact and not sampled.exact
    assert sampled.p_value == pytest.approx(exact.p_value, abs=0.08)


def test_ratio_scale_reports_variant_over_control() -> None:
    rng = np.random.default_rng(5)
    control = [list(rng.lognormal(np.log(100 * (t + 1)), 0.1, 4)) for t in range(8)]
    variant = [[0.5 * v for v in task] for task in control]
    result = paired_test(variant, control, scale="ratio", rng=rng, n_permutations=2000)
    assert result.effect == pytest.approx(0.5)
    assert result.ci_low < 0.5 + 1e-9 and result.ci_high > 0.5 - 1e-9
    assert result.p_value < 0.01


def test_tasks_missing_on_one_side_are_left_out() -> None:
    result = paired_test([[1, 1], [], [1, 0]], [[0, 0], [1], [0, 0]], rng=np.random.default_rng(1))
    assert result.tasks == 2


def test_verdict_needs_significance_and_an_interval_clear_of_no_effect() -> None:
    kwargs = {"scale": "difference", "higher_is_better": True, "alpha": ALPHA}
    assert verdict(0.4, 0.2, 0.6, 0.01, **kwargs) == "better"  # type: ignore[arg-type]
    assert verdict(-0.4, -0.6, -0.2, 0.01, **kwargs) == "worse"  # type: ignore[arg-type]
    assert verdict(0.4, -0.1, 0.6, 0.01, **kwargs) == "inconclusive"  # type: ignore[arg-type]
    assert verdict(0.4, 0.2, 0.6, 0.06, **kwargs) == "inconclusive"  # type: ignore[arg-type]
    assert verdict(0.4, 0.2, 0.6, math.nan, **kwargs) == "inconclusive"  # type: ignore[arg-type]
    # Ratios: less time is better, the null is 1.
    assert verdict(0.7, 0.6, 0.8, 0.001, scale="ratio", higher_is_better=False) == "better"
    assert verdict(1.3, 1.1, 1.5, 0.001, scale="ratio", higher_is_better=False) == "worse"
    assert verdict(0.7, 0.6, 1.01, 0.001, scale="ratio", higher_is_better=False) == ("inconclusive")


def test_adjustments_match_statsmodels_and_skip_nan() -> None:
    p = [0.01, 0.04, 0.03, 0.2]
    assert adjust_pvalues(p, "holm") == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert adjust_pvalues(p, "fdr_bh") == pytest.approx(list(multipletests(p, method="fdr_bh")[1]))
    with_nan = adjust_pvalues([0.01, math.nan, 0.04], "holm")
    assert with_nan[0] == pytest.approx(0.02) and math.isnan(with_nan[1])
    assert with_nan[2] == pytest.approx(0.04)
    assert adjust_pvalues([0.03], "holm") == [0.03]
    # Random families with ties, against the textbook definitions (statsmodels itself runs a
    # full garbage collection per call, too slow to call hundreds of times here).
    rng = np.random.default_rng(12)
    for _ in range(200):
        family = list(rng.random(int(rng.integers(2, 9))) ** 2)
        family[-1] = family[0]
        m = len(family)
        ranked = sorted(range(m), key=lambda i: family[i])
        holm = [0.0] * m
        bh = [0.0] * m
        for position, i in enumerate(ranked):
            holm[i] = min(1.0, max((m - j) * family[ranked[j]] for j in range(position + 1)))
            bh[i] = min(1.0, min(m / (j + 1) * family[ranked[j]] for j in range(position, m)))
        assert adjust_pvalues(family, "holm") == pytest.approx(holm, abs=1e-12)
        assert adjust_pvalues(family, "fdr_bh") == pytest.approx(bh, abs=1e-12)


def test_mde_shrinks_with_more_trials_and_grows_with_power() -> None:
    sizes = [10, 40, 160, 640]
    mdes = [mde_rate(0.2, n) for n in sizes]
    assert all(a > b for a, b in zip(mdes, mdes[1:], strict=False))
    assert mde_rate(0.2, 40, power=0.9) > mde_rate(0.2, 40, power=0.8)
    assert mde_rate(0.2, 40, alpha=0.01) > mde_rate(0.2, 40, alpha=0.05)
    # At n_eff 40 a 0.2 control rate needs roughly +0.25 to be detected (h = 0.626).
    assert 0.2 < mdes[1] < 0.35
    # Near the ceiling the only detectable change is a drop.
    assert 0 < mde_rate(0.99, 10) <= 0.99
    assert mde_from_se(0.1) == pytest.approx((1.959964 + 0.841621) * 0.1, rel=1e-5)
    assert mde_from_se(0.1, scale="ratio") == pytest.approx(math.exp(0.2801585), rel=1e-5)


def test_report_mde_shrinks_with_more_tasks() -> None:
    def parallel_mde(tasks: int) -> float:
        records = synthetic_records(
            {"a": [0.3] * tasks, "b": [0.3] * tasks}, trials=4, rng=np.random.default_rng(tasks)
        )
        report = build_report(records, control="a", n_permutations=200, mde_simulations=100)
        mde = next(c.mde for c in report.comparisons if c.metric == "parallel")
        assert mde is not None
        return mde

    assert parallel_mde(40) < parallel_mde(10)


def test_better_variant_is_called_better_on_parallel() -> None:
    records = synthetic_records(
        {"baseline": [0.2] * 10, "delegation": [0.85] * 10},
        trials=4,
        rng=np.random.default_rng(7),
    )
    # Verdicts do not depend on the MDE, so its simulation is skipped (mde_simulations=0).
    report = build_report(records, control="baseline", seed=7, mde_simulations=0)
    parallel = next(c for c in report.comparisons if c.metric == "parallel")
    assert parallel.variant == "delegation" and parallel.control == "baseline"
    assert parallel.verdict == "better"
    assert parallel.p_adjusted is not None and parallel.p_adjusted < ALPHA
    assert parallel.diff is not None and 0.45 < parallel.diff < 0.9
    assert parallel.ci_low is not None and parallel.ci_low > 0
    # The same data with the roles swapped is "worse".
    swapped = build_report(records, control="delegation", seed=7, mde_simulations=0)
    assert next(c for c in swapped.comparisons if c.metric == "parallel").verdict == "worse"


def test_faster_variant_is_better_on_wall_time() -> None:
    records = synthetic_records(
        {"a": [0.5] * 10, "b": [0.5] * 10},
        trials=4,
        rng=np.random.default_rng(11),
        wall_s={"a": 120.0, "b": 60.0},
    )
    report = build_report(records, control="a", seed=1, mde_simulations=100)
    wall = next(c for c in report.comparisons if c.metric == "wall_s")
    assert wall.scale == "ratio"
    assert wall.diff is not None and 0.4 < wall.diff < 0.6
    assert wall.verdict == "better"
    # Lower is better: the MDE printed is the detectable drop, a factor below 1.
    assert wall.mde_direction == "drop" and wall.mde is not None and wall.mde < 1
    assert wall.mde_rise is not None and wall.mde_rise == pytest.approx(1 / wall.mde)


def test_holm_on_parallel_and_bh_on_the_rest() -> None:
    records = synthetic_records(
        {"base": [0.3] * 8, "v1": [0.5] * 8, "v2": [0.7] * 8},
        trials=4,
        rng=np.random.default_rng(2),
    )
    report = build_report(records, control="base", seed=3, n_permutations=2000, mde_simulations=0)
    primary = [c for c in report.comparisons if c.metric == "parallel"]
    rest = [c for c in report.comparisons if c.metric != "parallel"]
    assert [c.variant for c in primary] == ["v1", "v2"]
    assert len(rest) == 2 * 5
    holm = multipletests([c.p_value for c in primary], method="holm")[1]
    bh = multipletests([c.p_value for c in rest], method="fdr_bh")[1]
    assert [c.p_adjusted for c in primary] == pytest.approx(list(holm))
    assert [c.p_adjusted for c in rest] == pytest.approx(list(bh))
    assert {c.correction for c in primary} == {"holm"}
    assert {c.correction for c in rest} == {"fdr_bh"}


def test_report_is_deterministic_for_a_seed() -> None:
    records = synthetic_records(
        {"a": [0.2, 0.5, 0.8], "b": [0.4, 0.6, 0.9]}, trials=3, rng=np.random.default_rng(4)
    )
    first = build_report(records, control="a", seed=9, n_permutations=300, n_bootstrap=300)
    again = build_report(
        list(reversed(records)), control="a", seed=9, n_permutations=300, n_bootstrap=300
    )
    other = build_report(records, control="a", seed=10, n_permutations=300, n_bootstrap=300)
    assert first.comparisons == again.comparisons
    assert first.variants == again.variants
    assert first.comparisons != other.comparisons


def _false_positive_rate(
    experiments: int, draw_rates: str, *, base_seed: int
) -> tuple[float, float]:
    """Share of null experiments (identical variants) whose parallel verdict isn't
    inconclusive, and the binomial standard error of that share at alpha."""
    false_positives = 0
    for index in range(experiments):
        rng = np.random.default_rng([base_seed, index])
        rates = [0.4] * 10 if draw_rates == "constant" else list(rng.uniform(0.05, 0.95, 10))
        records: list[TrialRecord] = synthetic_records({"a": rates, "b": rates}, trials=4, rng=rng)
        # Fewer draws than the defaults keep this fast; the code path is the same.
        report = build_report(
            records, control="a", seed=index, n_permutations=500, mde_simulations=0
        )
        parallel = next(c for c in report.comparisons if c.metric == "parallel")
        false_positives += parallel.verdict != "inconclusive"
    return false_positives / experiments, math.sqrt(ALPHA * (1 - ALPHA) / experiments)


@pytest.mark.slow
def test_false_positive_rate_is_alpha_when_variants_are_identical() -> None:
    rate, se = _false_positive_rate(300, "constant", base_seed=2024)
    assert ALPHA - 2 * se <= rate <= ALPHA + 2 * se, rate


@pytest.mark.slow
def test_false_positive_rate_stays_below_alpha_with_task_varying_rates() -> None:
    # Tasks near 0 or 1 carry little information and make the test conservative, so
    # only the side that matters is checked: it must not call a difference too often.
    rate, se = _false_positive_rate(200, "varying", base_seed=2025)
    assert rate <= ALPHA + 2 * se, rate


def test_degenerate_inputs_give_nan_not_false_precision() -> None:
    one_task = paired_test([[1.0, 2.0]], [[2.0, 3.0]], scale="ratio", rng=np.random.default_rng(0))
    assert one_task.tasks == 1 and math.isnan(one_task.ci_low) and math.isnan(one_task.se)
    assert math.isnan(mde_from_se(one_task.se, scale="ratio"))
    zero_cost = paired_test(
        [[0.0, 0.0]] * 3, [[0.0, 0.0]] * 3, scale="ratio", rng=np.random.default_rng(0)
    )
    assert math.isnan(zero_cost.effect) and math.isnan(zero_cost.p_value)
    single = cluster_bootstrap_mean([[1.0, 3.0]], rng=np.random.default_rng(0))
    assert single.mean == 2.0 and math.isnan(single.ci_low)
    empty = clustered_wilson([])
    assert empty.n == 0 and math.isnan(empty.estimate)
