"""Compile the numba kernels ahead of the first placeto command.

The simulator's (simulator.engine.fast, simulator.engine.peak_memory) and the list schedulers' (placeto.baselines:
m-ETF, m-SCT, m-TOPO, HEFT). A method's own kernels (gdp's list decoders) compile in the method's first run:
methods are reached through placeto.methods.registry only.

numba compiles a kernel the first time it is called and caches the result beside its source (`cache=True`:
`__pycache__/*.nbc`), so the first placeto command after an install spends most of its time compiling them
(docs/commands.md). Two processes started before the cache is written each compile everything they call: `make test`
runs this first, its two parts side by side, so that the test processes start with the cache warm. A user building
an image can run it once too.

    python -m placeto.cli.warmup                # both parts, one after the other
    python -m placeto.cli.warmup simulator      # or one part (the other in a second process: both cores)
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

PARTS = ("simulator", "schedulers")


def simulator_part(graph, cluster) -> None:
    """Compile simulate and simulate_batch, with and without memory.

    simulate runs the single device and an alternating placement (transfers), each with its peak memory.
    """
    from simulator import simulate
    from simulator.engine.fast import simulate_batch

    n = graph.n_nodes
    placements = np.stack([np.zeros(n, np.int32), (np.arange(n) % cluster.n_devices).astype(np.int32)])
    for p in placements:
        simulate(graph, p, cluster).peak_memory  # (computed when first read)
    for with_memory in (False, True):
        simulate_batch(graph, placements, cluster, with_memory=with_memory)


def schedulers_part(cluster) -> None:
    """Run each list scheduler once on a tiny graph, to compile it.

    placeto.harness.compare.warm_up, which compare runs before its timed runs for the same reason.
    """
    from placeto.harness.compare import warm_up

    warm_up(("etf", "m-sct", "m-topo", "heft"), cluster)


def warm(parts=PARTS) -> float:
    """Compile (or load) `parts`; returns the seconds it took.

    On small generated graphs on 2 K80s: the kernels' types do not depend on the sizes, and a graph read from a
    file compiles nothing more.
    """
    from simulator.model.cluster import cluster_preset
    from simulator.model.generate import layered_dag

    t0 = time.perf_counter()
    cluster = cluster_preset("placeto-k80", 2)
    if "simulator" in parts:
        simulator_part(layered_dag(24, seed=0), cluster)
    if "schedulers" in parts:
        schedulers_part(cluster)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m placeto.cli.warmup", description=__doc__.splitlines()[0])
    p.add_argument("parts", nargs="*", metavar="PART",
                   help=f"what to compile: {' and/or '.join(PARTS)} (default: both)")
    args = p.parse_args(argv)
    unknown = [x for x in args.parts if x not in PARTS]
    if unknown:
        p.error(f"unknown part {unknown[0]!r} (known: {', '.join(PARTS)})")
    parts = tuple(dict.fromkeys(args.parts)) or PARTS
    print(f"numba kernels compiled or loaded ({', '.join(parts)}) in {warm(parts):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
