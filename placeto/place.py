"""Running a policy on a graph: rollouts (shared with training), and zero-shot placement with a trained policy
(one greedy episode, or the best of K sampled episodes).

Every step of an episode simulates its placement anyway, so the best placement seen during the episode(s) is
returned, not only the last one; the simulator-call count is what that cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from placeto import env as E
from placeto.checkpoint_io import check_devices, read_blob, read_config, restore
from placeto.config import PlacetoConfig
from placeto.features import GraphArrays
from placeto.policy import Policy, make_policy
from simulator.cluster import Cluster
from simulator.graph import Graph


CHECKPOINT = "checkpoint.msgpack"  # in a run directory, beside config.json


class Rollout(NamedTuple):
    """B episodes of T steps on one graph (Np padded nodes, N real)."""

    placement: np.ndarray | None  # int8[T, B, Np] placement before each step (None unless recorded)
    start: np.ndarray | None  # float32[T, B, Np] normalised start times before each step
    nodes: np.ndarray  # int32[T] node placed at each step
    actions: np.ndarray  # int32[T, B]
    rewards: np.ndarray  # float64[T, B] (runtime before - after) / reward_scale
    action_rewards: np.ndarray | None  # float64[T, B, D] reward of every device at each step (None unless asked)
    initial_runtime: np.ndarray  # float64[B] microseconds (penalised)
    final_runtime: np.ndarray  # float64[B] microseconds (penalised)
    best_runtime: np.ndarray  # float64[B] best seen during each episode, microseconds (penalised)
    best_placement: np.ndarray  # int32[B, N]
    final_placement: np.ndarray  # int32[B, N]
    sim_calls: int


# ---- rollouts ------------------------------------------------------------------------------------------
def collect_rollout(policy: Policy, params, ctx: E.EnvContext, arrays: GraphArrays, key: jax.Array,
                    batch: int, seed: int, greedy: bool = False, record: bool = True,
                    placement: np.ndarray | None = None, counterfactual: bool | np.ndarray = False,
                    act: Callable[[E.Observation], Any] | None = None) -> Rollout:
    """Run `batch` episodes to the end with the policy (sampled, or greedy) on ctx's graph.

    counterfactual: also simulate every device at every step (`env.action_rewards`, B * D calls per step), or
    at the steps where this bool[T] mask is set (the others' action_rewards stay 0).
    act: observation -> actions int32[B], instead of `policy.act(params, arrays, obs, key, greedy)` (the
    per-episode sampling of `placeto.episodes`). With policy.embed_every = m > 1, steps t = 0, m, 2m, ... run the
    message passing and the steps between reuse its embeddings (`Policy.act_refresh`, `Policy.act_stale`).
    """
    state, obs = E.reset(ctx, seed, batch, placement)
    t_max, n_pad = ctx.n_steps, ctx.n_pad
    rec_place = np.empty((t_max, batch, n_pad), np.int8) if record else None
    rec_start = np.empty((t_max, batch, n_pad), np.float32) if record else None
    actions = np.empty((t_max, batch), np.int32)
    rewards = np.empty((t_max, batch))
    cf_mask = np.broadcast_to(np.asarray(counterfactual, bool), (t_max,))
    all_rewards = np.zeros((t_max, batch, ctx.cluster.n_devices)) if cf_mask.any() else None
    initial = state.runtime.copy()
    extra_calls, done, embeddings = 0, False, None
    while not done:
        t = state.t
        if record:
            rec_place[t], rec_start[t] = state.placement, state.start
        if cf_mask[t]:
            all_rewards[t] = E.action_rewards(state)
            extra_calls += all_rewards[t].size
        if act is not None:
            chosen = act(obs)
        elif policy.embed_every == 1:
            chosen = policy.act(params, arrays, obs, key, greedy)[0]
        elif t % policy.embed_every == 0:  # fresh message passing, kept for the next embed_every - 1 steps
            chosen, _, embeddings = policy.act_refresh(params, arrays, obs, key, greedy)
        else:
            chosen = policy.act_stale(params, arrays, obs, key, greedy, embeddings)[0]
        actions[t] = np.asarray(chosen)
        state, rewards[t], done = E.step(state, actions[t])
        obs = E.observe(state)
    return Rollout(rec_place, rec_start, ctx.visit_seq.copy(), actions, rewards, all_rewards, initial,
                   state.runtime.copy(), state.best_runtime, state.best_placement,
                   state.placement[:, :ctx.n_nodes].copy(), state.sim_calls + extra_calls)


# ---- placement -----------------------------------------------------------------------------------------
def load_params(checkpoint_dir: str | Path, arrays: GraphArrays) -> tuple[PlacetoConfig, Any]:
    """(config, params) of a run directory, for placement with a trained policy."""
    d = Path(checkpoint_dir)
    config = read_config(d)
    policy = make_policy(config)
    params = policy.init(jax.random.key(0), arrays)
    return config, restore(params, read_blob(d / CHECKPOINT)["params"], "params", d / CHECKPOINT)


class PlaceResult(NamedTuple):
    placement: np.ndarray  # int32[N] best placement seen
    runtime: float  # its memory-penalised runtime, microseconds
    final_placement: np.ndarray  # int32[N] where the (first) episode ended
    final_runtime: float  # microseconds (penalised)
    sim_calls: int


def place(graph: Graph, cluster: Cluster, checkpoint_dir: str | Path | None = None, samples: int = 0,
          seed: int = 0, initial: np.ndarray | None = None) -> PlaceResult:
    """Run the policy of `checkpoint_dir` (a run directory, a shipped policy's name, or None: the default shipped
    policy) on `graph`: one greedy episode, plus `samples` sampled episodes.

    Returns the best placement any of them visited (the greedy episode's end in `final_placement`). Episodes
    start from `initial` (int[N]) if given, else from the run's configured initial placement. A graph of more
    than `coarsen.MAX_POLICY_NODES` nodes (and no `initial`) is placed as groups and expanded
    (`placeto.coarsen`); the runtimes are then re-simulated on `graph`.
    """
    from placeto import coarsen
    from placeto.objective import score_batch
    from placeto.policies import resolve_checkpoint

    coarse = coarsen.for_policy(graph) if initial is None else coarsen.Coarse(graph, None, 0.0)
    if coarse.grouping is not None:
        res = place(coarse.graph, cluster, checkpoint_dir, samples, seed)
        best, final = coarse.expand(res.placement), coarse.expand(res.final_placement)
        penalty = read_config(resolve_checkpoint(checkpoint_dir)).memory_penalty_per_gb
        runtimes = score_batch(graph, np.stack([best, final]), cluster, penalty)
        return PlaceResult(best, float(runtimes[0]), final, float(runtimes[1]), res.sim_calls + 2)

    checkpoint_dir = resolve_checkpoint(checkpoint_dir)
    config = read_config(checkpoint_dir)
    check_devices(config, cluster.n_devices, checkpoint_dir)
    read_blob(Path(checkpoint_dir) / CHECKPOINT)  # a corrupt checkpoint fails before the model is built
    ctx = E.make_context(graph, cluster, config)
    arrays = jax.device_put(ctx.arrays)
    _, params = load_params(checkpoint_dir, arrays)
    policy = make_policy(config)
    key = jax.random.key(seed)
    rollouts = [collect_rollout(policy, params, ctx, arrays, key, 1, seed, greedy=True, record=False,
                                placement=initial)]
    batch = config.episodes_per_update
    for i in range(0, max(samples, 0), batch):
        rollouts.append(collect_rollout(policy, params, ctx, arrays, jax.random.fold_in(key, i),
                                        min(batch, samples - i), seed + i, record=False, placement=initial))
    best = min(((ro.best_runtime[b], ro.best_placement[b]) for ro in rollouts
                for b in range(len(ro.best_runtime))), key=lambda x: x[0])
    first = rollouts[0]
    return PlaceResult(best[1].astype(np.int32), float(best[0]), first.final_placement[0].astype(np.int32),
                       float(first.final_runtime[0]), sum(ro.sim_calls for ro in rollouts))


def place_graph(graph: Graph, cluster: Cluster, checkpoint_dir: str | Path, samples: int = 0,
                seed: int = 0) -> tuple[np.ndarray, int]:
    """(best placement int32[N], simulator calls) of the trained policy in `checkpoint_dir` on `graph`."""
    res = place(graph, cluster, checkpoint_dir, samples, seed)
    return res.placement, res.sim_calls

