"""Per-unit costs measured inside one compiled step: the kernels' own time, not one dispatch per op.

Timing every op (or group) alone as its own jitted call measures the dispatch floor of a call (55 us on an H200,
where a whole rnnlm_l2 step takes 0.93 ms), and sums ops that XLA fuses. Here the whole program runs as ONE
jitted function on one device, returning the step's outputs (the program a single-device placement runs), each
unit (op or group) under its own `jax.named_scope("placeto_unit_<u>")`;
`jax.profiler` traces `repeats` steps, and every kernel (GPU) or thunk (XLA:CPU) event is attributed to a unit:

* the event's `hlo_op` stat (else its name) names an instruction of the compiled HLO module; that instruction's
  `metadata.op_name` carries the unit's scope (a fusion carries its root's). An instruction without one (a copy
  XLA inserted) takes the unit of its first operand that has one; what is left is reported as unattributed;
* events running at the same time share the elapsed time equally (XLA:CPU runs independent thunks on several
  threads), so the units' times add up to the time the device was busy, not to more;
* on a GPU (one stream, timestamps from the device) the idle gap before a kernel, within the step, is the launch
  latency of that kernel and is charged to its unit (`charge_gaps`): a launch-bound step is then accounted for;
  on the CPU the gaps hold the profiler's own per-event work (measured ~4 us per thunk) and are left out.

A unit's cost is its median over the traced steps, in microseconds. `StepProfile.busy_us` (the sum) is what the
simulator takes as one device's step time for the single-device placement; compare it with the plain jitted step
(experiments/gpu_check.py does).
XLA's `cost_analysis()` of the compiled step (flops, bytes accessed) is kept beside it as a cross-check.
"""

from __future__ import annotations

import glob
import re
import statistics
import tempfile
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.errors import InputError

SCOPE = "placeto_unit_"
_SCOPE_RE = re.compile(SCOPE + r"(\d+)")
_INSTR_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPNAME_RE = re.compile(r'op_name="([^"]*)"')
_OPERAND_RE = re.compile(r"%([\w.\-]+)")


class StepProfile(NamedTuple):
    """Costs of the units of one program measured inside its compiled step on one device."""

    cost_us: np.ndarray  # float64[U] median attributed device time per unit, microseconds
    busy_us: float  # median over steps of the attributed time of all units (= cost_us.sum() up to medians)
    unattributed_us: float  # median per step of event time no unit could be found for
    steps: int  # traced steps
    events: int  # kernel/thunk events per step (median)
    flops: float  # XLA cost_analysis of the compiled step (nan when unavailable)
    bytes_accessed: float


def step_function(units: Sequence[Any], order: Sequence[int],
                  outputs: Sequence[Any] | None = None) -> tuple[Callable, list]:
    """(f(*values) -> the values of `outputs`, the value Sources f takes in order).

    units: [U] simulator.hardware.UnitProgram; order: a topological order of the units; outputs: the step's
    outputs (Sources; anything else is skipped), so f is the program a single-device placement runs; None: every
    value passed between units, so each unit's results are materialised (no fusion across units). Each unit's
    body runs under `jax.named_scope(f"placeto_unit_{u}")`.
    """
    import jax

    from simulator.trace import Source

    value_keys = [Source(i, 0) for unit in units for i in unit.values]
    produced = ([s for u in order for s in units[u].outputs] if outputs is None else
                list(dict.fromkeys(s for s in outputs if isinstance(s, Source))))

    def step(*vals):
        env = dict(zip(value_keys, vals))
        for u in order:
            unit = units[u]
            if unit.body is None:
                continue
            with jax.named_scope(f"{SCOPE}{u}"):
                outs = unit.body(*[env[s] for s in unit.inputs])
            env.update(zip(unit.outputs, outs))
        return [env[s] for s in produced]

    return step, value_keys


def instruction_units(hlo_text: str) -> dict[str, int]:
    """HLO instruction name -> unit index, from `metadata={op_name=".../placeto_unit_<u>/..."}`; instructions
    without a unit scope take the unit of their first operand that has one (in text order, which defines every
    operand before its use)."""
    unit: dict[str, int] = {}
    pending: list[tuple[str, list[str]]] = []
    for line in hlo_text.splitlines():
        m = _INSTR_RE.match(line)
        if not m:
            continue
        name, rest = m.groups()
        op_name = _OPNAME_RE.search(rest)
        scopes = _SCOPE_RE.findall(op_name.group(1)) if op_name else []
        if scopes:
            unit[name] = int(scopes[-1])
        else:
            pending.append((name, _OPERAND_RE.findall(rest.split("metadata=")[0])))
    for name, operands in pending:
        for o in operands:
            if o in unit:
                unit[name] = unit[o]
                break
    return unit


def _normal(name: str) -> str:
    return name.replace("_", ".").lower()


def attribute(events: Sequence[tuple[float, float, str]], units: dict[str, int], n_units: int,
              charge_gaps: bool) -> tuple[np.ndarray, float]:
    """(float64[U] attributed microseconds, unattributed microseconds) of one step's events.

    events: (start_ns, duration_ns, instruction name). Overlapping events share the elapsed time equally; with
    `charge_gaps`, idle time between the first event's start and an event's start is charged to that event.
    """
    by_norm = {_normal(k): v for k, v in units.items()}
    cost = np.zeros(n_units)
    lost = 0.0
    if not events:
        return cost, lost
    idx = [units.get(n, by_norm.get(_normal(n), -1)) for _, _, n in events]
    bounds = sorted({t for s, d, _ in events for t in (s, s + d)})
    # sweep: split the timeline at every start/end, share each segment among the events covering it
    starts = sorted(range(len(events)), key=lambda k: events[k][0])
    active: set[int] = set()
    nxt = 0
    share = np.zeros(len(events))
    for a, b in zip(bounds[:-1], bounds[1:]):
        while nxt < len(starts) and events[starts[nxt]][0] <= a:
            active.add(starts[nxt])
            nxt += 1
        active = {k for k in active if events[k][0] + events[k][1] > a}
        if active:
            for k in active:
                share[k] += (b - a) / len(active)
        elif charge_gaps and nxt < len(starts):
            share[starts[nxt]] += b - a  # idle: the next kernel's launch
    for k, u in enumerate(idx):
        if u >= 0:
            cost[u] += share[k] / 1e3
        else:
            lost += share[k] / 1e3
    return cost, lost


def _events_by_run(path: str, module: str) -> tuple[dict[Any, list], bool]:
    """run id -> [(start_ns, duration_ns, instruction)] of the module's kernels/thunks in an xplane file, and
    whether they came from a device plane (a GPU/TPU timeline) rather than the host's threads."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(path)
    device_runs: dict[Any, list] = {}
    host_runs: dict[Any, list] = {}
    for plane in data.planes:
        on_device = plane.name.startswith("/device:")
        for line in plane.lines:
            for e in line.events:
                stats = dict(e.stats)
                op = stats.get("hlo_op")
                mod = str(stats.get("hlo_module", ""))
                if op is None or (mod and not mod.endswith(module) and module not in mod):
                    continue
                runs = device_runs if on_device else host_runs
                runs.setdefault(stats.get("run_id", 0), []).append((e.start_ns, e.duration_ns, str(op)))
    return (device_runs, True) if device_runs else (host_runs, False)


def profile_units(units: Sequence[Any], values: Sequence[Any], order: Sequence[int], device: Any,
                  repeats: int = 5, warmup: int = 2, outputs: Sequence[Any] | None = None) -> StepProfile:
    """Every unit's device time inside one compiled step of the whole program on `device` (see the module
    docstring). units: [U] simulator.hardware.UnitProgram; values: per op, its resident array (None elsewhere);
    order: a topological order of the units; outputs: the step's outputs (`step_function`; None: every value
    passed between units)."""
    import jax

    if repeats < 1:
        raise InputError(f"repeats must be >= 1, got {repeats}")
    if getattr(jax.profiler, "ProfileData", None) is None:
        raise InputError(f"jax {jax.__version__} has no jax.profiler.ProfileData to read a trace with: profile with "
                         f"--method units (each unit alone) or use jax >= 0.7.2")
    step, keys = step_function(units, order, outputs)
    args = [jax.device_put(values[s.node], device) for s in keys]
    compiled = jax.jit(step).lower(*args).compile()  # the arguments are committed to `device`: so is the step
    hlo = compiled.as_text()
    module = _module_name(hlo)
    units_of = instruction_units(hlo)
    for _ in range(max(1, warmup)):
        jax.block_until_ready(compiled(*args))
    with tempfile.TemporaryDirectory(prefix="placeto-trace-") as tmp:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0  # device and XLA events only: no Python frames (overhead, noise)
        jax.profiler.start_trace(tmp, profiler_options=options)
        try:
            for _ in range(repeats):
                jax.block_until_ready(compiled(*args))
        finally:
            jax.profiler.stop_trace()
        files = sorted(glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True))
        if not files:
            raise InputError("jax.profiler wrote no trace (is the profiler available in this jax build?)")
        runs, on_device = _events_by_run(files[-1], module)
    if not runs:
        raise InputError(f"the profiler trace holds no kernel events of module {module!r}")
    per_run = [attribute(ev, units_of, len(units), charge_gaps=on_device) for ev in runs.values()]
    costs = np.stack([c for c, _ in per_run])
    analysis = _cost_analysis(compiled)
    return StepProfile(np.median(costs, axis=0), float(np.median(costs.sum(axis=1))),
                       float(statistics.median(lost for _, lost in per_run)), len(per_run),
                       int(statistics.median(len(ev) for ev in runs.values())),
                       analysis.get("flops", float("nan")), analysis.get("bytes accessed", float("nan")))


def _module_name(hlo_text: str) -> str:
    m = re.search(r"HloModule\s+([\w.\-]+)", hlo_text)
    return m.group(1) if m else ""


def _cost_analysis(compiled: Any) -> dict:
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 -- optional cross-check; some backends have none
        return {}
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else {}
    return {k: float(v) for k, v in (analysis or {}).items() if k in ("flops", "bytes accessed")}
