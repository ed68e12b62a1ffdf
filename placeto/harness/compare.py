"""Comparing every method on every graph and device count.

Simulated, tabulated and plotted. `compare` runs each method (see `placeto.baselines`, and the learned methods of
`placeto.methods`, by default with their shipped policies) and simulates its placement once with the full simulator
(runtime and memory). A method that does not apply (no shipped expert placement, no CPU device) still gets a row,
with `runtime_us` NaN and the reason in `note`; tables print it as "—", as the papers' tables print "-".

Memory comes first (placeto.objective): a placer's placement over capacity goes through `placeto.feasibility.repair`
(moves off the full devices, else a memory-aware list schedule), recorded in `repaired`; the references (`single`,
`cpu-only`, `expert`) are shown as they are. Rows over capacity keep their runtime but are marked `oom` and printed
"OOM" with their fullest device's peak over its capacity; `ratio_to_best` divides by the best runtime among the
placements that fit (NaN for a row that does not, where one does; among all of them if none fits).

Budgets: every method that searches or samples (`searches`) gets the same budget per graph, simulator calls
and/or wall seconds (default: DEFAULT_BUDGET calls and at most `default_seconds(graph)`, which grows with the
graph). Its row records the budget beside what it spent: place seconds (compilation excluded: before the budget,
or met inside it and measured by placeto.compile_time) and compile seconds apart. A row whose place time is above
its seconds + OVER_BUDGET, or whose calls are above its calls (the `placeto` row finishes its greedy pass
whatever the budget), is `over_budget`, and the tables mark it.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
import textwrap
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
from tqdm import tqdm

from placeto.baselines import BUDGETED, DEFAULT_BUDGET, METHODS, MethodRun, NotApplicable, default_seconds, run_method
from placeto.rollouts.distributed import WorkerSpec, map_ordered
from placeto.methods import registry
from placeto.harness import plot_style
from placeto.feasibility import repair
from placeto.objective import evaluate, metered
from placeto.policies import resolve_checkpoint
from simulator.model.cluster import Cluster, PresetSpec, cluster_preset
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import PathLike, atomic_write_bytes
from simulator.model.placement_file import save_placement
from simulator.model.max_load import is_max_load, model_of
from simulator.model.result import lower_bound
from simulator.model.generate import layered_dag

# The learned methods' rows, from the registry (placeto.methods.registry). Trained on families ("placeto",
# "placeto-search", "gdp", "gdp-search"): they need a trained policy, --checkpoint if it is of their kind, else
# their kind's default shipped one (Method.default_checkpoint).
LEARNED = tuple(v for name in registry.names() if name not in registry.PER_GRAPH for v in registry.VARIANTS[name])
POLICY_METHOD = LEARNED[0]
# trained from scratch on each graph inside the method's budget (the seeds' RNN placer and hierarchical planner);
# not in "all" (training is slow): name them
PER_GRAPH = registry.PER_GRAPH
# names that stand for several methods in a --methods list: "all" (the default) is every baseline and every
# family-trained learned method, each with its shipped policy unless --checkpoint gives one of its kind
METHOD_SETS = {"all": (*METHODS, *LEARNED), "baselines": tuple(METHODS), "learned": LEARNED}
REFERENCES = ("single", "cpu-only", "expert")  # rows shown as they are: what a placer is measured against
OVER_BUDGET = 0.10  # a row whose place time exceeds its seconds by more than this share is over budget
Seconds = float | Callable[[Graph], float] | None  # a budget in seconds, or one per graph (default_seconds)


def searches(name: str) -> bool:
    """Whether method `name` spends a budget.

    The searching baselines, the learned and the per-graph methods do.
    """
    return name in BUDGETED or name in LEARNED or name in PER_GRAPH


@dataclasses.dataclass(frozen=True)
class Row:
    """One method on one graph and device count."""

    graph: str
    n_devices: int
    method: str
    runtime_us: float  # simulated runtime of the placement; NaN if the method does not apply
    ratio_to_best: float  # runtime / best runtime of this graph and device count (see the module docstring)
    ratio_to_lower_bound: float  # runtime / lower_bound_us
    lower_bound_us: float  # max(critical path, total compute / devices) on this cluster (simulator.lower_bound)
    oom: bool  # the placement exceeds some device's memory
    place_seconds: float  # wall time the method took to produce the placement (compilation excluded)
    simulator_calls: int  # placements the method simulated while searching (the final evaluation excluded)
    note: str = ""  # why the method does not apply, else ""
    compile_seconds: float = 0.0  # one-time cost: loading a policy, jit (or numba) compilation, before or inside
    budget_calls: float = math.nan  # simulator calls the method was given (inf: unlimited; NaN: it spends none)
    budget_seconds: float = math.nan  # wall seconds it was given (inf: unlimited; NaN: it spends none)
    trace: tuple = dataclasses.field(default=(), repr=False, compare=False)  # ((s, calls, best objective), ...)
    peak_fraction: float = math.nan  # the fullest device's peak bytes over its capacity (> 1: out of memory)
    repaired: str = ""  # how placeto.feasibility.repair made the placement fit ("": it did not need to; "none": it
    # could not)
    unit: str = "ms"  # how tables show runtime_us: "ms", or "max-load" (an msr-fiddle input: its own time units)

    @property
    def applies(self) -> bool:
        return not math.isnan(self.runtime_us)

    @property
    def over_budget(self) -> bool:
        """Whether the run went over its budget.

        It placed for longer than its seconds + OVER_BUDGET, or simulated more than its calls.
        """
        return self.applies and (self.place_seconds > self.budget_seconds * (1 + OVER_BUDGET)
                                 or self.simulator_calls > self.budget_calls)


def resolve_methods(methods: str | Sequence[str]) -> list[str]:
    """Method names, in order and once each, from "a,b" or a list.

    A name of METHOD_SETS ("all", "baselines", "learned") stands for its methods.

    Raises:
      InputError: an unknown name, or no names.
    """
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    known = set(METHODS) | set(LEARNED) | set(PER_GRAPH)
    for m in methods:
        if m not in known and m not in METHOD_SETS:
            names = ", ".join([*METHOD_SETS, *METHODS, *LEARNED, *PER_GRAPH])
            raise InputError(f"unknown method {m!r} (known: {names})")
    names = [name for m in methods for name in METHOD_SETS.get(m, (m,))]
    if not names:
        raise InputError("no methods given")
    return list(dict.fromkeys(names))


def compare(graphs: Sequence[Graph], device_counts: Iterable[int], methods: str | Sequence[str] = "all",
            cluster_name: str | Cluster = "placeto-k80", seed: int = 0, budget: float | None = DEFAULT_BUDGET,
            seconds: Seconds = default_seconds, checkpoint: str | Path | None = None, finetune_episodes: int = 0,
            progress: bool = True, save_placements: str | Path | None = None,
            workers: WorkerSpec | None = None) -> list[Row]:
    """Run `methods` on every graph and device count; a Row per triple.

    Every method that searches or samples gets the same budget per graph: `budget` and/or `seconds`, inference
    and fine-tuning included, jit compilation excluded (reported in `compile_seconds`).

    Args:
      methods: names or sets for `resolve_methods` ("all": every baseline and the learned methods).
      cluster_name: a preset (a name, or a PresetSpec that sets the capacity), used at each of `device_counts`; or
        a Cluster (e.g. from a cluster file), whose
        device count every count must be.
      budget: simulator calls per graph (None: unlimited).
      seconds: wall seconds per graph (None: unlimited; a function of the graph, by default `default_seconds`:
        its value for each graph).
      checkpoint: the learned methods' policy, a run directory or shipped name (None: the default shipped one).
      finetune_episodes: episodes of fine-tuning on each graph first.
      save_placements: a directory where every placement made is written (`placement_files`), atomically, as it
        is made.
      workers: a placeto.rollouts.distributed.WorkerSpec: each graph's rows are one Ray task, graphs run
        concurrently and rows come back in the serial order (with a call budget, the serial rows, times aside);
        placements are then written by this process as each graph finishes.
    """
    names = resolve_methods(methods)
    policy = dict(checkpoint=checkpoint, finetune_episodes=finetune_episodes)
    device_counts = list(device_counts)
    for n_dev in dict.fromkeys(device_counts):
        cluster_of(cluster_name, n_dev)  # InputError now, not after the first graph's runs
    files = placement_files(graphs, save_placements) if save_placements is not None else None
    runs = [(graph, device_counts, names, cluster_name, seed, budget, seconds, policy) for graph in graphs]
    # smoothing 0: the rate is the average since the start (runs differ 1000x in length: a one-pass baseline and
    # a budgeted search), and the ETA starts after the first run, not before it
    with tqdm(total=len(graphs) * len(device_counts) * len(names), disable=not progress, unit="run", smoothing=0,
              delay=0.5) as bar:
        if workers is not None:
            def done(k: int, result: tuple[list[Row], list]) -> None:
                for n_dev, name, placement in result[1] if files else []:
                    files[id(graphs[k])](cluster_of(cluster_name, n_dev), name)(placement)
                bar.update(len(result[0]))

            return [row for rows, _ in map_ordered(workers, graph_rows_task, runs, done) for row in rows]
        warm_up(warm_up_names(names), cluster_name)
        return [row for run in runs for row in _graph_rows(*run, files=files, bar=bar)[0]]


def _graph_rows(graph: Graph, device_counts: list[int], names: list[str], cluster_name: str | Cluster,
                seed: int, budget: float | None, seconds: float | None, policy: dict, files: dict | None = None,
                bar=None) -> tuple[list[Row], list[tuple[int, str, np.ndarray]]]:
    """The rows of `graph` (device counts x methods), placements made.

    Returns:
      (rows, their ratios set; [(devices, method, placement), ...]). Placements are written through `files`
      (`placement_files`) as they are made.
    """
    rows, made = [], []
    seconds = seconds(graph) if callable(seconds) else seconds
    for n_dev in device_counts:
        cluster = cluster_of(cluster_name, n_dev)
        raw = []
        for name in names:
            if bar is not None:
                bar.set_postfix_str(f"{graph.name} {n_dev}d {name}", refresh=False)
            write = files[id(graph)](cluster, name) if files else None

            def save(placement, n_dev=n_dev, name=name, write=write):
                made.append((n_dev, name, placement))
                if write is not None:
                    write(placement)

            raw.append(run_one(name, graph, cluster, seed, budget, seconds, policy, save))
            if bar is not None:
                bar.update()
        rows += _with_ratios(raw)
    return rows, made


def graph_rows_task(graph: Graph, device_counts: list[int], names: list[str], cluster_name: str | Cluster,
                    seed: int, budget: float | None, seconds: float | None, policy: dict):
    """`_graph_rows` as a Ray task (`map_ordered`).

    For placeto.rollouts.distributed.map_ordered. The worker's compilations are warmed up first; placements are
    returned rather than written.
    """
    warm_up(warm_up_names(names), cluster_name)
    return _graph_rows(graph, device_counts, names, cluster_name, seed, budget, seconds, policy)


def warm_up_names(names: Sequence[str]) -> list[str]:
    """The baselines whose numba kernels `names` will run.

    The baselines among them, and the list schedulers that every search starts from (etf, heft:
    placeto.baselines.moves.best_start).
    """
    starts = ["etf", "heft"] if any(searches(n) for n in names) else []
    return list(dict.fromkeys([*(n for n in names if n in METHODS), *starts]))


def warm_up(names: Sequence[str], cluster_name: str | Cluster = "placeto-k80") -> None:
    """Compile each method's numba kernels by a run on a tiny graph.

    So numba's one-time compilation (or cache loading) is not charged to the first graph's timed run. On 2
    devices of the preset, or on the given Cluster.
    """
    cluster = cluster_name if isinstance(cluster_name, Cluster) else cluster_of(cluster_name, 2)
    graph = layered_dag(12, seed=0)  # plain-number costs: any device kind
    for name in names:
        try:
            run_method(name, graph, cluster, 0, budget=32)
        except InputError:  # not applicable on the tiny graph (no expert placement, no CPU): nothing to compile
            pass


def cluster_of(cluster_name: str | PresetSpec | Cluster, n_devices: int) -> Cluster:
    """Preset `cluster_name` (a name or a PresetSpec) at `n_devices` devices, or the Cluster.

    Raises:
      InputError: a Cluster without `n_devices` devices.
    """
    if isinstance(cluster_name, PresetSpec):
        return cluster_name.at(n_devices)
    if not isinstance(cluster_name, Cluster):
        return cluster_preset(cluster_name, n_devices)
    if cluster_name.n_devices != n_devices:
        where = f"cluster {cluster_name.source or cluster_name.name}"
        raise InputError(f"{where} has {cluster_name.n_devices} devices, not {n_devices}")
    return cluster_name


def placement_files(graphs: Sequence[Graph], out_dir: str | Path) -> dict:
    """Placement writers: one file per graph x device count x method.

    Returns:
      {id(graph): f(cluster, method) -> f(placement)} writing `<out_dir>/<graph>.<D>dev.<method>.json` in the
      placement file format (simulator.model.placement_file.save_placement, atomic, with the graph and cluster
      it was made for). Graph names are made file-safe, and
      numbered (`name-2`) when two graphs share one.
    """
    out, used, files = Path(out_dir), set(), {}
    for graph in graphs:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", graph.name).strip(".") or "graph"
        k, unique = 1, stem
        while unique in used:
            k += 1
            unique = f"{stem}-{k}"
        used.add(unique)

        def for_run(cluster: Cluster, method: str, stem: str = unique, graph: Graph = graph):
            path = out / f"{stem}.{cluster.n_devices}dev.{method}.json"
            return lambda placement: save_placement(path, placement, cluster.device_names, graph=graph,
                                                    cluster=cluster)

        files[id(graph)] = for_run
    return files


def objective_lower_bound(graph: Graph, cluster: Cluster) -> float:
    """Below every placement's objective time: the simulator's lower bound, or for a max-load graph the larger of
    the costliest node and the total compute over the devices (each node at its cheapest device)."""
    if not is_max_load(graph):
        return lower_bound(graph, cluster)
    cost = np.where(np.isfinite(c := model_of(graph, cluster).cost), c, np.inf).min(axis=1)
    return max(float(cost.max(initial=0.0)), float(cost.sum()) / cluster.n_devices)


def shown(r: Row, value: float) -> float:
    """A time of row `r` as its table shows it: ms, or max-load in the graph's units."""
    return value / 1e3 if r.unit == "ms" else value


def run_one(name: str, graph: Graph, cluster: Cluster, seed: int, budget: float | None, seconds: float | None,
             policy: dict, save: Callable[[np.ndarray], None] | None = None) -> Row:
    """One method's Row on one graph, ratio_to_best still unset (NaN).

    Calls `save(placement)` when the method placed the graph.
    """
    base = dict(graph=graph.name, n_devices=cluster.n_devices, method=name, ratio_to_best=math.nan,
                lower_bound_us=objective_lower_bound(graph, cluster), unit="max-load" if is_max_load(graph) else "ms")
    if searches(name):
        base.update(budget_calls=math.inf if budget is None else float(budget),
                    budget_seconds=math.inf if seconds is None else float(seconds))
    try:
        if name in PER_GRAPH:  # trained from scratch on this graph inside the budget, whatever --checkpoint says
            run, compile_s = run_learned(name, graph, cluster, seed, budget, seconds)
        elif name in LEARNED:
            run, compile_s = run_learned(name, graph, cluster, seed, budget, seconds, **policy)
        else:
            run = run_method(name, graph, cluster, seed, budget=budget, seconds=seconds)
            compile_s = run.compile_seconds
    except NotApplicable as e:
        return Row(**base, runtime_us=math.nan, ratio_to_lower_bound=math.nan, oom=False, place_seconds=0.0,
                   simulator_calls=0, note=str(e))
    placement, repaired, seconds, calls = run.placement, "", run.seconds, int(run.simulator_calls)
    if name not in REFERENCES:
        with metered() as m:
            fixed = repair(graph, cluster, placement)
        placement, repaired = fixed.placement, fixed.how
        seconds, calls = seconds + m.elapsed(), calls + m.calls
    runtime, peak = evaluate(graph, placement[None], cluster)  # the objective's (max-load's, on such a graph)
    if save is not None:
        save(placement)
    fraction = float(np.max(peak[0] / cluster.capacity))
    return Row(**base, runtime_us=float(runtime[0]), ratio_to_lower_bound=float(runtime[0] / base["lower_bound_us"]),
               oom=fraction > 1, place_seconds=seconds, simulator_calls=calls,
               compile_seconds=compile_s, trace=run.trace, peak_fraction=fraction, repaired=repaired)


def run_learned(name: str, graph: Graph, cluster: Cluster, seed: int = 0, budget: float | None = DEFAULT_BUDGET,
                seconds: float | None = None, checkpoint: str | Path | None = None,
                finetune_episodes: int = 0) -> tuple[MethodRun, float]:
    """Run learned method row `name`: (MethodRun, compile seconds).

    Fine-tuned first if asked, inside one meter (see `compare`). The registry's Method that provides the row runs
    it (Method.run; placeto.methods.registry). "placeto" / "placeto-search":
    placeto.methods.placeto.guided.run_learned; "gdp" / "gdp-search": placeto.methods.gdp.place.run_gdp; "rnn" /
    "hierarchical": placed from their run directory `checkpoint`, or trained from scratch on the graph within the
    budget without one (placeto.methods.sequence.place; `finetune_episodes` does not apply). A family-trained
    method given another kind's checkpoint uses its own default shipped policy instead.

    Raises:
      NotApplicable: a family-trained method given a per-graph run.
    """
    method = registry.of_variant(name)
    if method.per_graph:  # from its run directory, or trained from scratch inside the budget
        return method.run(name, graph, cluster, seed, budget, seconds, checkpoint, finetune_episodes)
    owner = registry.run_method(checkpoint)
    if owner in registry.PER_GRAPH:
        raise NotApplicable(f"{name} cannot use a per-graph {owner} run (--checkpoint)")
    if checkpoint is not None:
        resolve_checkpoint(checkpoint)  # InputError on a name that is neither shipped nor a run directory
    if registry.policy_kind(registry.checkpoint_method(checkpoint)) != method.name:
        checkpoint = method.default_for(graph.n_nodes)  # each kind of learned method its own kind of policy
    return method.run(name, graph, cluster, seed, budget, seconds, checkpoint, finetune_episodes)


def _with_ratios(rows: list[Row]) -> list[Row]:
    """Rows with `ratio_to_best`: over the best runtime that fits; NaN for an OOM row where some row fits."""
    fits = [r.runtime_us for r in rows if r.applies and not r.oom]
    best = min(fits or [r.runtime_us for r in rows if r.applies] or [math.nan])
    return [dataclasses.replace(r, ratio_to_best=r.runtime_us / best if r.applies and best > 0
                                and not (r.oom and fits) else math.nan) for r in rows]


# ---- writers --------------------------------------------------------------------------------------------------
def write_csv(rows: Sequence[Row], path: PathLike) -> None:
    """Write the rows as CSV, the Row fields as columns (NaN: empty)."""
    import io

    fields = [f.name for f in dataclasses.fields(Row) if f.name != "trace"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        d = {k: v for k, v in dataclasses.asdict(r).items() if k != "trace"}
        writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()})
    atomic_write_bytes(path, buf.getvalue().encode())


def _cell(r: Row | None, best: bool) -> str:
    if r is None or not r.applies:
        return "—"
    if r.oom:
        return f"OOM ({r.peak_fraction:.2f}x mem)" + OVER_MARK * r.over_budget
    text = f"{shown(r, r.runtime_us):.2f}"
    return (f"**{text}**" if best else text) + OVER_MARK * r.over_budget


OVER_MARK = " (over)"  # after a runtime or place time whose run went over its budget (Row.over_budget)


def budget_text(rows: Sequence[Row]) -> str:
    """A method's budget over its rows, e.g. "1000 calls or 10 s".

    "1 s", "1000 calls", "1000 calls or 10 s" (a range where graphs differ); "—" for a method that spends none.
    """
    def span(values, unit, fmt):
        values = sorted({v for v in values if not math.isnan(v) and not math.isinf(v)})
        if not values:
            return ""
        lo, hi = fmt(values[0]), fmt(values[-1])
        return f"{lo} {unit}" if lo == hi else f"{lo}-{hi} {unit}"

    parts = [span([r.budget_calls for r in rows], "calls", lambda v: f"{v:.0f}"),
             span([r.budget_seconds for r in rows], "s", lambda v: f"{v:.3g}")]
    if all(math.isnan(r.budget_calls) and math.isnan(r.budget_seconds) for r in rows):
        return "—"
    return " or ".join(p for p in parts if p) or "unlimited"


def markdown_table(rows: Sequence[Row]) -> str:
    """The rows as markdown: a runtime table, then a summary per method.

    Runtimes in ms, one line per (graph, devices), one column per method, the best in bold. "OOM": the placement
    runs out of memory; "—": the method does not apply; " (over)": the run went over its budget (Row.over_budget). A
    second table summarises each method: mean ratio to the best, mean ratio to the lower bound, mean placement time
    beside its budget, compile time and simulator calls.
    """
    methods = list(dict.fromkeys(r.method for r in rows))
    keys = list(dict.fromkeys((r.graph, r.n_devices) for r in rows))
    by = {(r.graph, r.n_devices, r.method): r for r in rows}
    lines = ["| graph | #devices | lower bound | " + " | ".join(methods) + " |",
             "|---|---:|---:|" + "---:|" * len(methods)]
    for g, n in keys:
        group = [by.get((g, n, m)) for m in methods]
        first = next(r for r in group if r is not None)
        lb = shown(first, first.lower_bound_us)
        cells = [_cell(r, r is not None and r.applies and not r.oom and r.ratio_to_best == 1.0) for r in group]
        lines.append(f"| {g} | {n} | {lb:.2f} | " + " | ".join(cells) + " |")
    max_load = any(r.unit == "max-load" for r in rows)
    lines += ["", f"Runtimes in ms (simulated){'; msr-fiddle inputs: max-load, in their units' if max_load else ''}; OOM (Nx mem): out of memory, the fullest device's peak N times its "
              f"capacity; —: does not apply; (over): placed for longer than its budget + {OVER_BUDGET:.0%}, or "
              f"simulated more than its calls. Mean x best: over the runs that fit, or where nothing fits.", "",
              "| method | mean x best | mean x lower bound | mean place s | budget | mean compile s "
              "| mean simulator calls | runs | fits | repaired |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in methods:
        ok = [r for r in rows if r.method == m and r.applies]
        if not ok:
            budget = budget_text([r for r in rows if r.method == m])
            lines.append(f"| {m} | — | — | — | {budget} | — | — | 0 | — | — |")
            continue
        over = OVER_MARK if any(r.over_budget for r in ok) else ""
        ranked = [r.ratio_to_best for r in ok if not math.isnan(r.ratio_to_best)]
        lines.append(f"| {m} | {f'{np.mean(ranked):.3f}' if ranked else '—'} | "
                     f"{np.mean([r.ratio_to_lower_bound for r in ok]):.3f} | "
                     f"{np.mean([r.place_seconds for r in ok]):.2f}{over} | {budget_text(ok)} | "
                     f"{np.mean([r.compile_seconds for r in ok]):.2f} | "
                     f"{np.mean([r.simulator_calls for r in ok]):.0f} | {len(ok)} | "
                     f"{sum(not r.oom for r in ok)} | {sum(r.repaired not in ('', 'none') for r in ok)} |")
    notes = []
    for m in methods:
        over = [r for r in rows if r.method == m and r.over_budget]
        if over:
            worst = max(over, key=lambda r: r.place_seconds / r.budget_seconds
                        if r.budget_seconds > 0 else r.simulator_calls / r.budget_calls)
            notes.append(f"- {m} went over its budget in {len(over)} of {sum(r.method == m for r in rows)} runs, "
                         f"e.g. {worst.graph} at {worst.n_devices} devices: {worst.place_seconds:.2f} s and "
                         f"{worst.simulator_calls} calls against {budget_text([worst])}")
    for m in methods:
        skipped = [r for r in rows if r.method == m and r.note]
        if skipped:
            notes.append(f"- {m} does not apply in {len(skipped)} of {sum(r.method == m for r in rows)} runs, "
                         f"e.g. {skipped[0].note}")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def plot_compare(rows: Sequence[Row], out_dir: PathLike) -> list[Path]:
    """A bar chart per graph in `out_dir`; returns the paths.

    Each is `<out_dir>/<graph>.png`: the simulated step time (ms) of each method, grouped by device count, in the
    colours of placeto.harness.plot_style (learned methods outlined in black); hatched bars ran out of memory; a
    dashed line marks each device count's lower bound; methods that do not apply are listed in the legend. Bars
    spanning more than plot_style.LOG_SPAN get a log axis (plot_style.wants_log_axis).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for g in dict.fromkeys(r.graph for r in rows):
        fig = _compare_figure(plt, [r for r in rows if r.graph == g], g)
        path = out_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', g)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def _compare_figure(plt, rows: Sequence[Row], graph: str):
    """One graph's bar chart (see plot_compare)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    mine = [r for r in rows if r.applies]
    methods = list(dict.fromkeys(r.method for r in mine))
    counts = sorted({r.n_devices for r in rows})
    by = {(r.n_devices, r.method): r for r in mine}
    colors = plot_style.colors(methods)
    width = 0.84 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(min(18.0, max(5.0, 0.24 * len(counts) * len(methods) + 1.5)) + 2.8, 4.6),
                           layout="constrained")
    for j, m in enumerate(methods):
        for i, n in enumerate(counts):
            r = by.get((n, m))
            if r is None:
                continue
            x = i + (j - (len(methods) - 1) / 2) * width
            ax.bar(x, r.runtime_us / 1e3, width, hatch="///" if r.oom else None,
                   **plot_style.bar_style(m, colors[m]))
            if r.oom:
                ax.text(x, r.runtime_us / 1e3, "OOM", ha="center", va="bottom", fontsize=7, rotation=90)
    for i, n in enumerate(counts):
        lb = next((r.lower_bound_us for r in rows if r.n_devices == n), None)
        if lb is not None and not math.isnan(lb):
            ax.hlines(lb / 1e3, i - 0.46, i + 0.46, colors="black", linestyles="dashed", linewidth=1.2)
    ax.set_xticks(range(len(counts)), [f"{n} devices" for n in counts])
    ax.set_xlim(-0.55, len(counts) - 0.45)
    heights = [r.runtime_us / 1e3 for r in mine]
    top = max(heights + [0.0])
    if plot_style.wants_log_axis(heights):  # bars spanning more than LOG_SPAN: the short ones stay visible
        ax.set_yscale("log")
        low = min(h for h in heights + [r.lower_bound_us / 1e3 for r in rows] if h > 0)
        ax.set_ylim(low / 1.5, top * (2.0 if any(r.oom for r in mine) else 1.3))
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 0.1, 0.2, 0.5, 1, ... ms, in plain numbers
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel("simulated step time (ms, log scale)")
    else:
        if top > 0:  # room above the tallest bar for its "OOM" label
            ax.set_ylim(0, top * (1.14 if any(r.oom for r in mine) else 1.05))
        ax.set_ylabel("simulated step time (ms)")
    ax.set_title(f"{graph}: simulated step time of each method's placement")
    ax.grid(axis="y", alpha=0.3)
    handles = [Patch(label=m, **plot_style.bar_style(m, colors[m])) for m in methods]
    handles.append(Line2D([], [], color="black", linestyle="dashed", label="lower bound (max of critical\n"
                          "path, compute / devices)"))
    if any(plot_style.is_learned(m) for m in methods):
        handles.append(Patch(facecolor="white", edgecolor="black", linewidth=1.4, label=plot_style.LEARNED_NOTE))
    if any(r.oom for r in mine):
        handles.append(Patch(facecolor="white", edgecolor="gray", hatch="///", label="out of memory (OOM)"))
    absent = list(dict.fromkeys(r.method for r in rows if not r.applies and r.method not in methods))
    if absent:
        handles.append(Patch(facecolor="none", edgecolor="none", label="does not apply (no bar):\n"
                             + _wrap(", ".join(absent), 30)))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8,
              title="method", title_fontsize=8)
    return fig


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width))




