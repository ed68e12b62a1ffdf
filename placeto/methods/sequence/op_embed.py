"""Op embeddings of the sequence placers: inputs and module.

The host arrays (`op_inputs`) and the flax module reading them (`OpEmbed`). Seeds 000/002 embed each op from its
type, its output sizes and its adjacency; so do we:

    op type     an id in the graph's own vocabulary (the `op_types` - 1 most frequent types, ties by name;
                rarer types share id 0), embedded by a learned table
    numeric     placeto.features.static_node_features: compute cost, output bytes as transfer time, in/out
                degree, top/bottom level, persistent bytes (9 columns, per-graph units)
    adjacency   one round of mean message passing from parents and from children (placeto.gnn.MessagePassing,
                S = 1): O(E * H), never N x N, so graphs of tens of thousands of ops fit
    position    the op's position in a depth-first topological order (`depth_first_order`; as a sinusoid,
                placeto.gnn.sinusoid): two identical chains differ only by where their ops sit

Decision items (rnn): the ops of one colocation name form one item (the seeds' colocation groups), every other
op is an item of its own; items are ordered by their first op in that order. Item of op i: `item[i]`.

Why depth first: the seeds read ops in the framework's definition order, where a layer's ops sit together;
`Graph.topo_order` (Kahn, FIFO) is breadth first and interleaves independent branches (a0 b0 a1 b1 ... for two
chains), depth first follows each branch as far as it goes (a0 ... a7 b0 ... b7), so a contiguous run of
positions is a piece of the graph: what the rnn's stay prior and the hierarchical planner's block prior sample
as one device or one group. Both place better in depth-first order than in FIFO order (experiments/README.md,
"Figures behind design choices": depth-first order).
"""

from __future__ import annotations

import collections
from typing import NamedTuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from placeto import jraph_adapter as ja
from placeto.features import N_STATIC, bucket, static_node_features
from placeto.gnn import MessagePassing, sinusoid
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


class OpInputs(NamedTuple):
    """One graph on one cluster, padded: ops, edges and decision items.

    N ops -> Np = bucket(N + 1), E edges -> Ep, T items -> Tp = bucket(T).
    """

    op_type: np.ndarray  # int32[Np] vocabulary id (0: a rare type, and padding)
    numeric: np.ndarray  # float32[Np, N_STATIC] static_node_features (0 on padding)
    position: np.ndarray  # int32[Np] position of each op in depth_first_order (padding: N, N + 1, ...)
    senders: np.ndarray  # int32[Ep] parent of each distinct parent -> child pair (padding: last padding op)
    receivers: np.ndarray  # int32[Ep] child
    inv_in_deg: np.ndarray  # float32[Np] 1 / max(1, parents)
    inv_out_deg: np.ndarray  # float32[Np] 1 / max(1, children)
    node_mask: np.ndarray  # bool[Np] real ops
    edge_mask: np.ndarray  # bool[Ep] real edges
    item: np.ndarray  # int32[Np] decision item of each op (padding ops: item Tp - 1, always a padding item)
    item_mask: np.ndarray  # bool[Tp] real items


def vocabulary(graph: Graph, op_types: int) -> dict[str, int]:
    """Op type -> id in 1..op_types-1 for the most frequent types.

    Ties by name; rarer and absent types map to 0.
    """
    counts = collections.Counter(graph.ops)
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:max(op_types - 1, 0)]
    return {t: i + 1 for i, t in enumerate(ranked)}


def depth_first_order(graph: Graph) -> np.ndarray:
    """int32[N] a depth-first topological order.

    It follows each branch as far as it goes.

    By Kahn's algorithm with a stack: the op made ready last is placed next; ties in node order.
    """
    ch_off, ch = graph.children
    indeg = np.diff(graph.parents[0]).tolist()
    ch_off, ch = ch_off.tolist(), ch.tolist()
    stack = [i for i in range(graph.n_nodes - 1, -1, -1) if indeg[i] == 0]
    order = []
    while stack:
        i = stack.pop()
        order.append(i)
        ready = []
        for j in ch[ch_off[i]:ch_off[i + 1]]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
        stack.extend(reversed(ready))
    return np.asarray(order, np.int32)


def colocation_items(graph: Graph, colocate: bool, order: np.ndarray | None = None) -> np.ndarray:
    """int32[N] the decision item of each op.

    One item per colocation name (if `colocate`), one per other op; items are numbered in `order` (int32[N],
    default `depth_first_order`) of their first op.
    """
    first: dict[object, int] = {}
    item = np.empty(graph.n_nodes, np.int32)
    for op in (depth_first_order(graph) if order is None else order).tolist():
        name = graph.colocation[op] if colocate else None
        key = ("c", name) if name is not None else ("o", op)
        item[op] = first.setdefault(key, len(first))
    return item


def op_inputs(graph: Graph, cluster: Cluster, op_types: int, colocate: bool = True) -> OpInputs:
    """The padded arrays of `graph` on `cluster`, host numpy.

    Memoised in graph.cache.
    """
    key = ("op_embed.inputs", cluster, op_types, colocate)
    if key not in graph.cache:
        graph.cache[key] = _build(graph, cluster, op_types, colocate, depth_first_order(graph))
    return graph.cache[key]


def _build(graph: Graph, cluster: Cluster, op_types: int, colocate: bool, order: np.ndarray) -> OpInputs:
    n = graph.n_nodes
    n_pad = bucket(n + 1)
    ch_off, ch = graph.children
    senders = np.repeat(np.arange(n, dtype=np.int32), np.diff(ch_off))
    e_pad = bucket(len(senders) + 1)
    padded = ja.pad(ja.graphs_tuple(static_node_features(graph, cluster), senders, ch.astype(np.int32)), n_pad, e_pad)
    vocab = vocabulary(graph, op_types)
    op_type = np.zeros(n_pad, np.int32)
    op_type[:n] = [vocab.get(t, 0) for t in graph.ops]
    position = np.arange(n_pad, dtype=np.int32)
    position[order] = np.arange(n, dtype=np.int32)
    in_deg, out_deg = np.zeros(n_pad, np.float32), np.zeros(n_pad, np.float32)
    in_deg[:n], out_deg[:n] = np.diff(graph.parents[0]), np.diff(ch_off)
    items = colocation_items(graph, colocate, order)
    n_items = int(items.max(initial=-1)) + 1
    t_pad = bucket(n_items + 1)
    item = np.full(n_pad, t_pad - 1, np.int32)
    item[:n] = items
    return OpInputs(op_type=op_type, numeric=np.asarray(padded.nodes, np.float32), position=position,
                    senders=np.asarray(padded.senders, np.int32), receivers=np.asarray(padded.receivers, np.int32),
                    inv_in_deg=1.0 / np.maximum(in_deg, 1.0), inv_out_deg=1.0 / np.maximum(out_deg, 1.0),
                    node_mask=ja.node_mask(padded), edge_mask=ja.edge_mask(padded), item=item,
                    item_mask=np.arange(t_pad) < n_items)


def n_items(x: OpInputs) -> int:
    """T: the number of real decision items."""
    return int(np.asarray(x.item_mask).sum())


class OpEmbed(nn.Module):
    """OpInputs -> op embeddings float32[Np, hidden].

    Zero on padding ops; see the module docstring.
    """

    hidden: int
    op_types: int

    @nn.compact
    def __call__(self, x: OpInputs):
        kind = nn.Embed(self.op_types, self.hidden, name="op_type")(x.op_type)  # [Np, H]
        pos = sinusoid(x.position.shape[0], self.hidden)[x.position]  # [Np, H]
        feats = jnp.concatenate([kind, x.numeric, pos], axis=-1)[:, None, :]  # [Np, 1, 2H + N_STATIC]
        h = MessagePassing(self.hidden, 1, name="adjacency")(feats, x.senders, x.receivers, x.node_mask,
                                                             x.inv_in_deg, x.inv_out_deg)
        return h[:, 0]


__all__ = ["N_STATIC", "OpEmbed", "OpInputs", "colocation_items", "depth_first_order", "n_items", "op_inputs",
           "vocabulary"]
