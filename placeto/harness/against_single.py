"""Warnings for placements far slower than `single`, and for methods that take mixed devices for identical ones.

A placement that simulates many times slower than every node on one device (`placeto.baselines.single`) has gone
wrong for this cluster: e.g. a placer that spreads nodes evenly over three GPUs and a host CPU tens of times
slower. `place` and `compare` then print one warning line (`place_warning`, `compare_warning`) instead of
showing the figure as if it were a result. Methods that by design treat every device as equally fast
(`SAME_SPEED`) are named in that line on a cluster of mixed device kinds, slow or not.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from placeto.baselines.single import single, single_device
from placeto.harness.compare import REFERENCES, cluster_of
from simulator import simulate
from simulator.model.cluster import Cluster, PresetSpec
from simulator.model.graph import Graph
from simulator.model.max_load import is_max_load

SLOW_FACTOR = 2.0  # a placement simulating more than this many times `single`'s runtime gets the warning
SAME_SPEED = {  # methods that treat every device as equally fast by design: how (max-load inputs aside)
    "m-topo": "fills the devices in topological order to equal memory shares as if they were identical",
    "pipeline-dp": "prices every stage at the first accelerator's speed",
}


def mixed_kinds(cluster: Cluster) -> list[str]:
    """The cluster's device kinds, sorted, if it has more than one; else []."""
    kinds = sorted(set(cluster.kinds))
    return kinds if len(kinds) > 1 else []


def same_speed_note(method: str, graph: Graph, cluster: Cluster) -> str:
    """"m-topo fills ... (h100-nvlink-cpu mixes cpu and h100)", or "" where `method` does not assume identical
    devices, the cluster's are of one kind, or the graph is an msr-fiddle max-load input (its own per-device
    loads)."""
    kinds = mixed_kinds(cluster)
    if method not in SAME_SPEED or not kinds or is_max_load(graph):
        return ""
    return f"{method} {SAME_SPEED[method]} ({cluster.name} mixes {', '.join(kinds[:-1])} and {kinds[-1]})"


def place_warning(method: str, graph: Graph, cluster: Cluster, placed, alone) -> str | None:
    """`place`'s warning line, or None.

    Args:
      placed, alone: simulator.model.result.SimResult of the placement written and of `single`'s.

    A placement (not a reference; an msr-fiddle max-load input: none) that fits and simulates more than SLOW_FACTOR times `single`'s runtime (when
    that fits), and/or `same_speed_note`.
    """
    if method in REFERENCES or is_max_load(graph):
        return None
    parts = []
    if not placed.any_oom and not alone.any_oom and placed.runtime > SLOW_FACTOR * alone.runtime > 0:
        device = cluster.devices[single_device(graph, cluster)].name
        parts.append(f"{method}'s placement simulates {placed.runtime / alone.runtime:.2f}x slower than single "
                     f"({alone.runtime / 1e3:.3f} ms, every node on {device}; warned above {SLOW_FACTOR:g}x)")
    note = same_speed_note(method, graph, cluster)
    if note:
        parts.append(note)
    return "placeto: warning: " + "; ".join(parts) if parts else None


def compare_warning(rows: Sequence, graphs: Sequence[Graph], cluster: str | PresetSpec | Cluster) -> str | None:
    """`compare`'s one warning line over all its rows, or None.

    Args:
      rows: placeto.harness.compare.Row of `graphs` on `cluster` (a preset name or spec, or a Cluster).

    Names each method (not a reference; msr-fiddle max-load inputs aside) with a row that fits and simulates more than SLOW_FACTOR times `single`
    on the same graph and device count (the "single" row's runtime, else `single` simulated here; skipped where
    single does not fit), with its worst ratio, then the `same_speed_note` of each method with a row on a mixed
    cluster.
    """
    by_graph = {g.name: g for g in graphs}
    alone: dict[tuple[str, int], float] = {}
    worst: dict[str, tuple[float, str]] = {}
    notes: dict[str, str] = {}
    for r in rows:
        graph, key = by_graph.get(r.graph), (r.graph, r.n_devices)
        if r.method in REFERENCES or not r.applies or r.oom or graph is None or is_max_load(graph):
            continue
        here = cluster_of(cluster, r.n_devices)
        if key not in alone:
            alone[key] = _single_runtime(rows, graph, here, r.n_devices)
        ratio = r.runtime_us / alone[key] if alone[key] > 0 else math.nan
        if ratio > SLOW_FACTOR and ratio > worst.get(r.method, (0.0, ""))[0]:
            worst[r.method] = (ratio, f"{r.graph} at {r.n_devices} devices")
        note = same_speed_note(r.method, graph, here)
        if note:
            notes.setdefault(r.method, note)
    parts = []
    if worst:
        slow = sorted(worst.items(), key=lambda kv: -kv[1][0])
        parts.append(f"more than {SLOW_FACTOR:g}x slower than single (every node on the device the graph alone "
                     "simulates fastest on): " + ", ".join(f"{m} (up to {x:.1f}x: {where})" for m, (x, where) in slow))
    parts += list(notes.values())
    return "placeto: warning: " + "; ".join(parts) if parts else None


def _single_runtime(rows: Sequence, graph: Graph, cluster: Cluster, n_devices: int) -> float:
    """`single`'s runtime (us) on this graph and device count: its row's, else simulated; NaN where it does not fit."""
    mine = next((r for r in rows if r.method == "single" and r.graph == graph.name and r.n_devices == n_devices
                 and r.applies), None)
    if mine is not None:
        return math.nan if mine.oom else mine.runtime_us
    res = simulate(graph, np.asarray(single(graph, cluster)), cluster)
    return math.nan if res.any_oom else float(res.runtime)
