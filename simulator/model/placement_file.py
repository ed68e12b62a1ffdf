"""Placement files: a device index per node, and the graph and cluster the placement was made for.

Placement file, version 2 (what every command writes; JSON)::

    {"format": "placeto-placement", "version": 2,
     "graph": {"name": "nmt_004", "nodes": 412, "structure": "<sha256 hex>", "costs": "<sha256 hex>"},
     "cluster": {"name": "h100-nvlink", "preset": "h100-nvlink", "hash": "<sha256 hex>",
                 "definition": {<the cluster file's dictionary: simulator.model.cluster>}},
     "devices": ["/gpu:0", "/gpu:1", "/gpu:2", "/gpu:3"],
     "placement": [0, 1, 1, ...]}                 # device index per node, in the graph file's node order
                                                  # (or {"node name": device index, ...})

"graph" and "cluster" are the fingerprint; each may be absent (not recorded: not checked).

- graph.structure: sha256 of what a placement is laid over: the nodes in file order (name, op, output sizes,
  persistent bytes, colocation group) and the edges as a set of (producer, consumer, output index) triples
  (`structure_text`). Not in it: the graph's name, its costs, node attrs and meta. A placement whose recorded
  structure is not the graph's is refused (InputError naming both graphs), at any node count.
- graph.costs: sha256 of the costs the simulator reads: every recorded cost kind (sorted by kind, NaN as null) and
  the node attrs that analytic costs are derived from (`costs_text`). A placement made before the costs changed
  (e.g. `placeto profile`) is accepted, with a note.
- cluster.hash: sha256 of the cluster file's dictionary with sorted keys (`cluster_text`): name, devices (name,
  kind, memory, host), delta1, delta2, bandwidth, latency, hosts. cluster.definition is that dictionary, so
  `simulate` and `eval` use the recorded cluster when no --preset or --cluster is given, with or without the
  cluster file; cluster.preset names the preset it is (null: a cluster file or a calibration).

All hashes are of canonical JSON text (sorted keys, no spaces, ASCII, whole numbers as integers, floats as Python
writes them), so they are the same on every machine and run and independent of the order of a file's keys.

Version 1 (written before the fingerprint; no "format" or "version"): {"devices": [...], "placement": [...]}. It is
read as before, unchecked; commands say so in one note line.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from simulator.model.cluster import PRESETS, Cluster, cluster_from_dict, cluster_preset, describe_devices, with_memory
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import PathLike, check_file_kind, check_placement, read_json, write_json
from simulator.model.limits import MAX_INDEX, field as _field, short_repr

FORMAT = "placeto-placement"
VERSION = 2
READS = (1, 2)  # the versions this module reads
_HEX = re.compile(r"[0-9a-f]{64}")
SHORT = 12  # hex digits of a fingerprint shown in messages


# ---- fingerprints ---------------------------------------------------------------------------------------------
class GraphPrint(NamedTuple):
    """The graph a placement was made for (the file's "graph")."""

    name: str
    nodes: int  # N
    structure: str  # sha256 hex of structure_text(graph)
    costs: str  # sha256 hex of costs_text(graph)


class ClusterPrint(NamedTuple):
    """The cluster a placement was made for (the file's "cluster")."""

    name: str
    preset: str | None  # the preset it is (cluster_preset(preset, D), any --memory), None: a file or calibration
    hash: str  # sha256 hex of cluster_text(cluster)
    cluster: Cluster  # the cluster itself, from the recorded definition


class MadeFor(NamedTuple):
    """What a placement file records about where its placement belongs."""

    version: int  # the file's format version (1: before fingerprints)
    graph: GraphPrint | None  # None: not recorded
    cluster: ClusterPrint | None  # None: not recorded


def _whole(x: float) -> int | float:
    """A float as JSON writes it canonically: whole numbers as ints."""
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)


def _numbers(a: np.ndarray) -> list[int | float]:
    """float64[K] as _whole writes each, vectorised where every value is whole (sizes always are)."""
    a = np.asarray(a, dtype=np.float64)
    if np.all(np.isfinite(a)) and np.all(a == np.floor(a)) and np.all(np.abs(a) < 2**53):
        return a.astype(np.int64).tolist()
    return [_whole(x) for x in a.tolist()]


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=str)


def structure_text(graph: Graph) -> str:
    """The canonical text graph.structure hashes: nodes in order, edges as a sorted set.

    {"edges": [[src, dst, out], ...] sorted, "nodes": [[name, op, [out bytes...], persistent bytes, colocation]]}.
    """
    off = graph.out_offsets.tolist()
    out_bytes, persistent = _numbers(graph.out_bytes), _numbers(graph.persistent_bytes)
    nodes = [[graph.names[i], graph.ops[i], out_bytes[off[i]:off[i + 1]], persistent[i], graph.colocation[i]]
             for i in range(graph.n_nodes)]
    triples = np.stack([graph.edge_src, graph.edge_dst, graph.edge_out], axis=1).astype(np.int64).reshape(-1, 3)
    edges = np.unique(triples, axis=0).tolist()  # sorted, each once: the edges as a set
    return _canonical({"edges": edges, "nodes": nodes})


def costs_text(graph: Graph) -> str:
    """The canonical text graph.costs hashes: {"attrs": [per node], "costs": {kind: [us or null per node]}}."""
    costs = {kind: [None if math.isnan(c) else _whole(c) for c in graph.costs[kind].tolist()]
             for kind in sorted(graph.costs)}
    return _canonical({"attrs": list(graph.attrs), "costs": costs})


def graph_print(graph: Graph) -> GraphPrint:
    """`graph`'s fingerprint; computed once per graph object (graph.cache)."""
    key = "placement_file.graph_print"
    if key not in graph.cache:
        graph.cache[key] = GraphPrint(graph.name, graph.n_nodes,
                                      hashlib.sha256(structure_text(graph).encode()).hexdigest(),
                                      hashlib.sha256(costs_text(graph).encode()).hexdigest())
    return graph.cache[key]


def cluster_text(cluster: Cluster) -> str:
    """The canonical text cluster.hash hashes: the cluster file's dictionary, keys sorted."""
    return _canonical(cluster.to_dict())


def preset_of(cluster: Cluster) -> str | None:
    """The preset `cluster` is (at its device count, its memory possibly set by --memory); None if none."""
    if cluster.name not in PRESETS:
        return None
    preset = cluster_preset(cluster.name, cluster.n_devices)
    if preset != cluster and len(set(cluster.memory)) == 1:  # every device's memory set by --memory
        preset = with_memory(preset, cluster.memory[0])
    return cluster.name if preset == cluster else None


def cluster_print(cluster: Cluster) -> ClusterPrint:
    """`cluster`'s fingerprint."""
    return ClusterPrint(cluster.name, preset_of(cluster), hashlib.sha256(cluster_text(cluster).encode()).hexdigest(),
                        cluster)


def describe_cluster(cluster: Cluster) -> str:
    """A cluster as commands name it, e.g. "h100-nvlink (preset): 4x h100 (80.0 GB each)".

    Its name, "(preset)" when it is one (preset_of), its devices (simulator.model.cluster.describe_devices).
    """
    what = " (preset)" if preset_of(cluster) else ""
    return f"{cluster.name}{what}: {describe_devices(cluster)}"


# ---- writing --------------------------------------------------------------------------------------------------
def placement_dict(assignment: Sequence[int] | np.ndarray, devices: Sequence[str], graph: Graph | None = None,
                   cluster: Cluster | None = None) -> dict[str, Any]:
    """The version-2 file's dictionary; "graph" and "cluster" recorded when given.

    Raises:
      InputError: `cluster`'s device names are not `devices`, or the placement's length is not the graph's.
    """
    devices = [str(d) for d in devices]
    assignment = [int(x) for x in np.asarray(assignment).reshape(-1)]
    d: dict[str, Any] = {"format": FORMAT, "version": VERSION}
    if graph is not None:
        if len(assignment) != graph.n_nodes:
            raise InputError(f"placement has {len(assignment)} entries but graph {graph.name!r} has "
                             f"{graph.n_nodes} nodes")
        d["graph"] = graph_print(graph)._asdict()
    if cluster is not None:
        if list(cluster.device_names) != devices:
            raise InputError(f"devices {devices} are not cluster {cluster.name!r}'s {list(cluster.device_names)}")
        p = cluster_print(cluster)
        d["cluster"] = {"name": p.name, "preset": p.preset, "hash": p.hash, "definition": cluster.to_dict()}
    d["devices"] = devices
    d["placement"] = assignment
    return d


def save_placement(path: PathLike, assignment: Sequence[int] | np.ndarray, devices: Sequence[str], *,
                   graph: Graph | None = None, cluster: Cluster | None = None) -> None:
    """Atomically write a placement file (format version 2).

    Args:
      assignment: int[N] device index per node, in the graph's node order.
      devices: [D] device names (the cluster's device_names).
      graph, cluster: what the placement was made for, recorded as its fingerprint (every command gives both; a
        file without them is read unchecked).
    """
    d = placement_dict(assignment, devices, graph, cluster)
    head = {k: v for k, v in d.items() if k != "placement"}
    text = json.dumps(head, separators=(", ", ": "), allow_nan=False)[:-1]
    text += ', "placement": ' + json.dumps(d["placement"]) + "}\n"
    write_json(path, None, text=text)


# ---- reading --------------------------------------------------------------------------------------------------
class Placement(NamedTuple):
    """A device for every node, and what the file says it was made for."""

    devices: tuple[str, ...]  # [D] device names
    assignment: np.ndarray  # int32[N] device index per node
    made_for: MadeFor = MadeFor(1, None, None)  # the fingerprint (version 1: none)


def _hex(d: Mapping, key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not _HEX.fullmatch(value):
        shown = "missing" if key not in d else f"{short_repr(value)} is not"
        raise InputError(f"field '{where}.{key}': {shown} a sha256 hex digest (64 digits 0-9a-f): edited or damaged; "
                         f"delete field '{where}' to read the placement unchecked, or place again")
    return value


def _graph_print(d: Any) -> GraphPrint:
    if not isinstance(d, Mapping):
        raise InputError(f"field 'graph': expected an object, got {short_repr(d)}")
    name = d.get("name")
    if not isinstance(name, str):
        raise InputError(f"field 'graph.name': expected the graph's name, got {short_repr(name)}")
    nodes = d.get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_INDEX:
        raise InputError(f"field 'graph.nodes': expected a node count in [1, {MAX_INDEX}], got {short_repr(nodes)}")
    return GraphPrint(name, nodes, _hex(d, "structure", "graph"), _hex(d, "costs", "graph"))


def _cluster_print(d: Any) -> ClusterPrint:
    if not isinstance(d, Mapping):
        raise InputError(f"field 'cluster': expected an object, got {short_repr(d)}")
    recorded = _hex(d, "hash", "cluster")
    if "definition" not in d:
        raise InputError("field 'cluster.definition': missing (the cluster the placement was made for)")
    try:
        cluster = cluster_from_dict(d["definition"])
    except InputError as e:
        raise InputError(f"field 'cluster.definition': {e.detail}") from None
    made = cluster_print(cluster)
    if made.hash != recorded:
        raise InputError(f"field 'cluster.hash': {recorded[:SHORT]}... is not the hash of field 'cluster.definition' "
                         f"({made.hash[:SHORT]}...): edited or damaged; place again")
    for key, value in (("name", made.name), ("preset", made.preset)):
        if d.get(key, value) != value:
            raise InputError(f"field 'cluster.{key}': {short_repr(d.get(key))}, but its definition is "
                             f"{short_repr(value)}")
    return made


def _made_for(d: Mapping, devices: tuple[str, ...]) -> MadeFor:
    if "format" not in d and "version" not in d and "graph" not in d and "cluster" not in d:
        return MadeFor(1, None, None)
    fmt = d.get("format")
    if fmt != FORMAT:
        hint = " (this is a graph file, not a placement)" if fmt == "placeto-graph" else ""
        raise InputError(f"field 'format': expected {FORMAT!r}, got {short_repr(fmt)}{hint}")
    version = d.get("version")
    if isinstance(version, bool) or version not in READS:
        raise InputError(f"field 'version': unsupported version {short_repr(version)} (this reads "
                         f"{', '.join(map(str, READS))})")
    graph = _graph_print(d["graph"]) if "graph" in d else None
    cluster = _cluster_print(d["cluster"]) if "cluster" in d else None
    if cluster is not None and cluster.cluster.device_names != devices:
        raise InputError(f"field 'devices': {short_repr(list(devices))} are not the devices of field "
                         f"'cluster.definition' ({short_repr(list(cluster.cluster.device_names))})")
    return MadeFor(version, graph, cluster)


def check_made_for(made_for: MadeFor, graph: Graph) -> None:
    """Refuse a placement made for another graph.

    Raises:
      InputError: naming both graphs, when the recorded structure is not `graph`'s (any node count).
    """
    mine, theirs = graph_print(graph), made_for.graph
    if theirs is None or theirs.structure == mine.structure:
        return
    raise InputError(f"made for graph {theirs.name!r} ({theirs.nodes} nodes, structure {theirs.structure[:SHORT]}), "
                     f"not for graph {mine.name!r} ({mine.nodes} nodes, structure {mine.structure[:SHORT]}): place "
                     f"{mine.name!r} anew (`placeto place`)")


def placement_from_dict(d: Any, graph: Graph | None = None, n_devices: int | None = None,
                        source: str | None = None) -> Placement:
    """Parse a placement dictionary, checked against the graph.

    And against the device count: `n_devices`, else the number of device names. Its fingerprint (any version) is
    checked for form, and against `graph` when given (check_made_for).

    Raises:
      InputError: naming `source` and the entry, node or field.
    """
    try:
        return _placement_from_dict(d, graph, n_devices)
    except InputError as e:
        raise e.with_source(source) if source else e


def _placement_from_dict(d: Any, graph: Graph | None, n_devices: int | None) -> Placement:
    check_file_kind(d, "placement")  # a graph or cluster file given as a placement: says so
    devices = tuple(_field(d, "devices", "top level", list, []))
    for i, dev in enumerate(devices):
        if not isinstance(dev, str):
            raise InputError(f"field 'devices': entry {i} is {short_repr(dev)}, not a device name")
    made_for = _made_for(d, devices)
    if graph is not None:
        check_made_for(made_for, graph)
    raw = _field(d, "placement", "top level", (list, dict))
    if isinstance(raw, dict):
        if graph is None:
            raise InputError("field 'placement': a name -> device map needs the graph")
        unknown = next((k for k in raw if k not in graph.index), None)
        if unknown is not None:
            raise InputError(f"field 'placement': node {unknown!r} is not in graph {graph.name!r}")
        missing = next((nm for nm in graph.names if nm not in raw), None)
        if missing is not None:
            raise InputError(f"field 'placement': node {missing!r} has no device")
        raw = [raw[nm] for nm in graph.names]
    for i, v in enumerate(raw):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"field 'placement': entry {i} is {v!r}, not a device index")
        if not -MAX_INDEX <= v <= MAX_INDEX:  # before the int64 cast; check_placement names the node
            raise InputError(f"field 'placement': entry {i}: device index {v if abs(v) < 10**30 else '(huge)'} "
                             f"is out of range")
    assignment = np.asarray(raw, dtype=np.int64).reshape(-1)
    if made_for.graph is not None and assignment.size != made_for.graph.nodes:
        raise InputError(f"field 'graph.nodes': {made_for.graph.nodes}, but field 'placement' has {assignment.size} "
                         f"entries")
    check_placement(assignment, graph, n_devices or (len(devices) or None))
    return Placement(devices, assignment.astype(np.int32), made_for)


def load_placement(path: PathLike, graph: Graph | None = None, n_devices: int | None = None) -> Placement:
    """Read a placement file, checked against the graph and devices.

    Each check only when `graph` or `n_devices` is given; a placement made for another graph is refused
    (check_made_for).
    """
    return placement_from_dict(read_json(path), graph, n_devices, str(path))


# ---- what commands say about it ------------------------------------------------------------------------------
def graph_notes(placement: Placement, graph: Graph, path: PathLike) -> list[str]:
    """One-line notes on a placement accepted for `graph`: unchecked (no fingerprint), renamed, costs changed."""
    theirs, mine = placement.made_for.graph, graph_print(graph)
    if theirs is None:
        if placement.made_for.version == 1:
            return [f"note: {path}: no fingerprint: made before placement files recorded their graph and cluster "
                    f"(format version 1); not checked against graph {graph.name!r}"]
        return [f"note: {path}: records no graph; not checked against graph {graph.name!r}"]
    notes = []
    if theirs.name != mine.name:
        notes.append(f"note: {path}: made for graph {theirs.name!r}, of the same structure as {mine.name!r}")
    if theirs.costs != mine.costs:
        notes.append(f"note: {path}: made for graph {theirs.name!r} with other costs (the graph file changed since, "
                     f"e.g. profiled): simulated with the costs it has now")
    return notes


def recorded_cluster(placements: Sequence[tuple[str, Placement]]) -> tuple[str, Cluster] | None:
    """(file, cluster) the placements record; None if none records one.

    Raises:
      InputError: two placements that record different clusters, naming both files.
    """
    found = [(path, p.made_for.cluster) for path, p in placements if p.made_for.cluster is not None]
    for (first, a), (other, b) in zip(found, found[1:]):
        if a.hash != b.hash:
            raise InputError(f"{first} was made for cluster {a.name!r} but {other} for {b.name!r} (hash "
                             f"{a.hash[:SHORT]} vs {b.hash[:SHORT]}): give --preset or --cluster")
    return (found[0][0], found[0][1].cluster) if found else None


def cluster_note(placement: Placement, path: PathLike, cluster: Cluster, why: str) -> str | None:
    """The note when `cluster` is not the one `placement` was made for; None when it is or none is recorded.

    why: what chose `cluster`, e.g. "as --preset says".
    """
    theirs = placement.made_for.cluster
    if theirs is None or theirs.hash == cluster_print(cluster).hash:
        return None
    return (f"note: {path} was made for cluster {describe_cluster(theirs.cluster)}; simulating on "
            f"{describe_cluster(cluster)} {why}")
