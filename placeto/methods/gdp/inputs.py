"""Graph + cluster -> GDP's padded input arrays, nothing N x N.

Memory is O(N * max_devices + E). Padding: nodes to a bucket that is a multiple of the attention segment
(placeto.features.bucket, so graphs of similar size share one compiled function), edges to a bucket; padding
edges join the last padding node to itself, padding nodes sit at the end of the topological sequence and are
masked out of attention and loss.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from placeto import jraph_adapter as ja
from placeto.features import bucket, cost_unit, static_node_features
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph

N_DEVICE_FEATURES = 3  # log1p(cost on d / unit), memory of d / largest memory, 1 / number of devices


class GdpInputs(NamedTuple):
    """One graph on one cluster, padded.

    Np padded nodes (a multiple of the segment), Ep edges, Dm devices.
    """

    nodes: np.ndarray  # float32[Np, F] static node features (placeto.features.static_node_features)
    senders: np.ndarray  # int32[Ep] parent of each edge (distinct parent -> child pairs)
    receivers: np.ndarray  # int32[Ep] child of each edge
    inv_in_deg: np.ndarray  # float32[Np] 1 / max(1, parents), for the mean over parents
    inv_out_deg: np.ndarray  # float32[Np] 1 / max(1, children)
    node_mask: np.ndarray  # bool[Np] real nodes
    order: np.ndarray  # int32[Np] node at each position of the topological sequence (padding nodes last)
    position: np.ndarray  # int32[Np] position of each node in `order`
    dev_feat: np.ndarray  # float32[Np, Dm, N_DEVICE_FEATURES] per node and device; 0 on padded devices
    dev_mask: np.ndarray  # bool[Dm] real devices


def padded_nodes(n_nodes: int, segment: int) -> int:
    """Np: a bucket >= n_nodes + 1, rounded up to the segment.

    At least one padding node, for the padding edges.
    """
    n = bucket(n_nodes + 1)
    return -(-n // segment) * segment


def gdp_inputs(graph: Graph, cluster: Cluster, max_devices: int, segment: int) -> GdpInputs:
    """The padded arrays of `graph` on `cluster`, host numpy.

    Memoised in graph.cache.

    Raises:
      ValueError: if the cluster has more than `max_devices` devices.
    """
    key = ("gdp.inputs", cluster, max_devices, segment)
    if key not in graph.cache:
        graph.cache[key] = _build(graph, cluster, max_devices, segment)
    return graph.cache[key]


def _build(graph: Graph, cluster: Cluster, max_devices: int, segment: int) -> GdpInputs:
    n, d = graph.n_nodes, cluster.n_devices
    if d > max_devices:
        raise ValueError(f"cluster {cluster.name!r} has {d} devices but the policy handles at most {max_devices}")
    n_pad = padded_nodes(n, segment)
    ch_off, ch = graph.children
    senders = np.repeat(np.arange(n, dtype=np.int32), np.diff(ch_off))
    e_pad = max(bucket(len(senders)), 2 * n_pad)  # as placeto.features.edge_bucket: one edge size per node size
    # for most graphs, so a family of graphs compiles the policy once per node bucket, not per (node, edge) pair
    padded = ja.pad(ja.graphs_tuple(static_node_features(graph, cluster), senders, ch.astype(np.int32)),
                    n_pad, e_pad + (e_pad == len(senders)))
    in_deg, out_deg = np.zeros(n_pad, np.float32), np.zeros(n_pad, np.float32)
    in_deg[:n], out_deg[:n] = np.diff(graph.parents[0]), np.diff(ch_off)
    order = np.concatenate([graph.topo_order, np.arange(n, n_pad)]).astype(np.int32)
    position = np.empty(n_pad, np.int32)
    position[order] = np.arange(n_pad, dtype=np.int32)
    dev_feat = np.zeros((n_pad, max_devices, N_DEVICE_FEATURES), np.float32)
    dev_feat[:n, :d, 0] = np.log1p(graph.cost_matrix(cluster.kinds) / cost_unit(graph, cluster))
    memory = np.asarray(cluster.memory, np.float64)
    dev_feat[:n, :d, 1] = memory / max(float(memory.max()), 1.0)
    dev_feat[:n, :d, 2] = 1.0 / d
    return GdpInputs(
        nodes=np.asarray(padded.nodes, np.float32), senders=np.asarray(padded.senders, np.int32),
        receivers=np.asarray(padded.receivers, np.int32), inv_in_deg=1.0 / np.maximum(in_deg, 1.0),
        inv_out_deg=1.0 / np.maximum(out_deg, 1.0), node_mask=ja.node_mask(padded), order=order,
        position=position, dev_feat=dev_feat, dev_mask=np.arange(max_devices) < d)


def shape_key(inputs: GdpInputs) -> tuple[int, int]:
    """(Np, Ep): inputs with equal keys share compiled functions."""
    return int(inputs.nodes.shape[0]), int(inputs.senders.shape[0])
