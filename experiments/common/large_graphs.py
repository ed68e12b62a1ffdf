"""The large graphs of the scale experiments: the benchmarks' ungrouped op graphs and generated graphs of
10,000 and 50,000 nodes, by name.

Used by benchmarks/gdp_scale.py (the grid), reproduce/gdp_family.py and reproduce/gdp_large.py (its training
graphs and the ablation that decided what ships), ablations/gdp_decoder.py and ablations/group_search.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

OP_GRAPHS = ("nmt_l8", "rnnlm_l8", "nasnet")
GENERATED = {"layered_10k": ("layered_dag", 10_000), "blocks_10k": ("branching_blocks", 10_000),
             "layered_50k": ("layered_dag", 50_000), "blocks_50k": ("branching_blocks", 50_000)}
GRAPHS = (*OP_GRAPHS, *GENERATED)


def load(name: str, cache: Path):
    """The graph called `name` (a key of GRAPHS). Op graphs are traced once (a minute or two) and cached as
    `cache/<name>.json.gz`, with the expert placement of every device count in meta["expert_placement"]."""
    from simulator.model import generate

    if name in GENERATED:
        generator, n = GENERATED[name]
        return getattr(generate, generator)(n, seed=0)
    if name not in OP_GRAPHS:
        raise ValueError(f"unknown graph {name!r} (known: {', '.join(GRAPHS)})")
    from simulator.model.io import load_graph, save_graph

    path = cache / f"{name}.json.gz"
    if not path.exists():
        save_graph(trace_op_graph(name), path)
    return load_graph(path)


def op_graph(name: str):
    """(traced op graph with analytic costs, its program, its BenchmarkSpec) of benchmark `name`; not cached."""
    from simulator.workloads.families import benchmark_specs, trace_spec

    spec = next(s for s in benchmark_specs() if s.name == name)
    program, traced = trace_spec(spec)
    return traced.graph, program, spec


def trace_op_graph(name: str):
    """The ungrouped op graph of benchmark `name` (analytic costs), its expert placements in meta."""
    from simulator.workloads.families import DEVICE_COUNTS, SINGLE_DEVICE_EXPERT, expert_op_placement

    ops, program, spec = op_graph(name)
    if spec.kind in SINGLE_DEVICE_EXPERT:
        experts = {str(d): [0] * ops.n_nodes for d in DEVICE_COUNTS}
    else:
        experts = {str(d): expert_op_placement(ops, program.meta["layer_groups"], d).tolist() for d in DEVICE_COUNTS}
    return dataclasses.replace(ops, name=name, meta={**ops.meta, "expert_placement": experts})
