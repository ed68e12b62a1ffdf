"""A microbatched graph's step: its expanded graph simulated, the result read per original node.

Both engines (simulator.engine.fast and simulator.engine.reference) hand a graph with meta["microbatches"] = M > 1
here: the expanded graph (simulator.model.microbatch, cached on the graph per device kinds) is simulated with the
placement repeated per copy, and the result is folded back onto the N original nodes so that every consumer
(plots, methods, the harness) reads the shapes it always did. The fold is plain numpy applied to either engine's
result, so the two stay bit-equal whenever they are on the expanded graph.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.model.io import check_placement
from simulator.model.microbatch import Expansion, expansion
from simulator.model.result import SimResult, Transfers, lower_bound

Engine = Callable[[Graph, np.ndarray, Cluster], SimResult]  # simulate or simulate_reference


def simulate_microbatched(engine: Engine, graph: Graph, placement: Sequence[int] | np.ndarray,
                          cluster: Cluster) -> SimResult:
    """One microbatched step of `graph` under `placement` (a device per original node), by `engine`.

    Raises:
      InputError: for a bad placement (named against the original graph), or what `engine` raises.
    """
    check_placement(placement, graph, cluster.n_devices)
    ex = expansion(graph, cluster.kinds)
    dev = np.array(placement, dtype=np.int32)
    return fold(graph, ex, engine(ex.graph, dev[ex.copy_of], cluster), dev, cluster)


def fold(graph: Graph, ex: Expansion, inner: SimResult, dev: np.ndarray, cluster: Cluster) -> SimResult:
    """The expanded schedule `inner` read per original node.

    start: float64[N] the earliest copy's start; end: float64[N] the latest copy's end (microseconds); busy: the
    expanded busy time per device (every copy's cost); transfers: the expanded transfers with each producer
    mapped to its original node (a node's copies send one transfer each; output indices are the original's);
    peak memory: the expanded schedule's, so the activations of the microbatches in flight count.
    """
    n = graph.n_nodes
    start, end = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(start, ex.copy_of, inner.start)
    np.maximum.at(end, ex.copy_of, inner.end)
    t = inner.transfers
    transfers = Transfers(ex.copy_of[t.node], t.out, t.device, t.start, t.end)
    return SimResult(runtime=inner.runtime, start=start, end=end, device=dev, busy=inner.busy,
                     capacity=inner.capacity, lower_bound=lower_bound(graph, cluster), transfers=transfers,
                     compute_peak_memory=inner.compute_peak_memory)
