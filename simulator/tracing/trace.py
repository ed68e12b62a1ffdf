"""Tracing a JAX function to an op graph whose nodes can run later.

Via `jax.make_jaxpr`, keeping what is needed to execute each node later. Nodes, in this order (which is topological):
  * one per array leaf of the arguments (`simulator.tracing.roles` says which): op "param" for parameters, optimizer
    slots and other training state (their size goes to `persistent_bytes` and to their one output), op "input"
    for data. Non-array leaves (Python numbers, functions in an equinox module) are static, as with
    `equinox.filter_jit`: baked into the trace, no node;
  * one "const" node per distinct array closed over by the jaxpr or an inlined body (held for the whole step, so
    also persistent). Literals (scalars written into the jaxpr) are folded into their consumer: no node, no edge;
  * one node per primitive equation, op = primitive name. Calls are inlined, recursively: `jit`/`pjit`,
    `closed_call`/`core_call`, `custom_jvp_call`, `custom_vjp_call`/`custom_vjp_call_jaxpr` and `remat2`
    (`jax.checkpoint`). Control flow (`scan`, `while`, `cond`) and every other primitive with a body
    (`shard_map`, `pmap`, ...) stay ONE node each: our model zoo unrolls loops in Python, so its graphs are
    unrolled already. Equations whose outputs are never used and that have no effects are dropped.

Node names are `"{index:05d}:{name_stack}/{primitive}"` (inputs: `"{index:05d}:param[0]['params']..."`), the
name stack being the Flax/JAX scope (`transpose(jvp(Model))/Dense_0`) so a node maps back to a layer. Node attrs:
`name_stack`, `in_shapes`/`in_dtypes` (every operand, literals included), `out_shapes`/`out_dtypes`, `flops`, and
for control flow `bytes_accessed` and `kernels` (see simulator.model.costs). The graph has no costs yet (add them with
simulator.model.costs.annotate_costs or simulator.measure.profile.annotate_measured). Graph meta: `source.function`
("module:qualname"), `n_equations` (after inlining, before dead-code removal), `n_dead_equations`,
`persistent_argnums` (the arguments holding state), `state` (where parameters and optimizer state were found and
how many leaves have each role), `jax_version`. Tracing the same function twice gives byte-identical graph files.
A step that updates its arguments in place (flax nnx) has those new values as extra outputs (`Traced.updates`).

Colocation (what TensorFlow would pin to a variable's device), kept simple:
  1. a parameter's group is its pytree path (`keystr`, e.g. `[0].params['Dense_0']['kernel']`); an optimizer
     slot joins its parameter's group (Adam's `[0].opt_state[0].mu['Dense_0']['kernel']` sits with
     `[0].params['Dense_0']['kernel']`, as TF colocates optimizer slots with their variable); other state has its
     own group (simulator.tracing.roles);
  2. the equation producing a persistent leaf's new value (simulator.tracing.roles.new_values: the part of the result
     with the same key names and shapes, or the in-place update) joins the group;
  3. forward: a layout op (reshape, transpose, convert, broadcast, ...) whose inputs all come from one group
     joins it (the transposes/casts of a parameter);
  4. backward: an elementwise/layout/reduction op whose consumers all lie in one group (and that is not a step
     output) joins it: the optimizer's update chain of a variable, up to the gradient's matmul.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.extend.core as jcore
import numpy as np
from jax.tree_util import keystr, tree_flatten_with_path

from simulator.model import costs
from simulator.model.graph import Graph, Source, make_graph
from simulator.tracing import roles as R

INLINED = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
           "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
           "remat2": "jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr"}  # primitive -> param holding the body
FORWARD_COLOCATED = frozenset({"reshape", "transpose", "convert_element_type", "broadcast_in_dim", "squeeze",
                               "expand_dims", "copy", "copy_p", "reduce_precision", "slice", "rev"})
INPUT_OPS = ("input", "param", "const")
DropVar = getattr(jcore, "DropVar", None) or jax.core.DropVar  # jax < 0.8 has it in jax.core only


class Static(NamedTuple):
    """A non-array leaf of the step's result: no node.

    A Python number, or a function of an equinox module.
    """

    val: Any


Arg = Source | jcore.Literal  # an equation operand: a node output or a literal folded into the equation


@dataclasses.dataclass(frozen=True, eq=False)
class Traced:
    """A traced program: the op graph plus what is needed to run each node.

    Attributes:
      graph: the op graph (no costs yet; see simulator.model.costs / simulator.measure.profile).
      closed_jaxpr: the jaxpr of the whole function.
      eqn_paths: [N] per node, equation indices from the top jaxpr down through inlined bodies (None for inputs
        and consts); `equation_at(closed_jaxpr, path)` finds the equation.
      equations: [N] the equation of each node (None for inputs and consts).
      args: [N] per node, one Arg per equation operand, in operand order (edges are de-duplicated, this is not).
      input_leaf: int32[N] flat argument index of input/param nodes, -1 elsewhere.
      const_values: [N] the array of const nodes, None elsewhere.
      outputs: the flat leaves of the function's result: Args, or Static for non-array leaves.
      in_tree, out_tree: pytree structures of the arguments (as a tuple) and of the result.
      updates: (flat argument index, Arg) of every argument leaf the function replaced in place (flax nnx
        updates its variables so); their new values are outputs of the traced program too.
      roles: the simulator.tracing.roles.Roles of the argument leaves (parameters, slots, state, inputs).
    """

    graph: Graph
    closed_jaxpr: jcore.ClosedJaxpr
    eqn_paths: tuple[tuple[int, ...] | None, ...]
    equations: tuple[jcore.JaxprEqn | None, ...]
    args: tuple[tuple[Arg, ...], ...]
    input_leaf: np.ndarray
    const_values: tuple[Any, ...]
    outputs: tuple[Arg | Static, ...]
    in_tree: Any
    out_tree: Any
    updates: tuple[tuple[int, Arg], ...] = ()
    roles: Any = None

    @property
    def program_outputs(self) -> tuple[Arg, ...]:
        """Every value the program produces: array leaves, then updates.

        The result's array leaves, then the in-place updates.
        """
        return tuple(a for a in self.outputs if not isinstance(a, Static)) + tuple(a for _, a in self.updates)


def inline_body(eqn: jcore.JaxprEqn) -> tuple[jcore.Jaxpr, Sequence[Any]] | None:
    """(body, consts) of an equation to inline; None for one kept whole."""
    key = INLINED.get(eqn.primitive.name)
    body = eqn.params.get(key) if key else None
    if body is None:
        return None
    jaxpr, consts = getattr(body, "jaxpr", body), getattr(body, "consts", ())
    if len(jaxpr.invars) != len(eqn.invars) or len(jaxpr.outvars) != len(eqn.outvars):
        return None  # not a plain call (never seen; keep it whole rather than guess)
    return jaxpr, consts


def equation_at(closed_jaxpr: jcore.ClosedJaxpr, path: Sequence[int]) -> jcore.JaxprEqn:
    """The equation at `path`, as Traced.eqn_paths records it.

    path: equation indices from the top jaxpr down through inlined bodies.
    """
    jaxpr = closed_jaxpr.jaxpr
    for depth, k in enumerate(path):
        eqn = jaxpr.eqns[k]
        if depth + 1 < len(path):
            jaxpr = inline_body(eqn)[0]
    return eqn


def _dtype_name(aval: Any) -> str:
    dtype = getattr(aval, "dtype", None)
    return _dtype_str(dtype) if dtype is not None else type(aval).__name__


@functools.lru_cache(maxsize=None)
def _dtype_str(dtype: Any) -> str:
    return str(dtype)


class _Builder:
    """Collects nodes while walking the jaxpr.

    Names and indices are fixed after dead-code elimination.
    """

    def __init__(self):
        self.ops, self.labels, self.out_bytes, self.persistent, self.attrs = [], [], [], [], []
        self.eqns, self.paths, self.args, self.leaf, self.consts = [], [], [], [], []
        self.const_ids: dict[int, int] = {}

    def add(self, op, label, out_avals, attrs, eqn=None, path=None, args=(), leaf=-1, const=None, persistent=0):
        self.ops.append(op)
        self.labels.append(label)
        self.out_bytes.append([costs.aval_bytes(a) for a in out_avals])
        self.attrs.append(attrs)
        self.eqns.append(eqn)
        self.paths.append(path)
        self.args.append(tuple(args))
        self.leaf.append(leaf)
        self.consts.append(const)
        self.persistent.append(persistent)
        return len(self.ops) - 1

    def const(self, value: Any) -> Source:
        if id(value) not in self.const_ids:
            aval = jax.typeof(value)
            attrs = {"out_shapes": [list(aval.shape)], "out_dtypes": [_dtype_name(aval)]}
            self.const_ids[id(value)] = self.add("const", "const", [aval], attrs, const=value,
                                                 persistent=costs.aval_bytes(aval))
        return Source(self.const_ids[id(value)], 0)

    def walk(self, jaxpr: jcore.Jaxpr, const_args: Sequence[Arg], in_args: Sequence[Arg], stack, path) -> list:
        env = dict(zip(jaxpr.constvars, const_args))
        env.update(zip(jaxpr.invars, in_args))
        read = lambda a: a if isinstance(a, jcore.Literal) else env[a]  # noqa: E731
        for k, eqn in enumerate(jaxpr.eqns):
            args = [read(a) for a in eqn.invars]
            sub_stack = _join_stack(stack, eqn.source_info.name_stack)
            body = inline_body(eqn)
            if body is not None:
                outs = self.walk(body[0], [self.const(c) for c in body[1]], args, sub_stack, path + (k,))
            else:
                node = self.add_eqn(eqn, args, sub_stack, path + (k,))
                outs = [Source(node, j) for j in range(len(eqn.outvars))]
            for v, s in zip(eqn.outvars, outs):
                if not isinstance(v, DropVar):
                    env[v] = s
        return [read(a) for a in jaxpr.outvars]

    def add_eqn(self, eqn: jcore.JaxprEqn, args: list, stack, path: tuple[int, ...]) -> int:
        name = eqn.primitive.name
        stack = str(stack)
        in_avals, out_avals = [a.aval for a in eqn.invars], [v.aval for v in eqn.outvars]
        work = costs.eqn_work(eqn)
        attrs = {"name_stack": stack,
                 "in_shapes": [list(getattr(a, "shape", ())) for a in in_avals],
                 "in_dtypes": [_dtype_name(a) for a in in_avals],
                 "out_shapes": [list(getattr(a, "shape", ())) for a in out_avals],
                 "out_dtypes": [_dtype_name(a) for a in out_avals],
                 "flops": _num(work.flops)}
        if name in costs.CONTROL_FLOW_OPS:
            attrs.update(bytes_accessed=_num(work.bytes_accessed), kernels=_num(work.kernels))
        label = f"{stack}/{name}" if stack else name
        return self.add(name, label, out_avals, attrs, eqn=eqn, path=path, args=args)


def _join_stack(outer, inner):
    if outer is None:
        return inner
    try:
        return outer + inner
    except TypeError:  # a jax without NameStack.__add__
        return "/".join(s for s in (str(outer), str(inner)) if s)


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def _live_nodes(b: _Builder, outputs: Sequence[Arg]) -> np.ndarray:
    """bool[N] nodes kept: inputs, effects and what the outputs need.

    Inputs, and equations with effects or whose outputs reach the function's outputs.
    """
    used = np.zeros(len(b.ops), dtype=bool)
    for a in outputs:
        if isinstance(a, Source):
            used[a.node] = True
    keep = np.zeros(len(b.ops), dtype=bool)
    for i in range(len(b.ops) - 1, -1, -1):
        eqn = b.eqns[i]
        keep[i] = b.ops[i] in ("input", "param") or used[i] or (eqn is not None and bool(eqn.effects))
        if keep[i]:
            for a in b.args[i]:
                if isinstance(a, Source):
                    used[a.node] = True
    return keep


def _remap(a: Arg, new_index: np.ndarray) -> Arg:
    return Source(int(new_index[a.node]), a.out) if isinstance(a, Source) else a


def _colocation(ops: list[str], args: Sequence[Sequence[Arg]], outputs: Sequence[Arg], leaf_group: list,
                new_value: list, out_shapes: list) -> list[str | None]:
    """Colocation group per node: steps 1-4 of the module docstring.

    leaf_group: [N] the group of each input node (simulator.tracing.roles), None elsewhere; new_value: [N] index
    into `outputs` of an input node's new value, -1 if none; out_shapes: [N] the output shapes of each node.
    """
    n = len(ops)
    group: list[str | None] = list(leaf_group)  # 1
    for i in range(n):  # 2: the equation producing a persistent leaf's new value
        k = new_value[i]
        a = outputs[k] if k >= 0 else None
        if group[i] is not None and isinstance(a, Source) and ops[a.node] not in INPUT_OPS \
                and group[a.node] is None and out_shapes[a.node][a.out] == out_shapes[i][0]:
            group[a.node] = group[i]
    for i in range(n):  # 3: layout ops of one group's values (node order is topological)
        if group[i] is None and ops[i] in FORWARD_COLOCATED:
            groups = {group[a.node] for a in args[i] if isinstance(a, Source)}
            if len(groups) == 1 and None not in groups:
                group[i] = groups.pop()
    consumers: list[list[int]] = [[] for _ in range(n)]
    for j, node_args in enumerate(args):
        for a in node_args:
            if isinstance(a, Source):
                consumers[a.node].append(j)
    is_output = {a.node for a in outputs if isinstance(a, Source)}
    for i in range(n - 1, -1, -1):  # 4: light ops feeding only one group (the optimizer update chain)
        if group[i] is None and ops[i] in costs.LIGHT_OPS and consumers[i] and i not in is_output:
            groups = {group[j] for j in consumers[i]}
            if len(groups) == 1 and None not in groups:
                group[i] = groups.pop()
    return group


class _Flat(NamedTuple):
    """Facts about the flat step, filled in while it is traced.

    The flat step is the step as a function of its array leaves, what `jax.make_jaxpr` traces.
    """

    result: list  # [1] (paths, treedef) of the step's result
    updated: list  # flat input indices of leaves the step replaced in place (flax nnx), in order


def _flat_step(fn: Callable, leaves: list, in_tree: Any, dynamic: list[int]) -> tuple[Callable, _Flat]:
    """The step as a function of its array leaves, and the _Flat it fills in.

    f(*array leaves) -> [array leaves of the result] + [leaves of the arguments updated in place]; static
    (non-array) leaves are closed over, as equinox.filter_jit does.
    """
    info = _Flat([], [])

    def flat(*dyn):
        full = list(leaves)
        for i, x in zip(dynamic, dyn):
            full[i] = x
        call_args = jax.tree_util.tree_unflatten(in_tree, full)
        result = fn(*call_args)
        path_leaves, out_tree = tree_flatten_with_path(result)
        after = jax.tree_util.tree_leaves(call_args)
        changed = [i for i, x in zip(dynamic, dyn) if len(after) == len(full) and after[i] is not x]
        info.result[:] = [(path_leaves, out_tree)]
        info.updated[:] = changed
        return [x for _, x in path_leaves if R.is_array(x)] + [after[i] for i in changed]

    return flat, info


def trace(fn: Callable, *example_args: Any, name: str | None = None, params: str | None = None,
          opt_state: str | None = None, persistent_argnums: Sequence[int] | None = None) -> Traced:
    """Trace `fn(*example_args)` into an op graph (module docstring).

    example_args: pytrees of arrays or jax.ShapeDtypeStruct leaves; other leaves are static. Parameters,
    optimizer slots and state are found by `simulator.tracing.roles` (from the pytree structure, or the key paths
    `params` / `opt_state`); `persistent_argnums` (legacy) instead makes these arguments persistent, the first the
    parameters.
    """
    path_leaves, in_tree = tree_flatten_with_path(example_args)
    paths, leaves = [p for p, _ in path_leaves], [x for _, x in path_leaves]
    dynamic = [i for i, x in enumerate(leaves) if R.is_array(x)]
    flat, info = _flat_step(fn, leaves, in_tree, dynamic)
    closed = jax.make_jaxpr(flat)(*[leaves[i] for i in dynamic])
    (result_paths, out_tree), = info.result
    array_out = [k for k, (_, x) in enumerate(result_paths) if R.is_array(x)]
    avals = [v.aval for v in closed.jaxpr.outvars]
    out_names = [tuple(R.key_name(k) for k in result_paths[k][0]) for k in array_out]
    roles = R.assign(example_args, out_names, [tuple(a.shape) for a in avals[:len(array_out)]],
                     {i: len(array_out) + j for j, i in enumerate(info.updated)}, params, opt_state,
                     persistent_argnums)
    b = _Builder()
    in_args = []
    for i, var in zip(dynamic, closed.jaxpr.invars):
        persistent = roles.kind[i] != "input"
        op = "param" if persistent else "input"
        attrs = {"out_shapes": [list(var.aval.shape)], "out_dtypes": [_dtype_name(var.aval)]}
        node = b.add(op, op + keystr(paths[i]), [var.aval], attrs, leaf=i,
                     persistent=costs.aval_bytes(var.aval) if persistent else 0)
        in_args.append(Source(node, 0))
    flat_outs = b.walk(closed.jaxpr, [b.const(c) for c in closed.consts], in_args, None, ())
    n_equations = sum(e is not None for e in b.eqns)
    keep = _live_nodes(b, flat_outs)
    new_index = np.cumsum(keep) - 1
    kept = np.flatnonzero(keep).tolist()
    names = [f"{j:05d}:{b.labels[i]}" for j, i in enumerate(kept)]
    args = tuple(tuple(_remap(a, new_index) for a in b.args[i]) for i in kept)
    flat_outs = [_remap(a, new_index) for a in flat_outs]
    edges = list(dict.fromkeys((a.node, j, a.out) for j, node_args in enumerate(args)
                               for a in node_args if isinstance(a, Source)))
    ops = [b.ops[i] for i in kept]
    leaf_of = [b.leaf[i] for i in kept]
    colocation = _colocation(ops, args, flat_outs, [roles.group[k] if k >= 0 else None for k in leaf_of],
                             [roles.new_value[k] if k >= 0 else -1 for k in leaf_of],
                             [b.attrs[i]["out_shapes"] for i in kept])
    nodes = [{"name": names[j], "op": ops[j], "cost": {}, "out_bytes": b.out_bytes[i],
              "persistent_bytes": b.persistent[i], "colocation": colocation[j], "attrs": b.attrs[i]}
             for j, i in enumerate(kept)]
    qualname, module = getattr(fn, "__qualname__", None), getattr(fn, "__module__", None)
    meta = {"source": {"function": f"{module}:{qualname}" if qualname and module else None},
            "n_equations": n_equations, "n_dead_equations": n_equations - sum(b.eqns[i] is not None for i in kept),
            "persistent_argnums": list(roles.persistent_args), "jax_version": jax.__version__,
            "state": state_summary(roles)}
    graph = make_graph(name or getattr(fn, "__name__", "traced"), nodes, edges, meta)
    dyn_out = iter(flat_outs)
    outputs = tuple(next(dyn_out) if R.is_array(x) else Static(x) for _, x in result_paths)
    updates = tuple(zip(info.updated, flat_outs[len(array_out):]))
    return Traced(graph, closed, tuple(b.paths[i] for i in kept), tuple(b.eqns[i] for i in kept), args,
                  np.asarray(leaf_of, dtype=np.int32), tuple(b.consts[i] for i in kept), outputs, in_tree, out_tree,
                  updates, roles)


def state_summary(roles: Any) -> dict:
    """meta["state"]: where the state was found, and leaves per role.

    Where the parameters and optimizer state were found, and how many leaves have each role.
    """
    return {"how": roles.how, "params": roles.params_path, "opt_state": roles.opt_path,
            **{f"n_{k}": roles.count(k) for k in ("param", "slot", "state", "input")}}

