"""placeto-search at equal wall seconds with an exact or a faster, approximate greedy episode for its prior.

The policy's greedy episode gives placeto-search its start and prior; refreshing the message-passing embeddings
every K steps instead of every step (`greedy_with_prior(refresh=K)`) makes the episode ~3x faster (K=16,
`fast_greedy.md`) and its placement worse, and leaves the search the time saved. Each variant, local search and
sa get the same wall seconds per graph on the first graphs of each family's TRAINING split at 4 devices (the
test splits stay unseen; `anytime_*.md` measures the chosen default there). Ratios to the best of local search
and sa on each graph; "wins": graphs where the variant is at least as good as both.

    PYTHONPATH=. python experiments/search_refresh.py        # ~15 min on this 2-core machine
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placeto.arguments import POSITIVE, OneLineParser, comma_list, float_in  # noqa: E402
from placeto.baselines.local_search import local_search  # noqa: E402
from placeto.families import FAMILIES, load_family  # noqa: E402
from placeto.objective import metered  # noqa: E402
from placeto.search import guided  # noqa: E402
from placeto.search.sa import sa  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402
from simulator.io import atomic_write_bytes  # noqa: E402


def main(argv=None) -> int:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=comma_list(float_in(0.01, 600.0)), default=[1.0, 10.0])
    p.add_argument("--refresh", type=comma_list(POSITIVE), default=[1, 16], help="K values, comma-separated")
    p.add_argument("--graphs", type=POSITIVE, default=6, help="training graphs per family")
    p.add_argument("--checkpoint", default="general")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "search_refresh.md"))
    args = p.parse_args(argv)
    cluster = cluster_preset("placeto-k80", 4)
    variants = ["local-search", "sa"] + [f"placeto-search K={k}" for k in args.refresh]
    lines = [f"# placeto-search: exact or faster greedy episode for the prior ({args.checkpoint} policy, 4 devices)",
             "", "Command: `PYTHONPATH=. python experiments/search_refresh.py`", "",
             f"First {args.graphs} training graphs per family, seed 0. Each cell: mean over the graphs of runtime / "
             "the best of local-search and sa on that graph (wins: graphs where the variant is at least as good as "
             "both). K: the greedy episode refreshes the message passing every K steps (K=1: exact).", "",
             "| family | seconds | " + " | ".join(variants) + " |", "|---|---:|" + "---:|" * len(variants)]
    for fam in FAMILIES:
        graphs = load_family(fam, "train")[:args.graphs]
        preps = [guided.prepare(args.checkpoint, g, cluster, sampling=False) for g in graphs]  # compiled: not timed
        for seconds in args.seconds:
            ms = np.zeros((len(graphs), len(variants)))
            for i, (g, prep) in enumerate(zip(graphs, preps)):
                for j, name in enumerate(variants):
                    with metered(seconds=seconds):
                        if name == "local-search":
                            placement = local_search(g, cluster, 0, budget=np.inf)
                        elif name == "sa":
                            placement = sa(g, cluster, 0, budget=np.inf)
                        else:
                            placement = guided.guided_search(prep, 0, refresh=int(name.split("=")[1]))
                    ms[i, j] = simulate(g, placement, cluster).runtime / 1e3
            ratio = ms / ms[:, :2].min(1, keepdims=True)
            cells = [f"{ratio[:, j].mean():.3f} ({int((ratio[:, j] <= 1.0).sum())})" for j in range(len(variants))]
            lines.append(f"| {fam} | {seconds:g} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    atomic_write_bytes(args.out, ("\n".join(lines) + "\n").encode())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
