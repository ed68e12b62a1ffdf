"""Simulating placed execution as the staged harness runs it.

Stages, not units, are what a device launches. The hardware harness
(`simulator.hardware.plans.units_plan(stages=True)`, on the process rig `simulator.hardware.rig.plans`) does not run
units one by one: in dispatch order, the units that only hold values come first (they dispatch nothing), then each
run of *consecutive* units on one device is ONE jitted stage, launched once; its outputs exist only when the whole
stage has ended, and a value crossing devices is sent once per (producer stage, receiving device). On the process
rig each worker runs its instruction list strictly in order: Run a stage, Send its values (a copy into shared memory
and a message over a pipe), and Recv a batch (wait for the message, copy onto the device) right before the first
stage that reads it.

`stage_graph` turns (unit graph, placement, dispatch order) into that program as a graph the ordinary engine
simulates, one node per stage on its device:

* partition (`stage_runs`): exactly the runs `units_plan` cuts: holders (bool[N], units without a body) first, one
  run each, then consecutive units of one device in `order`;
* a stage's cost (microseconds) = `RigCosts.launch_us` (the worker's round trip of a stage: launch, wait, token) +
  per value it reads from another stage, `launch_us_per_input` and `launch_us_per_input_mb` per 10^6 bytes
  (`stage_inputs`) + `launch_us_per_output_mb` per 10^6 bytes of the values it makes that other stages read
  (`stage_outputs`) + the sum of its units' profiled costs on its device + its Sends (`RigCosts.send_cost`:
  fixed, per value, per byte) + the Recvs placed before it (`RigCosts.recv_cost`). Nothing is charged for a value
  leaving its stage: on XLA:CPU a stage returns every value its units make (simulator.hardware.plans.materialises)
  and the step profile is taken the same way, so a unit costs what it was profiled at in any stage. A holder stage
  launches nothing: its cost is its sends only. The worker does the copies itself, so they occupy the device, not a
  bus beside it;
* edges: a value crossing stages on one device is a local edge (output 0 of the producer stage); values sent to
  device d are one transfer (output 1 + d, its bytes the distinct unit outputs sent), arriving `latency_us` after
  the producer stage ends; and each device's stages are chained in dispatch order by local zero-byte edges
  (output 0), so the engine runs them in the worker's order, not whichever is ready first;
* the cluster (`rig_cluster`): the caller's devices with delta1 = delta2 = 0, no hosts (each worker is its own
  process), latency `latency_us` and a bandwidth so high that wire time is nil (the copies are in the stages).

`simulate_staged(graph, placement, cluster, order, costs)` simulates it with the fast engine
(`simulator.engine.fast.simulate`) and adds `RigCosts.step_us` (the parent's request to every worker and their replies).
Two cores running at once can slow each other down (shared caches and memory). `RigCosts.contention` is measured
per graph (simulator.measure.rig_step.graph_contention: its whole step on one worker while another runs it too, against
alone); a second pass adds to each stage contention x its units' work x the share of its first-pass time another
device ran a stage (`overlap`).
`simulate_staged_reference` does the same with the plain-Python event loop (`simulator.engine.reference`), the oracle
(tests/simulator/engine/test_staged.py checks them equal). Pure: no JAX at import.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import numpy as np

from simulator.engine.fast import simulate
from simulator.engine.reference import simulate_reference
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph, make_graph
from simulator.model.limits import MAX_BANDWIDTH
from simulator.model.result import SimResult

INPUT_OPS = ("input", "param", "const")  # op graph nodes that only hold values (simulator.tracing.trace)
NO_WIRE_BYTES_PER_US = MAX_BANDWIDTH  # bandwidth making wire time nil: the rig's copies are charged to its stages


@dataclasses.dataclass(frozen=True)
class RigCosts:
    """Rig costs of stages and moved values, beyond the units' work.

    The units' own work is profiled. These costs are measured by `simulator.measure.rig_calibrate` on the process
    rig; all microseconds (per_mb: per 10^6 bytes).
    """

    launch_us: float = 0.0  # per stage a worker runs: call, wait for its end, token hand-over
    launch_us_per_input: float = 0.0  # per value a stage reads from another stage (`stage_inputs`)
    launch_us_per_input_mb: float = 0.0  # per 10^6 bytes of those values (read from memory, not cache)
    launch_us_per_output_mb: float = 0.0  # per 10^6 bytes of the values a stage makes that other stages read
    #   (`stage_outputs`: written out to memory as the stage's results, where inside one program they are
    #   consumed from cache or fused)
    step_us: float = 0.0  # per step: the parent's "run" to every worker and their replies
    send_us: float = 0.0  # per Send (one per producer stage and receiving device): views and the pipe message
    send_us_per_value: float = 0.0  # per value of a Send: its view and copy call
    send_us_per_mb: float = 0.0  # copying into shared memory, on the sending worker
    recv_us: float = 0.0  # per Recv beyond waiting: device_put of the views
    recv_us_per_value: float = 0.0  # per value of a Recv: its device_put
    recv_us_per_mb: float = 0.0  # copying out of shared memory onto the device, on the receiving worker
    latency_us: float = 0.0  # from a Send's end to its Recv seeing the message (pipe wake-up)
    contention: float = 0.0  # a stage's units run this much longer (fraction) while another device runs a stage
    #   (measured per graph, not fitted: HardwareRunner.with_rig_costs)

    def send_cost(self, nbytes: float, values: int = 1) -> float:
        """Microseconds of one Send: `values` values, `nbytes` in all.

        On the sending worker.
        """
        return self.send_us + values * self.send_us_per_value + nbytes * self.send_us_per_mb / 1e6

    def recv_cost(self, nbytes: float, values: int = 1) -> float:
        """Microseconds of one Recv: `values` values, `nbytes` in all.

        On the receiving worker, after waiting.
        """
        return self.recv_us + values * self.recv_us_per_value + nbytes * self.recv_us_per_mb / 1e6


class StageGraph(NamedTuple):
    """The staged program of one placement: S stages on D devices."""

    graph: Graph  # S nodes, one per stage, in dispatch order; costs under DEFAULT_KIND (us, launch and copies in)
    placement: np.ndarray  # int32[S] device of each stage
    stage_of: np.ndarray  # int64[N] stage of each unit
    runs: tuple[tuple[int, ...], ...]  # [S] the units of each stage, in dispatch order
    holder: np.ndarray  # bool[S] stages that only hold values (launch nothing)
    work: np.ndarray  # float64[S] the units' own costs of each stage, microseconds (launches, copies not in)


def default_holders(graph: Graph) -> np.ndarray:
    """bool[N] the units that only hold values (input, param, const).

    They dispatch nothing. A grouped graph's groups all hold an equation in practice; a caller with the lowered
    units passes `[u.body is None for u in units]` instead.
    """
    return np.asarray([op in INPUT_OPS for op in graph.ops], dtype=bool)


def stage_runs(placement: Sequence[int], order: Sequence[int], holders: Sequence[bool]) -> list[list[int]]:
    """[S] units of each stage, as units_plan(stages=True) cuts them.

    `simulator.hardware.plans.units_plan`: the holders in `order` first, one stage each; then every run of
    consecutive units of one device in `order`.
    """
    held = [u for u in order if holders[u]]
    runs = [[u] for u in held]
    for u in (u for u in order if not holders[u]):
        if len(runs) > len(held) and placement[runs[-1][-1]] == placement[u]:
            runs[-1].append(u)
        else:
            runs.append([u])
    return runs


def _check(graph: Graph, placement: np.ndarray, order: np.ndarray, n_devices: int) -> None:
    n = graph.n_nodes
    if placement.shape != (n,) or (n and (placement.min() < 0 or placement.max() >= n_devices)):
        raise InputError(f"a placement of {graph.name!r} needs {n} device indices in [0, {n_devices})")
    if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
        raise InputError(f"the dispatch order of {graph.name!r} must be a permutation of its {n} units")
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    bad = np.flatnonzero(position[graph.edge_src] >= position[graph.edge_dst])
    if bad.size:
        raise InputError(f"unit {int(graph.edge_dst[bad[0]])}: an input comes from a unit dispatched later (the "
                         f"dispatch order is not topological)")


def stage_inputs(graph: Graph, stage_of: np.ndarray, n_stages: int) -> tuple[np.ndarray, np.ndarray]:
    """Values each stage reads from other stages: counts and bytes.

    Returns (int64[S] counts, float64[S] bytes) of `graph`'s units cut into stages (`stage_of`: int64[N] stage
    of each unit).
    """
    count, nbytes = np.zeros(n_stages, dtype=np.int64), np.zeros(n_stages)
    seen: set[tuple[int, int, int]] = set()
    for u, v, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist()):
        sv = int(stage_of[v])
        if int(stage_of[u]) != sv and (sv, u, o) not in seen:
            seen.add((sv, u, o))
            count[sv] += 1
            nbytes[sv] += float(graph.out_bytes[graph.out_offsets[u] + o])
    return count, nbytes


def stage_outputs(graph: Graph, stage_of: np.ndarray, n_stages: int) -> np.ndarray:
    """float64[S] bytes of each stage's distinct values others read.

    Values another stage reads, of `graph`'s units cut into stages (`stage_of`: int64[N] stage of each unit).
    """
    nbytes = np.zeros(n_stages)
    seen: set[tuple[int, int]] = set()
    for u, v, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist()):
        su = int(stage_of[u])
        if su != int(stage_of[v]) and (u, o) not in seen:
            seen.add((u, o))
            nbytes[su] += float(graph.out_bytes[graph.out_offsets[u] + o])
    return nbytes


def stage_sends(graph: Graph, stage_of: np.ndarray,
                stage_device: np.ndarray) -> dict[tuple[int, int], tuple[int, float]]:
    """The Sends: {(producer stage, receiving device): (values, bytes)}.

    The distinct values of each batch and their bytes, of `graph`'s units cut into stages (`stage_of`: int64[N]
    stage of each unit) on devices (`stage_device`: int[S]).
    """
    sent: dict[tuple[int, int], dict[tuple[int, int], float]] = {}  # (stage, dst) -> {(unit, out): bytes}
    for u, v, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist()):
        su, dst = int(stage_of[u]), int(stage_device[stage_of[v]])
        if dst != int(stage_device[su]):
            sent.setdefault((su, dst), {})[(u, o)] = float(graph.out_bytes[graph.out_offsets[u] + o])
    return {key: (len(values), sum(values.values())) for key, values in sent.items()}


def run_cost(costs: RigCosts, work: np.ndarray, n_in: np.ndarray, in_bytes: np.ndarray,
             out_bytes: np.ndarray) -> np.ndarray:
    """float64[S] microseconds of each stage's Run on its worker.

    Sends and receives apart: its launch, its units' `work`, and its charges per input (`n_in`) and per MB read
    (`in_bytes`) and made for other stages (`out_bytes`; bytes, `stage_inputs` and `stage_outputs`).
    """
    return (costs.launch_us + np.asarray(work, dtype=np.float64) + costs.launch_us_per_input * np.asarray(n_in)
            + costs.launch_us_per_input_mb * np.asarray(in_bytes) / 1e6
            + costs.launch_us_per_output_mb * np.asarray(out_bytes) / 1e6)


def stage_graph(graph: Graph, placement: Sequence[int], cluster: Cluster, order: Sequence[int], costs: RigCosts,
                holders: Sequence[bool] | None = None, extra_us: np.ndarray | None = None) -> StageGraph:
    """The stage graph of a placed unit graph (module docstring).

    Args:
      graph: N units, each costing `graph.cost_for(kind of its device)`.
      placement: int[N] device of each unit.
      cluster: the devices.
      order: the dispatch order, a topological permutation of the units.
      costs: the rig's costs.
      holders: bool[N] units that only hold values (None: `default_holders`).
      extra_us: float64[S] added to the stages' costs (`simulate_staged`'s contention).

    Raises:
      InputError: for a bad placement, or an order that is not a topological permutation of the units.
    """
    place = np.asarray(placement, dtype=np.int64)
    order = np.asarray(order, dtype=np.int64)
    _check(graph, place, order, cluster.n_devices)
    holders = default_holders(graph) if holders is None else np.asarray(holders, dtype=bool)
    runs = stage_runs(place.tolist(), order.tolist(), holders.tolist())
    n_stages, n_dev = len(runs), cluster.n_devices
    stage_of = np.empty(graph.n_nodes, dtype=np.int64)
    for s, run in enumerate(runs):
        stage_of[run] = s
    unit_cost = graph.cost_matrix(cluster.kinds)[np.arange(graph.n_nodes), place] if graph.n_nodes else np.zeros(0)
    s_dev = np.asarray([place[run[0]] for run in runs], dtype=np.int64)
    s_holder = np.asarray([bool(holders[run[0]]) for run in runs], dtype=bool)
    n_in, in_bytes = stage_inputs(graph, stage_of, n_stages)
    out_made = stage_outputs(graph, stage_of, n_stages)
    work = np.asarray([0.0 if s_holder[s] else float(unit_cost[run].sum()) for s, run in enumerate(runs)])
    cost = np.where(s_holder, 0.0, run_cost(costs, work, n_in, in_bytes, out_made))
    if extra_us is not None:
        cost = cost + np.asarray(extra_us, dtype=np.float64)
    local_bytes = np.zeros(n_stages)
    local_seen: set[tuple[int, int, int]] = set()  # (producer stage, unit, out) counted in local_bytes
    edges: set[tuple[int, int, int]] = set()
    first_reader: dict[tuple[int, int], int] = {}  # (stage, dst) -> first stage on dst reading the batch
    for u, v, o in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_out.tolist()):
        su, sv = int(stage_of[u]), int(stage_of[v])
        if su == sv:
            continue
        nbytes = float(graph.out_bytes[graph.out_offsets[u] + o])
        if s_dev[su] == s_dev[sv]:
            edges.add((su, sv, 0))
            if (su, u, o) not in local_seen:
                local_seen.add((su, u, o))
                local_bytes[su] += nbytes
        else:
            key = (su, int(s_dev[sv]))
            first_reader[key] = min(first_reader.get(key, sv), sv)
            edges.add((su, sv, 1 + int(s_dev[sv])))
    out_bytes = [[local_bytes[s]] + [0.0] * n_dev for s in range(n_stages)]
    for (s, dst), (count, nbytes) in stage_sends(graph, stage_of, s_dev).items():
        out_bytes[s][1 + dst] = nbytes
        cost[s] += costs.send_cost(nbytes, count)
        cost[first_reader[(s, dst)]] += costs.recv_cost(nbytes, count)  # before the first stage reading the batch
    last = {}
    for s in range(n_stages):  # each worker runs its stages in dispatch order
        d = int(s_dev[s])
        if d in last:
            edges.add((last[d], s, 0))
        last[d] = s
    nodes = [{"name": f"stage{s}:{runs[s][0]}+{len(runs[s]) - 1}", "op": "stage", "cost": float(cost[s]),
              "out_bytes": out_bytes[s]} for s in range(n_stages)]
    sg = make_graph(f"{graph.name}.stages", nodes, sorted(edges))
    return StageGraph(sg, s_dev.astype(np.int32), stage_of, tuple(tuple(r) for r in runs), s_holder, work)


def rig_cluster(cluster: Cluster, costs: RigCosts) -> Cluster:
    """`cluster`'s devices with the timing model the stage graph needs.

    No per-op delta1 (each stage's cost holds its launch), no bus (the copies are in the stages), no hosts,
    latency `costs.latency_us`.
    """
    devices = tuple(dataclasses.replace(d, host=None) for d in cluster.devices)
    return dataclasses.replace(cluster, devices=devices, delta1_us=0.0, delta2_us=0.0,
    bandwidth_bytes_per_us=NO_WIRE_BYTES_PER_US,
                               latency_us=float(costs.latency_us), hosts=())


class StagedResult(NamedTuple):
    """A staged simulation: step time and the stages' schedule."""

    runtime_us: float  # simulated step time, microseconds (the stages' makespan + RigCosts.step_us)
    stages: StageGraph
    schedule: SimResult  # the engine's result on the stage graph (start/finish per stage, microseconds)


def simulate_staged(graph: Graph, placement: Sequence[int], cluster: Cluster, order: Sequence[int],
                    costs: RigCosts, holders: Sequence[bool] | None = None) -> StagedResult:
    """Simulated step of `placement` run as stages in dispatch `order`.

    With the fast engine (simulator.engine.fast); see the module docstring. With `costs.contention`, a second pass
    adds to each stage `contention` x its units' work x the share of its time (first pass) another device was
    running a stage (`overlap`).
    """
    return _two_passes(simulate, graph, placement, cluster, order, costs, holders)


def simulate_staged_reference(graph: Graph, placement: Sequence[int], cluster: Cluster, order: Sequence[int],
                              costs: RigCosts, holders: Sequence[bool] | None = None) -> StagedResult:
    """`simulate_staged` on the plain-Python event loop: the oracle.

    simulator.engine.reference's.
    """
    return _two_passes(simulate_reference, graph, placement, cluster, order, costs, holders)


def _two_passes(engine, graph, placement, cluster, order, costs, holders) -> StagedResult:
    sg = stage_graph(graph, placement, cluster, order, costs, holders)
    rig = rig_cluster(cluster, costs)
    result = engine(sg.graph, sg.placement, rig)
    if costs.contention > 0 and cluster.n_devices > 1:
        extra = costs.contention * sg.work * overlap(result.start, result.end, sg.placement, ~sg.holder)
        sg = stage_graph(graph, placement, cluster, order, costs, holders, extra)
        result = engine(sg.graph, sg.placement, rig)
    return StagedResult(float(result.runtime) + costs.step_us, sg, result)


def overlap(start: np.ndarray, end: np.ndarray, device: np.ndarray, active: np.ndarray) -> np.ndarray:
    """float64[S] each stage's share of time another device runs one.

    The share of [start, end) during which another device runs an `active` stage, at most 1 (0 for a stage of no
    length or not active). Intervals in microseconds.
    """
    start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    share = np.zeros(len(start))
    for s in np.flatnonzero(active & (end > start)):
        others = active & (device != device[s])
        covered = np.clip(np.minimum(end[others], end[s]) - np.maximum(start[others], start[s]), 0.0, None)
        share[s] = min(float(covered.sum()) / (end[s] - start[s]), 1.0)  # (several other devices: capped)
    return share


def plan_order(plan) -> tuple[np.ndarray, np.ndarray]:
    """The unit order and holders of a staged plan, for `stage_runs`.

    Returns (int64[N] an order of the units that `stage_runs` cuts into exactly `plan`'s tasks, bool[N] holders:
    the units of tasks that dispatch nothing) of a staged `simulator.hardware.dispatch.Plan` (or anything with
    `.tasks` carrying `unit`, `units` and `fn`): the partition the harness really runs, re-traced program included.
    """
    runs = [tuple(t.units or (t.unit,)) for t in plan.tasks]
    order = np.asarray([u for run in runs for u in run], dtype=np.int64)
    holders = np.zeros(len(order), dtype=bool)
    for t, run in zip(plan.tasks, runs):
        if t.fn is None:
            holders[list(run)] = True
    return order, holders
