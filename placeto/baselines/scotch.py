"""`scotch`: a Scotch partition, the papers' partitioning baseline.

The graph-partitioning baseline of Mirhoseini et al. As in the papers, Scotch maps the undirected graph onto a
complete graph of all devices (the CPU included when the cluster has one) minimising the bytes cut while balancing
compute: node weights are compute times on the first accelerator kind, edge weights the bytes sent (parallel edges
merged), and devices of different speed get proportionally weighted parts (Scotch's weighted complete architecture,
`cmpltw`).

pyscotch bundles libscotch (no system package needed); it prints a line on stderr when it first loads, which
is silenced here.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np

from placeto.baselines.common import NotApplicable, UndirectedGraph, device_speeds, reference_kind, undirected
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


_OPTION_DETERMINISTIC = 0  # SCOTCH_OPTIONNUMDETERMINISTIC in Scotch's library.h
_OPTION_RANDOM_FIXED_SEED = 1  # SCOTCH_OPTIONNUMRANDOMFIXEDSEED


def _pyscotch():
    """Import pyscotch quietly: it announces its library on stderr."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import pyscotch
            from pyscotch import libscotch  # noqa: F401  (loads the shared library now, while quiet)
    except ImportError:
        raise NotApplicable("the scotch and mincut baselines need pyscotch: pip install 'pyscotch>=7.0.5'") from None
    return pyscotch


def scotch_parts(ug: UndirectedGraph, n_parts: int, weights: np.ndarray | None, seed: int,
                 balance: float = 0.05) -> np.ndarray:
    """Part int32[N] of each node in Scotch's quality mapping.

    Scotch's default quality mapping strategy. weights: int-like float[n_parts] relative part capacities (None:
    equal); balance: allowed imbalance.
    """
    n = len(ug.xadj) - 1
    if n_parts == 1 or n == 0:
        return np.zeros(n, dtype=np.int32)
    if n <= n_parts:
        return np.arange(n, dtype=np.int32)
    ps = _pyscotch()
    with ps.Graph() as source, ps.Context() as ctx, ps.Architecture() as arch, ps.Strategy() as strategy:
        source.build(ug.xadj, ug.adjncy, velotab=ug.vweights, edlotab=ug.eweights)
        # Scotch 7 runs threads and seeds from the clock by default; a context with these options is repeatable.
        ctx.option_set(_OPTION_DETERMINISTIC, 1)
        ctx.option_set(_OPTION_RANDOM_FIXED_SEED, 1)
        ctx.random_seed(2 * int(seed) + 1)  # observed: seeds 2k and 2k+1 give the same mapping, so spread them
        ctx.random_reset()
        if weights is None:
            arch.complete(n_parts)
        else:
            arch.complete_weighted(n_parts, np.maximum(1, np.round(weights / weights.max() * 1000)).astype(np.int64))
        strategy.request_mapping(ps.StrategyFlags.QUALITY, balance=balance)
        with ctx.bind_graph(source) as graph:
            parts = graph.map(arch, strategy)
    return np.asarray(parts, dtype=np.int32)


def scotch(graph: Graph, cluster: Cluster, seed: int = 0, balance: float = 0.05) -> np.ndarray:
    """A Scotch mapping int32[N] onto all devices, weighted by speed.

    Node weight: compute time on the first accelerator's kind; `balance`: allowed imbalance.
    """
    devices = np.arange(cluster.n_devices, dtype=np.int32)
    speeds = device_speeds(graph, cluster, devices)
    weights = None if np.allclose(speeds, speeds[0]) else speeds
    ug = undirected(graph, graph.cost_for(reference_kind(cluster)))
    return devices[scotch_parts(ug, cluster.n_devices, weights, seed, balance)]
