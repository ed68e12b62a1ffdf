"""Training curves of a run directory as training_curves.png.

Any method's, read from its metrics.csv. Placeto's rows (one per update and graph: episodes, simulator calls,
runtimes and the lower bound) are drawn as runtime / lower bound against episodes and simulator calls; the sequence
methods' rows (gdp, rnn, hierarchical: placements sampled, seconds, objectives in microseconds) as objective in ms
against placements and wall seconds. Every point is marked, so a run of one update still shows; a panel without data
says so instead of staying blank. A run of up to MAX_NAMED graphs draws one named line per graph; a run of more
draws the family instead: the mean of the per-graph curves and the band between their 25th and 75th percentiles, on
a common x grid (family_spread). The title says which graphs were held out, from the run's selection.json when it
has one, else that the run records none (training never evaluates the held-out graphs: `placeto compare` does).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from placeto.harness import plot_style
from placeto.metrics_log import METRICS, read_table
from simulator.model.errors import InputError

MAX_NAMED = 8  # graphs drawn one named line each; a run of more draws their mean and spread
GRID = 60  # points of the common x grid of family_spread


class Panel(NamedTuple):
    """One panel: column `y` against column `x`.

    `y` is scaled by `y_scale`, and divided by column `y_over` when set.
    """

    x: str
    y: str
    xlabel: str
    ylabel: str
    y_over: str | None = None
    y_scale: float = 1.0
    smooth: bool = False  # a moving average over ~1/20 of the points (noisy batch means)


PLACETO = (Panel("episode", "final_ratio", "episodes", "final runtime / lower bound\n(batch mean, smoothed)",
                 smooth=True),
           Panel("sim_calls", "final_ratio", "simulator calls", "final runtime / lower bound\n(batch mean, smoothed)",
                 smooth=True),
           Panel("episode", "best_runtime", "episodes", "best runtime so far / lower bound", y_over="lower_bound"),
           Panel("sim_calls", "best_runtime", "simulator calls", "best runtime so far / lower bound",
                 y_over="lower_bound"))
SEQUENCE = (Panel("samples", "mean_objective_us", "placements sampled",
                  "mean objective of the update's batch (ms)\n(feasibility-first objective, smoothed)", y_scale=1e-3,
                  smooth=True),
            Panel("seconds", "mean_objective_us", "training wall time (s)",
                  "mean objective of the update's batch (ms)\n(feasibility-first objective, smoothed)", y_scale=1e-3,
                  smooth=True),
            Panel("samples", "best_us", "placements sampled", "best objective so far (ms)", y_scale=1e-3),
            Panel("seconds", "best_us", "training wall time (s)", "best objective so far (ms)", y_scale=1e-3))


def _read(run_dir: Path) -> tuple[tuple[Panel, ...], dict[str, dict[str, np.ndarray]]]:
    """The panels of this run's kind of metrics, and its series.

    Returns:
      (panels, {series: {column: float64 array}}): one series per graph for Placeto (its "graph" column), per
      task for gdp, one for the per-graph methods.

    Raises:
      InputError: no metrics.csv, one that cannot be read (placeto.metrics_log.read_table: not UTF-8 CSV with an
        "update" column), or a column missing. Its rows of another number of fields are left out, and a value
        that is not a number is a gap (NaN).
    """
    path = run_dir / METRICS
    if not path.is_file():
        raise InputError(f"{run_dir}: no metrics.csv (not a run directory of `placeto train`?)")
    table = read_table(path)
    rows, fields = [dict(zip(table.header, r)) for r in table.rows], set(table.header)
    panels = PLACETO if "final_ratio" in fields else SEQUENCE
    key = "graph" if "graph" in fields else "task" if "task" in fields else None
    columns = {c for p in panels for c in (p.x, p.y, p.y_over) if c is not None}
    missing = sorted(columns - fields)
    if fields and missing:
        raise InputError(f"{path}: no column {missing[0]!r} (columns: {', '.join(sorted(fields))})")
    per: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        cols = per.setdefault(row[key] if key else _only_graph(run_dir), {})
        for c in columns:
            cols.setdefault(c, []).append(_number(row[c]))
    return panels, {s: {c: np.asarray(v) for c, v in cols.items()} for s, cols in per.items()}


def _number(text: str) -> float:
    """A metrics.csv value as a float; NaN (a gap in the curve) for an empty or damaged one."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _only_graph(run_dir: Path) -> str:
    """The graph a per-graph run trained on, or "all graphs".

    A per-graph run (rnn, hierarchical) has no graph column: its one best/<graph>@<D>d.json names the
    graph.
    """
    best = sorted((run_dir / "best").glob("*.json"))
    return best[0].name.removesuffix(".json") if len(best) == 1 else "all graphs"


def _smooth(y: np.ndarray, k: int) -> np.ndarray:
    if len(y) < 2 * k or k <= 1:
        return y
    return np.convolve(np.pad(y, (k // 2, k - 1 - k // 2), mode="edge"), np.ones(k) / k, mode="valid")


def _series(panel: Panel, d: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of one series in one panel, non-finite points dropped."""
    y = d[panel.y] * panel.y_scale / (d[panel.y_over] if panel.y_over else 1.0)
    if panel.smooth:
        y = _smooth(y, max(1, len(y) // 20))
    keep = np.isfinite(d[panel.x]) & np.isfinite(y)
    return d[panel.x][keep], y[keep]


class Spread(NamedTuple):
    """The per-graph curves of one panel on a common x grid.

    Each curve is interpolated onto the grid from its first point on (its last value held to the end); the grid
    keeps the points where at least half the graphs have a value (anywhere one has, if nowhere do).
    """

    x: np.ndarray  # float64[G]: the grid, in the panel's x unit
    mean: np.ndarray  # float64[G]: mean over the graphs with a value at x
    low: np.ndarray  # float64[G]: their 25th percentile
    high: np.ndarray  # float64[G]: their 75th percentile
    graphs: np.ndarray  # int64[G]: how many graphs have a value at x


def family_spread(panel: Panel, data: dict[str, dict[str, np.ndarray]], points: int = GRID) -> Spread:
    """The mean and interquartile band of `data`'s series in `panel`.

    Deterministic: no sampling.
    """
    curves = [_series(panel, d) for _, d in sorted(data.items())]
    curves = [(x, y) for x, y in curves if len(x)]
    if not curves:
        return Spread(*(np.zeros(0) for _ in range(4)), np.zeros(0, np.int64))
    lo, hi = min(x.min() for x, _ in curves), max(x.max() for x, _ in curves)
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([lo])
    ys = np.full((len(curves), len(grid)), np.nan)
    for row, (x, y) in zip(ys, curves):
        order = np.argsort(x, kind="stable")
        after = grid >= x[order[0]]  # a graph's last value holds to the end (as its best so far does)
        row[after] = np.interp(grid[after], x[order], y[order])
    count = np.isfinite(ys).sum(axis=0)
    # before every graph has had its first update, the mean is of the first few: shown only while nothing else is
    keep = count >= (len(curves) + 1) // 2 if (count >= (len(curves) + 1) // 2).any() else count > 0
    ys = ys[:, keep]
    low, high = np.nanpercentile(ys, [25, 75], axis=0)
    return Spread(grid[keep], np.nanmean(ys, axis=0), low, high, count[keep])


def _held_out(run: Path) -> str:
    """What the run records about the graphs it did not train on.

    selection.json's validation tasks (Placeto's `select`), else that it records none.
    """
    try:
        d = json.loads((run / "selection.json").read_text())
    except (OSError, ValueError):
        d = None
    if isinstance(d, dict) and isinstance(d.get("validation"), str):
        return f"held out: {d['validation']} (scored per snapshot: selection.json)"
    return "held-out graphs: none recorded in this run (`placeto compare` evaluates them)"


def _method(run: Path) -> str:
    try:
        d = json.loads((run / "config.json").read_text())
    except (OSError, ValueError):
        return "placeto"
    return d.get("method", "placeto") if isinstance(d, dict) else "placeto"


def plot_run(run_dir: str | Path, note: Callable[[str], None] | None = print) -> list[Path]:
    """Write training_curves.png into `run_dir`; returns the paths.

    `note` (print by default) gets one line when there are no metrics yet or when a curve has a single point.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = Path(run_dir)
    panels, data = _read(run)
    drawn = [p for p in panels if any(len(_series(p, d)[0]) for d in data.values())]
    title = f"training: {run.name} ({_method(run)})"
    if not drawn:
        fig = _empty_figure(plt, title, f"no data yet: {run / 'metrics.csv'} has no rows\n(a row is written "
                                        f"after each update)")
        if note:
            note(f"{run}: no metrics rows yet (one is written after each update); the plot says so")
    else:
        fig = _curves_figure(plt, drawn, data, title, _held_out(run), _method(run))
        for name, d in sorted(data.items()) if note else ():
            n = len(_series(drawn[0], d)[0])
            if n == 1:
                note(f"{run}: {name} has one point so far (one update): drawn as a marker, no curve yet")
    out = run / "training_curves.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return [out]


def _empty_figure(plt, title: str, text: str):
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=11)
    ax.set_axis_off()
    fig.suptitle(title)
    return fig


def _curves_figure(plt, panels: list[Panel], data: dict, title: str, held_out: str = "", method: str = "placeto"):
    """The panels in two columns, per series or for the family.

    Columns: x in episodes / placements, then in simulator calls / seconds. Up to MAX_NAMED series: one line with
    markers each, a lone point labelled with its value; one series is named in the title, several in a legend
    right of the panels. More: the family's mean line and interquartile band (family_spread), in the method's
    colour. `held_out` (what the run says about held-out graphs) ends the title.
    """
    from matplotlib.ticker import MaxNLocator

    cols = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.8 * rows), squeeze=False, layout="constrained")
    for ax, panel in zip(axes.flat, panels):
        if len(data) <= MAX_NAMED:
            _draw_graphs(plt, ax, panel, data)
        else:
            _draw_family(ax, panel, data, method)
        xs = np.concatenate([_series(panel, d)[0] for d in data.values()])
        if len(xs) and np.ptp(xs) == 0:  # one x value: a readable range around it, not +-5% in fractions
            ax.set_xlim(xs[0] - max(1.0, 0.1 * abs(xs[0])), xs[0] + max(1.0, 0.1 * abs(xs[0])))
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=panel.x != "seconds"))
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    if len(data) == 1:
        title += f", graph {next(iter(data))}"
    elif len(data) <= MAX_NAMED:
        fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8, title="graph")
    else:
        title += f", {len(data)} graphs: their mean and spread"
        axes.flat[0].legend(fontsize=8)  # two entries: inside, clear of the title
    fig.suptitle(title + (f"\n{held_out}" if held_out else ""))
    return fig


def _draw_graphs(plt, ax, panel: Panel, data: dict) -> None:
    """One named line with markers per series.

    Few of them: tab10 has a colour for each.
    """
    cmap = plt.get_cmap("tab10")
    for i, (name, d) in enumerate(sorted(data.items())):
        x, y = _series(panel, d)
        if len(x):
            ax.plot(x, y, lw=1, marker="o", ms=3.5, markevery=max(1, len(x) // 40), color=cmap(i % cmap.N),
                    label=name)
        if len(x) == 1:
            ax.annotate(f"{y[0]:.3g}", (x[0], y[0]), xytext=(5, 5), textcoords="offset points", fontsize=8)


def _draw_family(ax, panel: Panel, data: dict, method: str) -> None:
    """The family's mean line over its interquartile band.

    The line is marked, so a one-point run still shows.
    """
    s = family_spread(panel, data)
    if not len(s.x):
        return
    style = plot_style.line_style(method)
    ax.fill_between(s.x, s.low, s.high, color=style["color"], alpha=0.25, linewidth=0,
                    label="25th-75th percentile of the graphs")
    ax.plot(s.x, s.mean, marker="o", ms=3, markevery=max(1, len(s.x) // 20),
            label=f"mean of {len(data)} graphs", **style)
