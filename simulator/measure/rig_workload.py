"""The process rig's stage and transfer costs, fitted on a real step.

A stage of a real program costs its worker more than a trivial one, and a receive takes longer after its send
than the same values sent alone (docs/hardware.md, "Measured facts behind design choices"). So the costs
`simulator.engine.staged` charges are fitted here to the workers' own events (`simulator.hardware.rig.worker.Event`)
while they run placements of a small training step (`workload`: dense layers of two widths with a residual
branch, its gradient and an SGD update, traced per op and grouped as the datasets are), which is none of the
graphs a user places:

* stages: each Run's duration minus its units' costs profiled inside the whole step
  (simulator.measure.graph_profile's method, `simulator.measure.step_profile.profile_units` with every value
  materialised, corrected to the step's wall time) is fitted as launch_us + launch_us_per_input * values read
  from other stages + launch_us_per_input_mb * their MB (`simulator.engine.staged.stage_inputs`) +
  launch_us_per_output_mb * the MB of the values it makes that other stages read
  (`simulator.engine.staged.stage_outputs`). The workload's values are small (64 KB to 1 MB) and its per-MB
  charges come out near 0; those of a graph with large values are fitted on that graph itself, on top of these
  (simulator.measure.boundary_costs);
* sends: each Send's duration as send_us + send_us_per_value * values + send_us_per_mb * MB;
* receives: from the later of a Recv's start and its Send's end to the Recv's end, fitted as recv_us +
  recv_us_per_value * values + recv_us_per_mb * MB, plus latency_us (the wake-up) when the receiver was waiting
  (it started before the Send ended).

Every fit is non-negative least squares (scipy.optimize.nnls) over all events of `repeats` steps of each of
`PLACEMENTS` placements after two warm-up steps. `fit_events` is pure
(tests/simulator/measure/test_rig_workload.py).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple, Sequence

import numpy as np

from simulator.engine.staged import RigCosts, stage_inputs, stage_outputs
from simulator.grouping.group import group
from simulator.hardware.plans import program_plan
from simulator.hardware.rig.plans import to_rig
from simulator.hardware.rig.pool import one_core
from simulator.measure.step_profile import profile_units
from simulator.tracing.lowering import leaf_values, unit_order, unit_programs

VERSION = 3  # of the workload and the fit: rig costs cached under another version are measured again
#   (simulator.measure.cache.rig_costs_path); 2: the per-output-MB stage cost; 3: a Recv puts its batch's values
#   on the device in one call (simulator.hardware.rig.worker)
PLACEMENTS = ("random", "chunks", "sparse", "halves")  # per unit at random; 8 alternating slices; 20% on device
#   1; the first half of the order on device 0, the rest on 1 (one cut that many values cross: per-value costs)
WIDTHS = (128, 512, 256)  # the dense layers cycle through these widths (values of 64 KB to 1 MB)
BATCH = 128
DEPTH = 6
OPS_PER_UNIT = 6  # the ops are grouped (simulator.grouping.group) into units of about this many, as the datasets are


class StepEvents(NamedTuple):
    """One measured step of a placed program on the rig.

    With what the fit needs to read its events.
    """

    events: dict  # worker -> [simulator.hardware.rig.worker.Event] of the step
    tasks: tuple  # the plan's tasks (simulator.hardware.dispatch.Task), by the events' labels
    stage_of: np.ndarray  # int64[N] task index of each unit
    unit_cost: np.ndarray  # float64[N] profiled microseconds of each unit
    graph: Any  # simulator.model.graph.Graph of the units (their edges and out_bytes: `stage_inputs`)
    op_graph: Any  # simulator.model.graph.Graph of the ops (the bytes of the values a Send names)


def workload(seed: int = 0) -> tuple[Any, tuple]:
    """The calibration program: (step, example arguments).

    DEPTH dense layers cycling through WIDTHS, each tanh(h @ w + b) plus a relu branch, a mean-square loss, its
    gradient and an SGD update.
    """
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    widths = [WIDTHS[i % len(WIDTHS)] for i in range(DEPTH + 1)]
    params = {}
    for i in range(DEPTH):
        a, b = widths[i], widths[i + 1]
        params[f"w{i}"] = jnp.asarray(rng.normal(0, a ** -0.5, (a, b)), jnp.float32)
        params[f"v{i}"] = jnp.asarray(rng.normal(0, a ** -0.5, (a, b)), jnp.float32)
        params[f"b{i}"] = jnp.zeros((b,), jnp.float32)
    x = jnp.asarray(rng.normal(size=(BATCH, widths[0])), jnp.float32)

    def loss(p, x):
        h = x
        for i in range(DEPTH):
            h = jnp.tanh(h @ p[f"w{i}"] + p[f"b{i}"]) + jax.nn.relu(h @ p[f"v{i}"])
        return jnp.mean(h * h)

    def step(p, x):
        value, grads = jax.value_and_grad(loss)(p, x)
        return jax.tree.map(lambda w, g: w - 0.01 * g, p, grads), value

    return step, (params, x)


def placements(n: int, order: Sequence[int], seed: int = 0) -> list[np.ndarray]:
    """int32[n] placements of `PLACEMENTS` on 2 devices.

    `order` is a topological order of the units.
    """
    rng = np.random.default_rng(seed)
    position = np.empty(n, dtype=np.int64)
    position[np.asarray(order)] = np.arange(n)
    return [rng.integers(0, 2, n).astype(np.int32), ((position * 8 // max(n, 1)) % 2).astype(np.int32),
            (rng.random(n) < 0.2).astype(np.int32), (position * 2 // max(n, 1)).astype(np.int32)]


def measure(rig: Any, repeats: int = 10, seed: int = 0, launch_us: float = 0.0,
            step_us: float = 0.0) -> list[StepEvents]:
    """The events of the `PLACEMENTS` of `workload` on `rig`, every step.

    On the rig's first two workers. Two warm-up steps come first. The units' costs are profiled in this process on
    one core, then scaled so that, with `launch_us` and `step_us` (a trivial stage's and the parent's round trip),
    they add up to the whole step run as one stage on worker 0: what a stage costs beyond its units is then measured
    against the rig's own speed, not this process's.
    """
    import jax

    from simulator.tracing.trace import trace  # imports jax: the rig's cache and calibration load without it

    step, args = workload(seed)
    traced = trace(step, *args, name="rig-workload")
    values = leaf_values(traced, args)
    grouping = group(traced.graph, max(2, traced.graph.n_nodes // OPS_PER_UNIT))
    units = unit_programs(traced, grouping.op_to_group, grouping.graph.n_nodes)
    host = jax.devices("cpu")
    devices = [host[d % len(host)] for d in range(rig.n_devices)]
    with one_core():
        sp = profile_units(units, values, unit_order(units), devices[0], repeats, 2, None)
    order = unit_order(units)

    def run(placement: np.ndarray) -> tuple[tuple, np.ndarray, list[dict]]:
        plan = program_plan(traced, values, placement, devices, grouping.op_to_group, order, stages=True)
        stage_of = np.empty(len(units), dtype=np.int64)
        for k, t in enumerate(plan.tasks):
            stage_of[list(t.units or (t.unit,))] = k
        rig_plan = to_rig(plan, rig)
        try:
            for _ in range(2):  # the first compiles; the second too (the token is then a stage's output)
                rig_plan.run_step()
            events, walls = [], []
            for _ in range(repeats):
                t0 = time.perf_counter_ns()
                rig_plan.run_step()
                walls.append((time.perf_counter_ns() - t0) / 1e3)
                events.append(rig_plan.events)
        finally:
            rig_plan.close()
        return plan.tasks, stage_of, events, walls

    *_, alone = run(np.zeros(len(units), dtype=np.int32))  # the whole step as one stage on worker 0
    ran = float(np.median(alone)) - launch_us - step_us
    unit_cost = sp.wall_costs()
    unit_cost = unit_cost * (ran / unit_cost.sum()) if unit_cost.sum() > 0 else unit_cost  # as the rig runs them
    out = []
    for placement in placements(len(units), order, seed):
        tasks, stage_of, events, _ = run(placement)
        out += [StepEvents(ev, tasks, stage_of, unit_cost, grouping.graph, traced.graph) for ev in events]
    return out


def received(send_end_ns: int, recv: Any) -> tuple[float, bool]:
    """(microseconds, waited) of Recv event `recv` after its Send's end.

    `recv` is a simulator.hardware.rig.worker.Event whose batch's Send ended at `send_end_ns`. The time runs from
    the later of the Recv's start and the Send's end to the Recv's end; waited: whether the receiver was there first
    (waiting: woken up).
    """
    return (recv.end_ns - max(recv.start_ns, send_end_ns)) / 1e3, recv.start_ns < send_end_ns


def _rows(steps: Sequence[StepEvents]) -> tuple[list, list, list]:
    """The fit's rows of stages, sends and receives from `steps`.

    A stage's and a send's row is its median over the steps of one placement (the steps of a placement share its
    `tasks`), robust to a slow step.

    Returns:
      (stage rows (1, inputs, input MB, output MB, excess us), send rows (1, values, MB, us), receive rows (1,
      values, MB, whether it waited, us from the later of its start and the send's end to its end)).
    """
    runs: dict = {}  # (placement, label) -> [row]
    sent: dict = {}
    receives = []
    for st in steps:
        n_in, in_bytes = stage_inputs(st.graph, st.stage_of, len(st.tasks))
        out_bytes = stage_outputs(st.graph, st.stage_of, len(st.tasks))
        batch_bytes = {}
        send_end = {}
        for evs in st.events.values():
            for e in evs:
                if e.kind != "send":
                    continue
                t = st.tasks[e.label]
                vals = [s for _, vs in t.sends for s in vs]
                nbytes = sum(float(st.op_graph.out_bytes[st.op_graph.out_offsets[s.node] + s.out]) for s in vals)
                batch_bytes[e.label] = (len(vals), nbytes)
                send_end[e.label] = e.end_ns
                sent.setdefault((id(st.tasks), e.label), []).append(
                    (1.0, len(vals), nbytes / 1e6, (e.end_ns - e.start_ns) / 1e3))
        ran = [e for evs in st.events.values() for e in evs if e.kind == "run"]
        for e in ran:
            t = st.tasks[e.label]
            work = float(st.unit_cost[list(t.units or (t.unit,))].sum())
            runs.setdefault((id(st.tasks), e.label), []).append(
                (1.0, float(n_in[e.label]), in_bytes[e.label] / 1e6, out_bytes[e.label] / 1e6,
                 (e.end_ns - e.start_ns) / 1e3 - work))
        for evs in st.events.values():
            for e in evs:
                if e.kind == "recv" and e.label in send_end:
                    count, nbytes = batch_bytes[e.label]
                    us, waited = received(send_end[e.label], e)
                    receives.append((1.0, count, nbytes / 1e6, float(waited), us))
    stages = [tuple(np.median(np.asarray(r), axis=0)) for r in runs.values()]
    sends = [tuple(np.median(np.asarray(r), axis=0)) for r in sent.values()]
    return stages, sends, receives


def _nnls(rows: list) -> np.ndarray:
    from scipy.optimize import nnls

    a = np.asarray(rows, dtype=np.float64)
    return nnls(a[:, :-1], a[:, -1])[0]


def fit_events(steps: Sequence[StepEvents], step_us: float = 0.0) -> RigCosts:
    """The RigCosts fitted to the events of `steps` (see the module docstring).

    `step_us` is taken as given.
    """
    stages, sends, receives = _rows(steps)
    launch = _nnls(stages) if stages else np.zeros(4)  # launch, per input, per input MB, per output MB
    send = _nnls(sends) if sends else np.zeros(3)
    recv = _nnls(receives) if receives else np.zeros(4)  # recv_us, per value, per MB, latency (when waiting)
    return RigCosts(launch_us=float(launch[0]), launch_us_per_input=float(launch[1]),
                    launch_us_per_input_mb=float(launch[2]), launch_us_per_output_mb=float(launch[3]),
                    step_us=max(float(step_us), 0.0),
                    send_us=float(send[0]), send_us_per_value=float(send[1]), send_us_per_mb=float(send[2]),
                    recv_us=float(recv[0]), recv_us_per_value=float(recv[1]), recv_us_per_mb=float(recv[2]),
                    latency_us=float(recv[3]))


def counts(steps: Sequence[StepEvents]) -> dict:
    """How many events of each kind the fit used.

    Stage and send rows: per placement and task.
    """
    stages, sends, receives = _rows(steps)
    return {"stages": len(stages), "sends": len(sends), "receives": len(receives),
            "waiting_receives": int(sum(r[3] for r in receives))}
