"""PNG distribution plots of a report, one file per metric with every variant side by side.

matplotlib is optional (``pip install -e '.[plots]'`` from the checkout) and imported only here, on
first use. Figures are drawn on the Agg canvas directly, never through pyplot, so no
window or global state is involved and threads are safe.

- Mean metrics (``wall_s``, ``agent_calls``, ``cost_usd``, ``tokens``, ``grade``): a box
  plot per variant with every trial drawn as a jittered point.
- Rates (``parallel``, ``delegated``, ``passed``): each task's rate as a point per variant,
  and the overall rate with its clustered Wilson interval.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ...errors import UsageError
from ..stats.metrics import METRICS, RATE_KEYS

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from .report import Report

__all__ = ["matplotlib_available", "require_matplotlib", "write_plots"]


def matplotlib_available() -> bool:
    """Whether matplotlib can be imported (the ``plots`` extra is installed)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def require_matplotlib() -> None:
    """Raise a :class:`UsageError` naming the extra to install when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "plots need matplotlib: pip install -e '.[plots]' in the teamlead checkout "
            "(or pass plots=False)"
        ) from None


def write_plots(directory: str | Path, report: Report) -> list[Path]:
    """Write ``<metric>.png`` for each metric in the report; returns the paths.

    Example:
        >>> write_plots("out/report", report)  # doctest: +SKIP
        [PosixPath('out/report/parallel.png'), ...]
    """
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    names = list(report.variants)
    written: list[Path] = []
    jitter = np.random.default_rng(report.seed)
    for metric in METRICS:
        if metric.name not in report.samples:
            continue
        figure = Figure(figsize=(max(4.0, 1.6 * len(names) + 2.0), 4.0), dpi=100)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        positions = np.arange(1, len(names) + 1, dtype=np.float64)
        if metric.kind == "rate":
            _rate_plot(axes, report, metric.name, names, positions, jitter)
        else:
            values = [report.samples[metric.name][name] for name in names]
            drawn = [(p, v) for p, v in zip(positions, values, strict=True) if v]
            if drawn:
                axes.boxplot(
                    [v for _, v in drawn],
                    positions=[p for p, _ in drawn],
                    widths=0.5,
                    showfliers=False,
                )
            for position, trial_values in drawn:
                xs = position + jitter.uniform(-0.12, 0.12, size=len(trial_values))
                axes.scatter(xs, trial_values, s=12, alpha=0.6, color="tab:blue", zorder=3)
        axes.set_xticks(positions, names)
        axes.set_xlim(0.4, len(names) + 0.6)
        axes.set_ylabel(metric.label)
        axes.set_title(f"{metric.label} by variant (control: {report.control})")
        axes.grid(axis="y", alpha=0.3)
        figure.tight_layout()
        path = folder / f"{metric.name}.png"
        figure.savefig(path, format="png")
        written.append(path)
    return written


def _rate_plot(
    axes: Axes,
    report: Report,
    metric: str,
    names: list[str],
    positions: npt.NDArray[np.float64],
    jitter: np.random.Generator,
) -> None:
    key = RATE_KEYS[metric]
    for position, name in zip(positions, names, strict=True):
        per_task = [
            rate
            for cells in report.tasks.values()
            if name in cells and (rate := getattr(cells[name], key)) is not None
        ]
        xs = position + jitter.uniform(-0.15, 0.15, size=len(per_task))
        axes.scatter(
            xs,
            per_task,
            s=14,
            alpha=0.5,
            color="tab:gray",
            zorder=2,
            label="task rate" if position == positions[0] else None,
        )
        rate = getattr(report.variants[name], key)
        if rate is None or rate.estimate is None:
            continue
        # Never negative: a bound can sit a round-off on the wrong side of a rate of 0 or 1.
        low = max(0.0, rate.estimate - (rate.ci_low if rate.ci_low is not None else rate.estimate))
        high = max(
            0.0, (rate.ci_high if rate.ci_high is not None else rate.estimate) - rate.estimate
        )
        axes.errorbar(
            [position],
            [rate.estimate],
            yerr=[[low], [high]],
            fmt="o",
            color="tab:red",
            capsize=6,
            zorder=3,
            label="rate, clustered Wilson CI" if position == positions[0] else None,
        )
    axes.set_ylim(-0.05, 1.05)
    axes.legend(loc="best", fontsize="small")
