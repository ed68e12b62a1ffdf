"""A JAX function -> op graph, via `jax.make_jaxpr`, keeping what is needed to execute each node later.

Nodes, in this order (which is topological):
  * one per flattened input leaf: op "param" for leaves of `persistent_argnums` (parameters and optimizer state;
    their size goes to `persistent_bytes` and to their one output), op "input" for the others;
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
for control flow `bytes_accessed` and `kernels` (see simulator.costs). The graph has no costs yet (add them with
simulator.costs.annotate_costs or simulator.profile.annotate_measured). Graph meta: `source.function`
("module:qualname"), `n_equations` (after inlining, before dead-code removal), `n_dead_equations`,
`persistent_argnums`, `jax_version`. Tracing the same function twice gives byte-identical graph files.

Colocation (what TensorFlow would pin to a variable's device), kept simple:
  1. a param leaf's group is its pytree path (`keystr`, e.g. `[0]['params']['Dense_0']['kernel']`); a leaf of a
     later persistent argument with the same shape whose path contains (as a subsequence) the path of a leaf of
     the first persistent argument joins that leaf's group (Adam's `[1]['Dense_0'][0].mu['kernel']` sits with
     `[0]['Dense_0']['kernel']`, as TF colocates optimizer slots with their variable);
  2. the equation producing the output leaf with the same path (the new value) joins the group: the step must
     return a tuple mirroring its persistent arguments first, e.g. `(params, opt_state, metrics)`;
  3. forward: a layout op (reshape, transpose, convert, broadcast, ...) whose inputs all come from one group
     joins it (the transposes/casts of a parameter);
  4. backward: an elementwise/layout/reduction op whose consumers all lie in one group (and that is not a step
     output) joins it: the optimizer's update chain of a variable, up to the gradient's matmul.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.extend.core as jcore
import numpy as np
from jax.tree_util import SequenceKey, keystr, tree_flatten_with_path

from simulator import costs
from simulator.errors import InputError
from simulator.graph import Graph, make_graph

INLINED = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
           "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
           "remat2": "jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr"}  # primitive -> param holding the body
FORWARD_COLOCATED = frozenset({"reshape", "transpose", "convert_element_type", "broadcast_in_dim", "squeeze",
                               "expand_dims", "copy", "copy_p", "reduce_precision", "slice", "rev"})
INPUT_OPS = ("input", "param", "const")


class Source(NamedTuple):
    """Where a value comes from: output `out` of node `node`."""

    node: int
    out: int


Arg = Source | jcore.Literal  # an equation operand: a node output or a literal folded into the equation


@dataclasses.dataclass(frozen=True, eq=False)
class Traced:
    """A traced program: the op graph plus what is needed to run each node.

    Attributes:
      graph: the op graph (no costs yet; see simulator.costs / simulator.profile).
      closed_jaxpr: the jaxpr of the whole function.
      eqn_paths: [N] per node, equation indices from the top jaxpr down through inlined bodies (None for inputs
        and consts); `equation_at(closed_jaxpr, path)` finds the equation.
      equations: [N] the equation of each node (None for inputs and consts).
      args: [N] per node, one Arg per equation operand, in operand order (edges are de-duplicated, this is not).
      input_leaf: int32[N] flat argument index of input/param nodes, -1 elsewhere.
      const_values: [N] the array of const nodes, None elsewhere.
      outputs: the flat outputs of the function, as Args.
      in_tree, out_tree: pytree structures of the arguments (as a tuple) and of the result.
    """

    graph: Graph
    closed_jaxpr: jcore.ClosedJaxpr
    eqn_paths: tuple[tuple[int, ...] | None, ...]
    equations: tuple[jcore.JaxprEqn | None, ...]
    args: tuple[tuple[Arg, ...], ...]
    input_leaf: np.ndarray
    const_values: tuple[Any, ...]
    outputs: tuple[Arg, ...]
    in_tree: Any
    out_tree: Any


def inline_body(eqn: jcore.JaxprEqn) -> tuple[jcore.Jaxpr, Sequence[Any]] | None:
    """(body, consts) of an equation the tracer inlines, None for one it keeps as a node."""
    key = INLINED.get(eqn.primitive.name)
    body = eqn.params.get(key) if key else None
    if body is None:
        return None
    jaxpr, consts = getattr(body, "jaxpr", body), getattr(body, "consts", ())
    if len(jaxpr.invars) != len(eqn.invars) or len(jaxpr.outvars) != len(eqn.outvars):
        return None  # not a plain call (never seen; keep it whole rather than guess)
    return jaxpr, consts


def equation_at(closed_jaxpr: jcore.ClosedJaxpr, path: Sequence[int]) -> jcore.JaxprEqn:
    """The equation at `path` (indices through inlined bodies), as recorded in Traced.eqn_paths."""
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
    """Collects nodes while walking the jaxpr; names and indices are fixed after dead-code elimination."""

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
                if not isinstance(v, jcore.DropVar):
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
    """bool[N]: inputs, and equations with effects or whose outputs reach the function's outputs."""
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


def _is_subsequence(short: tuple, long: tuple) -> bool:
    it = iter(long)
    return all(any(k == x for x in it) for k in short)


def _param_groups(params: list[int], leaf_paths: list, out_shapes: list) -> dict[int, str]:
    """Step 1: a param's group is its path, or that of the first-argument leaf it shadows: same shape, and the
    leaf's path below the argument is a subsequence of its own (so `[1]['dense'][0].mu['kernel']` shadows
    `[0]['dense']['kernel']`; the longest such path wins)."""
    rel = {i: tuple(keystr((k,)) for k in leaf_paths[i][1:]) for i in params}
    first = min((leaf_paths[i][0].idx for i in params), default=None)
    index: dict[tuple, list[int]] = {}
    for i in params:
        if leaf_paths[i][0].idx == first and rel[i]:
            index.setdefault((rel[i][-1], tuple(out_shapes[i][0])), []).append(i)
    groups = {}
    for i in params:
        candidates = index.get((rel[i][-1], tuple(out_shapes[i][0])), []) if rel[i] else []
        matches = [j for j in candidates if _is_subsequence(rel[j], rel[i])]
        best = max(matches, key=lambda j: (len(rel[j]), -j), default=i)
        groups[i] = keystr(leaf_paths[best])
    return groups


def _colocation(ops: list[str], args: Sequence[Sequence[Arg]], outputs: Sequence[Arg], leaf_paths: list,
                out_shapes: list, out_paths: list) -> list[str | None]:
    """Colocation group per node (steps 1-4 of the module doc)."""
    n = len(ops)
    group: list[str | None] = [None] * n
    params = [i for i in range(n) if ops[i] == "param"]
    for i, name in _param_groups(params, leaf_paths, out_shapes).items():  # 1
        group[i] = name
    by_path = {keystr(leaf_paths[i]): i for i in params}
    for path, a in zip(out_paths, outputs):  # 2: the equation producing a param's new value
        i = by_path.get(keystr(path))
        if i is not None and isinstance(a, Source) and ops[a.node] not in INPUT_OPS and group[a.node] is None \
                and out_shapes[a.node][a.out] == out_shapes[i][0]:
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


def trace(fn: Callable, *example_args: Any, name: str | None = None,
          persistent_argnums: Sequence[int] = (0, 1)) -> Traced:
    """Trace `fn(*example_args)` (arrays or jax.ShapeDtypeStruct leaves) into an op graph; see the module doc."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*example_args)
    path_leaves, in_tree = tree_flatten_with_path(example_args)
    paths = [p for p, _ in path_leaves]
    out_paths, out_tree = tree_flatten_with_path(out_shape)
    if not isinstance(out_shape, (tuple, list)):  # a bare result mirrors the first argument
        out_paths = [((SequenceKey(0),) + p, x) for p, x in out_paths]
    b = _Builder()
    in_args = []
    for k, (path, var) in enumerate(zip(paths, closed.jaxpr.invars)):
        persistent = path[0].idx in persistent_argnums
        op = "param" if persistent else "input"
        attrs = {"out_shapes": [list(var.aval.shape)], "out_dtypes": [_dtype_name(var.aval)]}
        node = b.add(op, op + keystr(path), [var.aval], attrs, leaf=k,
                     persistent=costs.aval_bytes(var.aval) if persistent else 0)
        in_args.append(Source(node, 0))
    outputs = b.walk(closed.jaxpr, [b.const(c) for c in closed.consts], in_args, None, ())
    n_equations = sum(e is not None for e in b.eqns)
    keep = _live_nodes(b, outputs)
    new_index = np.cumsum(keep) - 1
    kept = np.flatnonzero(keep).tolist()
    names = [f"{j:05d}:{b.labels[i]}" for j, i in enumerate(kept)]
    args = tuple(tuple(_remap(a, new_index) for a in b.args[i]) for i in kept)
    outputs = tuple(_remap(a, new_index) for a in outputs)
    edges = list(dict.fromkeys((a.node, j, a.out) for j, node_args in enumerate(args)
                               for a in node_args if isinstance(a, Source)))
    ops = [b.ops[i] for i in kept]
    colocation = _colocation(ops, args, outputs, [paths[b.leaf[i]] if b.leaf[i] >= 0 else None for i in kept],
                             [b.attrs[i]["out_shapes"] for i in kept], [p for p, _ in out_paths])
    nodes = [{"name": names[j], "op": ops[j], "cost": {}, "out_bytes": b.out_bytes[i],
              "persistent_bytes": b.persistent[i], "colocation": colocation[j], "attrs": b.attrs[i]}
             for j, i in enumerate(kept)]
    qualname, module = getattr(fn, "__qualname__", None), getattr(fn, "__module__", None)
    meta = {"source": {"function": f"{module}:{qualname}" if qualname and module else None},
            "n_equations": n_equations, "n_dead_equations": n_equations - sum(b.eqns[i] is not None for i in kept),
            "persistent_argnums": sorted(persistent_argnums), "jax_version": jax.__version__}
    graph = make_graph(name or getattr(fn, "__name__", "traced"), nodes, edges, meta)
    return Traced(graph, closed, tuple(b.paths[i] for i in kept), tuple(b.eqns[i] for i in kept), args,
                  np.asarray([b.leaf[i] for i in kept], dtype=np.int32), tuple(b.consts[i] for i in kept),
                  outputs, in_tree, out_tree)


# ---- `placeto import-jax module:function --args-spec ...` ----------------------------------------------------
def resolve(spec: str) -> Any:
    """The object named by "package.module:qualified.name"."""
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise InputError(f"{spec!r}: expected 'module:function'")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise InputError(f"{spec!r}: cannot import {module_name!r}: {e}") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{spec!r}: {module_name!r} has no attribute {qualname!r}")
        obj = getattr(obj, part)
    return obj


# dtypes an args spec may name, and the largest leaf (elements): data, not a way to allocate the machine away
SPEC_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
               "bfloat16", "float32", "float64", "complex64", "complex128")
MAX_LEAF_ELEMENTS = 2**31


def _leaf_specs(x: Any, where: str) -> Any:
    """JSON args spec -> pytree of jax.ShapeDtypeStruct (leaves are objects with a "shape" key)."""
    if isinstance(x, dict) and "shape" in x:
        shape, dtype = x["shape"], x.get("dtype", "float32")
        if not isinstance(shape, list) or not all(type(d) is int and 0 <= d <= MAX_LEAF_ELEMENTS for d in shape):
            raise InputError(f"args spec {where}: 'shape' must be a list of non-negative integers")
        if math.prod(shape) > MAX_LEAF_ELEMENTS:
            raise InputError(f"args spec {where}: shape {shape} has more than {MAX_LEAF_ELEMENTS} elements")
        if dtype not in SPEC_DTYPES:
            raise InputError(f"args spec {where}: unknown dtype {str(dtype)[:40]!r} (known: {', '.join(SPEC_DTYPES)})")
        return jax.ShapeDtypeStruct(tuple(shape), jax.numpy.dtype(dtype))
    if isinstance(x, dict):
        return {k: _leaf_specs(v, f"{where}[{k!r}]") for k, v in x.items()}
    if isinstance(x, list):
        return [_leaf_specs(v, f"{where}[{i}]") for i, v in enumerate(x)]
    raise InputError(f"args spec {where}: expected an object with 'shape', an object or a list, got {x!r}")


def parse_args_spec(args_spec: str, from_data: str | None = None) -> tuple[Any, ...]:
    """Example arguments from an args spec (see `trace_import`).

    from_data: where the spec was read from when it comes from a data file (e.g. "g.json: meta.source.args_spec")
    rather than the command line. Such a spec may only be inline JSON: "@file" and "module:factory" are refused
    with an InputError naming it, so a data file never makes us read another file or import or call code.
    """
    text = args_spec.strip()
    if from_data is not None and not text.startswith(("[", "{")):
        raise InputError(f"{text[:60]!r} is not an inline JSON args spec; a data file cannot name a file or code "
                         f"(pass --args-spec on the command line)", from_data)
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except (OSError, ValueError) as e:
            raise InputError(f"args spec: cannot read {text[1:]!r}: {e}") from None
    if text.startswith(("[", "{")):
        try:
            spec = json.loads(text)
        except ValueError as e:  # JSONDecodeError, or an integer of more than 4300 digits
            raise InputError(f"args spec: not valid JSON: {e}", from_data) from None
        except RecursionError:
            raise InputError("args spec: nested too deeply", from_data) from None
        if not isinstance(spec, list):
            raise InputError("args spec: the top level must be a list (one entry per positional argument)",
                             from_data)
        try:
            return tuple(_leaf_specs(a, f"[{i}]") for i, a in enumerate(spec))
        except InputError as e:
            raise e.with_source(from_data) if from_data else e
        except RecursionError:
            raise InputError("args spec: nested too deeply", from_data) from None
    args = resolve(text)()
    if not isinstance(args, (tuple, list)):
        raise InputError(f"args spec {text!r}: the factory must return a tuple of positional arguments")
    return tuple(args)


def trace_import(spec: str, args_spec: str, name: str | None = None,
                 persistent_argnums: Sequence[int] = (0, 1), from_data: str | None = None) -> Traced:
    """Trace the function named by `spec` ("module:function") on the example arguments of `args_spec`.

    `args_spec` is one of:
      * a JSON list with one pytree per positional argument; a leaf is an object with a "shape" key,
        `{"shape": [64, 784], "dtype": "float32"}` (dtype one of SPEC_DTYPES, default float32), other objects
        are dicts and lists are lists. Leaves become `jax.ShapeDtypeStruct`s, so the function is traced, never run;
      * `@path/to/file.json`: the same JSON read from a file;
      * "module:factory": a zero-argument callable returning the tuple of example arguments (arrays,
        ShapeDtypeStructs or pytrees of them), e.g. `(params, opt_state, batch)`.

    `spec` and `args_spec` must come from the user (the command line), never from a data file: `from_data`
    (see `parse_args_spec`) marks an args spec read from one, which may then only be inline JSON.
    """
    fn = resolve(spec)
    if not callable(fn):
        raise InputError(f"{spec!r} is not callable")
    return trace(fn, *parse_args_spec(args_spec, from_data), name=name or spec.partition(":")[2],
                 persistent_argnums=persistent_argnums)
