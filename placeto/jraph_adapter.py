"""The one module that imports jraph, and only its stable core.

That core: GraphsTuple, batch, pad_with_graphs, the padding masks. Everything else in placeto sees
`GraphsTuple` and these helpers, so a jraph change touches one file.
"""

from __future__ import annotations

from typing import Sequence

import jraph
import numpy as np

GraphsTuple = jraph.GraphsTuple


def graphs_tuple(nodes: np.ndarray, senders: np.ndarray, receivers: np.ndarray) -> GraphsTuple:
    """One graph: nodes float32[N, F], int32[E] edges.

    Edges run senders -> receivers; no edge or global features.
    """
    n, e = nodes.shape[0], senders.shape[0]
    return GraphsTuple(nodes=np.asarray(nodes, np.float32), edges=None, globals=None,
                       senders=np.asarray(senders, np.int32), receivers=np.asarray(receivers, np.int32),
                       n_node=np.asarray([n], np.int32), n_edge=np.asarray([e], np.int32))


def batch(graphs: Sequence[GraphsTuple]) -> GraphsTuple:
    """Concatenate graphs into one GraphsTuple, on the host.

    Node indices are offset.
    """
    return jraph.batch_np(graphs)


def pad(graph: GraphsTuple, n_node: int, n_edge: int) -> GraphsTuple:
    """Pad to exactly n_node nodes and n_edge edges, one padding graph.

    n_node must exceed the real nodes.

    Padding edges join padding nodes only, so message passing on real nodes is unchanged.
    """
    return jraph.pad_with_graphs(graph, n_node=n_node, n_edge=n_edge, n_graph=2)


def node_mask(padded: GraphsTuple) -> np.ndarray:
    """bool[n_node] True on real nodes."""
    return np.asarray(jraph.get_node_padding_mask(padded))


def edge_mask(padded: GraphsTuple) -> np.ndarray:
    """bool[n_edge] True on real edges."""
    return np.asarray(jraph.get_edge_padding_mask(padded))
