"""The calibrated clusters of local devices, cached between runs (`placeto place --hardware` and `eval --hardware`
share them): one JSON cluster file per device list, host and JAX version under placeto's cache root
(PLACETO_CACHE, else $XDG_CACHE_HOME/placeto, else ~/.cache/placeto)."""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path
from typing import Any, Callable, Sequence

from simulator.cluster import Cluster, load_cluster, save_cluster
from simulator.errors import InputError


def cluster_cache_path(devices: Sequence[Any]) -> Path:
    """Where the calibrated cluster of the JAX `devices` is cached: placeto.compile_cache.cache_root()/clusters/
    <16 hex>.json, keyed by each device's platform, id and device_kind, the host (platform.node()) and the JAX
    version."""
    import jax

    from placeto.compile_cache import cache_root

    key = json.dumps([[d.platform, d.id, str(d.device_kind)] for d in devices] + [platform.node(), jax.__version__])
    return cache_root() / "clusters" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def cached_cluster(devices: Sequence[Any], spec: Any, repeats: int = 7,
                   progress: Callable[[str], None] = print) -> Cluster:
    """The calibrated cluster of `devices` (resolved from the --devices `spec`), from the cache
    (`cluster_cache_path`) or measured now and cached (simulator.calibrate.calibrate_fit); `place --hardware` and
    `eval --hardware` share it. A damaged or stale entry (unreadable, or not of these devices: their count and
    cost kinds) is named in one warning on stderr and measured again, replacing it; an entry that cannot be
    written is a warning too (the calibration is used, not cached)."""
    import sys

    from simulator.calibrate import calibrate_fit

    path = cluster_cache_path(devices)
    if path.exists() or path.is_symlink():
        try:
            cluster = load_cluster(path)
            check_cached_cluster(cluster, devices)
            progress(f"cluster: {path} (cached calibration; delete it to measure again)")
            return cluster
        except InputError as e:
            print(f"placeto: warning: {path}: damaged or stale calibration cache entry ({e.detail}); ignored, "
                  f"measuring again and replacing it", file=sys.stderr, flush=True)
    progress(f"calibrating {len(devices)} local devices (cached afterwards in {path}) ...")
    fit = calibrate_fit(spec, repeats)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_cluster(fit.cluster, path)
    except (InputError, OSError) as e:
        why = e.detail if isinstance(e, InputError) else (e.strerror or str(e))
        print(f"placeto: warning: {path}: cannot cache the calibration ({why}); used, not cached", file=sys.stderr,
              flush=True)
    return fit.cluster


def check_cached_cluster(cluster: Cluster, devices: Sequence[Any]) -> None:
    """InputError unless a cached `cluster` is of the JAX `devices`: as many, each of its device's cost kind."""
    from simulator.host_devices import kind_of

    if cluster.n_devices != len(devices):
        raise InputError(f"{cluster.n_devices} devices, not {len(devices)}")
    wanted = [kind_of(d) for d in devices]
    have = [d.kind for d in cluster.devices]
    if have != wanted:
        raise InputError(f"device kinds {', '.join(have)[:80]}, not these devices' {', '.join(wanted)[:80]}")


def rig_costs_path(devices: Sequence[Any]) -> Path:
    """Where the measured costs of the process rig over the JAX `devices` are cached: beside their calibrated
    cluster (`cluster_cache_path`), named `<same 16 hex>.rig.json`."""
    path = cluster_cache_path(devices)
    return path.with_name(path.stem + ".rig.json")


def cached_rig_costs(rig: Any, devices: Sequence[Any], repeats: int = 30,
                     progress: Callable[[str], None] = print) -> Any:
    """simulator.staged.RigCosts of the process `rig` running `devices`, from the cache (`rig_costs_path`) or
    measured now on the rig (simulator.rig_calibrate.rig_costs, a few seconds) and cached. A damaged entry (not
    an object of RigCosts' fields, each a finite number >= 0) is named in one warning on stderr and measured
    again; one that cannot be written is a warning too."""
    import dataclasses
    import math
    import sys

    from simulator.io import atomic_write_bytes
    from simulator.rig_calibrate import rig_costs
    from simulator.staged import RigCosts

    path = rig_costs_path(devices)
    fields = [f.name for f in dataclasses.fields(RigCosts)]
    if path.exists() or path.is_symlink():
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or sorted(data) != sorted(fields) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                    for v in data.values()):
                raise ValueError(f"expected an object of the fields {', '.join(fields)}, each a finite number "
                                 f">= 0")
            progress(f"rig costs: {path} (cached; delete it to measure again)")
            return RigCosts(**{k: float(v) for k, v in data.items()})
        except (OSError, ValueError, RecursionError) as e:
            print(f"placeto: warning: {path}: damaged rig costs cache entry ({str(e)[:120]}); ignored, measuring "
                  f"again and replacing it", file=sys.stderr, flush=True)
    progress(f"measuring the process rig's stage launch and transfer costs (cached afterwards in {path}) ...")
    costs, _ = rig_costs(rig, repeats)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps(dataclasses.asdict(costs), indent=1).encode())
    except (InputError, OSError) as e:
        why = e.detail if isinstance(e, InputError) else (e.strerror or str(e))
        print(f"placeto: warning: {path}: cannot cache the rig costs ({why}); used, not cached", file=sys.stderr,
              flush=True)
    return costs
