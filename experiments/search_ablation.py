"""Ablation of the search methods at equal simulator calls, on TRAINING graphs (the defaults were chosen here, so
the test splits stay unseen): what block moves, the annealing schedule and the policy's prior each add.

Variants: local-search (hill climbing, single-node moves), sa with single-node moves only, sa (node + block
moves, the default), placeto-search with the policy's prior used for 0% / 30% / 60% of the target devices
(0%: the policy only supplies the greedy start). Each variant gets the same number of simulator calls on the
first graphs of each family's training split at 4 devices; the table gives runtime / best variant.

    PYTHONPATH=. python experiments/search_ablation.py --calls 8000 --checkpoint general
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placeto.baselines.local_search import local_search  # noqa: E402
from placeto.families import FAMILIES, load_family  # noqa: E402
from placeto.objective import metered  # noqa: E402
from placeto.search import guided  # noqa: E402
from placeto.search.sa import sa  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402
from simulator.io import atomic_write_bytes  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=8000)
    p.add_argument("--checkpoint", default="general")
    p.add_argument("--graphs", type=int, default=3, help="training graphs per family")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "search_ablation.md"))
    args = p.parse_args(argv)
    cluster = cluster_preset("placeto-k80", 4)
    graphs = [g for fam in FAMILIES for g in load_family(fam, "train")[:args.graphs]]
    calls = args.calls
    variants = {
        "local-search": lambda g, s, prep: local_search(g, cluster, s, budget=calls),
        "sa, single moves": lambda g, s, prep: sa(g, cluster, s, budget=calls, block_prob=0.0),
        "sa (node + block moves)": lambda g, s, prep: sa(g, cluster, s, budget=calls),
        "placeto-search, prior 0%": lambda g, s, prep: guided.guided_search(prep, s, calls, prior_prob=0.0),
        "placeto-search, prior 30% (default)": lambda g, s, prep: guided.guided_search(prep, s, calls),
        "placeto-search, prior 60%": lambda g, s, prep: guided.guided_search(prep, s, calls, prior_prob=0.6),
    }
    runtime = {k: np.zeros((len(graphs), args.seeds)) for k in variants}
    for i, g in enumerate(graphs):
        prep = guided.prepare(args.checkpoint, g, cluster, sampling=False)
        for name, fn in variants.items():
            for s in range(args.seeds):
                with metered(max_calls=calls):
                    runtime[name][i, s] = simulate(g, fn(g, s, prep), cluster).runtime
        print(f"{g.name}: " + ", ".join(f"{k} {v[i].mean() / 1e3:.2f}" for k, v in runtime.items()), flush=True)
    best = np.min(np.stack([v.mean(1) for v in runtime.values()]), axis=0)
    lines = [f"# Search ablation at {calls} simulator calls ({args.checkpoint} policy, 4 devices)", "",
             f"`PYTHONPATH=. python experiments/search_ablation.py --calls {calls} --checkpoint {args.checkpoint}`",
             "", f"{len(graphs)} training graphs ({args.graphs} per family), {args.seeds} seeds each; runtime "
             "(mean over seeds) / best variant's, then the mean over graphs. Equal calls, not equal seconds: "
             "placeto-search also spends wall time on the policy's greedy episode (see anytime_*.md).", "",
             "| variant | mean x best | " + " | ".join(g.name for g in graphs) + " |",
             "|---|---:|" + "---:|" * len(graphs)]
    for name, v in runtime.items():
        r = v.mean(1) / best
        lines.append(f"| {name} | {r.mean():.4f} | " + " | ".join(f"{x:.3f}" for x in r) + " |")
    atomic_write_bytes(args.out, ("\n".join(lines) + "\n").encode())
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
