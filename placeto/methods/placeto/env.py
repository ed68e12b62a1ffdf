"""The placement MDP: B episodes on one graph, pure functions over a typed state.

In jumanji's style. An episode visits the nodes in a fixed order (`visit_sequence`), each node `passes` times;
at every step the policy picks the device of the current node, the new placement is simulated once (host,
outside jit), and the reward is the drop in the objective (placeto.objective: the runtime of a placement that fits; feasibility first) divided by a per-graph constant, so an
episode's rewards sum to (initial - final runtime) / reward_scale.

The B episodes of a batch share the graph and the visit order, hence the current node and step index; only
placements differ. `reset` -> `step` ... until `done`; `observe` gives the policy's input.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
from typing import NamedTuple

import numpy as np

from placeto import objective
from placeto.baselines import METHODS
from placeto.baselines.single import or_single
from placeto.methods.placeto.config import PlacetoConfig
from placeto.features import SCHEDULE_CHANNELS, GraphArrays, cost_unit, graph_arrays
from placeto.objective import score_batch
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.model.result import SimResult, lower_bound, upper_bound

from simulator import simulate, simulate_batch


@dataclasses.dataclass(frozen=True, eq=False)
class EnvContext:
    """Per-(graph, cluster) constants, built once by `make_context`.

    Host side, not a pytree.
    """

    graph: Graph
    cluster: Cluster
    arrays: GraphArrays  # padded device arrays for the policy
    visit_seq: np.ndarray  # int32[T] node visited at each step, T = passes * N
    reward_scale: float  # microseconds: runtime with every node on device 0 (memory ignored), > 0
    bound: float  # microseconds: above every placement's simulated runtime (simulator.model.result.upper_bound)
    init_placement: str  # "single" | "random" | "etf" | "list"
    lower_bound: float  # microseconds
    start_placement: np.ndarray | None = None  # int32[N] where "single", "etf", "list" episodes start (None: device 0)
    time_unit: float = 1.0  # microseconds: placeto.features.cost_unit, the unit of arrays.cost_units
    undo_worse: bool = False  # PlacetoConfig.undo_worse: a step that does not lower the objective is undone

    @property
    def n_nodes(self) -> int:
        return self.graph.n_nodes

    @property
    def n_pad(self) -> int:
        return int(self.arrays.node_mask.shape[0])

    @property
    def n_steps(self) -> int:
        return int(len(self.visit_seq))


class EnvState(NamedTuple):
    """B episodes on ctx.graph after `t` steps. N nodes, Np padded nodes, D devices."""

    ctx: EnvContext
    placement: np.ndarray  # int32[B, Np] device of every node (padding nodes: 0)
    schedule: np.ndarray  # float32[B, Np, SCHEDULE_CHANNELS] the current placement's schedule (features.SCHEDULE)
    runtime: np.ndarray  # float64[B] objective of the current placement, microseconds
    t: int  # steps taken
    best_runtime: np.ndarray  # float64[B] best objective seen in each episode, microseconds
    best_placement: np.ndarray  # int32[B, N] placement achieving best_runtime
    sim_calls: int  # simulator calls made by these episodes so far


class Observation(NamedTuple):
    """The policy's input at one step (a pytree: fixed shapes within a bucket)."""

    placement: np.ndarray  # int32[B, Np]
    schedule: np.ndarray  # float32[B, Np, SCHEDULE_CHANNELS] the simulated schedule (placeto.features.SCHEDULE)
    node: np.ndarray  # int32[] node to place now
    t: np.ndarray  # int32[] step index


def visit_sequence(graph: Graph, order: str, passes: int, seed: int = 0) -> np.ndarray:
    """int32[passes * N] nodes in visit order.

    Orders: "topo", "reverse_topo" or "random_fixed" (fixed by seed).
    """
    if order == "topo":
        base = graph.topo_order
    elif order == "reverse_topo":
        base = graph.topo_order[::-1]
    elif order == "random_fixed":
        base = np.random.default_rng([seed, graph.n_nodes]).permutation(graph.n_nodes)
    else:
        raise ValueError(f"unknown visit order {order!r}")
    return np.tile(np.asarray(base, dtype=np.int32), passes)


def make_context(graph: Graph, cluster: Cluster, config: PlacetoConfig) -> EnvContext:
    """Build the per-graph constants: visit sequence, padded arrays, reward scale."""
    seq = visit_sequence(graph, config.visit_order, config.passes, config.seed)
    arrays = graph_arrays(graph, cluster, seq, config.max_devices)
    bound = max(upper_bound(graph, cluster), 1e-9)  # the env simulates (a max-load graph's too): the simulator's U
    ctx = EnvContext(graph, cluster, arrays, seq, 1.0, bound, config.init_placement,
                     lower_bound(graph, cluster), time_unit=cost_unit(graph, cluster),
                     undo_worse=config.undo_worse)
    ctx = dataclasses.replace(ctx, reward_scale=objective.objective_scale(graph, cluster))
    if config.init_placement in LIST_STARTS:
        ctx = dataclasses.replace(ctx, start_placement=list_start(graph, cluster, config.init_placement))
    return ctx


LIST_STARTS = {"etf": ("etf",), "list": ("etf", "m-sct", "m-topo", "heft")}  # init_placement -> schedulers


def list_start(graph: Graph, cluster: Cluster, kind: str = "etf") -> np.ndarray:
    """int32[N] a start from what list schedulers know (memoised in graph.cache).

    The best (lowest objective, `placeto.objective`, the earlier in `LIST_STARTS[kind]` on ties) of the
    schedulers' placements, or the single device (`placeto.baselines.single`: every node on the device the graph
    alone runs fastest on) where that scores better. "etf": m-ETF alone (two simulator calls); "list": m-ETF,
    m-SCT, m-TOPO and HEFT (five).
    """
    key = ("placeto.list_start", cluster, kind)
    if key not in graph.cache:
        cands = np.stack([np.asarray(METHODS[m](graph, cluster), np.int32) for m in LIST_STARTS[kind]])
        best = cands[int(np.argmin(score_batch(graph, cands, cluster)))] if len(cands) > 1 else cands[0]
        graph.cache[key] = or_single(graph, cluster, best)
    return graph.cache[key].copy()


def objective_of(ctx: EnvContext, result: SimResult) -> float:
    """The objective (`placeto.objective.feasibility_first`), us."""
    return float(_objective(ctx, result.runtime, result.peak_memory, result.capacity))


def _objective(ctx: EnvContext, runtime, peak: np.ndarray, capacity: np.ndarray):
    """The objective of runtimes (us, scalar or [B]) with peak bytes [..., D] against capacity bytes [D]."""
    return objective.feasibility_first(runtime, peak, capacity, ctx.bound)


def _simulate_rows(ctx: EnvContext, placement: np.ndarray, rows: np.ndarray, runtime: np.ndarray,
                   schedule: np.ndarray) -> None:
    """Simulate `rows` of placement int32[B, Np], writing into runtime and schedule.

    runtime float64[B]: the objective; schedule float32[B, Np, SCHEDULE_CHANNELS]: the channels of
    placeto.features.SCHEDULE.
    """
    n = ctx.n_nodes

    def one(b: int) -> None:
        res = simulate(ctx.graph, placement[b, :n], ctx.cluster)
        runtime[b] = objective_of(ctx, res)
        r = max(res.runtime, 1e-9)
        peak = np.asarray(res.peak_memory) / np.maximum(res.capacity, 1.0)
        schedule[b, :n, 0] = res.start / r
        schedule[b, :n, 1] = res.end / r
        schedule[b, :n, 2] = peak[placement[b, :n]]
        schedule[b, :n, 3] = ctx.time_unit / r

    rows = rows.tolist()
    if len(rows) > 1 and SIM_THREADS > 1:  # the engine releases the GIL: episodes simulate in parallel
        list(_pool().map(one, rows))
    else:
        for b in rows:
            one(b)
    objective.record(runtime[rows])


SIM_THREADS = max(1, min(4, os.cpu_count() or 1))
_POOL: list[concurrent.futures.ThreadPoolExecutor] = []


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(concurrent.futures.ThreadPoolExecutor(SIM_THREADS, thread_name_prefix="placeto-env"))
    return _POOL[0]


def reset(ctx: EnvContext, seed: int | np.random.Generator, batch: int = 1,
          placement: np.ndarray | None = None) -> tuple[EnvState, Observation]:
    """Start `batch` episodes: from `placement` if given, else ctx.init_placement.

    `placement`: int[N] or int[B, N]. Deterministic in `seed`. One simulator call per episode.
    """
    n, d = ctx.n_nodes, ctx.cluster.n_devices
    rng = np.random.default_rng(seed)
    place = np.zeros((batch, ctx.n_pad), dtype=np.int32)
    if placement is None and ctx.start_placement is not None:
        placement = ctx.start_placement
    if placement is not None:
        place[:, :n] = np.broadcast_to(np.asarray(placement, dtype=np.int32), (batch, n))
    elif ctx.init_placement == "random":
        place[:, :n] = rng.integers(0, d, size=(batch, n), dtype=np.int32)
    if place.max(initial=0) >= d or place.min(initial=0) < 0:
        raise ValueError(f"initial placement uses a device outside 0..{d - 1}")
    runtime, schedule = np.empty(batch), np.zeros((*place.shape, SCHEDULE_CHANNELS), dtype=np.float32)
    _simulate_rows(ctx, place, np.arange(batch), runtime, schedule)
    state = EnvState(ctx, place, schedule, runtime, 0, runtime.copy(), place[:, :n].copy(), batch)
    return state, observe(state)


def observe(state: EnvState) -> Observation:
    """The policy input for the current step (node = the one to place now)."""
    seq = state.ctx.visit_seq
    node = seq[min(state.t, len(seq) - 1)]
    return Observation(state.placement, state.schedule, np.int32(node), np.int32(state.t))


def action_rewards(state: EnvState) -> np.ndarray:
    """float64[B, D] the reward `step` would give each device of the current node.

    In every episode. Simulates all D alternatives (B * D simulator calls in one batch); entry [b, action[b]]
    equals the reward `step(state, action)` returns, exactly. Used by the counterfactual gradient (see
    PlacetoConfig).
    """
    ctx = state.ctx
    n, d, b = ctx.n_nodes, ctx.cluster.n_devices, state.placement.shape[0]
    node = ctx.visit_seq[state.t]
    cand = np.repeat(state.placement[:, None, :n], d, axis=1)  # [B, D, N]
    cand[:, :, node] = np.arange(d, dtype=np.int32)
    res = simulate_batch(ctx.graph, cand.reshape(b * d, n), ctx.cluster, with_memory=True)
    runtime = _objective(ctx, res.runtime, res.peak_memory, np.asarray(ctx.cluster.memory, np.float64)).reshape(b, d)
    objective.record(runtime.reshape(-1))
    return (state.runtime[:, None] - runtime) / ctx.reward_scale


def step(state: EnvState, action: np.ndarray) -> tuple[EnvState, np.ndarray, bool]:
    """Put episode b's current node on device action[b].

    Returns (state, reward float64[B], done).

    Where reward = (objective before - after) / reward_scale. One simulator call per episode whose placement
    changed (an unchanged placement keeps its runtime and start times: reward exactly 0). With ctx.undo_worse a
    move that does not lower the objective is undone after its simulation (no further call): the episode goes on
    from the placement before it, with reward 0.
    """
    ctx = state.ctx
    if state.t >= ctx.n_steps:
        raise ValueError("step() after the episode ended")
    action = np.asarray(action, dtype=np.int32).reshape(-1)
    if action.min() < 0 or action.max() >= ctx.cluster.n_devices:
        raise ValueError(f"action outside 0..{ctx.cluster.n_devices - 1}")
    node = ctx.visit_seq[state.t]
    changed = np.flatnonzero(state.placement[:, node] != action)
    placement = state.placement.copy()
    placement[:, node] = action
    runtime, schedule = state.runtime.copy(), state.schedule.copy()
    _simulate_rows(ctx, placement, changed, runtime, schedule)
    if ctx.undo_worse:
        undo = runtime >= state.runtime
        placement[undo] = state.placement[undo]
        runtime[undo], schedule[undo] = state.runtime[undo], state.schedule[undo]
    reward = (state.runtime - runtime) / ctx.reward_scale
    better = runtime < state.best_runtime
    best_runtime, best_placement = state.best_runtime, state.best_placement
    if better.any():
        best_runtime = np.where(better, runtime, best_runtime)
        best_placement = best_placement.copy()
        best_placement[better] = placement[better, :ctx.n_nodes]
    t = state.t + 1
    new = EnvState(ctx, placement, schedule, runtime, t, best_runtime, best_placement,
                   state.sim_calls + len(changed))
    return new, reward, t == ctx.n_steps
