"""Gantt charts: a simulated schedule, and a rig's measured step beside it.

A step the process rig measured is drawn beside the simulated one. Per device, one row of compute (the ops
it runs) and one row of its outgoing bus (the transfers it sends), coloured by device; the step's end and the
lower bound as vertical lines.
"""

from __future__ import annotations

import io as _io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from simulator.engine.fast import simulate  # noqa: E402
from simulator.measure.rig_step import MeasuredStep  # noqa: E402
from simulator.model.cluster import Cluster  # noqa: E402
from simulator.model.graph import Graph  # noqa: E402
from simulator.model.io import PathLike, atomic_write_bytes  # noqa: E402
from simulator.model.result import SimResult  # noqa: E402

MS = 1e-3  # the chart's unit: milliseconds per microsecond
NS_MS = 1e-6  # milliseconds per nanosecond (a measured step's clock)
BUS_ALPHA = 0.35  # transfers are drawn in a light tint of their sending device's colour


def gantt(result: SimResult, cluster: Cluster, path: PathLike, title: str = "") -> None:
    """Draws the schedule of `result` to a PNG at `path`, time in milliseconds.

    `title` heads the chart; a line below it gives the runtime, its ratio to the lower bound and any device out of
    memory.
    """
    fig = gantt_figure(result, cluster, title)
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def gantt_figure(result: SimResult, cluster: Cluster, title: str = ""):
    """The matplotlib Figure that `gantt` saves (the caller closes it)."""
    n_dev = cluster.n_devices
    colors = plt.get_cmap("tab10" if n_dev <= 10 else "tab20")
    fig, ax = plt.subplots(figsize=(12, 1.9 + 0.7 * n_dev * 2), layout="constrained")
    for d in range(n_dev):
        color = colors(d % colors.N)
        on = np.flatnonzero((result.device == d) & (result.end > result.start))
        bars = list(zip(result.start[on] * MS, (result.end[on] - result.start[on]) * MS))
        ax.broken_barh(bars, (2 * d + 0.55, 0.8), facecolors=color, edgecolor="black", linewidth=0.2)
        sent = np.flatnonzero(result.transfers.device == d)
        bars = list(zip(result.transfers.start[sent] * MS,
                        (result.transfers.end[sent] - result.transfers.start[sent]) * MS))
        ax.broken_barh(bars, (2 * d + 1.55, 0.8), facecolors=matplotlib.colors.to_rgba(color, BUS_ALPHA),
                       edgecolor=color, linewidth=0.4)
    ax.set_yticks([2 * d + k + 0.95 for d in range(n_dev) for k in (0, 1)],
                  [f"{cluster.devices[d].name} {'bus' if k else 'compute'}" for d in range(n_dev) for k in (0, 1)])
    ax.invert_yaxis()
    runtime_ms = result.runtime * MS
    lower_ms = runtime_ms / result.ratio if result.ratio > 0 else None
    ax.axvline(runtime_ms, color="black", linestyle="--", linewidth=1.2)
    if lower_ms is not None:
        ax.axvline(lower_ms, color="dimgray", linestyle=":", linewidth=1.4)
    ax.set_xlabel("time since the step's start (ms)")
    ax.grid(axis="x", alpha=0.3)
    oom = "; out of memory on " + ", ".join(cluster.devices[d].name for d in np.flatnonzero(result.oom)) \
        if result.any_oom else ""
    summary = f"runtime {runtime_ms:.3f} ms ({result.ratio:.2f}x the lower bound){oom}"
    ax.set_title(f"{title}\n{summary}" if title else summary)
    fig.legend(handles=_legend_handles(colors(0), lower_ms is not None), loc="outside lower center", ncol=2,
              fontsize=8, frameon=False)
    return fig


def _legend_handles(color, with_lower_bound: bool) -> list:
    """What each mark of the chart means (colours: one per device)."""
    handles = [Patch(facecolor=color, edgecolor="black", linewidth=0.2,
                     label="compute row: an op running on the device (one bar per op; colour = device)"),
               Patch(facecolor=matplotlib.colors.to_rgba(color, BUS_ALPHA), edgecolor=color, linewidth=0.4,
                     label="bus row: a tensor the device is sending to another device (one bar per transfer)"),
               Line2D([], [], color="black", linestyle="--", linewidth=1.2,
                      label="dashed line: end of the step (the simulated runtime)")]
    if with_lower_bound:
        handles.append(Line2D([], [], color="dimgray", linestyle=":", linewidth=1.4,
                              label="dotted line: lower bound (max of critical path, compute / devices)"))
    return handles


def gantt_measured(path: PathLike, graph: Graph, cluster: Cluster, placement: np.ndarray, step: MeasuredStep,
                   title: str = "") -> None:
    """Writes a PNG of `placement`'s simulated schedule above its measured step.

    The simulated schedule on `cluster` (top) and the measured step (bottom) share one time axis in milliseconds.
    """
    result = simulate(graph, np.asarray(placement, dtype=np.int32), cluster)
    n = cluster.n_devices
    colors = plt.get_cmap("tab10")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 2.6 + 1.2 * n), sharex=True, layout="constrained")
    for d in range(n):
        color = colors(d % 10)
        on = np.flatnonzero((result.device == d) & (result.end > result.start))
        top.broken_barh(list(zip(result.start[on] * 1e-3, (result.end[on] - result.start[on]) * 1e-3)),
                        (2 * d + 0.55, 0.8), facecolors=color, edgecolor="black", linewidth=0.2)
        sent = np.flatnonzero(result.transfers.device == d)
        top.broken_barh(list(zip(result.transfers.start[sent] * 1e-3,
                                 (result.transfers.end[sent] - result.transfers.start[sent]) * 1e-3)),
                        (2 * d + 1.55, 0.8), facecolors=matplotlib.colors.to_rgba(color, 0.35), edgecolor=color,
                        linewidth=0.4)
        events = step.events.get(d, [])
        runs = [(s * NS_MS, (e - s) * NS_MS) for kind, _, s, e in events if kind == "run"]
        moves = [(s * NS_MS, (e - s) * NS_MS) for kind, _, s, e in events if kind != "run"]
        bottom.broken_barh(runs, (2 * d + 0.55, 0.8), facecolors=color, edgecolor="black", linewidth=0.4)
        bottom.broken_barh(moves, (2 * d + 1.55, 0.8), facecolors=matplotlib.colors.to_rgba(color, 0.35),
                           edgecolor=color, linewidth=0.4)
    labels = [f"{cluster.devices[d].name} {'transfers' if k else 'compute'}" for d in range(n) for k in (0, 1)]
    for ax in (top, bottom):
        ax.set_yticks([2 * d + k + 0.95 for d in range(n) for k in (0, 1)], labels)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    top.axvline(result.runtime * 1e-3, color="black", linestyle="--", linewidth=1.2)
    bottom.axvline(step.wall_ns * NS_MS, color="black", linestyle="--", linewidth=1.2)
    top.set_title(f"simulated: {result.runtime * 1e-3:.2f} ms (one bar per unit; transfers on the sender's row)",
                  fontsize=9)
    n_runs = sum(kind == "run" for evs in step.events.values() for kind, *_ in evs)
    bottom.set_title(f"measured on the process rig: {step.wall_ns * NS_MS:.2f} ms, the median of "
                     f"{len(step.steps_ns)} steps (one bar per stage, {n_runs} stages; transfers: a send's copy "
                     f"into shared memory, a receive's wait and copy)", fontsize=9)
    bottom.set_xlabel("time since the step's start (ms); dashed: the step's end")
    if title:
        fig.suptitle(title, fontsize=10)
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
