"""Synthetic kernels taking each node's cost, for cost-only graphs.

A graph that carries only costs (no program to re-trace) still runs on local JAX devices: `synthetic_plan` makes
a `simulator.hardware.dispatch.Plan` in which node i is one task, a `lax.fori_loop` of small float32 matmuls
(size x size, `KernelModel.size`) whose trip count is set so that it takes cost_us[i] microseconds on its device,
then writes outputs of the node's recorded sizes (`Graph.out_bytes`, bytes, as uint8 arrays) for its consumers.
The loop is seeded by the task's inputs, so it waits for them and nothing is constant-folded. Source nodes of
zero cost hold their outputs resident instead.

`KernelModel` says how long the kernel takes on a device (microseconds per iteration, bytes per microsecond of
output fill); `simulator.measure.calibrate.calibrate_kernel` measures it. Plans run as any other
(`simulator.hardware.dispatch`: tokens, sends, dispatch threads).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from simulator.hardware.dispatch import Plan, Task
from simulator.hardware.plans import check_order, compile_task, finish_plan, placement_array
from simulator.model.graph import Graph, Source

_KERNELS: dict = {}  # (output sizes, matrix side, device) -> jitted synthetic kernel


class KernelModel(NamedTuple):
    """How long the synthetic kernel takes on a device.

    iterations x iter_us + output bytes / fill rate, microseconds.
    """

    iter_us: float  # microseconds per loop iteration (one size x size float32 matmul and tanh)
    fill_bytes_per_us: float  # rate at which outputs are written
    size: int = 64  # matrix side

    def iterations(self, cost_us: float, out_bytes: float) -> int:
        """Trip count of a kernel taking `cost_us` and writing `out_bytes`."""
        return max(0, int(round((cost_us - out_bytes / self.fill_bytes_per_us) / self.iter_us)))


def kernel_body(out_bytes: tuple[int, ...], size: int) -> Callable:
    """The synthetic kernel's body: n_iter matmuls, then uint8 outputs.

    f(n_iter, *inputs) -> outputs of the byte sizes `out_bytes`. The matmuls are seeded by the inputs, so the kernel
    waits for them and nothing is constant-folded.
    """
    import jax
    import jax.numpy as jnp

    def body(n_iter, *xs):
        seed = sum((x.reshape(-1)[0].astype(jnp.float32) for x in xs if x.size), jnp.float32(0))
        m = jnp.full((size, size), 1.0 / size, jnp.float32) + seed * 1e-9  # tanh(m @ m) stays near 1: no denormals
        m = jax.lax.fori_loop(0, n_iter, lambda _, a: jnp.tanh(a @ a), m)
        v = (m[0, 0] * 0).astype(jnp.uint8)
        return tuple(jnp.full((b,), v, jnp.uint8) for b in out_bytes)

    return body


def synthetic_plan(graph: Graph, placement: Sequence[int], cost_us: np.ndarray, devices: Sequence,
                   kernel: KernelModel | Sequence[KernelModel], order: Sequence[int] | None = None) -> Plan:
    """The plan of a cost-only graph, a synthetic kernel per node.

    Node i runs a synthetic kernel taking cost_us[i]. Source nodes of zero cost hold their outputs resident. The
    step's outputs are the outputs of the sink nodes.

    Args:
      graph: the cost-only graph; node outputs of graph.out_bytes.
      placement: int[N] device index per node.
      cost_us: float64[N] each node's cost on its device, microseconds.
      devices: the JAX devices, by device index.
      kernel: the kernel's model on every device, or one per device index (mixed devices: a GPU runs the loop far
        faster than a CPU).
      order: the dispatch order (default: graph.topo_order).
    """
    import jax
    import jax.numpy as jnp

    n = graph.n_nodes
    kernels = [kernel] * len(devices) if isinstance(kernel, KernelModel) else list(kernel)
    if len(kernels) != len(devices):
        raise ValueError(f"{len(kernels)} kernel models for {len(devices)} devices")
    place = placement_array(placement, n, len(devices), "nodes")
    order = check_order(order if order is not None else graph.topo_order, n)
    par_off = graph.parents[0]
    edges = sorted(set(zip(graph.edge_dst.tolist(), graph.edge_src.tolist(), graph.edge_out.tolist())))
    inputs_of: list[list[Source]] = [[] for _ in range(n)]
    for d, s, o in edges:
        inputs_of[d].append(Source(s, o))
    resident, owner, tasks = {}, {}, []
    for k, i in enumerate(order):
        dev = int(place[i])
        sizes = tuple(int(b) for b in graph.out_bytes[graph.out_offsets[i]:graph.out_offsets[i + 1]])
        outs = tuple(Source(i, j) for j in range(len(sizes)))
        owner.update((s, k) for s in outs)
        if cost_us[i] == 0 and par_off[i + 1] == par_off[i]:
            for s, b in zip(outs, sizes):
                resident[(s, dev)] = jax.device_put(jnp.zeros((b,), jnp.uint8), devices[dev])
            tasks.append(Task(i, dev, None, (), (), ()))
            continue
        trips = ("iterations", i)
        owner[trips] = k
        iterations = kernels[dev].iterations(cost_us[i], sum(sizes))
        resident[(trips, dev)] = jax.device_put(jnp.int32(iterations), devices[dev])
        key = (sizes, kernels[dev].size, devices[dev])
        if key not in _KERNELS:
            _KERNELS[key] = compile_task(kernel_body(sizes, kernels[dev].size), devices[dev])
        tasks.append(Task(i, dev, _KERNELS[key], (trips, *inputs_of[i]), outs, ()))
    child_off = graph.children[0]
    sinks = [i for i in range(n) if child_off[i + 1] == child_off[i]]
    flat_out = tuple((Source(i, j), int(place[i])) for i in sinks for j in range(int(graph.n_outputs[i])))
    return finish_plan(tasks, owner, resident, devices, flat_out, None)
