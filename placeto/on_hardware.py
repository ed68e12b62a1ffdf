"""Place for this machine: profile, calibrate, place, run the best candidates and the single device, keep the
fastest measured (`placeto place G --hardware`).

1. profile: the graph's units are measured on each kind of local device in use (placeto.profiling, method
   "step"), unless the graph file already holds such a profile from this device and JAX version; the profile is
   written back into the graph file (atomically), so the next run skips it;
2. calibrate: the cluster of these devices (simulator.calibrate.calibrate_fit), cached in the user's cache
   directory (`PLACETO_CACHE`, else `$XDG_CACHE_HOME/placeto`, else `~/.cache/placeto`) per device list, host
   and JAX version;
3. place: every method asked for (classical or learned, as `placeto compare` runs them) against that cluster,
   the same seconds each; the placements are ranked by simulated step time, duplicates dropped;
4. run: the best `top` candidates and the single-device placement (every unit on the device that simulates
   fastest alone) run for real, their steps interleaved (simulator.hardware.time_interleaved);
5. keep the fastest measured (median). Doing no harm: the single device is always a candidate, so the answer is
   never measured slower than it in the same run. The pick favours whichever placement drew fast steps, so the
   kept placement and the single device run again, interleaved, and the speedup printed is that of these fresh
   steps (`Recheck`), with its spread (the ratio of the single device's quartiles to the kept placement's);
6. the baseline a user would run without placeto: the plain `jax.jit` of the graph's step with JAX's default
   device and threading, timed in a fresh process before and after the placements (placeto.plain_jit).

The report says which placement is kept and why, every measured placement's speed relative to the single
device (those measured slower by name), the kept placement against plain jit, and whether the devices ran
concurrently (placeto.calibration). Host CPU devices are a test rig: they share the machine's cores and memory
and run single-threaded, so the single device there is one core, and the simulated gains of a placement over
several devices cannot show in the measured times; the report says so.
"""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from simulator.cluster import Cluster, load_cluster, save_cluster
from simulator.errors import InputError
from simulator.graph import Graph

DEFAULT_METHODS = ("etf", "m-sct", "local-search")
RIG_COLUMN = "vs 1 rig device"  # the single-device column's header on host CPU devices (placeto.plain_jit.rig_line)


class Candidate(NamedTuple):
    """One placement tried on the machine."""

    name: str  # the method (or "single device")
    placement: np.ndarray  # int32[N] device index per node
    simulated_us: float
    measured: Any = None  # simulator.hardware.Timing, None if not run


class Recheck(NamedTuple):
    """The kept placement and the single device measured again after the pick, interleaved, on fresh steps: the
    samples a placement was picked with favour it (the fastest of several noisy medians is biased low)."""

    kept: Any  # simulator.hardware.Timing of the kept placement
    single: Any  # simulator.hardware.Timing of the single device (the same Timing when it is the one kept)

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
    runner: Any = None  # placeto.evaluate.HardwareRunner that measured them (its compiled stages are reused)
    concurrency: Any = None  # placeto.calibration.Concurrency of the devices (None: not measured)
    recheck: Recheck | None = None  # the kept placement and the single device on fresh steps (None: not run)
    plain: tuple = ()  # placeto.plain_jit.PlainJit before and after the placements ran (empty: not measured)


def cache_dir() -> Path:
    """Where calibrated clusters are kept between runs: placeto's cache root (PLACETO_CACHE, else
    $XDG_CACHE_HOME/placeto, else ~/.cache/placeto; placeto.compile_cache.cache_root)."""
    from placeto.compile_cache import cache_root

    return cache_root()


def needs_profile(graph: Graph, devices: Sequence[Any]) -> list[Any]:
    """The first device of each kind in `devices` whose kind the graph has no current profile of (method "step",
    the same device model and JAX version)."""
    import jax

    from simulator.host_devices import kind_of

    todo, seen = [], set()
    for d in devices:
        kind = kind_of(d)
        if kind in seen:
            continue
        seen.add(kind)
        how = graph.meta.get("profile", {}).get(kind) or {}
        current = (kind in graph.costs and how.get("method") == "step" and how.get("jax_version") == jax.__version__
                   and how.get("device") == str(getattr(d, "device_kind", d)))
        if not current:
            todo.append(d)
    return todo


def cached_cluster(devices: Sequence[Any], spec: Any, repeats: int = 7,
                   progress: Callable[[str], None] = print) -> Cluster:
    """The calibrated cluster of `devices` (resolved from the --devices `spec`), from the cache or measured now
    and cached (simulator.calibrate.calibrate_fit)."""
    import jax

    from simulator.calibrate import calibrate_fit

    key = json.dumps([[d.platform, d.id, str(d.device_kind)] for d in devices] + [platform.node(), jax.__version__])
    path = cache_dir() / "clusters" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.exists():
        try:
            cluster = load_cluster(path)
            if cluster.n_devices == len(devices):
                progress(f"cluster: {path} (cached calibration; delete it to measure again)")
                return cluster
        except InputError:
            pass  # a damaged cache entry is measured again
    progress(f"calibrating {len(devices)} local devices (cached afterwards in {path}) ...")
    fit = calibrate_fit(spec, repeats)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_cluster(fit.cluster, path)
    return fit.cluster


def rank_candidates(graph: Graph, cluster: Cluster, methods: Sequence[str], seconds: float, seed: int = 0,
                    progress: Callable[[str], None] = print) -> tuple[list[Candidate], Candidate]:
    """(every method's placement ranked by simulated time without duplicates, the single-device candidate:
    all nodes on the device that simulates fastest alone)."""
    from simulator import simulate

    from placeto.compare import _run_one

    singles = []
    for d in range(cluster.n_devices):
        p = np.full(graph.n_nodes, d, dtype=np.int32)
        singles.append(Candidate("single device", p, float(simulate(graph, p, cluster).runtime)))
    single = min(singles, key=lambda c: c.simulated_us)
    found: dict[bytes, Candidate] = {single.placement.tobytes(): single}
    for name in methods:
        kept: list[np.ndarray] = []
        row = _run_one(name, graph, cluster, seed, None, seconds, {}, save=kept.append)
        if not kept:
            progress(f"  {name:<14} not applicable: {row.note}")
            continue
        p = np.asarray(kept[0], dtype=np.int32)
        progress(f"  {name:<14} simulated {row.runtime_us / 1e3:9.3f} ms ({row.place_seconds:.1f} s, "
                 f"{row.simulator_calls} simulator calls)")
        found.setdefault(p.tobytes(), Candidate(name, p, float(row.runtime_us)))
    return sorted(found.values(), key=lambda c: c.simulated_us), single


def pick(measured: Sequence[Candidate], single: Candidate) -> tuple[Candidate, float, tuple[float, float]]:
    """(the fastest measured candidate by median, its speedup over `single`, the spread of that speedup)."""
    best = min(measured, key=lambda c: c.measured.median_us)
    s, b = single.measured, best.measured
    return best, s.median_us / b.median_us, (s.q25_us / b.q75_us, s.q75_us / b.q25_us)


def place_on_hardware(graph: Graph, graph_path: str | None, spec: Any, methods: Sequence[str] = DEFAULT_METHODS,
                      seconds: float = 2.0, top: int = 3, repeats: int = 7, warmup: int = 2, seed: int = 0,
                      cluster: Cluster | None = None, progress: Callable[[str], None] = print,
                      plain: bool = True) -> Outcome:
    """Profile (cached in the graph file at `graph_path`), calibrate (cached), place with `methods`, run the best
    `top` candidates and the single device on the local devices of `spec` (a count or a device list, see
    simulator.host_devices), keep the fastest measured and run it and the single device again on fresh steps.
    With `plain`, the plain jit of the graph file's step is timed in a fresh process before and after
    (placeto.plain_jit). Call ensure_host_devices(spec) before JAX starts."""
    from simulator.host_devices import local_devices

    from placeto import plain_jit
    from placeto.calibration import measure_concurrency
    from placeto.evaluate import hardware_runner

    if top < 1:
        raise InputError(f"--top must be >= 1, got {top}")
    devices = local_devices(spec)
    graph = ensure_profile(graph, graph_path, devices, progress)
    if cluster is None:
        cluster = cached_cluster(devices, spec, progress=progress)
    elif cluster.n_devices != len(devices):
        raise InputError(f"the cluster has {cluster.n_devices} devices, --devices names {len(devices)}")
    missing = [k for k in cluster.kinds if k not in graph.costs]
    if missing:
        raise InputError(f"graph {graph.name!r} has no {missing[0]!r} costs for the cluster's devices")
    progress(f"placing on {cluster.n_devices} devices ({', '.join(cluster.kinds)}), {seconds:g} s per method:")
    ranked, single = rank_candidates(graph, cluster, methods, seconds, seed, progress)
    chosen = [c for c in ranked if c is not single][:top] + [single]
    runner = hardware_runner(graph, cluster, devices=spec)
    before = (plain_jit.measure_for(graph_path, spec, repeats, warmup, progress=progress),) if plain else ()
    progress(f"running {len(chosen)} placements for real ({repeats} steps each after {warmup} warm-up, "
             f"interleaved) ...")
    timings = runner.measure([c.placement for c in chosen], repeats, warmup)
    measured = [c._replace(measured=t) for c, t in zip(chosen, timings)]
    single = measured[-1]
    best, speedup, spread = pick(measured, single)
    again = recheck(runner, best, single, repeats, warmup, progress)
    after = ((plain_jit.measure_for(graph_path, spec, repeats, warmup, progress=progress),)
             if before and before[0].available else ())  # (an unavailable one would be again: not re-run)
    by_placement = {m.placement.tobytes(): m for m in measured}
    ranked = [by_placement.get(c.placement.tobytes(), c) for c in ranked]
    return Outcome(best, single, ranked, cluster, speedup, spread, runner, measure_concurrency(spec), again,
                   before + after)


def ensure_profile(graph: Graph, graph_path: str | None, devices: Sequence[Any],
                   progress: Callable[[str], None] = print) -> Graph:
    """`graph` with a current step profile of every kind of `devices` (`needs_profile`): measured now where
    missing and written back to `graph_path` (when given), else as it is."""
    from simulator.io import save_graph

    from placeto.profiling import profile

    todo = needs_profile(graph, devices)
    if not todo:
        progress(f"profile: cached in {graph_path or 'the graph'} ({', '.join(sorted(graph.meta['profile']))})")
        return graph
    progress(f"profiling {graph.name} on {', '.join(str(d.device_kind) for d in todo)} (inside the compiled "
             f"step; cached in the graph file) ...")
    graph = profile(graph, devices=todo, repeats=5, warmup=2)
    if graph_path is not None:
        save_graph(graph, graph_path)
    return graph


def recheck(runner: Any, best: Candidate, single: Candidate, repeats: int, warmup: int,
            progress: Callable[[str], None] = print) -> Recheck:
    """`best` and `single` (measured candidates) run again by `runner` (placeto.evaluate.HardwareRunner) on fresh
    steps, interleaved; only the single device when it is the one kept."""
    if best is single:
        progress(f"running the single device again ({repeats} fresh steps) ...")
        (t,) = runner.measure([single.placement], repeats, warmup)
        return Recheck(t, t)
    progress(f"running {best.name} and the single device again ({repeats} fresh steps each, interleaved: the "
             f"steps {best.name} was picked with favour it) ...")
    kept, again = runner.measure([best.placement, single.placement], repeats, warmup)
    return Recheck(kept, again)


def report(outcome: Outcome) -> str:
    """The candidates' table (each measured one's speed relative to the single device: its median over theirs),
    the placement kept and why, the kept placement against plain jit (when timed), what host CPU devices are (when
    they are the devices) and the devices' concurrency, as printed by `placeto place --hardware`."""
    from placeto.plain_jit import plain_line, rig_line

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
        from placeto.calibration import concurrency_line

        lines.append(concurrency_line(outcome.concurrency))
    return "\n".join(lines)


def on_host_rig(outcome: Outcome) -> bool:
    """Whether the placements ran on host CPU devices (the runner's devices; without one, a cluster of
    "local-cpu" devices only)."""
    devices = getattr(outcome.runner, "devices", None)
    if devices:
        return all(getattr(d, "platform", "") == "cpu" for d in devices)
    return all(k == "local-cpu" for k in outcome.cluster.kinds)


def verdict(outcome: Outcome) -> str:
    """One line: the placement kept and why (its speedup over the single device on fresh steps when rechecked),
    naming the placements measured slower than the single device."""
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
        return text + ("; NOT confirmed: slower than the single device on fresh steps" if r.speedup < 1 else "") \
            + tail
    if outcome.best is not single:
        lo, hi = outcome.spread
        text = (f"kept: {outcome.best.name}, {outcome.speedup:.2f}x the single device's measured speed (spread "
                f"{lo:.2f}-{hi:.2f}x: the single device's quartiles over the placement's)")
        return text + tail
    if not others:
        return "kept: the single device (no method found a placement other than it)"
    predicted = [c for c in slower if c.simulated_us < single.simulated_us]
    why = (f", although simulated up to {single.simulated_us / min(c.simulated_us for c in predicted):.2f}x "
           f"faster" if predicted else "")
    return (f"kept: the single device, the fastest measured: every placement over {outcome.cluster.n_devices} "
            f"devices measured slower ({speeds} its speed){why}; a placement is kept only when measured faster")
