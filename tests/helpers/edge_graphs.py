"""Edge inputs within simulator.model.limits: small (graph, cluster) pairs at the corners of what loads.

Imported by test modules as tests.helpers.edge_graphs. Each case is named; every one passes
`check_graph_on_cluster` (the generator checks it), so a method must place it or refuse it with an InputError,
never fail otherwise. Sizes are small so that a test can run every method on every case; the large sizes
(thousands of isolated nodes, long chains) are in experiments/benchmarks/listsched_scaling.py.
"""

from typing import Iterator, NamedTuple

from simulator import Cluster, Graph, cluster_preset, make_graph
from simulator.model.errors import InputError
from simulator.model.limits import MAX_BYTES, MAX_COST_US, check_graph_on_cluster


class EdgeCase(NamedTuple):
    name: str
    graph: Graph
    cluster: Cluster


def _nodes(n: int, cost: float = 10.0, out: float = 1e3, outputs: int = 1, persistent: float = 0.0) -> list[dict]:
    return [{"name": f"n{i}", "cost": cost, "out_bytes": [out] * outputs, "persistent_bytes": persistent}
            for i in range(n)]


def _graphs() -> Iterator[tuple[str, Graph]]:
    """(name, graph) at the corners: sizes of values, and shapes."""
    chain = lambda n: [(i, i + 1, 0) for i in range(n - 1)]  # noqa: E731
    yield "one_node", make_graph("one_node", _nodes(1), [])
    yield "one_node_zero_cost", make_graph("one_node_zero_cost", _nodes(1, cost=0.0, out=0.0), [])
    yield "isolated", make_graph("isolated", _nodes(60), [])
    yield "chain", make_graph("chain", _nodes(120), chain(120))
    yield "tiny_costs", make_graph("tiny_costs", _nodes(20, cost=1e-9, out=1.0), chain(20))
    yield "zero_costs_and_bytes", make_graph("zero_costs_and_bytes", _nodes(20, cost=0.0, out=0.0), chain(20))
    yield "huge_costs", make_graph("huge_costs", _nodes(6, cost=MAX_COST_US / 10), chain(6))
    yield "max_cost_one_node", make_graph("max_cost_one_node", _nodes(3, cost=MAX_COST_US), [])
    # tensors near MAX_BYTES beside microsecond ops: m-SCT's LP failed on these (HiGHS "Model error")
    yield "huge_bytes", make_graph("huge_bytes", _nodes(6, cost=1e-6, out=MAX_BYTES / 100),
                                   chain(6) + [(0, 3, 0), (1, 4, 0)])
    yield "max_bytes_one_tensor", make_graph("max_bytes_one_tensor", _nodes(2, cost=1.0, out=MAX_BYTES), [(0, 1, 0)])
    yield "mixed_extremes", make_graph(
        "mixed_extremes", [{"name": f"n{i}", "cost": [1e-9, 1e9, 0.0, 1.0][i % 4],
                            "out_bytes": [[1.0, 1e15, 0.0][i % 3]]} for i in range(24)], chain(24) +
        [(i, i + 5, 0) for i in range(0, 19, 3)])
    fan = 80
    yield "wide_fan_out", make_graph("wide_fan_out", _nodes(fan + 1), [(0, i, 0) for i in range(1, fan + 1)])
    yield "wide_fan_in", make_graph("wide_fan_in", _nodes(fan + 1), [(i, fan, 0) for i in range(fan)])
    yield "many_outputs", make_graph("many_outputs", _nodes(2, outputs=200), [(0, 1, k) for k in range(200)])
    yield "no_memory_fits", make_graph("no_memory_fits", _nodes(4, persistent=MAX_BYTES), chain(4))


CLUSTERS = (("placeto-k80", 1), ("placeto-k80", 4), ("placeto-k80", 64), ("h100-nvlink-cpu", 3),
            ("placeto-k80-cpu", 2))


def edge_cases(clusters=CLUSTERS) -> list[EdgeCase]:
    """Every graph of `_graphs` on every cluster (preset, devices) of `clusters` where it is simulable.

    A pair whose time bound passes MAX_TIME_US (e.g. the largest tensor on a slow bus) is left out: loading it
    is already a one-line refusal.
    """
    cases = []
    for name, graph in _graphs():
        for preset, n_dev in clusters:
            cluster = cluster_preset(preset, n_dev)
            try:
                check_graph_on_cluster(graph, cluster, graph.cost_matrix(cluster.kinds))
            except InputError:
                continue
            cases.append(EdgeCase(f"{name}@{preset}x{n_dev}", graph, cluster))
    return cases
