"""Graph-file meta keys that other modules read, and their checks.

simulator.model.io calls the checks on every load:

    program           {"kind": str, "kwargs": object}: a zoo program (simulator.workloads.zoo validates the
                      values and the size)
    source            {"function": str | null, "args_spec": str | null}: data only, never imported
                      (simulator.tracing.trace)
    grouping          {"op_to_group": [int], ...}: not empty, naming every node (group) of the graph and no other
    expert_placement  {"<devices>": [int]}
    microbatches      int in [1, MAX_MICROBATCHES]: the step cut into that many microbatches
                      (simulator.model.microbatch)
    profile           {kind: {field: value}}: how each measured kind was measured (simulator.measure.graph_profile);
                      the known fields typed (PROFILE_FIELDS), each kind one the graph has costs for

Other keys are free-form. `check_meta` needs only the meta; `check_meta_fits` the graph it belongs to.
`is_op_graph` reads `n_equations` (simulator.tracing.trace) and `grouping` to tell an ungrouped op graph, and
`op_graph_note` also `fusion` ({"kinds": [str], "kernels": int}: the kinds whose op costs are priced per fused
kernel, simulator.tracing.importer.priced_per_kernel).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from simulator.model.errors import InputError
from simulator.model.limits import MAX_INDEX, MAX_MICROBATCHES, field, integer, number, short_repr


def check_meta(meta: Mapping[str, Any]) -> None:
    """Check the shapes of the meta keys of the module doc.

    What needs the nodes is check_meta_fits'.

    Raises:
      InputError: naming the key and field, for the first one of the wrong shape.
    """
    program = meta.get("program")
    if program is not None:
        field(program, "kind", "meta.program", str)
        field(program, "kwargs", "meta.program", dict, {})
    source = meta.get("source")
    if source is not None:
        field(source, "function", "meta.source", (str, type(None)), None)
        field(source, "args_spec", "meta.source", (str, type(None)), None)
    grouping = meta.get("grouping")
    if grouping is not None:
        op_to_group = field(grouping, "op_to_group", "meta.grouping", list, None)
        if op_to_group is not None and not op_to_group:
            raise InputError("meta.grouping.op_to_group: empty (a grouped graph maps every op to a group)")
        _int_list(op_to_group or [], "meta.grouping.op_to_group")
    if meta.get("profile") is not None:
        check_profile_meta(meta["profile"])
    if "microbatches" in meta:
        integer(meta["microbatches"], "meta.microbatches", 1, MAX_MICROBATCHES)
    expert = meta.get("expert_placement")
    if expert is not None:
        if not isinstance(expert, Mapping):
            raise InputError("meta.expert_placement: expected an object {\"<devices>\": [device per node]}")
        for k, v in expert.items():
            if not isinstance(v, list):
                raise InputError(f"meta.expert_placement[{k!r}]: expected a list of device indices")
            _int_list(v, f"meta.expert_placement[{k!r}]")


# meta.profile[kind]: the fields a profile records (simulator.measure.graph_profile,
# simulator.measure.profile.with_measured) and their types: "text", "count" (an integer >= 0), or "number" (finite,
# or null). Other fields are free-form.
PROFILE_FIELDS = {
    **dict.fromkeys(("method", "device", "platform", "source", "host", "jax_version"), "text"),
    **dict.fromkeys(("repeats", "warmup", "steps_traced", "cores"), "count"),
    **dict.fromkeys(("load_1min", "busy_us", "unattributed_us", "step_wall_us", "launch_us", "events_per_step",
                     "xla_flops", "xla_bytes_accessed", "dispatch_floor_us", "dispatch_overhead_us"), "number"),
}


def check_profile_meta(profile: Any) -> None:
    """Check that meta.profile is {kind: {field: value}}, typed.

    Known fields with PROFILE_FIELDS' types.

    Raises:
      InputError: naming the kind and field, otherwise.
    """
    if not isinstance(profile, Mapping):
        raise InputError(f"meta.profile: expected an object {{kind: how it was measured}}, got "
                         f"{type(profile).__name__}")
    for kind, how in profile.items():
        where = f"meta.profile[{short_repr(kind)}]"
        if not isinstance(how, Mapping):
            raise InputError(f"{where}: expected an object, got {type(how).__name__}")
        for key, value in how.items():
            wanted = PROFILE_FIELDS.get(key)
            if wanted == "text" and not isinstance(value, str):
                raise InputError(f"{where}: field {key!r}: expected a string, got {short_repr(value)}")
            if wanted == "count":
                integer(value, f"{where}: field {key!r}", 0, MAX_INDEX)
            if wanted == "number" and value is not None:
                number(value, f"{where}: field {key!r}", -math.inf)


def check_meta_fits(graph: Any) -> None:
    """Check that the meta fits the graph's nodes.

    A grouping's op_to_group names every node (group) of the graph and no other, and every kind in meta.profile
    has costs.

    Raises:
      InputError: naming the key that does not fit.
    """
    grouping = graph.meta.get("grouping")
    if grouping is not None and grouping.get("op_to_group") is not None:
        groups = np.unique(np.asarray(grouping["op_to_group"], dtype=np.int64))
        if groups[-1] >= graph.n_nodes or groups.size != graph.n_nodes:
            raise InputError(f"meta.grouping.op_to_group: maps its {len(grouping['op_to_group'])} ops to "
                             f"{groups.size} groups (largest {int(groups[-1])}), but the graph has {graph.n_nodes} "
                             f"nodes: every node is a group of at least one op")
    for kind in graph.meta.get("profile") or {}:
        if kind not in graph.kinds:
            raise InputError(f"meta.profile: kind {kind[:40]!r} has no costs in the graph (it has: "
                             f"{', '.join(graph.kinds) or 'none'})")


def is_op_graph(meta: Mapping[str, Any]) -> bool:
    """Whether the meta is that of an ungrouped op graph of a traced step.

    One node per jaxpr equation, as `placeto import-jax --out` writes it: traced (simulator.tracing.trace records
    `n_equations`) and not grouped (no `grouping`: `--grouped-out` and the shipped families record one).
    """
    return "n_equations" in meta and "grouping" not in meta


def op_graph_note(graph: Any, path: str | None = None, kinds: Sequence[str] = ()) -> str | None:
    """One line for the commands that print an op graph's step times on `kinds`; None when it does not apply.

    An op graph's costs on a kind priced op by op (every kind of a graph imported before meta.fusion, and always
    the seeds' k80 and cpu) charge every jaxpr op its own kernel launch and dispatch gap (delta1), where the compiled
    step launches fused kernels: its one-device time can be several times the program's, and spreading it over
    devices "speeds up" launches that the real step never makes. The kinds of meta.fusion["kinds"] are priced per
    fused kernel (simulator.grouping.fusion) and need no note. None for any other graph, or when every kind is
    priced per fused kernel.
    """
    if not is_op_graph(graph.meta):
        return None
    fusion = graph.meta.get("fusion") or {}
    fused = set(fusion.get("kinds") or ())
    per_op = [k for k in dict.fromkeys(kinds) if k not in fused] if kinds else ["its"]
    if not per_op:
        return None
    where = f"on {', '.join(per_op)} its" if kinds else "its"
    if fused:
        how = (f"its {', '.join(sorted(fused))} costs are per fused kernel ({fusion.get('kernels', '?')} kernels: "
               f"e.g. --preset h200-nvlink)")
    else:
        how = "import it again (`placeto import-jax`) for costs per fused kernel on the XLA-era kinds"
    return (f"note: {path or graph.name} is an op graph ({graph.n_nodes} nodes, one per jaxpr op): {where} times "
            f"include one kernel launch per op, where the compiled step launches fused kernels; {how}, or place "
            f"the grouped graph of the same step (`placeto import-jax ... --grouped-out FILE`)")


def _int_list(values: list, where: str) -> None:
    for i, v in enumerate(values):
        integer(v, f"{where}[{i}]", 0, MAX_INDEX)
