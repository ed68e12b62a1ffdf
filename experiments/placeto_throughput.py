"""Placeto's training throughput (episodes per second) with and without stale embeddings, side by side.

One REINFORCE update (8 episodes on one graph, then the gradient) per graph of the nmt train split at 4 K80s, the
variants interleaved graph by graph in one process so that the machine's load hits them alike; every variant
first runs one untimed update per graph (jit compilation), then --updates timed ones. `embed_every=1` runs the
code path of the policies trained before embed_every existed, bit for bit (tests/test_shipped_unchanged.py), so
its figure is today's throughput.

    PYTHONPATH=. python experiments/placeto_throughput.py                      # -> placeto_throughput.md
    PYTHONPATH=. python experiments/placeto_throughput.py --graphs 4 --updates 1   # quick look
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "experiments" / "results"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--embed-every", default="1,8", help="variants, comma list (1: Placeto's every-step GNN)")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="other PlacetoConfig fields, the same for every variant")
    p.add_argument("--graphs", type=int, default=8, help="graphs of the nmt train split (the first N)")
    p.add_argument("--updates", type=int, default=2, help="timed updates per graph and variant")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--out", type=Path, default=RESULTS / "placeto_throughput.md")
    a = p.parse_args(argv)

    import jax

    from placeto.methods.placeto import env as E
    from placeto.methods.placeto.config import PlacetoConfig, parse_overrides
    from placeto.families import load_family
    from placeto.methods.placeto.gradient import make_grad_fn, make_optimizer
    from placeto.methods.placeto.policy import make_policy
    from placeto.methods.placeto.train import _make_apply, _update, init_state
    from simulator import cluster_preset
    from simulator.io import atomic_write_bytes

    cluster = cluster_preset("placeto-k80", a.devices)
    graphs = load_family("nmt", "train")[:a.graphs]
    base = PlacetoConfig(**parse_overrides(a.set), progress=False)
    variants = [int(m) for m in a.embed_every.split(",")]
    seconds = {m: 0.0 for m in variants}
    episodes = {m: 0 for m in variants}
    parts = {m: np.zeros(2) for m in variants}
    for g in graphs:
        for m in variants:
            cfg = base.replace(embed_every=m)
            policy, opt = make_policy(cfg), make_optimizer(cfg)
            ctx = E.make_context(g, cluster, cfg)
            arrays = jax.device_put(ctx.arrays)
            st = init_state(cfg, policy, opt, arrays)
            grad_fn, apply = make_grad_fn(policy, cfg.counterfactual_loss), _make_apply(float(cfg.grad_clip))
            _update(cfg, policy, grad_fn, apply, st, ctx, arrays, g.name)  # compiles this bucket
            for _ in range(a.updates):
                t0 = time.perf_counter()
                row = _update(cfg, policy, grad_fn, apply, st, ctx, arrays, g.name)
                jax.block_until_ready(st.params)
                seconds[m] += time.perf_counter() - t0
                episodes[m] += cfg.episodes_per_update
                parts[m] += (row["rollout_s"], row["grad_s"])
        print(g.name, {m: round(episodes[m] / seconds[m], 3) for m in variants}, flush=True)
    ref = variants[0]
    lines = ["# Placeto training throughput", "",
             f"Command: `PYTHONPATH=. python experiments/placeto_throughput.py --embed-every {a.embed_every} "
             f"--graphs {a.graphs} --updates {a.updates}" + (f" --set {' '.join(a.set)}" if a.set else "") + "`",
             "", f"nmt train split, first {len(graphs)} graphs ({min(g.n_nodes for g in graphs)}-"
             f"{max(g.n_nodes for g in graphs)} nodes), {a.devices} x K80, {base.episodes_per_update} episodes per "
             f"update, {a.updates} timed updates per graph after one untimed (compiling) update; variants "
             f"interleaved graph by graph in one process. Machine: {platform.machine()}, "
             f"{__import__('os').cpu_count()} cores, jax {jax.__version__}.", "",
             "| embed_every | episodes | seconds | episodes / s | x embed_every=" + str(ref) +
             " | rollout s | gradient s |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for m in variants:
        rate = episodes[m] / seconds[m]
        lines.append(f"| {m} | {episodes[m]} | {seconds[m]:.1f} | {rate:.2f} | "
                     f"{rate / (episodes[ref] / seconds[ref]):.2f} | {parts[m][0]:.1f} | {parts[m][1]:.1f} |")
    text = "\n".join(lines) + "\n"
    atomic_write_bytes(a.out, text.encode())
    print(text)


if __name__ == "__main__":
    main()
