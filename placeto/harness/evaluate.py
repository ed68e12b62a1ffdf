"""`placeto eval` and `placeto calibrate`: simulated against measured step times of placements.

`evaluate` simulates each placement and, given a `HardwareRunner`, runs it on local JAX devices
(`simulator.hardware.dispatch`): graphs traced from JAX programs (family, benchmark and `import-jax` graphs) execute their
real operations, each device's consecutive nodes/groups as one jitted stage, from one thread; graphs that only
carry costs run synthetic kernels calibrated to take each node's cost, one task per node. Units are dispatched
in the order the simulator starts them (`dispatch_order`), for staged plans regrouped so a device's units stay
together where dependencies allow (`staged_order`), and the placements' steps are interleaved so a change in the
machine's load hits them alike.

`--devices` is a count or a list of local devices (`gpu:0,cpu:0`, simulator.hardware.devices.parse_device_spec):
the runner uses those devices in that order, the placements have that many devices, and the cluster (--cluster,
else the calibration `place --hardware` caches for these devices, measured now when none is cached) gives each
device its own kind, so a GPU and the CPU are simulated with their own costs.

For the comparison to mean anything the simulator must model these devices: use the cluster `calibrate` measures
(device kind "local-<platform>", so the graph's measured costs from `placeto profile` are used) and profile the
graph on this machine first; without measured costs the analytic "cpu" costs are used, with a warning. Op-level
profiles count one dispatch per op, several times what a fused group costs: with --hardware the default
(`--costs step`) therefore times every node/group's kernels inside one compiled step (simulator.measure.graph_profile,
simulator.measure.step_profile) and simulates with that; `--costs units` times each alone as its own call
(`simulator.measure.calibrate.profile_plan`); `--costs graph` simulates the graph's recorded costs.

The summary says what is compared (each placement's simulated step time against its measured median step
time: error = (simulated - measured) / measured), the median and mean |error| and the Spearman rank correlation
with its n (it needs at least MIN_RANKED (5) placements and is printed "n/a (reason)" otherwise, never "nan");
given a single-device placement, the placements measured faster and slower than it; the fastest measured placement
against the plain jit of the graph's step, timed in a fresh process with JAX's defaults before and after the
placements (simulator.hardware.plain_jit: the baseline to read speedups against); and whether the devices ran concurrently
(placeto.harness.calibration.concurrency_line): on host CPU devices sharing cores they do not, and measured speedups over
one device cannot appear.

This module does not import JAX at import time: the CLI must first set the host device count
(`simulator.hardware.devices.ensure_host_devices`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.measure.agreement import (ERROR_MEANING, MIN_RANKED, Agreement, Concordance, EvalRow,  # noqa: F401
                               agreement, concordance, format_agreement, format_spearman, spearman,
                               spearman_note, versus_single)  # (re-exported: eval's statistics)
from placeto.cli.arguments import (COUNT, DEVICE_SPEC, POSITIVE, devices_help, placement_devices, resolve_devices,
                               spec_count)
from simulator.workloads.families import program_of  # noqa: F401  (re-exported; it lives beside retrace)
from placeto.harness.calibration import Concurrency, cluster_summary, concurrency_line, describe_devices, \
    measure_concurrency, refit
from simulator.model.cluster import PRESETS, Cluster, cluster_preset, load_cluster
from simulator.model.errors import InputError
from simulator.measure.fit import WORKLOAD_FREE
from simulator.model.graph import DEFAULT_KIND, Graph
from simulator.model.io import (PathLike, atomic_write_bytes, check_distinct_paths, check_output_path, load_graph,
                          load_placement)

MODES = ("auto", "program", "synthetic")


class Measured(NamedTuple):
    """`HardwareRunner.simulate_and_measure`'s result."""

    simulated_us: list  # float per placement: the simulated step time, microseconds
    timings: list  # simulator.hardware.timing.Timing per placement
    scale: float  # the units' costs' factor the simulation used (1.0: as the runner has them)


class RigFit(NamedTuple):
    """What `HardwareRunner.with_rig_costs` measured to fit the rig's costs to the graph: kept on the runner so
    that the fit can be read and re-simulated (experiments.benchmarks.staged_fidelity --dump)."""

    cached: Any  # simulator.engine.staged.RigCosts from the cache, before the graph's own factors
    step_us: float  # the single device's step (the whole graph as one stage on the first worker), median
    observed: Any  # simulator.measure.boundary_costs.Observed of the chunked plan (None with one worker); the Boundary
    #   fitted on it is simulator.measure.boundary_costs.fit_observed(observed, cached)


@dataclasses.dataclass
class HardwareRunner:
    """Turns placements of one graph into runnable plans on local devices."""

    graph: Graph
    cluster: Cluster  # the simulation cluster (its device count is the number of devices used)
    mode: str  # "program" or "synthetic"
    devices: list
    make_plan: Callable[..., Any]  # (placement int[N], dispatch order int[N], stages: bool) -> Plan
    threads: bool | None = None  # one dispatching thread per device? (None: simulator.hardware.dispatch.run_plan decides)
    stages: bool = True  # each device's consecutive units as one jitted stage (program modes only)
    rig: Any = None  # simulator.hardware.rig.pool.ProcessRig: the devices are its worker processes (None: this process)
    stage_order: str = "staged"  # "staged": a device's units kept together where dependencies allow (few stages,
    #   few dispatches: staged_order); "simulated": the simulated start order (more, shorter stages, so a value
    #   another device waits for is ready sooner: what devices that really run at once need)
    holders: np.ndarray | None = None  # bool[N] units that only hold values (dispatch nothing; program modes)
    rig_costs: Any = None  # simulator.engine.staged.RigCosts of the process rig (`with_rig_costs`): then `simulate`
    #   predicts the rig's stages (simulator.engine.staged), not the units one by one
    rig_fit: RigFit | None = None  # how `with_rig_costs` fitted `rig_costs` to this graph

    def plan(self, placement: np.ndarray):
        """The plan of `placement`: units in simulated start order, and when staged with stage_order "staged",
        each device's units kept together where dependencies allow (`staged_order`)."""
        return self.make_plan(placement, self.order(placement), self.stages and self.mode != "synthetic")

    def order(self, placement: np.ndarray) -> np.ndarray:
        """int64[N] the dispatch order `plan` gives the units of `placement` (staged or not)."""
        order = dispatch_order(self.graph, placement, self.cluster)
        if self.stages and self.mode != "synthetic" and self.stage_order == "staged":
            order = staged_order(self.graph, placement, order)
        return np.asarray(order, dtype=np.int64)

    def simulate(self, placement: np.ndarray, scale: float = 1.0) -> float:
        """Simulated step time of `placement` (microseconds) as this runner runs it: with `rig_costs` (the process
        rig, staged program modes) the staged simulation of the very stages `plan` cuts, with the rig's costs
        (simulator.engine.staged.simulate_staged), the units' costs multiplied by `scale` (the stages still the ones
        `plan` cuts: `simulate_and_measure`); otherwise the simulator's per-unit model on the cluster."""
        from simulator import simulate

        placement = np.asarray(placement, dtype=np.int32)
        if not self.staged_rig:
            return float(simulate(self.graph, placement, self.cluster).runtime)
        from simulator.engine.staged import simulate_staged

        graph = self.graph
        if scale != 1.0:
            kind = self.cluster.kinds[0]
            graph = graph.with_costs(kind, graph.cost_for(kind) * scale)
        return simulate_staged(graph, placement, self.cluster, self.order(placement), self.rig_costs,
                               self.holders).runtime_us

    @property
    def staged_rig(self) -> bool:
        """Whether `simulate` is the staged simulation of the process rig (rig costs, staged program modes)."""
        return self.rig_costs is not None and self.holders is not None and self.stages

    def scale_to(self, wall_us: float, costs: Any = None) -> float:
        """The factor that makes the units' costs (those of the cluster's first kind), with what the staged
        simulation charges the single device's one stage beyond them (its launch and input reads, the step's round
        trip; with `costs`, else the runner's rig costs), add up to `wall_us`: the single device's step measured on
        the rig. 1.0 when nothing is profiled or the step is no longer than what is charged beyond the units."""
        from simulator.engine.staged import simulate_staged

        unit = self.graph.cost_for(self.cluster.kinds[0])
        profiled = float(unit[~self.holders].sum())
        single = np.zeros(self.graph.n_nodes, dtype=np.int32)
        beyond = simulate_staged(self.graph, single, self.cluster, self.order(single), costs or self.rig_costs,
                                 self.holders).runtime_us - profiled
        ran = wall_us - beyond
        return ran / profiled if profiled > 0 and ran > 0 else 1.0

    def with_rig_costs(self, progress: Callable[[str], None] = print, steps: int = 5) -> "HardwareRunner":
        """This runner simulating its rig's stages (`simulate`): the process rig's costs from the cache, measured
        now when none is (simulator.measure.cluster_cache.cached_rig_costs), and the units' costs scaled to the rig's own
        speed: profiled in this process, they are scaled so that, with what the staged simulation charges the single
        stage beyond them (its launch and input reads, the step's round trip), they add up to the whole step run as
        one stage on the rig's first worker (median of `steps` after two warm-up steps; freeing the values a step
        made included): the profile says how the step's time splits over its units, the rig how long the step
        takes there. The contention between two workers is this graph's own (simulator.measure.rig_step.graph_contention:
        its whole step on worker 0 while worker 1 runs it too, against alone), not the calibration workload's, and
        so are the per-MB charges of values crossing stages, on top of the workload's, and the factors of the cached
        launch and transfer costs (simulator.measure.boundary_costs: the step cut into runs alternating between two workers;
        the units' factor is then computed again with the single stage's launch so scaled). As is without a process
        rig or for synthetic kernels (one task per node: the per-unit model is theirs)."""
        if self.rig is None or self.holders is None or not self.stages:
            return self
        from simulator.measure.cluster_cache import cached_rig_costs
        from simulator.measure.rig_step import graph_contention, measured_step

        costs = cached_rig_costs(self.rig, self.devices, progress=progress)
        kind = self.cluster.kinds[0]
        unit = self.graph.cost_for(kind)
        step = measured_step(self, np.zeros(self.graph.n_nodes, dtype=np.int32), steps=steps, warmup=2)
        factor = self.scale_to(step.wall_ns / 1e3, costs)
        graph, fitted = self.graph, RigFit(costs, step.wall_ns / 1e3, None)
        if factor != 1.0:
            profiled = float(unit[~self.holders].sum())
            progress(f"the units' costs scaled by {factor:.3f} to the rig's own speed (the whole step as one stage "
                     f"on its first worker: {profiled * factor / 1e3:.2f} ms beyond the stage's launch and input "
                     f"reads and the step's round trip, profiled {profiled / 1e3:.2f} ms)")
            graph = graph.with_costs(kind, unit * factor)
        if self.rig.n_devices > 1:
            from simulator.measure.boundary_costs import CHUNKS, fit_observed, observe

            observed = observe(dataclasses.replace(self, graph=graph, rig_costs=costs))
            b = fit_observed(observed, costs)
            fitted = fitted._replace(observed=observed)
            progress(f"stages and transfers on this graph (cut into {CHUNKS} runs alternating two workers: "
                     f"{b.stages} stages, {b.transfers} batches): the cached launch costs x{b.stage_factor:.2f}, "
                     f"the transfers' x{b.transfer_factor:.2f}; values crossing stages +{b.per_input_mb:.0f} us "
                     f"per MB a stage reads, +{b.per_output_mb:.0f} us per MB it makes for others")
            costs = b.added_to(costs)
            graph = graph.with_costs(kind, unit * self.scale_to(step.wall_ns / 1e3, costs))  # its launch anew
            c = graph_contention(self, steps=steps)
            progress(f"contention: the whole step on one worker ran {c.together_us / 1e3:.2f} ms while another ran "
                     f"it too, {c.alone_us / 1e3:.2f} ms alone (+{100 * c.factor:.0f}%)")
            costs = dataclasses.replace(costs, contention=c.factor)
        return dataclasses.replace(self, graph=graph, rig_costs=costs, rig_fit=fitted)

    def measure(self, placements: Sequence[np.ndarray], repeats: int = 5, warmup: int = 2) -> list:
        """simulator.hardware.timing.Timing of one step of each placement, the placements' steps interleaved
        (simulator.hardware.timing.time_interleaved); on the process rig when the runner has one (`rig`)."""
        return self._timed(placements, repeats, warmup, None, rescale=False)[0]

    def simulate_and_measure(self, placements: Sequence[np.ndarray], repeats: int = 5, warmup: int = 2,
                             progress: Callable[[str], None] = print, rescale: bool = True) -> "Measured":
        """Every placement simulated (`simulate`) and measured (`measure`). On the process rig's staged simulation
        (`staged_rig`), with `rescale`, the units' costs are scaled again to the single device's step (all on the
        first worker) as the same timed rounds measure it (`scale_to` of its median): the anchor of the model,
        taken in the rounds it is compared with, so that a machine whose speed moves between the costs' fit and
        the rounds moves the anchor with it (this 2-core machine drifted 10-30% within minutes: inception_v3's
        single device ran 570 ms a step just before its rounds and 624 in them). The single device's own
        simulated time then equals its measured one by construction: it calibrates, it is not a prediction. Its
        plan is timed in the rounds even when it is not one of the placements (and its times left out)."""
        arrays = [np.asarray(p, dtype=np.int32) for p in placements]
        timings, factor = self._timed(arrays, repeats, warmup, progress, rescale and self.staged_rig)
        return Measured([self.simulate(p, factor) for p in arrays], timings, factor)

    def adds_anchor(self, placements: Sequence[np.ndarray]) -> bool:
        """Whether `simulate_and_measure` (with rescale) times the single device's plan beside `placements` in the
        rounds: on the staged rig, when none of them is the single device (every unit on device 0)."""
        return self.staged_rig and all(np.asarray(p).any() for p in placements)

    def _timed(self, arrays: Sequence[np.ndarray], repeats: int, warmup: int, progress: Callable[[str], None] | None,
               rescale: bool) -> tuple[list, float]:
        """([Timing] of each placement, the units' costs' factor): `simulate_and_measure` without the simulation."""
        from simulator.hardware.timing import time_rounds, timing_of, warm_plans

        plans = [self.runnable(p) for p in arrays]
        extra, factor = [], 1.0  # the single device's plan when it is not among the placements
        try:
            at = next((i for i, p in enumerate(arrays) if not p.any()), None) if rescale else None
            if rescale and self.adds_anchor(arrays):
                extra, at = [self.runnable(np.zeros(self.graph.n_nodes, np.int32))], len(plans)
            warm_plans(plans + extra, warmup, self.threads)
            times = time_rounds(plans + extra, repeats, self.threads)
            if rescale:
                step_us = timing_of(times[at]).median_us
                factor = self.scale_to(step_us)
                (progress or print)(f"the units' costs scaled again by {factor:.3f}: the single device ran "
                                    f"{step_us / 1e3:.2f} ms a step in the timed rounds (the model's anchor)")
        finally:
            for plan in plans + extra:
                getattr(plan, "close", lambda: None)()
        return [timing_of(t) for t in times[:len(plans)]], factor

    def runnable(self, placement: np.ndarray):
        """`plan(placement)`, loaded on the process rig when the runner has one (simulator.hardware.rig.plans.RigPlan:
        close it after use), else the Plan itself."""
        if self.rig is None:
            return self.plan(placement)
        from simulator.hardware.rig.plans import to_rig

        # one scope per program: the runners `with_step_costs` / `with_rig_costs` derive share make_plan (and its
        # resident values), so the parameters go to each worker once, not once per derived runner
        return to_rig(self.plan(placement), self.rig, scope=id(self.make_plan))

    def close(self) -> None:
        """Stop the process rig's workers, if the runner has a rig."""
        if self.rig is not None:
            self.rig.close()

    def unit_costs(self, repeats: int = 5, device: int = 0) -> np.ndarray:
        """float64[N] microseconds of every node (group) as executed, alone on device index `device` (net of the
        dispatch floor: simulator.measure.calibrate.profile_plan; one task per unit); the recorded costs for synthetic
        execution."""
        if self.mode == "synthetic":
            return self.graph.cost_for(self.cluster.kinds[device])
        from simulator.measure.calibrate import profile_plan

        one_device = np.full(self.graph.n_nodes, device, dtype=np.int32)
        return profile_plan(self.make_plan(one_device, self.graph.topo_order, False), repeats)

    def with_step_costs(self, repeats: int = 5, program: str | None = None, args_spec: str | None = None,
                        exported: str | None = None) -> "HardwareRunner":
        """This runner with its graph costed under every kind of the cluster by the units' kernel time inside one
        compiled step on the first device of that kind (simulator.measure.graph_profile, method "step")."""
        from simulator.measure.graph_profile import graph_program, measure

        prog = graph_program(self.graph, program, args_spec, exported)
        graph = self.graph
        with self.one_core():
            for kind in dict.fromkeys(self.cluster.kinds):
                cost, _ = measure(prog, self.devices[self.cluster.kinds.index(kind)], "step", repeats, 2)
                graph = graph.with_costs(kind, cost)
        return dataclasses.replace(self, graph=graph)

    def one_core(self):
        """A context in which this process measures as a device of the runner's rig runs: on one core for the
        process rig (simulator.hardware.rig.pool.one_core), as it is otherwise."""
        if self.rig is None:
            return contextlib.nullcontext()
        from simulator.hardware.rig.pool import one_core

        return one_core()

    def with_unit_costs(self, repeats: int = 5) -> "HardwareRunner":
        """This runner with its graph costed by `unit_costs` under every kind of the cluster, each measured on
        the first device of that kind (mixed devices: a GPU's and the CPU's costs)."""
        graph = self.graph
        with self.one_core():
            for kind in dict.fromkeys(self.cluster.kinds):
                graph = graph.with_costs(kind, self.unit_costs(repeats, self.cluster.kinds.index(kind)))
        return dataclasses.replace(self, graph=graph)


def simulation_cluster(graph: Graph, cluster: Cluster) -> tuple[Cluster, str | None]:
    """(`cluster`, None) if the graph has costs for every device's kind; else, device by device, a device whose
    kind the graph lacks takes the analytic costs of the same model ("local-h100" -> "h100") or else "cpu", with
    a warning naming them; InputError if a device has neither. Mixed clusters keep a kind per device."""
    if DEFAULT_KIND in graph.costs or all(graph.has_costs(k) for k in cluster.kinds):  # recorded or derived
        return cluster, None
    has = ", ".join(graph.kinds) or "none"
    devices, swaps = [], {}
    for d in cluster.devices:
        if graph.has_costs(d.kind):
            devices.append(d)
            continue
        analytic = next((k for k in (d.kind.removeprefix("local-"), "cpu") if graph.has_costs(k)), None)
        if analytic is None:
            if not can_run_program(graph):
                raise InputError(f"graph {graph.name!r} cannot be run here: no {d.kind!r} or 'cpu' costs (it has: "
                                 f"{has}) and no program in its meta to profile or execute")
            raise InputError(f"graph {graph.name!r} has no {d.kind!r} costs (it has: {has}); run `placeto "
                             f"profile` on it first")
        swaps[d.kind] = analytic
        devices.append(dataclasses.replace(d, kind=analytic))
    text = ", ".join(f"{k!r} costs; simulating with analytic {a!r} costs" for k, a in swaps.items())
    return dataclasses.replace(cluster, devices=tuple(devices)), (
        f"warning: graph {graph.name!r} has no {text} (run `placeto profile` on the graph for measured ones)")


def dispatch_order(graph: Graph, placement: np.ndarray, cluster: Cluster) -> np.ndarray:
    """int64[N] nodes by simulated start time, ties in topological order: the order units are dispatched in."""
    from simulator import simulate

    start = simulate(graph, np.asarray(placement, dtype=np.int32), cluster).start
    rank = np.empty(graph.n_nodes, dtype=np.int64)
    rank[graph.topo_order] = np.arange(graph.n_nodes)
    return np.lexsort((rank, start))


def staged_order(graph: Graph, placement: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """int64[N] a topological order of the nodes that follows `order` (a topological order, e.g. simulated
    start order) but, once a node of device d is taken, keeps taking the earliest (in `order`) node of d whose
    inputs are all taken, before moving on to the earliest node not yet taken. Each device's nodes then form
    few runs, and a staged plan few stages (dispatches): interleaved devices would split every stage.

    The price: a stage's outputs exist only when the whole stage has run, so a node another device waits for
    may finish later than in `order` (the simulator does not model this)."""
    import heapq

    place = np.asarray(placement, dtype=np.int64)
    order = [int(u) for u in order]
    n = graph.n_nodes
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    indeg = np.bincount(graph.edge_dst, minlength=n) if len(graph.edge_dst) else np.zeros(n, np.int64)
    children: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
        children[u].append(v)
    ready: dict[int, list[int]] = {}  # device -> heap of positions of nodes whose inputs are all taken
    for u in range(n):
        if indeg[u] == 0:
            heapq.heappush(ready.setdefault(int(place[u]), []), int(position[u]))
    taken = np.zeros(n, dtype=bool)
    out, first, device = [], 0, -1
    while len(out) < n:
        if not ready.get(device):
            while taken[order[first]]:
                first += 1
            device = int(place[order[first]])  # its inputs come earlier in `order`, all taken: it is ready
        u = order[heapq.heappop(ready[device])]
        taken[u] = True
        out.append(u)
        for v in children[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready.setdefault(int(place[v]), []), int(position[v]))
    return np.asarray(out, dtype=np.int64)


def can_run_program(graph: Graph, program: str | None = None, exported: str | None = None) -> bool:
    """Whether `graph`'s program can run: a zoo program in its meta, one the user named (--program), or its
    exported program (simulator.tracing.export: --exported, or `<graph>.export.zip` beside the graph file). A program
    named by the graph file's meta.source is never imported on the file's word."""
    from simulator.tracing.export import find_export

    return "program" in graph.meta or program is not None or find_export(graph, exported) is not None


def hardware_runner(graph: Graph, cluster: Cluster, mode: str = "auto", seed: int = 0, program: str | None = None,
                    args_spec: str | None = None, exported: str | None = None,
                    devices: int | tuple | None = None, rig: str = "threads") -> HardwareRunner:
    """A runner of `graph` on the local devices of `devices` (a device spec, simulator.hardware.devices: a count,
    or a platform:index list such as ("gpu", 0), ("cpu", 0); default: the first cluster.n_devices), one per
    cluster device.

    mode "program" runs the graph's program: re-traced when `program` is named on the command line, else its
    exported program (simulator.tracing.export.find_export: `exported`, or the file beside the graph), else re-traced
    from a zoo program of its meta (simulator.workloads.families.retrace; InputError otherwise); "synthetic" runs calibrated
    kernels taking the simulation costs; "auto" picks "program" when possible.

    rig "threads": the devices are this process's JAX devices (host CPU devices share one thread pool); "processes":
    one worker process per device (simulator.hardware.rig.pool, host CPU devices only), started here: close() the
    runner when done (they also stop when this process exits). On the process rig the stages follow the simulated
    start order (stage_order "simulated"): measured on inception_v3 at 2 devices, 1.1-1.4x faster there than
    keeping a device's units together, whose long stages leave the other device waiting
    (experiments/results/benchmarks/rig_concurrency.md).
    """
    from simulator.measure.calibrate import calibrate_kernel
    from simulator.hardware.devices import local_devices
    from simulator.tracing.lowering import leaf_values, unit_graph, unit_programs
    from simulator.hardware.plans import program_plan
    from simulator.hardware.synthetic import synthetic_plan

    if mode not in MODES:
        raise InputError(f"unknown execution mode {mode!r} (known: {', '.join(MODES)})")
    spec = cluster.n_devices if devices is None else devices
    devices = local_devices(spec)
    if len(devices) != cluster.n_devices:
        raise InputError(f"--devices names {len(devices)} devices but the cluster has {cluster.n_devices}")
    workers = start_rig(rig, devices)
    order = "staged" if workers is None else "simulated"  # see the docstring
    if mode == "synthetic" or (mode == "auto" and not can_run_program(graph, program, exported)):
        if not (DEFAULT_KIND in graph.costs or all(k in graph.costs for k in cluster.kinds)):
            raise InputError(f"graph {graph.name!r} cannot be run: its meta has no program to re-trace and it has "
                             f"no {cluster.kinds[0]!r} costs for synthetic kernels")
        cost = graph.cost_matrix(cluster.kinds)
        kernels = [calibrate_kernel(d) for d in devices]  # mixed devices run the kernel at different speeds

        def make_synthetic(placement, order, stages=False):
            del stages  # synthetic kernels run one task per node
            return synthetic_plan(graph, placement, cost[np.arange(graph.n_nodes), placement], devices, kernels,
                                  order)

        return HardwareRunner(graph, cluster, "synthetic", devices, make_synthetic, rig=workers,
                              stage_order=order)
    from simulator.tracing import export

    bundle = export.find_export(graph, exported) if program is None else None
    if bundle is not None:
        vals = export.values(bundle, seed)

        def make_exported(placement, order, stages=True):
            from simulator.hardware.plans import units_plan  # (export.bundle_plan: per-unit, as measure_units needs)

            return units_plan(bundle.units, vals, placement, devices, bundle.outputs, None, bundle.cache, order,
                              stages=stages)

        return HardwareRunner(graph, cluster, "exported-program", devices, make_exported, rig=workers,
                              stage_order=order, holders=np.asarray([u.body is None for u in bundle.units]))
    traced, op_to_group, args = program_of(graph, program, args_spec)
    values = leaf_values(traced, args, seed)

    def make_program(placement, order, stages=True):
        return program_plan(traced, values, placement, devices, op_to_group, order, stages)

    units = unit_programs(traced, op_to_group, graph.n_nodes if op_to_group is not None else None)
    if op_to_group is not None and "retrace_note" in traced.graph.meta:  # mapped onto the file's groups: simulate
        graph = unit_graph(graph, units, traced.graph)  # the units' own dataflow, not the file's edges
    return HardwareRunner(graph, cluster, "program", devices, make_program, rig=workers, stage_order=order,
                          holders=np.asarray([u.body is None for u in units]))


RIGS = ("threads", "processes")
RIG_HELP = ("where the devices run. processes: one worker process per host CPU device, pinned to a core, with its "
            "own single-core JAX client; stages shipped with jax.export, transfers through shared memory "
            "(simulator.hardware.rig.pool). threads: this process's JAX devices (what GPUs use), whose host CPU devices "
            "share one thread pool. Default: processes when every device is a host CPU device, because only there "
            "do they really run at once (two chains of 700x700 matmuls on 2 devices: 1.89-1.94x as fast together "
            "as one after the other, against 1.24-1.41x for host devices of one process, "
            "experiments/results/benchmarks/rig_concurrency.md), so a speedup measured there comes from running "
            "the devices at once; threads otherwise")


def default_rig(spec: Any) -> str:
    """The --rig default for a device spec: "processes" when every device is a host CPU device (a count on a
    machine without GPUs, or a list of cpu entries), else "threads"."""
    from simulator.hardware.devices import default_local_spec

    if isinstance(spec, int):
        return "processes" if isinstance(default_local_spec(spec), int) else "threads"
    return "processes" if all(p == "cpu" for p, _ in spec) else "threads"


def start_rig(rig: str | None, devices: Sequence[Any]) -> Any:
    """The simulator.hardware.rig.pool.ProcessRig of `devices` for rig "processes" (InputError unless every device is
    a host CPU device), None for "threads"."""
    if rig not in RIGS:
        raise InputError(f"--rig: unknown rig {rig!r} (known: {', '.join(RIGS)})")
    if rig == "threads":
        return None
    if any(d.platform != "cpu" for d in devices):
        raise InputError(f"--rig processes runs host CPU devices only; --devices names "
                         f"{', '.join(sorted({d.platform for d in devices} - {'cpu'}))} ones (use --rig threads)")
    from simulator.hardware.rig.pool import PIN, ProcessRig

    return ProcessRig(len(devices), pin=PIN)


def evaluate(graph: Graph, placements: Sequence[tuple[str, np.ndarray]], cluster: Cluster,
             runner: HardwareRunner | None = None, repeats: int = 5, warmup: int = 2,
             progress: Callable[[str], None] | None = None) -> list[EvalRow]:
    """Simulate every (name, placement) on `cluster` and, with a `runner`, measure it on hardware; with a runner
    the simulation is the runner's (`HardwareRunner.simulate_and_measure`: on the process rig the staged one, its
    units' costs scaled to the single device's median step in the same timed rounds)."""
    from simulator import simulate

    arrays = [np.asarray(p, dtype=np.int32) for _, p in placements]
    if runner is None:
        simulated, measured = [float(simulate(graph, p, cluster).runtime) for p in arrays], [None] * len(arrays)
    else:
        quiet = progress or (lambda line: None)
        simulated, measured, _ = runner.simulate_and_measure(arrays, repeats, warmup, quiet)
    rows = [EvalRow(name, sim, m) for (name, _), sim, m in zip(placements, simulated, measured)]
    for row in rows if progress else ():
        progress(format_row(row))
    return rows


def format_row(row: EvalRow, width: int = 28) -> str:
    """One table line: placement (file name), simulated ms and, if measured, median [IQR, min] ms and error."""
    name = Path(row.name).name
    name = name if len(name) <= width else "..." + name[-(width - 3):]
    text = f"{name:<{width}} {row.simulated_us / 1e3:>12.3f}"
    if row.measured is None:
        return text
    m = row.measured
    error = (row.simulated_us - m.median_us) / m.median_us * 100
    return (f"{text} {m.median_us / 1e3:>12.3f}  [{m.q25_us / 1e3:.3f}-{m.q75_us / 1e3:.3f}, "
            f"min {m.min_us / 1e3:.3f}]  {error:+7.1f}%")


def plot_agreement(rows: Sequence[EvalRow], path: PathLike, title: str = "") -> None:
    """Scatter of measured (median, interquartile bars) against simulated step time (ms) with the y = x line, as a
    PNG. Each placement is named in the legend and coloured by its method (placeto.harness.plot_style; eval's file names
    `<graph>.<D>dev.<method>.json` count as their method); axes turn logarithmic when times span over 20x, and
    zoom in on the points when they all lie in the top 70% of the range."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r.measured is not None]
    if not measured:
        raise InputError("--plot needs --hardware (nothing was measured)")
    fig = _agreement_figure(plt, measured, title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _agreement_figure(plt, measured: Sequence[EvalRow], title: str):
    """The figure of plot_agreement, from rows that were all measured."""
    import textwrap

    from matplotlib.lines import Line2D

    from placeto.harness import plot_style

    names = [_short_name(r.name) for r in measured]
    colors = plot_style.colors(names)
    fig, ax = plt.subplots(figsize=(8.5 if len(measured) > 6 else 6.5, 5.2), layout="constrained")
    seen: dict[str, int] = {}
    for r, name in zip(measured, names):
        m = r.measured
        k = seen[colors[name]] = seen.get(colors[name], -1) + 1  # a second placement of one colour: new marker
        learned = plot_style.is_learned(name)
        ax.errorbar(r.simulated_us / 1e3, m.median_us / 1e3, fmt="osv^D"[k % 5], capsize=3, ms=7 if learned else 6,
                    yerr=[[(m.median_us - m.q25_us) / 1e3], [(m.q75_us - m.median_us) / 1e3]], color=colors[name],
                    mec="black" if learned else colors[name], label=name)
    times = [t / 1e3 for r in measured for t in (r.simulated_us, r.measured.q25_us, r.measured.q75_us) if t > 0]
    lo, hi = min(times), max(times)
    log = hi / lo > 20
    # log: a margin of 1.5x; linear: from 0 unless every point lies in the top 70% (then zoom in on them)
    lo, hi = (lo / 1.5, hi * 1.5) if log else (0.0 if lo < 0.3 * hi else lo - 0.1 * (hi - lo), hi * 1.05)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="simulated step time (ms)", ylabel="measured step time (ms)",
           xscale="log" if log else "linear", yscale="log" if log else "linear")
    ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=10)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], color="gray", marker="o", linestyle="-", markersize=5),
                Line2D([], [], color="black", linestyle="--", lw=0.8)]
    labels += ["dot: median measured step;\nbar: interquartile range", "measured = simulated"]
    if any(plot_style.is_learned(n) for n in names):
        handles.append(Line2D([], [], color="white", marker="o", mec="black", linestyle="none"))
        labels.append("black edge: learned method")
    ax.legend(handles, labels, fontsize=8, title="placement", title_fontsize=8,
              **(dict(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0) if len(measured) > 6 else
                 dict(loc="best")))
    return fig


def _short_name(name: str) -> str:
    """A placement's label: its file name without .json / .json.gz, or the method name as given."""
    stem = Path(name).name
    for suffix in (".gz", ".json"):
        stem = stem[:-len(suffix)] if stem.endswith(suffix) else stem
    return stem


# ---- command line ------------------------------------------------------------------------------------------
def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph file")
    p.add_argument("--placement", nargs="+", required=True, help="placement JSON file(s) for this graph")
    p.add_argument("--hardware", action="store_true", help="also run each placement on local JAX devices")
    p.add_argument("--devices", type=DEVICE_SPEC, default=None,
                   help=devices_help("the placement and cluster files' count") + ". With --hardware also local "
                        "devices as a platform:index list, e.g. gpu:0,cpu:0")
    p.add_argument("--cluster", help="cluster JSON (default with --hardware: the cached calibration of these "
                                     "devices, as `place --hardware` uses, calibrated now when none is cached; "
                                     "without: --preset)")
    p.add_argument("--preset", default="placeto-k80", choices=sorted(PRESETS),
                   help="cluster preset when simulating only and no --cluster is given")
    p.add_argument("--rig", choices=RIGS, default=None, help=RIG_HELP)
    p.add_argument("--mode", default="auto", choices=MODES,
                   help="hardware execution: the graph's real program, or synthetic kernels taking its costs")
    add_program_arguments(p)
    p.add_argument("--costs", default=None, choices=("graph", "step", "units"),
                   help="simulate with the graph's costs for the cluster's device kinds (from `placeto profile`), or "
                        "measured now: step, every node's kernels inside one compiled step (the default with "
                        "--hardware); units, every node alone as its own call, net of the dispatch floor "
                        "(default without --hardware: graph)")
    p.add_argument("--repeats", type=POSITIVE, default=5, help="timed steps per placement (median reported)")
    p.add_argument("--warmup", type=COUNT, default=2, help="untimed steps first (the first compiles)")
    p.add_argument("--plot", metavar="PNG", help="with --hardware: draw each placement's measured against its "
                                                 "simulated step time to this PNG")
    p.add_argument("--json", metavar="FILE", help="write the rows (simulated and measured step times, us) and the "
                                                  "agreement (errors, Spearman) to this JSON file")
    p.add_argument("--refit", metavar="CLUSTER_JSON",
                   help=f"with --hardware and at least {len(WORKLOAD_FREE) + 1} placements: fit the cluster's per-op "
                        "and per-transfer costs to the measured steps (simulator.measure.fit.fit_on_placements), write that "
                        "cluster here and report each placement predicted by the fit on the others (leave-one-out)")


def add_program_arguments(p: argparse.ArgumentParser) -> None:
    """--program / --args-spec: the code that re-traces an imported graph, named by the user (a graph file's
    meta.source is never imported on the file's word)."""
    p.add_argument("--program", metavar="MODULE:FUNCTION",
                   help="import and re-trace this function for a graph from `import-jax` (zoo graphs need none)")
    p.add_argument("--args-spec", help="its example arguments (as for import-jax; default: the graph's inline "
                                       "JSON meta.source.args_spec)")
    p.add_argument("--exported", metavar="FILE",
                   help="the graph's exported program from `import-jax --export` (default: <graph>.export.zip "
                        "beside the graph file, when there): runs without importing any module")


def _device_count(args: argparse.Namespace) -> int:
    files = [(f"cluster {args.cluster}", load_cluster(args.cluster).n_devices)] if args.cluster else []
    files += [(f"placement {path}", placement_devices(path)) for path in args.placement]
    return resolve_devices(spec_count(args.devices), files)  # a malformed placement file fails when loaded


def run_eval(args: argparse.Namespace) -> int:
    check_distinct_paths([("--plot", args.plot), ("--json", args.json), ("--refit", args.refit)],
                         [("the graph file", args.graph), ("the cluster file", args.cluster)] +
                         [("a placement file", path) for path in args.placement])
    for path in (args.plot, args.json, args.refit):
        if path:
            check_output_path(path)
    if args.plot and not args.hardware:
        raise InputError("--plot draws measured against simulated step times: it needs --hardware")
    if args.refit:
        if not args.hardware:
            raise InputError("--refit fits the cluster to measured step times: it needs --hardware")
        if len(args.placement) <= len(WORKLOAD_FREE):
            raise InputError(f"--refit fits {len(WORKLOAD_FREE)} parameters and predicts each placement from the "
                             f"others: give at least {len(WORKLOAD_FREE) + 1} placements, got {len(args.placement)}")
    n = _device_count(args)
    spec = args.devices if args.devices is not None else n  # local devices: a count or a platform:index list
    if not isinstance(spec, int) and not args.hardware:
        raise InputError(f"--devices {args.devices[0][0]}:{args.devices[0][1]},...: a device list names local "
                         f"devices, for --hardware; without it give a count")
    if args.hardware:
        from simulator.hardware.devices import ensure_host_devices

        ensure_host_devices(spec)  # before anything imports jax
    if args.repeats < 1:
        raise InputError(f"--repeats must be >= 1, got {args.repeats}")
    if args.costs in ("step", "units") and not args.hardware:
        raise InputError(f"--costs {args.costs} measures the units on local devices: it needs --hardware")
    costs = args.costs or ("step" if args.hardware else "graph")  # on hardware: the units inside the step
    if args.rig is not None and not args.hardware:
        raise InputError("--rig says where --hardware runs the placements: it needs --hardware")
    rig = args.rig or (default_rig(spec) if args.hardware else "threads")
    graph = load_graph(args.graph)
    placements = [(path, load_placement(path, graph, n).assignment) for path in args.placement]
    cluster = eval_cluster(args, n, spec)
    runner = None
    if args.program:
        print(f"importing {args.program} (named by --program) to re-trace the graph's program", flush=True)
    elif args.hardware and args.mode == "auto" and not can_run_program(graph, None, args.exported) \
            and graph.meta.get("source"):
        print("note: the graph's meta.source program is not imported on a data file's word; running synthetic "
              "kernels (pass --program MODULE:FUNCTION, or export it with `import-jax --export`, to run the real "
              "program)")
    if costs in ("step", "units") and args.mode != "synthetic" and can_run_program(graph, args.program,
                                                                                     args.exported):
        runner = hardware_runner(graph, cluster, args.mode, program=args.program, args_spec=args.args_spec,
                                 exported=args.exported, devices=spec, rig=rig)
        lacking = [k for k in dict.fromkeys(cluster.kinds) if k not in graph.costs]
        missing = f"the graph has no {', '.join(map(repr, lacking))} costs: " if lacking else ""
        how = ("inside one compiled step (--costs step, the default with --hardware" if costs == "step" else
               "each alone as its own call (--costs units")
        print(f"{missing}measuring the {graph.n_nodes} units {how}; --costs graph simulates the graph's recorded "
              f"costs) ...", flush=True)
        runner = (runner.with_step_costs(args.repeats, args.program, args.args_spec, args.exported)
                  if costs == "step" else runner.with_unit_costs(args.repeats))
        runner = runner.with_rig_costs(progress=lambda line: print(line, flush=True))
        graph = runner.graph
    else:
        cluster, warning = simulation_cluster(graph, cluster)
        if warning:
            print(warning, file=sys.stderr)
        if args.hardware:
            runner = hardware_runner(graph, cluster, args.mode, program=args.program, args_spec=args.args_spec,
                                     exported=args.exported, devices=spec, rig=rig)
    print(f"graph {graph.name} ({graph.n_nodes} nodes), {describe_devices(cluster)} ({cluster.name}: "
          f"{cluster_summary(cluster)})")
    if runner is not None:
        staged = runner.stages and runner.mode != "synthetic"
        how = "each device's consecutive units as one jitted stage" if staged else "one task per unit"
        where = (f"one worker process per device (--rig processes: {runner.rig.n_devices} single-core JAX clients, "
                 f"shared-memory transfers)" if runner.rig is not None else "this process (--rig threads)")
        print(f"hardware: {', '.join(f'{d.platform}:{d.id}' for d in runner.devices)} in {where}, {runner.mode} "
              f"execution ({how}), median of {args.repeats} steps after {args.warmup} warm-up (the first compiles)")
    if runner is not None:
        model = ("the staged simulation of the stages the rig runs, with its measured launch and transfer costs "
                 "(simulator.engine.staged)" if runner.rig_costs is not None else
                 "the simulator's step time on the cluster above")
        print(f"simulated: {model}; measured: real steps; {ERROR_MEANING}")
    child = _plain_jit(args, spec) if runner is not None else None  # before the placements run (and after)
    plain = (child.first,) if child is not None else ()
    print(f"{'placement':<28} {'simulated ms':>12}" + (f" {'measured ms':>12}  [IQR, min]  error" if runner else ""))
    try:
        from simulator.hardware.timing import interleaved_steps

        anchor = runner is not None and runner.adds_anchor([p for _, p in placements])  # timed too
        steps = interleaved_steps(len(placements) + anchor, args.repeats, args.warmup)
        with step_bar("running placements", steps) if runner is not None else _nothing():
            rows = evaluate(graph, placements, cluster, runner, args.repeats, args.warmup, progress=print)
        summary = agreement(rows)
        if runner is not None:
            plain += (child.again(),) if plain[0].available else ()  # (unavailable: it would be again)
            on_cpu = all(d.platform == "cpu" for d in runner.devices)
            print("\n".join(summary_lines(rows, [p for _, p in placements], measure_concurrency(spec, runner.rig),
                                           plain, on_cpu)))
    finally:
        if runner is not None:
            runner.close()
        if child is not None:
            child.close()
    if args.plot:
        plot_agreement(rows, args.plot, f"{graph.name}, {n} devices: median |error| {summary.median_ape:.0f}%, "
                                        f"{format_spearman(summary)}")
        print(f"plot             {args.plot}")
    if args.json:
        write_rows_json(args.json, graph, cluster, rows, summary, plain)
    if args.refit:
        refit(args.refit, graph, cluster, [p for _, p in placements], rows)
    return 0


@contextlib.contextmanager
def step_bar(what: str, total: int | None = None):
    """A tqdm progress bar on stderr (shown on a terminal only), advanced by every step simulator.hardware.timing runs
    inside the block (simulator.hardware.timing.reporting_steps): its rate and, with a `total`, its ETA (`place --hardware` and `eval
    --hardware`'s long phases)."""
    import sys

    from tqdm import tqdm

    from simulator.hardware.timing import reporting_steps

    with tqdm(total=total, desc=what, unit="step", disable=None, leave=False, file=sys.stderr) as bar, \
            reporting_steps(bar.update):
        yield bar


def _nothing():
    return contextlib.nullcontext()


def _plain_jit(args: argparse.Namespace, spec: int | tuple) -> Any:
    """simulator.hardware.plain_jit.Child: the plain jit of the graph file's step (its zoo or exported program) in a fresh
    process, timed once and kept to time again; a graph run through --program gets an unavailable one (the child
    imports nothing)."""
    from simulator.hardware import plain_jit

    if args.program:
        return plain_jit.Child(plain_jit.PlainJit(why="the program named by --program is not imported by the fresh "
                                                      "process; export it with `import-jax --export`"))
    return plain_jit.start_for(args.graph, spec, args.repeats, args.warmup, args.exported,
                               progress=lambda line: print(line, flush=True))


def eval_cluster(args: argparse.Namespace, n: int, spec: int | tuple) -> Cluster:
    """--cluster, else (with --hardware) the calibrated cluster of the local devices `spec` (the one `place
    --hardware` caches, simulator.measure.cluster_cache.cached_cluster: calibrated now only when none is cached), else
    --preset with n devices."""
    if args.cluster:
        cluster = load_cluster(args.cluster)
        if cluster.n_devices != n:
            raise InputError(f"--devices {n} but cluster {args.cluster} has {cluster.n_devices} devices")
        return cluster
    if args.hardware:
        from simulator.hardware.devices import local_devices

        from simulator.measure.cluster_cache import cached_cluster

        return cached_cluster(local_devices(spec), spec, progress=lambda line: print(line, flush=True))
    return cluster_preset(args.preset, n)


def summary_lines(rows: Sequence[EvalRow], placements: Sequence[np.ndarray], concurrency: Concurrency | None,
                  plain: Sequence[Any] = (), rig: bool = False) -> list[str]:
    """eval --hardware's summary: what the errors compare and the agreement (Spearman with its n), the
    placements measured faster or slower than the fastest measured single-device placement (when one was
    given), the fastest measured placement against the plain jit of the step (simulator.hardware.plain_jit.PlainJit runs,
    when given), what host CPU devices are (`rig`: the devices are host CPU devices), and whether the devices ran
    concurrently (None: not measured, one device or mixed platforms)."""
    from simulator.hardware.plain_jit import plain_line, rig_line

    lines = [f"summary, simulated against measured step time: {format_agreement(agreement(rows))}"]
    one = [len(np.unique(p)) == 1 for p in placements]  # single-device placements: compared with, not listed
    singles = [r for r, single in zip(rows, one) if single and r.measured is not None]
    if singles:
        best = min(singles, key=lambda r: r.measured.median_us)
        lines += versus_single([best] + [r for r, single in zip(rows, one) if not single], best)
        lines += beyond_lines(best, [r for r, single in zip(rows, one) if not single and r.measured is not None],
                              concurrency)
    measured = [r for r in rows if r.measured is not None]
    if plain and measured:
        fastest = min(measured, key=lambda r: r.measured.median_us)
        lines.append(plain_line(plain, f"fastest measured placement ({_short_name(fastest.name)})",
                                fastest.measured))
    if rig:
        lines.append(rig_line())
    if concurrency is not None:
        lines.append(concurrency_line(concurrency))
    return lines


def beyond_lines(single: EvalRow, others: Sequence[EvalRow], concurrency: Concurrency | None) -> list[str]:
    """One line when the fastest of `others` (measured placements over several devices) measured faster than the
    single device `single` than the devices' measured concurrency allows (placeto.harness.calibration.beyond_concurrency):
    eval measures each once, `place --hardware` measures such a speedup again."""
    from placeto.harness.calibration import beyond_concurrency, beyond_note

    if not others:
        return []
    fastest = min(others, key=lambda r: r.measured.median_us)
    speedup = single.measured.median_us / fastest.measured.median_us
    if not beyond_concurrency(speedup, concurrency):
        return []
    return [f"fastest measured placement ({_short_name(fastest.name)}): {beyond_note(concurrency, speedup)}"]


def write_rows_json(path: PathLike, graph: Graph, cluster: Cluster, rows: Sequence[EvalRow],
                    summary: Agreement, plain: Sequence[Any] = ()) -> None:
    """The rows, the agreement and (when timed) the plain jit of the step, as JSON: "plain_jit" holds its
    timing over every run with its device and program, or {"unavailable": why}."""
    from simulator.hardware.plain_jit import combined

    def timing(m):
        return None if m is None else {k: getattr(m, k) for k in ("median_us", "q25_us", "q75_us", "min_us",
                                                                  "max_us")}

    finite = lambda x: None if isinstance(x, float) and not math.isfinite(x) else x  # noqa: E731  NaN: null
    obj = {"graph": graph.name, "cluster": cluster.to_dict(),
           "agreement": {k: finite(v) for k, v in summary._asdict().items()},  # spearman_note: why null
           "rows": [{"placement": r.name, "simulated_us": r.simulated_us, "measured": timing(r.measured)}
                    for r in rows]}
    if plain:
        both = combined(plain)
        obj["plain_jit"] = ({**timing(both.timing()), "steps": len(both.times_us), "runs": len(plain),
                             "device": both.device, "program": both.program} if both.available else
                            {"unavailable": both.why})
    atomic_write_bytes(path, (json.dumps(obj, indent=1, allow_nan=False) + "\n").encode())
