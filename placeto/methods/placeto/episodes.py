"""Placeto rollouts episode by episode, the same for any split of a batch.

Any split of a batch across workers reproduces the batch exactly.

`collect_rollout` (placeto.methods.placeto.rollout) samples a whole batch with one key per step and runs the
policy on the B states at once; the numbers of row b then depend on B (XLA's matrix products round a row
differently in batches of different sizes) and on where b sits in the batch. Here every episode e of an update
is a function of (key, seed, e) alone:

    initial placement   ctx.init_placement; "random" draws episode e's devices from default_rng([seed, e]),
                        "single", "etf" and "list" start every episode from ctx.start_placement (device 0 if
                        None)
    action at step t    categorical(fold_in(fold_in(key, e), t), log pi(state of e)); the policy evaluates
                        one state at a time under `jax.lax.map`, the same compiled body for every episode
                        whatever the number of episodes in the call (checked bitwise in tests)

so `collect_episodes(..., lo, hi)` over any partition of [0, B) into ranges, concatenated in order by
`concat_rollouts`, is bit for bit `collect_episodes(..., 0, B)`. Training with `--workers N`
(placeto.rollouts.distributed) uses this sampling for every N >= 1; a run without `--workers` keeps
`collect_rollout` (the sampling the shipped policies were trained with), so its checkpoint differs from a
`--workers` run's.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from placeto.methods.placeto import env as E
from placeto.features import GraphArrays
from placeto.methods.placeto.rollout import Rollout, collect_rollout
from placeto.methods.placeto.policy import Policy, log_probs

def episode_act(policy: Policy):
    """Jitted actions int32[B], one state at a time; memoised per network.

    (params, arrays, obs, keys: key[B]) -> actions.

    Episode b's action is categorical(fold_in(keys[b], obs.t), log pi(state b)).
    """
    return _episode_act(policy.net)


@functools.lru_cache(maxsize=None)
def _episode_act(net):
    @jax.jit
    def act(params, arrays: GraphArrays, obs: E.Observation, keys: jax.Array) -> jax.Array:
        node, t = jnp.asarray(obs.node, jnp.int32)[None], jnp.asarray(obs.t, jnp.int32)[None]

        def one(row):
            placement, schedule, key = row  # int32[Np], float32[Np, C], key
            logp = log_probs(net, params, arrays, placement[None], schedule[None], node, t)[0]
            return jax.random.categorical(jax.random.fold_in(key, obs.t), logp).astype(jnp.int32)

        return jax.lax.map(one, (obs.placement, obs.schedule, keys))

    return act


@functools.lru_cache(maxsize=None)
def _episode_act_cached(net):
    """(refresh, stale): `_episode_act` for embed_every > 1, one state at a time.

    refresh also returns each episode's embeddings float32[B, Np, 1, H]; stale takes them.
    """

    def one_logp(params, arrays, obs, row, h=None):
        node, t = jnp.asarray(obs.node, jnp.int32)[None], jnp.asarray(obs.t, jnp.int32)[None]
        placement, schedule = row
        if h is None:
            h = net.apply(params, arrays, placement[None], schedule[None], node, t, return_embeddings=True)
        logits = net.apply(params, arrays, placement[None], schedule[None], node, t, embeddings=h)
        return jax.nn.log_softmax(logits, axis=-1)[0], h

    def sample(logp, key, obs):
        return jax.random.categorical(jax.random.fold_in(key, obs.t), logp).astype(jnp.int32)

    @jax.jit
    def refresh(params, arrays: GraphArrays, obs: E.Observation, keys: jax.Array):
        def one(row):
            placement, schedule, key = row
            logp, h = one_logp(params, arrays, obs, (placement, schedule))
            return sample(logp, key, obs), h

        return jax.lax.map(one, (obs.placement, obs.schedule, keys))

    @jax.jit
    def stale(params, arrays: GraphArrays, obs: E.Observation, keys: jax.Array, embeddings: jax.Array):
        def one(row):
            placement, schedule, key, h = row
            return sample(one_logp(params, arrays, obs, (placement, schedule), h)[0], key, obs)

        return jax.lax.map(one, (obs.placement, obs.schedule, keys, embeddings))

    return refresh, stale


def episode_act_fn(policy: Policy, params, arrays: GraphArrays, keys: jax.Array):
    """observation -> actions int32[B] of the episodes whose keys are `keys`.

    See the module docstring. With policy.embed_every = m > 1 it keeps each episode's embeddings of the last step t
    with t % m == 0.
    """
    if policy.embed_every == 1:
        act = episode_act(policy)
        return lambda obs: act(params, arrays, obs, keys)
    refresh, stale = _episode_act_cached(policy.net)
    cache = {}

    def act_fn(obs):
        if int(obs.t) % policy.embed_every == 0:
            actions, cache["h"] = refresh(params, arrays, obs, keys)
            return actions
        return stale(params, arrays, obs, keys, cache["h"])

    return act_fn


def episode_keys(key: jax.Array, lo: int, hi: int) -> jax.Array:
    """key[hi - lo]: fold_in(key, e) for episodes e in [lo, hi)."""
    return jax.vmap(lambda e: jax.random.fold_in(key, e))(jnp.arange(lo, hi, dtype=jnp.uint32))


def initial_placements(ctx: E.EnvContext, seed: int, lo: int, hi: int) -> np.ndarray:
    """int32[hi - lo, N] the starting placements of episodes [lo, hi).

    See the module docstring.
    """
    n, d = ctx.n_nodes, ctx.cluster.n_devices
    if ctx.init_placement != "random":
        start = np.zeros(n, np.int32) if ctx.start_placement is None else ctx.start_placement
        return np.broadcast_to(np.asarray(start, np.int32), (hi - lo, n)).copy()
    return np.stack([np.random.default_rng([seed, e]).integers(0, d, size=n, dtype=np.int32)
                     for e in range(lo, hi)]).reshape(hi - lo, n)


def collect_episodes(policy: Policy, params, ctx: E.EnvContext, arrays: GraphArrays, key: jax.Array, seed: int,
                     lo: int, hi: int, counterfactual: bool = False) -> Rollout:
    """Episodes [lo, hi) of the update of sampling key `key` and seed `seed`, recorded.

    hi > lo.
    """
    if not 0 <= lo < hi:
        raise ValueError(f"collect_episodes: empty or negative range [{lo}, {hi})")
    act = episode_act_fn(policy, params, arrays, episode_keys(key, lo, hi))
    return collect_rollout(policy, params, ctx, arrays, key, hi - lo, seed,
                           placement=initial_placements(ctx, seed, lo, hi), counterfactual=counterfactual, act=act)


def concat_rollouts(parts: Sequence[Rollout]) -> Rollout:
    """One Rollout of the episodes of `parts` (same graph, in order).

    [T, B] arrays are joined on B, [B] arrays on 0.
    """
    if len(parts) == 1:
        return parts[0]

    def join(name: str, axis: int):
        values = [getattr(p, name) for p in parts]
        return None if values[0] is None else np.concatenate(values, axis=axis)

    return Rollout(join("placement", 1), join("schedule", 1), parts[0].nodes, join("actions", 1), join("rewards", 1),
                   join("action_rewards", 1), join("initial_runtime", 0), join("final_runtime", 0),
                   join("best_runtime", 0), join("best_placement", 0), join("final_placement", 0),
                   sum(p.sim_calls for p in parts))
