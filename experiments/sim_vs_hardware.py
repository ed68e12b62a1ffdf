"""Simulated against measured step times on local host devices: does the simulator rank placements as a machine
does, and how far off are its runtimes?

For one small traced graph per family (cifar10, ptb, nmt; built here, as `datasets/` need not exist) and 2 and 4
host CPU devices: calibrate the cluster (`simulator.calibrate`), run a spread of placements (single, round-robin,
contiguous, uniform random, the baselines random-search, metis and etf, and with --checkpoints a trained
Placeto policy's zero-shot placement) on the devices with
`simulator.hardware` (median of --repeats interleaved steps) and simulate each with two cost models:

* op-profile: the graph's measured "local-cpu" costs as `placeto profile` records them (every op timed alone,
  summed per group);
* units: every group timed alone as it is executed (one fused XLA computation), net of the dispatch floor;
* units+latency: the same, with the calibrated per-transfer overhead charged as latency (the transfer arrives
  delta2 + bytes / bandwidth after it starts) instead of sender-bus time after it. The simulator has no latency
  term; it is emulated by adding delta2 x bandwidth bytes to every output and setting delta2 to 0 (runtimes only:
  this changes the memory figures).

Writes experiments/results/sim_vs_hardware.{md,json,png}. XLA_FLAGS must be set before JAX is imported, so the
device count is fixed first thing (the largest of --devices).

    python experiments/sim_vs_hardware.py                   # about 10 minutes on 2 cores
    python experiments/sim_vs_hardware.py --devices 2 --graphs nmt --repeats 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.host_devices import ensure_host_devices  # noqa: E402  (jax-free: sets XLA_FLAGS)

SPECS = {  # small members of each family: (zoo kwargs, target groups)
    "cifar10": ({"seed": 0, "n_cells": 1, "channels": 8, "batch": 16, "n_nodes": 4}, 100),
    "ptb": ({"seed": 0, "steps": 8, "hidden": 64, "batch": 16}, 100),
    "nmt": ({"seed": 0, "layers": 2, "src_len": 5, "tgt_len": 5, "batch": 16}, 100),
}
METHODS = ("random", "metis", "etf")  # baselines (run on the op-profile costs), besides the fixed placements


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="2,4", help="comma list of device counts")
    p.add_argument("--graphs", default="cifar10,ptb,nmt", help="comma list of families")
    p.add_argument("--repeats", type=int, default=9, help="timed steps per placement (interleaved)")
    p.add_argument("--work", default="/tmp/placeto_sim_vs_hw", help="where built and profiled graphs are cached")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results"), help="results folder")
    p.add_argument("--no-serial", action="store_true", help="keep XLA's intra-op threading (default: off)")
    p.add_argument("--single-thread-dispatch", action="store_true",
                   help="dispatch every device from one host thread (default: one thread per device)")
    p.add_argument("--checkpoints", help="folder of family policies (<folder>/<family>/family, as "
                   "experiments/placeto_family.py --runs writes them): adds each graph's zero-shot placement")
    p.add_argument("--render", help="only rewrite the .md and .png from this results JSON (no measuring)")
    return p.parse_args()


def build(family: str, work: Path):
    """The grouped graph of `family`'s small spec with op-profile "local-cpu" costs (cached in `work`)."""
    from placeto.families import GraphSpec, build_graph, profile
    from simulator.io import load_graph, save_graph

    path = work / f"{family}_small.json.gz"
    if path.exists():
        return load_graph(path)
    kwargs, target = SPECS[family]
    graph, _ = build_graph(GraphSpec(f"{family}_small", family, kwargs, target), family)
    graph = profile(graph, "local-cpu", repeats=5, warmup=2)
    save_graph(graph, path)
    return graph


def placements(graph, cluster, seed: int = 0, checkpoint: Path | None = None) -> list[tuple[str, "np.ndarray"]]:
    """The spread of placements measured: fixed ones, the baselines, and a trained Placeto policy's zero-shot
    placement (greedy) when `checkpoint` (a `placeto train` run directory) is given."""
    import numpy as np

    from placeto.baselines import run_method

    n, d = graph.n_nodes, cluster.n_devices
    contiguous = np.empty(n, dtype=np.int32)
    contiguous[graph.topo_order] = np.arange(n) * d // n
    out = [("single", np.zeros(n, dtype=np.int32)), ("round-robin", (np.arange(n) % d).astype(np.int32)),
           ("contiguous", contiguous),
           ("uniform", np.random.default_rng(seed).integers(0, d, n).astype(np.int32))]
    out += [(m if m != "random" else "random-search", run_method(m, graph, cluster, seed).placement)
            for m in METHODS]
    if checkpoint is not None:
        from placeto.place import place

        out.append(("placeto", place(graph, cluster, checkpoint).placement))
    return out


def with_latency(graph, cluster):
    """(graph, cluster) simulating each transfer as taking delta2 + bytes / bandwidth for its consumers too."""
    extra = cluster.delta2_us * cluster.bandwidth_bytes_per_us
    return (dataclasses.replace(graph, out_bytes=graph.out_bytes + extra),
            dataclasses.replace(cluster, delta2_us=0.0))


def run_one(graph, n_devices: int, cluster, repeats: int, threads: bool, checkpoint: Path | None = None) -> dict:
    """Rows (placement, transfers, simulated with every cost model, measured) and the agreement of each model."""
    from placeto.evaluate import EvalRow, agreement, hardware_runner
    from simulator import simulate

    t0 = time.perf_counter()
    runner = hardware_runner(graph, cluster)
    units = graph.with_costs("local-cpu", runner.unit_costs(repeats=5))
    runner = dataclasses.replace(runner, graph=units, threads=threads)  # dispatch in the units' simulated order
    chosen = placements(graph, cluster, checkpoint=checkpoint)
    measured = runner.measure([p for _, p in chosen], repeats=repeats, warmup=2)
    models = {"op-profile": (graph, cluster), "units": (units, cluster), "units+latency": with_latency(units, cluster)}
    rows = []
    for (name, p), m in zip(chosen, measured):
        sim = {k: float(simulate(g, p, c).runtime) for k, (g, c) in models.items()}
        transfers = len(simulate(units, p, cluster).transfers.node)
        timing = {k: getattr(m, k) for k in ("median_us", "q25_us", "q75_us", "min_us", "max_us")}
        rows.append({"placement": name, "transfers": transfers, "simulated_us": sim, "measured": timing,
                     "assignment": p.tolist()})
    summary = {k: agreement([EvalRow(r["placement"], r["simulated_us"][k], m) for r, m in zip(rows, measured)])
               ._asdict() for k in models}
    return {"graph": graph.name, "groups": graph.n_nodes, "ops": graph.meta.get("ops"), "devices": n_devices,
            "rows": rows, "agreement": summary, "seconds": time.perf_counter() - t0,
            "unit_cost_total_us": float(units.cost_for("local-cpu").sum()),
            "op_cost_total_us": float(graph.cost_for("local-cpu").sum())}


MODELS = ("op-profile", "units", "units+latency")


def markdown(results: list[dict], env: dict) -> str:
    speedups = ", ".join(f"{k.rsplit('_', 1)[1]} devices {v}" for k, v in env.items()
                         if k.startswith("parallel_speedup_"))
    lines = ["# Simulated vs measured step time on local host devices", "",
             "Generated by `python experiments/sim_vs_hardware.py` "
             f"(`--devices {env['devices']} --repeats {env['repeats']}`). "
             f"Machine: {env['cores']} cores, load average {env['load_before']} before and {env['load_after']} "
             f"after; JAX {env['jax']}; XLA_FLAGS `{env['xla_flags']}`; "
             f"dispatch: {env['dispatch']}. Parallel speedup of the devices on independent ~1 ms kernels "
             f"(`simulator.calibrate.measure_parallelism`, ideal min(devices, cores)): {speedups}.", "",
             "Step times in ms. *measured*: median of interleaved steps [IQR]. Simulated with the calibrated "
             "cluster and three cost models: *op*: the graph's op-level profile (`placeto profile`: every op "
             "alone, summed per group); *units*: every group timed alone as executed; *lat*: units, with the "
             "per-transfer overhead charged as latency. Errors are (simulated - measured) / measured; "
             "err = median absolute error, rho = Spearman.", "",
             "## Agreement", "",
             "| graph | groups (ops) | devices | delta1 / delta2 us, GB/s | us per transfer in steps | err op "
             "| rho op | err units | rho units | err lat | rho lat |",
             "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in results:
        c = r["cluster"]
        cells = " | ".join(f"{r['agreement'][k]['median_ape']:.0f}% | {r['agreement'][k]['spearman']:.2f}"
                           for k in MODELS)
        lines.append(f"| {r['graph']} | {r['groups']} ({r['ops']}) | {r['devices']} | {c['delta1_us']:.1f} / "
                     f"{c['delta2_us']:.1f}, {c['bandwidth_bytes_per_us'] / 1e3:.1f} | "
                     f"{per_transfer_us(r):.0f} | {cells} |")
    lines += ["", "*us per transfer in steps*: slope of the measured step time against the number of transfers "
              "of the placements (least squares): what one more cross-device tensor costs the step.", ""]
    lines += LIMITS
    for r in results:
        lines += ["", f"## {r['graph']}, {r['devices']} devices", "",
                  f"Compute summed over groups: op profile {r['op_cost_total_us'] / 1e3:.1f} ms, units "
                  f"{r['unit_cost_total_us'] / 1e3:.1f} ms.", "",
                  "| placement | transfers | measured | sim op | err | sim units | err | sim lat | err |",
                  "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for row in r["rows"]:
            m, s = row["measured"], row["simulated_us"]
            cells = " | ".join(f"{s[k] / 1e3:.2f} | {(s[k] - m['median_us']) / m['median_us'] * 100:+.0f}%"
                               for k in MODELS)
            lines.append(f"| {row['placement']} | {row['transfers']} | {m['median_us'] / 1e3:.2f} "
                         f"[{m['q25_us'] / 1e3:.2f}-{m['q75_us'] / 1e3:.2f}] | {cells} |")
    return "\n".join(lines) + "\n"


def per_transfer_us(result: dict) -> float:
    """Least-squares slope of measured median step time (us) against transfers over the placements."""
    import numpy as np

    x = np.array([row["transfers"] for row in result["rows"]], dtype=np.float64)
    y = np.array([row["measured"]["median_us"] for row in result["rows"]])
    return float(np.polyfit(x, y, 1)[0]) if np.ptp(x) > 0 else float("nan")


LIMITS = [  # about the committed run (quiet machine, load ~1); rerun and reread before trusting it elsewhere
    "## What limits the agreement", "",
    "* **Partial concurrency.** The simulator assumes devices run fully in parallel. Here two host devices ran "
    "independent ~1 ms kernels 1.74x faster than one, and four devices on the 2 cores 1.78x (see the header), "
    "so 4-device placements get at most half the parallelism the simulator credits them with; with dependencies "
    "and transfers in the step, even 2 devices overlap less than that. The executor keeps each device to one "
    "core and one op at a time (`SERIAL_CPU_FLAGS` plus a token chain), so this is the machine, not XLA threads. "
    "A run on a loaded machine (session 1: speedup ~1.0) ranked much worse.",
    "* **Transfers are host work.** Moving a tensor between host devices costs tens of microseconds of host time "
    "(`jax.device_put` plus the receiving thread's wake-up) whatever its size, and these costs serialise on the "
    "shared cores: measured step times grow linearly with the number of transfers (*us per transfer* column), "
    "which is why the single-device placement is measured fastest in five of the six cases. The simulator "
    "charges the calibrated delta2 as sender-bus occupancy, overlapped with compute and with other buses, and "
    "latency as bytes / bandwidth only; *lat* (delta2 charged as latency, emulated) fits better on ptb and nmt. "
    "A latency term and a shared host-time resource for transfers in the cluster model would be the next step.",
    "* **Op-level profiles do not describe what runs.** `placeto profile` times every op alone, each including a "
    "dispatch: summed per group that is 5-12x the time the fused group takes for ptb and nmt (see \"Compute "
    "summed over groups\"), so *op* overestimates single-device steps several-fold and ranks placements no "
    "better than chance. *units* (every group timed as executed; `placeto eval --costs units`) underestimates "
    "single-device steps by 6-40%: a step spends more per group than the calibrated delta1 (~10 us, from chains "
    "of minimal tasks) accounts for.",
    "* **Spreads within noise.** On cifar10 with 2 devices all placements measure 217-247 ms, about the "
    "interquartile range of one of them, so the measured ranking there is noise (rho 0.05) while the simulator "
    "spreads them from 116 to 187 ms. nmt, where placements differ by 2-3x, reaches rho 0.90 at 2 and 4 devices "
    "with median errors of 22% and 13% (*lat*); ptb 0.56-0.61 and 21-27%.", ""]


def plot(results: list[dict], path: Path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simulator.io import atomic_write_bytes

    fig, axes = plt.subplots(1, len(MODELS), figsize=(5 * len(MODELS), 5))
    for ax, model in zip(axes, MODELS):
        lo, hi = float("inf"), 0.0
        for r in results:
            sim = [row["simulated_us"][model] / 1e3 for row in r["rows"]]
            meas = [row["measured"]["median_us"] / 1e3 for row in r["rows"]]
            ax.plot(sim, meas, "o" if r["devices"] == 2 else "^", label=f"{r['graph']} {r['devices']}d")
            lo, hi = min(lo, *sim, *meas), max(hi, *sim, *meas)
        ax.plot([lo / 1.2, hi * 1.2], [lo / 1.2, hi * 1.2], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel=f"simulated ms ({model} costs)", ylabel="measured ms",
               title=f"costs: {model}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def main() -> int:
    args = parse_args()
    if args.render:
        return render(json.loads(Path(args.render).read_text()), Path(args.out))
    counts = [int(x) for x in args.devices.split(",")]
    ensure_host_devices(max(counts), serial=not args.no_serial)  # before anything imports jax
    import jax

    from simulator.calibrate import calibrate, measure_parallelism
    from simulator.host_devices import local_devices
    from simulator.io import atomic_write_bytes

    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    env = {"devices": args.devices, "repeats": args.repeats, "cores": os.cpu_count(), "jax": jax.__version__,
           "xla_flags": os.environ.get("XLA_FLAGS", ""), "load_before": "%.1f" % os.getloadavg()[0],
           "dispatch": "one host thread" if args.single_thread_dispatch else "one host thread per device"}
    graphs = []
    for family in args.graphs.split(","):
        t0 = time.perf_counter()
        graphs.append(build(family, work))
        print(f"{family}: {graphs[-1].n_nodes} groups ({time.perf_counter() - t0:.0f} s)", flush=True)
    results = []
    for n in counts:
        cluster = calibrate(n)
        speedup = measure_parallelism(local_devices(n))
        env[f"parallel_speedup_{n}"] = round(speedup, 2)
        print(f"{n} devices: delta1 {cluster.delta1_us} us, delta2 {cluster.delta2_us} us, "
              f"{cluster.bandwidth_bytes_per_us} B/us; parallel speedup {speedup:.2f}", flush=True)
        for graph in graphs:
            ckpt = Path(args.checkpoints) / graph.name.rsplit("_", 1)[0] / "family" if args.checkpoints else None
            result = run_one(graph, n, cluster, args.repeats, threads=not args.single_thread_dispatch,
                             checkpoint=ckpt if ckpt is not None and (ckpt / "checkpoint.msgpack").exists() else None)
            result["cluster"] = cluster.to_dict()
            results.append(result)
            a = result["agreement"]
            print(f"  {graph.name} {n}d: " + " | ".join(
                f"{k} err {a[k]['median_ape']:.0f}% rho {a[k]['spearman']:.2f}" for k in MODELS)
                + f" ({result['seconds']:.0f} s)", flush=True)
    env["load_after"] = "%.1f" % os.getloadavg()[0]
    atomic_write_bytes(out / "sim_vs_hardware.json", (json.dumps({"env": env, "results": results}, indent=1)
                                                      + "\n").encode())
    return render({"env": env, "results": results}, out)


def render(data: dict, out: Path) -> int:
    from simulator.io import atomic_write_bytes

    atomic_write_bytes(out / "sim_vs_hardware.md", markdown(data["results"], data["env"]).encode())
    plot(data["results"], out / "sim_vs_hardware.png")
    print(f"wrote {out / 'sim_vs_hardware.md'} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
