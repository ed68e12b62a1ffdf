"""Colocation and coarsening: an op graph -> a smaller graph of groups, and placements back and forth.

`group(graph, target_groups)` contracts the op graph in three steps, every merge keeping the quotient acyclic:

  (a) colocation: ops sharing a colocation name are merged as far as a local test proves acyclic: two nodes
      a, b may merge when there is no path of length >= 2 between them either way, which holds when
      (succ(a) <= {b} or pred(b) <= {a}) and (succ(b) <= {a} or pred(a) <= {b}). A parameter read in the forward
      pass and updated at the end of the step cannot be one node without swallowing the whole step (the
      forward and backward pass lie between them), so a colocation name may end up on a few group nodes (in
      practice two: the variable with its reads, and its update chain). They keep the name in
      `Graph.colocation`: placing them on one device is a constraint for whoever places the groups;
  (b) Mirhoseini et al. (2017)'s heuristic: a node with exactly one consumer is merged into it (always acyclic:
      the only path out of it is that edge), repeatedly, so chains collapse;
  (c) while above `target_groups`: contract the cheapest edge (u, v) (smallest cost(u) + cost(v), ties by
      index) among those where u's only child is v or v's only parent is u (both acyclic for the same reason).
      When no such edge is left,
  (d) (`fallback=True`) merges disjoint pairs of neighbours in a depth-first topological order of the
      quotient, edge-joined pairs first, then cheapest: a contiguous run of a topological order is convex, so
      this is acyclic too, and it reaches the target unless colocation names forbid it. It may merge parallel
      branches (losing parallelism), which (b) and (c) never do.

Nodes with different colocation names are never merged; an uncolocated node merged into a colocated one takes
its name. The cost used for ordering (c) is the max over recorded device kinds (0 without costs); the grouped
graph gets, per kind, the sum of member costs (NaN if any member has none). Deterministic: ties break on op
indices, never on set order.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import re
from typing import Sequence

import numpy as np

from simulator.errors import InputError
from simulator.graph import Graph, make_graph


@dataclasses.dataclass(frozen=True, eq=False)
class Grouping:
    """A grouped graph and its map to the op graph.

    Attributes:
      graph: the graph of G groups (valid and acyclic); group k is node k.
      members: [G] int32 op indices of each group, ascending; groups are ordered by their first op.
      op_to_group: int32[N] group of every op.
    """

    graph: Graph
    members: tuple[np.ndarray, ...]
    op_to_group: np.ndarray


class _Quotient:
    """The contracted graph: union-find over ops plus distinct successor/predecessor sets per representative."""

    def __init__(self, graph: Graph, weight: np.ndarray):
        n = graph.n_nodes
        self.parent = list(range(n))
        self.succ = [set() for _ in range(n)]
        self.pred = [set() for _ in range(n)]
        for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
            self.succ[s].add(d)
            self.pred[d].add(s)
        self.coloc = list(graph.colocation)
        self.weight = weight.tolist()
        self.n_groups = n

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:
            self.parent[i], i = root, self.parent[i]
        return root

    def compatible(self, a: int, b: int) -> bool:
        return self.coloc[a] is None or self.coloc[b] is None or self.coloc[a] == self.coloc[b]

    def no_long_path(self, a: int, b: int) -> bool:
        """True if there is surely no path a -> x -> ... -> b with x outside {a, b}."""
        sa, pb = self.succ[a], self.pred[b]
        return len(sa) == 0 or (len(sa) == 1 and b in sa) or len(pb) == 0 or (len(pb) == 1 and a in pb)

    def merge(self, a: int, b: int) -> int:
        """Contract representatives a and b; returns the surviving representative."""
        if len(self.succ[a]) + len(self.pred[a]) < len(self.succ[b]) + len(self.pred[b]):
            a, b = b, a  # move the smaller adjacency
        keep, drop = a, b
        self.parent[drop] = keep
        for x in self.succ[drop]:
            self.pred[x].discard(drop)
            if x != keep:
                self.pred[x].add(keep)
                self.succ[keep].add(x)
        for x in self.pred[drop]:
            self.succ[x].discard(drop)
            if x != keep:
                self.succ[x].add(keep)
                self.pred[keep].add(x)
        self.succ[keep].discard(drop)
        self.pred[keep].discard(drop)
        self.succ[drop], self.pred[drop] = set(), set()
        self.coloc[keep] = self.coloc[keep] if self.coloc[keep] is not None else self.coloc[drop]
        self.weight[keep] += self.weight[drop]
        self.n_groups -= 1
        return keep


def _merge_colocated(q: _Quotient, graph: Graph) -> None:
    """Step (a): merge the ops of each colocation name where the local acyclicity test allows."""
    by_name: dict[str, list[int]] = {}
    for i, name in enumerate(graph.colocation):
        if name is not None:
            by_name.setdefault(name, []).append(i)
    for name, ops in by_name.items():
        queue = collections.deque(sorted({q.find(i) for i in ops}))
        while queue:
            a = queue.popleft()
            if q.find(a) != a:
                continue
            for b in sorted(q.succ[a] | q.pred[a]):
                if q.coloc[b] == name and q.no_long_path(a, b) and q.no_long_path(b, a):
                    m = q.merge(a, b)
                    queue.extend(sorted(x for x in q.succ[m] | q.pred[m] if q.coloc[x] == name))
                    queue.append(m)
                    break
        parts = sorted({q.find(i) for i in ops})
        isolated = [p for p in parts if not q.succ[p] and not q.pred[p]]
        for p in isolated:  # no edges at all: merging it anywhere is safe
            others = [x for x in parts if x != p and q.find(x) == x]
            if others:
                q.merge(others[0], p)


def _merge_single_consumers(q: _Quotient, order: Sequence[int], target: int) -> None:
    """Step (b): merge every node with exactly one consumer into that consumer, until nothing changes."""
    changed = True
    while changed and q.n_groups > target:
        changed = False
        for i in order:
            u = q.find(i)
            if len(q.succ[u]) == 1:
                v = next(iter(q.succ[u]))
                if q.compatible(u, v):
                    q.merge(u, v)
                    changed = True
                    if q.n_groups <= target:
                        return


def _contract_cheapest(q: _Quotient, n_ops: int, target: int) -> None:
    """Step (c): contract safe edges, cheapest first, down to `target` groups."""
    version = [0] * n_ops
    heap: list = []

    def push(u: int, v: int) -> None:
        if (len(q.succ[u]) == 1 or len(q.pred[v]) == 1) and q.compatible(u, v):
            heapq.heappush(heap, (q.weight[u] + q.weight[v], min(u, v), max(u, v), u, v, version[u], version[v]))

    def push_edges_of(m: int) -> None:
        for p in sorted(q.pred[m]):
            push(p, m)
        for c in sorted(q.succ[m]):
            push(m, c)

    for u in sorted({q.find(i) for i in range(n_ops)}):
        for v in sorted(q.succ[u]):
            push(u, v)
    while heap and q.n_groups > target:
        _, _, _, u, v, vu, vv = heapq.heappop(heap)
        if q.find(u) != u or q.find(v) != v or version[u] != vu or version[v] != vv or v not in q.succ[u]:
            continue
        if not (len(q.succ[u]) == 1 or len(q.pred[v]) == 1):
            continue  # degrees changed since the push; re-pushed when they become eligible again
        m = q.merge(u, v)
        version[m] += 1
        # Other edges keep their weight, and neighbours' degrees only shrink, so the only edges that can
        # become eligible are those of m: re-push just those.
        push_edges_of(m)


def _quotient_topo_order(q: _Quotient, n_ops: int) -> list[int]:
    """Representatives in a depth-first-like topological order (Kahn with a stack, smallest id first)."""
    reps = sorted({q.find(i) for i in range(n_ops)})
    indeg = {r: len(q.pred[r]) for r in reps}
    stack = [r for r in reversed(reps) if indeg[r] == 0]
    order = []
    while stack:
        r = stack.pop()
        order.append(r)
        for c in sorted(q.succ[r], reverse=True):
            indeg[c] -= 1
            if indeg[c] == 0:
                stack.append(c)
    return order


def _merge_topological_neighbours(q: _Quotient, n_ops: int, target: int) -> None:
    """Step (d): merge disjoint pairs of neighbours in one topological order (a contiguous run of a
    topological order is convex, so contracting any set of disjoint runs keeps the graph acyclic); pairs joined
    by an edge first, then the cheapest. Repeats with a fresh order until `target` or nothing is mergeable."""
    while q.n_groups > target:
        order = _quotient_topo_order(q, n_ops)
        pairs = sorted((0 if b in q.succ[a] else 1, q.weight[a] + q.weight[b], k)
                       for k, (a, b) in enumerate(zip(order, order[1:])) if q.compatible(a, b))
        taken = np.zeros(len(order), dtype=bool)
        merged = 0
        for _, _, k in pairs:
            if q.n_groups <= target:
                break
            if not taken[k] and not taken[k + 1]:
                taken[k] = taken[k + 1] = True
                q.merge(order[k], order[k + 1])
                merged += 1
        if not merged:
            return


def _op_weight(graph: Graph) -> np.ndarray:
    if not graph.costs:
        return np.zeros(graph.n_nodes)
    stacked = np.stack([np.nan_to_num(c, nan=0.0) for c in graph.costs.values()])
    return stacked.max(axis=0)


def group(graph: Graph, target_groups: int | None = None, colocate: bool = True,
          single_consumer: bool = True, fallback: bool = True) -> Grouping:
    """Group `graph` by colocation (a), single-consumer merging (b), cheapest-edge contraction (c) and, if
    still above the target, merging neighbours in a topological order (d).

    Args:
      graph: the op graph.
      target_groups: stop merging at this many groups (None: steps (a) and (b) only, no step (c)).
      colocate: run step (a).
      single_consumer: run step (b).
      fallback: run step (d) when (c) gets stuck above `target_groups`.
    Returns:
      the Grouping (see the module docstring for what is guaranteed).
    """
    if target_groups is not None and target_groups < 1:
        raise InputError(f"target_groups must be >= 1, got {target_groups}")
    weight = _op_weight(graph)
    q = _Quotient(graph, weight)
    target = target_groups if target_groups is not None else 0
    if colocate:
        _merge_colocated(q, graph)
    if single_consumer and q.n_groups > target:
        _merge_single_consumers(q, graph.topo_order.tolist(), target)
    if target_groups is not None and q.n_groups > target:
        _contract_cheapest(q, graph.n_nodes, target)
    if target_groups is not None and fallback and q.n_groups > target:
        _merge_topological_neighbours(q, graph.n_nodes, target)
    roots = np.asarray([q.find(i) for i in range(graph.n_nodes)], dtype=np.int64)
    return _build(graph, roots, q.coloc, weight, target_groups)


def _build(graph: Graph, roots: np.ndarray, coloc: list, weight: np.ndarray, target: int | None) -> Grouping:
    """The grouped Graph from each op's representative."""
    first_op = {}
    for i, r in enumerate(roots.tolist()):
        first_op.setdefault(r, i)  # groups are numbered by their first op
    reps = sorted(first_op, key=first_op.get)
    index = np.zeros(graph.n_nodes, dtype=np.int64)
    index[reps] = np.arange(len(reps))
    g = index[roots].astype(np.int32)
    n_groups = len(reps)
    order = np.argsort(g, kind="stable")
    members = tuple(np.split(order.astype(np.int32), np.cumsum(np.bincount(g, minlength=n_groups))[:-1]))
    # outputs: each member output consumed outside its group, once, in (op, output) order
    src, dst = graph.edge_src.astype(np.int64), graph.edge_dst.astype(np.int64)
    cross = g[src] != g[dst]
    gid = graph.out_offsets[src[cross]] + graph.edge_out[cross]
    outs = np.unique(gid)
    owner = np.repeat(np.arange(graph.n_nodes), graph.n_outputs)[outs]
    outs = outs[np.lexsort((outs, g[owner]))]
    out_group = g[np.repeat(np.arange(graph.n_nodes), graph.n_outputs)[outs]]
    start = np.searchsorted(out_group, np.arange(n_groups + 1))
    local = np.arange(len(outs)) - start[out_group]
    pos = np.empty(int(graph.out_offsets[-1]), dtype=np.int64)
    pos[outs] = local
    edges = np.stack([g[src[cross]], g[dst[cross]], pos[gid]], axis=1)
    edges = np.unique(edges, axis=0) if len(edges) else edges.reshape(0, 3)
    costs = {k: np.bincount(g, weights=c, minlength=n_groups) for k, c in graph.costs.items()}
    persistent = np.bincount(g, weights=graph.persistent_bytes, minlength=n_groups)
    nodes = []
    for k, mem in enumerate(members):
        ops = mem.tolist()
        lead = max(ops, key=lambda i: (weight[i], -i))
        label = re.sub(r"^\d+:", "", graph.names[lead]) + (f"+{len(ops) - 1}" if len(ops) > 1 else "")
        attrs = {"n_ops": len(ops)}
        flops = [graph.attrs[i].get("flops") for i in ops]
        if any(f is not None for f in flops):
            attrs["flops"] = sum(f for f in flops if f is not None)
        nodes.append({"name": f"{k:05d}:{label}", "op": _dominant_op(graph, ops, weight),
                      "cost": {kind: float(c[k]) for kind, c in costs.items() if not np.isnan(c[k])},
                      "out_bytes": graph.out_bytes[outs[start[k]:start[k + 1]]].tolist(),
                      "persistent_bytes": float(persistent[k]), "colocation": coloc[reps[k]], "attrs": attrs})
    meta = dict(graph.meta)
    meta["grouping"] = {"from": graph.name, "n_ops": graph.n_nodes, "n_groups": n_groups, "target_groups": target}
    grouped = make_graph(graph.name, nodes, [tuple(e) for e in edges.tolist()], meta)
    return Grouping(grouped, members, g)


def _dominant_op(graph: Graph, ops: list[int], weight: np.ndarray) -> str:
    """The op type with the largest summed cost (then the most members, then the name)."""
    if len(ops) == 1:
        return graph.ops[ops[0]]
    score: dict[str, list[float]] = {}
    for i in ops:
        s = score.setdefault(graph.ops[i], [0.0, 0])
        s[0] += weight[i]
        s[1] += 1
    return min(score, key=lambda op: (-score[op][0], -score[op][1], op))


def expand_placement(grouping: Grouping, group_placement: Sequence[int] | np.ndarray) -> np.ndarray:
    """int32[N] device of every op, from the device of every group."""
    p = np.asarray(group_placement)
    if p.shape != (grouping.graph.n_nodes,):
        raise InputError(f"group placement has {p.size} entries but there are {grouping.graph.n_nodes} groups")
    return p.astype(np.int32)[grouping.op_to_group]


def group_placement_from_ops(grouping: Grouping, op_placement: Sequence[int] | np.ndarray) -> np.ndarray:
    """int32[G] device of every group: the device most of its ops are on (ties: the lowest device index)."""
    p = np.asarray(op_placement, dtype=np.int64)
    if p.shape != grouping.op_to_group.shape:
        raise InputError(f"op placement has {p.size} entries but there are {grouping.op_to_group.size} ops")
    if p.size and p.min() < 0:
        raise InputError("op placement has a negative device index")
    n_dev = int(p.max()) + 1 if p.size else 1
    counts = np.zeros((grouping.graph.n_nodes, n_dev), dtype=np.int64)
    np.add.at(counts, (grouping.op_to_group, p), 1)
    return counts.argmax(axis=1).astype(np.int32)
