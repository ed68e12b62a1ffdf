"""The contracted graph that grouping works on.

A quotient of an op graph under a union-find of its ops. `Quotient(graph, weight)` starts with every op its own
group (weight: float64[N] per-op weight, any non-negative unit, e.g. microseconds or cost shares; see
`simulator.grouping.group._op_weight`). Each group is named by its representative op (`find`); per representative it
keeps the distinct successor and predecessor groups, the colocation name, the summed member weight, and labels of
the zero-communication ASAP schedule of the contracted graph, in the weight's units: the earliest `start`, the
`bottom` (longest path from the group's start to the end, its own weight included) and the critical path `cp`; plus
a `depth` with depth[child] > depth[parent] on every edge, which the acyclicity test relies on.

`merge` contracts two groups (adjacency only); `contract` merges and updates the labels incrementally (exactly,
or in bounded waves, leaving the rest stale until `reschedule`); `mergeable` and `path_through` say whether a
contraction surely keeps the graph acyclic and how long the longest path through the merged group would be.
`simulator.grouping.group` decides which groups to contract.
"""

from __future__ import annotations

import heapq

import numpy as np

from simulator.model.graph import Graph

_SEARCH_BUDGET = 64  # nodes visited by one acyclicity search before giving up (refusing the merge)
_REL_TOL = 1e-9  # relative slack when comparing path lengths summed in different orders


class Quotient:
    """The contracted graph: a union-find over ops, labels per group.

    Distinct successor/predecessor sets per representative, and labels of the representatives: the
    zero-communication ASAP schedule (start, bottom, cp) and a depth.
    """

    def __init__(self, graph: Graph, weight: np.ndarray):
        n = graph.n_nodes
        self.parent = list(range(n))
        self.succ = [set() for _ in range(n)]
        self.pred = [set() for _ in range(n)]
        for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
            self.succ[s].add(d)
            self.pred[d].add(s)
        self.coloc = list(graph.colocation)
        self.join_names = False  # True: groups of different colocation names may merge, the names becoming one
        self._alias: dict[str, str] = {}  # colocation name -> the name it was joined into
        self.weight = weight.tolist()  # summed member weight per representative (units of `group._op_weight`)
        self.n_groups = n
        self.start = [0.0] * n  # earliest start with free communication (same units)
        self.bottom = [0.0] * n  # longest path from the node's start to the end, own weight included
        self.depth = [0] * n  # depth[child] > depth[parent] on every edge, always
        self.cp = 0.0  # critical path: max(start + bottom)
        self.stale = 0  # contractions whose label waves were cut short since the last `reschedule`

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:
            self.parent[i], i = root, self.parent[i]
        return root

    def reps(self) -> list[int]:
        return [i for i, p in enumerate(self.parent) if p == i]

    def name(self, a: int) -> str | None:
        """The colocation name of representative a, after the joins so far."""
        name = self.coloc[a]
        while name is not None and name in self._alias:
            name = self._alias[name]
        return name

    def compatible(self, a: int, b: int) -> bool:
        if self.join_names:
            return True
        na, nb = self.name(a), self.name(b)
        return na is None or nb is None or na == nb

    def no_long_path(self, a: int, b: int) -> bool:
        """True if surely no path a -> x -> ... -> b has x outside {a, b}."""
        sa, pb = self.succ[a], self.pred[b]
        return len(sa) == 0 or (len(sa) == 1 and b in sa) or len(pb) == 0 or (len(pb) == 1 and a in pb)

    def reaches(self, sources, b: int) -> bool:
        """True if a node of `sources` may reach b (or the budget ran out).

        A depth-first search of at most _SEARCH_BUDGET nodes, skipping nodes at b's depth or deeper (they cannot
        reach b).
        """
        db, succ, d = self.depth[b], self.succ, self.depth
        stack = [x for x in sources if d[x] < db]
        seen, budget = set(stack), _SEARCH_BUDGET
        while stack:
            x = stack.pop()
            if b in succ[x]:
                return True
            budget -= 1
            if budget < 0:
                return True
            for y in succ[x]:
                if y not in seen and d[y] < db:
                    seen.add(y)
                    stack.append(y)
        return False

    def mergeable(self, a: int, b: int) -> bool:
        """True if contracting a and b surely keeps the graph acyclic.

        No path joins them other than an edge (a path from a to b of two or more hops needs depth[b] >= depth[a] +
        2), and their colocation names are compatible.
        """
        if not self.compatible(a, b):
            return False
        if self.depth[a] > self.depth[b]:
            a, b = b, a  # the only possible direction is a -> b
        if self.depth[b] - self.depth[a] <= 1 or self.no_long_path(a, b):
            return True
        return not self.reaches([x for x in self.succ[a] if x != b], b)

    def path_through(self, a: int, b: int) -> float:
        """Length of the longest path through a + b if contracted now.

        Paths avoiding the group keep their length, so the critical path after contracting is max(cp, this).
        """
        st, bl, w = self.start, self.bottom, self.weight
        if a in self.succ[b]:
            a, b = b, a
        if b not in self.succ[a]:  # no edge: starts when both could, then runs both
            return max(st[a], st[b]) + w[a] + w[b] + max(bl[a] - w[a], bl[b] - w[b])
        # edge a -> b: starts with a, or when b's last other input is ready; ends before the longest tail of
        # b's or a's other children. The O(1) shortcuts hold when a is not b's last input / b not a's longest
        # child (with a margin: the values are sums in different orders); else scan.
        margin = _REL_TOL * (st[b] + bl[a])
        if st[b] > st[a] + w[a] + margin:
            head = st[b]
        else:
            head = max([st[a]] + [st[p] + w[p] for p in self.pred[b] if p != a])
        if bl[a] - w[a] > bl[b] + margin:
            tail = bl[a] - w[a]
        else:
            tail = max([bl[b] - w[b]] + [bl[s] for s in self.succ[a] if s != b])
        return head + w[a] + w[b] + tail

    def merge(self, a: int, b: int) -> int:
        """Contract groups a and b (adjacency only); returns the survivor."""
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
        nk, nd = self.name(keep), self.name(drop)
        if nk is not None and nd is not None and nk != nd:  # join_names: one device for both names from now on
            nk, nd = min(nk, nd), max(nk, nd)
            self._alias[nd] = nk
        self.coloc[keep] = nk if nk is not None else nd
        self.weight[keep] += self.weight[drop]
        self.n_groups -= 1
        return keep

    def contract(self, a: int, b: int, wave: int | None = None) -> int:
        """`merge`, then update the labels; returns the survivor.

        Depth exactly (the acyclicity test relies on it); start and bottom only grow under contraction, so the new
        group's descendants (start) and ancestors (bottom) are raised, exactly, or until `wave` nodes were raised
        each way (the rest stays low until `reschedule`).
        """
        m = self.merge(a, b)
        st, bl, d, w = self.start, self.bottom, self.depth, self.weight
        d[m] = max([d[p] + 1 for p in self.pred[m]], default=0)
        stack = [m]
        while stack:
            x = stack.pop()
            for s in self.succ[x]:
                if d[s] <= d[x]:
                    d[s] = d[x] + 1
                    stack.append(s)
        st[m] = max([st[p] + w[p] for p in self.pred[m]], default=0.0)
        bl[m] = w[m] + max([bl[s] for s in self.succ[m]], default=0.0)
        self.cp = max(self.cp, st[m] + bl[m])
        if not (self._raise(m, self.succ, st, 1, wave) & self._raise(m, self.pred, bl, -1, wave)):
            self.stale += 1
        return m

    def _raise(self, m: int, nbrs: list, val: list, sign: int, wave: int | None) -> bool:
        """Raise starts or bottoms onward from m; False if `wave` cut it.

        A start (sign +1) goes to the successors, a bottom (-1) to the predecessors, in depth order so that each
        node is raised once.
        """
        st, bl, d, w = self.start, self.bottom, self.depth, self.weight
        heap, queued, budget, cp = [(sign * d[m], m)], {m}, wave, self.cp
        while heap and (budget is None or budget > 0):
            _, x = heapq.heappop(heap)
            queued.discard(x)
            vx = val[x] + w[x] if sign > 0 else val[x]
            for y in nbrs[x]:
                new = vx if sign > 0 else vx + w[y]
                if val[y] < new:
                    val[y] = new
                    cp = max(cp, st[y] + bl[y])
                    if y not in queued:
                        queued.add(y)
                        heapq.heappush(heap, (sign * d[y], y))
            budget = None if budget is None else budget - 1
        self.cp = cp
        return not heap

    def reschedule(self, depth_valid: bool = True) -> None:
        """Recompute start, bottom, depth and cp from scratch.

        Depth is the longest hop count. With `depth_valid`, sorting by the current depth gives the topological
        order.
        """
        order = sorted(self.reps(), key=self.depth.__getitem__) if depth_valid else quotient_topo_order(self)
        st, bl, d, w, pred, succ = self.start, self.bottom, self.depth, self.weight, self.pred, self.succ
        finish = [0.0] * len(st)
        for r in order:
            if pred[r]:
                st[r] = max(map(finish.__getitem__, pred[r]))
                d[r] = 1 + max(map(d.__getitem__, pred[r]))
            else:
                st[r], d[r] = 0.0, 0
            finish[r] = st[r] + w[r]
        for r in reversed(order):
            bl[r] = w[r] + max(map(bl.__getitem__, succ[r])) if succ[r] else w[r]
        self.cp = max([st[r] + bl[r] for r in order], default=0.0)
        self.stale = 0


def quotient_topo_order(q: Quotient) -> list[int]:
    """Representatives in a depth-first-like topological order.

    Kahn's algorithm with a stack, smallest id first.
    """
    reps = q.reps()
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
