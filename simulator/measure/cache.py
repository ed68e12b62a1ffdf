"""Everything placeto caches between runs, under one root.

JAX's compiled functions, the calibrated clusters of local devices and the process rig's costs, and measured step
profiles. The root is PLACETO_CACHE, else $XDG_CACHE_HOME/placeto, else ~/.cache/placeto (`cache_root`):

    jax/                      JAX's persistent compilation cache (PLACETO_COMPILE_CACHE moves it, "off" turns it off)
    clusters/<16 hex>.json    a calibrated cluster per device list, host and JAX version (`cluster_cache_path`)
    clusters/<...>.rig-<8 hex>.json   the process rig's costs beside it (`rig_costs_path`)
    profiles/<graph>-<16 hex>.json    a graph's step profile per device, host and JAX version (`ProfileKey`)

Compilation cache: a learned-method command compiles its jitted functions for the padded size of the graph, the
same XLA work every time; with the cache on, the executables are written after the first command and read back by
the next that compiles the same function for the same shapes. A directory that cannot be created or written is
not an error: one warning, and the command runs without it. The directory only grows: JAX's size limit
(jax_compilation_cache_max_size) is left unset, because its least-recently-used bookkeeping fails with a warning
per compile on entries written without it. Deleting it is always safe. `enable_compile_cache()` (called once at
the start of placeto.cli.main.main) sets JAX's options through jax.config if JAX is imported and through their
JAX_* environment variables otherwise, so that commands that never import JAX do not pay for its import and
worker processes inherit the cache.

Profiles: `place --hardware` keeps the costs of the graph's units on each kind of local device here, so it never
rewrites the user's graph; an entry is keyed by the graph's content without costs (`graph_hash`), the device,
the host and the JAX version. Entry: {"format": "placeto-profile", "version": 1, "key": ProfileKey as a dict,
"graph": name, "cost_us": [N floats, microseconds], "profile": the meta.profile entry of the kind}.

A damaged entry of any kind is named in one warning and measured again, replacing it; never an error. A compilation
cache entry JAX cannot read is removed and compiled again (simulator.measure.compile_heal). Measuring on a miss is the measuring
module's (simulator.measure.calibrate.cached_cluster, simulator.measure.rig_calibrate.cached_rig_costs,
simulator.measure.graph_profile.stale): this module reads and writes files only, and imports no JAX.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping, NamedTuple, Sequence

import numpy as np

from simulator.hardware.devices import kind_of
from simulator.hardware.rig.pool import worker_env
from simulator.measure.compile_heal import heal_compile_cache_reads
from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import atomic_write_bytes, graph_to_dict
from simulator.model.limits import MAX_COST_US
from simulator.model.meta import check_profile_meta

ROOT_ENV = "PLACETO_CACHE"  # the root of everything placeto caches
ENV = "PLACETO_COMPILE_CACHE"  # the compilation cache alone: a directory, or OFF
OFF = "off"
MIN_COMPILE_SECONDS = 0.0  # keep every executable: reading one back costs less than compiling the smallest
HELP = ("caches: compiled JAX functions are kept in ~/.cache/placeto/jax (or $XDG_CACHE_HOME/placeto/jax), so "
        "a second\ncommand on a graph of the same size skips most of its compilation; calibrated clusters beside "
        f"them.\n{ROOT_ENV}=DIR moves both, {ENV}=DIR the compilation cache alone, {ENV}={OFF} turns it off.")
_warned = False  # an unusable directory is reported once per process


# ---- the root ------------------------------------------------------------------------------------------
def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """Placeto's cache root (not created here).

    PLACETO_CACHE if set (an empty value counts as unset), else $XDG_CACHE_HOME/placeto when XDG_CACHE_HOME is an
    absolute path (the XDG rule: a relative one is ignored), else ~/.cache/placeto.

    Raises:
      InputError: (one line, naming the variable) a "~user" in PLACETO_CACHE names no user, or there is no home
        directory to put the cache under.
    """
    given = environ.get(ROOT_ENV, "").strip()
    if given:
        return _expand(given, ROOT_ENV)
    xdg = environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "placeto"
    try:
        return Path.home() / ".cache" / "placeto"
    except RuntimeError as e:  # no HOME and no passwd entry
        raise InputError(f"{e} (set {ROOT_ENV} to a directory)") from None


def _expand(given: str, variable: str) -> Path:
    """`given`, the value of environment `variable`, with ~ expanded, absolute.

    Raises:
      InputError: ~user names no user.
    """
    try:
        return Path(given).expanduser().absolute()
    except RuntimeError as e:  # "~nosuchuser/...", or "~" without a home directory
        raise InputError(f"{variable}={given[:80]}: cannot expand {given.split('/')[0][:40]!r} ({e}); set it to "
                         f"a directory") from None


# ---- the compilation cache ---------------------------------------------------------------------------
def compile_cache_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The compilation cache directory `environ` asks for, or None (off).

    Absolute, not created here: PLACETO_COMPILE_CACHE if set (an empty value counts as unset), else
    cache_root()/jax.
    """
    given = environ.get(ENV, "").strip()
    if given.lower() == OFF:
        return None
    if given:
        return _expand(given, ENV)
    return cache_root(environ) / "jax"


def usable(path: Path) -> str | None:
    """None if `path` is a directory this process can write in, else why.

    "Why" is one line. Creates the directory if need be, and writes and removes one probe file.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def jax_options(path: Path | None) -> dict[str, object]:
    """{JAX config name: value} turning the persistent cache on in `path`.

    `path` None turns it off.
    """
    if path is None:
        return {"jax_enable_compilation_cache": False}
    options: dict[str, object] = {
        "jax_enable_compilation_cache": True,
        "jax_compilation_cache_dir": str(path),
        "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
        "jax_persistent_cache_min_entry_size_bytes": -1,  # -1: any size, and JAX may not raise it
    }
    return options


def enable_compile_cache(environ: MutableMapping[str, str] = os.environ) -> Path | None:
    """Sets up JAX's persistent compilation cache as `environ` asks.

    At `compile_cache_dir(environ)`, or off. Call before the first compilation: JAX opens its cache once per
    process, at the first compile.

    Returns:
      The directory in use, or None: off, or unusable (then one warning on stderr, and JAX runs without a persistent
      cache).
    """
    global _warned
    try:
        path = compile_cache_dir(environ)
        problem = None if path is None else usable(path)
    except InputError as e:  # an unknown ~user, or no home directory to put it under
        path, problem = None, str(e)
    if problem is not None:
        if not _warned:
            where = f" {path}" if path is not None else ""
            print(f"placeto: warning: compilation cache{where}: {problem}; running without it "
                  f"(set {ENV} to another directory, or to {OFF})", file=sys.stderr)
            _warned = True
        path = None
    for name, value in jax_options(path).items():
        _set(name, value, environ)
    if path is not None:
        heal_compile_cache_reads()
    return path


def _set(name: str, value: object, environ: MutableMapping[str, str]) -> None:
    """Sets one JAX option, in jax.config (if imported) and `environ`.

    `environ` is read by a later `import jax`, and inherited by subprocesses.
    """
    environ[name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
    if "jax" in sys.modules:
        sys.modules["jax"].config.update(name, value)


# ---- calibrated clusters and the rig's costs -------------------------------------------------------------
def cluster_cache_path(devices: Sequence[Any]) -> Path:
    """Where the calibrated cluster of the JAX `devices` is cached.

    cache_root()/clusters/<16 hex>.json, keyed by each device's platform, id and device_kind, the host
    (platform.node()) and the JAX version.
    """
    import jax


    key = json.dumps([[d.platform, d.id, str(d.device_kind)] for d in devices] + [platform.node(), jax.__version__])
    return cache_root() / "clusters" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def cached(path: Path, read: Callable[[Path], Any], measure: Callable[[], Any], write: Callable[[Any], None],
            found: str, measuring: str, damaged: str, noun: str, progress: Callable[[str], None]) -> Any:
    """The entry at `path`, read; else measured, written and returned.

    An entry `read` refuses (InputError, OSError, ValueError) is named in one warning on stderr and measured again,
    replacing it; one that cannot be written is a warning too.

    Args:
      path: the entry's file.
      read: path -> value; raises for a damaged entry.
      measure: () -> value, on a miss.
      write: writes a measured value to `path`.
      found: said to `progress` when the entry is read.
      measuring: said to `progress` before measuring.
      damaged: what a refused entry is, for its warning.
      noun: what is measured, for the warning when it cannot be written ("used, not cached").
      progress: where the messages go.
    """

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
    """Checks that a cached `cluster` is of the JAX `devices`.

    Raises:
      InputError: not as many devices, or not each of its device's cost kind.
    """

    if cluster.n_devices != len(devices):
        raise InputError(f"{cluster.n_devices} devices, not {len(devices)}")
    wanted = [kind_of(d) for d in devices]
    have = [d.kind for d in cluster.devices]
    if have != wanted:
        raise InputError(f"device kinds {', '.join(have)[:80]}, not these devices' {', '.join(wanted)[:80]}")


def rig_costs_path(devices: Sequence[Any], workload_version: int) -> Path:
    """Where the process rig's costs over the JAX `devices` are cached.

    Beside their calibrated cluster (`cluster_cache_path`), named `<same 16 hex>.rig-<8 hex>.json`. The second key
    is the malloc settings the workers run with (GLIBC_TUNABLES of simulator.hardware.rig.pool.worker_env:
    WORKER_MALLOC and the caller's own; a worker that returns freed memory to the kernel runs its stages and copies
    slower, so the costs of one do not hold for the other) and the calibration workload's `workload_version`
    (simulator.measure.rig_workload.VERSION).
    """
    path = cluster_cache_path(devices)
    key = f"{worker_env(dict(os.environ))['GLIBC_TUNABLES']}|workload {workload_version}"
    workers = hashlib.sha256(key.encode()).hexdigest()[:8]
    return path.with_name(f"{path.stem}.rig-{workers}.json")


# ---- step profiles ---------------------------------------------------------------------------------------
PROFILE_FORMAT, PROFILE_VERSION = "placeto-profile", 1


class ProfileKey(NamedTuple):
    """What a cached profile must match to be used."""

    graph: str  # sha256 hex of the graph's content without costs or profiles (`graph_hash`)
    kind: str  # the cost kind the profile is filed under (simulator.hardware.devices.kind_of), e.g. "local-cpu"
    device: str  # the JAX device's device_kind, e.g. "cpu", "NVIDIA H200"
    host: str  # platform.node() of the machine measured on
    jax_version: str


class ProfileEntry(NamedTuple):
    """A cached profile, read back."""

    cost_us: np.ndarray  # float64[N] microseconds per node
    profile: dict  # the meta.profile entry recorded with it (method, device, host, load, ...)
    path: Path


def graph_hash(graph: Graph) -> str:
    """sha256 hex of `graph`'s content without its costs and meta.profile.

    The graph as its file writes it (simulator.model.io.graph_to_dict): the program and grouping a profile
    measures, not what was measured. Cached per graph object.
    """

    if "profile_cache.graph_hash" not in graph.cache:
        d = graph_to_dict(graph)
        d["meta"] = {k: v for k, v in d["meta"].items() if k != "profile"}
        d["nodes"] = [{k: v for k, v in n.items() if k != "cost"} for n in d["nodes"]]
        text = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
        graph.cache["profile_cache.graph_hash"] = hashlib.sha256(text.encode()).hexdigest()
    return graph.cache["profile_cache.graph_hash"]


def profile_key(graph: Graph, device: Any) -> ProfileKey:
    """The key of `graph`'s profile on `device`, this host and JAX version."""
    import jax


    return ProfileKey(graph_hash(graph), kind_of(device), str(getattr(device, "device_kind", device)),
                      platform.node(), jax.__version__)


def profile_path(key: ProfileKey, name: str) -> Path:
    """cache_root()/profiles/<graph name>-<16 hex of the key>.json.

    The name only helps a person find it.
    """

    digest = hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "graph"
    return cache_root() / "profiles" / f"{safe}-{digest}.json"


def read_profile(key: ProfileKey, graph: Graph, warn: Callable[[str], None] | None = None) -> ProfileEntry | None:
    """The cached profile of `graph` under `key`, or None.

    None when none is cached, or for a damaged entry: then one line to `warn` (default stderr), and it is measured
    again.
    """
    path = profile_path(key, graph.name)
    if not path.exists():
        return None
    try:
        d = json.loads(path.read_text())
        if not isinstance(d, dict) or d.get("format") != PROFILE_FORMAT or d.get("version") != PROFILE_VERSION:
            raise ValueError("not a placeto profile entry")
        if d.get("key") != key._asdict():
            raise ValueError("its key is not this graph's, device's, host's and JAX version's")
        cost = np.asarray(d.get("cost_us"), dtype=np.float64)
        if cost.shape != (graph.n_nodes,) or not np.all(np.isfinite(cost)) or np.any(cost < 0) or \
                np.any(cost > MAX_COST_US):
            raise ValueError(f"cost_us is not {graph.n_nodes} costs in [0, {MAX_COST_US:g}] microseconds")
        if not isinstance(d.get("profile"), dict):
            raise ValueError("no profile record")
        check_profile_meta({key.kind: d["profile"]})  # InputError (a ValueError): the graph file's own rules
    except (OSError, ValueError, TypeError, OverflowError, RecursionError) as e:  # JSONDecodeError: a ValueError
        (warn or _stderr)(f"placeto: warning: {path}: damaged profile cache entry ({_one_line(e)}); ignored, "
                          f"measuring again")
        return None
    return ProfileEntry(cost, d["profile"], path)


def write_profile(key: ProfileKey, graph: Graph) -> Path:
    """Caches `graph`'s costs and profile of kind `key.kind`, atomically.

    Returns:
      The entry's path.
    """

    path = profile_path(key, graph.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "key": key._asdict(), "graph": graph.name,
           "cost_us": [float(c) for c in graph.costs[key.kind]], "profile": graph.meta["profile"][key.kind]}
    atomic_write_bytes(path, (json.dumps(obj, allow_nan=False) + "\n").encode())
    return path


def with_profile(graph: Graph, kind: str, entry: ProfileEntry) -> Graph:
    """`graph` (in memory) with a cached entry's costs under `kind`.

    Its meta.profile entry too.
    """
    meta = dict(graph.meta)
    meta["profile"] = {**meta.get("profile", {}), kind: dict(entry.profile)}
    return dataclasses.replace(graph, meta=meta).with_costs(kind, entry.cost_us)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 120 else text[:117] + "..."
