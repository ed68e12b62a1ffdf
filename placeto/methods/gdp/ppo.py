"""GDP's PPO step on one task, for family training and per-graph fine-tuning.

One step = one forward pass that samples B whole placements (each node's device drawn from its own
distribution), B simulations through placeto.objective.score_batch (counted by the meter), then `ppo_epochs`
clipped updates on that batch in one jitted call. Reward = -objective / single-device objective; the
advantage is the reward minus the batch mean, divided by the batch standard deviation.

The ratio is taken per node decision, every node of a placement sharing its placement's advantage: the ratio
of a whole placement is a product of N per-node ratios, which leaves [1 - clip, 1 + clip] after the first
tiny step when N is in the thousands, so PPO's clip would stop all learning.

With a list decoder (placeto.methods.gdp.decoder) a placement is decoded node by node on the host, each
decision's logits depending on the devices already chosen; a sample keeps its per-decision features and masks
(Drawn.feat, Drawn.allowed), from which the loss re-evaluates the log-probabilities under new parameters.
Sample i of an update is decoded from uniforms drawn from fold_in(key, i) alone, however the batch is split.

Two options of a list decoder's training (GdpConfig): `baseline` "greedy" compares each sample's reward with the
policy's own greedy decoding (one more decoding and simulation per update), so what improves is the one pass;
`imitation` adds a cross-entropy toward the list scheduler's choice at every recorded decision
(`scheduler_choice`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from placeto.methods.gdp.config import GdpConfig
from placeto.methods.gdp.decoder import decode
from placeto.methods.gdp.inputs import GdpInputs, gdp_inputs
from placeto.methods.gdp.model import NEG, GdpNet, heads, log_policy, make_net
from placeto.objective import objective_scale, score_batch
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph
from simulator.grouping.group import Grouping


class Task(NamedTuple):
    """One (graph, cluster) to train on."""

    key: str  # "<graph name>@<devices>d"
    graph: Graph
    cluster: Cluster
    inputs: GdpInputs
    scale: float  # single-device runtime, microseconds: rewards are -objective / scale
    ops: Graph | None = None  # coarse-to-fine: the op graph whose runtime is the objective, `graph` its grouping
    op_group: np.ndarray | None = None  # int32[N ops] the node of `graph` each op of `ops` belongs to

    @property
    def op_graph(self) -> Graph:
        """The graph the objective simulates: `ops` if coarse, else `graph`."""
        return self.graph if self.ops is None else self.ops

    def op_placements(self, acts: np.ndarray) -> np.ndarray:
        """int32[..., N ops] from placements int[..., N] of `graph`'s nodes.

        Expanded when coarse.
        """
        acts = np.asarray(acts, np.int32)
        return acts if self.op_group is None else acts[..., self.op_group]

    def score(self, acts: np.ndarray) -> np.ndarray:
        """float64[B] objectives (us) of placements int[B, N]; metered.

        Placements of `graph`'s nodes; simulated on the op graph (`ops` when coarse).
        """
        return score_batch(self.op_graph, self.op_placements(acts), self.cluster)


class StepResult(NamedTuple):
    """What one PPO step did on its task.

    Objectives in microseconds (placeto.objective: feasibility first).
    """

    params: Any
    opt_state: Any
    loss: float
    entropy: float  # mean per-node entropy, nats
    mean_objective: float
    best_objective: float  # best of the batch
    best_placement: np.ndarray  # int32[N]


def make_task(graph: Graph, cluster: Cluster, config: GdpConfig, grouping: Grouping | None = None) -> Task:
    """The task of placing `graph` (or its groups) on `cluster`.

    With `grouping` (of `graph`), the task places its groups, each placement expanded to `graph`'s ops and
    scored there.
    """
    if grouping is not None:
        task = make_task(grouping.graph, cluster, config)
        return task._replace(key=f"{graph.name}@{cluster.n_devices}d", scale=objective_scale(graph, cluster),
                             ops=graph, op_group=np.asarray(grouping.op_to_group, np.int32))
    inputs = gdp_inputs(graph, cluster, config.max_devices, config.segment)
    return Task(f"{graph.name}@{cluster.n_devices}d", graph, cluster, inputs, objective_scale(graph, cluster))


def make_optimizer(config: GdpConfig) -> optax.GradientTransformation:
    """Clipped Adam; one object per (grad_clip, lr).

    So that jitted updates taking it compile once.
    """
    return _optimizer(config.grad_clip, config.lr)


@functools.lru_cache(maxsize=None)
def _optimizer(grad_clip: float, lr: float) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.adam(lr))


class PpoSettings(NamedTuple):
    """The PPO fields of GdpConfig the compiled update depends on.

    A static, hashable argument.
    """

    clip: float
    entropy: float
    epochs: int
    temperature: float
    imitation: float = 0.0

    @classmethod
    def of(cls, config: GdpConfig) -> "PpoSettings":
        return cls(float(config.clip), float(config.entropy), int(config.ppo_epochs), float(config.temperature),
                   float(config.imitation))


@functools.partial(jax.jit, static_argnames=("net", "batch"))
def sample_batch(net: GdpNet, params, x: GdpInputs, key: jax.Array, batch: int, temperature: float = 1.0):
    """B sampled placements and the greedy one, from one pass.

    Returns (placements int32[B, Np], their per-node log-probabilities float32[B, Np], the greedy placement
    int32[Np]: each node's most likely device), at `temperature` (model.log_policy).
    """
    logp = log_policy(net, params, x, temperature)
    acts = jax.random.categorical(key, logp[None], axis=-1, shape=(batch, logp.shape[0])).astype(jnp.int32)
    return acts, logp[jnp.arange(logp.shape[0])[None, :], acts], jnp.argmax(logp, axis=-1).astype(jnp.int32)


def decoded_log_policy(scores, weight, feat, allowed, temperature: float = 1.0) -> jax.Array:
    """float32[B, Np, Dm] a list decoder's log-probs at its recorded decisions.

    The log-softmax of (scores + sum_k weight[:, k] * feat[..., k]) / temperature over the allowed devices
    (placeto.methods.gdp.decoder).

    Args:
      scores: float32[Np, Dm].
      weight: float32[Np, K].
      feat: float32[B, Np, Dm, K].
      allowed: bool[B, Np, Dm].
    """
    logits = (scores[None] + jnp.einsum("bndk,nk->bnd", feat, weight)) / temperature
    return jax.nn.log_softmax(jnp.where(allowed, logits, NEG), axis=-1)


def ppo_loss(net: GdpNet, config: "PpoSettings", params, x: GdpInputs, acts, old_logp, adv, feat=None,
             allowed=None, target=None):
    """(loss, entropy): clipped surrogate - entropy bonus + imitation term.

    The clipped surrogate is per node (see the module docstring); the imitation term is config.imitation times the
    cross-entropy toward `target`. Padding nodes are masked out.

    Args:
      acts: int32[B, Np].
      old_logp: float32[B, Np].
      adv: float32[B].
      feat, allowed: a list decoder's records float32[B, Np, Dm, K] and bool[B, Np, Dm] (None for the
        independent decoder).
      target: int32[B, Np] the list scheduler's device at each decision (`scheduler_choice`; None: no imitation).
    """
    rows = jnp.arange(acts.shape[1])[None, :]
    if feat is None:
        logp_all = log_policy(net, params, x, config.temperature)  # [Np, Dm]
        logp = logp_all[rows, acts]  # [B, Np]
    else:
        scores, weight = heads(net, params, x)
        logp_all = decoded_log_policy(scores, weight, feat, allowed, config.temperature)  # [B, Np, Dm]
        logp = jnp.take_along_axis(logp_all, acts[..., None], axis=-1)[..., 0]
    mask = x.node_mask.astype(jnp.float32)
    ratio = jnp.exp(logp - old_logp)
    a = adv[:, None]
    surrogate = jnp.minimum(ratio * a, jnp.clip(ratio, 1 - config.clip, 1 + config.clip) * a)
    n_real = jnp.maximum(mask.sum(), 1.0)
    pg = -(surrogate * mask).sum() / (acts.shape[0] * n_real)
    entropy = -(jnp.exp(logp_all) * logp_all).sum(-1)  # [Np] or [B, Np]
    entropy = (entropy * mask).sum() / (n_real * (1 if feat is None else acts.shape[0]))
    loss = pg - config.entropy * entropy
    if target is not None and config.imitation:
        tlogp = jnp.take_along_axis(logp_all, target[..., None], axis=-1)[..., 0]  # [B, Np]
        loss = loss - config.imitation * (tlogp * mask).sum() / (acts.shape[0] * n_real)
    return loss, entropy


def scheduler_choice(feat: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """int32[B, Np] the list scheduler's device at every recorded decision.

    The allowed device whose finish-gap feature is largest (feat[..., 0] = -log1p(finish gap / cost unit), 0 where
    the node finishes first), the lowest on ties (m-ETF's rule; with the "heft" decoder, HEFT's). feat:
    float[B, Np, Dm, K]; allowed: bool[B, Np, Dm].
    """
    return np.argmax(np.where(allowed, feat[..., 0], -np.inf), axis=-1).astype(np.int32)


@functools.partial(jax.jit, static_argnames=("net", "config", "optimizer"))
def ppo_update(net: GdpNet, config: PpoSettings, optimizer, params, opt_state, x: GdpInputs, acts, old_logp, adv,
               feat=None, allowed=None, target=None):
    """`config.epochs` Adam steps on one batch, in one compiled scan.

    Returns (params, opt_state, loss, entropy).
    """
    grad_fn = jax.value_and_grad(lambda p: ppo_loss(net, config, p, x, acts, old_logp, adv, feat, allowed, target),
                                 has_aux=True)

    def epoch(carry, _):
        p, s = carry
        (loss, ent), g = grad_fn(p)
        updates, s = optimizer.update(g, s, p)
        return (optax.apply_updates(p, updates), s), (loss, ent)

    (params, opt_state), (loss, ent) = jax.lax.scan(epoch, (params, opt_state), None, length=config.epochs)
    return params, opt_state, loss[0], ent[0]


def advantages(objective: np.ndarray, scale: float, baseline: float | None = None) -> np.ndarray:
    """float32[B] advantages: (reward - baseline) / batch std.

    reward = -objective / scale; the baseline is the batch mean, or -baseline / scale (the greedy decoding's
    objective, us).
    """
    r = -np.asarray(objective, np.float64) / scale
    a = r - (r.mean() if baseline is None else -baseline / scale)
    spread = a.std() if baseline is None else r.std()
    return (a / (spread + 1e-8)).astype(np.float32)


TIE_SEED = 0  # a list decoder's greedy decoding breaks exact ties with uniforms of jax.random.key(TIE_SEED)


def greedy_decoding(config: GdpConfig, net: GdpNet, params, task: Task):
    """A list decoder's greedy decoding of `task`.

    A decoder.Decoding with B = 1.

    Each node on its most likely device given the earlier ones, exact ties broken at random by uniforms of
    key(TIE_SEED), the same for every call, or with config.greedy_ties "lowest" by m-ETF's own rule, the lowest
    device (which places the op graphs worse: experiments/results/ablations/gdp_decoder.md).
    """
    scores, weight = (np.asarray(a) for a in decoder_heads(net, params, task.inputs))
    if config.greedy_ties == "lowest":
        return decode(task.graph, task.cluster, scores, weight, config.temperature, None, config.decoder, greedy=True)
    ties = np.asarray(decoder_uniforms(jax.random.key(TIE_SEED), jnp.zeros(1, jnp.uint32), task.graph.n_nodes),
                      np.float64)
    return decode(task.graph, task.cluster, scores, weight, config.temperature, ties, config.decoder, greedy=True)


class Drawn(NamedTuple):
    """B placements sampled and scored: a PPO step's data."""

    acts: np.ndarray  # int32[B, Np] device of every (padded) node
    logp: np.ndarray  # float32[B, Np] log-probability of each node's device under the sampling parameters
    objective: np.ndarray  # float64[B] objective (placeto.objective), microseconds
    feat: np.ndarray | None = None  # float32[B, Np, Dm, K] a list decoder's features (decoder.Decoding.feat)
    allowed: np.ndarray | None = None  # bool[B, Np, Dm] its masks


def draw(net: GdpNet, config: GdpConfig, params, task: Task, key: jax.Array) -> Drawn:
    """A batch of placements of `task` from one key, scored; metered.

    config.samples_per_update of them, by `sample_batch`; for a list decoder, `draw_range` of the whole batch.
    """
    if config.decoder != "independent":
        return draw_range(net, config, params, task, key, 0, config.samples_per_update)
    acts, logp, _ = sample_batch(net, params, task.inputs, key, config.samples_per_update, config.temperature)
    acts = np.asarray(acts)
    obj = task.score(acts[:, :task.graph.n_nodes])
    return Drawn(acts, np.asarray(logp), obj)


def draw_range(net: GdpNet, config: GdpConfig, params, task: Task, key: jax.Array, lo: int, hi: int) -> Drawn:
    """Samples [lo, hi) of a batch, one key per sample, scored; metered.

    Sample i is categorical(fold_in(key, i)) of the one forward pass, so the batch is the same however [0, B) is
    split into ranges (placeto.rollouts.distributed); not `draw`'s batch for the same key.
    """
    if config.decoder != "independent":
        return _decode_range(net, config, params, task, key, lo, hi)
    logp_all = _forward(net, params, task.inputs, config.temperature)  # one compiled program whatever the range
    acts, logp = _sample_rows(logp_all, jax.vmap(lambda i: jax.random.fold_in(key, i))(
        jnp.arange(lo, hi, dtype=jnp.uint32)))
    acts = np.asarray(acts)
    obj = task.score(acts[:, :task.graph.n_nodes])
    return Drawn(acts, np.asarray(logp), obj)


@functools.partial(jax.jit, static_argnames=("net",))
def _forward(net: GdpNet, params, x: GdpInputs, temperature: float = 1.0) -> jax.Array:
    """float32[Np, Dm] per-node log-probabilities at `temperature`."""
    return log_policy(net, params, x, temperature)


@jax.jit
def _sample_rows(logp_all: jax.Array, keys: jax.Array):
    """(acts int32[K, Np], log-probs float32[K, Np]), row k from keys[k].

    Row k depends on keys[k] alone (`jax.lax.map`).
    """
    rows = jnp.arange(logp_all.shape[0])

    def one(key):
        acts = jax.random.categorical(key, logp_all, axis=-1).astype(jnp.int32)
        return acts, logp_all[rows, acts]

    return jax.lax.map(one, keys)


def _decode_range(net: GdpNet, config: GdpConfig, params, task: Task, key: jax.Array, lo: int, hi: int) -> Drawn:
    """`draw_range` for a list decoder.

    Sample i is decoded from uniforms of fold_in(key, i); padded to Np, Dm.
    """
    scores, weight = (np.asarray(a) for a in decoder_heads(net, params, task.inputs))
    n, d = task.graph.n_nodes, task.cluster.n_devices
    uniforms = np.asarray(decoder_uniforms(key, jnp.arange(lo, hi, dtype=jnp.uint32), n), np.float64)
    dec = decode(task.graph, task.cluster, scores, weight, config.temperature, uniforms, config.decoder)
    n_pad, d_max = scores.shape
    b = hi - lo
    acts, logp = np.zeros((b, n_pad), np.int32), np.zeros((b, n_pad), np.float32)
    feat = np.zeros((b, n_pad, d_max, dec.feat.shape[-1]), np.float32)
    allowed = np.zeros((b, n_pad, d_max), np.bool_)
    acts[:, :n], logp[:, :n], feat[:, :n, :d], allowed[:, :n, :d] = dec
    obj = task.score(dec.acts)
    return Drawn(acts, logp, obj, feat, allowed)


@functools.partial(jax.jit, static_argnames=("net",))
def decoder_heads(net: GdpNet, params, x: GdpInputs):
    """(scores, weights) of a list decoder, jitted.

    model.heads under jit: scores float32[Np, Dm], weights float32[Np, 2].
    """
    return heads(net, params, x)


@functools.partial(jax.jit, static_argnames=("n",))
def decoder_uniforms(key: jax.Array, index: jax.Array, n: int) -> jax.Array:
    """float32[K, n] uniforms in [0, 1), row k from fold_in(key, index[k])."""
    return jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i), (n,)))(index)


def concat_drawn(parts) -> Drawn:
    """The samples of `parts` as one Drawn.

    `parts`: ranges of one batch, in order.
    """
    return Drawn(*(None if field[0] is None else np.concatenate(field) for field in zip(*parts)))


def ppo_step(net: GdpNet, config: GdpConfig, optimizer, params, opt_state, task: Task, key: jax.Array,
             drawn: Drawn | None = None) -> StepResult:
    """One PPO step: sample, score, update.

    Samples config.samples_per_update placements of `task` (or takes `drawn`: `draw_range`'s); see the module
    docstring.
    """
    drawn = drawn if drawn is not None else draw(net, config, params, task, key)
    obj, placements = drawn.objective, drawn.acts[:, :task.graph.n_nodes]
    base = None
    if config.baseline == "greedy":
        base = float(task.score(greedy_decoding(config, net, params, task).acts)[0])
    adv = advantages(obj, task.scale, base)
    decoded = () if drawn.feat is None else (jnp.asarray(drawn.feat), jnp.asarray(drawn.allowed))
    if decoded and config.imitation:
        decoded = (*decoded, jnp.asarray(scheduler_choice(drawn.feat, drawn.allowed)))
    params, opt_state, loss, ent = ppo_update(net, PpoSettings.of(config), optimizer, params, opt_state, task.inputs,
                                              jnp.asarray(drawn.acts), jnp.asarray(drawn.logp), jnp.asarray(adv),
                                              *decoded)
    b = int(np.argmin(obj))
    return StepResult(params, opt_state, float(loss), float(ent), float(obj.mean()), float(obj[b]),
                      placements[b].copy())


def init_params(config: GdpConfig, task: Task) -> Any:
    """Fresh parameters from config.seed.

    Their shapes do not depend on the graph.
    """
    return make_net(config).init(jax.random.key(config.seed), task.inputs)
