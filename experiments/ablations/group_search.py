"""placeto-search on graphs too large for the policy: how to split the search between the groups and the ops.

A graph of more than `coarsen.MAX_POLICY_NODES` nodes is grouped for the policy (`placeto.coarsen`). The search
that follows can run on the groups (cheap simulations, whole groups move; stops at the grouping's optimum), on
the op graph (every op movable; fewer, slower simulations), or on the groups for a share of the budget and then
on the ops (`guided_search(group_share=...)`). This script places each graph with each share at equal wall
seconds per run (policy episode, grouping and the search included; compilation excluded) and reports the
simulated runtime of the op placement.

Graphs: nasnet (1,319 nodes, the only benchmark model above the limit) at 2/4/8 devices with 1 s and 10 s; the
traced op graphs of nmt_l8, rnnlm_l8 and nasnet (8,000-26,000 ops) at 8 devices with about local search's
time for 10,000 calls there (`gdp_family_large.md`).

    python -m experiments.ablations.group_search        # ~15 min on this 2-core machine
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from placeto import coarsen  # noqa: E402
from simulator.arguments import POSITIVE, OneLineParser, comma_list, float_in  # noqa: E402
from placeto.objective import metered  # noqa: E402
from placeto.methods.placeto import guided  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402
from simulator.model.io import atomic_write_bytes, load_graph  # noqa: E402

OP_GRAPHS = {"nasnet": 8.0, "rnnlm_l8": 6.0, "nmt_l8": 16.0}  # wall seconds at 8 devices


def place(graph, cluster, coarse: coarsen.Coarse, prep: guided.Prepared, seconds: float, share: float,
          seed: int) -> float:
    """Simulated runtime (ms) of placeto-search's op placement of `graph` with `share` of the search on the
    groups, in `seconds` minus the grouping's time (`coarse.seconds`); `prep`: the policy compiled for the groups."""
    with metered(seconds=max(seconds - coarse.seconds, 1e-3)):
        placement = guided.guided_search(prep, seed, np.inf, op_graph=graph, op_to_group=coarse.grouping.op_to_group,
                                         group_share=share)
    return simulate(graph, placement, cluster).runtime / 1e3


def main(argv=None) -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--shares", type=comma_list(float_in(0.0, 1.0)), default=[0.0, 0.3, 0.6, 1.0], help="comma-separated, each in [0, 1]")
    p.add_argument("--checkpoint", default="general")
    p.add_argument("--seeds", type=POSITIVE, default=2)
    p.add_argument("--skip-op-graphs", action="store_true", help="only the nasnet benchmark model")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "ablations" / "group_search.md"))
    args = p.parse_args(argv)
    cases = [(load_graph(ROOT / "datasets" / "benchmarks" / "nasnet.json.gz"), d, s)
             for d in (2, 4, 8) for s in (1.0, 10.0)]
    if not args.skip_op_graphs:
        from experiments.common.large_graphs import op_graph

        cases += [(op_graph(name)[0], 8, s) for name, s in OP_GRAPHS.items()]
    rows = []
    for graph, devices, seconds in cases:
        cluster = cluster_preset("placeto-k80", devices)
        coarse = coarsen.for_policy(graph)
        prep = guided.prepare(args.checkpoint, coarse.graph, cluster, sampling=False)  # compilation: not charged
        ms = [np.mean([place(graph, cluster, coarse, prep, seconds, share, seed) for seed in range(args.seeds)])
              for share in args.shares]
        rows.append((graph.name, graph.n_nodes, devices, seconds, ms))
        print(f"{graph.name} ({graph.n_nodes} nodes) {devices} dev {seconds:g} s: "
              + ", ".join(f"{share:g} {v:.2f}" for share, v in zip(args.shares, ms)), flush=True)
    head = " | ".join(f"share {s:g}" for s in args.shares)
    lines = [f"# placeto-search on coarsened graphs: search share on the groups ({args.checkpoint} policy)", "",
             "Command: `python -m experiments.ablations.group_search`", "",
             f"Runtime in ms (simulated, placeto-k80 preset) of the op placement, mean over {args.seeds} seeds; "
             "share: fraction of the search time (after the policy's episode) spent on the groups before the "
             "ops (0: ops only; 1: groups only). The best of each row in bold; the last column, the default "
             f"share ({guided.GROUP_SHARE:g}) / the row's best.", "",
             f"| graph | nodes | devices | seconds | {head} | default / best |",
             "|---|---:|---:|---:|" + "---:|" * len(args.shares) + "---:|"]
    ratios = []
    for name, n, devices, seconds, ms in rows:
        best = min(ms)
        cells = [f"**{v:.2f}**" if v == best else f"{v:.2f}" for v in ms]
        default = ms[args.shares.index(guided.GROUP_SHARE)] if guided.GROUP_SHARE in args.shares else np.nan
        ratios.append(default / best)
        lines.append(f"| {name} | {n} | {devices} | {seconds:g} | " + " | ".join(cells) + f" | {default / best:.3f} |")
    means = [np.mean([ms[i] / min(ms) for *_, ms in rows]) for i in range(len(args.shares))]
    lines += ["", "Mean ratio to the row's best: " + ", ".join(f"share {s:g} {v:.3f}" for s, v in
                                                             zip(args.shares, means)) + "."]
    atomic_write_bytes(args.out, ("\n".join(lines) + "\n").encode())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
