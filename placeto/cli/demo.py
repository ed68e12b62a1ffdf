"""`make demo`: the main job end to end, with tables and plots.

On embedded defaults. Run as `python -m placeto.cli.demo --out demo_out`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from simulator import cluster_preset, save_graph, save_placement, simulate
from simulator.model.generate import layered_dag
from simulator.plots import gantt


def simple_placements(n_nodes: int, topo_order: np.ndarray, n_devices: int, seed: int) -> dict[str, np.ndarray]:
    """Single-device, uniform random and round-robin placements.

    Round-robin over the topological order.
    """
    rr = np.empty(n_nodes, dtype=np.int32)
    rr[topo_order] = np.arange(n_nodes) % n_devices
    return {
        "single": np.zeros(n_nodes, dtype=np.int32),
        "random": np.random.default_rng(seed).integers(0, n_devices, n_nodes).astype(np.int32),
        "round-robin": rr,
    }


def simulator_section(out: Path, seed: int) -> None:
    graph = layered_dag(400, seed=seed)
    save_graph(graph, out / "demo_graph.json.gz")
    print(f"\n== Simulator: random layered graph {graph.name} ({graph.n_nodes} nodes, {graph.n_edges} edges) on the "
          f"placeto-k80 preset's K80s ==")
    simulate(graph, np.zeros(graph.n_nodes, dtype=np.int32), cluster_preset("placeto-k80", 2))  # load compiled code
    print("runtime: the simulated step time; x lower bd: that over the graph's lower bound; took: the simulator's "
          "own wall time for it")
    print(f"{'devices':>7} {'placement':<12} {'runtime ms':>11} {'x lower bd':>10} {'took ms':>7}  oom")
    for n_dev in (2, 4, 8):
        cluster = cluster_preset("placeto-k80", n_dev)
        for name, placement in simple_placements(graph.n_nodes, graph.topo_order, n_dev, seed).items():
            t0 = time.perf_counter()
            result = simulate(graph, placement, cluster)
            took = (time.perf_counter() - t0) * 1e3
            print(f"{n_dev:>7} {name:<12} {result.runtime / 1e3:>11.3f} {result.ratio:>10.3f} {took:>7.2f}  "
                  f"{'OOM' if result.any_oom else '-'}")
            save_placement(out / f"demo_{name}_{n_dev}dev.json", placement, cluster.device_names, graph=graph,
                           cluster=cluster)
            if n_dev == 4 and name == "round-robin":
                gantt(result, cluster, out / "gantt_round_robin_4dev.png",
                      title=f"{graph.name}: round-robin on 4 K80s")  # gantt adds the runtime
    print(f"Gantt chart: {out / 'gantt_round_robin_4dev.png'}")


def describe_program(program: dict) -> str:
    """A family graph's program as one phrase, its seed left out.

    {"kind": "nmt", "kwargs": {"layers": 2, "batch": 32, "seed": 7}} -> "nmt, layers 2, batch 32".
    """
    kwargs = ", ".join(f"{k} {v}" for k, v in program.get("kwargs", {}).items() if k != "seed")
    return f"{program.get('kind', '?')}, {kwargs}" if kwargs else str(program.get("kind", "?"))


def datasets_section(family: str = "nmt", benchmark: str = "nmt_l4", n_devices: int = 4) -> None:
    """Print a family's stats, a benchmark's expert and single device."""
    from simulator.workloads.families import DATASETS, load_family, load_manifest

    manifest = load_manifest(family)
    print(f"\n== Dataset: family {family!r} ({len(manifest['graphs'])} graphs traced from JAX training steps) ==")
    print(f"{'graph':<10} {'split':<5} {'ops':>6} {'groups':>6} {'compute ms':>10} {'LB 4 ms':>8}  program")
    for e in manifest["graphs"][:8]:
        print(f"{e['name']:<10} {e['split']:<5} {e['ops']:>6} {e['groups']:>6} {e['total_compute_us'] / 1e3:>10.2f} "
              f"{e['lower_bound_us']['4'] / 1e3:>8.2f}  {describe_program(e['program'])}")
    print(f"... {len(manifest['graphs']) - 8} more (see {DATASETS / family / 'manifest.json'})")
    graph = next(g for g in load_family("benchmarks", split=None) if g.name == benchmark)
    cluster = cluster_preset("placeto-k80", n_devices)
    print(f"\n== Benchmark {benchmark} ({graph.meta['ops']} ops, {graph.n_nodes} groups) on {n_devices} K80s ==")
    for name, placement in (("single GPU", np.zeros(graph.n_nodes, dtype=np.int32)),
                            ("human expert", np.asarray(graph.meta["expert_placement"][str(n_devices)]))):
        r = simulate(graph, placement, cluster)
        print(f"{name:<13} {r.runtime / 1e3:>9.3f} ms  ({r.ratio:.2f}x lower bound, peak memory "
              f"{r.peak_memory.max() / 1e6:.0f} MB{', OOM' if r.any_oom else ''})")


SEARCH_SECONDS = 1.0  # wall-clock budget per method on the test graph (compilation excluded)


def policy_section(family: str = "nmt", n_devices: int = 4):
    """Place an unseen test graph zero-shot with the shipped policy.

    The general one; no training here. Returns the graph.
    """
    from simulator.workloads.families import load_family
    from placeto.policies import DEFAULT_POLICY, shipped_policies
    from placeto.methods.placeto import guided
    graph = min(load_family(family, "test"), key=lambda g: g.n_nodes)
    cluster = cluster_preset("placeto-k80", n_devices)
    print(f"\n== Placeto: the shipped '{DEFAULT_POLICY}' policy places the unseen {graph.name} ({graph.n_nodes} "
          f"groups) zero-shot on {n_devices} K80s ==")
    shipped = shipped_policies()
    summary = next((p.provenance.get("summary", "") for p in shipped if p.name == DEFAULT_POLICY), "")
    print(f"policy '{DEFAULT_POLICY}': trained on {summary} (one of {len(shipped)} shipped policies: "
          f"`placeto policies` lists them)")
    prep = guided.prepare(DEFAULT_POLICY, graph, cluster, sampling=False)
    t0 = time.perf_counter()
    placement, _, _ = guided.greedy_with_prior(prep)
    seconds = time.perf_counter() - t0
    res = simulate(graph, placement, cluster)
    single = simulate(graph, np.zeros(graph.n_nodes, np.int32), cluster)
    print(f"greedy zero-shot: {res.runtime / 1e3:.3f} ms in {seconds:.2f} s (compilation {prep.compile_seconds:.1f} s,"
          f" apart); single device {single.runtime / 1e3:.3f} ms; lower bound {res.lower_bound / 1e3:.3f} ms")
    return graph


def compare_section(graph, out: Path, n_devices: int = 4, seconds: float = SEARCH_SECONDS) -> list:
    """Compare every method on `graph`, searches at equal seconds.

    Every baseline and the learned methods; returns the rows.
    """
    from placeto.harness.compare import compare, markdown_table, plot_compare, write_csv

    methods = ["single", "metis", "scotch", "etf", "heft", "random", "local-search", "sa", "placeto",
               "placeto-search", "gdp", "gdp-search"]
    print(f"\n== Comparison on unseen graph {graph.name} ({graph.n_nodes} groups), {n_devices} K80s, "
          f"{seconds:g} s of wall time for every method that searches or samples ==")
    rows = compare([graph], [n_devices], methods, seed=0, budget=None, seconds=seconds)  # a bar on stderr
    print(markdown_table(rows))
    write_csv(rows, out / "compare.csv")
    plots = plot_compare(rows, out)
    print(f"bar chart: {', '.join(str(p) for p in plots)}")
    return rows


def hardware_section(graph, out: Path, seconds: float = 1.0) -> None:
    """Place the graph for local devices: `placeto place --hardware`.

    In a subprocess, which sets XLA_FLAGS before JAX starts: profile the graph on 2 local JAX devices inside the
    compiled step, calibrate them (both cached), place with etf, m-sct and local search against that cluster, run
    the best placements and the single device for real and keep the fastest measured; the measured against
    simulated times go to a plot.
    """
    import subprocess

    graph_file = out / f"{graph.name}.json.gz"
    save_graph(graph, graph_file)
    print(f"\n== Hardware: {graph.name} placed for this machine (2 local JAX devices; real ops, the fastest "
          f"measured placement kept) ==", flush=True)
    cmd = [sys.executable, "-m", "placeto.cli.main", "place", str(graph_file), "--hardware", "--devices", "2",
           "--candidates", "etf,m-sct,local-search", "--seconds", f"{seconds:g}",
           "--out", str(out / f"{graph.name}.hardware_2dev.json"), "--plot", str(out / "sim_vs_hardware.png")]
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo_out", help="folder for files and plots")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=SEARCH_SECONDS,
                        help="wall-clock budget of each searching method in the comparison")
    args = parser.parse_args(argv)
    from simulator.measure import cache

    cache.enable_compile_cache()  # as every placeto command: a second demo compiles little (PLACETO_COMPILE_CACHE)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    simulator_section(out, args.seed)
    datasets_section()
    test_graph = policy_section()
    compare_section(test_graph, out, seconds=args.seconds)
    hardware_section(test_graph, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
