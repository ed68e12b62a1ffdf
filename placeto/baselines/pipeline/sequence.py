"""A graph as a sequence of blocks, and the max-load of every interval of it.

The contiguous split (`placeto.baselines.pipeline.split`) cuts a sequence into stages. The sequence is built so that
every stage honours colocation and, on a training graph, keeps backward nodes with their forward ones:

1. items: the colocation groups (simulator.model.max_load.representatives; a node without a group is its own item);
2. order: item a before item b if a forward edge (one into a forward node) runs a -> b, as msr-fiddle's DP orders
   by the forward graph alone; a backward edge b -> a between two backward nodes orders a before b only where one
   of them has no forward node (the backward pass mirrors the forward one; their DP adds such mirrored edges for
   orphaned backward nodes); edges from forward into backward nodes do not order;
3. blocks: the strongly connected components of that order (colocation can make items depend on each other both
   ways; such items must share a device anyway in a contiguous split, as in msr-fiddle's DP, which fuses them
   too), in a topological order (Kahn's, ties to the block holding the lowest node index).

`interval_costs` gives, for every interval [i, j) of blocks, the compute of its nodes per device kind, its bytes,
and its transfer cost (simulator.model.max_load: each node whose output crosses the interval's boundary, in either
direction, charged once), all in O(K * E) numpy work for K blocks and E edges.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from simulator.model.max_load import MaxLoadModel

MAX_BLOCKS = 1000  # longer sequences are cut into this many runs of consecutive blocks (the DP is O(K^2) a device)


class Sequence(NamedTuple):
    """Blocks in order; K blocks, N nodes."""

    block: np.ndarray  # int64[N] block (position in the sequence) of each node
    n_blocks: int  # K


class Intervals(NamedTuple):
    """Costs of every interval [i, j) of a K-block sequence; arrays [K + 1, K + 1], valid for i < j."""

    comm: np.ndarray  # float64 transfer cost charged to a device holding the interval
    size: np.ndarray  # float64 bytes of its nodes
    cost: dict  # device column d -> float64 compute of its nodes on device d (one column per distinct kind)
    allowed: dict  # device column d -> bool: every node of the interval may run on device d


def block_sequence(model: MaxLoadModel, backward: np.ndarray, n_nodes: int) -> Sequence:
    """The blocks of a graph in order (module docstring, steps 1-3).

    Args:
      backward: bool[N] backward nodes (all False: an ordinary graph).
    """
    item_of = np.unique(model.rep, return_inverse=True)[1].reshape(-1)
    n_items = int(item_of.max()) + 1 if n_nodes else 0
    has_forward = np.zeros(n_items, dtype=bool)
    has_forward[item_of[~backward]] = True
    mirror = backward[model.src] & backward[model.dst]
    a = np.where(mirror, item_of[model.dst], item_of[model.src])
    b = np.where(mirror, item_of[model.src], item_of[model.dst])
    orphan = ~has_forward[item_of[model.src]] | ~has_forward[item_of[model.dst]]
    keep = (a != b) & (~backward[model.dst] | (mirror & orphan))
    adj = coo_matrix((np.ones(int(keep.sum())), (a[keep], b[keep])), shape=(n_items, n_items)).tocsr()
    n_comp, comp = connected_components(adj, directed=True, connection="strong")
    first = np.full(n_comp, n_nodes, dtype=np.int64)
    np.minimum.at(first, comp[item_of], np.arange(n_nodes))
    ca, cb = comp[a[keep]], comp[b[keep]]
    pairs = np.unique(np.stack([ca, cb], axis=1)[ca != cb], axis=0) if keep.any() else np.zeros((0, 2), np.int64)
    position = _topological(n_comp, pairs, first)
    seq = position[comp[item_of]]
    if n_comp > MAX_BLOCKS:
        seq = _runs(seq, model.cost.min(axis=1), MAX_BLOCKS)
        n_comp = MAX_BLOCKS
    return Sequence(seq.astype(np.int64), int(n_comp))


def _topological(n: int, pairs: np.ndarray, first: np.ndarray) -> np.ndarray:
    """int64[n] position of each component in Kahn's order, ties by `first`."""
    indeg = np.bincount(pairs[:, 1], minlength=n) if len(pairs) else np.zeros(n, np.int64)
    order = np.argsort(pairs[:, 0], kind="stable")
    off = np.zeros(n + 1, dtype=np.int64)
    np.add.at(off, pairs[:, 0] + 1, 1)
    off, succ = np.cumsum(off), pairs[order, 1]
    indeg = indeg.tolist()
    heap = [(int(first[c]), c) for c in range(n) if indeg[c] == 0]
    heapq.heapify(heap)
    position = np.empty(n, dtype=np.int64)
    k = 0
    while heap:
        _, c = heapq.heappop(heap)
        position[c] = k
        k += 1
        for s in succ[off[c]:off[c + 1]].tolist():
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (int(first[s]), s))
    assert k == n  # the condensation is acyclic
    return position


def _runs(seq: np.ndarray, weight: np.ndarray, k: int) -> np.ndarray:
    """Consecutive blocks merged into k runs of about equal weight."""
    per_block = np.bincount(seq, weights=weight + weight.mean() + 1e-12)
    edges = np.cumsum(per_block) / per_block.sum()
    run = np.minimum((edges * k).astype(np.int64), k - 1)
    run = np.maximum.accumulate(run)
    # renumber so every run index in [0, k) is used (empty runs would only waste stages)
    return np.unique(run, return_inverse=True)[1].reshape(-1)[seq]


def interval_costs(model: MaxLoadModel, seq: Sequence, columns: list[int]) -> Intervals:
    """Costs of every interval of `seq` (module docstring).

    Args:
      columns: device indices whose compute columns are needed (one per distinct device kind).
    """
    k, pos = seq.n_blocks, seq.block
    size = _interval_sums(np.bincount(pos, weights=model.size, minlength=k))
    cost, allowed = {}, {}
    for d in columns:
        cost[d] = _interval_sums(np.bincount(pos, weights=model.cost[:, d], minlength=k))
        banned = _interval_sums(np.bincount(pos, weights=(~model.allowed[:, d]).astype(float), minlength=k))
        allowed[d] = banned < 0.5
    return Intervals(_interval_comm(model, pos, k), size, cost, allowed)


def _interval_sums(per_block: np.ndarray) -> np.ndarray:
    """[K + 1, K + 1] sums over [i, j) of a per-block quantity."""
    prefix = np.concatenate([[0.0], np.cumsum(per_block)])
    return prefix[None, :] - prefix[:, None]


def _interval_comm(model: MaxLoadModel, pos: np.ndarray, k: int) -> np.ndarray:
    """[K + 1, K + 1] transfer cost of each interval [i, j).

    A node u at block p whose children lie at blocks C is charged for [i, j) when p is inside and some c is
    outside, or p is outside and some c is inside. For a fixed i this holds on one run of j (or two), found
    from min C, max C and the smallest c >= i: a difference array over j per i.
    """
    n = len(pos)
    src = model.src[pos[model.src] != pos[model.dst]]
    cpos = pos[model.dst[pos[model.src] != pos[model.dst]]]
    comm = np.zeros((k + 1, k + 1))
    if src.size == 0:
        return comm
    has = np.zeros(n, dtype=bool)
    has[src] = True
    lo, hi = np.full(n, k, np.int64), np.full(n, -1, np.int64)
    np.minimum.at(lo, src, cpos)
    np.maximum.at(hi, src, cpos)
    nodes = np.flatnonzero(has)
    p, lo, hi, w = pos[nodes], lo[nodes], hi[nodes], model.out_cost[nodes]
    for i in range(k):
        diff = np.zeros(k + 2)
        # inside (p >= i, j > p): charged while j <= hi, or for every j when a child lies before i
        inside = p >= i
        end = np.where(lo < i, k, hi)
        sel = inside & (end > p)
        np.add.at(diff, p[sel] + 1, w[sel])
        np.add.at(diff, end[sel] + 1, -w[sel])
        # outside: charged once j passes the first child at or after i, up to j <= p when u lies after
        m = np.full(n, k, np.int64)
        after = cpos >= i
        np.minimum.at(m, src[after], cpos[after])
        m = m[nodes]
        stop = np.where(p < i, k, p)
        sel = (m < k) & (m < stop)  # u before i: j in (m, K]; u at or after i: outside while j <= p, so (m, p]
        np.add.at(diff, m[sel] + 1, w[sel])
        np.add.at(diff, stop[sel] + 1, -w[sel])
        comm[i] = np.cumsum(diff)[:k + 1]
    return comm
