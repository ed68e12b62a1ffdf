"""The computation graph: typed arrays, validated on construction.

A `Graph` is what every other module consumes: the simulator, the feature builder, the baselines. It is a frozen
dataclass of read-only numpy arrays (node-indexed, in file order) plus derived values (CSR adjacency, the
simulator's prepared arrays per cluster) computed once on demand and cached on it.

Units: compute costs in microseconds, sizes in bytes.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from simulator.model.costs import derived_costs
from simulator.model.errors import InputError
from simulator.model.limits import MAX_BYTES, MAX_COST_US, MAX_INDEX, integer, number

DEFAULT_KIND = "default"  # cost key used when a node's cost is a plain number (applies to every device kind)


# How a traced program (simulator.tracing.trace), its units, plans and exported files name the values of its op
# graph; here, below the tracer, so that the jax-free modules among them need not import it.
class Source(NamedTuple):
    """Where a value comes from: output `out` of node `node`."""

    node: int
    out: int


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    """A computation graph of N nodes, E edges and O output tensors.

    Attributes:
      name: graph name.
      names: [N] unique node names.
      ops: [N] op types (e.g. "dot_general", "MatMul").
      costs: device kind -> float64[N] compute time in microseconds; NaN where the node has no cost for that
        kind. The kind `DEFAULT_KIND` holds costs given as plain numbers and applies to any kind.
      out_offsets: int64[N + 1]; outputs of node i are out_bytes[out_offsets[i]:out_offsets[i + 1]].
      out_bytes: float64[O] size of each output tensor in bytes (whole numbers).
      persistent_bytes: float64[N] bytes held for the whole step (parameters, optimizer state).
      edge_src, edge_dst, edge_out: int32[E] producer, consumer and producer output index of each edge.
      colocation: [N] colocation group name or None.
      attrs: [N] free-form JSON-serialisable attributes per node.
      meta: free-form JSON-serialisable graph attributes (family, source program, ...).
      source: the file the graph was read from, for error messages (None when built in memory).
    """

    name: str
    names: tuple[str, ...]
    ops: tuple[str, ...]
    costs: Mapping[str, np.ndarray]
    out_offsets: np.ndarray
    out_bytes: np.ndarray
    persistent_bytes: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_out: np.ndarray
    colocation: tuple[str | None, ...]
    attrs: tuple[dict, ...]
    meta: dict
    source: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        _freeze_arrays(self)
        _validate(self)

    # ---- sizes -------------------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.names)

    @property
    def n_edges(self) -> int:
        return int(self.edge_src.shape[0])

    @functools.cached_property
    def cache(self) -> dict:
        """Per-graph memo of values that depend on more than the graph.

        E.g. the lower bound per cluster, or the engine's prepared arrays.
        """
        return {}

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Node name -> node index."""
        return {n: i for i, n in enumerate(self.names)}

    @functools.cached_property
    def n_outputs(self) -> np.ndarray:
        """int64[N] number of outputs per node."""
        return np.diff(self.out_offsets)

    @functools.cached_property
    def node_out_bytes(self) -> np.ndarray:
        """float64[N] total bytes of all outputs of each node."""
        csum = np.concatenate([[0.0], np.cumsum(self.out_bytes)])
        return csum[self.out_offsets[1:]] - csum[self.out_offsets[:-1]]

    # ---- costs -------------------------------------------------------------------------------------------
    @property
    def kinds(self) -> tuple[str, ...]:
        """Device kinds with recorded costs.

        DEFAULT_KIND is among them if any node has a plain-number cost.
        """
        return tuple(self.costs)

    def cost_for(self, kind: str) -> np.ndarray:
        """float64[N] compute time on a `kind` device, microseconds.

        Uses the kind's own cost where recorded, else the plain-number cost; a kind with neither gets the
        analytic costs derived from the graph's op descriptions (`derived_cost`). Every simulation, baseline and
        feature reads its costs here (through `cost_matrix`).

        Raises:
          InputError: naming the first node that has no cost, or (one line) the kinds the graph has when none
            can be derived.
        """
        own = self.costs.get(kind)
        default = self.costs.get(DEFAULT_KIND)
        if own is None and default is None:
            return self.derived_cost(kind)
        if own is None:
            cost = default
        elif default is None:
            cost = own
        else:
            cost = np.where(np.isnan(own), default, own)
        missing = np.flatnonzero(np.isnan(cost))
        if missing.size:
            raise InputError(f"node {self.names[missing[0]]!r}: no cost for device kind {kind!r}")
        return cost

    def has_costs(self, kind: str) -> bool:
        """Whether cost_for(kind) gives costs: recorded, plain or derived.

        `kind in costs` says whether they are recorded.
        """
        try:
            self.cost_for(kind)
        except InputError:
            return False
        return True

    def derived_cost(self, kind: str) -> np.ndarray:
        """float64[N] analytic us for a kind without recorded costs.

        Read-only. simulator.model.costs.derived_costs: a traced graph's roofline costs on that device, computed
        once per graph object and kind and kept in `cache`; `costs`, `kinds` and the graph's file stay as they were.
        """
        key = ("derived cost", kind)
        if key not in self.cache:
            self.cache[key] = _frozen(derived_costs(self, kind))
        return self.cache[key]

    def cost_matrix(self, device_kinds: Sequence[str]) -> np.ndarray:
        """float64[N, D] compute time on D devices of these kinds, us."""
        per_kind = {k: self.cost_for(k) for k in dict.fromkeys(device_kinds)}
        return np.stack([per_kind[k] for k in device_kinds], axis=1)

    def with_costs(self, kind: str, cost: np.ndarray) -> "Graph":
        """A copy with `cost` recorded under device kind `kind`.

        cost: float64[N] microseconds, NaN where a node has none.
        """
        costs = dict(self.costs)
        costs[kind] = np.asarray(cost, dtype=np.float64)
        return dataclasses.replace(self, costs=costs)

    # ---- adjacency (distinct neighbours; duplicate edges count once) ----------------------------------------
    @functools.cached_property
    def _distinct_pairs(self) -> np.ndarray:
        """int64[P, 2] distinct (src, dst) pairs sorted by (src, dst)."""
        pairs = np.stack([self.edge_src, self.edge_dst], axis=1).astype(np.int64)
        return np.unique(pairs, axis=0) if len(pairs) else pairs.reshape(0, 2)

    @functools.cached_property
    def children(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (offsets int64[N+1], targets int32[P]) of distinct children.

        The children of node i are targets[offsets[i]:offsets[i + 1]], ascending.
        """
        return _csr(self._distinct_pairs[:, 0], self._distinct_pairs[:, 1], self.n_nodes)

    @functools.cached_property
    def parents(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (offsets int64[N+1], sources int32[P]) of distinct parents.

        The parents of node i are sources[offsets[i]:offsets[i + 1]], ascending.
        """
        order = np.lexsort((self._distinct_pairs[:, 0], self._distinct_pairs[:, 1]))
        p = self._distinct_pairs[order]
        return _csr(p[:, 1], p[:, 0], self.n_nodes)

    @functools.cached_property
    def topo_order(self) -> np.ndarray:
        """int32[N] a topological order (Kahn, FIFO, ties in node order)."""
        order = _kahn(self.n_nodes, *self.children, self.parents[0])
        assert len(order) == self.n_nodes  # validated acyclic
        return np.asarray(order, dtype=np.int32)


def _csr(rows: np.ndarray, cols: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR from (row, col) pairs already sorted by row."""
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.add.at(offsets, rows + 1, 1)
    return np.cumsum(offsets), np.asarray(cols, dtype=np.int32)


def _kahn(n: int, ch_off: np.ndarray, ch: np.ndarray, par_off: np.ndarray) -> list[int]:
    indeg = np.diff(par_off).tolist()
    ch_off, ch = ch_off.tolist(), ch.tolist()
    queue = collections.deque(i for i in range(n) if indeg[i] == 0)
    order = []
    while queue:
        i = queue.popleft()
        order.append(i)
        for j in ch[ch_off[i]:ch_off[i + 1]]:
            indeg[j] -= 1
            if indeg[j] == 0:
                queue.append(j)
    return order


ARRAY_FIELDS = ("out_offsets", "out_bytes", "persistent_bytes", "edge_src", "edge_dst", "edge_out")


def _frozen(a: Any) -> np.ndarray:
    """`a` as a read-only array (itself if already read-only).

    Else a read-only copy, so that the caller's own handle cannot change it either.
    """
    a = np.asarray(a)
    if a.flags.writeable:
        a = a.copy()
        a.flags.writeable = False
    return a


def _freeze_arrays(g: Graph) -> None:
    """Make the graph's arrays (and its costs dict) read-only copies.

    Derived values are cached on the graph (`Graph.cache`, the cached properties, the simulator's prepared arrays
    per cluster), keyed on the graph object: they stay valid because the arrays cannot change in place. A changed
    graph is a new Graph (`dataclasses.replace`, `with_costs`), with empty caches.
    """
    for field in ARRAY_FIELDS:
        object.__setattr__(g, field, _frozen(getattr(g, field)))
    if not isinstance(g.costs, Mapping):
        raise InputError("costs must map device kinds to arrays")
    object.__setattr__(g, "costs", {kind: _frozen(cost) for kind, cost in g.costs.items()})


def _bad_number(x: np.ndarray) -> np.ndarray:
    return ~np.isfinite(x) | (x < 0) | (x > MAX_BYTES)


def _validate(g: Graph) -> None:
    """Check that the graph is well formed.

    Raises:
      InputError: one line naming the node or field, otherwise.
    """
    n = len(g.names)
    if n > MAX_INDEX:
        raise InputError(f"nodes: {n} nodes, more than {MAX_INDEX}")
    if len(g.ops) != n or len(g.colocation) != n or len(g.attrs) != n:
        raise InputError("nodes: names, ops, colocation and attrs differ in length")
    if len(set(g.names)) != n:
        seen: dict[str, int] = {}
        for i, name in enumerate(g.names):
            if name in seen:
                raise InputError(f"node {name!r}: duplicate name (nodes {seen[name]} and {i})")
            seen[name] = i
    for kind, cost in g.costs.items():
        if cost.shape != (n,):
            raise InputError(f"costs for kind {kind!r} have shape {cost.shape}, expected ({n},)")
        bad = np.flatnonzero((cost < 0) | (cost > MAX_COST_US))  # NaN: no cost for this kind
        if bad.size:
            raise InputError(f"node {g.names[bad[0]]!r}: field 'cost': {float(cost[bad[0]])!r} is out of range "
                             f"[0, {MAX_COST_US:g}] microseconds")
    if g.out_offsets.shape != (n + 1,) or g.out_offsets[0] != 0 or np.any(np.diff(g.out_offsets) < 0):
        raise InputError("out_offsets is not a valid CSR offset array")
    node_of_output = np.repeat(np.arange(n), np.diff(g.out_offsets))
    for field, values, owner in (("out_bytes", g.out_bytes, node_of_output),
                                 ("persistent_bytes", g.persistent_bytes, np.arange(n))):
        bad = np.flatnonzero(_bad_number(values))
        if bad.size:
            raise InputError(f"node {g.names[owner[bad[0]]]!r}: field {field!r}: {float(values[bad[0]])!r} is "
                             f"out of range [0, {MAX_BYTES:g}] bytes")
    _check_edges(g)
    _check_acyclic(g)


def _check_edges(g: Graph) -> None:
    """Check every edge's node indices, self loops and output index.

    Raises:
      InputError: naming the first edge with a node index out of range, a self loop or a bad output index.
    """
    n = len(g.names)
    if not g.edge_src.shape == g.edge_dst.shape == g.edge_out.shape or g.edge_src.ndim != 1:
        raise InputError("edges: edge_src, edge_dst and edge_out differ in shape")
    src, dst, out = (a.astype(np.int64) for a in (g.edge_src, g.edge_dst, g.edge_out))
    in_range = (src >= 0) & (src < n) & (dst >= 0) & (dst < n)
    n_out = np.diff(g.out_offsets)[np.where(in_range, src, 0)] if n else np.zeros(len(src), np.int64)
    bad = ~in_range | (src == dst) | (out < 0) | (out >= n_out)
    if not bad.any():
        return
    i = int(np.argmax(bad))
    s, d, o = int(src[i]), int(dst[i]), int(out[i])
    if not in_range[i]:
        raise InputError(f"edge {i}: node index out of range")
    if s == d:
        raise InputError(f"edge {i}: node {g.names[s]!r} feeds itself (a cycle)")
    raise InputError(f"edge {i} ({g.names[s]!r} -> {g.names[d]!r}): output index {o} but "
                     f"{g.names[s]!r} has {int(n_out[i])} output(s)")


def _check_acyclic(g: Graph) -> None:
    order = _kahn(g.n_nodes, *g.children, g.parents[0])
    if len(order) == g.n_nodes:
        return
    done = np.zeros(g.n_nodes, dtype=bool)
    done[order] = True
    # Every unfinished node has an unfinished parent: walk parents until a node repeats; it lies on a cycle.
    par_off, par = g.parents
    node, visited = int(np.flatnonzero(~done)[0]), set()
    while node not in visited:
        visited.add(node)
        node = next(int(p) for p in par[par_off[node]:par_off[node + 1]] if not done[p])
    raise InputError(f"node {g.names[node]!r}: the graph has a cycle through this node")


def make_graph(name: str, nodes: Sequence[Mapping[str, Any]], edges: Sequence[tuple[int, int, int]],
               meta: Mapping[str, Any] | None = None, source: str | None = None) -> Graph:
    """A Graph from node dicts and (src, dst, out) edge triples.

    Node keys: name, op, cost, out_bytes, persistent_bytes, colocation, attrs. `cost` is a number (any device
    kind) or a mapping kind -> microseconds. Meant for programs (tracers, generators, tests); files go through
    simulator.model.io.

    Raises:
      InputError: naming the node or edge with a bad value, or the graph's first defect.
    """
    n = len(nodes)
    edges = [_edge(i, e, n) for i, e in enumerate(edges)]  # range-checked before the int32 cast
    kinds: dict[str, np.ndarray] = {}
    for i, node in enumerate(nodes):
        cost = node.get("cost", 0.0)
        items = cost.items() if isinstance(cost, Mapping) else ((DEFAULT_KIND, cost),)
        for kind, value in items:
            kinds.setdefault(kind, np.full(n, np.nan))[i] = _as_float(value, node["name"], "cost")
    out_sizes = [list(node.get("out_bytes", [])) for node in nodes]
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(o) for o in out_sizes])
    edges_arr = np.asarray(edges, dtype=np.int64).reshape(-1, 3)
    return Graph(
        name=name,
        names=tuple(str(node["name"]) for node in nodes),
        ops=tuple(str(node.get("op", "")) for node in nodes),
        costs=kinds,
        out_offsets=offsets,
        out_bytes=np.asarray([_as_float(b, nodes[i]["name"], "out_bytes")
                              for i, o in enumerate(out_sizes) for b in o], dtype=np.float64),
        persistent_bytes=np.asarray([_as_float(node.get("persistent_bytes", 0), node["name"], "persistent_bytes")
                                     for node in nodes], dtype=np.float64),
        edge_src=edges_arr[:, 0].astype(np.int32),
        edge_dst=edges_arr[:, 1].astype(np.int32),
        edge_out=edges_arr[:, 2].astype(np.int32),
        colocation=tuple(node.get("colocation") for node in nodes),
        attrs=tuple(dict(node.get("attrs") or {}) for node in nodes),
        meta=dict(meta or {}),
        source=source,
    )


def _as_float(value: Any, node: str, field: str) -> float:
    """A node's cost (us) or size (bytes), range-checked.

    At most MAX_COST_US microseconds or MAX_BYTES bytes.
    """
    hi, unit = (MAX_COST_US, "microseconds") if field == "cost" else (MAX_BYTES, "bytes")
    return number(value, f"node {node!r}: field {field!r}", 0.0, hi, unit)


def _edge(i: int, edge: Any, n: int) -> tuple[int, int, int]:
    """(src, dst, out) of edge i, each index range-checked.

    Nodes in [0, n), the output in [0, MAX_INDEX].
    """
    if not isinstance(edge, (tuple, list, np.ndarray)) or len(edge) != 3:
        raise InputError(f"edge {i}: expected a (src, dst, out) triple, got {edge!r}")
    src, dst, out = edge
    return (integer(src, f"edge {i}: field 'src'", 0, max(n - 1, 0)),
            integer(dst, f"edge {i}: field 'dst'", 0, max(n - 1, 0)),
            integer(out, f"edge {i}: field 'out'", 0, MAX_INDEX))
