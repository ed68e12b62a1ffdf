"""A Placeto policy's episodes on one graph: training, placing, search.

A `Rollout`; training, placing and policy-guided search run them.

Every step of an episode simulates its placement anyway, so the best placement seen during the episode is
recorded, not only the last one; `sim_calls` is what that cost.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from placeto.features import GraphArrays
from placeto.methods.placeto import env as E
from placeto.methods.placeto.policy import Policy


class Rollout(NamedTuple):
    """B episodes of T steps on one graph (Np padded nodes, N real)."""

    placement: np.ndarray | None  # int8[T, B, Np] placement before each step (None unless recorded)
    schedule: np.ndarray | None  # float32[T, B, Np, C] the schedule before each step (env.Observation.schedule)
    nodes: np.ndarray  # int32[T] node placed at each step
    actions: np.ndarray  # int32[T, B]
    rewards: np.ndarray  # float64[T, B] (runtime before - after) / reward_scale
    action_rewards: np.ndarray | None  # float64[T, B, D] reward of every device at each step (None unless asked)
    initial_runtime: np.ndarray  # float64[B] microseconds (objective)
    final_runtime: np.ndarray  # float64[B] microseconds (objective)
    best_runtime: np.ndarray  # float64[B] best seen during each episode, microseconds (objective)
    best_placement: np.ndarray  # int32[B, N]
    final_placement: np.ndarray  # int32[B, N]
    sim_calls: int


def collect_rollout(policy: Policy, params, ctx: E.EnvContext, arrays: GraphArrays, key: jax.Array,
                    batch: int, seed: int, greedy: bool = False, record: bool = True,
                    placement: np.ndarray | None = None, counterfactual: bool | np.ndarray = False,
                    act: Callable[[E.Observation], Any] | None = None) -> Rollout:
    """Run `batch` episodes of the policy to the end on ctx's graph.

    Sampled, or greedy.

    Args:
      counterfactual: also simulate every device at every step (`env.action_rewards`, B * D calls per step), or
        at the steps where this bool[T] mask is set (the others' action_rewards stay 0).
      act: observation -> actions int32[B], instead of `policy.act(params, arrays, obs, key, greedy)` (the
        per-episode sampling of `placeto.methods.placeto.episodes`).

    With policy.embed_every = m > 1, steps t = 0, m, 2m, ... run the message passing and the steps between reuse its
    embeddings (`Policy.act_refresh`, `Policy.act_stale`).
    """
    state, obs = E.reset(ctx, seed, batch, placement)
    t_max, n_pad = ctx.n_steps, ctx.n_pad
    rec_place = np.empty((t_max, batch, n_pad), np.int8) if record else None
    rec_schedule = np.empty((t_max, *state.schedule.shape), np.float32) if record else None
    actions = np.empty((t_max, batch), np.int32)
    rewards = np.empty((t_max, batch))
    cf_mask = np.broadcast_to(np.asarray(counterfactual, bool), (t_max,))
    all_rewards = np.zeros((t_max, batch, ctx.cluster.n_devices)) if cf_mask.any() else None
    initial = state.runtime.copy()
    extra_calls, done, embeddings = 0, False, None
    while not done:
        t = state.t
        if record:
            rec_place[t], rec_schedule[t] = state.placement, state.schedule
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
    return Rollout(rec_place, rec_schedule, ctx.visit_seq.copy(), actions, rewards, all_rewards, initial,
                   state.runtime.copy(), state.best_runtime, state.best_placement,
                   state.placement[:, :ctx.n_nodes].copy(), state.sim_calls + extra_calls)
