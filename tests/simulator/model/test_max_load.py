"""max-load: the batched numpy version equals the plain reference; toy cases by hand."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.model.max_load import max_load_batch, max_load_reference
from simulator.workloads.msr_fiddle import throughput_from_dict


def chain_task(n: int, seed: int, training: bool = False, n_cpu: int = 1):
    """A random DAG in their format (edges forward in node order), optionally with a mirrored backward pass."""
    rng = np.random.default_rng(seed)
    nodes = [{"id": k, "supportedOnFpga": 1, "cpuLatency": float(rng.uniform(1, 20)),
              "fpgaLatency": float(rng.uniform(0, 2)), "isBackwardNode": 0, "colorClass": k,
              "size": float(rng.integers(0, 5))} for k in range(n)]
    cost = rng.uniform(0, 1, size=n)
    edges = [{"sourceId": int(u), "destId": int(v), "cost": float(cost[u])}
             for v in range(1, n) for u in rng.choice(v, size=min(v, int(rng.integers(1, 3))), replace=False)]
    if training:
        nodes += [{**x, "id": n + x["id"], "isBackwardNode": 1} for x in nodes]
        cost_b = rng.uniform(0, 1, size=n)
        edges += [{"sourceId": n + e["destId"], "destId": n + e["sourceId"], "cost": float(cost_b[e["destId"]])}
                  for e in edges]
        edges += [{"sourceId": k, "destId": n + k, "cost": float(cost[k])} for k in range(n)]  # activations
    return throughput_from_dict({"maxSizePerFPGA": 6.0, "maxFPGAs": 3, "maxCPUs": n_cpu, "nodes": nodes,
                                 "edges": edges}, f"random{seed}")


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 2**16), training=st.booleans(), n_cpu=st.integers(0, 2))
def test_batch_equals_reference(n, seed, training, n_cpu):
    task = chain_task(n, seed, training, n_cpu)
    rng = np.random.default_rng(seed + 1)
    placements = rng.integers(0, task.cluster.n_devices, size=(5, task.graph.n_nodes))
    load, peak = max_load_batch(task.graph, placements, task.cluster)
    for b, p in enumerate(placements):
        ref_load, ref_peak = max_load_reference(task.graph, p, task.cluster)
        np.testing.assert_allclose(load[b], ref_load, rtol=1e-12)
        np.testing.assert_allclose(peak[b], ref_peak, rtol=1e-12)


def test_toy_by_hand():
    """0 -> 1, 0 -> 2 on three devices: 0 sends once (cost 3) and each receiver pays 3; the CPU pays none."""
    d = {"maxSizePerFPGA": 100.0, "maxFPGAs": 2, "maxCPUs": 1,
         "nodes": [{"id": k, "supportedOnFpga": 1, "cpuLatency": 10.0 * (k + 1), "fpgaLatency": float(k + 1),
                    "isBackwardNode": 0, "size": 1.0} for k in range(3)],
         "edges": [{"sourceId": 0, "destId": 1, "cost": 3.0}, {"sourceId": 0, "destId": 2, "cost": 3.0}]}
    task = throughput_from_dict(d, "toy")
    load, peak = max_load_reference(task.graph, [0, 1, 2], task.cluster)
    assert load == 30.0 and list(peak) == [1.0, 1.0, 1.0]  # CPU: 3 * 10, no transfer; accelerators 1 + 3, 2 + 3
    load, _ = max_load_reference(task.graph, [0, 1, 1], task.cluster)
    assert load == 2 + 3 + 3  # device 1: nodes 1 and 2 (5) + receiving 0's output once (3)
    load, _ = max_load_reference(task.graph, [0, 0, 0], task.cluster)
    assert load == 6.0


def test_colocation_follows_the_forward_member():
    task = chain_task(4, 3, training=True)
    p = np.zeros(task.graph.n_nodes, np.int64)
    p[:4] = [0, 1, 2, 1]
    q = p.copy()
    q[4:] = [2, 2, 0, 0]  # backward entries are ignored: each follows its colour class's forward node
    assert max_load_reference(task.graph, p, task.cluster)[0] == max_load_reference(task.graph, q, task.cluster)[0]
