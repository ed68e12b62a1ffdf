"""The Placeto policy gradient: returns, baseline, gradients, schedules.

Returns-to-go, the per-step baseline, chunked jitted gradients, and the learning-rate and entropy schedules
(placeto.methods.placeto.train runs the loop around them).

    returns_to_go       G[t] = sum_k gamma^k r[t + k] of every episode
    baseline_update     the per-step baseline: the mean return-to-go at each step over the last `window` episodes
                        of the same graph (a ring buffer, the current batch included)
    policy_gradient     re-evaluates recorded states in fixed-size chunks (one jitted function per padding
                        bucket), optionally on a random subset of steps, and sums the gradients
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
    """Add the batch's returns float64[T, B]: (new buffer, baseline float64[T]).

    The baseline is the mean of the window.
    """
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
    """C recorded steps of B episodes (C fixed per bucket).

    Padding steps have weight 0.
    """

    placement: jax.Array  # int8[C, B, Np]
    schedule: jax.Array  # float32[C, B, Np, SCHEDULE_CHANNELS]
    nodes: jax.Array  # int32[C]
    ts: jax.Array  # int32[C]
    actions: jax.Array  # int32[C, B]
    advantages: jax.Array  # float32[C, B]
    action_advantages: jax.Array  # float32[C, B, Dm] centred reward of every device (counterfactual; else 0)
    weight: jax.Array  # float32[C] loss weight of each step (0 on padding)


def _immediate(logp, action_advantages, best: bool):
    """The counterfactual term per state.

    sum_d pi(d) * advantage(d) ("expected"), or, with best, sum_d target(d) * log pi(d): minus the cross-entropy
    against the best immediate device (action_advantages then holds that target distribution).
    """
    if best:
        return (logp * action_advantages).sum(-1)
    return (jnp.exp(logp) * action_advantages).sum(-1)


def chunk_loss(net, params, arrays: GraphArrays, chunk: Chunk, ent_coef, best: bool = False):
    """The loss of one chunk, and (pg term, entropy).

    loss = -(weighted advantage * log pi(action)) - weighted sum_d pi(d) * action advantage(d) - ent_coef *
    weighted entropy. best: the second term is the cross-entropy against chunk.action_advantages as a target
    distribution (`_immediate`).
    """
    c, b, n_pad = chunk.placement.shape
    rep = lambda x: jnp.repeat(x, b)  # noqa: E731  per-step scalars -> per-state
    logp = log_probs(net, params, arrays, chunk.placement.reshape(c * b, n_pad).astype(jnp.int32),
                     chunk.schedule.reshape(c * b, n_pad, -1), rep(chunk.nodes), rep(chunk.ts))
    return _loss(logp.reshape(c, b, -1), chunk, ent_coef, best)


def _loss(logp, chunk, ent_coef, best: bool):
    """The loss of `chunk_loss` from the chunk's log-probabilities float32[..., B, Dm].

    A Chunk's are [C, B, Dm], a BlockChunk's [R, m, B, Dm]; chunk.weight has the leading axes.
    """
    taken = jnp.take_along_axis(logp, chunk.actions[..., None], axis=-1)[..., 0]
    entropy = -(jnp.exp(logp) * logp).sum(-1)
    w = chunk.weight[..., None]
    expected = _immediate(logp, chunk.action_advantages, best)  # [..., B] exact immediate term
    pg = -(w * (chunk.advantages * taken + expected)).sum()
    ent = (w * entropy).sum()
    return pg - ent_coef * ent, (pg, ent)


@functools.lru_cache(maxsize=None)
def make_grad_fn(policy: Policy, counterfactual_loss: str = "expected"):
    """Jitted (params, arrays, chunk, ent_coef) -> (grads, (loss, pg, entropy)).

    One trace per bucket. Memoised per policy (policies are memoised per model config), so repeated `train` calls
    reuse compilations. A policy with embed_every > 1 gets the loss of BlockChunks (`block_chunk_loss`, for
    `block_policy_gradient`). counterfactual_loss: PlacetoConfig.counterfactual_loss ("best": the cross-entropy of
    `_immediate`).
    """
    best = counterfactual_loss in ("best", "improving")
    loss, trace = (block_chunk_loss, "grad_blocks") if policy.embed_every > 1 else (chunk_loss, "grad")

    @jax.jit
    def grad_fn(params, arrays, chunk, ent_coef):
        TRACES[trace] += 1
        (value, (pg, ent)), grads = jax.value_and_grad(
            lambda p: loss(policy.net, p, arrays, chunk, ent_coef, best), has_aux=True)(params)
        return grads, (value, pg, ent)

    return grad_fn


class BlockChunk(NamedTuple):
    """R blocks of m consecutive recorded steps of B episodes (embed_every = m).

    The message passing of a block runs on its first step's state, the head on every step's placement (padding
    steps have weight 0).
    """

    placement: jax.Array  # int8[R, m, B, Np] placement before each step
    schedule: jax.Array  # float32[R, m, B, Np, SCHEDULE_CHANNELS] the schedule before each step
    nodes: jax.Array  # int32[R, m]
    ts: jax.Array  # int32[R, m]
    actions: jax.Array  # int32[R, m, B]
    advantages: jax.Array  # float32[R, m, B]
    action_advantages: jax.Array  # float32[R, m, B, Dm]
    weight: jax.Array  # float32[R, m]


def block_log_probs(net, params, arrays: GraphArrays, chunk: BlockChunk):
    """float32[R, m, B, Dm] log-probabilities of the policy with `embed_every` = m.

    Exactly as the rollout (placeto.methods.placeto.rollout.collect_rollout) evaluated them: embeddings of each
    block's first state, head on each step's.
    """
    r, m, b, n_pad = chunk.placement.shape
    first = chunk.placement[:, 0].reshape(r * b, n_pad).astype(jnp.int32)
    h = net.apply(params, arrays, first, chunk.schedule[:, 0].reshape(r * b, n_pad, -1),
                  jnp.repeat(chunk.nodes[:, 0], b), jnp.repeat(chunk.ts[:, 0], b),
                  return_embeddings=True)  # [Np, R * B, H]
    h = jnp.broadcast_to(h.reshape(n_pad, r, 1, b, -1), (n_pad, r, m, b, h.shape[-1])).reshape(n_pad, r * m * b, -1)
    rep = lambda x: jnp.repeat(x.reshape(-1), b)  # noqa: E731  per-step scalars -> per-state
    logits = net.apply(params, arrays, chunk.placement.reshape(r * m * b, n_pad).astype(jnp.int32),
                       chunk.schedule.reshape(r * m * b, n_pad, -1), rep(chunk.nodes), rep(chunk.ts), embeddings=h)
    return jax.nn.log_softmax(logits, axis=-1).reshape(r, m, b, -1)


def block_chunk_loss(net, params, arrays: GraphArrays, chunk: BlockChunk, ent_coef, best: bool = False):
    """`chunk_loss` of a BlockChunk."""
    return _loss(block_log_probs(net, params, arrays, chunk), chunk, ent_coef, best)


def choose_steps(config: PlacetoConfig, t_len: int, rng: np.random.Generator) -> np.ndarray:
    """The gradient's sample of steps, drawn as `policy_gradient` draws it.

    Sorted step indices (embed_every = 1; all, or `grad_steps` random ones) or block indices (embed_every = m > 1,
    see `block_policy_gradient`).
    """
    if config.embed_every > 1:
        m = config.embed_every
        n_blocks = -(-t_len // m)
        k = n_blocks if config.grad_steps == 0 else min(n_blocks, -(-config.grad_steps // m))
        return np.sort(rng.choice(n_blocks, k, replace=False)) if k < n_blocks else np.arange(n_blocks)
    if 0 < config.grad_steps < t_len:
        return np.sort(rng.choice(t_len, config.grad_steps, replace=False))
    return np.arange(t_len)


def steps_of(config: PlacetoConfig, selection: np.ndarray, t_len: int) -> np.ndarray:
    """The step indices a `choose_steps` selection puts into the gradient."""
    if config.embed_every == 1:
        return np.asarray(selection)
    m = config.embed_every
    steps = (np.asarray(selection)[:, None] * m + np.arange(m)[None, :]).reshape(-1)
    return steps[steps < t_len]


def block_policy_gradient(grad_fn, params, ctx: E.EnvContext, arrays: GraphArrays, ro: Rollout, adv: np.ndarray,
                          action_adv: np.ndarray, config: PlacetoConfig, rng: np.random.Generator, ent_coef: float,
                          selection: np.ndarray | None = None):
    """`policy_gradient` for embed_every = m > 1: sampled blocks of m steps.

    K of the ceil(T / m) blocks of m steps sampled uniformly (K = ceil(grad_steps / m), or all), every step of a
    sampled block in the loss with weight NB / (K T B), an unbiased estimate of the mean over all T steps and B
    episodes; one message passing per block and episode.
    """
    m = config.embed_every
    t_len, b = adv.shape
    n_blocks = -(-t_len // m)
    blocks = choose_steps(config, t_len, rng) if selection is None else np.asarray(selection)
    k = len(blocks)
    n_chunk = min(max(1, config.grad_chunk_nodes // (b * ctx.n_pad * m)), bucket(k, minimum=1))
    weight = n_blocks / (k * t_len * b)
    grads, totals = None, np.zeros(3)
    for lo in range(0, k, n_chunk):
        idx = np.zeros((n_chunk, m), np.int64)
        w = np.zeros((n_chunk, m), np.float32)
        for i, blk in enumerate(blocks[lo:lo + n_chunk]):
            steps = np.arange(blk * m, min(blk * m + m, t_len))
            idx[i, :len(steps)], w[i, :len(steps)] = steps, weight
            idx[i, len(steps):] = steps[0]
        chunk = BlockChunk(ro.placement[idx], ro.schedule[idx], ro.nodes[idx], idx.astype(np.int32),
                           ro.actions[idx], adv[idx].astype(np.float32), action_adv[idx].astype(np.float32), w)
        g, aux = grad_fn(params, arrays, chunk, np.float32(ent_coef))
        grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
        totals += np.asarray(jax.device_get(aux), dtype=np.float64)
    return grads, totals


def policy_gradient(grad_fn, params, ctx: E.EnvContext, arrays: GraphArrays, ro: Rollout, adv: np.ndarray,
                    action_adv: np.ndarray, config: PlacetoConfig, rng: np.random.Generator, ent_coef: float,
                    selection: np.ndarray | None = None):
    """Summed gradient over the chosen steps, and (loss, pg, entropy).

    The steps: all, or `grad_steps` random ones. With embed_every > 1 the steps are sampled in blocks
    (`block_policy_gradient`; grad_fn from `make_grad_fn`).

    Args:
      adv: float64[T, B] advantage of the sampled actions.
      action_adv: float[T, B, Dm] advantage of every device.
      selection: the sample, drawn beforehand with `choose_steps` (the same draw from the same rng).
    """
    if config.embed_every > 1:
        return block_policy_gradient(grad_fn, params, ctx, arrays, ro, adv, action_adv, config, rng, ent_coef,
                                     selection)
    t_len, b = adv.shape
    steps = choose_steps(config, t_len, rng) if selection is None else np.asarray(selection)
    # Chunk length: fixed per (bucket, step count bucket) so a bucket compiles once or twice, not per graph.
    n_chunk = min(max(1, config.grad_chunk_nodes // (b * ctx.n_pad)), bucket(len(steps), minimum=1))
    weight = 1.0 / (len(steps) * b)  # mean over sampled (step, episode) pairs: unbiased for the full mean
    grads, totals = None, np.zeros(3)
    for lo in range(0, len(steps), n_chunk):
        idx = steps[lo:lo + n_chunk]
        pad = n_chunk - len(idx)
        full = np.concatenate([idx, np.zeros(pad, idx.dtype)])
        w = np.concatenate([np.full(len(idx), weight), np.zeros(pad)]).astype(np.float32)
        chunk = Chunk(ro.placement[full], ro.schedule[full], ro.nodes[full], full.astype(np.int32),
                      ro.actions[full], adv[full].astype(np.float32), action_adv[full].astype(np.float32), w)
        g, aux = grad_fn(params, arrays, chunk, np.float32(ent_coef))
        grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
        totals += np.asarray(jax.device_get(aux), dtype=np.float64)
    return grads, totals


def make_optimizer(config: PlacetoConfig) -> optax.GradientTransformation:
    """`clipped_adam` of the config's gradient clip."""
    return clipped_adam(config.grad_clip)


def clipped_adam(grad_clip: float) -> optax.GradientTransformation:
    """Clip by global norm, then Adam's scaling; the update applies the learning rate.

    The update (placeto.methods.placeto.train) applies `learning_rate`, so one compiled update serves every run
    length.
    """
    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.scale_by_adam())


def learning_rate(config: PlacetoConfig, update: int) -> float:
    """Exponential decay from lr (update 0) to lr_end (the budget's last update)."""
    n_updates = max(1, math.ceil(config.episodes / config.episodes_per_update) - 1)
    return config.lr * (config.lr_end / config.lr) ** min(1.0, update / n_updates)


def entropy_coef(config: PlacetoConfig, episode: int) -> float:
    """Linear decay from `entropy` to `entropy_end`, then constant.

    Over entropy_decay_fraction of the budget.
    """
    span = max(1.0, config.entropy_decay_fraction * config.episodes)
    frac = min(1.0, episode / span)
    return config.entropy + (config.entropy_end - config.entropy) * frac
