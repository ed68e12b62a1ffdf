"""Training throughput with rollouts on Ray workers: Placeto episodes/s and gdp placements/s.

    python -m experiments.benchmarks.ray_throughput [--seconds 15] [--workers 1,2] [--graphs 2]

For each method (Placeto, gdp; default configs, 4 devices, the first `--graphs` graphs of the nmt family's
train split, one per update in turn) and each setting (without Ray: `placeto train` as before; with
`--workers N` on a local Ray), a fresh run trains for about `--seconds` of steady state. The rate is read from
its metrics.csv between the end of the warm-up updates (the first 2 x graphs: actor start-up, compilation of
every graph's bucket) and the last update, so it counts everything an update costs (rollouts, the learner in
the driver, the parameter broadcast) but no one-time cost. Writes experiments/results/benchmarks/ray_throughput.md.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

from placeto.rollouts.distributed import WorkerSpec, start
from simulator.workloads.families import load_family
from simulator import cluster_preset
from simulator.model.io import atomic_write_bytes

RESULTS = Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "ray_throughput.md"


def steady_rate(metrics: Path, warm_updates: int, x: str, y: str) -> tuple[float, int, float | None]:
    """(increase of column y per second of column x after row `warm_updates`, updates measured, share of the
    update spent in rollouts where metrics.csv says (Placeto's rollout_s and grad_s), else None)."""
    with metrics.open() as f:
        rows = [r for r in csv.DictReader(f)]
    if len(rows) < warm_updates + 2:
        raise SystemExit(f"{metrics}: {len(rows)} updates, fewer than the {warm_updates} warm-up updates + 2: "
                         f"give more --seconds")
    a, b, measured = rows[warm_updates - 1], rows[-1], rows[warm_updates:]
    share = None
    if "rollout_s" in a:
        roll = sum(float(r["rollout_s"]) for r in measured)
        share = roll / (roll + sum(float(r["grad_s"]) for r in measured))
    return (float(b[y]) - float(a[y])) / (float(b[x]) - float(a[x])), len(measured), share


def run_placeto(graphs, cluster, workers: WorkerSpec | None, minutes: float, out: Path):
    from placeto.methods.placeto.config import PlacetoConfig
    from placeto.methods.placeto.train import train

    config = PlacetoConfig(episodes=10**6, time_limit_minutes=minutes, checkpoint_seconds=1e9, progress=False)
    train(config, graphs, cluster, out, resume=False, workers=workers)
    return steady_rate(out / "metrics.csv", 2 * len(graphs), "wall_s", "episode")


def run_gdp(graphs, cluster, workers: WorkerSpec | None, minutes: float, out: Path):
    from placeto.methods.gdp.config import GdpConfig
    from placeto.methods.gdp.train import train

    config = GdpConfig(episodes=10**8, time_limit_minutes=minutes, checkpoint_seconds=1e9)
    train(config, graphs, [cluster], out, resume=False, workers=workers)
    return steady_rate(out / "metrics.csv", 2 * len(graphs), "seconds", "samples")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15.0, help="steady-state seconds per cell (after warm-up)")
    p.add_argument("--warmup-seconds", type=float, default=25.0, help="time allowed for start-up and compilation")
    p.add_argument("--workers", default="1,2", help="worker counts, comma list")
    p.add_argument("--graphs", type=int, default=2, help="nmt train graphs trained on (in turn)")
    p.add_argument("--devices", type=int, default=4)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    graphs = load_family("nmt", "train")[:args.graphs]
    cluster = cluster_preset("placeto-k80", args.devices)
    start(num_cpus=max(counts))
    minutes = (args.seconds + args.warmup_seconds) / 60
    setting = lambda n: "no Ray (plain `train`)" if n is None else f"--workers {n}"  # noqa: E731
    rows, load = [], [os.getloadavg()[0]]  # (method, workers or None, rate, updates measured, rollout share)
    for method, run in (("placeto", run_placeto), ("gdp", run_gdp)):
        for n in [None, *counts]:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                rate, updates, share = run(graphs, cluster, None if n is None else WorkerSpec(n), minutes,
                                           Path(tmp))
            rows.append((method, n, rate, updates, share))
            print(f"{method} {setting(n)}: {rate:.1f}/s over {updates} updates ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
            load.append(os.getloadavg()[0])
    base = {m: r for m, n, r, _, _ in rows if n == counts[0]}
    share1 = {m: sh for m, n, _, _, sh in rows if n == 1 and sh is not None}

    def bound(m: str, n: int | None) -> str:
        """Amdahl's bound on x --workers 1: only the rollout share (at 1 worker) is divided by n."""
        return "" if n is None or m not in share1 else f"{1 / (1 - share1[m] + share1[m] / n):.2f}"

    cmd = "python -m experiments.benchmarks.ray_throughput " + " ".join(argv if argv is not None else sys.argv[1:])
    names = ", ".join(f"{g.name} ({g.n_nodes} nodes)" for g in graphs)
    lines = ["# Training throughput with rollouts on Ray workers", "",
             f"Command: `{cmd.strip()}` ({os.cpu_count()} cores; load average {min(load):.1f}-{max(load):.1f} "
             f"during the runs; local Ray with {max(counts)} CPUs; {args.devices} devices; default PlacetoConfig "
             f"and GdpConfig; graphs {names}, one per update in turn).", "",
             "Rate: Placeto episodes (of 8 per update) or gdp placements (of 512 per update) per second of "
             f"training, from metrics.csv after {2 * len(graphs)} warm-up updates (start-up and compilation "
             "excluded; rollouts, learner and parameter broadcast included). `--workers N` runs the rollouts in N "
             "Ray actors (placeto.rollouts.distributed); equal seeds give the same checkpoint for every N. Rollout share: "
             "Placeto's rollout time over rollout + learner time (metrics.csv rollout_s, grad_s): the part workers "
             "can speed up, hence the bound on the speed-up (1 / (1 - share + share / N), share at 1 worker; "
             "it assumes N free cores).", "",
             "| method | setting | updates measured | rate (/s) | x --workers 1 | rollout share | bound |",
             "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {m} | {setting(n)} | {u} | {r:.1f} | {f'{r / base[m]:.2f}' if n is not None else ''} | "
              f"{'—' if sh is None else f'{sh:.2f}'} | {bound(m, n)} |" for m, n, r, u, sh in rows]
    atomic_write_bytes(args.out, ("\n".join(lines) + "\n").encode())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
