"""Naming a training step and its example arguments, for import-jax.

`placeto import-jax module:function --args-spec ...`. The function and a "module:factory" args spec are imported
as `python -m` would: the current directory is importable (first on sys.path, as `python -m` puts it), so
`placeto import-jax mymod:step` works in the folder of `mymod.py` without PYTHONPATH. Only names the user typed are
ever imported; an args spec read from a data file may only be inline JSON (`parse_args_spec(from_data=...)`).

Argument conventions (see simulator.tracing.roles for the details): the step takes its training state and its data as
positional arguments and returns its new state (anywhere in its result, with the same key names and shapes, or
updated in place as flax nnx does). Parameters and optimizer state are found from the pytree structure: flax
`TrainState` (`.params`, `.opt_state`), optax states, flax nnx variables, equinox modules, keras' stateless
variable lists; else argument 0 holds the parameters and argument 1 the optimizer state. `--params PATH` and
`--opt-state PATH` name them (a key path as `jax.tree_util.keystr` prints it: "[0].params", "[1]").
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import jax

from simulator.grouping.fusion import count_kernels, fused_op_costs, fusions
from simulator.grouping.group import group
from simulator.model.costs import FUSED_KINDS, annotate_costs
from simulator.model.errors import InputError, UserCodeError
from simulator.model.graph import Graph
from simulator.tracing.trace import Traced, trace


def importable_cwd() -> None:
    """Put the current directory first on sys.path, as `python -m` does.

    The `placeto` script does not.
    """
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def resolve(spec: str) -> Any:
    """The object named by "package.module:qualified.name".

    Raises:
      InputError: for a malformed name, a module that does not exist or a missing attribute.
      UserCodeError: if importing the module raises.
    """
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise InputError(f"{spec!r}: expected 'module:function'")
    importable_cwd()
    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise InputError(f"{spec!r}: cannot import {module_name!r}: {e}") from None
    except (Exception, SystemExit) as e:  # the module's own code failed: a SyntaxError, an ImportError inside it
        raise UserCodeError(f"{spec!r}: importing {module_name!r}", e) from e
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
    """JSON args spec -> pytree of jax.ShapeDtypeStruct.

    Leaves are objects with a "shape" key (and a "dtype", default float32).
    """
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

    Raises:
      InputError: for a bad spec or file, or a factory that is not callable, takes arguments or returns no tuple.
      UserCodeError: if the factory raises.
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
    factory = resolve(text)
    if not callable(factory):
        raise InputError(f"args spec {text!r} is not callable (a factory returning the example arguments)")
    _check_no_arguments(factory, text)
    args = call_user(factory, f"args spec {text!r}")
    if not isinstance(args, (tuple, list)):
        raise InputError(f"args spec {text!r}: the factory must return a tuple of positional arguments")
    return tuple(args)


def call_user(fn: Any, what: str, *args: Any) -> Any:
    """`fn(*args)`, where `fn` is the user's code.

    An exception it raises becomes a UserCodeError naming `what` (one line; the exception is kept as its cause, for
    --verbose).
    """
    try:
        return fn(*args)
    except UserCodeError:
        raise
    except (Exception, SystemExit) as e:
        raise UserCodeError(what, e) from e


def _check_no_arguments(factory: Any, text: str) -> None:
    """Check that the args factory takes no arguments, if its signature can be read.

    Raises:
      InputError: naming the factory and its signature, otherwise.
    """
    import inspect

    try:
        inspect.signature(factory).bind()
    except TypeError:
        raise InputError(f"args spec {text!r}: the factory must take no arguments, it takes "
                         f"{inspect.signature(factory)}") from None
    except ValueError:  # no signature to read (a C function): calling it will tell
        pass


def name_from_path(path: str | os.PathLike) -> str:
    """Default graph name of a file: "runs/my_step.json.gz" -> "my_step"."""
    name = Path(path).name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name or Path(path).name


def trace_import(spec: str, args_spec: str, name: str | None = None, params: str | None = None,
                 opt_state: str | None = None, persistent_argnums: tuple[int, ...] | None = None,
                 from_data: str | None = None) -> Traced:
    """Trace the function named by `spec` on the example arguments.

    `spec` is "module:function"; `args_spec` is one of:
      * a JSON list with one pytree per positional argument; a leaf is an object with a "shape" key,
        `{"shape": [64, 784], "dtype": "float32"}` (dtype one of SPEC_DTYPES, default float32), other objects
        are dicts and lists are lists. Leaves become `jax.ShapeDtypeStruct`s, so the function is traced, never run;
      * `@path/to/file.json`: the same JSON read from a file;
      * "module:factory": a zero-argument callable returning the tuple of example arguments (arrays,
        ShapeDtypeStructs or pytrees of them), e.g. `(params, opt_state, batch)`.

    `params` / `opt_state`: key paths naming the parameters and optimizer state (default: found from the
    structure, simulator.tracing.roles). `spec` and `args_spec` must come from the user (the command line), never from a
    data file: `from_data` (see `parse_args_spec`) marks an args spec read from one, which may then only be
    inline JSON.

    Raises:
      InputError: for a bad name or spec, or a function that cannot take the spec's arguments.
      UserCodeError: if the user's module, factory or step raises.
    """
    fn = resolve(spec)
    if not callable(fn):
        raise InputError(f"{spec!r} is not callable")
    args = parse_args_spec(args_spec, from_data)
    check_arity(fn, spec, len(args))
    return trace(_as_user_code(fn, spec), *args, name=name or spec.partition(":")[2], params=params,
                 opt_state=opt_state, persistent_argnums=persistent_argnums)


def _as_user_code(fn: Any, spec: str) -> Any:
    """`fn` (the user's step), its errors while traced as UserCodeErrors.

    They name `spec`: a shape mismatch, a Python `if` on a traced value, an exception of its own.
    """
    import functools

    @functools.wraps(fn)
    def step(*args: Any) -> Any:
        return call_user(fn, spec, *args)

    return step


def check_arity(fn: Any, spec: str, n_args: int) -> None:
    """Check that `fn` can take `n_args` positional arguments.

    n_args: the args spec's entries. Nothing is checked when the signature cannot be read (a C function).

    Raises:
      InputError: naming `spec` and the counts, otherwise.
    """
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*range(n_args))
        return
    except TypeError:
        pass
    params = list(signature.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(p.default is p.empty for p in positional)
    keyword = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        takes = f"at least {required}"
    else:
        takes = f"{required}" if required == len(positional) else f"{required} to {len(positional)}"
    if keyword and (n_args >= required if takes.startswith("at") else required <= n_args <= len(positional)):
        raise InputError(f"{spec} needs the keyword argument(s) {', '.join(keyword)}, which an args spec cannot "
                         f"give (its entries are positional): wrap it in a function of positional arguments")
    raise InputError(f"{spec}({', '.join(p.name for p in positional)}) takes {takes} positional "
                     f"argument{'' if takes.split()[-1] == '1' else 's'}, but --args-spec gives {n_args} example "
                     f"argument{'' if n_args == 1 else 's'}")


class Imported(NamedTuple):
    """An imported training step: trace, costed op graph, grouping."""

    traced: Traced
    graph: Graph  # the op graph, with analytic costs (per fused kernel on FUSED_KINDS: meta.fusion) and meta.source
    grouping: Any  # simulator.grouping.group.Grouping of the op graph, or None if not asked
    seconds: float  # wall time of tracing, s (the user's module's import and the example arguments included)


def import_step(function: str, args_spec: str, kinds: Sequence[str], name: str | None = None,
                params: str | None = None, opt_state: str | None = None, grouped: bool = False,
                groups: int | None = None, max_cp_growth: float | None = 0.05) -> Imported:
    """Trace `function`, add analytic costs and, if asked, group it.

    Traced on `args_spec` (see `trace_import`), with analytic costs for `kinds`, those of the XLA-era kinds priced
    per fused kernel (`priced_per_kernel`). With `grouped`, grouped by
    simulator.grouping.group.group: at most `groups` groups where the critical path, under the first kind's costs,
    grows by at most `max_cp_growth`; colocation names may join to reach the target.
    """
    t0 = time.perf_counter()
    traced = trace_import(function, args_spec, name=name, params=params, opt_state=opt_state)
    seconds = time.perf_counter() - t0
    meta = {**traced.graph.meta, "source": {**traced.graph.meta["source"], "function": function,
                                           "args_spec": args_spec}}
    graph = annotate_costs(dataclasses.replace(traced.graph, meta=meta), tuple(kinds))
    grouping = None
    if grouped:
        grouping = group(graph, groups, kind=kinds[0], max_cp_growth=max_cp_growth, join_names=True)
        r = grouping.report
        gmeta = {**meta, "grouping": {"target_groups": groups, "op_to_group": grouping.op_to_group.tolist(),
                                      "kind": kinds[0], "max_cp_growth": max_cp_growth,
                                      "cp_growth": round(r.cp_growth, 6), "stopped": r.stopped}}
        grouping = dataclasses.replace(grouping, graph=dataclasses.replace(grouping.graph, name=graph.name,
                                                                           meta=gmeta))
    return Imported(traced, priced_per_kernel(graph), grouping, seconds)


def priced_per_kernel(graph: Graph) -> Graph:
    """The op graph with its XLA-era kinds' costs priced per fused kernel (simulator.grouping.fusion).

    The kinds of FUSED_KINDS the graph records: each fusion's fused cost on its root, 0 on its other ops, so the
    op graph simulates as the step launches it; meta.fusion records the kinds and the kernel count. The grouping is
    made from the op-by-op costs before (its grouped graph prices its groups from the ops' descriptions,
    simulator.model.costs.fused_group_costs, either way).
    """
    kinds = [k for k in graph.costs if k in FUSED_KINDS]
    if not kinds:
        return graph
    root = fusions(graph)
    for kind in kinds:
        graph = graph.with_costs(kind, fused_op_costs(graph, kind, root))
    meta = {**graph.meta, "fusion": {"kinds": kinds, "kernels": count_kernels(graph, root)}}
    return dataclasses.replace(graph, meta=meta)


def describe_state(traced: Traced) -> str:
    """One line: where the state was found, and leaves per role.

    Where the parameters and optimizer state were found, and how many leaves have each role.
    """
    r = traced.roles

    def n(kind: str, word: str) -> str:
        return f"{r.count(kind)} {word}{'' if r.count(kind) == 1 else 's'}"

    text = (f"state: {r.how}: {n('param', 'parameter')}, {n('slot', 'optimizer slot')} colocated with their "
            f"parameter, {n('state', 'other state leaf')}, {n('input', 'input')}".replace("leafs", "leaves"))
    if r.opt_unmatched:
        more = f" and {len(r.opt_unmatched) - 3} more" if len(r.opt_unmatched) > 3 else ""
        text += f" (optimizer leaves kept as state: {', '.join(r.opt_unmatched[:3])}{more})"
    return text
