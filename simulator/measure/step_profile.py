"""Per-unit costs inside one compiled step: kernel time, not dispatches.

Timing every op (or group) alone as its own jitted call measures the dispatch floor of a call (rnnlm_l2's units
timed alone against its plain jitted step on an H200: experiments/results/benchmarks/gpu_check_h200.md), and
sums ops that XLA fuses. Here the whole program runs as ONE jitted function on one device, returning the step's
outputs (the program a single-device placement runs), each unit (op or group) under its own
`jax.named_scope("placeto_unit_<u>")`; `jax.profiler` traces `repeats` steps, and every kernel (GPU) or thunk
(XLA:CPU) event is attributed to a unit:

* the event's `hlo_op` stat (else its name) names an instruction of the compiled HLO module; that instruction's
  `metadata.op_name` carries the unit's scope (a fusion carries its root's). An instruction without one (a
  wrapper or copy XLA inserted) takes the unit of its nearest user that has one (`instruction_units`); what is
  left is reported as unattributed;
* a GPU's kernels inside a command buffer (a CUDA graph: XLA:GPU's default) all carry the buffer's `hlo_op`
  (`command_buffer_1`), which names no instruction; the kernel's own name does (the fusion's name with `_` for
  `.`), so each event is attributed by the first of its `hlo_op`, its name and its scope (`name` stat) that
  names a unit. cuBLAS kernels outside a buffer carry `hlo_op` = their custom-call;
* on the host's threads (XLA:CPU runs independent thunks on several threads) events running at the same time
  share the elapsed time equally, so the units' times add up to the time the device was busy; on a device
  plane (one GPU stream) every kernel is charged its own duration: the kernels a CUDA graph runs side by side
  are the step's work (rnnlm_l2's H200 traces in tests/data/gpu_traces against its real step:
  tests/simulator/measure/test_step_profile.py);
* idle gaps are never charged: under the profiler each kernel launched outside a command buffer waits several
  microseconds (rnnlm_l2_nocmdbuf in tests/data/gpu_traces), on the CPU the gaps hold the profiler's own
  per-event work. What launching a step costs beyond its kernels is measured outside the profiler instead:
  `StepProfile.wall_us` (the compiled step timed alone) minus `busy_us` is `launch_us`;
* GPU events carry no `run_id`: each is given the run of the host call that launched it (`trace_events`); where
  that fails, the traced steps are split at their `steps - 1` largest idle gaps (between steps the host blocks
  on the outputs and launches the next: far longer than the gaps between the kernels of one step;
  tests/simulator/measure/test_step_profile.py finds the 3 steps of each trace).

A unit's cost is its median over the traced steps, in microseconds. `StepProfile.busy_us` (the sum) is what the
simulator takes as one device's step time for the single-device placement; compare it with the plain jitted
step (experiments/benchmarks/gpu_check.py does). `profile_trace` reads a saved trace (tests/data/gpu_traces:
H200 traces). XLA's `cost_analysis()` of the compiled step (flops, bytes accessed) is kept beside it as a
cross-check.
"""

from __future__ import annotations

import glob
import re
import statistics
import tempfile
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.hardware.timing import time_calls
from simulator.model.errors import InputError
from simulator.model.graph import Source

ATTRIBUTION = 2  # the rule `instruction_units` charges kernels without a unit scope by (2: nearest scoped user first)

SCOPE = "placeto_unit_"
_SCOPE_RE = re.compile(SCOPE + r"(\d+)")
_INSTR_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPNAME_RE = re.compile(r'op_name="([^"]*)"')
_OPERAND_RE = re.compile(r"%([\w.\-]+)")


class StepProfile(NamedTuple):
    """Costs of the units of one program, measured inside its compiled step.

    On one device.
    """

    cost_us: np.ndarray  # float64[U] median attributed device time per unit, microseconds
    busy_us: float  # median over steps of the attributed time of all units (= cost_us.sum() up to medians)
    unattributed_us: float  # median per step of event time no unit could be found for
    steps: int  # traced steps
    events: int  # kernel/thunk events per step (median)
    flops: float  # XLA cost_analysis of the compiled step (nan when unavailable)
    bytes_accessed: float
    wall_us: float = float("nan")  # median of the compiled step timed alone (no profiler), microseconds
    on_device: bool = False  # the events came from a device plane (a GPU stream), not the host's threads
    unit_events: np.ndarray | None = None  # float64[U] median events (kernels, thunks) per step of each unit

    def wall_costs(self) -> np.ndarray:
        """float64[U] `cost_us` corrected per event to add up to `wall_us`.

        `wall_us` is the step timed without the profiler: each unit gets (wall_us - busy_us) / events times its
        events per step (`unit_events`), at least 0 in all. On XLA:CPU a step's time beyond its thunks' own is the
        thunk executor's work between thunks, and under the profiler each thunk takes longer by the profiler's own
        work: both are per thunk, so a unit's share is its thunks' (docs/hardware.md, "Measured facts behind design
        choices"). `cost_us` as is when there is no wall time or no event count, or for a device plane (a GPU's
        launch is per step, not per kernel).
        """
        if self.on_device or self.unit_events is None or not np.isfinite(self.wall_us) or \
                self.unit_events.sum() <= 0:
            return self.cost_us
        per_event = (self.wall_us - self.busy_us) / self.unit_events.sum()
        return np.maximum(self.cost_us + per_event * self.unit_events, 0.0)

    @property
    def launch_us(self) -> float:
        """What a step costs beyond its kernels, microseconds.

        Launch and synchronisation: wall_us - busy_us, at least 0 (nan when the step was not timed).
        """
        return max(0.0, self.wall_us - self.busy_us) if np.isfinite(self.wall_us) else float("nan")

    @property
    def attributed_fraction(self) -> float:
        """The share of the events' time attributed to a unit.

        1.0 when there were no events.
        """
        total = self.busy_us + self.unattributed_us
        return self.busy_us / total if total > 0 else 1.0


def step_function(units: Sequence[Any], order: Sequence[int],
                  outputs: Sequence[Any] | None = None) -> tuple[Callable, list]:
    """The program a single-device placement runs, as one function.

    Each unit's body runs under `jax.named_scope(f"placeto_unit_{u}")`.

    Args:
      units: [U] simulator.tracing.lowering.UnitProgram.
      order: a topological order of the units.
      outputs: the step's outputs (Sources; anything else is skipped). None: every value passed between units, so
        each unit's results are materialised, and each unit reads its inputs through one
        `jax.lax.optimization_barrier`, so that XLA fuses no unit's work into another's kernel (neither a producer
        into its consumer nor two readers of one value into a multi-output kernel), as no stage boundary lets it.

    Returns:
      (f(*values) -> the values of `outputs`, the value Sources f takes in order).
    """
    import jax

    value_keys = [Source(i, 0) for unit in units for i in unit.values]
    produced = ([s for u in order for s in units[u].outputs] if outputs is None else
                list(dict.fromkeys(s for s in outputs if isinstance(s, Source))))

    def step(*vals):
        env = dict(zip(value_keys, vals))
        for u in order:
            unit = units[u]
            if unit.body is None:
                continue
            ins = [env[s] for s in unit.inputs]
            if outputs is None and ins:
                ins = list(jax.lax.optimization_barrier(tuple(ins)))
            with jax.named_scope(f"{SCOPE}{u}"):
                outs = unit.body(*ins)
            env.update(zip(unit.outputs, outs))
        return [env[s] for s in produced]

    return step, value_keys


def instruction_units(hlo_text: str) -> dict[str, int]:
    """HLO instruction name -> unit index, from each instruction's unit scope.

    The scope is in `metadata={op_name=".../placeto_unit_<u>/..."}`. An instruction without a unit scope (XLA:CPU's
    own wrappers carry none: `ynn_fusion.N` around a convolution or dot, `wrapped_reduce-window.N`, layout copies)
    takes the unit of its first user that has one, else the unit its first unscoped user took that way (linear:
    users are resolved first); one no scoped instruction uses takes the unit of its first operand that has one.
    Users first: a weight gradient's convolution reads the forward activation, so the operand rule charged it, and
    a pooling's gradient, to the forward unit that made that activation (docs/hardware.md, "Each kernel to the unit
    that needs it"; experiments/results/benchmarks/stage_attribution.md).
    """
    unit: dict[str, int] = {}
    operands: dict[str, list[str]] = {}
    for line in hlo_text.splitlines():
        m = _INSTR_RE.match(line)
        if not m:
            continue
        name, rest = m.groups()
        op_name = _OPNAME_RE.search(rest)
        scopes = _SCOPE_RE.findall(op_name.group(1)) if op_name else []
        operands[name] = _OPERAND_RE.findall(rest.split("metadata=")[0])
        if scopes:
            unit[name] = int(scopes[-1])
    users: dict[str, list[str]] = {}
    for name, ops in operands.items():
        for o in ops:
            users.setdefault(o, []).append(name)
    by_users: dict[str, int] = {}
    for name in reversed(list(operands)):  # users before operands (text order defines an operand before its use)
        if name in unit:
            continue
        mine = users.get(name, ())
        found = next((unit[x] for x in mine if x in unit), None)  # a scoped user, else one resolved through users
        found = next((by_users[x] for x in mine if x in by_users), None) if found is None else found
        if found is not None:
            by_users[name] = found
    unit.update(by_users)
    for name, ops in operands.items():  # used by no scoped instruction: its first operand's unit (text order)
        if name not in unit:
            for o in ops:
                if o in unit:
                    unit[name] = unit[o]
                    break
    return unit


def _normal(name: str) -> str:
    return name.replace("_", ".").lower()


def _unit_of(names: str | tuple[str, ...], units: dict[str, int], by_norm: dict[str, int]) -> int:
    """The unit of an event, or -1 if none of its names gives one.

    The first of its names that is an instruction of `units` (exactly, or with `_` for `.`) or that carries a unit
    scope.
    """
    for n in (names,) if isinstance(names, str) else names:
        u = units.get(n, by_norm.get(_normal(n), -1))
        if u >= 0:
            return u
        scopes = _SCOPE_RE.findall(n)
        if scopes:
            return int(scopes[-1])
    return -1


def attribute(events: Sequence[tuple[float, float, Any]], units: dict[str, int], n_units: int,
              share_overlaps: bool = True) -> tuple[np.ndarray, float]:
    """Attributes one step's events to units.

    With `share_overlaps` (host threads), events running at the same time share the elapsed time equally; without
    (a GPU stream), each event is charged its own duration. Idle gaps are charged to nobody.

    Args:
      events: (start_ns, duration_ns, names) each; names is an instruction name or a tuple of candidates (`hlo_op`,
        the event's name, its scope), the first that names a unit wins.
      units: instruction name -> unit (`instruction_units`).
      n_units: U.
      share_overlaps: share the time of overlapping events.

    Returns:
      (float64[U] attributed microseconds, unattributed microseconds).
    """
    by_norm = {_normal(k): v for k, v in units.items()}
    cost = np.zeros(n_units)
    if not events:
        return cost, 0.0
    idx = [_unit_of(n, units, by_norm) for _, _, n in events]
    if share_overlaps:
        share = np.zeros(len(events))
        bounds = sorted({t for s, d, _ in events for t in (s, s + d)})
        # sweep: split the timeline at every start/end, share each segment among the events covering it
        starts = sorted(range(len(events)), key=lambda k: events[k][0])
        active: set[int] = set()
        nxt = 0
        for a, b in zip(bounds[:-1], bounds[1:]):
            while nxt < len(starts) and events[starts[nxt]][0] <= a:
                active.add(starts[nxt])
                nxt += 1
            active = {k for k in active if events[k][0] + events[k][1] > a}
            for k in active:
                share[k] += (b - a) / len(active)
    else:
        share = np.array([float(d) for _, d, _ in events])
    lost = 0.0
    for k, u in enumerate(idx):
        if 0 <= u < n_units:
            cost[u] += share[k] / 1e3
        else:
            lost += share[k] / 1e3
    return cost, lost


def split_steps(events: Sequence[tuple[float, float, Any]], steps: int) -> list[list]:
    """`events` of `steps` consecutive steps, cut at the largest idle gaps.

    The `steps - 1` largest gaps (the time from the latest end so far to the next start), in start order; fewer
    groups if there are fewer gaps.
    """
    ordered = sorted(events, key=lambda e: e[0])
    if steps <= 1 or len(ordered) < 2:
        return [ordered] if ordered else []
    ends = np.maximum.accumulate(np.array([s + d for s, d, _ in ordered], dtype=np.float64))
    gaps = np.array([s for s, _, _ in ordered[1:]], dtype=np.float64) - ends[:-1]
    cuts = sorted(np.argsort(-gaps, kind="stable")[:steps - 1] + 1)
    return [ordered[a:b] for a, b in zip([0, *cuts], [*cuts, len(ordered)])]


def trace_events(data: Any, module: str, steps: int) -> tuple[list[list], bool]:
    """`module`'s kernel (GPU) or thunk (XLA:CPU) events, step by step.

    Read from a jax.profiler.ProfileData. An event is (start_ns, duration_ns, (hlo_op, name, scope)). Host events
    are grouped by their `run_id`. Device events carry none: each is given the run of the host call that launched
    it (its `correlation_id` names a host launch event, inside the host's execute event that has the `run_id`);
    where that fails for any event, the device events are cut by `split_steps`.

    Returns:
      ([events of each traced step], whether they came from a device plane).
    """
    device: list = []  # (event, correlation id)
    host_runs: dict[Any, list] = {}
    spans: list[tuple[tuple, float, float, Any]] = []  # host execute calls: (line, start, end, run id)
    launches: list[tuple[tuple, float, Any]] = []  # host launch calls: (line, start, correlation id)
    for plane in data.planes:
        on_device = plane.name.startswith("/device:")
        for li, line in enumerate(plane.lines):
            for e in line.events:
                stats = dict(e.stats)
                op = stats.get("hlo_op")
                if not on_device and op is None:  # a host call: an execute (run id) or a launch (correlation)
                    if "run_id" in stats:
                        spans.append(((plane.name, li), e.start_ns, e.start_ns + e.duration_ns, stats["run_id"]))
                    elif "correlation_id" in stats:
                        launches.append(((plane.name, li), e.start_ns, stats["correlation_id"]))
                    continue
                mod = str(stats.get("hlo_module", ""))
                if op is None or (mod and not mod.endswith(module) and module not in mod):
                    continue
                event = (e.start_ns, e.duration_ns, (str(op), str(e.name), str(stats.get("name", ""))))
                if on_device:
                    device.append((event, stats.get("correlation_id")))
                else:
                    host_runs.setdefault(stats.get("run_id", 0), []).append(event)
    if not device:
        return list(host_runs.values()), False
    first = {}  # run id -> its execute call's start: the steps in order
    for _, a, _, r in spans:
        first[r] = min(a, first.get(r, a))
    run_of = {}  # correlation id -> (start of its run, run id)
    for line, t, corr in launches:
        run = next((r for ln, a, b, r in spans if ln == line and a <= t <= b), None)
        if run is not None:
            run_of[corr] = (first[run], run)
    if all(c in run_of for _, c in device):
        by_run: dict[Any, list] = {}
        for ev, c in device:
            by_run.setdefault(run_of[c], []).append(ev)
        return [sorted(by_run[r], key=lambda e: e[0]) for r in sorted(by_run)], True
    return split_steps([ev for ev, _ in device], steps), True


def profile_trace(data: Any, hlo_text: str, n_units: int, steps: int,
                  wall_us: float = float("nan")) -> StepProfile:
    """The StepProfile of a saved trace of `steps` calls of a compiled step.

    Args:
      data: a jax.profiler.ProfileData.
      hlo_text: the step's compiled HLO (the unit scopes).
      n_units: U.
      steps: the traced calls.
      wall_us: the step timed alone, if it was.

    Raises:
      InputError: the trace holds no kernel events of the step's module.
    """
    module = _module_name(hlo_text)
    runs, on_device = trace_events(data, module, steps)
    if not runs:
        raise InputError(f"the profiler trace holds no kernel events of module {module!r}")
    units_of = instruction_units(hlo_text)
    per_run = [attribute(ev, units_of, n_units, share_overlaps=not on_device) for ev in runs]
    costs = np.stack([c for c, _ in per_run])
    counts = np.stack([event_counts(ev, units_of, n_units) for ev in runs])
    return StepProfile(np.median(costs, axis=0), float(np.median(costs.sum(axis=1))),
                       float(statistics.median(lost for _, lost in per_run)), len(per_run),
                       int(statistics.median(len(ev) for ev in runs)), float("nan"), float("nan"),
                       float(wall_us), on_device, np.median(counts, axis=0))


def event_counts(events: Sequence[tuple[float, float, Any]], units: dict[str, int], n_units: int) -> np.ndarray:
    """float64[U] how many of one step's `events` each unit was given."""
    by_norm = {_normal(k): v for k, v in units.items()}
    idx = np.asarray([_unit_of(n, units, by_norm) for _, _, n in events], dtype=np.int64)
    return np.bincount(idx[(idx >= 0) & (idx < n_units)], minlength=n_units).astype(np.float64)


MAX_TRACED_STEPS = 50  # steps under jax.profiler per profile (its trace is in memory); more are only timed


def profile_units(units: Sequence[Any], values: Sequence[Any], order: Sequence[int], device: Any,
                  repeats: int = 5, warmup: int = 2, outputs: Sequence[Any] | None = None) -> StepProfile:
    """Every unit's device time inside one compiled step on `device`.

    The step is the whole program. See the module docstring. The step is also timed alone, `repeats` times, outside
    the profiler (`wall_us`). At most `MAX_TRACED_STEPS` of the steps are traced: the trace holds every kernel's
    events in memory (a profile of 100,000 traced steps grew past 24 GB), and the units' medians settle long before.

    Args:
      units: [U] simulator.tracing.lowering.UnitProgram.
      values: per op, its resident array (None elsewhere).
      order: a topological order of the units.
      device: the JAX device.
      repeats: timed steps; as many traced, up to MAX_TRACED_STEPS.
      warmup: untimed steps first (at least 1: the first compiles).
      outputs: the step's outputs (`step_function`; None: every value passed between units).

    Raises:
      InputError: repeats < 1, or no profiler trace to read.
    """
    import jax
    from jax.profiler import ProfileData

    if repeats < 1:
        raise InputError(f"repeats must be >= 1, got {repeats}")
    if getattr(jax.profiler, "ProfileData", None) is None:
        raise InputError(f"jax {jax.__version__} has no jax.profiler.ProfileData to read a trace with: profile with "
                         f"--method units (each unit alone) or use jax >= 0.7.2")
    step, keys = step_function(units, order, outputs)
    args = [jax.device_put(values[s.node], device) for s in keys]
    compiled = jax.jit(step).lower(*args).compile()  # the arguments are committed to `device`: so is the step
    hlo = compiled.as_text()
    walls = time_calls(lambda: jax.block_until_ready(compiled(*args)), repeats, warmup=max(1, warmup))
    with tempfile.TemporaryDirectory(prefix="placeto-trace-") as tmp:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0  # device and XLA events only: no Python frames (overhead, noise)
        jax.profiler.start_trace(tmp, profiler_options=options)
        traced = min(repeats, MAX_TRACED_STEPS)
        try:
            for _ in range(traced):
                jax.block_until_ready(compiled(*args))
        finally:
            jax.profiler.stop_trace()
        files = sorted(glob.glob(f"{tmp}/**/*.xplane.pb", recursive=True))
        if not files:
            raise InputError("jax.profiler wrote no trace (is the profiler available in this jax build?)")
        data = ProfileData.from_file(files[-1])
        sp = profile_trace(data, hlo, len(units), traced, statistics.median(walls))
    analysis = _cost_analysis(compiled)
    return sp._replace(flops=analysis.get("flops", float("nan")),
                       bytes_accessed=analysis.get("bytes accessed", float("nan")))


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
