"""Seeded synthetic placement tasks: a DAG and its own cluster each.

Drawn from a wide distribution. The shipped families (`simulator.workloads.families`) are traced from a few kinds of
real programs; users bring graphs of any shape and size, on any hardware. This module draws (Graph, Cluster) tasks
from a distribution as wide as that, for training and evaluating placement policies. Nothing is stored: a task is a
pure function of its `GenSpec`, and a spec a pure function of (family, index, seed), so the same seed gives
identical graphs and clusters on every machine (numpy's PCG64 streams).

Families (`GEN_FAMILIES`), each a graph structure:

* ``gen-chain``: a sequential backbone with occasional short branches (1-4 ops) that rejoin it 1-4 ops later.
* ``gen-forkjoin``: blocks that fork into 2-8 parallel branches of 1-8 ops each (branches of one block differ
  in length), joined by one op, sometimes with a residual edge around the block; short chains between blocks.
* ``gen-layered``: a random layered DAG: layer widths log-normal around a per-graph width (2 to 2 sqrt(N)),
  every op takes 1-4 parents from the previous layer or, sometimes, the one before it; every op but the last
  layer's feeds the next layer.
* ``gen-skip``: a backbone with skip connections of varied length, as in ResNets and U-Nets: a residual every
  2-6 ops (some through a 1-2 op projection branch), U-Net style mirrored long skips, and random skips up to a
  quarter of the backbone long.

The distribution (per task, independently; "log-uniform" means uniform in the logarithm):

* nodes: 50 to 20,000, log-uniform (callers cap it: `max_nodes`, e.g. smaller graphs for training).
* cost scale: the median op cost on the fastest device, 1 us to 1 s, log-uniform; op costs log-normal around
  it (sigma 0.3-1.5), 0-10% zero-cost ops.
* CCR (`simulator.model.stats.communication_ratio`): 0.1 to 20, log-uniform, met by the output sizes up to their
  rounding to whole bytes (within 1%).
* devices: 2 to 8. Cluster: 40% homogeneous (kind "gpu"); 30% heterogeneous, 2-3 kinds "gpu-a", "gpu-b",
  "gpu-c" whose costs are 1x, 1-4x, 1-4x the fastest (log-uniform, each op spread around it with sigma
  0.1-0.4, never below 1x); 30% GPU+CPU: device 0 "/cpu:0" of kind "cpu" (costs 5-30x the GPUs'), and 1-7 GPUs
  "gpu".
* bandwidth: 1e3 to 1e5 bytes/us (1-100 GB/s), log-uniform; output sizes follow from the CCR.
* transfer overheads: delta2 + latency are 2-50% of an edge's mean transfer time (the rest bytes / bandwidth).
* delta1: 0.5-20% of the median non-zero op cost, log-uniform.
* memory: 10-50% of ops hold parameters (persistent bytes 0.5-20x the mean output size); 75% roomy (each GPU
  holds the whole graph, 1.25-4x over), 25% tight (each GPU holds 1.1-1.5x a balanced share; one GPU
  rarely holds the graph).

Times are in microseconds and sizes in bytes, as everywhere in the project. Ops are numbered in a topological
order. Every graph's `meta["gen_spec"]` records its spec (`spec_from_meta`, `rebuild`).

Use::

    from simulator.workloads.generated import gen_specs, build, tasks
    specs = gen_specs("gen-layered", 100, seed=0, split="train", max_nodes=2000)   # list[GenSpec]
    graph, cluster = build(specs[0])                            # named <family>_<index>, e.g. gen-layered_001
    pairs = tasks("gen-skip", 20, split="test")                                      # list[(Graph, Cluster)]

The split is fixed: of every 4 consecutive indices of a family, one (seeded) is in "test", so test is 25% of
the indices and a longer list only appends to a shorter one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from simulator.model.cluster import Cluster, Device
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.limits import MAX_BYTES, MAX_SEED
from simulator.model.stats import communication_ratio

GEN_FAMILIES = ("gen-chain", "gen-forkjoin", "gen-layered", "gen-skip")
GEN_SPLITS = ("train", "test", "all")
MIN_NODES, MAX_NODES = 50, 20_000
CLUSTER_TYPES = ("homogeneous", "heterogeneous", "gpu-cpu")
HETERO_KINDS = ("gpu-a", "gpu-b", "gpu-c")
GENERATOR = "placeto.generated"


@dataclasses.dataclass(frozen=True)
class GenSpec:
    """Everything drawn for one task: `build(spec)` depends on it alone.

    JSON-safe: see `spec_from_meta`.

    Attributes:
      family, index, seed: where it was drawn (`gen_specs`); the graph is named `<family>_<index:03d>`
        (`_s<seed>` appended for seed != 0).
      n_nodes: N, nodes of the graph.
      graph_seed: seed of the per-op draws (structure, costs, sizes).
      structure: ((name, value), ...) the family's shape parameters (`structure_params`).
      cost_scale_us: median op cost on the fastest device, us.
      cost_sigma: log-normal sigma of the op costs around the scale.
      zero_cost_frac: fraction of ops that cost nothing.
      ccr: target communication-to-computation ratio (`simulator.model.stats.communication_ratio`).
      bytes_sigma: log-normal sigma of the output sizes.
      bandwidth_bytes_per_us: the cluster's bandwidth, bytes/us.
      fixed_comm_frac: share of the mean transfer time that is per-transfer overhead (delta2 + latency).
      latency_share: share of that overhead that is latency (the rest is delta2).
      delta1_frac: delta1 over the median non-zero op cost.
      param_frac: fraction of ops that hold parameters (persistent bytes).
      param_bytes_ratio: mean persistent bytes of a parameter op over the mean output size.
      n_devices: D, devices of the cluster.
      cluster_type: one of CLUSTER_TYPES.
      kind_factors: slowdown of each device kind against the fastest (the first is 1.0), per kind.
      kind_sigma: log-normal sigma of each op's slowdown around its kind's factor.
      device_kinds: [D] index into kind_factors of each device.
      memory_tight: False: each GPU holds `memory_headroom` x the single-device need; True: a balanced share.
      memory_headroom: capacity over that need (see `build`).
    """

    family: str
    index: int
    seed: int
    n_nodes: int
    graph_seed: int
    structure: tuple[tuple[str, float], ...]
    cost_scale_us: float
    cost_sigma: float
    zero_cost_frac: float
    ccr: float
    bytes_sigma: float
    bandwidth_bytes_per_us: float
    fixed_comm_frac: float
    latency_share: float
    delta1_frac: float
    param_frac: float
    param_bytes_ratio: float
    n_devices: int
    cluster_type: str
    kind_factors: tuple[float, ...]
    kind_sigma: float
    device_kinds: tuple[int, ...]
    memory_tight: bool
    memory_headroom: float

    @property
    def name(self) -> str:
        """The graph's name, e.g. "gen-layered_012"."""
        return f"{self.family}_{self.index:03d}" + (f"_s{self.seed}" if self.seed else "")

    @property
    def structure_params(self) -> dict[str, float]:
        return dict(self.structure)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The device kind names, aligned with kind_factors."""
        if self.cluster_type == "homogeneous":
            return ("gpu",)
        if self.cluster_type == "gpu-cpu":
            return ("gpu", "cpu")
        return HETERO_KINDS[:len(self.kind_factors)]


# ---- drawing specs -----------------------------------------------------------------------------------------
def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _structure(family: str, rng: np.random.Generator) -> tuple[tuple[str, float], ...]:
    """The family's shape parameters (see the module docstring)."""
    if family == "gen-chain":
        d = {"branch_prob": rng.uniform(0.02, 0.15), "branch_len_max": int(rng.integers(1, 5)),
             "rejoin_max": int(rng.integers(1, 5))}
    elif family == "gen-forkjoin":
        d = {"branches_max": int(rng.integers(2, 9)), "depth_max": int(rng.integers(1, 9)),
             "residual_prob": rng.uniform(0.0, 0.5), "link_max": int(rng.integers(0, 4))}
    elif family == "gen-layered":
        d = {"width": rng.uniform(0.0, 1.0),  # position between 2 and 2 sqrt(N), log scale (resolved in build)
             "width_sigma": rng.uniform(0.2, 0.8), "fan_in_max": int(rng.integers(1, 5)),
             "skip2_prob": rng.uniform(0.0, 0.3)}
    elif family == "gen-skip":
        d = {"block": int(rng.integers(2, 7)), "proj_prob": rng.uniform(0.0, 0.5),
             "unet_levels": int(rng.integers(1, 9)) if rng.random() < 0.5 else 0,
             "long_skip_density": rng.uniform(0.0, 0.03), "max_skip_frac": rng.uniform(0.01, 0.25)}
    else:
        raise InputError(f"unknown generated family {family!r} (known: {', '.join(GEN_FAMILIES)})")
    return tuple((k, float(v) if isinstance(v, float) else int(v)) for k, v in d.items())


def draw_spec(family: str, index: int, seed: int = 0, min_nodes: int = MIN_NODES,
              max_nodes: int = MAX_NODES) -> GenSpec:
    """Spec of task `index` of `family`, from (seed, family, index) alone.

    The node count is log-uniform in [min_nodes, max_nodes], from one uniform draw: capping max_nodes shrinks
    every task's size monotonically and changes nothing else.

    Raises:
      InputError: for an unknown family, or an index, seed or node range out of bounds.
    """
    _check_family(family)
    if not (isinstance(index, (int, np.integer)) and 0 <= index < 2**31):
        raise InputError(f"index must be an integer in [0, 2^31), got {index!r}")
    _check_seed(seed)
    if not (isinstance(min_nodes, (int, np.integer)) and isinstance(max_nodes, (int, np.integer))
            and 2 <= min_nodes <= max_nodes):
        raise InputError(f"node range must be integers 2 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
    rng = np.random.default_rng([int(seed), GEN_FAMILIES.index(family), int(index)])
    u_nodes = rng.random()
    n_nodes = int(round(math.exp(math.log(min_nodes) + u_nodes * (math.log(max_nodes) - math.log(min_nodes)))))
    n_devices = int(rng.integers(2, 9))
    ctype = CLUSTER_TYPES[int(rng.choice(3, p=[0.4, 0.3, 0.3]))]
    if ctype == "homogeneous":
        factors, device_kinds = (1.0,), (0,) * n_devices
    elif ctype == "heterogeneous":
        n_kinds = min(int(rng.integers(2, 4)), n_devices)
        factors = (1.0,) + tuple(_log_uniform(rng, 1.0, 4.0) for _ in range(n_kinds - 1))
        rest = rng.integers(0, n_kinds, n_devices - n_kinds)
        device_kinds = tuple(int(k) for k in np.sort(np.concatenate([np.arange(n_kinds), rest])))
    else:  # one slow CPU (device 0) and n - 1 GPUs
        factors, device_kinds = (1.0, _log_uniform(rng, 5.0, 30.0)), (1,) + (0,) * (n_devices - 1)
    tight = bool(rng.random() < 0.25)
    return GenSpec(
        family=family, index=int(index), seed=int(seed), n_nodes=n_nodes,
        graph_seed=int(rng.integers(0, 2**32)), structure=_structure(family, rng),
        cost_scale_us=_log_uniform(rng, 1.0, 1e6), cost_sigma=float(rng.uniform(0.3, 1.5)),
        zero_cost_frac=float(rng.uniform(0.0, 0.1)), ccr=_log_uniform(rng, 0.1, 20.0),
        bytes_sigma=float(rng.uniform(0.5, 2.0)), bandwidth_bytes_per_us=_log_uniform(rng, 1e3, 1e5),
        fixed_comm_frac=float(rng.uniform(0.02, 0.5)), latency_share=float(rng.uniform(0.0, 1.0)),
        delta1_frac=_log_uniform(rng, 0.005, 0.2), param_frac=float(rng.uniform(0.1, 0.5)),
        param_bytes_ratio=_log_uniform(rng, 0.5, 20.0), n_devices=n_devices, cluster_type=ctype,
        kind_factors=factors, kind_sigma=float(rng.uniform(0.1, 0.4)) if ctype != "homogeneous" else 0.0,
        device_kinds=device_kinds, memory_tight=tight,
        memory_headroom=float(rng.uniform(1.1, 1.5)) if tight else _log_uniform(rng, 1.25, 4.0))


def in_test(family: str, index: int, seed: int = 0) -> bool:
    """Whether task `index` of `family` is in the test split.

    One seeded index of every 4 consecutive ones.
    """
    _check_family(family)
    block = int(index) // 4
    rng = np.random.default_rng([int(seed), GEN_FAMILIES.index(family), block, 1])
    return int(index) % 4 == int(rng.integers(0, 4))


def gen_specs(family: str, n: int, seed: int = 0, split: str = "train", min_nodes: int = MIN_NODES,
              max_nodes: int = MAX_NODES) -> list[GenSpec]:
    """The first `n` specs of `family` in `split`, by index.

    Splits: "train" (75% of the indices), "test" (25%), "all". The split does not depend on n, min_nodes or
    max_nodes, so a longer list extends a shorter one.

    Raises:
      InputError: for an unknown family or split, or a bad `n`.
    """
    _check_family(family)
    if split not in GEN_SPLITS:
        raise InputError(f"unknown split {split!r} (known: {', '.join(GEN_SPLITS)})")
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise InputError(f"n must be a non-negative integer, got {n!r}")
    specs, index = [], 0
    while len(specs) < n:
        if split == "all" or in_test(family, index, seed) == (split == "test"):
            specs.append(draw_spec(family, index, seed, min_nodes, max_nodes))
        index += 1
    return specs


def tasks(family: str, n: int, seed: int = 0, split: str = "train", min_nodes: int = MIN_NODES,
          max_nodes: int = MAX_NODES) -> list[tuple[Graph, Cluster]]:
    """The built (graph, cluster) tasks of `gen_specs` with these arguments."""
    return [build(s) for s in gen_specs(family, n, seed, split, min_nodes, max_nodes)]


def spec_from_meta(meta: dict) -> GenSpec:
    """The GenSpec recorded in a generated graph's meta.

    Also after a save and load: lists become tuples.

    Raises:
      InputError: if the meta has no 'gen_spec'.
    """
    d = meta.get("gen_spec") if isinstance(meta, dict) else None
    if not isinstance(d, dict):
        raise InputError("not a generated graph: its meta has no 'gen_spec'")
    d = dict(d)
    d["structure"] = tuple((str(k), v) for k, v in d["structure"])
    d["kind_factors"] = tuple(float(x) for x in d["kind_factors"])
    d["device_kinds"] = tuple(int(x) for x in d["device_kinds"])
    return GenSpec(**d)


def rebuild(graph: Graph) -> tuple[Graph, Cluster]:
    """The (graph, cluster) task a generated graph came from, rebuilt."""
    return build(spec_from_meta(graph.meta))


def _check_family(family: str) -> None:
    if family not in GEN_FAMILIES:
        raise InputError(f"unknown generated family {family!r} (known: {', '.join(GEN_FAMILIES)})")


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise InputError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r}")


# ---- structures: (src int64[E], dst int64[E]) with src < dst (ops numbered topologically) -------------------
class _Edges:
    def __init__(self):
        self.src: list[int] = []
        self.dst: list[int] = []

    def add(self, s: int, d: int) -> None:
        self.src.append(s)
        self.dst.append(d)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.src, dtype=np.int64), np.asarray(self.dst, dtype=np.int64)


def _chain(n: int, p: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The gen-chain structure: a backbone with short rejoining branches.

    At each op, with branch_prob, a branch of 1..branch_len_max ops forks from the backbone's tail and joins the
    backbone 1..rejoin_max ops later. The last op is on the backbone.
    """
    e = _Edges()
    u = rng.random(n)
    lens = rng.integers(1, int(p["branch_len_max"]) + 1, n)
    delays = rng.integers(1, int(p["rejoin_max"]) + 1, n)
    tail, k, pending = 0, 1, []  # pending: [branch end, backbone ops until it joins]
    while k < n:
        length = int(lens[k])
        if u[k] < p["branch_prob"] and k + length < n - 1:
            prev, delay = tail, int(delays[k])
            for _ in range(length):
                e.add(prev, k)
                prev, k = k, k + 1
            pending.append([prev, delay])
            continue
        e.add(tail, k)
        keep = []
        for br in pending:
            br[1] -= 1
            if br[1] <= 0:
                e.add(br[0], k)
            else:
                keep.append(br)
        pending, tail, k = keep, k, k + 1
    for end, _ in pending:
        e.add(end, n - 1)
    return e.arrays()


def _forkjoin(n: int, p: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The gen-forkjoin structure: blocks that fork and join.

    Each block: 0..link_max chain ops, a fork into 2..branches_max branches of 1..depth_max ops each, a join op
    (with residual_prob also fed by the block's input). The last block is cut short at n ops.
    """
    e = _Edges()
    head, k = 0, 1
    bmax, dmax = int(p["branches_max"]), int(p["depth_max"])
    while k < n:
        for _ in range(int(rng.integers(0, int(p["link_max"]) + 1))):
            if k >= n:
                break
            e.add(head, k)
            head, k = k, k + 1
        if k >= n:
            break
        ends = []
        for _ in range(int(rng.integers(2, bmax + 1))):
            prev = head
            for _ in range(int(rng.integers(1, dmax + 1))):
                if k >= n - 1:  # keep the last op for the join
                    break
                e.add(prev, k)
                prev, k = k, k + 1
            if prev != head:
                ends.append(prev)
        join, k = k, k + 1
        for end in ends or [head]:
            e.add(end, join)
        if ends and rng.random() < p["residual_prob"]:
            e.add(head, join)
        head = join
    return e.arrays()


def _layered(n: int, p: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The gen-layered structure: layers of log-normal widths.

    Widths around `width` (resolved between 2 and 2 sqrt(n)); every op of a layer > 0 takes 1..fan_in_max parents
    from the previous layer (with skip2_prob each, from the one before); every op of a layer but the last without a
    child feeds a random op of the next layer.
    """
    hi = max(2.0, 2.0 * math.sqrt(n))
    width = math.exp(math.log(2.0) + p["width"] * (math.log(hi) - math.log(2.0)))
    sig = p["width_sigma"]
    widths = np.zeros(0, dtype=np.int64)
    while widths.sum() < n:
        more = np.maximum(1, np.round(width * np.exp(sig * rng.standard_normal(2 * n // max(1, int(width)) + 8)
                                                     - sig * sig / 2))).astype(np.int64)
        widths = np.concatenate([widths, more])
    layer = np.repeat(np.arange(widths.size), widths)[:n]
    n_layers = int(layer[-1]) + 1
    widths = np.bincount(layer, minlength=n_layers)
    start = np.concatenate([[0], np.cumsum(widths)[:-1]])
    nodes = np.flatnonzero(layer > 0)
    k_par = rng.integers(1, int(p["fan_in_max"]) + 1, nodes.size)
    dst = np.repeat(nodes, k_par)
    back = 1 + ((rng.random(dst.size) < p["skip2_prob"]) & (layer[dst] >= 2))
    pl = layer[dst] - back
    src = start[pl] + np.floor(rng.random(dst.size) * widths[pl]).astype(np.int64)
    orphan = np.flatnonzero((np.bincount(src, minlength=n) == 0) & (layer < n_layers - 1))
    nl = layer[orphan] + 1
    child = start[nl] + np.floor(rng.random(orphan.size) * widths[nl]).astype(np.int64)
    return np.concatenate([src, orphan]), np.concatenate([dst, child])


def _skip(n: int, p: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The gen-skip structure: a backbone with skip connections.

    A residual every `block` ops (with proj_prob through a 1-2 op projection branch), `unet_levels` mirrored long
    skips, and long_skip_density * backbone random skips of 2 to max_skip_frac * backbone ops.
    """
    e = _Edges()
    block = int(p["block"])
    bb: list[int] = []
    pending: dict[int, list[int]] = {}
    k, pos = 0, 0
    while k < n:
        node, k = k, k + 1
        if bb:
            e.add(bb[-1], node)
        for s in pending.pop(pos, ()):
            e.add(s, node)
        bb.append(node)
        if pos % block == 0:
            s = node
            if rng.random() < p["proj_prob"] and k + 2 < n:
                for _ in range(int(rng.integers(1, 3))):
                    e.add(s, k)
                    s, k = k, k + 1
            pending.setdefault(pos + block, []).append(s)
        pos += 1
    for sources in pending.values():  # residuals past the end join the last op
        for s in sources:
            if s != bb[-1]:
                e.add(s, bb[-1])
    m = len(bb)
    bba = np.asarray(bb, dtype=np.int64)
    levels = int(p["unet_levels"])
    if levels and m >= 8:
        pos_s = np.round(np.arange(1, levels + 1) * m / (2 * levels + 2)).astype(np.int64)
        pos_t = m - 1 - pos_s
        ok = pos_t > pos_s + 1
        e.src += bba[pos_s[ok]].tolist()
        e.dst += bba[pos_t[ok]].tolist()
    count = int(round(p["long_skip_density"] * m))
    if count and m >= 4:
        max_len = max(3.0, p["max_skip_frac"] * m)
        s = rng.integers(0, m - 2, count)
        length = np.round(np.exp(rng.uniform(math.log(2.0), math.log(max_len), count))).astype(np.int64)
        t = np.minimum(s + length, m - 1)
        ok = t > s + 1
        e.src += bba[s[ok]].tolist()
        e.dst += bba[t[ok]].tolist()
    return e.arrays()


STRUCTURES: dict[str, Callable[[int, dict, np.random.Generator], tuple[np.ndarray, np.ndarray]]] = {
    "gen-chain": _chain, "gen-forkjoin": _forkjoin, "gen-layered": _layered, "gen-skip": _skip}
OPS = {"gen-chain": ("matmul", "add", "relu", "norm", "softmax"), "gen-forkjoin": ("conv", "pool", "relu", "matmul"),
       "gen-layered": ("matmul", "conv", "add", "relu"), "gen-skip": ("conv", "norm", "relu")}
JOIN_OP = {"gen-chain": "add", "gen-forkjoin": "concat", "gen-layered": "concat", "gen-skip": "add"}


# ---- building ------------------------------------------------------------------------------------------------
def build(spec: GenSpec) -> tuple[Graph, Cluster]:
    """The task of `spec`: (graph of spec.n_nodes ops, cluster of D devices).

    Costs (us): kind 0 of the spec's kinds is the fastest on every op, its cost log-normal around
    cost_scale_us; other kinds multiply it by their factor times a per-op log-normal spread (clipped to at
    least 1x). Output bytes (each op 1 output, 10% of ops 2) are log-normal, then scaled so that
    `simulator.model.stats.communication_ratio(graph, cluster)` equals spec.ccr up to the rounding to whole bytes.
    Memory: with `S` = total persistent bytes + the peak of live outputs in the ops' (topological) order, each
    GPU holds memory_headroom * S (roomy) or memory_headroom * (persistent / D + peak live outputs) (tight);
    the CPU of a gpu-cpu cluster max(4x a GPU's, 1.5 S).

    Raises:
      InputError: for a spec that is no GenSpec, of an unknown family, or with n_nodes out of range.
    """
    if not isinstance(spec, GenSpec):
        raise InputError(f"build takes a GenSpec, got {type(spec).__name__}")
    _check_family(spec.family)
    if not 2 <= spec.n_nodes <= 10 * MAX_NODES:
        raise InputError(f"{spec.name}: n_nodes must be in [2, {10 * MAX_NODES}], got {spec.n_nodes}")
    n, fam = spec.n_nodes, spec.family
    rng = np.random.default_rng(spec.graph_seed)
    src, dst = STRUCTURES[fam](n, spec.structure_params, rng)

    # outputs and edges (distinct (src, dst, out) triples)
    n_out = 1 + (rng.random(n) < 0.1).astype(np.int64)
    out_offsets = np.concatenate([[0], np.cumsum(n_out)]).astype(np.int64)
    out = np.floor(rng.random(src.size) * n_out[src]).astype(np.int64)
    key = np.unique((src * n + dst) * 2 + out)
    src, dst, out = key // 2 // n, key // 2 % n, key % 2

    # costs: kind 0 fastest everywhere
    base = spec.cost_scale_us * np.exp(spec.cost_sigma * rng.standard_normal(n))
    base[rng.random(n) < spec.zero_cost_frac] = 0.0
    if not base.any():
        base[0] = spec.cost_scale_us
    costs = {spec.kinds[0]: base}
    for kind, factor in zip(spec.kinds[1:], spec.kind_factors[1:]):
        spread = np.exp(spec.kind_sigma * rng.standard_normal(n))
        costs[kind] = base * np.maximum(1.0, factor * spread)

    # output bytes for the CCR: sum over edges (fixed + bytes / bw) = ccr * total fastest compute
    rel = np.exp(spec.bytes_sigma * rng.standard_normal(int(out_offsets[-1])))
    edge_rel = rel[out_offsets[src] + out]
    comm = spec.ccr * float(base.sum())
    fixed = spec.fixed_comm_frac * comm / src.size
    scale = comm * (1.0 - spec.fixed_comm_frac) * spec.bandwidth_bytes_per_us / float(edge_rel.sum())
    out_bytes = np.round(rel * scale)

    # parameters and memory
    params = rng.random(n) < spec.param_frac
    mean_out = float(out_bytes.mean()) if out_bytes.size else 0.0
    persistent = np.where(params, np.round(mean_out * spec.param_bytes_ratio
                                           * np.exp(rng.standard_normal(n) - 0.5)), 0.0)
    live = _peak_live_bytes(n, out_offsets, out_bytes, src, dst, out)
    total_p = float(persistent.sum())
    need = total_p + live if not spec.memory_tight else total_p / spec.n_devices + live
    gpu_mem = min(MAX_BYTES, math.ceil(spec.memory_headroom * max(need, 1.0)))
    cpu_mem = min(MAX_BYTES, math.ceil(max(4.0 * gpu_mem, 1.5 * (total_p + live))))

    nz = base[base > 0]
    delta1 = spec.delta1_frac * float(np.median(nz))
    cluster = Cluster(
        name=f"{spec.name}-{spec.cluster_type}",
        devices=tuple(_device(spec, d, gpu_mem, cpu_mem) for d in range(spec.n_devices)),
        delta1_us=delta1, delta2_us=fixed * (1.0 - spec.latency_share),
        bandwidth_bytes_per_us=spec.bandwidth_bytes_per_us, latency_us=fixed * spec.latency_share)

    indeg = np.bincount(dst, minlength=n)
    vocab = np.asarray(OPS[fam])
    ops = np.where(indeg >= 2, JOIN_OP[fam], vocab[rng.integers(0, vocab.size, n)])
    ops[indeg == 0] = "input"
    meta = {"family": fam, "generator": GENERATOR, "gen_spec": _jsonable(dataclasses.asdict(spec)),
            "cluster_type": spec.cluster_type, "ccr_target": spec.ccr}
    graph = Graph(name=spec.name, names=tuple(f"n{i}" for i in range(n)), ops=tuple(ops.tolist()),
                  costs=costs, out_offsets=out_offsets, out_bytes=out_bytes, persistent_bytes=persistent,
                  edge_src=src.astype(np.int32), edge_dst=dst.astype(np.int32), edge_out=out.astype(np.int32),
                  colocation=(None,) * n, attrs=tuple({} for _ in range(n)), meta=meta)
    return graph, cluster


def _device(spec: GenSpec, d: int, gpu_mem: float, cpu_mem: float) -> Device:
    kind = spec.kinds[spec.device_kinds[d]]
    if kind == "cpu":
        return Device("/cpu:0", "cpu", cpu_mem)
    return Device(f"/gpu:{d - (spec.cluster_type == 'gpu-cpu')}", kind, gpu_mem)


def _peak_live_bytes(n: int, out_offsets: np.ndarray, out_bytes: np.ndarray, src: np.ndarray, dst: np.ndarray,
                     out: np.ndarray) -> float:
    """Peak live output bytes, the ops run one by one in index order.

    Index order is topological; an output lives from its op to its last consumer.
    """
    if not out_bytes.size:
        return 0.0
    producer = np.repeat(np.arange(n), np.diff(out_offsets))
    last = producer.copy()
    np.maximum.at(last, out_offsets[src] + out, dst)
    delta = np.zeros(n + 1)
    np.add.at(delta, producer, out_bytes)
    np.add.at(delta, last + 1, -out_bytes)
    return float(np.cumsum(delta)[:n].max())


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return x


# ---- documentation ------------------------------------------------------------------------------------------
def _fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms"
    return f"{us:.3g} us"


def family_stats(family: str, n: int = 32, seed: int = 0, max_nodes: int = MAX_NODES) -> dict[str, Any]:
    """Ranges over the first `n` tasks of `family` (split "all").

    The tasks are built, so CCR and edges are the real ones.
    """
    rows = []
    for spec in gen_specs(family, n, seed, "all", max_nodes=max_nodes):
        graph, cluster = build(spec)
        rows.append((graph.n_nodes, graph.n_edges, communication_ratio(graph, cluster), cluster.n_devices,
                     spec.cost_scale_us, spec.cluster_type, spec.memory_tight))
    cols = list(zip(*rows))
    return {"family": family, "tasks": n, "nodes": (min(cols[0]), max(cols[0])),
            "edges": (min(cols[1]), max(cols[1])), "ccr": (min(cols[2]), max(cols[2])),
            "devices": (min(cols[3]), max(cols[3])), "cost_scale_us": (min(cols[4]), max(cols[4])),
            "clusters": tuple(sum(t == c for t in cols[5]) for c in CLUSTER_TYPES), "tight": sum(cols[6])}


def readme_section(n: int = 32, seed: int = 0, max_nodes: int = MAX_NODES) -> str:
    """datasets/README.md's section on the generated families.

    What they are, their ranges, how to get them (generated on demand, never stored), and a table of the first `n`
    tasks of each family.
    """
    lines = [
        "## Generated families (`gen-*`)",
        "",
        "Synthetic placement tasks, each a graph *and* its own cluster, drawn from a distribution as wide as what",
        "users bring (`simulator/workloads/generated.py`). They are not stored here: every task is a pure function of",
        "(family, index, seed) and is generated on demand in well under a second (numpy; same seed, same arrays).",
        "",
        "- `gen-chain`: a sequential backbone with occasional short branches that rejoin it.",
        "- `gen-forkjoin`: repeated blocks of 2-8 parallel branches (1-8 ops each) that fork and join.",
        "- `gen-layered`: random layered DAGs, layer widths 2 to 2 sqrt(N), edges to the previous 1-2 layers.",
        "- `gen-skip`: a backbone with residual, U-Net mirrored and random long skip connections.",
        "",
        "Per task: 50-20,000 ops (log-uniform; callers cap it with `max_nodes`); median op cost 1 us to 1 s on",
        "the fastest device (log-uniform), op costs log-normal around it; communication-to-computation ratio",
        "(`simulator.model.stats.communication_ratio`) 0.1-20, log-uniform, met by the output sizes; 2-8 devices:",
        "homogeneous (40%), heterogeneous with 2-3 kinds 1-4x apart (30%), or GPUs plus one CPU 5-30x slower",
        "(30%); memory roomy (75%) or tight (25%: each GPU holds 1.1-1.5x a balanced share). The train/test split",
        "is fixed: one seeded index of every 4 is test (25%).",
        "",
        "```python",
        "from simulator.workloads.generated import gen_specs, build, tasks",
        "specs = gen_specs(\"gen-layered\", 100, seed=0, split=\"train\", max_nodes=2000)",
        "graph, cluster = build(specs[0])          # rebuild any saved one: simulator.workloads.generated.rebuild(graph)",
        "pairs = tasks(\"gen-skip\", 20, split=\"test\")  # list of (Graph, Cluster)",
        "```",
        "",
        f"The first {n} tasks of each family (seed {seed}, split all, built):",
        "",
        "| family | tasks | ops | edges | CCR | devices | median op cost | homog. / hetero. / GPU+CPU | tight memory |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for fam in GEN_FAMILIES:
        s = family_stats(fam, n, seed, max_nodes)
        lines.append(
            f"| {fam} | {s['tasks']} | {s['nodes'][0]:,}–{s['nodes'][1]:,} | {s['edges'][0]:,}–{s['edges'][1]:,} | "
            f"{s['ccr'][0]:.3g}–{s['ccr'][1]:.3g} | {s['devices'][0]}–{s['devices'][1]} | "
            f"{_fmt_us(s['cost_scale_us'][0])}–{_fmt_us(s['cost_scale_us'][1])} | "
            f"{' / '.join(str(c) for c in s['clusters'])} | {s['tight']} |")
    return "\n".join(lines) + "\n"


__all__ = ["GEN_FAMILIES", "GEN_SPLITS", "GenSpec", "build", "draw_spec", "family_stats", "gen_specs",
           "in_test", "readme_section", "rebuild", "spec_from_meta", "tasks"]
