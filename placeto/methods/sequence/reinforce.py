"""REINFORCE on whole placements, moving-average baseline.

As in seeds 000/001/002.

One step on a (graph, cluster):

    sample      K placements from the policy in one jitted call (`Sampled`: the method's actions, e.g. devices
                of items, or groups of ops and devices of groups, and the op placement they imply)
    score       K simulations in one batch, placeto.objective.score_batch_parts (counted by the meter)
    reward      -sqrt(objective / single-device runtime), the feasibility-first objective (placeto.objective):
                the runtime of a placement that fits, at least twice a bound on every runtime for one that does
                not (the seeds' -sqrt(runtime) and large fixed out-of-memory penalty; dividing by the
                single-device runtime only rescales it so that settings mean the same on every graph)
    advantage   reward - b, with b the moving average of the batch mean rewards so far (the first batch's mean
                starts it): b <- decay * b + (1 - decay) * mean(reward), after the advantages are taken
    update      one Adam step on -mean_k(advantage_k * log p(actions_k)) - entropy * mean entropy, jitted; the
                method's `Scored.logp` is a mean over its decisions, so the step size does not grow with N

Everything is a function of the key: `fold_in(key(seed), update)` in the training loop makes a resumed run
continue exactly as an uninterrupted one.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from placeto.objective import Scores, objective_scale, score_batch_parts
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


class Sampled(NamedTuple):
    """K placements drawn by a policy."""

    actions: Any  # the method's decisions (a pytree of int32[K, ...]), what `Scored` re-scores
    placement: jax.Array  # int32[K, Np] device of every (padded) op


class Scored(NamedTuple):
    """A policy's log-probability of given actions."""

    logp: jax.Array  # float32[K] mean log-probability per decision of each placement, nats
    entropy: jax.Array  # float32[] mean entropy per decision, nats


class Baseline(NamedTuple):
    """The moving-average baseline."""

    value: float  # mean reward estimate (dimensionless: minus the root of a runtime ratio)
    count: int  # batches seen; 0: not started


class StepResult(NamedTuple):
    """What one REINFORCE step did.

    Objectives in microseconds (placeto.objective: feasibility first).
    """

    params: Any
    opt_state: Any
    baseline: Baseline
    loss: float
    entropy: float  # mean per-decision entropy, nats
    mean_reward: float
    mean_objective: float
    best_objective: float  # best of the batch
    best_placement: np.ndarray  # int32[N] its placement
    oom_fraction: float  # share of the batch over some device's memory


def rewards(scores: Scores, scale: float) -> np.ndarray:
    """float64[K] rewards of a scored batch: -sqrt(objective / scale).

    Where scale is the single-device runtime, us.
    """
    return -np.sqrt(scores.objective / scale)


def baseline_step(base: Baseline, reward: np.ndarray, decay: float) -> tuple[np.ndarray, Baseline]:
    """(advantages float32[K], the baseline after this batch).

    advantage = reward - b; see the module docstring.
    """
    mean = float(np.mean(reward))
    b = mean if base.count == 0 else base.value
    adv = (np.asarray(reward, np.float64) - b).astype(np.float32)
    return adv, Baseline(decay * b + (1.0 - decay) * mean, base.count + 1)


@functools.lru_cache(maxsize=None)
def make_optimizer(grad_clip: float, lr: float) -> optax.GradientTransformation:
    """Clipped Adam; one object per (clip, lr).

    So that the jitted update compiles once for equal settings.
    """
    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.adam(lr))


@functools.partial(jax.jit, static_argnames=("net", "batch", "greedy"))
def sample(net, params, inputs, key: jax.Array, batch: int, greedy: bool = False) -> Sampled:
    """`batch` placements from the policy.

    If `greedy`: the argmax one, repeated.
    """
    return net.apply(params, inputs, key, batch, greedy, method="sample")


def loss_fn(net, params, inputs, actions, adv: jax.Array, entropy_coef: jax.Array):
    """(REINFORCE loss, entropy); adv float32[K].

    loss = -mean(adv * logp) - entropy_coef * entropy.
    """
    scored = net.apply(params, inputs, actions)
    return -(adv * scored.logp).mean() - entropy_coef * scored.entropy, scored.entropy


@functools.partial(jax.jit, static_argnames=("net", "optimizer"))
def update(net, optimizer, params, opt_state, inputs, actions, adv: jax.Array, entropy_coef: jax.Array):
    """One Adam step on `loss_fn`: (params, opt_state, loss, entropy)."""
    (loss, ent), grads = jax.value_and_grad(lambda p: loss_fn(net, p, inputs, actions, adv, entropy_coef),
                                            has_aux=True)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, ent


class Drawn(NamedTuple):
    """K placements sampled and scored: a step's data."""

    sampled: Sampled  # the method's actions and the op placements int32[K, Np] (host arrays)
    scores: Scores  # their objective, runtime and over-capacity, each float64[K]


def draw(net, config, params, inputs, graph: Graph, cluster: Cluster, key: jax.Array) -> Drawn:
    """A batch of placements from one key, scored; metered.

    config.samples_per_update placements (`sample`).
    """
    sampled = jax.device_get(sample(net, params, inputs, key, config.samples_per_update))
    return Drawn(sampled, score_batch_parts(graph, np.asarray(sampled.placement)[:, :graph.n_nodes], cluster))


def draw_range(net, config, params, inputs, graph: Graph, cluster: Cluster, key: jax.Array, lo: int,
               hi: int) -> Drawn:
    """Samples [lo, hi) of a batch, one key each, scored; metered.

    Sample i is the policy's one placement from fold_in(key, i), computed alone (`jax.lax.map`), so the batch is the
    same however [0, K) is split into ranges (placeto.rollouts.distributed); not `draw`'s batch for the same key.
    """
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(lo, hi, dtype=jnp.uint32))
    sampled = jax.device_get(_sample_each(net, params, inputs, keys))
    return Drawn(sampled, score_batch_parts(graph, np.asarray(sampled.placement)[:, :graph.n_nodes], cluster))


@functools.partial(jax.jit, static_argnames=("net",))
def _sample_each(net, params, inputs, keys: jax.Array) -> Sampled:
    """One placement per key: Sampled with leaves [K, ...]."""
    one = lambda key: net.apply(params, inputs, key, 1, False, method="sample")  # noqa: E731  leaves [1, ...]
    return jax.tree.map(lambda x: x[:, 0], jax.lax.map(one, keys))


def concat_drawn(parts) -> Drawn:
    """The samples of `parts` as one Drawn.

    `parts`: ranges of one batch, in order.
    """
    join = lambda *xs: np.concatenate(xs)  # noqa: E731
    return Drawn(jax.tree.map(join, *[p.sampled for p in parts]), Scores(*map(join, *[p.scores for p in parts])))


def reinforce_step(net, config, params, opt_state, baseline: Baseline, inputs, graph: Graph, cluster: Cluster,
                   key: jax.Array, drawn: Drawn | None = None) -> StepResult:
    """One REINFORCE step: sample, score, update.

    Samples config.samples_per_update placements (or takes `drawn`: `draw_range`'s); see the module docstring.
    """
    optimizer = make_optimizer(float(config.grad_clip), float(config.lr))
    drawn = drawn if drawn is not None else draw(net, config, params, inputs, graph, cluster, key)
    placements, scores = np.asarray(drawn.sampled.placement)[:, :graph.n_nodes], drawn.scores
    reward = rewards(scores, objective_scale(graph, cluster))
    adv, baseline = baseline_step(baseline, reward, config.baseline_decay)
    params, opt_state, loss, ent = update(net, optimizer, params, opt_state, inputs, drawn.sampled.actions,
                                          jnp.asarray(adv), jnp.float32(config.entropy))
    b = int(np.argmin(scores.objective))
    return StepResult(params, opt_state, baseline, float(loss), float(ent), float(reward.mean()),
                      float(scores.objective.mean()), float(scores.objective[b]), placements[b].astype(np.int32),
                      float(np.mean(scores.over_gb > 0)))


def init_params(net, inputs, seed: int) -> Any:
    """Fresh parameters from `seed`.

    Their shapes do not depend on the graph.
    """
    return _init(net, inputs, jax.random.key(seed))


@functools.partial(jax.jit, static_argnames=("net",))
def _init(net, inputs, key: jax.Array) -> Any:
    # jitted: flax's eager init runs the LSTM scans op by op, far slower than compiled (experiments/README.md)
    return net.init(key, inputs, jax.random.key(0), 1, False, method="sample")
