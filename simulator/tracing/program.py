"""The runnable program of a graph file: its export or a re-trace.

What `profile`, `eval --hardware` and the plain jit baseline run. A graph file never names code that runs. Its
program is its exported program (simulator.tracing.export: the `G.export.zip` beside the file, or the one the user
names), else a re-trace (`retrace`) of the zoo program its meta names (meta.program: a kind of
simulator.workloads.zoo with validated arguments) or of the program the user names (--program) for an imported
graph. A grouped graph's re-trace whose ops differ from the file's (another JAX version) is mapped onto the file's
groups by op keys (simulator.tracing.retrace_map), or regrouped by the file's rules. `graph_program` gives the units
(simulator.tracing.lowering) that run the graph's nodes.

This module does not import JAX at import time: the zoo and the importer are imported when a program is built or
traced (simulator.hardware.devices sets XLA flags before JAX starts).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from simulator.grouping.group import group
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.tracing import export
from simulator.tracing.lowering import leaf_values, unit_programs
from simulator.tracing.retrace_map import MIN_MATCHED, map_ops, op_keys, quotient_acyclic
from simulator.workloads.families import GraphSpec, trace_spec


class Program(NamedTuple):
    """What runs a graph: a UnitProgram per node, and the op values."""

    units: list  # [N] simulator.tracing.lowering.UnitProgram per graph node
    values: list  # [N_ops] the value of every input/param/const op, None elsewhere
    traced: Any  # simulator.tracing.trace.Traced, or None for an exported program
    op_to_group: np.ndarray | None
    source: str  # "zoo program", "--program", or "exported <file>"
    outputs: tuple = ()  # the step's outputs (simulator.model.graph.Source, or literals)


def graph_program(graph: Graph, program: str | None = None, args_spec: str | None = None,
                  exported: str | None = None, seed: int = 0) -> Program:
    """The units of `graph`'s program: its export, else a re-trace.

    Its exported program (simulator.tracing.export), else a re-trace (a zoo program of its meta, or the `program`
    the user named; `retrace` maps a re-trace that differs).

    Raises:
      InputError: if there is no program to run, or its units do not match the graph's nodes.
    """
    bundle = export.find_export(graph, exported) if program is None else None
    if bundle is not None:
        return Program(list(bundle.units), export.values(bundle, seed), None, None,
                       f"exported {Path(bundle.path).name}", tuple(bundle.outputs))
    traced, op_to_group, args = program_of(graph, program, args_spec)
    units = unit_programs(traced, op_to_group, graph.n_nodes if op_to_group is not None else None)
    if len(units) != graph.n_nodes:
        raise InputError(f"graph {graph.name!r}: its program has {len(units)} units, the graph {graph.n_nodes} "
                         f"nodes")
    return Program(units, leaf_values(traced, args, seed), traced, op_to_group,
                   "--program" if program else "zoo program",
                   tuple(traced.outputs) + tuple(a for _, a in traced.updates))


def program_of(graph: Graph, program: str | None = None,
               args_spec: str | None = None) -> tuple[Any, np.ndarray | None, tuple]:
    """(traced, op_to_group or None, example arguments) of a graph's program.

    Of a family/benchmark graph, or of the `program` ("module:function") the user named for an imported graph
    (`retrace`).
    """
    from simulator.tracing.importer import parse_args_spec  # imports jax: graph files load without it

    traced, op_to_group = retrace(graph, program, args_spec)  # InputError naming --program when it is needed
    if program is None:
        built = zoo_program(graph)
        args = (built.params, built.opt_state, built.batch)
    elif args_spec is not None:
        args = parse_args_spec(args_spec)
    else:
        args = parse_args_spec(graph.meta["source"]["args_spec"], f"{graph.source or graph.name}: meta.source")
    return traced, op_to_group, args


def zoo_program(graph: Graph) -> Any:
    """The zoo program that the graph's meta.program names.

    A simulator.workloads.zoo.common.Program, built from the file's data after
    simulator.workloads.zoo.registry.check_program_args: only the zoo's own builders run.
    """
    from simulator.workloads.zoo.registry import build_program_from_data  # flax: graph files load without it

    where = f"{graph.source or graph.name}: meta.program"
    program = graph.meta["program"]
    if not isinstance(program, Mapping):
        raise InputError(f"{where}: expected an object")
    return build_program_from_data(program.get("kind"), program.get("kwargs", {}), where)


def retrace(graph: Graph, program: str | None = None, args_spec: str | None = None):
    """(traced, op_to_group or None) of a graph file's program, re-traced.

    op_to_group: int32[N_ops]. For a graph built by simulator.workloads.families or by `placeto import-jax`. A
    graph file never names code that runs: family and benchmark graphs are rebuilt from meta["program"], a kind of
    the package's own zoo with validated arguments (simulator.workloads.zoo.registry.check_program_args); any other
    program is imported only when the user names it (`program`, "module:function", from --program), its example
    arguments from `args_spec` (--args-spec) or else from the inline JSON of meta["source"]["args_spec"].

    Raises:
      InputError: when none applies, naming the --program to pass.
    """
    from simulator.tracing.importer import trace_import  # imports jax: graph files load without it
    from simulator.workloads.zoo.registry import check_program_args  # flax, likewise

    meta, where = graph.meta, graph.source or f"graph {graph.name!r}"
    if program is not None:
        spec = args_spec if args_spec is not None else (meta.get("source") or {}).get("args_spec")
        if spec is None:
            raise InputError(f"--program {program}: the graph's meta has no 'source.args_spec': pass --args-spec",
                             where)
        from_data = None if args_spec is not None else f"{where}: meta.source.args_spec"
        traced = trace_import(program, spec, name=graph.name, from_data=from_data)
    elif "program" in meta:
        check_program_args(meta["program"]["kind"], meta["program"].get("kwargs", {}), f"{where}: meta.program")
        spec = GraphSpec(graph.name, meta["program"]["kind"], meta["program"].get("kwargs", {}), 0)
        traced = trace_spec(spec)[1]
    elif (meta.get("source") or {}).get("function"):
        raise InputError(f"meta.source names the program {meta['source']['function'][:80]!r}, which placeto does "
                         f"not import because a data file says so: pass --program MODULE:FUNCTION to re-trace it",
                         where)
    else:
        raise InputError(f"graph {graph.name!r}: meta has no 'program' to re-trace it from (pass --program)", where)
    op_to_group = meta.get("grouping", {}).get("op_to_group")
    if op_to_group is not None:
        traced, op_to_group = _groups_of_retrace(graph, traced, where)
    elif traced.graph.n_nodes != graph.n_nodes:
        raise InputError(f"graph {graph.name!r}: re-traced program has {traced.graph.n_nodes} ops, "
                         f"the graph has {graph.n_nodes} nodes")
    return traced, op_to_group


def _print_note(note: str) -> None:
    print(note, file=sys.stderr, flush=True)


RETRACE_NOTES: Callable[[str], None] = _print_note  # where `retrace` reports a re-trace that differs from the file


def _groups_of_retrace(graph: Graph, traced, where: str):
    """(traced, op_to_group int32[N_ops]) of a grouped graph's re-trace.

    A re-trace with the file's ops (same count and, when the file has them, the same op keys) keeps
    meta.grouping.op_to_group; one that differs (another JAX version) is mapped onto the file's groups by op keys
    (simulator.tracing.retrace_map), or, where the file has no keys or too few match, regrouped by the file's rules
    when that gives the same group count (never mapped by position; otherwise an InputError asking for a rebuild);
    the one-line note goes to RETRACE_NOTES and to traced.graph.meta["retrace_note"].
    """
    grouping = graph.meta["grouping"]
    old = _int_list(grouping.get("op_to_group"), graph.n_nodes, where, "meta.grouping.op_to_group")
    old_keys = grouping.get("op_keys")
    if old_keys is not None and (not isinstance(old_keys, list) or len(old_keys) != old.size
                                 or not all(isinstance(k, str) and k.count("|") >= 3 for k in old_keys)):
        raise InputError(f"meta.grouping.op_keys must list {old.size} op keys (one per op_to_group entry)", where)
    n_new = traced.graph.n_nodes
    if n_new == old.size and (old_keys is None or op_keys(traced.graph, traced.input_leaf) == old_keys):
        return traced, old
    built = grouping.get("jax_version") or "an unknown JAX"
    import jax

    head = (f"{graph.name}: re-traced under jax {jax.__version__}: {n_new} ops vs {old.size} in the file "
            f"(built under {built})")
    m = None if old_keys is None else map_ops(traced.graph, traced.input_leaf, graph, old, old_keys)
    if m is not None and m.exact + m.loose >= MIN_MATCHED * n_new and quotient_acyclic(traced.graph, m.op_to_group,
                                                                                          graph.n_nodes):
        note = (f"{head}; {m.exact} matched by key, {m.loose} by a looser key, {m.joined} joined a neighbour's "
                f"group, {m.moved} moved to keep the groups acyclic, {m.empty_groups} groups left empty")
        if m.moved + m.empty_groups > 0.25 * n_new:  # a mapping this loose no longer stands for the file's groups
            note += f" (rebuild it under this JAX: placeto datasets build --only {graph.name} --out DIR)"
        op_to_group = m.op_to_group
    else:  # no keys to map by (never by position) or too few matched: the file's rules, else refused
        op_to_group = _regroup(graph, traced, where)
        why = "the file has no op keys" if m is None else "too few ops matched by key"
        note = f"{head}; {why}: regrouped by the file's rules ({graph.n_nodes} groups)"
    RETRACE_NOTES(note)
    graph_meta = {**traced.graph.meta, "retrace_note": note}
    return dataclasses.replace(traced, graph=dataclasses.replace(traced.graph, meta=graph_meta)), op_to_group


def _int_list(value: Any, bound: int, where: str, field: str) -> np.ndarray:
    """`value`, a list of ints in [0, bound), as an int32 array.

    Raises:
      InputError: naming `field`, otherwise.
    """
    ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    array = np.asarray(value if ok else [], dtype=np.int64)
    if not ok or (array.size and (array.min() < 0 or array.max() >= bound)):
        raise InputError(f"{field} must list group indices in [0, {bound})", where)
    return array.astype(np.int32)


def _regroup(graph: Graph, traced, where: str) -> np.ndarray:
    """op_to_group of the re-trace, grouped anew by the file's rules.

    simulator.grouping.group.group to meta.grouping.target_groups.

    Raises:
      InputError: when that does not give the file's group count.
    """
    target = graph.meta["grouping"].get("target_groups")
    regrouped = group(traced.graph, target) if isinstance(target, int) and target >= 1 else None
    if regrouped is None or regrouped.graph.n_nodes != graph.n_nodes:
        name = graph.name
        raise InputError(f"the re-traced program's ops cannot be mapped onto the file's {graph.n_nodes} groups: "
                         f"rebuild the graph under this JAX (placeto datasets build --only {name} --out DIR)", where)
    return regrouped.op_to_group.astype(np.int32)
