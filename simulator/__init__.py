"""The world placeto acts in: graphs, clusters, simulator, hardware.

Computation graphs, clusters, the discrete-event simulator and real execution. Public API (these names stay; more
may come)::

    from simulator import load_graph, save_graph, load_placement, cluster_preset, simulate, simulate_batch, lower_bound
"""

from simulator.model.cluster import Cluster, Device, cluster_preset, load_cluster, save_cluster
from simulator.engine.fast import simulate, simulate_batch
from simulator.model.errors import InputError
from simulator.model.graph import Graph, make_graph
from simulator.model.io import from_networkx, load_graph, save_graph, to_networkx
from simulator.model.placement_file import Placement, load_placement, save_placement
from simulator.engine.reference import simulate_reference
from simulator.model.result import SimResult, lower_bound

__all__ = [
    "Cluster", "Device", "Graph", "InputError", "Placement", "SimResult", "cluster_preset", "from_networkx",
    "load_cluster", "load_graph", "load_placement", "lower_bound", "make_graph", "save_cluster", "save_graph",
    "save_placement", "simulate", "simulate_batch", "simulate_reference", "to_networkx",
]
