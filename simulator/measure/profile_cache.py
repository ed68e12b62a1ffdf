"""Measured step profiles kept in placeto's cache directory, so `place --hardware` never rewrites the user's graph.

`place --hardware` needs the graph's units measured on each kind of local device (simulator.measure.graph_profile, method
"step"). The measurement is kept as one JSON entry per graph and device under `cache_root()/profiles/` (the root
of simulator.measure.compile_cache: $PLACETO_CACHE, else $XDG_CACHE_HOME/placeto, else ~/.cache/placeto), keyed by
`ProfileKey`: the graph's content (`graph_hash`: its nodes, edges and meta, without any costs or profiles, so the
same graph re-saved or profiled elsewhere keys alike), the device (cost kind and JAX device_kind), the host
(platform.node()) and the JAX version. The graph file is written only when the user asks (`place --hardware
--save-profile`, or `placeto profile`).

An entry is used only when it is `current` for this run: measured by the step method, on this device, host and
JAX version, and not taken under load (simulator.measure.graph_profile.under_load); the same rule applies to a profile the
graph file itself holds. A damaged entry is ignored with a one-line warning and measured again.

Entry: {"format": "placeto-profile", "version": 1, "key": ProfileKey as a dict, "graph": name, "cost_us": [N
floats, microseconds], "profile": the meta.profile entry of the kind}.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import re
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from simulator.model.graph import Graph
from simulator.model.meta import check_profile_meta
from simulator.model.limits import MAX_COST_US

FORMAT, VERSION = "placeto-profile", 1


class ProfileKey(NamedTuple):
    """What a cached profile must match to be used."""

    graph: str  # sha256 hex of the graph's content without costs or profiles (`graph_hash`)
    kind: str  # the cost kind the profile is filed under (simulator.hardware.devices.kind_of), e.g. "local-cpu"
    device: str  # the JAX device's device_kind, e.g. "cpu", "NVIDIA H200"
    host: str  # platform.node() of the machine measured on
    jax_version: str


class Entry(NamedTuple):
    """A cached profile, read back."""

    cost_us: np.ndarray  # float64[N] microseconds per node
    profile: dict  # the meta.profile entry recorded with it (method, device, host, load, ...)
    path: Path


def graph_hash(graph: Graph) -> str:
    """sha256 hex of `graph` as its file writes it (simulator.model.io.graph_to_dict) without the nodes' costs and
    meta.profile: the program and grouping a profile measures, not what was measured (cached per graph object)."""
    from simulator.model.io import graph_to_dict

    if "profile_cache.graph_hash" not in graph.cache:
        d = graph_to_dict(graph)
        d["meta"] = {k: v for k, v in d["meta"].items() if k != "profile"}
        d["nodes"] = [{k: v for k, v in n.items() if k != "cost"} for n in d["nodes"]]
        text = json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)
        graph.cache["profile_cache.graph_hash"] = hashlib.sha256(text.encode()).hexdigest()
    return graph.cache["profile_cache.graph_hash"]


def profile_key(graph: Graph, device: Any) -> ProfileKey:
    """The key of `graph`'s profile on the JAX `device`, on this host and JAX version."""
    import jax

    from simulator.hardware.devices import kind_of

    return ProfileKey(graph_hash(graph), kind_of(device), str(getattr(device, "device_kind", device)),
                      platform.node(), jax.__version__)


def entry_path(key: ProfileKey, name: str) -> Path:
    """cache_root()/profiles/<graph name>-<16 hex of the key>.json (the name only helps a person find it)."""
    from simulator.measure.compile_cache import cache_root

    digest = hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:16]
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "graph"
    return cache_root() / "profiles" / f"{safe}-{digest}.json"


def stale(how: Mapping[str, Any] | None, key: ProfileKey) -> str | None:
    """Why the profile recorded as `how` (a meta.profile entry) cannot serve a run keyed `key`, or None when it
    is current: measured by the step method on the same device, host and JAX version, and not under load."""
    from simulator.measure.graph_profile import under_load

    if not how:
        return "is missing"
    if how.get("method") != "step":
        return f"was measured by method {how.get('method')!r}, not 'step'"
    from simulator.hardware.plans import MATERIALISED_PLATFORMS

    if (how.get("platform") in MATERIALISED_PLATFORMS) != (how.get("materialised") is True):
        return "was measured before the harness materialised every unit's outputs (simulator.hardware.plans.materialises)"
    from simulator.measure.step_profile import ATTRIBUTION

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


def read(key: ProfileKey, graph: Graph, warn: Callable[[str], None] | None = None) -> Entry | None:
    """The cached profile of `graph` under `key`, or None: none cached, or a damaged entry (then one line to
    `warn`, default stderr: it is ignored and measured again)."""
    path = entry_path(key, graph.name)
    if not path.exists():
        return None
    try:
        d = json.loads(path.read_text())
        if not isinstance(d, dict) or d.get("format") != FORMAT or d.get("version") != VERSION:
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
    return Entry(cost, d["profile"], path)


def write(key: ProfileKey, graph: Graph) -> Path:
    """Cache `graph`'s costs and meta.profile entry of kind `key.kind` (atomically); returns the entry's path."""
    from simulator.model.io import atomic_write_bytes

    path = entry_path(key, graph.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = {"format": FORMAT, "version": VERSION, "key": key._asdict(), "graph": graph.name,
           "cost_us": [float(c) for c in graph.costs[key.kind]], "profile": graph.meta["profile"][key.kind]}
    atomic_write_bytes(path, (json.dumps(obj, allow_nan=False) + "\n").encode())
    return path


def with_entry(graph: Graph, kind: str, entry: Entry) -> Graph:
    """`graph` (in memory) with the cached costs under `kind` and its meta.profile entry."""
    meta = dict(graph.meta)
    meta["profile"] = {**meta.get("profile", {}), kind: dict(entry.profile)}
    return dataclasses.replace(graph, meta=meta).with_costs(kind, entry.cost_us)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 120 else text[:117] + "..."
