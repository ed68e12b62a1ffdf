"""Placeto's training throughput (episodes per second) of several configurations, side by side.

REINFORCE updates (episodes on one graph, then the gradient) on graphs of the nmt train split at 4 K80s, the
variants interleaved graph by graph in one process so that the machine's load hits them alike; every variant
first runs one untimed update per graph (jit compilation), then timed updates until it has done --episodes
episodes on that graph. A variant is NAME=FIELD=VALUE,FIELD=VALUE over the default PlacetoConfig. With
`embed_every=1` the code path is the one of the policies trained before embed_every existed, bit for bit
(tests/test_shipped_unchanged.py).

    python -m experiments.benchmarks.placeto_throughput                      # -> placeto_throughput.md
    python -m experiments.benchmarks.placeto_throughput --graphs 2 --episodes 8   # quick look
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "experiments" / "results" / "benchmarks"
OLD_DEFAULT = "embed_every=1,episodes_per_update=8,lr=1e-3,lr_end=1e-4"
DEFAULT_VARIANTS = [f"old_default={OLD_DEFAULT}", f"old_default_embed8={OLD_DEFAULT},embed_every=8",
                    "new_default=", "new_default_embed1=embed_every=1"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--variant", action="append", metavar="NAME=FIELD=VALUE,...",
                   help="a configuration (repeatable); default: the old default (embed_every=1, 8 episodes per "
                        "update, decaying lr) against embed_every=8 with it and with the new default")
    p.add_argument("--graphs", type=int, default=8, help="graphs of the nmt train split (the first N)")
    p.add_argument("--episodes", type=int, default=16, help="timed episodes per graph and variant")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--out", type=Path, default=RESULTS / "placeto_throughput.md")
    a = p.parse_args(argv)

    import jax

    from placeto.methods.placeto import env as E
    from placeto.methods.placeto.config import PlacetoConfig, parse_overrides
    from simulator.workloads.families import load_family
    from placeto.methods.placeto.gradient import make_grad_fn, make_optimizer
    from placeto.methods.placeto.policy import make_policy
    from placeto.methods.placeto.train import _make_apply, _update, init_state
    from simulator import cluster_preset
    from simulator.model.io import atomic_write_bytes

    cluster = cluster_preset("placeto-k80", a.devices)
    graphs = load_family("nmt", "train")[:a.graphs]
    texts = a.variant or DEFAULT_VARIANTS
    variants = {}
    for text in texts:
        name, _, rest = text.partition("=")
        variants[name] = PlacetoConfig(**parse_overrides([x for x in rest.split(",") if x]), progress=False)
    seconds = {m: 0.0 for m in variants}
    episodes = {m: 0 for m in variants}
    parts = {m: np.zeros(2) for m in variants}
    for g in graphs:
        for m, cfg in variants.items():
            policy, opt = make_policy(cfg), make_optimizer(cfg)
            ctx = E.make_context(g, cluster, cfg)
            arrays = jax.device_put(ctx.arrays)
            st = init_state(cfg, policy, opt, arrays)
            grad_fn, apply = make_grad_fn(policy, cfg.counterfactual_loss), _make_apply(float(cfg.grad_clip))
            _update(cfg, policy, grad_fn, apply, st, ctx, arrays, g.name)  # compiles this bucket
            done = 0
            while done < a.episodes:
                t0 = time.perf_counter()
                row = _update(cfg, policy, grad_fn, apply, st, ctx, arrays, g.name)
                jax.block_until_ready(st.params)
                seconds[m] += time.perf_counter() - t0
                done += cfg.episodes_per_update
                parts[m] += (row["rollout_s"], row["grad_s"])
            episodes[m] += done
        print(g.name, {m: round(episodes[m] / seconds[m], 3) for m in variants}, flush=True)
    ref = next(iter(variants))
    lines = ["# Placeto training throughput", "",
             "Command: `python -m experiments.benchmarks.placeto_throughput --graphs "
             f"{a.graphs} --episodes {a.episodes}" + "".join(f" --variant '{t}'" for t in (a.variant or [])) + "`",
             "", f"nmt train split, first {len(graphs)} graphs ({min(g.n_nodes for g in graphs)}-"
             f"{max(g.n_nodes for g in graphs)} nodes), {a.devices} x K80; per graph and variant one untimed "
             f"(compiling) update, then {a.episodes} timed episodes; variants interleaved graph by graph in one "
             f"process. Machine: {platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}. The "
             "episodes of a policy that moves few nodes are cheaper (an unchanged placement is not simulated "
             "again): every variant here starts from fresh parameters, as training does.", "",
             f"| variant | config (over the default) | episodes | seconds | episodes / s | x {ref} | rollout s | "
             "gradient s |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for text, (m, cfg) in zip(texts, variants.items()):
        rate = episodes[m] / seconds[m]
        lines.append(f"| {m} | `{text.partition('=')[2] or '(default)'}` | {episodes[m]} | {seconds[m]:.1f} | "
                     f"{rate:.2f} | {rate / (episodes[ref] / seconds[ref]):.2f} | {parts[m][0]:.1f} | "
                     f"{parts[m][1]:.1f} |")
    lines += ["", "Same configuration, message passing every step against every m-th step (all else equal):", ""]
    for m, cfg in variants.items():
        for m2, cfg2 in variants.items():
            if cfg.embed_every == 1 and cfg2.embed_every > 1 and cfg2.replace(embed_every=1) == cfg:
                r1, r2 = episodes[m] / seconds[m], episodes[m2] / seconds[m2]
                lines.append(f"- {m2} / {m}: {r2:.2f} / {r1:.2f} episodes per second = **{r2 / r1:.2f}x**")
    text = "\n".join(lines) + "\n"
    atomic_write_bytes(a.out, text.encode())
    print(text)


if __name__ == "__main__":
    main()
