"""Mapping a re-trace's ops onto the groups of a graph file.

The file is grouped and was traced under another JAX version. A grouped graph file records
`meta.grouping.op_to_group` (int[N_file], one group per op of the trace it was built from) and, from this version
on, `meta.grouping.op_keys` (str[N_file]): per op, "{primitive}|{direction}|{scope}|{outputs}", where the scope is
the Flax/JAX name stack with JAX transform wrappers removed (`transpose(jvp(RNNLM))/lstm_0/gates` ->
`RNNLM/lstm_0/gates`), direction is "b" inside a `transpose(...)` (backward pass) and "f" outside, and outputs are
the shapes and dtypes (`64x512:float32`). Input and parameter nodes key on their argument leaf index
(`Traced.input_leaf`), which does not depend on the JAX version.

`map_ops` gives every op of a new trace (int[N_new]) a group of the file (int in [0, G)): keys matched exactly
(k-th occurrence to k-th occurrence), then by primitive+direction+scope, then by direction+scope; each op still
unmatched joins the group of a matched producer or consumer (same scope first), repeated until none is left; then
every op whose group comes before a producer's group in a topological order of the file's groups moves into that
producer's group, which makes the group quotient acyclic. Groups may end up with no ops (they then do nothing). A
file without op keys keeps no per-op identity to align with: it is never mapped (by position, say, which is close to
arbitrary: docs/hardware.md); the caller regroups the re-trace by the file's own rules or refuses it. Pure
functions, deterministic.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from typing import NamedTuple, Sequence

import numpy as np

from simulator.model.graph import Graph

INPUT_OPS = ("input", "param", "const")
MIN_MATCHED = 0.5  # below this fraction of ops matched by key (exact or loose), the mapping is not trusted
_WRAPPER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\(")


class OpMapping(NamedTuple):
    """A re-trace's ops mapped onto a file's groups.

    op_to_group: int32[N_new] group (of the file, in [0, G)) of every re-traced op.
    exact: ops matched by their full key.
    loose: ops matched by primitive+direction+scope or direction+scope.
    joined: ops that took a neighbour's group.
    moved: ops moved to a producer's group to keep the group quotient acyclic.
    empty_groups: groups left without ops.
    """

    op_to_group: np.ndarray
    exact: int
    loose: int
    joined: int
    moved: int
    empty_groups: int


def scope(name_stack: str) -> str:
    """`name_stack` without JAX transform wrappers.

    "transpose(jvp(RNNLM))/lstm_0" -> "RNNLM/lstm_0".
    """
    return _WRAPPER.sub("", name_stack).replace(")", "")


def _outputs(attrs: dict) -> str:
    shapes, dtypes = attrs.get("out_shapes", []), attrs.get("out_dtypes", [])
    return ",".join("x".join(str(d) for d in s) + ":" + str(t) for s, t in zip(shapes, dtypes))


def op_keys(graph: Graph, input_leaf: Sequence[int] | np.ndarray) -> list[str]:
    """str[N] the identity key of every op of a traced op graph.

    See the module doc. input_leaf: int[N] the argument leaf index of input/param nodes, -1 elsewhere
    (Traced.input_leaf).
    """
    keys = []
    for i, op in enumerate(graph.ops):
        attrs = graph.attrs[i]
        if op in ("input", "param"):
            keys.append(f"{op}|{int(input_leaf[i])}||{_outputs(attrs)}")
            continue
        stack = str(attrs.get("name_stack", ""))
        direction = "b" if "transpose(" in stack else "f"
        keys.append(f"{op}|{direction}|{scope(stack)}|{_outputs(attrs)}")
    return keys


def _loose(key: str, level: int) -> str:
    """`key` at matching level 0, 1 or 2.

    Level 0: exact; 1: primitive, direction and scope; 2: direction and scope. Input leaves keep their key.
    """
    prim, direction, where, _ = key.split("|", 3)
    if level == 0 or prim in ("input", "param"):
        return key
    return f"{prim}|{direction}|{where}" if level == 1 else f"{direction}|{where}"


def _match_keys(old_keys: Sequence[str], old_group: np.ndarray, new_keys: Sequence[str],
                group: np.ndarray) -> tuple[int, int]:
    """Fill group[j] (-1: unmatched) from key matches, level by level.

    The k-th unmatched occurrences on each side pair up. Returns (exact, loose) counts.
    """
    counts = [0, 0, 0]
    taken = np.zeros(len(old_keys), dtype=bool)
    for level in (0, 1, 2):
        free: dict[str, deque] = defaultdict(deque)
        for i, k in enumerate(old_keys):
            if not taken[i]:
                free[_loose(k, level)].append(i)
        for j, k in enumerate(new_keys):
            if group[j] < 0:
                queue = free.get(_loose(k, level))
                if queue:
                    i = queue.popleft()
                    taken[i] = True
                    group[j] = old_group[i]
                    counts[level] += 1
    return counts[0], counts[1] + counts[2]


def _join_neighbours(op_graph: Graph, scopes: Sequence[str], group: np.ndarray, rank: np.ndarray) -> int:
    """Give every unmatched op (group -1) a matched neighbour's group.

    A matched producer's or consumer's, repeated until none changes. Preferred: a group ranked between the op's
    producers' and consumers' groups (so no edge goes back in the file's group order), one of its own scope first,
    producers before consumers; else the producer group of highest rank. Ops never reached take the previous op's
    group in node order. Returns how many were filled."""
    (p_off, parents), (c_off, children) = op_graph.parents, op_graph.children
    todo = np.flatnonzero(group < 0).tolist()
    filled = len(todo)
    while todo:
        left = []
        for j in todo:
            ps = [int(n) for n in parents[p_off[j]:p_off[j + 1]] if group[n] >= 0]
            cs = [int(n) for n in children[c_off[j]:c_off[j + 1]] if group[n] >= 0]
            if not ps and not cs:
                left.append(j)
                continue
            lo = max((rank[group[n]] for n in ps), default=-1)
            hi = min((rank[group[n]] for n in cs), default=rank.size)
            fits = [n for n in ps + cs if lo <= rank[group[n]] <= hi]
            same = [n for n in fits if scopes[n] == scopes[j]]
            pick = (same or fits or [max(ps, key=lambda n: rank[group[n]])] if ps else cs)[0]
            group[j] = group[pick]
        if len(left) == len(todo):
            for j in sorted(left):
                group[j] = group[j - 1] if j > 0 and group[j - 1] >= 0 else max(int(group.max()), 0)
            break
        todo = left
    return filled


def group_rank(grouped: Graph) -> np.ndarray:
    """int64[G] each group's position in a topological order of the file."""
    rank = np.empty(grouped.n_nodes, dtype=np.int64)
    rank[grouped.topo_order] = np.arange(grouped.n_nodes)
    return rank


def make_monotone(op_graph: Graph, group: np.ndarray, rank: np.ndarray) -> int:
    """Move ops into producer groups until ranks never fall along an edge.

    In place, in topological order: every op whose group ranks below one of its producers' groups moves into the
    producer group of highest rank, so that groups never decrease in rank along an edge: the group quotient is then
    acyclic. Returns how many ops moved.
    """
    p_off, parents = op_graph.parents
    moved = 0
    for j in op_graph.topo_order.tolist():
        ps = parents[p_off[j]:p_off[j + 1]]
        if ps.size:
            best = ps[np.argmax(rank[group[ps]])]
            if rank[group[best]] > rank[group[j]]:
                group[j] = group[best]
                moved += 1
    return moved


def quotient_acyclic(op_graph: Graph, op_to_group: np.ndarray, n_groups: int) -> bool:
    """Whether the graph of groups has no cycle.

    It has an edge where an op edge crosses groups.
    """
    src, dst = op_to_group[op_graph.edge_src], op_to_group[op_graph.edge_dst]
    cross = src != dst
    pairs = np.unique(np.stack([src[cross], dst[cross]], axis=1), axis=0) if cross.any() else np.zeros((0, 2), int)
    indeg = np.bincount(pairs[:, 1], minlength=n_groups)
    children: list[list[int]] = [[] for _ in range(n_groups)]
    for u, v in pairs.tolist():
        children[u].append(v)
    ready = [g for g in range(n_groups) if indeg[g] == 0]
    seen = 0
    while ready:
        u = ready.pop()
        seen += 1
        for v in children[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return seen == n_groups


def map_ops(op_graph: Graph, input_leaf: np.ndarray, grouped: Graph, old_group: np.ndarray,
            old_keys: Sequence[str]) -> OpMapping:
    """Map the ops of a re-trace onto the groups of a file (module doc).

    Args:
      op_graph: the re-trace, N_new ops.
      input_leaf: int[N_new], as in Traced.
      grouped: the file's grouped graph, G nodes.
      old_group: int[N_file] the op_to_group of the file's trace.
      old_keys: str[N_file] the op keys of the file's trace.
    """
    new_keys = op_keys(op_graph, input_leaf)
    scopes = [k.split("|", 3)[2] for k in new_keys]
    group = np.full(op_graph.n_nodes, -1, dtype=np.int64)
    old_group = np.asarray(old_group, dtype=np.int64)
    exact, loose = _match_keys(old_keys, old_group, new_keys, group)
    rank = group_rank(grouped)
    joined = _join_neighbours(op_graph, scopes, group, rank)
    moved = make_monotone(op_graph, group, rank)
    empty = grouped.n_nodes - np.unique(group).size
    return OpMapping(group.astype(np.int32), exact, loose, joined, moved, int(empty))
