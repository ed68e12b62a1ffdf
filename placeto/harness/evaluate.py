"""Evaluating placements: simulated against measured step times.

The rows and summaries `placeto eval` and `placeto place --hardware` print, their plot and JSON, and the cluster
refitted to measured steps. Each placement's simulated step time is compared with its measured median step time:
error = (simulated - measured) / measured. The summary gives the median and mean |error|, the Spearman rank
correlation with its n, given a single-device placement the placements measured faster and slower than it, the
fastest measured placement against the plain jit of the graph's step (simulator.hardware.plain_jit), and whether the
devices ran concurrently (simulator.measure.concurrency). Running the placements is simulator.hardware.runner's.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from tqdm import tqdm

from placeto.harness import plot_style
from simulator.engine.fast import simulate
from simulator.hardware.plain_jit import combined, plain_line, rig_line
from simulator.hardware.runner import HardwareRunner
from simulator.hardware.timing import reporting_steps
from simulator.measure.agreement import Agreement, EvalRow, agreement, format_agreement, versus_single
from simulator.measure.concurrency import Concurrency, beyond_concurrency, beyond_note, concurrency_line
from simulator.measure.fit import cluster_params, fit_on_placements, format_fit, held_out_predictions
from simulator.model.cluster import Cluster, cluster_summary, save_cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import PathLike, atomic_write_bytes


def evaluate(graph: Graph, placements: Sequence[tuple[str, np.ndarray]], cluster: Cluster,
             runner: HardwareRunner | None = None, repeats: int = 5, warmup: int = 2,
             progress: Callable[[str], None] | None = None) -> list[EvalRow]:
    """Simulate each (name, placement) and, with a `runner`, measure it.

    With a runner the simulation is the runner's (`HardwareRunner.simulate_and_measure`: on the process rig the
    staged one, its units' costs scaled to the single device's median step in the same timed rounds).
    `progress` gets each row's table line.
    """
    arrays = [np.asarray(p, dtype=np.int32) for _, p in placements]
    if runner is None:
        simulated, measured = [float(simulate(graph, p, cluster).runtime) for p in arrays], [None] * len(arrays)
    else:
        quiet = progress or (lambda line: None)
        simulated, measured, _ = runner.simulate_and_measure(arrays, repeats, warmup, quiet)
    rows = [EvalRow(name, sim, m) for (name, _), sim, m in zip(placements, simulated, measured)]
    for row in rows if progress else ():
        progress(format_row(row))
    return rows


def memory_lines(graph: Graph, placements: Sequence[tuple[str, np.ndarray]], cluster: Cluster,
                 width: int = 28) -> list[str]:
    """Each placement's simulated peak memory per device against capacity (GB), OOM marked."""
    caps = ", ".join(dict.fromkeys(f"{c / 1e9:.4g}" for c in cluster.memory))
    lines = [f"{'peak memory GB':<{width}} per device ({', '.join(cluster.device_names)}; capacity {caps} GB)"]
    for name, p in placements:
        res = simulate(graph, np.asarray(p, np.int32), cluster)
        name = Path(name).name
        name = name if len(name) <= width else "..." + name[-(width - 3):]
        peaks = " ".join(f"{b / 1e9:.4g}" for b in res.peak_memory)
        over = ", ".join(cluster.devices[k].name for k in np.flatnonzero(res.oom))
        lines.append(f"{name:<{width}} {peaks}{'  OOM on ' + over if over else ''}")
    return lines


def format_row(row: EvalRow, width: int = 28) -> str:
    """One table line: placement, simulated and measured times, error.

    The placement's file name and simulated time; when measured, its median [IQR, min] and the error (times in
    ms, the error in percent).
    """
    name = Path(row.name).name
    name = name if len(name) <= width else "..." + name[-(width - 3):]
    text = f"{name:<{width}} {row.simulated_us / 1e3:>12.3f}"
    if row.measured is None:
        return text
    m = row.measured
    error = (row.simulated_us - m.median_us) / m.median_us * 100
    return (f"{text} {m.median_us / 1e3:>12.3f}  [{m.q25_us / 1e3:.3f}-{m.q75_us / 1e3:.3f}, "
            f"min {m.min_us / 1e3:.3f}]  {error:+7.1f}%")


def plot_agreement(rows: Sequence[EvalRow], path: PathLike, title: str = "") -> None:
    """A PNG scatter of measured against simulated step times.

    With the y = x line. Measured: the median with interquartile bars; times in ms. Each placement is named in the
    legend and coloured by its method (placeto.harness.plot_style; eval's file names `<graph>.<D>dev.<method>.json`
    count as their method); axes turn logarithmic when times span over 20x, and zoom in on the points when they all
    lie in the top 70% of the range.

    Raises:
      InputError: nothing was measured.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r.measured is not None]
    if not measured:
        raise InputError("--plot needs --hardware (nothing was measured)")
    fig = _agreement_figure(plt, measured, title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _agreement_figure(plt, measured: Sequence[EvalRow], title: str):
    """The figure of plot_agreement, from rows that were all measured."""
    from matplotlib.lines import Line2D

    names = [_short_name(r.name) for r in measured]
    colors = plot_style.colors(names)
    fig, ax = plt.subplots(figsize=(8.5 if len(measured) > 6 else 6.5, 5.2), layout="constrained")
    seen: dict[str, int] = {}
    for r, name in zip(measured, names):
        m = r.measured
        k = seen[colors[name]] = seen.get(colors[name], -1) + 1  # a second placement of one colour: new marker
        learned = plot_style.is_learned(name)
        ax.errorbar(r.simulated_us / 1e3, m.median_us / 1e3, fmt="osv^D"[k % 5], capsize=3, ms=7 if learned else 6,
                    yerr=[[(m.median_us - m.q25_us) / 1e3], [(m.q75_us - m.median_us) / 1e3]], color=colors[name],
                    mec="black" if learned else colors[name], label=name)
    times = [t / 1e3 for r in measured for t in (r.simulated_us, r.measured.q25_us, r.measured.q75_us) if t > 0]
    lo, hi = min(times), max(times)
    log = hi / lo > 20
    # log: a margin of 1.5x; linear: from 0 unless every point lies in the top 70% (then zoom in on them)
    lo, hi = (lo / 1.5, hi * 1.5) if log else (0.0 if lo < 0.3 * hi else lo - 0.1 * (hi - lo), hi * 1.05)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="simulated step time (ms)", ylabel="measured step time (ms)",
           xscale="log" if log else "linear", yscale="log" if log else "linear")
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=10)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], color="gray", marker="o", linestyle="-", markersize=5),
                Line2D([], [], color="black", linestyle="--", lw=0.8)]
    labels += ["dot: median measured step;\nbar: interquartile range", "measured = simulated"]
    if any(plot_style.is_learned(n) for n in names):
        handles.append(Line2D([], [], color="white", marker="o", mec="black", linestyle="none"))
        labels.append("black edge: learned method")
    ax.legend(handles, labels, fontsize=8, title="placement", title_fontsize=8,
              **(dict(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0) if len(measured) > 6 else
                 dict(loc="best")))
    return fig


def _short_name(name: str) -> str:
    """A placement's label: its file's stem, or the method name.

    The file name without .json / .json.gz; a method name as given.
    """
    stem = Path(name).name
    for suffix in (".gz", ".json"):
        stem = stem[:-len(suffix)] if stem.endswith(suffix) else stem
    return stem


@contextlib.contextmanager
def step_bar(what: str, total: int | None = None):
    """A tqdm bar on stderr counting the steps run inside the block.

    Shown on a terminal only; advanced by every step simulator.hardware.timing runs inside the block
    (simulator.hardware.timing.reporting_steps): its rate and, with a `total`, its ETA (`place --hardware` and
    `eval --hardware`'s long phases).
    """
    with tqdm(total=total, desc=what, unit="step", disable=None, leave=False, file=sys.stderr) as bar, \
            reporting_steps(bar.update):
        yield bar


def summary_lines(rows: Sequence[EvalRow], placements: Sequence[np.ndarray], concurrency: Concurrency | None,
                  plain: Sequence[Any] = (), rig: bool = False) -> list[str]:
    """The summary lines of `eval --hardware`.

    What the errors compare and the agreement (Spearman with its n); the placements measured faster or slower
    than the fastest measured single-device placement (when one was given); the fastest measured placement against
    the plain jit of the step (`plain`: simulator.hardware.plain_jit.PlainJit runs, when given); what host CPU
    devices are (`rig`: the devices are host CPU devices); and whether the devices ran concurrently
    (`concurrency`; None: not measured, one device or mixed platforms).
    """
    lines = [f"summary, simulated against measured step time: {format_agreement(agreement(rows))}"]
    one = [len(np.unique(p)) == 1 for p in placements]  # single-device placements: compared with, not listed
    singles = [r for r, single in zip(rows, one) if single and r.measured is not None]
    if singles:
        best = min(singles, key=lambda r: r.measured.median_us)
        lines += versus_single([best] + [r for r, single in zip(rows, one) if not single], best)
        lines += beyond_lines(best, [r for r, single in zip(rows, one) if not single and r.measured is not None],
                              concurrency)
    measured = [r for r in rows if r.measured is not None]
    if plain and measured:
        fastest = min(measured, key=lambda r: r.measured.median_us)
        lines.append(plain_line(plain, f"fastest measured placement ({_short_name(fastest.name)})",
                                fastest.measured))
    if rig:
        lines.append(rig_line())
    if concurrency is not None:
        lines.append(concurrency_line(concurrency))
    return lines


def beyond_lines(single: EvalRow, others: Sequence[EvalRow], concurrency: Concurrency | None) -> list[str]:
    """A line if the fastest beat `single` beyond the concurrency.

    One line when the fastest of `others` (measured placements over several devices) measured faster than the
    single device `single` than the devices' measured concurrency allows
    (simulator.measure.concurrency.beyond_concurrency); else none. eval measures each once; `place --hardware`
    measures such a speedup again.
    """
    if not others:
        return []
    fastest = min(others, key=lambda r: r.measured.median_us)
    speedup = single.measured.median_us / fastest.measured.median_us
    if not beyond_concurrency(speedup, concurrency):
        return []
    return [f"fastest measured placement ({_short_name(fastest.name)}): {beyond_note(concurrency, speedup)}"]


def write_rows_json(path: PathLike, graph: Graph, cluster: Cluster, rows: Sequence[EvalRow],
                    summary: Agreement, plain: Sequence[Any] = ()) -> None:
    """Write the rows, the agreement and the plain jit's timing as JSON.

    "plain_jit" (when timed) holds its timing over every run with its device and program, or
    {"unavailable": why}.
    """
    def timing(m):
        return None if m is None else {k: getattr(m, k) for k in ("median_us", "q25_us", "q75_us", "min_us",
                                                                  "max_us")}

    finite = lambda x: None if isinstance(x, float) and not math.isfinite(x) else x  # noqa: E731  NaN: null
    obj = {"graph": graph.name, "cluster": cluster.to_dict(),
           "agreement": {k: finite(v) for k, v in summary._asdict().items()},  # spearman_note: why null
           "rows": [{"placement": r.name, "simulated_us": r.simulated_us, "measured": timing(r.measured)}
                    for r in rows]}
    if plain:
        both = combined(plain)
        obj["plain_jit"] = ({**timing(both.timing()), "steps": len(both.times_us), "runs": len(plain),
                             "device": both.device, "program": both.program} if both.available else
                            {"unavailable": both.why})
    atomic_write_bytes(path, (json.dumps(obj, indent=1, allow_nan=False) + "\n").encode())


def refit(path: str, graph: Graph, cluster: Cluster, placements: Sequence[np.ndarray],
          rows: Sequence[EvalRow]) -> None:
    """Refit the cluster to the measured steps, write it, print the fit.

    The per-op and per-transfer costs are fitted to the rows' measured steps and the cluster written to `path`;
    prints the fit and the leave-one-out agreement (simulator.measure.fit.held_out_predictions).
    """
    measured = [r.measured.median_us for r in rows]
    start = cluster_params(cluster)
    print(f"refitting the cluster to the {len(rows)} measured placements ...", flush=True)
    fit = fit_on_placements(graph, placements, measured, start, cluster, names=[Path(r.name).name for r in rows])
    held = held_out_predictions(graph, placements, measured, start, cluster)
    save_cluster(fit.cluster, path)
    print(format_fit(fit, label="placement"))
    held_rows = [EvalRow(r.name, float(h), r.measured) for r, h in zip(rows, held)]
    print(f"held out (each placement simulated with the fit on the others): {format_agreement(agreement(held_rows))}")
    print(f"{path}: {cluster_summary(fit.cluster)}")
