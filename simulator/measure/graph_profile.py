"""`placeto profile`: a graph's unit costs on the local devices.

The local devices measure the costs, filed under each device's kind. Three ways to measure, `method`:

    step   (default) the whole program as one compiled step per device, each unit (op or group) under its own
           named scope, its kernels' time read from a jax.profiler trace (simulator.measure.step_profile): the
           cost of the unit as it runs inside the compiled step, without the dispatch floor of a call (tens of us)
    units  every unit alone as its own jitted call, net of the measured dispatch floor
           (simulator.measure.calibrate.profile_plan): what the per-unit harness pays
    ops    every op alone (simulator.measure.profile.profile_graph), summed per group: the old op-level profile,
           one dispatch floor per op (on a GPU many times the op's kernels)

Costs go under the device's kind (simulator.hardware.devices.kind_of: "local-cpu", "local-h200", ...), or a name
the user gives when all devices are of one kind; the calibrated cluster of `placeto calibrate` uses the same
kinds, so `eval --costs graph` and `place --hardware` simulate with them. meta.profile[kind] records the method,
the device, the JAX version, the host (platform.node()), the machine's load when the measurement began (1-minute
load average and cores: `machine_load`; a profile taken `under_load` says so and is not kept as final by `place
--hardware`) and, for `step`, the busy time and XLA's flop and byte counts of the compiled step.
"""

from __future__ import annotations

import contextlib
import os
import platform
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from simulator.hardware.devices import kind_of
from simulator.hardware.plans import materialises, units_plan
from simulator.measure.calibrate import dispatch_floor_us, profile_plan
from simulator.measure.profile import dispatch_overhead_us, profile_graph, with_measured
from simulator.measure.step_profile import ATTRIBUTION, profile_units
from simulator.model.errors import InputError
from simulator.hardware.plans import MATERIALISED_PLATFORMS
from simulator.measure.cache import ProfileKey
from simulator.measure.step_profile import ATTRIBUTION
from simulator.model.graph import Graph
from simulator.tracing.lowering import unit_order
from simulator.tracing.program import Program, graph_program

METHODS = ("step", "units", "ops")
# `estimate_seconds`: what a step profile of one kind takes on this 2-core machine (one pinned core, load 2.5-4),
# fitted on six shipped graphs: mlp_000 (3,470 ops: 5.4 s), transformer_000 (2,348: 7.5 s), nmt_004 (4,622: 15.9 s),
# cnn_000 (1,726 ops, convolutions: 21.2 s), ptb_000 (5,159: 35.7 s), cifar10_000 (5,459: 40.1 s); the estimates
# are 0.85-2.4x these. Re-trace and compilation grow faster than the ops (XLA's passes), the steps with their time,
# which the analytic "cpu" costs underestimate about STEP_FACTOR times on one core
PROFILE_BASE_S = 1.0  # s: the profiler's start and the trace's reading
PROFILE_S_PER_KOPS2 = 0.98  # s per (thousand ops of the program)^2: re-trace and compilation
STEP_FACTOR = 2.1  # one pinned core's step over the analytic "cpu" step (sum of the graph's "cpu" costs)
MAX_LOAD_PER_CORE = 0.5  # a profile taken while the 1-minute load average, less 1 for placeto's own process
#                          (a run just before counts too), exceeded 0.5 x cores was taken under load
LOAD_ENV = "PLACETO_MAX_LOAD_PER_CORE"  # overrides MAX_LOAD_PER_CORE (a shared machine that is never idle)


def profile(graph: Graph, kind: str | None = None, repeats: int = 5, warmup: int = 2, program: str | None = None,
            args_spec: str | None = None, exported: str | None = None, devices: Sequence[Any] | None = None,
            method: str = "step", progress: bool = False) -> Graph:
    """`graph` with measured costs for every kind of device in `devices`.

    float64[N] microseconds per kind. Each kind is taken on its first device in `devices` (default: the first local
    device); `kind` renames the kind when there is one. `progress`: a bar on stderr over its phases (the program,
    then each kind), its clock ticking within each.

    Raises:
      InputError: an unknown method, repeats < 1, `kind` with devices of several kinds, or method "ops" on an
        exported program.
    """
    import jax

    if method not in METHODS:
        raise InputError(f"unknown profile method {method!r} (known: {', '.join(METHODS)})")
    if repeats < 1:
        raise InputError(f"repeats must be >= 1, got {repeats}")
    devices = list(devices) if devices else jax.devices()[:1]
    by_kind: dict[str, Any] = {}
    for d in devices:
        by_kind.setdefault(kind_of(d), d)
    if kind is not None and len(by_kind) > 1:
        raise InputError(f"--kind names one kind, but the devices are of {len(by_kind)}: "
                         f"{', '.join(by_kind)} (leave --kind out: each is filed under its own)")
    with phases(1 + len(by_kind), graph.name, progress) as bar:
        bar.set_postfix_str("the program (re-trace or export)")
        prog = graph_program(graph, program, args_spec, exported)
        if method == "ops" and prog.traced is None:
            raise InputError(f"graph {graph.name!r}: --method ops re-traces the program; an exported program can "
                             f"only be profiled by units (--method step or units)")
        for name, device in by_kind.items():
            bar.update()
            bar.set_postfix_str(f"{len(prog.units)} units on {device} ({method}: {MEASURES[method]})")
            load = machine_load()  # before the measurement: its own work would count as load
            cost, info = measure(prog, device, method, repeats, warmup)
            graph = with_measured(graph, kind or name, np.round(cost, 3), {
                "method": method, "repeats": repeats, "warmup": warmup, "source": prog.source, **load, **info},
                device)
        bar.update()
    return graph


def estimate_seconds(graph: Graph, repeats: int = 5, warmup: int = 2) -> float:
    """Seconds a step profile (`profile`, method "step") of `graph` on one device kind is estimated to take here.

    PROFILE_BASE_S, plus PROFILE_S_PER_KOPS2 per (thousand ops of the program)^2 (meta.ops for a grouped graph,
    else its nodes), plus the warmup + 2 x repeats steps (timed, then traced), each STEP_FACTOR times the graph's
    analytic "cpu" step (0 when it has none). An order of magnitude for one machine (the constants' comment), to be
    said as an estimate.
    """
    ops = int(graph.meta.get("ops") or graph.n_nodes)
    step_s = float(np.nansum(graph.cost_for("cpu"))) / 1e6 if graph.has_costs("cpu") else 0.0
    return PROFILE_BASE_S + PROFILE_S_PER_KOPS2 * (ops / 1e3) ** 2 + (warmup + 2 * repeats) * STEP_FACTOR * step_s


MEASURES = {"step": "compiling the step, then tracing it", "units": "each unit alone", "ops": "each op alone"}


@contextlib.contextmanager
def phases(total: int, name: str, enabled: bool) -> Iterator[Any]:
    """A tqdm bar on stderr over `total` phases of profiling `name`.

    On a terminal only. It is redrawn every second so that its clock ticks through a phase of minutes (a step's
    compilation and trace has no finer steps to count); rate and ETA are the average over the phases done (smoothing
    0).
    """
    import threading

    from tqdm import tqdm

    bar = tqdm(total=total, desc=f"profile {name}", unit="phase", disable=None if enabled else True, smoothing=0,
               bar_format="{desc}: {n}/{total} phases [{elapsed}<{remaining}]{postfix}")  # None: on a terminal only
    enabled = not bar.disable
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    if enabled:
        ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        if enabled:
            ticker.join()
        bar.close()


def machine_load() -> dict[str, Any]:
    """What a profile records of the machine it is taken on.

    "host" (platform.node()), "load_1min" (the 1-minute load average, runnable processes; None where the OS has
    none) and "cores" (os.cpu_count()).
    """
    try:
        load = round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        load = None
    return {"host": platform.node(), "load_1min": load, "cores": os.cpu_count()}


def max_load_per_core(environ: Mapping[str, str] = os.environ) -> float:
    """The load per core above which a profile counts as taken under load.

    $PLACETO_MAX_LOAD_PER_CORE when set to a number >= 0, else MAX_LOAD_PER_CORE (0.5).
    """
    try:
        value = float(environ.get(LOAD_ENV, ""))
    except ValueError:
        return MAX_LOAD_PER_CORE
    return value if value >= 0 else MAX_LOAD_PER_CORE


def under_load(how: Mapping[str, Any]) -> bool:
    """Whether the profile recorded as `how` was taken under load.

    `how` is a meta.profile entry; it was when its load_1min, less 1 for placeto's own process, is above
    `max_load_per_core()` x its cores (on 2 cores: a load above 2.0). An entry without them (a profile older than
    the rule) was not.
    """
    load, cores = how.get("load_1min"), how.get("cores")
    if not isinstance(load, (int, float)) or not isinstance(cores, int) or cores < 1:
        return False
    return load - 1.0 > max_load_per_core() * cores


def measure(prog: Program, device: Any, method: str, repeats: int, warmup: int) -> tuple[np.ndarray, dict]:
    """Measures every unit of `prog` on `device` by `method`.

    Returns:
      (float64[U] microseconds per unit, what to record about the measurement).
    """
    if method == "step":
        whole = materialises(device)  # as the harness runs a stage there (simulator.hardware.plans.materialises)
        sp = profile_units(prog.units, prog.values, unit_order(prog.units), device, repeats, warmup,
                           None if whole else prog.outputs)
        return sp.wall_costs(), {
            "materialised": whole, "attribution": ATTRIBUTION, "busy_us": round(sp.busy_us, 3),
            "unattributed_us": round(sp.unattributed_us, 3), "step_wall_us": round(sp.wall_us, 3),
            "launch_us": round(sp.launch_us, 3), "steps_traced": sp.steps,
            "events_per_step": sp.events, "xla_flops": _finite(sp.flops),
            "xla_bytes_accessed": _finite(sp.bytes_accessed)}
    if method == "units":
        plan = units_plan(prog.units, prog.values, np.zeros(len(prog.units), np.int32), [device], (), None, {},
                          stages=False)
        return profile_plan(plan, repeats), {"dispatch_floor_us": round(dispatch_floor_us(device), 3)}
    import jax

    with jax.default_device(device):
        op_cost = profile_graph(prog.traced, repeats, warmup)
        floor = dispatch_overhead_us()
    cost = op_cost if prog.op_to_group is None else np.bincount(prog.op_to_group, weights=op_cost,
                                                                minlength=len(prog.units))
    return cost, {"dispatch_overhead_us": round(floor, 3)}


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def stale(how: Mapping[str, Any] | None, key: ProfileKey) -> str | None:
    """Why the profile recorded as `how` cannot serve `key`; None if current.

    `how` is a meta.profile entry; current: measured by the step method on the same device, host and JAX version,
    and not under load.
    """
    if not how:
        return "is missing"
    if how.get("method") != "step":
        if how.get("method") is None:  # an op-level profile of before the step method: it records no method
            return "records no measuring method (an older op-level profile, not the step method's)"
        return f"was measured by method {how.get('method')!r}, not 'step'"
    if (how.get("platform") in MATERIALISED_PLATFORMS) != (how.get("materialised") is True):
        return "was measured before the harness materialised every unit's outputs (simulator.hardware.plans.materialises)"
    if how.get("attribution") != ATTRIBUTION:
        return ("was attributed to units by an older rule (a kernel without a unit scope charged to its operand's "
                "unit, not its user's: simulator.measure.step_profile.instruction_units)")
    if how.get("device") != key.device:
        return f"is of another device ({how.get('device')})"
    if how.get("jax_version") != key.jax_version:
        return f"is from JAX {how.get('jax_version')}, this is {key.jax_version}"
    if how.get("host") != key.host:
        return "is from another host" if how.get("host") else "does not record its host"
    if under_load(how):
        return f"was measured under load (load {how['load_1min']:g} on {how['cores']} cores)"
    return None
