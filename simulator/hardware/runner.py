"""Runs placements of one graph on local devices (`--hardware`).

A `HardwareRunner` turns a placement into a runnable plan (simulator.hardware.plans): graphs traced from JAX
programs run their real operations, each device's consecutive units as one jitted stage; graphs that only carry
costs run synthetic kernels calibrated to take each node's cost (simulator.hardware.synthetic). Units are
dispatched in the order the simulator starts them (`dispatch_order`), for staged plans regrouped so a device's
units stay together where dependencies allow (`staged_order`). On the process rig (simulator.hardware.rig) a
runner also predicts the rig's stages with the staged simulator (simulator.engine.staged), its costs fitted to
the graph.

Use it as a context manager (or call `close`): a process rig's workers stop when it closes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.engine.fast import simulate
from simulator.engine.staged import simulate_staged
from simulator.hardware.devices import local_devices
from simulator.hardware.options import MODES, RIGS
from simulator.hardware.plans import program_plan, units_plan
from simulator.hardware.rig.plans import to_rig
from simulator.hardware.rig.pool import PIN, ProcessRig, one_core, timeout_from_env
from simulator.hardware.synthetic import synthetic_plan
from simulator.hardware.timing import time_rounds, timing_of, warm_plans
from simulator.measure.boundary_costs import CHUNKS, fit_observed, observe
from simulator.measure.calibrate import calibrate_kernel, profile_plan
from simulator.measure.graph_profile import measure
from simulator.measure.rig_calibrate import cached_rig_costs
from simulator.measure.rig_step import graph_contention, measured_step
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import DEFAULT_KIND, Graph
from simulator.tracing import export
from simulator.tracing.lowering import leaf_values, unit_graph, unit_programs
from simulator.tracing.program import graph_program, program_of


class Measured(NamedTuple):
    """`HardwareRunner.simulate_and_measure`'s result."""

    simulated_us: list  # float per placement: the simulated step time, microseconds
    timings: list  # simulator.hardware.timing.Timing per placement
    scale: float  # the units' costs' factor the simulation used (1.0: as the runner has them)


class RigFit(NamedTuple):
    """What `HardwareRunner.with_rig_costs` measured to fit the rig's costs.

    Fitted to the runner's graph, and kept on the runner so that the fit can be read and re-simulated
    (experiments.benchmarks.staged_fidelity --dump).
    """

    cached: Any  # simulator.engine.staged.RigCosts from the cache, before the graph's own factors
    step_us: float  # the single device's step (the whole graph as one stage on the first worker), median
    observed: Any  # simulator.measure.boundary_costs.Observed of the chunked plan, the Boundary's data (None: 1 worker)


@dataclasses.dataclass
class HardwareRunner:
    """Turns placements of one graph into runnable plans on local devices."""

    graph: Graph
    cluster: Cluster  # the simulation cluster (its device count is the number of devices used)
    mode: str  # "program", "exported-program" or "synthetic"
    devices: list  # the JAX devices, one per cluster device
    make_plan: Callable[..., Any]  # (placement int[N], dispatch order int[N], stages: bool) -> Plan
    threads: bool | None = None  # one dispatching thread per device? (None: dispatch.run_plan decides)
    stages: bool = True  # each device's consecutive units as one jitted stage (program modes only)
    rig: Any = None  # simulator.hardware.rig.pool.ProcessRig whose workers are the devices (None: this process)
    stage_order: str = "staged"  # "staged": a device's units kept together where dependencies allow (few stages,
    #   few dispatches: staged_order); "simulated": the simulated start order (more, shorter stages, so a value
    #   another device waits for is ready sooner: what devices that really run at once need)
    holders: np.ndarray | None = None  # bool[N] units that only hold values (dispatch nothing; program modes)
    rig_costs: Any = None  # simulator.engine.staged.RigCosts of the process rig (`with_rig_costs`): then `simulate`
    #   predicts the rig's stages (simulator.engine.staged), not the units one by one
    rig_fit: RigFit | None = None  # how `with_rig_costs` fitted `rig_costs` to this graph

    def plan(self, placement: np.ndarray):
        """The plan of `placement`, its units in `order(placement)`.

        Units run in simulated start order; when staged with stage_order "staged", each device's units are kept
        together where dependencies allow (`staged_order`).
        """
        return self.make_plan(placement, self.order(placement), self.stages and self.mode != "synthetic")

    def order(self, placement: np.ndarray) -> np.ndarray:
        """int64[N] the dispatch order `plan` gives the units of `placement`."""
        order = dispatch_order(self.graph, placement, self.cluster)
        if self.stages and self.mode != "synthetic" and self.stage_order == "staged":
            order = staged_order(self.graph, placement, order)
        return np.asarray(order, dtype=np.int64)

    def simulate(self, placement: np.ndarray, scale: float = 1.0) -> float:
        """Simulated step time of `placement` (us), as this runner runs it.

        With `rig_costs` (the process rig, staged program modes): the staged simulation of the very stages `plan`
        cuts, with the rig's costs (simulator.engine.staged.simulate_staged), the units' costs multiplied by `scale`
        (the stages still the ones `plan` cuts: `simulate_and_measure`). Otherwise the simulator's per-unit model on
        the cluster.
        """
        placement = np.asarray(placement, dtype=np.int32)
        if not self.staged_rig:
            return float(simulate(self.graph, placement, self.cluster).runtime)
        graph = self.graph
        if scale != 1.0:
            kind = self.cluster.kinds[0]
            graph = graph.with_costs(kind, graph.cost_for(kind) * scale)
        return simulate_staged(graph, placement, self.cluster, self.order(placement), self.rig_costs,
                               self.holders).runtime_us

    @property
    def staged_rig(self) -> bool:
        """Whether `simulate` is the staged simulation of the process rig.

        True with rig costs, in the staged program modes.
        """
        return self.rig_costs is not None and self.holders is not None and self.stages

    def scale_to(self, wall_us: float, costs: Any = None) -> float:
        """The factor scaling the units' costs to the single device's step.

        The units' costs are those of the cluster's first kind; with them counts what the staged simulation charges
        the single device's one stage beyond them (its launch and input reads, the step's round trip; with `costs`,
        else the runner's rig costs). `wall_us` is the single device's step as the rig ran it. 1.0 when nothing is
        profiled or the step is no longer than what is charged beyond the units.
        """
        unit = self.graph.cost_for(self.cluster.kinds[0])
        profiled = float(unit[~self.holders].sum())
        single = np.zeros(self.graph.n_nodes, dtype=np.int32)
        beyond = simulate_staged(self.graph, single, self.cluster, self.order(single), costs or self.rig_costs,
                                 self.holders).runtime_us - profiled
        ran = wall_us - beyond
        return ran / profiled if profiled > 0 and ran > 0 else 1.0

    def with_rig_costs(self, progress: Callable[[str], None] = print, steps: int = 5) -> "HardwareRunner":
        """This runner simulating its rig's stages, fitted to its graph.

        The process rig's costs come from the cache, or are measured now
        (simulator.measure.rig_calibrate.cached_rig_costs). The units' costs, profiled in this process, are scaled
        to the rig's own speed: with what the staged simulation charges the single stage beyond them (its launch and
        input reads, the step's round trip), they add up to the whole step run as one stage on the rig's first
        worker (median of `steps` after two warm-up steps; freeing the values a step made included). The profile
        says how the step's time splits over its units, the rig how long the step takes there.

        With two workers or more, three things are this graph's own, not the calibration workload's: the contention
        between two workers (simulator.measure.rig_step.graph_contention: its whole step on worker 0 while worker 1
        runs it too, against alone), the per-MB charges of values crossing stages (on top of the workload's), and
        the factors of the cached launch and transfer costs (simulator.measure.boundary_costs: the step cut into
        runs alternating between two workers; the units' factor is then computed again with the single stage's
        launch so scaled).

        Returns:
          The runner as is without a process rig, or for synthetic kernels (one task per node: the per-unit model is
          theirs).
        """
        if self.rig is None or self.holders is None or not self.stages:
            return self

        with self.rig.during("the measurement of its launch and transfer costs"):
            return self._with_rig_costs(steps, progress)

    def _with_rig_costs(self, steps: int, progress: Callable[[str], None]) -> "HardwareRunner":
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
        """Timing of one step of each placement, the steps interleaved.

        A simulator.hardware.timing.Timing each, timed as simulator.hardware.timing.time_interleaved does; on the
        process rig when the runner has one (`rig`).
        """
        return self._timed(placements, repeats, warmup, None, rescale=False)[0]

    def simulate_and_measure(self, placements: Sequence[np.ndarray], repeats: int = 5, warmup: int = 2,
                             progress: Callable[[str], None] = print, rescale: bool = True) -> "Measured":
        """Every placement simulated (`simulate`) and measured (`measure`).

        On the process rig's staged simulation (`staged_rig`), with `rescale`, the units' costs are scaled again to
        the single device's step (all on the first worker) as the same timed rounds measure it (`scale_to` of its
        median): the anchor of the model, taken in the rounds it is compared with, so that a machine whose speed
        moves between the costs' fit and the rounds moves the anchor with it (docs/hardware.md, "Scaled twice"). The
        single device's own simulated time then equals its measured one by construction: it calibrates, it is not a
        prediction. Its plan is timed in the rounds even when it is not one of the placements (and its times left
        out).
        """
        arrays = [np.asarray(p, dtype=np.int32) for p in placements]
        timings, factor = self._timed(arrays, repeats, warmup, progress, rescale and self.staged_rig)
        return Measured([self.simulate(p, factor) for p in arrays], timings, factor)

    def adds_anchor(self, placements: Sequence[np.ndarray]) -> bool:
        """Whether `simulate_and_measure` adds the single device's plan.

        It does, with rescale, on the staged rig when none of `placements` is the single device (every unit on
        device 0).
        """
        return self.staged_rig and all(np.asarray(p).any() for p in placements)

    def _timed(self, arrays: Sequence[np.ndarray], repeats: int, warmup: int, progress: Callable[[str], None] | None,
               rescale: bool) -> tuple[list, float]:
        """`simulate_and_measure` without the simulation.

        Returns:
          ([Timing] of each placement, the units' costs' factor).
        """
        plans, extra, factor = [], [], 1.0  # extra: the single device's plan when it is not among the placements
        try:
            with self.during("the loading of the placements"):
                plans += [self.runnable(p) for p in arrays]
            at = next((i for i, p in enumerate(arrays) if not p.any()), None) if rescale else None
            if rescale and self.adds_anchor(arrays):
                with self.during("the loading of the placements"):
                    extra, at = [self.runnable(np.zeros(self.graph.n_nodes, np.int32))], len(plans)
            with self.during("the warm-up steps"):
                warm_plans(plans + extra, warmup, self.threads)
            with self.during("the timed rounds"):
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
        """`plan(placement)`, loaded on the process rig when the runner has one.

        On the rig: a simulator.hardware.rig.plans.RigPlan (close it after use); else the Plan itself.
        """
        if self.rig is None:
            return self.plan(placement)
        # one scope per program: the runners `with_step_costs` / `with_rig_costs` derive share make_plan (and its
        # resident values), so the parameters go to each worker once, not once per derived runner
        return to_rig(self.plan(placement), self.rig, scope=id(self.make_plan))

    def during(self, stage: str):
        """Inside, a failure of the process rig names `stage` (ProcessRig.during); nothing without a rig."""
        return self.rig.during(stage) if self.rig is not None else contextlib.nullcontext()

    def close(self) -> None:
        """Stop the process rig's workers, if the runner has a rig."""
        if self.rig is not None:
            self.rig.close()

    def __enter__(self) -> "HardwareRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def unit_costs(self, repeats: int = 5, device: int = 0) -> np.ndarray:
        """float64[N] microseconds of each unit run alone on `device`.

        Net of the dispatch floor (simulator.measure.calibrate.profile_plan; one task per unit). For synthetic
        execution: the recorded costs.
        """
        if self.mode == "synthetic":
            return self.graph.cost_for(self.cluster.kinds[device])
        one_device = np.full(self.graph.n_nodes, device, dtype=np.int32)
        return profile_plan(self.make_plan(one_device, self.graph.topo_order, False), repeats)

    def with_step_costs(self, repeats: int = 5, program: str | None = None, args_spec: str | None = None,
                        exported: str | None = None) -> "HardwareRunner":
        """This runner, its units costed inside one compiled step.

        The units' kernel time inside one compiled step, under every kind of the cluster, each profiled on its first
        device (simulator.measure.graph_profile, method "step").
        """
        prog = graph_program(self.graph, program, args_spec, exported)
        graph = self.graph
        with self.one_core():
            for kind in dict.fromkeys(self.cluster.kinds):
                cost, _ = measure(prog, self.devices[self.cluster.kinds.index(kind)], "step", repeats, 2)
                graph = graph.with_costs(kind, cost)
        return dataclasses.replace(self, graph=graph)

    def one_core(self):
        """A context to measure in as a device of the runner's rig runs.

        On one core for the process rig (simulator.hardware.rig.pool.one_core); as it is otherwise.
        """
        if self.rig is None:
            return contextlib.nullcontext()
        return one_core()

    def with_unit_costs(self, repeats: int = 5) -> "HardwareRunner":
        """This runner, its units costed by `unit_costs` for every kind.

        Each kind is profiled on its first device (mixed devices: a GPU's and the CPU's costs).
        """
        graph = self.graph
        with self.one_core():
            for kind in dict.fromkeys(self.cluster.kinds):
                graph = graph.with_costs(kind, self.unit_costs(repeats, self.cluster.kinds.index(kind)))
        return dataclasses.replace(self, graph=graph)


def simulation_cluster(graph: Graph, cluster: Cluster) -> tuple[Cluster, str | None]:
    """A cluster the graph has costs for, missing kinds made analytic.

    Returns (`cluster`, None) if the graph has costs for every device's kind; else, device by device, a device whose
    kind the graph lacks takes the analytic costs of the same model ("local-h100" -> "h100") or else "cpu", with a
    warning naming them. Mixed clusters keep a kind per device.

    Raises:
      InputError: a device has neither.
    """
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
    """int64[N] nodes by simulated start time (ties in topological order).

    The order units are dispatched in.
    """
    start = simulate(graph, np.asarray(placement, dtype=np.int32), cluster).start
    rank = np.empty(graph.n_nodes, dtype=np.int64)
    rank[graph.topo_order] = np.arange(graph.n_nodes)
    return np.lexsort((rank, start))


def staged_order(graph: Graph, placement: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """int64[N] a topological order keeping devices' nodes together.

    It follows `order` (a topological order, e.g. simulated start order) but, once a node of device d is taken,
    keeps taking the earliest (in `order`) node of d whose inputs are all taken, before moving on to the earliest
    node not yet taken. Each device's nodes then form few runs, and a staged plan few stages (dispatches):
    interleaved devices would split every stage.

    The price: a stage's outputs exist only when the whole stage has run, so a node another device waits for
    may finish later than in `order` (the simulator does not model this).
    """
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
    """Whether `graph`'s program can run here.

    It can with a zoo program in its meta, one the user named (--program), or its exported program
    (simulator.tracing.export: --exported, or `<graph>.export.zip` beside the graph file). A program named by the
    graph file's meta.source is never imported on the file's word.
    """
    return "program" in graph.meta or program is not None or export.find_export(graph, exported) is not None


def hardware_runner(graph: Graph, cluster: Cluster, mode: str = "auto", seed: int = 0, program: str | None = None,
                    args_spec: str | None = None, exported: str | None = None,
                    devices: int | tuple | None = None, rig: str = "threads") -> HardwareRunner:
    """A runner of `graph` on local devices, one per cluster device.

    Args:
      graph: the graph to run.
      cluster: the simulation cluster (its device count is the number of devices used).
      mode: "program" runs the graph's program: re-traced when `program` is named on the command line, else its
        exported program (simulator.tracing.export.find_export: `exported`, or the file beside the graph), else
        re-traced from a zoo program of its meta (simulator.tracing.program.retrace); "synthetic" runs calibrated
        kernels taking the simulation costs; "auto" picks "program" when possible.
      seed: seed of the program's random inputs and parameters.
      program, args_spec, exported: the program to re-trace, its arguments, the exported program (see `mode`).
      devices: a device spec (simulator.hardware.devices: a count, or a platform:index list such as ("gpu", 0),
        ("cpu", 0)); default: the first cluster.n_devices.
      rig: "threads": the devices are this process's JAX devices (host CPU devices share one thread pool);
        "processes": one worker process per device (simulator.hardware.rig.pool, host CPU devices only), started
        here: close() the runner when done (they also stop when this process exits). On the process rig the
        stages follow the simulated start order (stage_order "simulated"), faster there than keeping a device's
        units together, whose long stages leave the other device waiting
        (experiments/results/benchmarks/rig_concurrency.md).

    Raises:
      InputError: an unknown mode, a device count unlike the cluster's, or a graph that cannot run.
    """
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
    bundle = export.find_export(graph, exported) if program is None else None
    if bundle is not None:
        vals = export.values(bundle, seed)

        def make_exported(placement, order, stages=True):
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


def start_rig(rig: str | None, devices: Sequence[Any]) -> Any:
    """The process rig of `devices` for rig "processes", None for "threads".

    A simulator.hardware.rig.pool.ProcessRig.

    Raises:
      InputError: an unknown rig, or rig "processes" with a device that is not a host CPU device.
    """
    if rig not in RIGS:
        raise InputError(f"--rig: unknown rig {rig!r} (known: {', '.join(RIGS)})")
    if rig == "threads":
        return None
    if any(d.platform != "cpu" for d in devices):
        raise InputError(f"--rig processes runs host CPU devices only; --devices names "
                         f"{', '.join(sorted({d.platform for d in devices} - {'cpu'}))} ones (use --rig threads)")
    return ProcessRig(len(devices), pin=PIN, timeout_s=timeout_from_env())
