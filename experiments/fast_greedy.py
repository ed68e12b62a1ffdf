"""Ablation: the greedy episode with message-passing embeddings refreshed every K steps instead of every step.

For each family's test split at 4 devices: seconds per greedy episode (after compilation) and the runtime it
reaches, for K = 1 (the exact policy), 4, 16, 64. Writes experiments/results/fast_greedy.md.

    PYTHONPATH=. python experiments/fast_greedy.py --checkpoint general
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from placeto.families import FAMILIES, load_family  # noqa: E402
from placeto.objective import metered  # noqa: E402
from placeto.search import guided  # noqa: E402
from simulator import cluster_preset, simulate  # noqa: E402
from simulator.io import atomic_write_bytes  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="general")
    p.add_argument("--refresh", default="1,4,16,64")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "fast_greedy.md"))
    args = p.parse_args(argv)
    ks = [int(k) for k in args.refresh.split(",")]
    cluster = cluster_preset("placeto-k80", args.devices)
    lines = [f"# Fast greedy: embeddings refreshed every K steps ({args.checkpoint} policy, {args.devices} devices)",
             "", f"`PYTHONPATH=. python experiments/fast_greedy.py --checkpoint {args.checkpoint}`", "",
             "| family | groups (mean) | " + " | ".join(f"K={k} s | K={k} x exact" for k in ks) + " |",
             "|---|---:|" + "---:|---:|" * len(ks)]
    for fam in FAMILIES:
        graphs = load_family(fam, "test")
        secs = {k: [] for k in ks}
        ratio = {k: [] for k in ks}
        for g in graphs:
            prep = guided.prepare(args.checkpoint, g, cluster, sampling=False)
            exact = None
            for k in ks:
                with metered():
                    t0 = time.perf_counter()
                    placement, _, _ = guided.greedy_with_prior(prep, refresh=k)
                    secs[k].append(time.perf_counter() - t0)
                rt = simulate(g, placement, cluster).runtime
                exact = rt if exact is None else exact
                ratio[k].append(rt / exact)
        cells = " | ".join(f"{np.mean(secs[k]):.3f} | {np.mean(ratio[k]):.3f}" for k in ks)
        lines.append(f"| {fam} | {np.mean([g.n_nodes for g in graphs]):.0f} | {cells} |")
        print(lines[-1], flush=True)
    lines += ["", "s: wall seconds of one greedy episode after compilation (mean over the 8 test graphs); x exact: "
                  "runtime of its placement / that of the exact (K=1) greedy episode (mean)."]
    atomic_write_bytes(args.out, ("\n".join(lines) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
