"""The Placeto policy gradient: returns-to-go, the per-step baseline, chunked jitted gradients, and the
learning-rate and entropy schedules (placeto.methods.placeto.train runs the loop around them).

    returns_to_go       G[t] = sum_k gamma^k r[t + k] of every episode
    baseline_update     the per-step baseline: the mean return-to-go at each step over the last `window` episodes
                        of the same graph (a ring buffer, the current batch included)
    policy_gradient     re-evaluates recorded states in fixed-size chunks (one jitted function per padding bucket),
                        optionally on a random subset of steps, and sums the gradients
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from placeto.methods.placeto import env as E
from placeto.methods.placeto.config import PlacetoConfig
from placeto.features import GraphArrays, bucket
from placeto.methods.placeto.rollout import Rollout
from placeto.methods.placeto.policy import TRACES, Policy, log_probs


# ---- advantages ----------------------------------------------------------------------------------------
def returns_to_go(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """float64[T, B]: G[t] = sum_k gamma^k r[t + k]."""
    g = np.zeros_like(rewards)
    acc = np.zeros(rewards.shape[1])
    for t in range(rewards.shape[0] - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        g[t] = acc
    return g


class Baseline(NamedTuple):
    """Recent returns-to-go of one graph: a ring buffer of `window` episodes."""

    returns: np.ndarray  # float32[W, T]
    count: np.ndarray  # int64[] episodes ever added


def baseline_update(base: Baseline | None, returns: np.ndarray, window: int) -> tuple[Baseline, np.ndarray]:
    """Add the batch's returns (float64[T, B]); return (new buffer, baseline float64[T] = mean of the window)."""
    t_len, b = returns.shape
    if base is None or base.returns.shape != (window, t_len):
        base = Baseline(np.zeros((window, t_len), np.float32), np.zeros((), np.int64))
    buf = base.returns.copy()
    count = int(base.count)
    for j in range(b):
        buf[(count + j) % window] = returns[:, j]
    count += b
    return Baseline(buf, np.asarray(count, np.int64)), buf[:min(count, window)].astype(np.float64).mean(0)


# ---- gradient --------------------------------------------------------------------------------------------
class Chunk(NamedTuple):
    """C recorded steps of B episodes (C fixed per bucket; padding steps have weight 0)."""

    placement: jax.Array  # int8[C, B, Np]
    start: jax.Array  # float32[C, B, Np]
    nodes: jax.Array  # int32[C]
    ts: jax.Array  # int32[C]
    actions: jax.Array  # int32[C, B]
    advantages: jax.Array  # float32[C, B]
    action_advantages: jax.Array  # float32[C, B, Dm] centred reward of every device (counterfactual; else 0)
    weight: jax.Array  # float32[C] loss weight of each step (0 on padding)


def chunk_loss(net, params, arrays: GraphArrays, chunk: Chunk, ent_coef):
    """-(weighted advantage * log pi(action)) - weighted sum_d pi(d) * action advantage(d) - ent_coef * weighted
    entropy, and (pg term, entropy)."""
    c, b, n_pad = chunk.placement.shape
    rep = lambda x: jnp.repeat(x, b)  # noqa: E731  per-step scalars -> per-state
    logp = log_probs(net, params, arrays, chunk.placement.reshape(c * b, n_pad).astype(jnp.int32),
                     chunk.start.reshape(c * b, n_pad), rep(chunk.nodes), rep(chunk.ts))
    logp = logp.reshape(c, b, -1)
    taken = jnp.take_along_axis(logp, chunk.actions[..., None], axis=-1)[..., 0]
    entropy = -(jnp.exp(logp) * logp).sum(-1)
    w = chunk.weight[:, None]
    expected = (jnp.exp(logp) * chunk.action_advantages).sum(-1)  # [C, B] exact immediate term
    pg = -(w * (chunk.advantages * taken + expected)).sum()
    ent = (w * entropy).sum()
    return pg - ent_coef * ent, (pg, ent)


@functools.lru_cache(maxsize=None)
def make_grad_fn(policy: Policy):
    """Jitted (params, arrays, chunk, ent_coef) -> (grads, (loss, pg, entropy)); one trace per bucket.

    Memoised per policy (policies are memoised per model config), so repeated `train` calls reuse compilations.
    """

    @jax.jit
    def grad_fn(params, arrays, chunk, ent_coef):
        TRACES["grad"] += 1
        (loss, (pg, ent)), grads = jax.value_and_grad(
            lambda p: chunk_loss(policy.net, p, arrays, chunk, ent_coef), has_aux=True)(params)
        return grads, (loss, pg, ent)

    return grad_fn


def policy_gradient(grad_fn, params, ctx: E.EnvContext, arrays: GraphArrays, ro: Rollout, adv: np.ndarray,
                    action_adv: np.ndarray, config: PlacetoConfig, rng: np.random.Generator, ent_coef: float):
    """Summed gradient over the chosen steps (all, or `grad_steps` random ones) and (loss, pg, entropy).

    adv: float64[T, B] advantage of the sampled actions; action_adv: float[T, B, Dm] of every device.
    """
    t_len, b = adv.shape
    steps = np.arange(t_len)
    if 0 < config.grad_steps < t_len:
        steps = np.sort(rng.choice(t_len, config.grad_steps, replace=False))
    # Chunk length: fixed per (bucket, step count bucket) so a bucket compiles once or twice, not per graph.
    n_chunk = min(max(1, config.grad_chunk_nodes // (b * ctx.n_pad)), bucket(len(steps), minimum=1))
    weight = 1.0 / (len(steps) * b)  # mean over sampled (step, episode) pairs: unbiased for the full mean
    grads, totals = None, np.zeros(3)
    for lo in range(0, len(steps), n_chunk):
        idx = steps[lo:lo + n_chunk]
        pad = n_chunk - len(idx)
        full = np.concatenate([idx, np.zeros(pad, idx.dtype)])
        w = np.concatenate([np.full(len(idx), weight), np.zeros(pad)]).astype(np.float32)
        chunk = Chunk(ro.placement[full], ro.start[full], ro.nodes[full], full.astype(np.int32),
                      ro.actions[full], adv[full].astype(np.float32), action_adv[full].astype(np.float32), w)
        g, aux = grad_fn(params, arrays, chunk, np.float32(ent_coef))
        grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
        totals += np.asarray(jax.device_get(aux), dtype=np.float64)
    return grads, totals


def make_optimizer(config: PlacetoConfig) -> optax.GradientTransformation:
    """`clipped_adam` of the config's gradient clip."""
    return clipped_adam(config.grad_clip)


def clipped_adam(grad_clip: float) -> optax.GradientTransformation:
    """Clip by global norm, then Adam's scaling; the learning rate (`learning_rate`) is applied by the update
    (placeto.methods.placeto.train), so one compiled update serves every run length."""
    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.scale_by_adam())


def learning_rate(config: PlacetoConfig, update: int) -> float:
    """Exponential decay from lr (update 0) to lr_end (the last update of the episode budget)."""
    n_updates = max(1, math.ceil(config.episodes / config.episodes_per_update) - 1)
    return config.lr * (config.lr_end / config.lr) ** min(1.0, update / n_updates)


def entropy_coef(config: PlacetoConfig, episode: int) -> float:
    """Linear decay from `entropy` to `entropy_end` over entropy_decay_fraction of the budget."""
    span = max(1.0, config.entropy_decay_fraction * config.episodes)
    frac = min(1.0, episode / span)
    return config.entropy + (config.entropy_end - config.entropy) * frac
