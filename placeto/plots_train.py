"""Training curves of a run directory: runtime / lower bound vs episodes and vs simulator calls (PNG)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


def _read(run_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    """metrics.csv grouped by graph: graph -> column -> float64 array (rows in file order)."""
    per: dict[str, dict[str, list[float]]] = {}
    with (run_dir / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            cols = per.setdefault(row["graph"], {})
            for k in ("episode", "sim_calls", "final_ratio", "best_runtime", "lower_bound", "entropy"):
                cols.setdefault(k, []).append(float(row[k]))
    return {g: {k: np.asarray(v) for k, v in cols.items()} for g, cols in per.items()}


def _smooth(y: np.ndarray, k: int) -> np.ndarray:
    if len(y) < 2 * k or k <= 1:
        return y
    return np.convolve(np.pad(y, (k // 2, k - 1 - k // 2), mode="edge"), np.ones(k) / k, mode="valid")


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write training_curves.png (episodes and simulator calls on x) into run_dir; return the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = Path(run_dir)
    data = _read(run)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharey="row")
    for name, d in sorted(data.items()):
        k = max(1, len(d["episode"]) // 20)
        label = name if len(data) <= 12 else None
        for col, x in enumerate(("episode", "sim_calls")):
            axes[0, col].plot(d[x], _smooth(d["final_ratio"], k), lw=1, label=label)
            axes[1, col].plot(d[x], d["best_runtime"] / d["lower_bound"], lw=1, label=label)
    for col, x in enumerate(("episodes", "simulator calls")):
        axes[1, col].set_xlabel(x)
    axes[0, 0].set_ylabel("final runtime / lower bound\n(batch mean, smoothed)")
    axes[1, 0].set_ylabel("best runtime so far / lower bound")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    if len(data) <= 12:
        axes[0, 1].legend(fontsize=7)
    fig.suptitle(f"training: {run.name}")
    fig.tight_layout()
    out = run / "training_curves.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return [out]
