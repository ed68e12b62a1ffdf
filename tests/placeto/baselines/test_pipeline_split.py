"""pipeline-dp: feasible and optimal among contiguous splits (brute force), deterministic, colocation kept."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from placeto.baselines import run_method
from placeto.baselines.pipeline.split import pipeline_dp
from simulator.model.generate import layered_dag
from simulator.model.cluster import cluster_preset
from simulator.model.max_load import max_load_reference
from simulator.workloads.msr_fiddle import throughput_from_dict


def chain(n: int, seed: int, capacity: float, n_acc: int = 2, n_cpu: int = 1, training: bool = False):
    """A random chain in msr-fiddle's format (with a mirrored backward chain if `training`)."""
    rng = np.random.default_rng(seed)
    nodes = [{"id": k, "supportedOnFpga": 1, "cpuLatency": float(rng.uniform(2, 12)),
              "fpgaLatency": float(rng.uniform(0.5, 3)), "isBackwardNode": 0, "colorClass": k,
              "size": float(rng.integers(1, 4))} for k in range(n)]
    edges = [{"sourceId": k, "destId": k + 1, "cost": float(c)} for k, c in enumerate(rng.uniform(0, 2, n - 1))]
    if training:
        nodes += [{**x, "id": n + x["id"], "isBackwardNode": 1, "fpgaLatency": 2 * x["fpgaLatency"]} for x in nodes]
        edges += [{"sourceId": n + k + 1, "destId": n + k, "cost": float(c)}
                  for k, c in enumerate(rng.uniform(0, 2, n - 1))]
    return throughput_from_dict({"maxSizePerFPGA": capacity, "maxFPGAs": n_acc, "maxCPUs": n_cpu, "nodes": nodes,
                                 "edges": edges}, f"chain{seed}")


def contiguous(assign: tuple[int, ...]) -> bool:
    """Each device's positions form one interval."""
    seen, last = set(), None
    for d in assign:
        if d != last:
            if d in seen:
                return False
            seen.add(d)
            last = d
    return True


def brute_force(task, n: int) -> float:
    """Least max-load of a contiguous split of the forward chain that fits in memory (inf if none)."""
    g, c = task.graph, task.cluster
    best = float("inf")
    for assign in itertools.product(range(c.n_devices), repeat=n):
        if not contiguous(assign):
            continue
        p = np.asarray(list(assign) + list(assign)[:g.n_nodes - n])  # backward nodes follow their class anyway
        load, peak = max_load_reference(g, p, c)
        if np.all(peak <= c.capacity):
            best = min(best, load)
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("training", [False, True])
def test_optimal_among_contiguous_splits(seed, training):
    n = 6
    task = chain(n, seed, capacity=7.0 if training else 5.0, training=training)
    p = pipeline_dp(task.graph, task.cluster)
    load, peak = max_load_reference(task.graph, p, task.cluster)
    assert np.all(peak <= task.cluster.capacity)
    assert load == pytest.approx(brute_force(task, n), rel=1e-12)
    assert np.array_equal(p, pipeline_dp(task.graph, task.cluster))  # deterministic
    if training:  # backward nodes on their forward node's device
        assert np.array_equal(p[n:], p[:n])


def test_infeasible_returns_least_excess_split():
    task = chain(5, 1, capacity=1.0, n_cpu=0)  # sizes 1-3 each, 2 accelerators of 1 byte: nothing fits
    p = pipeline_dp(task.graph, task.cluster)
    peak = max_load_reference(task.graph, p, task.cluster)[1]
    best = min(max(max_load_reference(task.graph, np.asarray(a), task.cluster)[1].max() - 1.0, 0.0)
               for a in itertools.product(range(2), repeat=5) if contiguous(a))
    assert peak.max() - 1.0 == pytest.approx(best)


def test_ordinary_graph_with_the_simulator_objective():
    graph = layered_dag(40, seed=3)
    cluster = cluster_preset("placeto-k80", 4)
    run = run_method("pipeline-dp", graph, cluster)
    assert run.placement.shape == (40,) and len(set(run.placement.tolist())) > 1
    assert run.simulator_calls == 0
