"""Lowering a traced program to units, independent of placement.

What each unit (node, or group of a grouped graph) of a placed program computes, wherever it runs. A unit binds its
member equations in topological order (`unit_programs`): its body is f(*inputs) -> outputs, its inputs the values it
reads that other units make or that are held resident, its outputs the values other units or the step's outputs
read. Units that only hold values (inputs, parameters, closed-over constants) have no body; `leaf_values` gives
those values from the program's example arguments. Equal units (single equations of the same signature and operand
pattern: the unrolled steps of an RNN) share a key, so they compile once per device. `unit_order` gives a
topological dispatch order of the units, following a priority where dependencies allow.

`UnitProgram` is also what an exported program loads as (`simulator.tracing.export`); `simulator.hardware.plans`
turns units and a placement into a `simulator.hardware.dispatch.Plan`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.measure.profile import equation_signature, random_operand
from simulator.model.errors import InputError
from simulator.model.graph import Graph, Source

if TYPE_CHECKING:  # this module must not import jax at import time (see simulator.hardware.devices)
    from simulator.tracing.trace import Traced


def _binder(eqn: Any) -> Callable[..., list]:
    """f(*operands) -> list of outputs: the equation's primitive, bound.

    Bound with its params, as simulator.measure.profile does.
    """
    bind_params = eqn.primitive.get_bind_params(eqn.params)
    subfuns, params = bind_params if isinstance(bind_params, tuple) else ((), bind_params)
    multiple = eqn.primitive.multiple_results

    def apply(*operands):
        with eqn.ctx.manager:
            out = eqn.primitive.bind(*subfuns, *operands, **params)
        return list(out) if multiple else [out]

    return apply


def _unit_body(traced: Traced, members: Sequence[int], inputs: Sequence[Source],
               outputs: Sequence[Source]) -> Callable:
    """f(*inputs) -> outputs: the members' equations in node order.

    Node order is topological.
    """
    import jax.extend.core as jcore

    steps = [(m, _binder(traced.equations[m]), traced.args[m]) for m in members if traced.equations[m] is not None]

    def body(*xs):
        env = dict(zip(inputs, xs))
        for m, bind, args in steps:
            outs = bind(*[a.val if isinstance(a, jcore.Literal) else env[a] for a in args])
            env.update((Source(m, k), x) for k, x in enumerate(outs))
        return tuple(env[s] for s in outputs)

    return body


def leaf_values(traced: Traced, args: Sequence[Any], seed: int = 0) -> list:
    """[N] the value of every input/param/const node of `traced`.

    None elsewhere. From the example arguments `args` (a tuple of pytrees as traced); ShapeDtypeStruct leaves
    become random arrays (floats standard normal, integers zero, as simulator.measure.profile does).

    Raises:
      InputError: if `args` do not have the traced structure.
    """
    import jax

    flat, tree = jax.tree_util.tree_flatten(tuple(args))
    if tree != traced.in_tree:
        raise InputError(f"graph {traced.graph.name!r}: the arguments do not match the traced structure")
    rng = np.random.default_rng(seed)
    flat = [random_operand(x, rng) if isinstance(x, jax.ShapeDtypeStruct) else x for x in flat]
    values = []
    for i in range(traced.graph.n_nodes):
        if traced.input_leaf[i] >= 0:
            values.append(flat[traced.input_leaf[i]])
        else:
            values.append(traced.const_values[i])
    return values


class UnitProgram(NamedTuple):
    """What one unit (node or group) of a placed program does.

    Whatever it comes from: a trace, or an exported file (simulator.tracing.export). Values are named by the op
    graph's `Source(node, out)`.
    """

    values: tuple[int, ...]  # op nodes whose values this unit holds resident (inputs, parameters, constants)
    inputs: tuple[Any, ...]  # Sources the unit reads, computed by other units or held resident
    outputs: tuple[Any, ...]  # Sources it computes that other units or the step's outputs need, in order
    body: Callable | None  # f(*inputs) -> tuple of outputs; None for a unit that only holds values
    key: Any  # units with equal keys share one jitted function per device


def unit_programs(traced: Traced, op_to_group: np.ndarray | None = None,
                  n_units: int | None = None) -> list[UnitProgram]:
    """[U] the units of a traced program: ops, or groups of `op_to_group`.

    op_to_group: int32[N_ops] group of each op. `n_units` (default: the largest group + 1) also counts trailing
    groups left without ops (a re-trace under another JAX mapped onto the file's groups,
    simulator.tracing.retrace_map): such units do nothing.

    Raises:
      InputError: if `op_to_group` has not one entry per op, or names a group past `n_units`.
    """
    n_ops = traced.graph.n_nodes
    unit_of = np.arange(n_ops) if op_to_group is None else np.asarray(op_to_group, dtype=np.int64)
    if unit_of.shape != (n_ops,):
        raise InputError(f"op_to_group has {unit_of.size} entries, the program has {n_ops} ops")
    least = int(unit_of.max()) + 1 if n_ops else 0
    if n_units is not None and n_units < least:
        raise InputError(f"op_to_group names group {least - 1}, but there are {n_units} units")
    n_units = least if n_units is None else n_units
    members = [[] for _ in range(n_units)]
    for i, u in enumerate(unit_of.tolist()):
        members[u].append(i)
    is_eqn = [e is not None for e in traced.equations]
    used_elsewhere = {a for a in traced.program_outputs if isinstance(a, Source)}
    for j, args in enumerate(traced.args):
        used_elsewhere.update(a for a in args if isinstance(a, Source) and unit_of[a.node] != unit_of[j])
    units = []
    for u in range(n_units):
        inputs = tuple(dict.fromkeys(a for i in members[u] if is_eqn[i] for a in traced.args[i]
                                     if isinstance(a, Source) and not (is_eqn[a.node] and unit_of[a.node] == u)))
        outputs = tuple(Source(i, k) for i in members[u] if is_eqn[i]
                        for k in range(len(traced.equations[i].outvars)) if Source(i, k) in used_elsewhere)
        body = _unit_body(traced, members[u], inputs, outputs) if any(is_eqn[i] for i in members[u]) else None
        units.append(UnitProgram(tuple(i for i in members[u] if not is_eqn[i]), inputs, outputs, body,
                                 _unit_key(traced, members[u], inputs, outputs)))
    return units


def unit_order(units: Sequence[UnitProgram], priority: Sequence[int] | None = None) -> list[int]:
    """A topological order of the units, following `priority` where it can.

    Of the units whose inputs are all made, the one first in `priority` (a permutation of the units, e.g. the
    simulated start order; None: by unit index). A `priority` that is already topological comes back unchanged;
    one that is not (a file's group graph against a re-traced program whose ops moved between groups) is repaired,
    not refused.

    Raises:
      InputError: if the units form a cycle.
    """
    import heapq

    made = {Source(i, 0): u for u, unit in enumerate(units) for i in unit.values}
    made.update((s, u) for u, unit in enumerate(units) for s in unit.outputs)
    n_units = len(units)
    edges = {(made[s], v) for v, unit in enumerate(units) for s in unit.inputs if s in made and made[s] != v}
    children: list[list[int]] = [[] for _ in range(n_units)]
    indeg = [0] * n_units
    for u, v in edges:
        children[u].append(v)
        indeg[v] += 1
    rank = list(range(n_units))
    if priority is not None:
        for k, u in enumerate(priority):
            rank[u] = k
    ready = [(rank[u], u) for u in range(n_units) if indeg[u] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for v in children[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (rank[v], v))
    if len(order) != n_units:
        raise InputError("the units (groups) of this program form a cycle")
    return order


def unit_graph(graph: "Graph", units: Sequence[UnitProgram], op_graph: "Graph") -> "Graph":
    """`graph` with the edges and output sizes of the units' own dataflow.

    `graph` has U nodes, one per unit; the result is the graph of what `units` run, with no cost for a unit left
    without ops. A re-trace under another JAX mapped onto a file's groups (simulator.tracing.program.retrace) moves
    ops between groups and empties some, so the file's edges no longer say which unit reads which; a simulation of
    the file's edges can then order a unit before its inputs. A unit's outputs: the values it computes (`outputs`),
    then the values it holds resident that other units read (bytes from `op_graph`, the traced op graph).

    Raises:
      InputError: if `graph` has not one node per unit.
    """
    import dataclasses

    if graph.n_nodes != len(units):
        raise InputError(f"graph {graph.name!r} has {graph.n_nodes} nodes, the program {len(units)} units")
    read = {s for unit in units for s in unit.inputs}
    outs = [list(unit.outputs) + [Source(i, 0) for i in unit.values if Source(i, 0) in read] for unit in units]
    index = {s: (u, k) for u, sources in enumerate(outs) for k, s in enumerate(sources)}
    edges = sorted({(index[s][0], v, index[s][1]) for v, unit in enumerate(units) for s in unit.inputs
                    if s in index and index[s][0] != v})
    nbytes = [float(op_graph.out_bytes[op_graph.out_offsets[s.node] + s.out]) for sources in outs for s in sources]
    offsets = np.zeros(len(units) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(sources) for sources in outs])
    empty = np.asarray([unit.body is None and not unit.values for unit in units], dtype=bool)
    costs = {k: np.where(empty, 0.0, c) for k, c in graph.costs.items()}
    e = np.asarray(edges, dtype=np.int32).reshape(-1, 3)
    return dataclasses.replace(graph, costs=costs, out_offsets=offsets, out_bytes=np.asarray(nbytes, np.float64),
                               edge_src=e[:, 0], edge_dst=e[:, 1], edge_out=e[:, 2])


def _unit_key(traced: Traced, members: Sequence[int], inputs: tuple, outputs: tuple) -> Any:
    """The key of a unit: units doing the same thing share one per device.

    One jitted function per key and device: single equations with the same signature and operand pattern (the
    unrolled steps of an RNN) share a key; groups are keyed by identity.
    """
    if len(members) == 1 and traced.equations[members[0]] is not None:
        m = members[0]
        pattern = tuple(inputs.index(a) if isinstance(a, Source) else -1 for a in traced.args[m])
        return ("eqn", equation_signature(traced.equations[m]), pattern, tuple(s.out for s in outputs))
    return ("unit", tuple(members))
