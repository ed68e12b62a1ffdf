"""Placing for the local devices: `placeto place G --hardware`.

Profile, calibrate, place, run the best candidates and the single device, keep the fastest measured:

1. profile: the graph's units are profiled on each kind of local device in use (simulator.measure.graph_profile,
   method "step"), unless the graph file or placeto's cache holds a current one (this device, host and JAX
   version, not taken under load: simulator.measure.cache); the profile is cached there, keyed by the graph's
   content, so the next run skips it; the graph file is never written unless asked (`save_profile`,
   `--save-profile`);
2. calibrate: the cluster of these devices (simulator.measure.calibrate.calibrate_fit), cached in the user's cache
   directory (`PLACETO_CACHE`, else `$XDG_CACHE_HOME/placeto`, else `~/.cache/placeto`) per device list, host
   and JAX version;
3. place: every method asked for (classical or learned, as `placeto compare` runs them) against that cluster,
   the same seconds each; the placements are ranked by simulated step time, duplicates dropped;
4. run: the best `top` candidates and the single-device placement (every unit on the device that simulates
   fastest alone) run for real, their steps interleaved (simulator.hardware.timing.time_interleaved); on the
   process rig the units' costs are scaled again to the single device's median step in those rounds (the
   model's anchor), and the simulated times printed are those (HardwareRunner.simulate_and_measure);
5. keep the fastest measured (median). Doing no harm: the single device (the cluster's fastest,
   placeto.baselines.single) is always a candidate, timed in the same interleaved rounds, so the answer is
   never measured slower than it in the same run. The pick favours whichever placement drew fast steps, so the
   kept placement and the single device run again, interleaved, and the speedup printed is that of these fresh
   steps (`Recheck`), with its spread (the ratio of the single device's quartiles to the kept placement's). A
   speedup beyond what the devices' measured concurrency allows
   (simulator.measure.concurrency.beyond_concurrency) is measured once more on fresh steps; if it holds it is
   kept, and the report says the gain does not come from running the devices at once (on host CPU devices,
   splitting the step into stages can itself be faster);
6. the baseline a user would run without placeto: the plain `jax.jit` of the graph's step with JAX's default
   device and threading, timed in a fresh process before and after the placements (simulator.hardware.plain_jit).

The report says which placement is kept and why, every measured placement's speed relative to the single
device (those measured slower by name), the kept placement against plain jit, and whether the devices ran
concurrently (simulator.measure.concurrency). Host CPU devices are a test rig: they share the host's cores and
memory and run single-threaded, so the single device there is one core, and the simulated gains of a placement
over several devices cannot show in the measured times; the report says so.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from placeto.baselines.single import single as single_placement
from placeto.harness.compare import run_one
from placeto.harness.evaluate import step_bar
from placeto.progress import estimated
from simulator.engine.fast import simulate
from simulator.hardware import plain_jit
from simulator.hardware.devices import local_devices
from simulator.hardware.plain_jit import plain_line, rig_line
from simulator.hardware.rig.pool import one_core as pinned
from simulator.hardware.runner import hardware_runner
from simulator.hardware.timing import about, interleaved_steps
from simulator.measure import cache
from simulator.measure.calibrate import cached_cluster
from simulator.measure.concurrency import beyond_concurrency, beyond_note, concurrency_line, measure_concurrency
from simulator.measure.graph_profile import estimate_seconds, profile, stale, under_load
from simulator.measure.rig_step import measured_step
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import save_graph
from simulator.model.placement_file import describe_cluster
from simulator.plots import gantt_measured

RIG_COLUMN = "vs 1 rig device"  # the single-device column's header on host CPU devices (plain_jit.rig_line)


class Candidate(NamedTuple):
    """One placement tried on the machine."""

    name: str  # the method (or "single device")
    placement: np.ndarray  # int32[N] device index per node
    simulated_us: float
    measured: Any = None  # simulator.hardware.timing.Timing, None if not run


class Recheck(NamedTuple):
    """The kept placement and the single device, timed again afresh.

    Interleaved, after the pick: the samples a placement was picked with favour it (the fastest of several noisy
    medians is biased low).
    """

    kept: Any  # simulator.hardware.timing.Timing of the kept placement
    single: Any  # simulator.hardware.timing.Timing of the single device (the same Timing when it is the one kept)

    @property
    def speedup(self) -> float:
        """The single device's median over the kept placement's."""
        return self.single.median_us / self.kept.median_us

    @property
    def spread(self) -> tuple[float, float]:
        """(single q25 / kept q75, single q75 / kept q25)."""
        return self.single.q25_us / self.kept.q75_us, self.single.q75_us / self.kept.q25_us


class Outcome(NamedTuple):
    """What `place_on_hardware` found."""

    best: Candidate  # the fastest measured (possibly the single device)
    single: Candidate
    candidates: list[Candidate]  # every placement, ranked by simulated time; the measured ones have .measured
    cluster: Cluster
    speedup: float  # single.median / best.median on the samples the pick was made with (biased up)
    spread: tuple[float, float]  # (single.q25 / best.q75, single.q75 / best.q25), the same samples
    runner: Any = None  # the simulator.hardware.runner.HardwareRunner that measured them (stages reused)
    concurrency: Any = None  # simulator.measure.concurrency.Concurrency of the devices (None: not measured)
    recheck: Recheck | None = None  # the kept placement and the single device on fresh steps (None: not run)
    plain: tuple = ()  # plain_jit.PlainJit before and after the placements ran (empty: not measured)
    flagged: Recheck | None = None  # a first recheck whose speedup was beyond the devices' concurrency (then
    #                                 `recheck` is the second, on fresh steps again); None: none was


def rank_candidates(graph: Graph, cluster: Cluster, methods: Sequence[str], seconds: float, seed: int = 0,
                    progress: Callable[[str], None] = print) -> tuple[list[Candidate], Candidate]:
    """The methods' placements by simulated time, and the single device.

    Returns:
      (the candidates, ranked, without duplicates; the single-device candidate: all nodes on the cluster's
      fastest single device, placeto.baselines.single, as in `place` and `compare`).
    """
    p = single_placement(graph, cluster)
    single = Candidate("single device", p, float(simulate(graph, p, cluster).runtime))
    found: dict[bytes, Candidate] = {single.placement.tobytes(): single}
    for name in methods:
        kept: list[np.ndarray] = []
        row = run_one(name, graph, cluster, seed, None, seconds, {}, save=kept.append)
        if not kept:
            progress(f"  {name:<14} not applicable: {row.note}")
            continue
        p = np.asarray(kept[0], dtype=np.int32)
        progress(f"  {name:<14} simulated {row.runtime_us / 1e3:9.3f} ms ({row.place_seconds:.1f} s, "
                 f"{row.simulator_calls} simulator call{'s' if row.simulator_calls != 1 else ''})")
        found.setdefault(p.tobytes(), Candidate(name, p, float(row.runtime_us)))
    return sorted(found.values(), key=lambda c: c.simulated_us), single


def pick(measured: Sequence[Candidate], single: Candidate) -> tuple[Candidate, float, tuple[float, float]]:
    """The fastest measured candidate and its speedup over `single`.

    Fastest by the median step.

    Returns:
      (best, speedup, spread): the spread is (single q25 / best q75, single q75 / best q25).
    """
    best = min(measured, key=lambda c: c.measured.median_us)
    s, b = single.measured, best.measured
    return best, s.median_us / b.median_us, (s.q25_us / b.q75_us, s.q75_us / b.q25_us)


def place_on_hardware(graph: Graph, graph_path: str | None, spec: Any, methods: Sequence[str],
                      seconds: float = 2.0, top: int = 3, repeats: int = 7, warmup: int = 2, seed: int = 0,
                      cluster: Cluster | None = None, progress: Callable[[str], None] = print,
                      plain: bool = True, save_profile: bool = False, rig: str = "threads",
                      gantt: str | None = None) -> Outcome:
    """Place `graph` for local devices, keeping the fastest measured.

    Profile (cached in placeto's cache), calibrate (cached), place with `methods`, run the best `top` candidates
    and the single device, keep the fastest measured and run it and the single device again on fresh steps:
    twice when the first gives a speedup beyond the devices' measured concurrency
    (simulator.measure.concurrency.beyond_concurrency). Call ensure_host_devices(spec) before JAX starts.

    Args:
      graph_path: the graph file; with `save_profile` the profile is also written into it.
      spec: the local devices, a count or a device list (simulator.hardware.devices).
      plain: time the plain jit of the graph file's step in a fresh process, before and after
        (simulator.hardware.plain_jit).
      rig: "threads" (this process's devices) or "processes" (one worker process per host CPU device:
        simulator.hardware.rig.pool).
      gantt: (processes only) a PNG of the kept placement's measured step beside its simulated one
        (simulator.measure.rig_step).

    Raises:
      InputError: a bad `top`, `gantt` without the process rig, a cluster of another device count, or a graph
        without costs for the cluster's kinds.
    """
    if top < 1:
        raise InputError(f"--top must be >= 1, got {top}")
    if gantt is not None and rig != "processes":
        raise InputError("--gantt draws each device's measured stage times, which the process rig records: it "
                         "needs --rig processes")
    devices = local_devices(spec)
    graph = ensure_profile(graph, graph_path, devices, progress, save_profile, one_core=rig == "processes")
    if cluster is None:
        with step_bar("calibrating (probe steps)"):
            cluster = cached_cluster(devices, spec, progress=progress)
    elif cluster.n_devices != len(devices):
        raise InputError(f"the cluster has {cluster.n_devices} devices, --devices names {len(devices)}")
    missing = [k for k in cluster.kinds if k not in graph.costs]
    if missing:
        raise InputError(f"graph {graph.name!r} has no {missing[0]!r} costs for the cluster's devices")
    progress(f"placing on cluster {describe_cluster(cluster)}, {seconds:g} s per method:")
    ranked, single = rank_candidates(graph, cluster, methods, seconds, seed, progress)
    if rig == "processes":
        progress(f"starting {len(devices)} worker processes, one per device (--rig processes) ...")
    runner = hardware_runner(graph, cluster, devices=spec, rig=rig)
    child = None  # the plain jit's process, kept to time it again after the placements
    try:
        runner = runner.with_rig_costs(progress)
        ranked, single = restaged(runner, ranked, single, progress)
        chosen = [c for c in ranked if c is not single][:top] + [single]
        child = plain_jit.start_for(graph_path, spec, repeats, warmup, progress=progress) if plain else None
        before = (child.first,) if child is not None else ()
        outcome = _run_candidates(runner, chosen, ranked, spec, repeats, warmup, progress)
        if before and before[0].available:  # (an unavailable one would be again: not re-run)
            progress("timing the plain jax.jit of the step again (the same process) ...")
        after = (child.again(),) if before and before[0].available else ()
        if gantt is not None:
            progress(f"measuring {outcome.best.name}'s stages for the Gantt chart ...")
            step = measured_step(runner, outcome.best.placement, steps=repeats, warmup=warmup)
            gantt_measured(gantt, graph, cluster, outcome.best.placement, step,
                           f"{graph.name}: {outcome.best.name} on {cluster.n_devices} devices (process rig)")
            progress(f"gantt chart: {gantt}")
    finally:
        runner.close()
        if child is not None:
            child.close()
    return outcome._replace(cluster=cluster, plain=before + after)


def restaged(runner: Any, ranked: list[Candidate], single: Candidate,
             progress: Callable[[str], None] = print) -> tuple[list[Candidate], Candidate]:
    """`ranked` re-simulated as `runner` runs them, and ranked again.

    Returns (ranked, single). On the process rig (a runner with rig costs) each candidate gets the staged
    simulation of its stages (simulator.hardware.runner.HardwareRunner.simulate), which predicts the rig's steps
    where the per-unit model the placers searched with does not
    (experiments/results/benchmarks/staged_fidelity.md); otherwise the candidates are returned as they are.
    """
    if runner.rig_costs is None:
        return ranked, single
    progress("simulated again as the rig runs them (stages, their launches and transfers: simulator.engine.staged):")
    again = [c._replace(simulated_us=runner.simulate(c.placement)) for c in ranked]
    for c in again:
        progress(f"  {c.name:<14} simulated {c.simulated_us / 1e3:9.3f} ms")
    return sorted(again, key=lambda c: c.simulated_us), next(c for c in again if c.placement is single.placement)


def _run_candidates(runner: Any, chosen: list[Candidate], ranked: list[Candidate], spec: Any, repeats: int,
                    warmup: int, progress: Callable[[str], None]) -> Outcome:
    """Steps 4 and 5 of the module docstring: run, pick, recheck.

    Run `chosen` (the single device last), pick, measure the devices' concurrency on the rig in use, and recheck
    (twice when beyond it).
    """
    progress(f"running {len(chosen)} placements for real ({repeats} steps each after {warmup} warm-up, "
             f"interleaved) ...")
    with step_bar("running placements", interleaved_steps(len(chosen), repeats, warmup)):
        simulated, timings, scale = runner.simulate_and_measure([c.placement for c in chosen], repeats, warmup,
                                                                progress)
    measured = [c._replace(measured=t, simulated_us=s) for c, t, s in zip(chosen, timings, simulated)]
    single = measured[-1]
    best, speedup, spread = pick(measured, single)
    concurrency = measure_concurrency(spec, runner.rig)
    again, flagged = recheck(runner, best, single, repeats, warmup, progress), None
    if best is not single and beyond_concurrency(again.speedup, concurrency):
        progress(f"{best.name} measured {again.speedup:.2f}x the single device's speed, beyond the devices' "
                 f"measured concurrency ({concurrency.speedup:.2f}x): measuring both again ...")
        again, flagged = recheck(runner, best, single, repeats, warmup, progress), again
    by_placement = {m.placement.tobytes(): m for m in measured}
    ranked = [by_placement.get(c.placement.tobytes()) or
              (c._replace(simulated_us=runner.simulate(c.placement, scale)) if scale != 1.0 else c) for c in ranked]
    return Outcome(best, single, ranked, runner.cluster, speedup, spread, runner, concurrency, again, (), flagged)


def ensure_profile(graph: Graph, graph_path: str | None, devices: Sequence[Any],
                   progress: Callable[[str], None] = print, save: bool = False, one_core: bool = False) -> Graph:
    """`graph` with a current step profile of every kind of `devices`.

    Current: simulator.measure.graph_profile.stale. The graph's own where current, else placeto's cache's, else
    measured now and cached there. The graph file is left as it is, unless `save` (then the graph with its
    profiles is written to `graph_path`).

    `one_core`: the profile must be one taken with this process on one core (`cores_used` 1: what a device of the
    process rig is; simulator.hardware.rig.pool.one_core), else one taken without (what this process's devices are);
    a profile of the other kind is measured again."""
    first = {}
    for d in devices:
        first.setdefault(cache.profile_key(graph, d), d)  # the first device of each kind
    todo, found = [], []
    for key, d in first.items():
        own = graph.meta.get("profile", {}).get(key.kind) if key.kind in graph.costs else None
        if own is not None and _stale(own, key, one_core) is None:
            found.append(f"{key.kind} in {graph_path or 'the graph'}")
            continue
        entry = cache.read_profile(key, graph)
        if entry is not None and _stale(entry.profile, key, one_core) is None:
            graph = cache.with_profile(graph, key.kind, entry)
            found.append(f"{key.kind} in {entry.path}")
            continue
        why = [f"the {key.kind} profile in {graph_path or 'the graph'} {_stale(own, key, one_core)}"] if own else []
        why += [f"the cached {key.kind} profile {_stale(entry.profile, key, one_core)}"] if entry else []
        if why:
            progress(f"profile: {'; '.join(why)}: measuring it again")
        todo.append((key, d))
    if found:
        progress(f"profile: cached ({'; '.join(found)})")
    if todo:
        guess = estimate_seconds(graph, repeats=5, warmup=2) * len(todo)
        progress(f"profiling {graph.name} on {', '.join(str(d.device_kind) for _, d in todo)} (inside the compiled "
                 f"step; cached in {cache.profile_path(todo[0][0], graph.name).parent}, the graph file "
                 f"untouched): {about(guess)} here ...")
        t0 = time.perf_counter()
        with estimated(f"profiling {graph.name}", guess):
            if one_core:
                with pinned() as core:
                    progress(f"profile: this process pinned to core {core} while it measures (a process rig device "
                             f"is one core)")
                    graph = profile(graph, devices=[d for _, d in todo], repeats=5, warmup=2)
                for key, _ in todo:
                    graph.meta["profile"][key.kind]["cores_used"] = 1
            else:
                graph = profile(graph, devices=[d for _, d in todo], repeats=5, warmup=2)
        progress(f"profile: measured in {time.perf_counter() - t0:.0f} s")
        for key, _ in todo:
            try:
                cache.write_profile(key, graph)
            except (OSError, InputError) as e:  # an unwritable cache: this run still has its profile
                progress(f"profile: not cached ({e})")
            how = graph.meta["profile"][key.kind]
            if under_load(how):
                progress(f"profile: {key.kind} measured under load (load {how['load_1min']:g} on {how['cores']} "
                         f"cores): used now, measured again next time")
    if save and graph_path is not None:
        save_graph(graph, graph_path)
        progress(f"profile: written into {graph_path} (--save-profile)")
    return graph


def _stale(how: Any, key: Any, one_core: bool) -> str | None:
    """Why the profile is stale, core use included; None: current.

    simulator.measure.graph_profile.stale, and whether the profile was taken on one core as this run needs.
    """
    why = stale(how, key)
    if why is None and bool(how.get("cores_used") == 1) != one_core:
        why = ("was measured on one core; this run's devices are this process's (--rig threads)" if not one_core
               else "was measured by this process unpinned; a process rig device is one core")
    return why


def recheck(runner: Any, best: Candidate, single: Candidate, repeats: int, warmup: int,
            progress: Callable[[str], None] = print) -> Recheck:
    """Run `best` and `single` again on fresh steps, interleaved.

    By `runner` (simulator.hardware.runner.HardwareRunner); only the single device when it is the one kept.
    """
    if best is single:
        progress(f"running the single device again ({repeats} fresh steps) ...")
        with step_bar("rechecking", interleaved_steps(1, repeats, warmup)):
            (t,) = runner.measure([single.placement], repeats, warmup)
        return Recheck(t, t)
    progress(f"running {best.name} and the single device again ({repeats} fresh steps each, interleaved: the "
             f"steps {best.name} was picked with favour it) ...")
    with step_bar("rechecking", interleaved_steps(2, repeats, warmup)):
        kept, again = runner.measure([best.placement, single.placement], repeats, warmup)
    return Recheck(kept, again)


def report(outcome: Outcome) -> str:
    """The report `placeto place --hardware` prints.

    The candidates' table (each measured one's speed relative to the single device: its median over theirs), the
    placement kept and why, the kept placement against plain jit (when timed), what host CPU devices are (when
    they are the devices) and the devices' concurrency.
    """
    rig = on_host_rig(outcome)
    column = RIG_COLUMN if rig else "vs single"
    base = outcome.single.measured.median_us
    lines = [f"{'placement':<16} {'simulated ms':>12} {'measured ms':>12}  {'[IQR]':<15} {column:>9}"]
    for c in outcome.candidates:
        m = c.measured
        measured = (f"{m.median_us / 1e3:>12.3f}  {f'[{m.q25_us / 1e3:.3f}-{m.q75_us / 1e3:.3f}]':<15} "
                    f"{base / m.median_us:>{max(9, len(column)) - 1}.2f}x" if m is not None else f"{'not run':>12}")
        mark = "  <- kept (fastest measured)" if c is outcome.best else ""
        lines.append(f"{c.name:<16} {c.simulated_us / 1e3:>12.3f} {measured}{mark}")
    lines.append(verdict(outcome))
    if outcome.plain:
        kept = outcome.recheck.kept if outcome.recheck is not None else outcome.best.measured
        fresh = ", fresh steps" if outcome.recheck is not None else ""
        lines.append(plain_line(outcome.plain, f"kept placement ({outcome.best.name}{fresh})", kept))
    if rig:
        lines.append(rig_line())
    if outcome.concurrency is not None:
        lines.append(concurrency_line(outcome.concurrency))
    return "\n".join(lines)


def on_host_rig(outcome: Outcome) -> bool:
    """Whether the placements ran on host CPU devices.

    The runner's devices; without a runner, a cluster of "local-cpu" devices only.
    """
    devices = getattr(outcome.runner, "devices", None)
    if devices:
        return all(getattr(d, "platform", "") == "cpu" for d in devices)
    return all(k == "local-cpu" for k in outcome.cluster.kinds)


def verdict(outcome: Outcome) -> str:
    """One line: the placement kept and why.

    Its speedup over the single device on fresh steps when rechecked, and whether that is beyond what the
    devices' measured concurrency allows; the line names the placements measured slower than the single device.
    """
    single = outcome.single
    others = [c for c in outcome.candidates if c.measured is not None and c is not single]
    slower = sorted((c for c in others if c.measured.median_us > single.measured.median_us),
                    key=lambda c: c.measured.median_us)
    speeds = ", ".join(f"{c.name} {single.measured.median_us / c.measured.median_us:.2f}x" for c in slower)
    tail = f"; measured slower than the single device: {speeds} its speed" if slower else ""
    if outcome.best is not single and outcome.recheck is not None:
        r = outcome.recheck
        lo, hi = r.spread
        text = (f"kept: {outcome.best.name}, {r.speedup:.2f}x the single device's speed on fresh steps (spread "
                f"{lo:.2f}-{hi:.2f}x; {outcome.speedup:.2f}x on the steps it was picked with)")
        if outcome.flagged is not None:
            text += "; " + beyond_note(outcome.concurrency, r.speedup, outcome.flagged.speedup)
        elif beyond_concurrency(r.speedup, outcome.concurrency):  # (an Outcome built without the re-measurement)
            text += "; " + beyond_note(outcome.concurrency, r.speedup)
        return text + ("; NOT confirmed: slower than the single device on fresh steps" if r.speedup < 1 else "") \
            + tail
    if outcome.best is not single:
        lo, hi = outcome.spread
        text = (f"kept: {outcome.best.name}, {outcome.speedup:.2f}x the single device's measured speed (spread "
                f"{lo:.2f}-{hi:.2f}x: the single device's quartiles over the placement's)")
        if beyond_concurrency(outcome.speedup, outcome.concurrency):
            text += "; " + beyond_note(outcome.concurrency, outcome.speedup)
        return text + tail
    if not others:
        return "kept: the single device (no method found a placement other than it)"
    predicted = [c for c in slower if c.simulated_us < single.simulated_us]
    why = (f", although simulated up to {single.simulated_us / min(c.simulated_us for c in predicted):.2f}x "
           f"faster" if predicted else "")
    return (f"kept: the single device, the fastest measured: every placement over {outcome.cluster.n_devices} "
            f"devices measured slower ({speeds} its speed){why}; a placement is kept only when measured faster")
