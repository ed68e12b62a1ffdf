"""Training curves of a run directory (training_curves.png), for every method's metrics.csv.

Placeto's rows (one per update and graph: episodes, simulator calls, runtimes and the lower bound) are drawn as
runtime / lower bound against episodes and simulator calls; the sequence methods' rows (gdp, rnn, hierarchical:
placements sampled, seconds, objectives in microseconds) as objective in ms against placements and wall seconds.
Every point is marked, so a run of one update still shows; a panel without data says so instead of staying blank.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from simulator.errors import InputError


class Panel(NamedTuple):
    """One panel: column `y` (scaled by `y_scale`, divided by column `y_over` when set) against column `x`."""

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
                  "mean objective of the update's batch (ms)\n(memory-penalised runtime, smoothed)", y_scale=1e-3,
                  smooth=True),
            Panel("seconds", "mean_objective_us", "training wall time (s)",
                  "mean objective of the update's batch (ms)\n(memory-penalised runtime, smoothed)", y_scale=1e-3,
                  smooth=True),
            Panel("samples", "best_us", "placements sampled", "best objective so far (ms)", y_scale=1e-3),
            Panel("seconds", "best_us", "training wall time (s)", "best objective so far (ms)", y_scale=1e-3))


def _read(run_dir: Path) -> tuple[tuple[Panel, ...], dict[str, dict[str, np.ndarray]]]:
    """(the panels of this run's kind of metrics, {series: {column: float64 array}}): one series per graph for
    Placeto (its "graph" column), per task for gdp, one for the per-graph methods."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise InputError(f"{run_dir}: no metrics.csv (not a run directory of `placeto train`?)")
    with path.open() as f:
        reader = csv.DictReader(f)
        rows, fields = list(reader), set(reader.fieldnames or ())
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
            cols.setdefault(c, []).append(float(row[c]) if row[c] not in ("", None) else math.nan)
    return panels, {s: {c: np.asarray(v) for c, v in cols.items()} for s, cols in per.items()}


def _only_graph(run_dir: Path) -> str:
    """The graph a per-graph run (rnn, hierarchical: no graph column) trained on: its one best/<graph>@<D>d.json,
    else "all graphs"."""
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


def _method(run: Path) -> str:
    try:
        d = json.loads((run / "config.json").read_text())
    except (OSError, ValueError):
        return "placeto"
    return d.get("method", "placeto") if isinstance(d, dict) else "placeto"


def plot_run(run_dir: str | Path, note: Callable[[str], None] | None = print) -> list[Path]:
    """Write training_curves.png into run_dir and return the files written. `note` (print by default) gets one
    line when there are no metrics yet or when a curve has a single point."""
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
        fig = _curves_figure(plt, drawn, data, title)
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


def _curves_figure(plt, panels: list[Panel], data: dict, title: str):
    """Panels in a grid of two columns (x: episodes / placements, then simulator calls / seconds), one line with
    markers per series; a lone point is labelled with its value. One series is named in the title, several in a
    legend right of the panels."""
    from matplotlib.ticker import MaxNLocator

    cols = 2 if len(panels) > 1 else 1
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.8 * rows), squeeze=False, layout="constrained")
    cmap = plt.get_cmap("tab10" if len(data) <= 10 else "tab20")
    for ax, panel in zip(axes.flat, panels):
        for i, (name, d) in enumerate(sorted(data.items())):
            x, y = _series(panel, d)
            if len(x):
                ax.plot(x, y, lw=1, marker="o", ms=3.5, markevery=max(1, len(x) // 40), color=cmap(i % cmap.N),
                        label=name)
            if len(x) == 1:
                ax.annotate(f"{y[0]:.3g}", (x[0], y[0]), xytext=(5, 5), textcoords="offset points", fontsize=8)
        xs = np.concatenate([_series(panel, d)[0] for d in data.values()])
        if len(xs) and np.ptp(xs) == 0:  # one x value: a readable range around it, not +-5% in fractions
            ax.set_xlim(xs[0] - max(1.0, 0.1 * abs(xs[0])), xs[0] + max(1.0, 0.1 * abs(xs[0])))
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=panel.x != "seconds"))
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    if len(data) == 1:
        title += f", graph {next(iter(data))}"
    elif len(data) <= 20:
        fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8, title="graph")
    else:
        title += f", {len(data)} graphs (not named: too many)"
    fig.suptitle(title)
    return fig
