"""Coarsening an op graph into groups; placements back and forth.

A group runs as one unit (`simulator.engine.reference`): it starts when all its external inputs have arrived and runs
its members back to back, so merging can destroy parallelism. Grouping therefore tracks the zero-communication
ASAP schedule of the contracted graph (`simulator.grouping.quotient.Quotient`), with node weights from `_op_weight` (a
group weighs the sum of its members): per node its earliest start, its bottom (longest path from its start to
the end, itself included) and the critical path cp. A merge only adds constraints, so starts, bottoms and cp
never decrease. `group(graph, target_groups)` contracts in four steps, every merge keeping the quotient acyclic:

  (a) colocation: ops sharing a colocation name are merged as far as a local test proves acyclic: two nodes
      a, b may merge when there is no path of length >= 2 between them either way, which holds when
      (succ(a) <= {b} or pred(b) <= {a}) and (succ(b) <= {a} or pred(a) <= {b}). A parameter read in the forward
      pass and updated at the end of the step cannot be one node without swallowing the whole step (the
      forward and backward pass lie between them), so a colocation name may end up on a few group nodes (in
      practice two: the variable with its reads, and its update chain). They keep the name in
      `Graph.colocation`: placing them on one device is a constraint for whoever places the groups;
  (b) contract, in topological order until nothing changes, every edge u -> v whose contraction delays
      nothing: the group can start when u did (v's other inputs are ready by then, or u costs nothing), and
      u's other consumers start after v ends anyway. No start changes, so the critical path is kept. This is
      Mirhoseini et al. (2017)'s merge of a node into its only consumer, kept only where it costs no
      parallelism (merging x into z otherwise makes x wait for z's other inputs), and extended to nodes with
      several consumers;
  (c) while above `target_groups`: contract the candidate pair whose merged group has the shortest longest
      path through it, ties by summed weight, then index. After contracting a and b the critical path is
      exactly max(cp, that path) (paths avoiding the group keep their length), so merges that keep the cp
      come first, those with the most slack first, then the ones that lengthen it least. Candidates: every
      edge (contracted only if no other path joins its ends: a depth labelling with depth[child] >
      depth[parent] and a bounded search prove it) and siblings next to each other in start order among a
      node's children or parents (joined by no path). A lazy greedy: keys only grow, so a popped key is
      re-evaluated and pushed back if it grew; after each contraction starts and bottoms are raised in
      waves of at most _WAVE nodes and recomputed from scratch after n_groups / _RESCHEDULE cut-short waves.
      With a target, (b) and (c) first build no group heavier than `balance` x the mean group weight at the
      target (balance for the placer); (c) drops that limit if it gets stuck. When no candidate is left,
  (d) (`fallback=True`) merges disjoint pairs of neighbours in a depth-first topological order of the
      quotient, edge-joined pairs first, then cheapest: a contiguous run of a topological order is convex, so
      this is acyclic too, and it reaches the target unless colocation names forbid it. It ignores the
      schedule; (c) leaves it work mainly when colocation names or a disconnected graph block the candidates.

With `max_cp_growth` (what `placeto import-jax` uses; the families do not) the critical path is bounded: (a) makes
only colocation merges that lengthen it not at all (the parts left apart keep their name), (c) none past
(1 + max_cp_growth) x the op graph's (labels kept exact so the bound holds), (d) is skipped, and the GroupingReport
says when the bound, not the target, stopped the merging. With `join_names`, (c) may merge groups of different
colocation names, the names becoming one (one device for both), so names alone never keep a graph above its
target (how far they can otherwise: docs/importing.md).

The grouped graph's critical path is never below the op graph's; after (a) and (b) only (target None) it is
the op graph's under the grouping weight, unless colocation merges lengthened it. Nodes with different
colocation names are never merged; an uncolocated node merged into a colocated one takes its name. The grouped
graph gets, per kind, the sum of member costs as the simulator reads them (Graph.cost_for: a member without the
kind's own cost counts its plain-number cost; NaN if it has neither), except for the XLA-era analytic
kinds of a traced graph (simulator.model.costs.FUSED_KINDS: v100, a100, h100, ...), whose group cost is the roofline
of the group as one fused computation (simulator.model.costs.fused_group_costs). Sums past a node's limits
(simulator.model.limits: MAX_COST_US, MAX_BYTES) saturate at them, so that every graph that loads groups into a
graph that loads (its total time stays within MAX_TIME_US; a group's cost can be, e.g., 1,100 ops of 1e10 us);
meta["grouping"]["saturated"] counts such groups when there are any. Deterministic: ties break on op indices,
never on set order.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import math
import re
from typing import NamedTuple, Sequence

import numpy as np

from simulator.grouping.quotient import Quotient, quotient_topo_order
from simulator.model.costs import FREE_OPS, FUSED_KINDS, fused_group_costs
from simulator.model.errors import InputError
from simulator.model.graph import DEFAULT_KIND, Graph, make_graph
from simulator.model.limits import MAX_BYTES, MAX_COST_US
from simulator.model.max_load import PER_NODE_META

_WAVE = 64  # step (c): nodes whose labels one contraction raises each way before leaving the rest stale
_RESCHEDULE = 8  # step (c): labels are recomputed after n_groups / _RESCHEDULE contractions left them stale
_TOL = 0.002  # step (c): a popped key that grew by at most this times the cp is taken as it is


class GroupingReport(NamedTuple):
    """What grouping achieved against what was asked.

    Critical paths in the units of the grouping weight (`_op_weight`): zero-communication longest paths of the op
    graph (cp_ops) and of the grouped graph (cp_groups).
    """

    n_groups: int
    target_groups: int | None
    cp_ops: float
    cp_groups: float
    max_cp_growth: float | None  # the bound asked for (0.05: +5%), None: unbounded
    stopped: str | None  # why n_groups > target_groups: "critical path", "colocation" or "structure" (no
    # acyclic merge left); None if the target was reached

    @property
    def cp_growth(self) -> float:
        """Relative growth of the critical path (0.04: +4%)."""
        return self.cp_groups / self.cp_ops - 1.0 if self.cp_ops > 0 else 0.0

    def describe(self) -> str:
        """One line: groups made, critical-path growth, why short of target."""
        text = f"{self.n_groups} groups"
        if self.target_groups is not None:
            text += f" (target {self.target_groups})"
        text += f", critical path {self.cp_growth * 100:+.1f}%"
        if self.max_cp_growth is not None:
            text += f" (bound {self.max_cp_growth * 100:+.1f}%)"
        if self.stopped == "critical path":
            text += (f"; not {self.target_groups} groups: every further merge would lengthen the critical path "
                     f"beyond the bound (raise --max-cp-growth to trade it for fewer groups)")
        elif self.stopped == "structure":
            text += (f"; not {self.target_groups} groups: no two remaining groups can merge without making a "
                     f"cycle")
        elif self.stopped == "colocation":
            text += (f"; not {self.target_groups} groups: the remaining groups hold different colocation names "
                     f"(variables), which this grouping keeps apart")
        return text


@dataclasses.dataclass(frozen=True, eq=False)
class Grouping:
    """A grouped graph and its map to the op graph.

    Attributes:
      graph: the graph of G groups (valid and acyclic); group k is node k.
      members: [G] int32 op indices of each group, ascending; groups are ordered by their first op.
      op_to_group: int32[N] group of every op.
      report: groups made against the target, and the critical path's growth (GroupingReport).
    """

    graph: Graph
    members: tuple[np.ndarray, ...]
    op_to_group: np.ndarray
    report: GroupingReport | None = None


def _merge_colocated(q: Quotient, graph: Graph, bound: float = math.inf) -> None:
    """Step (a): merge the ops of each colocation name, where acyclic.

    Where the local acyclicity test allows and, with a finite `bound`, where the longest path through the merged
    pair stays within it (labels kept exact).
    """
    exact = bound < math.inf

    def merge(a: int, b: int) -> int | None:
        if exact and q.path_through(a, b) > bound:
            return None
        return q.contract(a, b) if exact else q.merge(a, b)

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
                    m = merge(a, b)
                    if m is None:
                        continue
                    queue.extend(sorted(x for x in q.succ[m] | q.pred[m] if q.coloc[x] == name))
                    queue.append(m)
                    break
        parts = sorted({q.find(i) for i in ops})
        isolated = [p for p in parts if not q.succ[p] and not q.pred[p]]
        for p in isolated:  # no edges at all: merging it anywhere is safe
            others = [x for x in parts if x != p and q.find(x) == x]
            if others:
                merge(others[0], p)


def _delays_nothing(q: Quotient, u: int, v: int) -> bool:
    """True if contracting edge u -> v delays no node's earliest start.

    So neither the critical path: the group can start when u did (v's other inputs are ready by then, or u costs
    nothing and v's inputs are ready when v started) and every other consumer of u starts after v ends (and after
    v starts, which also rules out a second path u -> c -> ... -> v).
    """
    st, w = q.start, q.weight
    ready = max([st[p] + w[p] for p in q.pred[v] if p != u], default=0.0)
    if ready <= st[u]:
        begin = st[u]
    elif w[u] == 0:
        begin = ready
    else:
        return False
    end = begin + w[u] + w[v]
    return all(st[c] >= end and st[c] > st[v] for c in q.succ[u] if c != v)


def _contract_free_edges(q: Quotient, order: Sequence[int], target: int, cap: float) -> None:
    """Step (b): contract the edges u -> v that delay nothing.

    `_delays_nothing`, in topological order of u, until nothing changes, never making a group heavier than `cap`.
    This includes Mirhoseini et al.'s merge of a node into its only consumer when that consumer's other inputs are
    ready by the time the node starts. Start times stay exact and the critical path unchanged; bottoms are left
    stale.
    """
    st, w = q.start, q.weight
    changed = True
    while changed and q.n_groups > target:
        changed = False
        for i in order:
            u = q.find(i)
            for v in sorted(q.succ[u]):
                if q.compatible(u, v) and w[u] + w[v] <= cap and _delays_nothing(q, u, v):
                    begin = max([st[p] + w[p] for p in q.pred[u] | q.pred[v] if p != u], default=0.0)
                    st[q.merge(u, v)] = begin
                    changed = True
                    if q.n_groups <= target:
                        return
                    break


def _nearest_siblings(q: Quotient, m: int) -> set[tuple[int, int]]:
    """Pairs of m with its siblings next to it in start order.

    Among each parent's children and each child's parents.
    """
    key = (q.start[m], m)
    pairs = set()
    for nbrs in [q.succ[p] for p in q.pred[m]] + [q.pred[c] for c in q.succ[m]]:
        below = [(q.start[x], x) for x in nbrs if (q.start[x], x) < key]
        above = [(q.start[x], x) for x in nbrs if (q.start[x], x) > key]
        pairs.update((m, k[1]) for k in (max(below, default=None), min(above, default=None)) if k is not None)
    return pairs


def _pair_entry(q: Quotient, a: int, b: int, version: list[int]) -> tuple:
    """A heap entry for the pair a, b; dead once a or b changes.

    (path through a + b, summed weight, a, b, versions of a and b).
    """
    a, b = min(a, b), max(a, b)
    return (q.path_through(a, b), q.weight[a] + q.weight[b], a, b, version[a], version[b])


def _all_candidates(q: Quotient) -> set[tuple[int, int]]:
    """Candidate pairs: edges, and siblings adjacent in start order.

    Siblings among each node's children and among its parents.
    """
    pairs = set()
    for u in q.reps():
        pairs.update((min(u, v), max(u, v)) for v in q.succ[u])
        for nbrs in (q.succ[u], q.pred[u]):
            ordered = sorted(nbrs, key=lambda x: (q.start[x], x))
            pairs.update((min(x, y), max(x, y)) for x, y in zip(ordered, ordered[1:]))
    return pairs


def _contract_greedy(q: Quotient, target: int, cap: float, bound: float = math.inf) -> bool:
    """Step (c): contract pairs, shortest path through the pair first.

    Candidates: `_all_candidates`, then the pairs each contraction creates; down to `target` groups, never making a
    group heavier than `cap`. Lazy greedy: keys only grow, so a popped key is re-evaluated and pushed back if it
    grew (by more than _TOL of the critical path) past the runner-up. Labels are raised in bounded waves and
    recomputed exactly after n_groups / _RESCHEDULE contractions whose waves were cut short. No contraction whose
    path through the merged pair exceeds `bound` is made; returns True if that bound stopped it above `target`.
    """
    q.reschedule(depth_valid=False)
    version = [0] * len(q.parent)

    def ok(x: int, y: int) -> bool:
        return q.compatible(x, y) and q.weight[x] + q.weight[y] <= cap

    heap = sorted(_pair_entry(q, a, b, version) for a, b in _all_candidates(q) if ok(a, b))
    while heap and q.n_groups > target:
        if q.stale > max(4, q.n_groups // _RESCHEDULE):
            q.reschedule()
        entry = heap[0]
        a, b = entry[2], entry[3]
        if q.parent[a] != a or q.parent[b] != b or entry[4] != version[a] or entry[5] != version[b]:
            heapq.heappop(heap)
            continue
        now = q.path_through(a, b)
        if now > bound:  # keys only grow: once the smallest is past the bound, every candidate is
            if entry[0] > bound:
                return True
            heapq.heapreplace(heap, (now, *entry[1:]))
            continue
        if now > entry[0] + _TOL * q.cp and (now, *entry[1:4]) > min([e[:4] for e in heap[1:3]], default=(now,)):
            heapq.heapreplace(heap, (now, *entry[1:]))
            continue
        heapq.heappop(heap)
        if not q.mergeable(a, b):
            continue  # stays so until a or b changes, which pushes new pairs
        m = q.contract(a, b, _WAVE if bound == math.inf else None)  # a bound needs exact labels
        version[m] += 1
        for x, y in sorted({(p, m) for p in q.pred[m]} | {(m, c) for c in q.succ[m]} | _nearest_siblings(q, m)):
            if ok(x, y):
                heapq.heappush(heap, _pair_entry(q, x, y, version))
    return False



def _merge_topological_neighbours(q: Quotient, target: int) -> None:
    """Step (d): merge disjoint neighbour pairs of a topological order.

    A contiguous run of a topological order is convex, so contracting any set of disjoint runs keeps the graph
    acyclic. Pairs joined by an edge first, then the cheapest. Repeats with a fresh order until `target` or nothing
    is mergeable.
    """
    while q.n_groups > target:
        order = quotient_topo_order(q)
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


def _op_weight(graph: Graph, kind: str | None) -> np.ndarray:
    """float64[N] the weight that drives grouping (NaN counts 0).

    `kind`'s costs; else the only kind's; else each kind's costs as a share of that kind's total, max over kinds
    (a slow kind such as a CPU would otherwise decide alone).

    Raises:
      InputError: if the graph has no costs for `kind`.
    """
    if kind is not None and kind not in graph.costs:
        raise InputError(f"graph {graph.name!r} has no costs for device kind {kind!r}")
    if kind is not None or len(graph.costs) <= 1:
        cost = graph.costs.get(kind) if kind is not None else next(iter(graph.costs.values()), None)
        return np.zeros(graph.n_nodes) if cost is None else np.nan_to_num(cost, nan=0.0)
    stacked = np.stack([np.nan_to_num(c, nan=0.0) for c in graph.costs.values()])
    totals = stacked.sum(axis=1, keepdims=True)
    return (stacked / np.where(totals > 0, totals, 1.0)).max(axis=0)


def group(graph: Graph, target_groups: int | None = None, colocate: bool = True,
          single_consumer: bool = True, fallback: bool = True, kind: str | None = None,
          balance: float | None = 4.0, max_cp_growth: float | None = None, join_names: bool = False) -> Grouping:
    """Group `graph` in steps (a)-(d) of the module docstring.

    By colocation (a), contracting edges that delay nothing (b), critical-path-greedy contraction (c) and, if still
    above the target, merging neighbours in a topological order (d).

    Args:
      graph: the op graph.
      target_groups: stop merging at this many groups (None: steps (a) and (b) only, no step (c)).
      colocate: run step (a).
      single_consumer: run step (b).
      fallback: run step (d) when (c) gets stuck above `target_groups` (not with `max_cp_growth`: (d)
        ignores the schedule).
      kind: the device kind whose costs weigh the ops (None: see `_op_weight`).
      balance: with a target, steps (b) and (c) make no group heavier than `balance` times the mean group
        weight at the target (None: no limit); (c) lifts the limit if it cannot reach the target otherwise.
      max_cp_growth: step (c) makes no merge that would lengthen the critical path (under the grouping weight)
        beyond (1 + max_cp_growth) times the op graph's, and stops there, above the target if need be (the
        report says so); None: no bound.
      join_names: steps (c) and (d) may merge groups of different colocation names (the names then become one:
        one device for both), so that colocation alone never keeps the graph above the target.
    Returns:
      the Grouping, with its GroupingReport (see the module docstring for what is guaranteed).

    Raises:
      InputError: for `target_groups` < 1, a negative or infinite `max_cp_growth`, or a `kind` without costs.
    """
    if target_groups is not None and target_groups < 1:
        raise InputError(f"target_groups must be >= 1, got {target_groups}")
    if max_cp_growth is not None and not 0 <= max_cp_growth < math.inf:
        raise InputError(f"max_cp_growth must be a number >= 0, got {max_cp_growth}")
    weight = _op_weight(graph, kind)
    q = Quotient(graph, weight)
    q.reschedule(depth_valid=False)
    cp_ops = q.cp
    bound = cp_ops * (1 + max_cp_growth) * (1 + 1e-9) if max_cp_growth is not None else math.inf
    target = target_groups if target_groups is not None else 0
    if colocate:  # with a bound, colocation merges may not lengthen the critical path at all: the parts of a
        # name left apart keep the name (one device), and step (c) gets the whole bound (why: docs/importing.md)
        _merge_colocated(q, graph, cp_ops * (1 + 1e-9) if max_cp_growth is not None else math.inf)
    cap = balance * float(weight.sum()) / target_groups if balance and target_groups else math.inf
    if single_consumer and q.n_groups > target:
        q.reschedule(depth_valid=False)
        _contract_free_edges(q, graph.topo_order.tolist(), target, cap)
    q.join_names = join_names
    stopped = None
    if target_groups is not None:
        for limit in dict.fromkeys([cap, math.inf]):
            if q.n_groups > target:
                stopped = "critical path" if _contract_greedy(q, target, limit, bound) else None
    if target_groups is not None and fallback and q.n_groups > target and max_cp_growth is None:
        _merge_topological_neighbours(q, target)
    q.reschedule(depth_valid=False)
    if q.n_groups > target and target_groups is not None and stopped is None:
        stopped = "structure" if join_names else "colocation"
    roots = np.asarray([q.find(i) for i in range(graph.n_nodes)], dtype=np.int64)
    grouping = _build(graph, roots, [q.name(i) for i in range(graph.n_nodes)], weight, target_groups)
    report = GroupingReport(grouping.graph.n_nodes, target_groups, cp_ops, q.cp, max_cp_growth, stopped)
    return dataclasses.replace(grouping, report=report)


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
    costs = {k: _group_costs(graph, g, k, _effective_cost(graph, k), n_groups) for k in graph.costs}
    persistent = np.bincount(g, weights=graph.persistent_bytes, minlength=n_groups)
    over = np.zeros(n_groups, np.bool_)  # groups whose sums pass a node's limits: saturated (module docstring)
    for c in (*costs.values(), persistent):
        over |= c > (MAX_BYTES if c is persistent else MAX_COST_US)
    costs = {k: np.minimum(c, MAX_COST_US) for k, c in costs.items()}  # NaN (no cost of that kind) stays NaN
    persistent = np.minimum(persistent, MAX_BYTES)
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
    meta = {k: v for k, v in graph.meta.items() if k not in PER_NODE_META}  # per-op arrays: not the groups'
    meta["grouping"] = {"from": graph.name, "n_ops": graph.n_nodes, "n_groups": n_groups, "target_groups": target}
    if over.any():
        meta["grouping"]["saturated"] = int(over.sum())
    grouped = make_graph(graph.name, nodes, [tuple(e) for e in edges.tolist()], meta)
    return Grouping(grouped, members, g)


def _effective_cost(graph: Graph, kind: str) -> np.ndarray:
    """float64[N] each op's cost on `kind`, as Graph.cost_for reads it.

    Its own, else its plain-number (DEFAULT_KIND) cost, NaN with neither. Summing raw per-kind costs instead lost
    every kind of a graph whose nodes mix the two (a group of one op of each had no cost at all).
    """
    own, default = graph.costs[kind], graph.costs.get(DEFAULT_KIND)
    return own if default is None or kind == DEFAULT_KIND else np.where(np.isnan(own), default, own)


def _group_costs(graph: Graph, g: np.ndarray, kind: str, cost: np.ndarray, n_groups: int) -> np.ndarray:
    """float64[G] each group's cost under `kind`.

    The fused roofline of its ops for the XLA-era analytic kinds of a traced graph
    (simulator.model.costs.fused_group_costs), else the sum of its ops' costs.
    """
    traced = all(op in FREE_OPS or "flops" in a for op, a in zip(graph.ops, graph.attrs))
    if kind in FUSED_KINDS and traced and graph.n_nodes:
        return fused_group_costs(graph, g, kind)
    return np.bincount(g, weights=cost, minlength=n_groups)


def _dominant_op(graph: Graph, ops: list[int], weight: np.ndarray) -> str:
    """The op type with the largest summed weight among `ops`.

    Ties: the most members, then the name.
    """
    if len(ops) == 1:
        return graph.ops[ops[0]]
    score: dict[str, list[float]] = {}
    for i in ops:
        s = score.setdefault(graph.ops[i], [0.0, 0])
        s[0] += weight[i]
        s[1] += 1
    return min(score, key=lambda op: (-score[op][0], -score[op][1], op))


def expand_placement(grouping: Grouping, group_placement: Sequence[int] | np.ndarray) -> np.ndarray:
    """int32[N] device of every op, from the device of every group.

    Raises:
      InputError: if `group_placement` has not one entry per group.
    """
    p = np.asarray(group_placement)
    if p.shape != (grouping.graph.n_nodes,):
        raise InputError(f"group placement has {p.size} entries but there are {grouping.graph.n_nodes} groups")
    return p.astype(np.int32)[grouping.op_to_group]


def group_placement_from_ops(grouping: Grouping, op_placement: Sequence[int] | np.ndarray) -> np.ndarray:
    """int32[G] device of every group: the one most of its ops are on.

    Ties: the lowest device index.

    Raises:
      InputError: if `op_placement` has not one entry per op, or a negative index.
    """
    p = np.asarray(op_placement, dtype=np.int64)
    if p.shape != grouping.op_to_group.shape:
        raise InputError(f"op placement has {p.size} entries but there are {grouping.op_to_group.size} ops")
    if p.size and p.min() < 0:
        raise InputError("op placement has a negative device index")
    n_dev = int(p.max()) + 1 if p.size else 1
    counts = np.zeros((grouping.graph.n_nodes, n_dev), dtype=np.int64)
    np.add.at(counts, (grouping.op_to_group, p), 1)
    return counts.argmax(axis=1).astype(np.int32)
