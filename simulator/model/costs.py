"""Analytic roofline costs per JAX primitive, and datasheet specs.

A node's time on a device of kind `k` is::

    time_us = max(flops / peak_flops, bytes_accessed / bandwidth) * 1e6 + kernels * launch_overhead_us

with `bytes_accessed` = input + output bytes (from the shapes in the node attrs written by simulator.tracing.trace), the
peak chosen by dtype (16-bit float matmuls/convolutions use the tensor-core peak, fp64 the fp64 peak, all else
fp32) and `kernels` = 1 except for control-flow nodes (one per equation in the body, times the trip count).

Free ops cost 0 (no launch either): graph inputs (`input`, `param`, `const`) and the ops XLA turns into
bitcasts or fuses into their consumer (`reshape`, `squeeze`, `expand_dims`, `broadcast_in_dim`).

FLOPs per primitive (`eqn_work`): dot_general 2 * batch * M * N * K; conv_general_dilated
2 * out elements * kernel spatial size * in-channels per group; elementwise 1 per output element, transcendental
ones (exp, log, tanh, logistic, ...) `TRANSCENDENTAL_FLOPS` each; reductions 1 per input element; pure data
movement (transpose, slice, gather, ...) 0; anything else 1 per output element. Control flow: scan = length x
body, while = one trip of cond + body (the trip count is unknown statically), cond = the costliest branch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from simulator.model.errors import InputError

# `Graph` in the annotations is simulator.model.graph.Graph, not imported here: simulator.model.graph imports this
# module for the costs it derives on demand (`derived_costs`), and an import back would be a cycle.

TFLOP = 1e12
GB = 1e9


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """Peak numbers of one device as a framework sees it.

    One GK210 die of a K80 board is one device.
    """

    name: str
    fp32_tflops: float  # peak fp32 FLOP/s / 1e12 (vector units, boost clock)
    fp16_matmul_tflops: float  # dense 16-bit matmul peak, TFLOP/s (tensor cores where present, else = fp32)
    fp64_tflops: float  # peak fp64 FLOP/s / 1e12
    bandwidth_gbs: float  # device memory bandwidth, GB/s (1e9 bytes/s)
    memory_bytes: float  # device memory capacity, bytes
    launch_overhead_us: float  # per-kernel launch/dispatch cost added to every non-free op, us
    source: str  # where the numbers come from


# Vendor datasheet numbers. Launch overheads are typical measured CUDA kernel launch latencies (a few us),
# an order of magnitude rather than a datasheet value.
SPECS: Mapping[str, DeviceSpec] = {
    # NVIDIA Tesla K80 datasheet: board = 2 x GK210, 4992 CUDA cores, 8.73 TFLOP/s fp32 at boost (875 MHz;
    # 5.6 at base 560 MHz), 2.91 fp64 at boost, 480 GB/s, 24 GB GDDR5. TensorFlow sees each GK210 as one GPU,
    # so per device: 2496 cores * 2 FLOP * 0.875 GHz = 4.37 TFLOP/s fp32, 1.46 fp64, 240 GB/s, 12 GB.
    # No fast fp16 on Kepler: 16-bit matmuls run at the fp32 rate.
    "k80": DeviceSpec("k80", 4.37, 4.37, 1.46, 240.0, 12 * GB, 5.0, "NVIDIA Tesla K80 datasheet, per GK210 die"),
    # NVIDIA V100 SXM2 datasheet: 15.7 fp32, 125 tensor (fp16), 7.8 fp64 TFLOP/s, 900 GB/s HBM2, 16 GB.
    "v100": DeviceSpec("v100", 15.7, 125.0, 7.8, 900.0, 16 * GB, 4.0, "NVIDIA V100 SXM2 16GB datasheet"),
    # NVIDIA A100 40GB SXM datasheet: 19.5 fp32, 156 TF32 tensor, 312 bf16/fp16 tensor (dense), 9.7 fp64,
    # 1555 GB/s HBM2. fp32 inputs are costed at the plain fp32 peak (TF32 is opt-in numerics).
    "a100": DeviceSpec("a100", 19.5, 312.0, 9.7, 1555.0, 40 * GB, 3.0, "NVIDIA A100 40GB SXM datasheet"),
    # NVIDIA H100 SXM5 datasheet: 67 fp32, 989 bf16/fp16 tensor (dense; 1979 with sparsity), 34 fp64,
    # 3.35 TB/s HBM3, 80 GB.
    "h100": DeviceSpec("h100", 67.0, 989.0, 34.0, 3350.0, 80 * GB, 2.5, "NVIDIA H100 SXM5 80GB datasheet"),
    # NVIDIA H100 PCIe datasheet: 51 fp32, 756 bf16/fp16 tensor (dense), 26 fp64, 2.0 TB/s HBM2e, 80 GB.
    "h100-pcie": DeviceSpec("h100-pcie", 51.0, 756.0, 26.0, 2000.0, 80 * GB, 2.5, "NVIDIA H100 PCIe datasheet"),
    # NVIDIA H200 SXM datasheet: the H100's compute (67 fp32, 989 bf16 dense, 34 fp64), 4.8 TB/s HBM3e, 141 GB.
    "h200": DeviceSpec("h200", 67.0, 989.0, 34.0, 4800.0, 141 * GB, 2.5, "NVIDIA H200 SXM 141GB datasheet"),
    # A generic server CPU core complex as one device: ~100 GFLOP/s fp32 (a few AVX2 cores), ~20 GB/s.
    "cpu": DeviceSpec("cpu", 0.1, 0.1, 0.05, 20.0, 64 * GB, 1.0, "generic multi-core CPU, order of magnitude"),
}


def device_spec(kind: str) -> DeviceSpec:
    """The spec of a named device kind (a key of SPECS).

    Raises:
      InputError: listing the known kinds, for an unknown one.
    """
    try:
        return SPECS[kind]
    except KeyError:
        raise InputError(f"unknown device kind {kind!r} for the analytic cost model "
                         f"(known: {', '.join(SPECS)})") from None


# ---- primitive categories -----------------------------------------------------------------------------------
FREE_OPS = frozenset({"input", "param", "const", "reshape", "squeeze", "expand_dims", "broadcast_in_dim"})
CONTRACTION_OPS = frozenset({"dot_general", "conv_general_dilated"})
CONTROL_FLOW_OPS = frozenset({"scan", "while", "cond"})
TRANSCENDENTAL_FLOPS = 8  # FLOPs per element of exp, log, tanh, ... (a polynomial plus range reduction)
TRANSCENDENTAL = frozenset({
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "pow", "erf", "erfc", "erf_inv", "lgamma", "digamma",
    "igamma", "igammac", "bessel_i0e", "bessel_i1e", "sqrt", "rsqrt", "cbrt",
})
ELEMENTWISE = frozenset({
    "add", "add_any", "sub", "mul", "div", "rem", "max", "min", "neg", "sign", "floor", "ceil", "round", "abs",
    "select_n", "clamp", "and", "or", "not", "xor", "eq", "ne", "lt", "le", "gt", "ge", "shift_left",
    "shift_right_logical", "shift_right_arithmetic", "integer_pow", "square", "is_finite", "nextafter",
    "convert_element_type", "reduce_precision", "real", "imag", "conj", "complex", "population_count", "clz",
    "copy", "copy_p", "stop_gradient",
}) | TRANSCENDENTAL
REDUCTIONS = frozenset({
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or", "reduce_xor", "argmax",
    "argmin", "cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp", "reduce", "reduce_window_sum",
    "reduce_window_max", "reduce_window_min", "reduce_window",
})
DATA_MOVEMENT = frozenset({
    "transpose", "slice", "dynamic_slice", "dynamic_update_slice", "gather", "concatenate", "pad", "rev",
    "iota", "split", "squeeze", "reshape", "expand_dims", "broadcast_in_dim",
})
CALL_JAXPR_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")  # where call-like primitives keep their body
LIGHT_OPS = ELEMENTWISE | REDUCTIONS | DATA_MOVEMENT  # no contraction, no control flow, no effects


class Work(NamedTuple):
    """What a node does: FLOPs, bytes read and written, kernel launches."""

    flops: float
    bytes_accessed: float
    kernels: float


@functools.lru_cache(maxsize=None)
def itemsize(dtype: Any) -> int:
    """Bytes per element of a dtype (name); 0 for non-arrays (tokens)."""
    import jax.numpy as jnp  # jax on first use: graph files load without it

    try:
        return jnp.dtype(dtype).itemsize  # jnp knows bfloat16 and the float8s by name
    except TypeError:
        return int(getattr(dtype, "itemsize", 0) or 0)  # jax extended dtypes (PRNG keys) carry their own


def aval_bytes(aval: Any) -> int:
    """Bytes of an abstract value (0 for tokens and other non-arrays)."""
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return 0
    return math.prod(shape) * itemsize(dtype)


def _size(aval: Any) -> int:
    return math.prod(getattr(aval, "shape", ()))


def primitive_flops(name: str, params: Mapping[str, Any], in_avals: Sequence[Any], out_avals: Sequence[Any]) -> float:
    """FLOPs of one primitive application (no sub-jaxprs).

    From its params and its input and output avals, by the module docstring's rules.
    """
    out_elems = sum(_size(a) for a in out_avals)
    if name == "dot_general":
        (lhs_contract, _), _ = params["dimension_numbers"]
        k = math.prod(in_avals[0].shape[d] for d in lhs_contract)
        return 2.0 * out_elems * k  # out = batch * M * N
    if name == "conv_general_dilated":
        rhs_spec = params["dimension_numbers"].rhs_spec  # (out feature dim, in feature dim, *spatial dims)
        kernel = in_avals[1].shape
        spatial = math.prod(kernel[d] for d in rhs_spec[2:])
        return 2.0 * out_elems * spatial * kernel[rhs_spec[1]]  # kernel in-dim = in channels / feature groups
    if name == "integer_pow":
        return float(out_elems * max(1, abs(int(params.get("y", 2))) - 1))
    if name in TRANSCENDENTAL:
        return float(out_elems * TRANSCENDENTAL_FLOPS)
    if name in REDUCTIONS:
        return float(sum(_size(a) for a in in_avals[:1] or in_avals))
    if name in ("sort", "top_k"):
        n = _size(in_avals[0])
        last = max(1, in_avals[0].shape[-1] if in_avals[0].shape else 1)
        return float(n * max(1.0, np.log2(last)))
    if name in DATA_MOVEMENT or name in FREE_OPS:
        return 0.0
    return float(out_elems)  # elementwise and anything unknown: one per output element


def _sub_jaxpr(jaxpr: Any) -> Any:
    """The Jaxpr of a Jaxpr or ClosedJaxpr."""
    return getattr(jaxpr, "jaxpr", jaxpr)


def jaxpr_work(jaxpr: Any) -> Work:
    """Summed work of every equation of a (Closed)Jaxpr, calls included."""
    flops = bytes_accessed = kernels = 0.0
    for eqn in _sub_jaxpr(jaxpr).eqns:
        w = eqn_work(eqn)
        flops, bytes_accessed, kernels = flops + w.flops, bytes_accessed + w.bytes_accessed, kernels + w.kernels
    return Work(flops, bytes_accessed, kernels)


def eqn_work(eqn: Any) -> Work:
    """Work of one jaxpr equation; control flow and calls recurse."""
    name, params = eqn.primitive.name, eqn.params
    if name == "scan":
        return _scaled(jaxpr_work(params["jaxpr"]), params["length"])
    if name == "while":
        body, cond = jaxpr_work(params["body_jaxpr"]), jaxpr_work(params["cond_jaxpr"])
        return Work(*(b + c for b, c in zip(body, cond)))
    if name == "cond":
        return max((jaxpr_work(b) for b in params["branches"]), key=lambda w: (w.flops, w.bytes_accessed))
    for key in CALL_JAXPR_PARAMS:  # jit, custom_jvp_call, custom_vjp_call, remat, closed_call, ...
        if key in params:
            return jaxpr_work(params[key])
    in_avals = [v.aval for v in eqn.invars]
    out_avals = [v.aval for v in eqn.outvars]
    io_bytes = float(sum(aval_bytes(a) for a in in_avals) + sum(aval_bytes(a) for a in out_avals))
    free = name in FREE_OPS
    return Work(primitive_flops(name, params, in_avals, out_avals), 0.0 if free else io_bytes, 0.0 if free else 1.0)


def _scaled(w: Work, times: float) -> Work:
    return Work(w.flops * times, w.bytes_accessed * times, w.kernels * times)


# ---- times ----------------------------------------------------------------------------------------------------
def _shapes_bytes(shapes: Sequence[Sequence[int]], dtypes: Sequence[str]) -> float:
    return float(sum(math.prod(s) * itemsize(d) for s, d in zip(shapes, dtypes)))


@functools.lru_cache(maxsize=None)
def _float_bits(dtype: str) -> int:
    """Bits of a floating dtype name, 0 for non-float dtypes."""
    import jax.numpy as jnp  # jax on first use: graph files load without it

    try:
        d = jnp.dtype(dtype)
    except TypeError:
        return 0
    return d.itemsize * 8 if jnp.issubdtype(d, jnp.floating) else 0


def _peak_tflops(spec: DeviceSpec, op: str, in_dtypes: Sequence[str]) -> float:
    bits = [b for b in map(_float_bits, in_dtypes) if b]
    if 64 in bits:
        return spec.fp64_tflops
    if op in CONTRACTION_OPS and bits and all(b == 16 for b in bits):
        return spec.fp16_matmul_tflops
    return spec.fp32_tflops


def node_time_us(spec: DeviceSpec, op: str, attrs: Mapping[str, Any]) -> float:
    """Roofline time of one traced node, microseconds.

    The module docstring's formula; `attrs` as simulator.tracing.trace writes them.
    """
    if op in FREE_OPS:
        return 0.0
    in_dtypes = attrs.get("in_dtypes", ())
    bytes_accessed = attrs.get("bytes_accessed")
    if bytes_accessed is None:
        bytes_accessed = (_shapes_bytes(attrs.get("in_shapes", ()), in_dtypes)
                          + _shapes_bytes(attrs.get("out_shapes", ()), attrs.get("out_dtypes", ())))
    kernels = attrs.get("kernels", 1)
    compute = attrs["flops"] / (_peak_tflops(spec, op, in_dtypes) * TFLOP)
    memory = bytes_accessed / (spec.bandwidth_gbs * GB)
    return max(compute, memory) * 1e6 + kernels * spec.launch_overhead_us


# Kinds whose analytic costs model XLA: a group of ops is one fused computation (`fused_group_costs`). "k80" and
# "cpu" keep op-by-op costs: they model the seeds' TensorFlow 1 setting (placeto-k80, placeto-k80-cpu), where
# every op was its own kernel.
FUSED_KINDS = frozenset({"v100", "a100", "h100", "h100-pcie", "h200"})
KERNEL_OPS = CONTRACTION_OPS | REDUCTIONS | frozenset({"gather", "scatter", "scatter-add", "scatter_add", "sort",
                                                        "dynamic_update_slice", "cumsum", "argmax", "argmin",
                                                        "top_k", "select_and_scatter_add"})


def fused_group_costs(graph: Graph, op_to_group: np.ndarray, kind: str) -> np.ndarray:
    """float64[G] roofline us of each group as one fused computation.

    `graph` is the op graph, `op_to_group` (int[N_ops] -> [0, G)) its groups, `kind` the device kind:

        time_us = max(sum over ops of flops / peak(op), external bytes / bandwidth) * 1e6 + kernels * launch

    External bytes: each value read from another group or from an input/parameter/constant (once per reading
    group), each value written that another group reads or that no op reads (a step output), and the bytes of
    control-flow bodies; values passed inside a group stay in registers/caches (fused). Kernels: one per
    contraction, reduction, gather/scatter/sort-like op and control-flow kernel, plus one for the group's other
    (elementwise, layout) work if it has any.

    Raises:
      InputError: for an op without a 'flops' attribute (traced graphs only).
    """
    spec = device_spec(kind)
    g = np.asarray(op_to_group, dtype=np.int64)
    n_groups = int(g.max()) + 1 if g.size else 0
    compute = np.zeros(n_groups)
    moved = np.zeros(n_groups)
    kernels = np.zeros(n_groups)
    other = np.zeros(n_groups, dtype=bool)
    for i, (op, attrs) in enumerate(zip(graph.ops, graph.attrs)):
        if op in FREE_OPS:
            continue
        if "flops" not in attrs:
            raise InputError(f"node {graph.names[i]!r}: no 'flops' attribute; analytic costs need a traced graph")
        compute[g[i]] += attrs["flops"] / (_peak_tflops(spec, op, attrs.get("in_dtypes", ())) * TFLOP)
        if op in CONTROL_FLOW_OPS:
            moved[g[i]] += attrs.get("bytes_accessed", 0.0)
            kernels[g[i]] += attrs.get("kernels", 1)
        elif op in KERNEL_OPS:
            kernels[g[i]] += 1
        else:
            other[g[i]] = True
    free = np.array([op in FREE_OPS for op in graph.ops], dtype=bool)
    src, dst = graph.edge_src.astype(np.int64), graph.edge_dst.astype(np.int64)
    value = graph.out_offsets[src] + graph.edge_out  # flat output index of each edge
    external = (g[src] != g[dst]) | free[src]
    # reads: each (value, reading group) once, for values from another group or from an input-like op
    reads = np.unique(np.stack([value[external], g[dst[external]]]), axis=1)
    np.add.at(moved, reads[1], graph.out_bytes[reads[0]])
    # writes: each computed value read by another group, and every output of an op nobody reads
    crossing = np.unique(value[(g[src] != g[dst]) & ~free[src]])
    owner = np.repeat(np.arange(graph.n_nodes), graph.n_outputs)
    np.add.at(moved, g[owner[crossing]], graph.out_bytes[crossing])
    unread = np.flatnonzero(~free & (np.bincount(src, minlength=graph.n_nodes) == 0))
    np.add.at(moved, g[unread], graph.node_out_bytes[unread])
    kernels += other
    return np.maximum(compute, moved / (spec.bandwidth_gbs * GB)) * 1e6 + kernels * spec.launch_overhead_us


def analytic_costs(graph: Graph, kind: str) -> np.ndarray:
    """float64[N] roofline microseconds of every node on `kind`.

    `kind` is a key of SPECS.

    Raises:
      InputError: for a non-free node without a 'flops' attribute (not a traced graph).
    """
    spec = device_spec(kind)
    out = np.empty(graph.n_nodes)
    for i, (op, attrs) in enumerate(zip(graph.ops, graph.attrs)):
        if op not in FREE_OPS and "flops" not in attrs:
            raise InputError(f"node {graph.names[i]!r}: no 'flops' attribute; analytic costs need a traced graph")
        out[i] = node_time_us(spec, op, attrs)
    return out


def _described(op: str, attrs: Mapping[str, Any]) -> bool:
    """Whether a node carries the op description `node_time_us` needs.

    A free op needs none; any other its 'flops' and its bytes ('bytes_accessed' or the output shapes), as
    simulator.tracing.trace writes them. A group of a grouped graph ('n_ops' set) sums its ops' flops but not
    their bytes: not described.
    """
    return op in FREE_OPS or ("flops" in attrs and "n_ops" not in attrs
                              and ("bytes_accessed" in attrs or "out_shapes" in attrs))


def derived_costs(graph: Graph, kind: str) -> np.ndarray:
    """float64[N] roofline us for a kind the graph records no costs for.

    What `annotate_costs` writes at import (`analytic_costs`), from the per-op descriptions of a traced graph.
    Graph.cost_for calls it and keeps the result on the graph object (never in its file).

    Raises:
      InputError: one line (the kinds the graph has and how to get `kind`) when `kind` has no analytic model
        (not in SPECS), or the graph has no op descriptions: a grouped graph (its nodes are groups; a group's
        fused cost needs its ops, see `fused_group_costs`), or a graph written with costs only.
    """
    has = f"graph {graph.name!r} has no costs for device kind {kind!r} (it has: {', '.join(graph.kinds) or 'none'})"
    if kind not in SPECS:
        raise InputError(f"{has}, and {kind!r} is no analytic kind ({', '.join(SPECS)}): add its costs with "
                         f"`placeto profile` on such a device, or use a cluster of a kind the graph has")
    if all(_described(op, attrs) for op, attrs in zip(graph.ops, graph.attrs)):
        return analytic_costs(graph, kind)
    meta = graph.meta
    if "op_to_group" in (meta.get("grouping") or {}):
        how = ("rebuild it with `placeto datasets build`" if "program" in meta else
               "import it again with `placeto import-jax`, which writes costs for every analytic kind")
        raise InputError(f"{has}; its nodes are groups, without the op descriptions analytic costs need: {how}, "
                         f"or use a cluster of a kind it has")
    raise InputError(f"{has}, nor op descriptions (per-op flops and shapes, as `placeto import-jax` writes) to "
                     f"derive them from: add {kind!r} costs to the file, or use a cluster of a kind it has")


def annotate_costs(graph: Graph, kinds: Sequence[str] = ("k80",)) -> Graph:
    """A copy of `graph` with roofline costs recorded for `kinds`."""
    for kind in kinds:
        graph = graph.with_costs(kind, analytic_costs(graph, kind))
    return graph
