"""Gantt chart of a simulated schedule: one row per device (compute) and per outgoing bus (transfers)."""

from __future__ import annotations

import io as _io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from simulator.cluster import Cluster  # noqa: E402
from simulator.io import PathLike, atomic_write_bytes  # noqa: E402
from simulator.result import SimResult  # noqa: E402


def gantt(result: SimResult, cluster: Cluster, path: PathLike, title: str = "") -> None:
    """Draw the schedule of `result` to a PNG at `path` (time in milliseconds)."""
    n_dev = cluster.n_devices
    colors = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.7 * n_dev * 2))
    ms = 1e-3
    for d in range(n_dev):
        on = np.flatnonzero((result.device == d) & (result.end > result.start))
        bars = list(zip(result.start[on] * ms, (result.end[on] - result.start[on]) * ms))
        ax.broken_barh(bars, (2 * d * 1.0 + 0.55, 0.8), facecolors=colors(d % 10), edgecolor="black", linewidth=0.2)
        sent = np.flatnonzero(result.transfers.device == d)
        bars = list(zip(result.transfers.start[sent] * ms,
                        (result.transfers.end[sent] - result.transfers.start[sent]) * ms))
        ax.broken_barh(bars, (2 * d * 1.0 + 1.55, 0.8), facecolors="lightgray", edgecolor=colors(d % 10),
                       linewidth=0.4)
    ax.set_yticks([2 * d + k + 0.95 for d in range(n_dev) for k in (0, 1)],
                  [f"{cluster.devices[d].name}{' bus' if k else ''}" for d in range(n_dev) for k in (0, 1)])
    ax.invert_yaxis()
    ax.axvline(result.runtime * ms, color="red", linestyle="--", linewidth=1)
    ax.set_xlabel("time (ms)")
    oom = "  OOM on " + ", ".join(cluster.devices[d].name for d in np.flatnonzero(result.oom)) if result.any_oom else ""
    ax.set_title(title or f"runtime {result.runtime * ms:.3f} ms ({result.ratio:.2f}x lower bound){oom}")
    fig.tight_layout()
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
