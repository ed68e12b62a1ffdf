"""msr-fiddle/dnn-partitioning's throughput inputs and splits, read and written.

Their format (Tarnawski et al., NeurIPS 2020; datasets/outside/msr_fiddle/, MIT licence beside it): a JSON object
with `maxSizePerFPGA` (bytes), `maxFPGAs`, `maxCPUs`, `nodes` (`id`, `supportedOnFpga`, `cpuLatency`,
`fpgaLatency`, `isBackwardNode`, optional `colorClass`, `size` in bytes) and `edges` (`sourceId`, `destId`, `cost`:
the time to move the source's output between an accelerator and CPU DRAM, the same on every edge out of a node;
an optional `size` in bytes). A split ("result") is `{"maxLoad": x, "fpgas": [{"load": l, "nodes": [ids]}, ...],
"cpus": [...]}`: machine k of "fpgas" is accelerator k.

What `read_throughput` builds, for the max-load objective (simulator.model.max_load):

* a `Graph`, one node per node of theirs in file order: cost kind "accelerator" = fpgaLatency and kind "cpu" =
  cpuLatency, in THEIR time units (profiled milliseconds on the layer graphs, estimates on the operator graphs),
  not microseconds; persistent bytes = `size`; colorClass -> the colocation group (a node without one is its own
  group, as in their program); one output per node, of the largest `size` of its out-edges (only the simulator
  reads it). `meta["objective"] = "max_load"` and `meta["max_load"]` hold their ids, each node's outgoing
  transfer cost, whether it may run on an accelerator and whether it is a backward node.
* a `Cluster`: `maxFPGAs` devices of kind "accelerator" with `maxSizePerFPGA` bytes each, then `maxCPUs` devices
  of kind "cpu". The CPUs are always there when maxCPUs > 0, because their DP may use them (as an extra,
  transfer-free but slow stage) whether or not some node is unsupported on the accelerators; a CPU's memory is
  unlimited in their model, so it gets the total `size` of the graph (it never overflows). The simulator's
  interconnect (only the simulator reads it, never the max-load objective) has no overheads and the bandwidth
  that turns the edges' bytes into their `cost`s (bytes over cost, summed over the edges).

Their program treats a training graph's backward nodes through their colour classes: a split file may list only
the forward nodes, and every missing node goes to the one machine that holds its colour class's listed nodes
(`read_split` does the same).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from simulator.model.cluster import Cluster, Device
from simulator.model.errors import InputError
from simulator.model.graph import Graph, make_graph
from simulator.model.io import PathLike, read_json, write_json
from simulator.model.limits import MAX_BANDWIDTH, MAX_BYTES, MAX_COST_US, MAX_DEVICES, MIN_BANDWIDTH, integer, number

ACCELERATOR_KIND = "accelerator"
CPU_KIND = "cpu"
UNITS = "msr-fiddle time units (their latencies; not microseconds)"
COST_TOLERANCE = 1e-6  # their program's check that a node's out-edges share one cost


class Throughput(NamedTuple):
    """One throughput input: the graph, its cluster, the ids of its nodes."""

    graph: Graph
    cluster: Cluster
    ids: tuple[int, ...]  # their node id of each graph node, in file order


def is_throughput(d: Any) -> bool:
    """Whether parsed JSON `d` is one of their throughput inputs (it names `maxFPGAs`), not a graph file."""
    return isinstance(d, dict) and "maxFPGAs" in d and "format" not in d


def read_throughput(path: PathLike) -> Throughput:
    """Read one of their throughput input files (module docstring).

    Raises:
      InputError: one line naming the file and the offending node or field: a missing field, a wrong type, NaN,
        a negative value, a duplicate id, an unknown edge endpoint, two costs on one node's out-edges, a
        backward-to-forward edge, a cycle.
    """
    try:
        return throughput_from_dict(read_json(path), Path(path).stem, str(path))
    except InputError as e:
        raise e.with_source(str(path)) from None


def throughput_from_dict(d: Any, name: str, source: str | None = None) -> Throughput:
    """`read_throughput` on the parsed JSON object `d`; the graph named `name`."""
    if not isinstance(d, dict):
        raise InputError("top level: expected a JSON object")
    n_acc = integer(_get(d, "maxFPGAs", "top level"), "field 'maxFPGAs'", 1, MAX_DEVICES)
    n_cpu = integer(_get(d, "maxCPUs", "top level"), "field 'maxCPUs'", 0, MAX_DEVICES - n_acc)
    capacity = number(_get(d, "maxSizePerFPGA", "top level"), "field 'maxSizePerFPGA'", 0.0, MAX_BYTES, "bytes",
                      lo_open=True)
    nodes = [_node(i, x) for i, x in enumerate(_list(d, "nodes"))]
    if not nodes:
        raise InputError("field 'nodes': no nodes")
    index: dict[int, int] = {}
    for i, node in enumerate(nodes):
        if node["id"] in index:
            raise InputError(f"node id {node['id']}: duplicate id (entries {index[node['id']]} and {i})")
        index[node["id"]] = i
    edges = [_edge(i, x, index) for i, x in enumerate(_list(d, "edges"))]
    out_cost, out_bytes = _out_costs(nodes, edges)
    for src, dst, _, _ in edges:
        if nodes[src]["backward"] and not nodes[dst]["backward"]:
            raise InputError(f"edge {nodes[src]['id']} -> {nodes[dst]['id']}: a backward-to-forward edge")
    if n_cpu == 0 and not all(node["fpga_ok"] for node in nodes):
        bad = next(node["id"] for node in nodes if not node["fpga_ok"])
        raise InputError(f"node id {bad}: field 'supportedOnFpga' is false but 'maxCPUs' is 0 (no device can run it)")
    graph = _graph(name, nodes, edges, out_cost, out_bytes, n_acc, n_cpu, capacity, source)
    return Throughput(graph, _cluster(name, graph, n_acc, n_cpu, capacity, edges), tuple(n["id"] for n in nodes))


def _get(d: dict, key: str, where: str) -> Any:
    if key not in d:
        raise InputError(f"{where}: missing field {key!r}")
    return d[key]


def _list(d: dict, key: str) -> list:
    value = _get(d, key, "top level")
    if not isinstance(value, list):
        raise InputError(f"field {key!r}: expected a list, got {type(value).__name__}")
    return value


def _flag(value: Any, where: str) -> bool:
    """A boolean, or 0/1 as their format allows."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InputError(f"{where}: {value!r} is not a boolean or 0/1")


def _node(i: int, x: Any) -> dict:
    """Entry i of `nodes`, checked, as a dict of plain values."""
    if not isinstance(x, dict):
        raise InputError(f"node entry {i}: expected an object")
    nid = integer(_get(x, "id", f"node entry {i}"), f"node entry {i}: field 'id'", -2**31, 2**31 - 1)
    where = f"node id {nid}"
    out = {"id": nid,
           "fpga_ok": _flag(_get(x, "supportedOnFpga", where), f"{where}: field 'supportedOnFpga'"),
           "backward": _flag(_get(x, "isBackwardNode", where), f"{where}: field 'isBackwardNode'")}
    for key, field in (("cpu", "cpuLatency"), ("fpga", "fpgaLatency")):
        out[key] = number(_get(x, field, where), f"{where}: field {field!r}", 0.0, MAX_COST_US, "time units")
    out["size"] = number(_get(x, "size", where), f"{where}: field 'size'", 0.0, MAX_BYTES, "bytes")
    cc = x.get("colorClass")
    out["color"] = None if cc is None else integer(cc, f"{where}: field 'colorClass'", -2**63, 2**63 - 1)
    name = x.get("name")
    out["name"] = name if isinstance(name, str) and name else None
    return out


def _edge(i: int, x: Any, index: dict[int, int]) -> tuple[int, int, float, float]:
    """Entry i of `edges` as (src index, dst index, cost, bytes), checked."""
    if not isinstance(x, dict):
        raise InputError(f"edge entry {i}: expected an object")
    ends = []
    for field in ("sourceId", "destId"):
        nid = integer(_get(x, field, f"edge entry {i}"), f"edge entry {i}: field {field!r}", -2**31, 2**31 - 1)
        if nid not in index:
            raise InputError(f"edge entry {i}: field {field!r}: unknown node id {nid}")
        ends.append(index[nid])
    where = f"edge entry {i} ({x['sourceId']} -> {x['destId']})"
    if ends[0] == ends[1]:
        raise InputError(f"{where}: a self loop (a cycle)")
    cost = number(_get(x, "cost", where), f"{where}: field 'cost'", 0.0, MAX_COST_US, "time units")
    size = number(x.get("size", 0.0), f"{where}: field 'size'", 0.0, MAX_BYTES, "bytes")
    return ends[0], ends[1], cost, size


def _out_costs(nodes: list[dict], edges: list[tuple]) -> tuple[list[float], list[float]]:
    """Per node: its out-edges' one cost (0 without any) and largest size.

    Raises:
      InputError: naming a node whose out-edges have different costs (their program refuses it too).
    """
    cost: list[float | None] = [None] * len(nodes)
    size = [0.0] * len(nodes)
    for src, _, c, b in edges:
        if cost[src] is not None and abs(cost[src] - c) > COST_TOLERANCE:
            raise InputError(f"node id {nodes[src]['id']}: its out-edges have two different costs "
                             f"({cost[src]!r} and {c!r}); field 'cost' must be the same on every edge out of a node")
        cost[src] = c if cost[src] is None else cost[src]
        size[src] = max(size[src], b)
    return [0.0 if c is None else c for c in cost], size


def _graph(name: str, nodes: list[dict], edges: list[tuple], out_cost: list[float], out_bytes: list[float],
           n_acc: int, n_cpu: int, capacity: float, source: str | None) -> Graph:
    names = [n["name"] for n in nodes]
    if None in names or len(set(names)) != len(names):
        names = [f"node{n['id']}" for n in nodes]
    spec = [{"name": names[i], "op": "backward" if n["backward"] else "forward",
             "cost": {ACCELERATOR_KIND: n["fpga"], CPU_KIND: n["cpu"]}, "out_bytes": [out_bytes[i]],
             "persistent_bytes": n["size"],
             "colocation": None if n["color"] is None else f"color{n['color']}",
             "attrs": {"id": n["id"]}} for i, n in enumerate(nodes)]
    meta = {"family": "msr-fiddle", "objective": "max_load",
            "max_load": {"units": UNITS, "ids": [n["id"] for n in nodes], "out_cost": out_cost,
                         "fpga_ok": [n["fpga_ok"] for n in nodes], "backward": [n["backward"] for n in nodes],
                         "accelerators": n_acc, "cpus": n_cpu, "max_size_per_fpga": capacity}}
    return make_graph(name, spec, [(s, t, 0) for s, t, _, _ in edges], meta, source)  # InputError on a cycle


def _cluster(name: str, graph: Graph, n_acc: int, n_cpu: int, capacity: float, edges: list[tuple]) -> Cluster:
    """Their machines as a Cluster (module docstring)."""
    cost = sum(c for _, _, c, b in edges if c > 0 and b > 0)
    sent = sum(b for _, _, c, b in edges if c > 0 and b > 0)
    bandwidth = min(max(sent / cost if cost > 0 else 1.0, MIN_BANDWIDTH), MAX_BANDWIDTH)
    cpu_memory = min(max(float(graph.persistent_bytes.sum()), 1.0), MAX_BYTES)
    devices = ([Device(f"/accelerator:{k}", ACCELERATOR_KIND, capacity) for k in range(n_acc)]
               + [Device(f"/cpu:{k}", CPU_KIND, cpu_memory) for k in range(n_cpu)])
    return Cluster(f"msr-fiddle-{name}", tuple(devices), 0.0, 0.0, bandwidth)


# ---- splits ---------------------------------------------------------------------------------------------------
def read_split(path: PathLike, task: Throughput) -> np.ndarray:
    """A split file of theirs (a human expert's) as a placement int32[N].

    "fpgas" entry k -> accelerator k, "cpus" entry k -> CPU k. Nodes the file leaves out go to the one machine
    that holds the listed nodes of their colour class (their program's rule for training graphs given a
    forward-only split).

    Raises:
      InputError: naming the file and the node: an unknown id, a node listed twice, more machines than the
        cluster has, a node whose machine cannot be inferred (no listed node of its colour class, or several
        machines).
    """
    try:
        return split_from_dict(read_json(path), task)
    except InputError as e:
        raise e.with_source(str(path)) from None


def split_from_dict(d: Any, task: Throughput) -> np.ndarray:
    """`read_split` on the parsed JSON object `d`."""
    meta = task.graph.meta["max_load"]
    n_acc, n_cpu = meta["accelerators"], meta["cpus"]
    index = {nid: i for i, nid in enumerate(task.ids)}
    placement = np.full(len(task.ids), -1, dtype=np.int64)
    if not isinstance(d, dict):
        raise InputError("top level: expected a JSON object")
    for field, first, count in (("fpgas", 0, n_acc), ("cpus", n_acc, n_cpu)):
        machines = _get(d, field, "top level")
        if not isinstance(machines, list):
            raise InputError(f"field {field!r}: expected a list")
        used = [k for k, m in enumerate(machines) if isinstance(m, dict) and m.get("nodes")]
        if used and used[-1] >= count:
            raise InputError(f"field {field!r}: machine {used[-1]} has nodes but the input has {count}")
        for k, m in enumerate(machines):
            ids = _get(m, "nodes", f"{field}[{k}]") if isinstance(m, dict) else None
            if not isinstance(ids, list):
                raise InputError(f"{field}[{k}]: field 'nodes': expected a list of node ids")
            for nid in ids:
                if isinstance(nid, bool) or not isinstance(nid, int) or nid not in index:
                    raise InputError(f"{field}[{k}]: field 'nodes': unknown node id {nid!r}")
                if placement[index[nid]] >= 0:
                    raise InputError(f"node id {nid}: listed on two machines")
                placement[index[nid]] = first + k
    return _infer_missing(placement, task)


def _infer_missing(placement: np.ndarray, task: Throughput) -> np.ndarray:
    """Unlisted nodes to their colour class's one machine (module docstring)."""
    groups: dict[str, set[int]] = {}
    for i, group in enumerate(task.graph.colocation):
        if group is not None and placement[i] >= 0:
            groups.setdefault(group, set()).add(int(placement[i]))
    for i in np.flatnonzero(placement < 0).tolist():
        where = set() if task.graph.colocation[i] is None else groups.get(task.graph.colocation[i], set())
        if len(where) != 1:
            why = "no listed node of its colour class" if not where else "its colour class is on several machines"
            raise InputError(f"node id {task.ids[i]}: not in the split and its machine cannot be inferred ({why})")
        placement[i] = next(iter(where))
    return placement.astype(np.int32)


def split_dict(task: Throughput, placement: Sequence[int] | np.ndarray, loads: Sequence[float] | np.ndarray,
               max_load: float) -> dict:
    """A placement int[N] in their split format.

    Args:
      loads: float[D] each device's load (their time units), written as each machine's "load".
      max_load: the split's max-load, their "maxLoad".
    """
    meta = task.graph.meta["max_load"]
    n_acc, n_cpu = meta["accelerators"], meta["cpus"]
    p = np.asarray(placement)

    def machine(d: int) -> dict:
        return {"load": float(loads[d]), "nodes": sorted(task.ids[i] for i in np.flatnonzero(p == d).tolist())}

    return {"maxLoad": float(max_load), "fpgas": [machine(d) for d in range(n_acc)],
            "cpus": [machine(n_acc + k) for k in range(n_cpu)]}


def write_split(path: PathLike, task: Throughput, placement: Sequence[int] | np.ndarray,
                loads: Sequence[float] | np.ndarray, max_load: float) -> None:
    """Atomically write `split_dict(...)` to `path` (their program reads it with -expert)."""
    text = json.dumps(split_dict(task, placement, loads, max_load), indent=1) + "\n"
    if not math.isfinite(max_load):
        raise InputError("not written: the max-load is not finite", str(path))
    write_json(path, None, text=text)
