"""GDP at scale against the list schedulers, local search and the human expert.

    python -m experiments.benchmarks.gdp_scale                    # the whole grid; resumable: finished rows are kept
    python -m experiments.benchmarks.gdp_scale --quick            # the 10k generated graphs at 4 devices only
    python -m experiments.benchmarks.gdp_scale --graphs layered_50k --devices 8 --seconds 30

Graphs: the ungrouped op graphs of the benchmarks nmt_l8, rnnlm_l8 and nasnet (traced once, cached in
--cache with their expert placements), and generated graphs of two structures at 10,000 and 50,000 nodes:
`layered_dag` (wide random layers) and `branching_blocks` (a chain of fork/join blocks). Cluster: the
placeto-k80 preset at 4 and 8 devices. Methods, each reusing the project's own (`placeto.baselines.run_method`,
`placeto.harness.compare.run_learned`, `placeto.methods.gdp.place`):

- single, expert (the benchmarks' human placement: a layer per device; nasnet's is the single device), etf, m-sct;
- local-search and gdp-search with the same wall time, --seconds S each (compilation apart);
- gdp: the shipped gdp-general policy, one forward pass on the op graph (argmax per node), zero-shot;
- gdp-coarse (an ablation, in this experiment only): the graph grouped to 400 groups as Placeto's large-graph
  path does (`placeto.coarsen.for_policy`), gdp-general's one pass on the groups, the placement expanded to the
  ops; its time includes the grouping;
- the large-graph policy (--large-checkpoint, shipped as gdp-large: gdp with the "etf" list decoder,
  `placeto.methods.gdp.decoder`): gdp-large, its one pass (forward pass + greedy decoding, no simulator call);
  gdp-large-sampled, that and sampled decodings, the best kept, for --seconds; gdp-large-search, its greedy
  decoding and per-node distributions steering placeto-search's annealing for --seconds;
- ablations of the list decoder: heft (the list scheduler), gdp-etf-fresh and gdp-heft-fresh (the "etf" and
  "heft" decoders' one pass with fresh, untrained parameters of the large config, seed 0);
- the first target on the op graphs at 8 devices: local-search-10k (local search for 10,000 simulator
  calls; its wall time is the budget of) gdp-large-tuned (PPO fine-tuning of gdp-large on the graph, then sampled
  decodings, the best kept);
- the coarse-to-fine ablation: gdp-large places a graph whose communication-to-computation ratio is high through
  its grouping (GdpConfig.coarse_groups); gdp-large-ops, -ops-sampled, -ops-search and -ops-tuned are the same
  rows with the same parameters placing the op graph itself (coarse_groups 0: `ops_checkpoint`), run where
  gdp-large places coarse-to-fine (elsewhere they are gdp-large's rows); gdp-large-grouped, gdp-large's one pass
  through the grouping on every graph of more than 1,000 nodes (coarse_ccr 0: `variant_checkpoint`), the test of
  the ratio's threshold.

Every row is simulated once on the op graph (runtime, out of memory). Rows are appended to the CSV as they
finish, with the command that made them; a rerun skips the rows already there. The markdown (regenerated from
the whole CSV each time) gives runtimes in ms with the ratio to etf, the wall seconds of each method, the lower
bound, and the rows of the grid still missing.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from experiments.common.large_graphs import GENERATED, GRAPHS, OP_GRAPHS, load

RESULTS = Path(__file__).resolve().parents[1] / "results" / "benchmarks"
ROOT = Path(__file__).resolve().parents[2]
DEVICES = (4, 8)
METHODS = ("single", "expert", "etf", "heft", "m-sct", "local-search", "gdp", "gdp-coarse", "gdp-search", "gdp-large",
           "gdp-etf-fresh", "gdp-heft-fresh", "gdp-large-sampled", "gdp-large-search", "local-search-10k",
           "gdp-large-tuned", "gdp-large-ops", "gdp-large-ops-sampled", "gdp-large-ops-search", "gdp-large-ops-tuned",
           "gdp-large-grouped")
LARGE = ("gdp-large", "gdp-large-sampled", "gdp-large-search", "gdp-large-tuned")  # run with --large-checkpoint
OPS = {f"gdp-large-ops{m[9:]}": m for m in LARGE}  # the ablation without coarse-to-fine -> its gdp-large row
OPS_OF = {m: o for o, m in OPS.items()}
TARGET_1_ONLY = ("local-search-10k", "gdp-large-tuned", "gdp-large-ops-tuned")  # op graphs at 8 devices only
TUNE_EPISODES = 2048  # gdp-large-tuned: placements of PPO fine-tuning (then sampled decodings) within its budget
QUICK = {"graphs": ("layered_10k", "blocks_10k"), "devices": (4,)}
PRESET = "placeto-k80"


@dataclasses.dataclass(frozen=True)
class Result:
    """One method on one graph and device count, as a CSV line."""

    graph: str  # a key of GRAPHS
    nodes: int
    devices: int
    method: str  # a name of METHODS
    runtime_ms: float  # simulated runtime of the placement; NaN where the method does not apply
    lower_bound_ms: float  # max(critical path, total compute / devices)
    oom: bool  # the placement exceeds some device's memory
    place_s: float  # wall seconds to place, compilation excluded
    compile_s: float  # one-time wall seconds of learned methods (policy loading, jit compilation)
    calls: int  # simulator calls the method made
    note: str  # why the method does not apply, else ""
    command: str  # the command line that made this row


# ---- one row ----------------------------------------------------------------------------------------------------
def place(method: str, graph, cluster, seconds: float, checkpoint: str, seed: int = 0):
    """(int32[N] placement, place seconds, compile seconds, simulator calls) of `method` (see the module
    docstring; `checkpoint`: the policy of gdp* rows, `seconds`: the wall time of the anytime ones). Raises
    placeto.baselines.NotApplicable where it does not apply."""
    from placeto.baselines import NotApplicable, run_method
    from placeto.harness.compare import run_learned

    if method in TARGET_1_ONLY and (graph.name not in OP_GRAPHS or cluster.n_devices != 8):
        raise NotApplicable("the first target only: the op graphs at 8 devices")
    if method in OPS:
        from placeto.methods.gdp.place import coarse_view, load_run
        from placeto.policies import resolve_checkpoint

        if not coarse_view(graph, cluster, load_run(resolve_checkpoint(checkpoint))[0]):
            raise NotApplicable("the large policy places this graph at the op level: the row is gdp-large's")
        method, checkpoint = OPS[method], ops_checkpoint(checkpoint)
    if method == "gdp-large-grouped":
        return one_pass(graph, cluster, variant_checkpoint(checkpoint, "grouped", coarse_ccr=0.0), coarse=False)
    if method in ("gdp", "gdp-coarse", "gdp-large"):
        return one_pass(graph, cluster, checkpoint, coarse=method == "gdp-coarse")
    if method in ("gdp-etf-fresh", "gdp-heft-fresh"):
        return fresh_pass(graph, cluster, method.split("-")[1])
    if method in ("gdp-search", "gdp-large-search"):
        run, compile_s = run_learned("gdp-search", graph, cluster, seed, None, seconds, checkpoint)
        return run.placement, run.seconds, compile_s, run.simulator_calls
    if method in ("gdp-large-sampled", "gdp-large-tuned"):
        episodes = TUNE_EPISODES if method == "gdp-large-tuned" else 0
        run, compile_s = run_learned("gdp", graph, cluster, seed, None, seconds, checkpoint, episodes)
        return run.placement, run.seconds, compile_s, run.simulator_calls
    if method == "local-search-10k":
        run = run_method("local-search", graph, cluster, seed, budget=10_000)
    elif method == "local-search":
        run = run_method(method, graph, cluster, seed, budget=None, seconds=seconds)
    else:
        run = run_method(method, graph, cluster, seed)
    return run.placement, run.seconds, 0.0, run.simulator_calls


def ops_checkpoint(checkpoint: str) -> str:
    """The run directory runs/<name>_ops: `checkpoint`'s policy (the same files) with coarse_groups 0."""
    return variant_checkpoint(checkpoint, "ops", coarse_groups=0)


def variant_checkpoint(checkpoint: str, suffix: str, **changes) -> str:
    """The run directory runs/<name>_<suffix>: `checkpoint`'s policy (the same files), its config.json's fields
    `changes` replaced."""
    import json
    import shutil

    from placeto.policies import resolve_checkpoint
    from simulator.model.io import atomic_write_bytes

    src = Path(str(resolve_checkpoint(checkpoint)))
    out = ROOT / "runs" / f"{src.name}_{suffix}"
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name != "config.json":
            shutil.copyfile(f, out / f.name)
    config = json.loads((src / "config.json").read_text())
    atomic_write_bytes(out / "config.json", (json.dumps({**config, **changes}, indent=1) + "\n").encode())
    return str(out)


def one_pass(graph, cluster, checkpoint: str, coarse: bool):
    """gdp's zero-shot placement: one forward pass of the policy (`timed_greedy`: inputs + pass, timed after a
    first compiling call), on the op graph or (`coarse`) on its 400-group coarsening, expanded to the ops; the
    grouping's seconds count as placing time. No simulator call."""
    from placeto.coarsen import for_policy
    from placeto.methods.gdp.place import load_run, timed_greedy
    from placeto.policies import resolve_checkpoint

    t0 = time.perf_counter()
    config, params = load_run(resolve_checkpoint(checkpoint))
    load_s = time.perf_counter() - t0
    view = for_policy(graph) if coarse else None
    placement, seconds, first = timed_greedy(config, params, view.graph if coarse else graph, cluster)
    if coarse:
        return view.expand(placement), seconds + view.seconds, load_s + first - seconds, 0
    return placement, seconds, load_s + first - seconds, 0


def fresh_pass(graph, cluster, order: str):
    """The one pass of a list decoder (`order`: "etf" or "heft") with fresh parameters of the large config (seed
    0): what the decoder does before any training. Timed as `one_pass`."""
    from placeto.methods.gdp.config import large
    from placeto.methods.gdp.place import timed_greedy
    from placeto.methods.gdp.ppo import init_params, make_task

    t0 = time.perf_counter()
    config = large(decoder=order)
    params = init_params(config, make_task(graph, cluster, config))
    init_s = time.perf_counter() - t0
    placement, seconds, first = timed_greedy(config, params, graph, cluster)
    return placement, seconds, init_s + first - seconds, 0


def run_row(name: str, graph, n_devices: int, method: str, seconds: float, checkpoint: str,
            command: str, rows: Sequence[Result] = ()) -> Result:
    """`method` on `graph` at `n_devices` placeto-k80 devices, simulated once. gdp-large-tuned takes the wall
    time of the local-search-10k row of `rows` on the same graph and devices (run first) as its budget."""
    from placeto.baselines import NotApplicable
    from simulator import cluster_preset, simulate
    from simulator.model.result import lower_bound

    cluster = cluster_preset(PRESET, n_devices)
    base = dict(graph=name, nodes=graph.n_nodes, devices=n_devices, method=method,
                lower_bound_ms=lower_bound(graph, cluster) / 1e3, command=command)
    if method in ("gdp-large-tuned", "gdp-large-ops-tuned"):
        ls = [r for r in rows if (r.graph, r.devices, r.method) == (name, n_devices, "local-search-10k")]
        seconds = ls[0].place_s if ls and not math.isnan(ls[0].runtime_ms) else seconds
    try:
        placement, place_s, compile_s, calls = place(method, graph, cluster, seconds, checkpoint)
    except NotApplicable as e:
        return Result(**base, runtime_ms=math.nan, oom=False, place_s=0.0, compile_s=0.0, calls=0, note=str(e))
    sim = simulate(graph, np.asarray(placement, np.int32), cluster)
    return Result(**base, runtime_ms=float(sim.runtime) / 1e3, oom=bool(sim.any_oom), place_s=place_s,
                  compile_s=compile_s, calls=int(calls), note="")


# ---- the CSV of finished rows -----------------------------------------------------------------------------------
def read_rows(path: Path) -> list[Result]:
    """The rows of a CSV written by `write_rows` ([] if the file does not exist)."""
    if not path.exists():
        return []
    kinds = {f.name: f.type for f in dataclasses.fields(Result)}
    convert = {"int": int, "float": lambda v: math.nan if v == "" else float(v), "bool": lambda v: v == "True",
               "str": str}
    with path.open(newline="") as f:
        return [Result(**{k: convert[kinds[k]](v) for k, v in d.items()}) for d in csv.DictReader(f)]


def write_rows(path: Path, rows: Sequence[Result]) -> None:
    from simulator.model.io import atomic_write_csv

    atomic_write_csv(path, [dataclasses.asdict(r) for r in rows], [f.name for f in dataclasses.fields(Result)])


def grid(graphs: Sequence[str], devices: Sequence[int], methods: Sequence[str]) -> list[tuple[str, int, str]]:
    """(graph, devices, method) of every row asked, graph by graph, in the order given."""
    return [(g, d, m) for g in graphs for d in devices for m in methods]


# ---- the markdown -----------------------------------------------------------------------------------------------
def ratio_to_etf(rows: Sequence[Result]) -> dict[tuple[str, int, str], float]:
    """{(graph, devices, method): runtime / etf's runtime on that graph and device count} for the rows that ran
    beside an etf row."""
    etf = {(r.graph, r.devices): r.runtime_ms for r in rows if r.method == "etf" and not math.isnan(r.runtime_ms)}
    return {(r.graph, r.devices, r.method): r.runtime_ms / etf[r.graph, r.devices] for r in rows
            if (r.graph, r.devices) in etf and not math.isnan(r.runtime_ms)}


def geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values)))) if len(values) else math.nan


def _table(rows: Sequence[Result], methods: Sequence[str], cell: Callable[[Result], str]) -> list[str]:
    """One line per (graph, devices), one column per method; "…": not run yet, "—": does not apply."""
    by = {(r.graph, r.devices, r.method): r for r in rows}
    order = {g: i for i, g in enumerate(GRAPHS)}
    keys = sorted(dict.fromkeys((r.graph, r.devices) for r in rows), key=lambda k: (order.get(k[0], len(order)), k))
    lines = ["| graph | nodes | devices | lower bound | " + " | ".join(methods) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(methods)]
    for g, d in keys:
        first = next(r for r in rows if (r.graph, r.devices) == (g, d))
        cells = [("…" if (g, d, m) not in by else "—" if math.isnan(by[g, d, m].runtime_ms) else cell(by[g, d, m]))
                 for m in methods]
        lines.append(f"| {g} | {first.nodes} | {d} | {first.lower_bound_ms:.1f} | " + " | ".join(cells) + " |")
    return lines


def summary(rows: Sequence[Result], methods: Sequence[str]) -> list[str]:
    """Per method: geometric mean ratio to etf (its rows, and at 8 devices), mean seconds; then the paired
    comparisons: gdp-coarse against gdp, gdp-search against local search, and the targets."""
    ratios = ratio_to_etf(rows)
    lines = ["| method | geo-mean x etf | geo-mean x etf, 8 devices | mean place s | mean compile s | rows |",
             "|---|---:|---:|---:|---:|---:|"]
    for m in methods:
        ran = [r for r in rows if r.method == m and (r.graph, r.devices, m) in ratios]
        if ran:
            at8 = [ratios[r.graph, r.devices, m] for r in ran if r.devices == 8]
            at8_text = f"{geomean(at8):.3f}" if at8 else "—"
            lines.append(f"| {m} | {geomean([ratios[r.graph, r.devices, m] for r in ran]):.3f} | {at8_text} | "
                         f"{np.mean([r.place_s for r in ran]):.2f} | {np.mean([r.compile_s for r in ran]):.2f} | "
                         f"{len(ran)} |")
    lines += ["", "Each method's rows are those it ran beside etf; the paired lines below compare like with like.",
              ""]
    ablations = (("gdp-coarse", "gdp", "gdp-general's one pass on the 400-group coarsening, expanded to the ops, "
                  "against its one pass on the op graph"),
                 ("gdp-etf-fresh", "gdp", "one pass of the etf list decoder with fresh parameters against one of "
                  "gdp-general's independent decoder"),
                 ("gdp-etf-fresh", "gdp-heft-fresh", "the etf order against the heft order, fresh parameters"),
                 *((m, OPS_OF[m], "coarse-to-fine against the same policy at the op level") for m in LARGE),
                 ("gdp-large-grouped", "gdp-etf-fresh", "gdp-large's one pass through its 1,000 groups whatever the "
                  "communication-to-computation ratio (coarse_ccr 0) against the same network at the op level"))
    for method, other, what in ablations:
        for label, graphs in (("all graphs", GRAPHS), ("the benchmark op graphs", OP_GRAPHS),
                              ("the generated graphs", tuple(GENERATED))):
            pair = paired(ratios, method, other, graphs)
            if pair:
                a, b, better, n = pair
                verdict = "it helps" if a < b else "it does not help"
                lines.append(f"- Ablation {method} vs {other} ({what}), {label}: geometric mean {a:.3f}x etf against "
                             f"{b:.3f}x, better in {better} of {n} graph x device rows: {verdict}.")
    if any(r.method == "gdp-large" for r in rows):
        lines.append("- gdp-large is the large config at its initialisation, so where it places at the op level (and "
                     "gdp-large-ops everywhere) its rows equal gdp-etf-fresh's: PPO training made the one pass worse "
                     "(experiments/results/reproduce/gdp_large_training.md).")
    for method in ("gdp-search", "gdp-large-sampled", "gdp-large-search", "gdp-large-ops-sampled",
                   "gdp-large-ops-search"):
        search = paired(ratios, method, "local-search")
        if search:
            a, b, better, n = search
            lines.append(f"- {method} against local search at equal wall time: geometric mean {a:.3f}x etf against "
                         f"{b:.3f}x, better in {better} of {n} rows.")
    return lines + targets(rows, ratios)


def paired(ratios: dict, method: str, other: str, graphs: Sequence[str] = GRAPHS
           ) -> tuple[float, float, int, int] | None:
    """(geo-mean x etf of `method`, of `other`, rows where `method` is better, rows) over the (graph, devices) of
    `graphs` where both ran; None if there are none."""
    pairs = [(v, ratios[k[:2] + (other,)]) for k, v in ratios.items()
             if k[2] == method and k[0] in graphs and k[:2] + (other,) in ratios]
    if not pairs:
        return None
    return geomean([p[0] for p in pairs]), geomean([p[1] for p in pairs]), sum(a < b for a, b in pairs), len(pairs)


def targets(rows: Sequence[Result], ratios: dict) -> list[str]:
    """The targets, where the rows exist. 1: at 8 devices on the op graphs, the gdp rows against the
    expert (mean improvement; gdp-large-tuned within local-search-10k's wall time). 2: on the 50k graphs at 8
    devices, the one passes within 1.10x etf in < 60 s, and the search rows at equal wall time at least as good as
    etf and local search."""
    by = {(r.graph, r.devices, r.method): r for r in rows if not math.isnan(r.runtime_ms)}
    lines = []
    for m in ("gdp", "gdp-coarse", "gdp-search", "gdp-large-ops", "gdp-large-ops-sampled", "gdp-large-ops-search",
              "gdp-large-ops-tuned", "gdp-large", "gdp-large-sampled", "gdp-large-search", "local-search-10k",
              "gdp-large-tuned"):
        x = [by[g, 8, m].runtime_ms / by[g, 8, "expert"].runtime_ms for g in OP_GRAPHS
             if (g, 8, m) in by and (g, 8, "expert") in by]
        if x:
            each = ", ".join(f"{g} {v:.2f}" for g, v in zip(OP_GRAPHS, x))
            ok = "met" if len(x) == len(OP_GRAPHS) and np.mean([1 - v for v in x]) >= 0.10 else "not met"
            lines.append(f"- Target 1 (op graphs, 8 devices, >= 10% better than the expert on average): {m} "
                         f"{100 * np.mean([1 - v for v in x]):+.1f}% on average over {len(x)} graphs (x the expert: "
                         f"{each}; geometric mean {geomean(x):.2f}): {ok}.")
    big = [g for g in GENERATED if GENERATED[g][1] == 50_000]
    for m in ("gdp", "gdp-coarse", "gdp-large"):
        for g in big:
            if (g, 8, m) in ratios:
                x, sec = ratios[g, 8, m], by[g, 8, m].place_s + by[g, 8, m].compile_s
                ok = "met" if x <= 1.10 and sec < 60 else "not met"
                lines.append(f"- Target 2 ({g}, 8 devices, one pass within 1.10x etf in < 60 s, loading and "
                             f"compilation included): {m} {x:.3f}x etf in {sec:.1f} s: {ok}.")
    for m in ("gdp-search", "gdp-large-search"):
        for g in big:
            if (g, 8, m) in ratios and (g, 8, "local-search") in ratios:
                x, ls = ratios[g, 8, m], ratios[g, 8, "local-search"]
                ok = "met" if x <= min(1.0, ls) else "not met"
                lines.append(f"- Target 2 ({g}, 8 devices, search at equal wall time at least as good as etf and local "
                             f"search): {m} {x:.4f}x etf, local search {ls:.4f}x: {ok}.")
    return lines


def missing_text(missing: Sequence[tuple[str, int, str]]) -> str:
    """"g 4d: all; h 8d: m-sct, gdp" from (graph, devices, method) triples."""
    by: dict[tuple[str, int], list[str]] = {}
    for g, d, m in missing:
        by.setdefault((g, d), []).append(m)
    return "; ".join(f"{g} {d}d: " + ("all" if len(ms) == len(METHODS) else ", ".join(ms)) for (g, d), ms in by.items())


def markdown(rows: Sequence[Result], missing: Sequence[tuple[str, int, str]], fill_command: str) -> str:
    """The results page: commands, runtimes (x etf), wall seconds, summary, missing rows."""
    methods = [m for m in METHODS if any(r.method == m for r in rows)]
    ratios = ratio_to_etf(rows)
    commands = {}
    for r in rows:
        commands[r.command] = commands.get(r.command, 0) + 1

    def runtime(r: Result) -> str:
        x = ratios.get((r.graph, r.devices, r.method))
        return f"{r.runtime_ms:.1f}" + (" OOM" if r.oom else "") + (f" ({x:.2f})" if x is not None else "")

    def seconds(r: Result) -> str:
        return f"{r.place_s:.1f}" + (f" (+{r.compile_s:.1f})" if r.compile_s > 0 else "")

    lines = ["# GDP at scale: one pass, list decoders and search against the list schedulers and the expert", "",
             "Commands (each row of gdp_scale.csv records the one that made it; a rerun keeps finished rows):"]
    lines += [f"- `{c}` ({n} rows)" for c, n in commands.items()]
    lines += ["", f"({os.cpu_count()} cores, load average at the last write {os.getloadavg()[0]:.1f}; {PRESET} "
              "preset; gdp, gdp-coarse, gdp-search: the shipped gdp-general policy; gdp-large*: the large-graph "
              "policy (gdp-large: NOT a learned policy but the large config at its initialisation, 0 episodes, a softened "
              "m-ETF heuristic; only the -tuned rows learn, by PPO on the graph), coarse-to-fine where the graph's "
              "communication-to-computation ratio says so; "
              "gdp-large-ops*: the same policy placing the op graph itself, on the graphs where gdp-large goes "
              "coarse. local-search, gdp-search, gdp-large-sampled, gdp-large-search: the same wall "
              "time, the --seconds of the command; gdp-large-tuned, gdp-large-ops-tuned: local-search-10k's wall "
              "time on that graph; gdp, gdp-coarse, gdp-large, gdp-large-grouped and the fresh ablations: one "
              "forward pass (+ the greedy decoding), zero-shot, no simulator call. Column names: the module "
              "docstring.)", "",
              "## Simulated runtime, ms (ratio to etf)", "",
              *_table(rows, methods, runtime), "",
              "OOM: the placement exceeds a device's memory. —: does not apply (no expert placement). …: not run "
              "yet.", "", "## Wall seconds to place (+ one-time compilation and policy loading)", "",
              *_table(rows, methods, seconds), "",
              "gdp, gdp-coarse, gdp-large: the policy's inputs (features, order, padding), one forward pass (and "
              "the list decoding), after a first compiling call; gdp-coarse and a coarse-to-fine gdp-large add the "
              "grouping (the searches and samplers too, charged to their wall time). The searches: their "
              "forward pass and search within their wall time (the harness counts the inputs with the compilation).",
              "", "## Summary", "", *summary(rows, methods), ""]
    if missing:
        lines += ["## Missing rows", "", f"{len(missing)} rows of the grid are not measured yet: "
                  + missing_text(missing) + ".",
                  f"`{fill_command}` measures them (finished rows are kept).", ""]
    return "\n".join(lines)


# ---- main -------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    def names(known: Sequence[str], kind: type = str):
        def parse(text: str) -> tuple:
            items = tuple(kind(s.strip()) for s in text.split(",") if s.strip())
            bad = [s for s in items if s not in known]
            if bad or not items:
                raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(map(str, known))}")
            return items
        return parse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the 10k generated graphs at 4 devices only")
    p.add_argument("--graphs", type=names(GRAPHS), default=GRAPHS, help=f"comma list of {', '.join(GRAPHS)}")
    p.add_argument("--devices", type=names(DEVICES, int), default=DEVICES, help="comma list of 4, 8")
    p.add_argument("--methods", type=names(METHODS), default=METHODS, help=f"comma list of {', '.join(METHODS)}")
    p.add_argument("--seconds", type=float, default=30.0, help="wall seconds of local-search and of gdp-search")
    p.add_argument("--checkpoint", default="gdp-general", help="the gdp policy (shipped name or run directory)")
    p.add_argument("--large-checkpoint", default="gdp-large",
                   help=f"the large-graph gdp policy of the {', '.join(LARGE)} rows")
    p.add_argument("--cache", type=Path, default=ROOT / "runs" / "gdp_scale_graphs", help="traced op graphs")
    p.add_argument("--out", type=Path, default=RESULTS / "gdp_scale.md", help="markdown; the CSV beside it")
    p.add_argument("--report", action="store_true", help="only rewrite the markdown from the CSV; run nothing")
    args = p.parse_args(argv)
    if args.quick:
        args.graphs, args.devices = QUICK["graphs"], QUICK["devices"]
    if not 0 < args.seconds <= 3600:
        p.error(f"--seconds must be in (0, 3600], got {args.seconds}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join(["python -m experiments.benchmarks.gdp_scale", *(argv if argv is not None else sys.argv[1:])])
    csv_path = args.out.with_suffix(".csv")
    rows = read_rows(csv_path)
    if args.report:
        write_markdown(args, rows)
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)
    done = {(r.graph, r.devices, r.method) for r in rows}
    todo = [k for k in grid(args.graphs, args.devices, args.methods) if k not in done]
    print(f"{len(todo)} rows to run ({len(rows)} already in {csv_path})", flush=True)
    graph, graph_name = None, None
    for k, (name, n_dev, method) in enumerate(todo, 1):
        if name != graph_name:
            t0 = time.perf_counter()
            graph, graph_name = load(name, args.cache), name
            print(f"{name}: {graph.n_nodes} nodes, {graph.n_edges} edges ({time.perf_counter() - t0:.1f} s)",
                  flush=True)
        t0 = time.perf_counter()
        checkpoint = args.large_checkpoint if method in (*LARGE, *OPS, "gdp-large-grouped") else args.checkpoint
        row = run_row(name, graph, n_dev, method, args.seconds, checkpoint, command, rows)
        rows.append(row)
        write_rows(csv_path, rows)
        etf = next((r.runtime_ms for r in rows if (r.graph, r.devices, r.method) == (name, n_dev, "etf")), math.nan)
        print(f"[{k}/{len(todo)}] {name} {n_dev}d {method}: {row.runtime_ms:.1f} ms (x etf {row.runtime_ms / etf:.2f}"
              f", lower bound {row.lower_bound_ms:.1f}) placed in {row.place_s:.1f} s (+{row.compile_s:.1f} s "
              f"compile; {time.perf_counter() - t0:.0f} s in all){' ' + row.note if row.note else ''}", flush=True)
        write_markdown(args, rows)
    write_markdown(args, rows)
    return 0


def write_markdown(args: argparse.Namespace, rows: Sequence[Result]) -> None:
    from simulator.model.io import atomic_write_bytes

    done = {(r.graph, r.devices, r.method) for r in rows}
    missing = [k for k in grid(GRAPHS, DEVICES, METHODS) if k not in done]
    fill = f"python -m experiments.benchmarks.gdp_scale --seconds {args.seconds:g}"
    atomic_write_bytes(args.out, markdown(rows, missing, fill).encode())


if __name__ == "__main__":
    sys.exit(main())
