"""Microbatched (GPipe) training steps: one step cut into M microbatches.

A split model's plain step is what one batch pays: while one stage runs, the devices of the others idle. GPipe
cuts the batch into M microbatches that flow through the stages one after the other, accumulates their
gradients, and updates the parameters once. Here that is a graph transformation: `microbatched(graph, m)` marks
a graph (meta["microbatches"] = m), and the engine (simulator.engine.microbatched) simulates its `expand`ed graph,
in which

* every per-sample node (the forward and backward computation) has M copies, copy k computing microbatch k, each
  with cost / M (every device kind) and its batch-proportional outputs ceil(bytes / M) (whole bytes);
* every per-step node (an optimizer update, a parameter read) stays one node, with its full cost and outputs;
* persistent bytes (parameters, optimizer state) count once: on copy 0 (the copies share the device);
* an edge between per-sample nodes joins copy k to copy k; an edge from a per-step node feeds every copy;
* an edge from a per-sample node into a per-step node (a gradient into the update) is accumulation: copy k + 1
  of the producer takes copy k's output (an edge copy k -> copy k + 1 for that output), and only the last copy
  feeds the update. Such an output keeps its full size (a weight gradient does not shrink with the microbatch),
  and the chain keeps one accumulator alive per producer, not M.

Which nodes are per-sample comes from what the graph records, its node names (a grouped graph's node is named
after its heaviest op, `NNNNN:` numbered; simulator.grouping.group):

* traced graphs (simulator.tracing.trace names ops by their JAX scope): `update/...` (the optimizer) and
  `param[...]` (parameter reads) are per-step; everything else (`jvp(...)` forward, `transpose(jvp(...))`
  backward, `input[...]` the batch, anything unnamed) is per-sample. A group holding update ops under a
  heavier backward op counts as per-sample: its update is then paid in M parts of cost / M, the same total.
* graphs without such names (generated DAGs, user graphs): a node holding persistent bytes (a weight) is
  per-step, every other node per-sample.

Copies of a node share its placement: a placement stays one device per original node. Device queues are FIFO by
ready time (simulator.engine.reference), so the schedule is GPipe's greedy form: a stage runs each microbatch's
forward and backward copies in the order they become ready. 1F1B (PipeDream-Flush: one forward, one backward,
at most D microbatches' activations alive) needs a device to prefer a ready backward over an earlier-ready
forward, a priority the FIFO engine does not have; it is not modelled.

Node order of the expanded graph: the N original nodes first (copy 0 of each per-sample node, the one node of each
per-step node), then copies 1..M-1 of the per-sample nodes, each block in original order.
"""

from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple, Sequence

import numpy as np

from simulator.model.graph import Graph
from simulator.model.limits import MAX_MICROBATCHES, integer

PER_STEP_PREFIXES = ("update/", "update(", "param[")  # traced names of per-step nodes
TRACED_PREFIXES = PER_STEP_PREFIXES + ("jvp(", "transpose(jvp(", "input[")  # names that say a graph is traced
_GROUP_NUMBER = re.compile(r"^\d+:")


class Expansion(NamedTuple):
    """A microbatched graph's expanded graph; N original, N' expanded nodes."""

    graph: Graph  # the expanded graph (no meta["microbatches"]: it is simulated as it is)
    copy_of: np.ndarray  # int32[N'] original node of each expanded node
    copy: np.ndarray  # int32[N'] microbatch of each expanded node (0 for per-step nodes)


def microbatches(graph: Graph) -> int:
    """The graph's M: meta["microbatches"], 1 when absent.

    Raises:
      InputError: naming `meta.microbatches`, for a value that is not an integer in [1, MAX_MICROBATCHES].
    """
    return integer(graph.meta.get("microbatches", 1), "meta.microbatches", 1, MAX_MICROBATCHES)


def microbatched(graph: Graph, m: int) -> Graph:
    """`graph` with its step cut into `m` microbatches (meta["microbatches"] = m).

    The graph itself when it already has `m` (so m == 1 on a plain graph returns it unchanged); else a copy,
    with fresh caches. m == 1 removes the key.

    Raises:
      InputError: for m not an integer in [1, MAX_MICROBATCHES].
    """
    m = integer(m, "microbatches", 1, MAX_MICROBATCHES)
    if m == microbatches(graph):
        return graph
    meta = {k: v for k, v in graph.meta.items() if k != "microbatches"}
    if m > 1:
        meta["microbatches"] = m
    return dataclasses.replace(graph, meta=meta)


def per_sample(graph: Graph) -> np.ndarray:
    """bool[N] which nodes compute per sample (replicated per microbatch).

    By the module docstring's rule: traced names where the graph has them, else no persistent bytes.
    """
    labels = [_GROUP_NUMBER.sub("", name) for name in graph.names]
    if any(label.startswith(TRACED_PREFIXES) for label in labels):
        return np.array([not label.startswith(PER_STEP_PREFIXES) for label in labels], dtype=bool)
    return np.asarray(graph.persistent_bytes == 0, dtype=bool)


def expansion(graph: Graph, kinds: Sequence[str] | None = None) -> Expansion | None:
    """The expanded graph of a microbatched graph, cached in graph.cache; None when M == 1.

    kinds: the device kinds it is simulated on (Cluster.kinds): the expanded costs are then those of
    graph.cost_for (recorded, plain or derived); None scales the recorded costs.
    """
    m = microbatches(graph)
    if m == 1:
        return None
    key = ("microbatch.expand", m, None if kinds is None else tuple(kinds))
    if key not in graph.cache:
        graph.cache[key] = _expand(graph, m, kinds)
    return graph.cache[key]


def expand(graph: Graph, m: int) -> tuple[Graph, np.ndarray]:
    """(the expanded graph of `graph` at `m` microbatches, copy_of: int32[N'] original node per node).

    m == 1 gives the graph itself and arange(N). The module docstring says what is replicated.
    """
    m = integer(m, "microbatches", 1, MAX_MICROBATCHES)
    if m == 1:
        return graph, np.arange(graph.n_nodes, dtype=np.int32)
    ex = _expand(graph, m, None)
    return ex.graph, ex.copy_of


def _expand(graph: Graph, m: int, kinds: Sequence[str] | None) -> Expansion:
    """The expanded graph at m > 1 microbatches, by the module docstring's rules and node order.

    N' = N + (m - 1) * S nodes for S per-sample nodes; costs for `kinds` (None: the recorded kinds), microseconds.
    """
    n = graph.n_nodes
    sample = per_sample(graph)
    sample_idx = np.flatnonzero(sample)
    s = len(sample_idx)
    ids = np.tile(np.arange(n, dtype=np.int64), (m, 1))  # ids[k, i]: expanded node of copy k of node i
    for k in range(1, m):
        ids[k, sample_idx] = n + (k - 1) * s + np.arange(s)
    copy_of = np.concatenate([np.arange(n), np.tile(sample_idx, m - 1)]).astype(np.int32)
    copy = np.concatenate([np.zeros(n), np.repeat(np.arange(1, m), s)]).astype(np.int32)
    edges, accumulated = _edges(graph, sample, ids)
    out_off, out_bytes = _outputs(graph, sample, accumulated, copy_of, m)
    recorded = {k: graph.costs[k] for k in graph.costs} if kinds is None else \
        {k: graph.cost_for(k) for k in dict.fromkeys(kinds)}
    costs = {kind: np.where(sample[copy_of], cost[copy_of] / m, cost[copy_of]) for kind, cost in recorded.items()}
    persistent = np.where(copy == 0, graph.persistent_bytes[copy_of], 0.0)
    names = tuple(graph.names[i] if k == 0 else f"{graph.names[i]} [microbatch {k}]"
                  for i, k in zip(copy_of.tolist(), copy.tolist()))
    expanded = Graph(
        name=graph.name, names=names, ops=tuple(graph.ops[i] for i in copy_of.tolist()), costs=costs,
        out_offsets=out_off, out_bytes=out_bytes, persistent_bytes=persistent,
        edge_src=edges[:, 0].astype(np.int32), edge_dst=edges[:, 1].astype(np.int32),
        edge_out=edges[:, 2].astype(np.int32),
        colocation=tuple(graph.colocation[i] for i in copy_of.tolist()),
        attrs=tuple(graph.attrs[i] for i in copy_of.tolist()),
        meta={"microbatch_of": {"graph": graph.name, "microbatches": m}}, source=graph.source)
    return Expansion(expanded, copy_of, copy)


def _edges(graph: Graph, sample: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64[E', 3] distinct expanded (src, dst, out) edges, bool[O] outputs accumulated into a per-step node)."""
    m = ids.shape[0]
    src, dst, out = (a.astype(np.int64) for a in (graph.edge_src, graph.edge_dst, graph.edge_out))
    into_sample = sample[dst]
    parts = [np.stack([ids[k, src[into_sample]], ids[k, dst[into_sample]], out[into_sample]], axis=1)
             for k in range(m)]  # copy k -> copy k; a per-step producer's ids[k] is itself: it feeds every copy
    into_step = ~into_sample
    parts.append(np.stack([ids[m - 1, src[into_step]], dst[into_step], out[into_step]], axis=1))
    acc = into_step & sample[src]  # a gradient into the update: copy k's output accumulates onto copy k + 1
    pairs = np.unique(np.stack([src[acc], out[acc]], axis=1), axis=0) if acc.any() else np.zeros((0, 2), np.int64)
    for k in range(m - 1):
        parts.append(np.stack([ids[k, pairs[:, 0]], ids[k + 1, pairs[:, 0]], pairs[:, 1]], axis=1))
    accumulated = np.zeros(int(graph.out_offsets[-1]), dtype=bool)
    accumulated[graph.out_offsets[pairs[:, 0]] + pairs[:, 1]] = True
    edges = np.concatenate(parts) if parts else np.zeros((0, 3), np.int64)
    return (np.unique(edges, axis=0) if len(edges) else edges.reshape(0, 3)), accumulated


def _outputs(graph: Graph, sample: np.ndarray, accumulated: np.ndarray, copy_of: np.ndarray,
             m: int) -> tuple[np.ndarray, np.ndarray]:
    """(int64[N' + 1] out_offsets, float64[O'] out_bytes) of the expanded nodes.

    A per-sample node's output is ceil(bytes / m) unless accumulated (a gradient: full size); per-step outputs full.
    """
    counts = graph.n_outputs[copy_of]
    out_off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    orig = np.repeat(graph.out_offsets[copy_of] - out_off[:-1], counts) + np.arange(out_off[-1])  # original output
    owner = np.repeat(np.arange(graph.n_nodes), graph.n_outputs)[orig]
    shrink = sample[owner] & ~accumulated[orig]
    size = graph.out_bytes[orig]
    return out_off, np.where(shrink, np.ceil(size / m), size)
