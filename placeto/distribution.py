"""The (graph, cluster) tasks policies train and are judged on.

A task is one graph on one cluster. Two sources:

- traced families (`simulator.workloads.families.ALL_FAMILIES`: cifar10, ptb, nmt, transformer, mlp, matmul,
  moe, cnn), each graph on every cluster of `TRACED_CLUSTERS`: 2, 4 and 8 K80s (identical devices) and one
  GPU+CPU machine (3 H100s beside the host CPU, `h100-nvlink-cpu`: devices of two speeds);
- generated families (`simulator.workloads.generated.GEN_FAMILIES`: chains, fork-join, layered, skip
  connections), each graph drawn with its own cluster (2-8 devices, homogeneous, heterogeneous or GPU+CPU), its
  cost scale (microseconds to seconds) and its communication-to-computation ratio (0.1-20).

Memory-constrained tasks (`memory_constrained`): each traced task again, on devices too small for the graph's
single-device peak (a capacity of `constrained_capacity`), so that a policy learns to place where one device is
not enough; the training tasks include them (`training_tasks(memory=True)`).

`GROUPS` are the held-out units of the generalization protocol (experiments/reproduce/generalization.py): a
policy judged on a family was trained without every family of that family's group, so the families it is judged
on are families it never saw (and neither were their close relatives: ptb beside nmt, cnn beside cifar10).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from placeto.coarsen import MAX_POLICY_NODES
from simulator.engine.fast import simulate
from simulator.model.cluster import Cluster, cluster_preset, with_memory
from simulator.model.graph import Graph
from simulator.workloads import generated
from simulator.workloads.families import load_family

TRACED_CLUSTERS: tuple[tuple[str, int], ...] = (("placeto-k80", 2), ("placeto-k80", 4), ("placeto-k80", 8),
                                                ("h100-nvlink-cpu", 4))
GROUPS: dict[str, tuple[str, ...]] = {
    "recurrent": ("ptb", "nmt"),
    "convolutional": ("cifar10", "cnn"),
    "dense": ("transformer", "mlp", "matmul", "moe"),
    "generated": ("gen-chain", "gen-forkjoin", "gen-layered", "gen-skip"),
}
GEN_COUNTS = {"train": 24, "test": 8}  # generated graphs per family and split (as the traced families' 24 / 8)
GEN_MAX_NODES = 2000  # largest generated graph drawn here (policies place larger graphs through groups anyway)


class Task(NamedTuple):
    family: str
    graph: Graph
    cluster: Cluster


def families() -> tuple[str, ...]:
    """Every family of the distribution, group by group."""
    return tuple(f for group in GROUPS.values() for f in group)


def group_of(family: str) -> str:
    """The held-out group `family` (or its memory-constrained "family@mem") belongs to."""
    family = family.removesuffix("@mem")
    for name, members in GROUPS.items():
        if family in members:
            return name
    raise KeyError(f"unknown family {family!r}")


def family_tasks(family: str, split: str, clusters: Sequence[tuple[str, int]] = TRACED_CLUSTERS,
                 max_graphs: int | None = None, seed: int = 0) -> list[Task]:
    """The tasks of `family`'s `split` ("train" or "test").

    A traced family's graphs (the first `max_graphs`) on every cluster of `clusters`; a generated family's graphs
    (GEN_COUNTS[split] of them) on their own clusters.
    """
    if family in generated.GEN_FAMILIES:
        specs = generated.gen_specs(family, GEN_COUNTS[split], seed=seed, split=split, max_nodes=GEN_MAX_NODES)
        pairs = [generated.build(s) for s in specs]
        return [Task(family, g, c) for g, c in pairs]
    graphs = load_family(family, split)[:max_graphs]
    return [Task(family, g, cluster_preset(name, d)) for g in graphs for name, d in clusters]


def constrained_capacity(graph: Graph, cluster: Cluster) -> float:
    """Bytes per device: below `graph`'s single-device peak on `cluster`, above an even share of it.

    peak * (1/D + (1 - 1/D) / 2): 0.75x the peak on 2 devices, 0.625x on 4, 0.5625x on 8 (the single device is then
    out of memory, a split over the D devices has room to spare).
    """
    peak = float(simulate(graph, np.zeros(graph.n_nodes, np.int32), cluster).peak_memory[0])
    d = cluster.n_devices
    return peak * (1.0 / d + (1.0 - 1.0 / d) / 2.0)


def memory_constrained(tasks: Sequence[Task]) -> list[Task]:
    """The multi-device tasks of `tasks` on devices of `constrained_capacity` (family names suffixed "@mem")."""
    return [Task(f"{t.family}@mem", t.graph, with_memory(t.cluster, constrained_capacity(t.graph, t.cluster)))
            for t in tasks if t.cluster.n_devices > 1]


def training_tasks(held_out: str | None, max_graphs: int | None = None, seed: int = 0,
                   memory: bool = False) -> list[Task]:
    """Train-split tasks of every family outside group `held_out`.

    `held_out` None: every family. `memory`: with the traced tasks' memory-constrained variants
    (`memory_constrained`).

    They come in a seeded order that mixes families, sizes and clusters from the first update on. The graphs are those
    the policies place as they are (at most `placeto.coarsen.MAX_POLICY_NODES` nodes: larger ones are placed through
    their groups).
    """
    tasks = [t for f in families() if held_out is None or group_of(f) != held_out
             for t in family_tasks(f, "train", max_graphs=max_graphs, seed=seed)
             if t.graph.n_nodes <= MAX_POLICY_NODES]
    if memory:
        tasks += memory_constrained([t for t in tasks if t.family not in generated.GEN_FAMILIES])
    order = np.random.default_rng([seed, len(tasks)]).permutation(len(tasks))
    return [tasks[i] for i in order]
