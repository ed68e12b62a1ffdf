"""The calibrated clusters of local devices, cached between runs (`placeto place --hardware` and `eval --hardware`
share them): one JSON cluster file per device list, host and JAX version under placeto's cache root
(PLACETO_CACHE, else $XDG_CACHE_HOME/placeto, else ~/.cache/placeto)."""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any, Callable, Sequence

from simulator.model.cluster import Cluster, load_cluster, save_cluster
from simulator.model.errors import InputError


def cluster_cache_path(devices: Sequence[Any]) -> Path:
    """Where the calibrated cluster of the JAX `devices` is cached: simulator.measure.compile_cache.cache_root()/clusters/
    <16 hex>.json, keyed by each device's platform, id and device_kind, the host (platform.node()) and the JAX
    version."""
    import jax

    from simulator.measure.compile_cache import cache_root

    key = json.dumps([[d.platform, d.id, str(d.device_kind)] for d in devices] + [platform.node(), jax.__version__])
    return cache_root() / "clusters" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def cached_cluster(devices: Sequence[Any], spec: Any, repeats: int = 7,
                   progress: Callable[[str], None] = print) -> Cluster:
    """The calibrated cluster of `devices` (resolved from the --devices `spec`), from the cache
    (`cluster_cache_path`) or measured now and cached (simulator.measure.calibrate.calibrate_fit); `place --hardware` and
    `eval --hardware` share it. A damaged or stale entry (unreadable, or not of these devices: their count and
    cost kinds) is named in one warning on stderr and measured again, replacing it; an entry that cannot be
    written is a warning too (the calibration is used, not cached)."""
    from simulator.measure.calibrate import calibrate_fit

    def read(path: Path) -> Cluster:
        cluster = load_cluster(path)
        check_cached_cluster(cluster, devices)
        return cluster

    path = cluster_cache_path(devices)
    return _cached(path, read, lambda: calibrate_fit(spec, repeats).cluster, lambda c: save_cluster(c, path),
                   f"cluster: {path} (cached calibration; delete it to measure again)",
                   f"calibrating {len(devices)} local devices (cached afterwards in {path}) ...",
                   "damaged or stale calibration cache entry", "the calibration", progress)


def _cached(path: Path, read: Callable[[Path], Any], measure: Callable[[], Any], write: Callable[[Any], None],
            found: str, measuring: str, damaged: str, noun: str, progress: Callable[[str], None]) -> Any:
    """The entry at `path` as `read` returns it (`found` to `progress`), else `measure()`'d (`measuring` first) and
    written by `write`. An entry `read` refuses (InputError, OSError, ValueError) is named in one warning on stderr
    (`damaged`: what it is) and measured again, replacing it; one that cannot be written is a warning too (`noun`:
    used, not cached)."""
    import sys

    if path.exists() or path.is_symlink():
        try:
            value = read(path)
            progress(found)
            return value
        except (InputError, OSError, ValueError, RecursionError) as e:
            why = e.detail if isinstance(e, InputError) else str(e)[:120]
            print(f"placeto: warning: {path}: {damaged} ({why}); ignored, measuring again and replacing it",
                  file=sys.stderr, flush=True)
    progress(measuring)
    value = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(value)
    except (InputError, OSError) as e:
        why = e.detail if isinstance(e, InputError) else (e.strerror or str(e))
        print(f"placeto: warning: {path}: cannot cache {noun} ({why}); used, not cached", file=sys.stderr,
              flush=True)
    return value


def check_cached_cluster(cluster: Cluster, devices: Sequence[Any]) -> None:
    """InputError unless a cached `cluster` is of the JAX `devices`: as many, each of its device's cost kind."""
    from simulator.hardware.devices import kind_of

    if cluster.n_devices != len(devices):
        raise InputError(f"{cluster.n_devices} devices, not {len(devices)}")
    wanted = [kind_of(d) for d in devices]
    have = [d.kind for d in cluster.devices]
    if have != wanted:
        raise InputError(f"device kinds {', '.join(have)[:80]}, not these devices' {', '.join(wanted)[:80]}")


def rig_costs_path(devices: Sequence[Any]) -> Path:
    """Where the measured costs of the process rig over the JAX `devices` are cached: beside their calibrated
    cluster (`cluster_cache_path`), named `<same 16 hex>.rig-<8 hex>.json`, the second key the malloc settings the
    workers run with (GLIBC_TUNABLES of simulator.hardware.rig.pool.worker_env: WORKER_MALLOC and the caller's own; a
    worker that returns freed memory to the kernel runs its stages and copies slower, so costs measured on one are
    not the other's) and the calibration workload's version (simulator.measure.rig_workload.VERSION)."""
    import os

    from simulator.hardware.rig.pool import worker_env
    from simulator.measure.rig_workload import VERSION

    path = cluster_cache_path(devices)
    key = f"{worker_env(dict(os.environ))['GLIBC_TUNABLES']}|workload {VERSION}"
    workers = hashlib.sha256(key.encode()).hexdigest()[:8]
    return path.with_name(f"{path.stem}.rig-{workers}.json")


def cached_rig_costs(rig: Any, devices: Sequence[Any], repeats: int = 30,
                     progress: Callable[[str], None] = print) -> Any:
    """simulator.engine.staged.RigCosts of the process `rig` running `devices`, from the cache (`rig_costs_path`) or
    measured now on the rig (simulator.measure.rig_calibrate.rig_costs, a few seconds) and cached. A damaged entry (not
    an object of RigCosts' fields, each a finite number >= 0) is named in one warning on stderr and measured
    again; one that cannot be written is a warning too."""
    import dataclasses
    import math

    from simulator.model.io import atomic_write_bytes
    from simulator.measure.rig_calibrate import rig_costs
    from simulator.engine.staged import RigCosts

    fields = [f.name for f in dataclasses.fields(RigCosts)]

    def read(path: Path) -> RigCosts:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or sorted(data) != sorted(fields) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                for v in data.values()):
            raise ValueError(f"expected an object of the fields {', '.join(fields)}, each a finite number >= 0")
        return RigCosts(**{k: float(v) for k, v in data.items()})

    path = rig_costs_path(devices)
    return _cached(path, read, lambda: rig_costs(rig, repeats)[0],
                   lambda costs: atomic_write_bytes(path, json.dumps(dataclasses.asdict(costs), indent=1).encode()),
                   f"rig costs: {path} (cached; delete it to measure again)",
                   f"measuring the process rig's stage launch and transfer costs (cached afterwards in {path}) ...",
                   "damaged rig costs cache entry", "the rig costs", progress)
