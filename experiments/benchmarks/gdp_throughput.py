"""GDP training throughput against the batch simulator's, measured side by side in one run.

    python -m experiments.benchmarks.gdp_throughput [--batches 32,256,1024,2048] [--seconds 10]

For each graph (an nmt test graph of ~270 groups and a 1,000-node layered graph, 4 devices) and each batch of
placements per PPO update (`samples_per_update`): simulator calls per second of gdp's training step (one forward
pass, B simulations through `score_batch`, `ppo_epochs` gradient steps; compilation excluded), next to the
calls per second of `score_batch` alone on B random placements of the same graph. The ratio is what the issue
asks to be >= 0.30. Writes experiments/results/benchmarks/gdp_throughput.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

from simulator.workloads.families import load_family
from placeto.methods.gdp.config import GdpConfig
from placeto.methods.gdp.model import make_net
from placeto.methods.gdp.ppo import init_params, make_optimizer, make_task, ppo_step
from placeto.objective import metered, score_batch
from simulator import cluster_preset
from simulator.model.generate import layered_dag
from simulator.model.io import atomic_write_bytes

RESULTS = Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "gdp_throughput.md"


def rate(step, seconds: float) -> float:
    """Calls per second of `step()` (which returns the calls it made), repeated for about `seconds`."""
    step()  # warm-up: compilation and caches
    calls, t0 = 0, time.perf_counter()
    while True:
        calls += step()
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return calls / elapsed


def measure(graph, cluster, batch: int, seconds: float) -> tuple[float, float]:
    """(gdp training calls/s, score_batch calls/s) at `batch` placements per update, on one graph."""
    config = GdpConfig(samples_per_update=batch)
    task = make_task(graph, cluster, config)
    net, optimizer = make_net(config), make_optimizer(config)
    state = {"params": init_params(config, task), "u": 0}
    state["opt"] = optimizer.init(state["params"])

    def train_step() -> int:
        r = ppo_step(net, config, optimizer, state["params"], state["opt"], task, jax.random.key(state["u"]))
        state["params"], state["opt"], state["u"] = r.params, r.opt_state, state["u"] + 1
        return batch

    rng = np.random.default_rng(0)
    placements = rng.integers(0, cluster.n_devices, (batch, graph.n_nodes)).astype(np.int32)

    def sim_step() -> int:
        score_batch(graph, placements, cluster)
        return batch

    with metered():
        return rate(train_step, seconds), rate(sim_step, seconds)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="32,256,1024,2048", help="samples per update, comma list")
    p.add_argument("--seconds", type=float, default=10.0, help="measuring time per cell")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    cluster = cluster_preset("placeto-k80", args.devices)
    nmt = max(load_family("nmt", "test"), key=lambda g: g.n_nodes)
    graphs = [nmt, layered_dag(1000, seed=0)]
    rows = []
    for g in graphs:
        for b in batches:
            train, sim = measure(g, cluster, b, args.seconds)
            rows.append((g.name, g.n_nodes, b, train, sim))
            print(f"{g.name} ({g.n_nodes} nodes) B={b}: gdp {train:.0f} calls/s, score_batch {sim:.0f} calls/s, "
                  f"ratio {train / sim:.2f}", flush=True)
    cmd = "python -m experiments.benchmarks.gdp_throughput " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = ["# GDP training throughput vs the batch simulator", "",
             f"Command: `{cmd.strip()}` ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
             f"{args.devices} devices; default GdpConfig but samples_per_update = B; {args.seconds:g} s per cell, "
             "compilation excluded; both columns measured side by side in one run).", "",
             "gdp calls/s: placements sampled, simulated and learned from per second of training (one forward pass, "
             "B simulations, ppo_epochs gradient steps per update). score_batch calls/s: B random placements of "
             "the same graph simulated per second. Target: ratio >= 0.30.", "",
             "| graph | nodes | B (samples per update) | gdp training calls/s | score_batch calls/s | ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {n} | {nodes} | {b} | {t:.0f} | {s:.0f} | {t / s:.2f} |" for n, nodes, b, t, s in rows]
    atomic_write_bytes(args.out, ("\n".join(lines) + "\n").encode())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
