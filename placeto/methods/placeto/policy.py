"""The policy: GNN embeddings + a device-scoring head for any device count.

The network evaluates S states of one graph together (the B episodes of a rollout step, or C * B recorded
states in the gradient pass): node features (static + placement-dependent) -> `MessagePassing` ->
`NodeContext` of each state's current node v. Each device d is then scored by ONE shared MLP from
[context of v, mean embedding of the nodes on d, compute load and node count of d (1 = balanced), v's cost
on d, share of v's parents / children on d, "d is v's device now"] -> one logit; padded devices are masked.
Nothing in the head is tied to a device index, so a policy trained on 4 devices runs on 2 or 8 (the node
features' device one-hot is padded to `max_devices`).

With `schedule_features` (PlacetoConfig) the head also reads what a list scheduler knows of v on d, computed from
the simulated schedule of the current placement (`schedule_features`): v's data-ready, earliest start and
earliest finish times on d, how much later than now that finish is, how late v's children would then be, the
change of the load bound max_d busy_d, and d's memory headroom after the move. Every one is a fraction of the
step's runtime or of d's capacity: unit-free.

`make_policy(config)` returns jitted functions, memoised per config: graphs padded to the same bucket (see
`features.bucket`) reuse one compilation. `TRACES` counts traces, for the no-recompile test.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from placeto.methods.placeto.config import PlacetoConfig
from placeto.methods.placeto.env import Observation
from placeto.features import SCHEDULE_CHANNELS, GraphArrays
from placeto.gnn import MessagePassing
from placeto.methods.placeto.node_context import NodeContext

NEG = -1e9  # logit of padded devices
TRACES: collections.Counter = collections.Counter()  # function name -> times traced (a retrace = a compile)
Params = Any


class PlacetoNet(nn.Module):
    """S states of one graph -> float32[S, Dm] masked device logits."""

    hidden: int
    rounds: int
    max_devices: int
    group_agg: str = "mean"
    device_onehot: bool = True
    schedule_features: bool = False

    @nn.compact
    def __call__(self, a: GraphArrays, placement, schedule, nodes, ts, embeddings=None, return_embeddings=False):
        """Masked device logits float32[S, Dm] of S states (or their embeddings).

        Args:
          a: graph arrays.
          placement: int[S, Np].
          schedule: float32[S, Np, SCHEDULE_CHANNELS] (placeto.features.SCHEDULE).
          nodes, ts: int32[S].
          embeddings: float32[Np, S, H] message-passing output to use instead of computing it (a stale one from an
            earlier step: `fast greedy`).
          return_embeddings: return that output instead of the logits.
        """
        dm, n_pad, s = self.max_devices, placement.shape[1], placement.shape[0]
        placement, schedule = placement.T, jnp.swapaxes(schedule, 0, 1)  # node-major [Np, S], [Np, S, C]
        start = schedule[..., 0]
        onehot = jax.nn.one_hot(placement, dm) * a.node_mask[:, None, None]  # [Np, S, Dm]
        cur_dev = placement[nodes, jnp.arange(s)]  # [S]
        dynamic = jnp.stack([a.first_visit[:, None] < ts[None, :], jnp.arange(n_pad)[:, None] == nodes[None, :],
                             start, (placement == cur_dev[None, :]) & a.node_mask[:, None]], axis=-1)
        static = jnp.broadcast_to(a.graph.nodes[:, None, :], (n_pad, s, a.graph.nodes.shape[1]))
        device_in = onehot if self.device_onehot else jnp.zeros_like(onehot)  # same width: same param shapes
        x = jnp.concatenate([static, device_in, dynamic.astype(jnp.float32)], axis=-1)
        g = a.graph
        if embeddings is None:
            h = MessagePassing(self.hidden, self.rounds)(x, g.senders, g.receivers, a.node_mask, a.inv_in_deg,
                                                         a.inv_out_deg)
        else:  # the message-passing module is not called: its parameters are simply unused
            h = embeddings
        if return_embeddings:
            return h
        ctx = NodeContext(self.hidden, self.group_agg)(h, a.reach, nodes, a.node_mask)
        feats = _device_features(a, onehot, placement, nodes)
        if self.schedule_features:
            feats = jnp.concatenate([feats, schedule_features(a, onehot, schedule, nodes)], axis=-1)
        return _score_devices(self.hidden, a, onehot, h, ctx, feats)


N_SCHEDULE_FEATURES = 8  # see `schedule_features`
EPS = 1e-5  # fraction of the runtime: a node that starts this close to v's ready time does not delay v


def schedule_features(a: GraphArrays, onehot, schedule, nodes):
    """float32[S, Dm, N_SCHEDULE_FEATURES] what a list scheduler knows of each state's node v on each device d.

    From the simulated schedule of the current placement (times / its runtime R, bytes / capacity):
      ready     when v's inputs would be on d: max over parents p of finish_p + (p not on d) * send time of p
      est       earliest start on d: ready, or later if d is still running a node (not v, not v's descendant)
                that started before ready (m-ETF's earliest start, without insertion; EPS)
      eft       est + v's cost on d
      later     eft - v's finish now (negative: d finishes v sooner)
      lateness  max over v's children c of eft + (c not on d) * v's send time - c's start now (a sink's consumer
                is the step's end, 1): > 0 delays a child
      load      the change of max_d' busy_d' (a lower bound of R) if v moved to d
      headroom  1 - (d's peak + v's persistent bytes if v moved there) / d's capacity (< 0: over capacity)
      fits      1 where headroom >= 0
    Clipped to [-4, 4] so that no input is unbounded (transfers can take many runtimes).

    Args:
      onehot: float32[Np, S, Dm] device of every node.
      schedule: float32[Np, S, C] node-major.
      nodes: int32[S] each state's current node.
    """
    g = a.graph
    n_pad, s, dm = onehot.shape
    cols = jnp.arange(s)
    start, finish, peak_of, per_r = (schedule[..., k] for k in range(4))
    per_r = per_r[nodes, cols]  # [S] cost_unit / R
    xfer = a.xfer_units[:, None] * per_r[None, :]  # [Np, S] send time / R of each node's outputs
    cost = a.cost_units[nodes] * per_r[:, None]  # [S, Dm] v's cost on d / R
    into = (g.receivers[:, None] == nodes[None, :]) & a.edge_mask[:, None]  # [Ep, S]
    arrive = finish[g.senders][..., None] + (1.0 - onehot[g.senders]) * xfer[g.senders][..., None]  # [Ep, S, Dm]
    ready = jnp.where(into[..., None], arrive, 0.0).max(0)  # [S, Dm]
    others = a.node_mask[:, None] & ~a.reach[nodes].T & (jnp.arange(n_pad)[:, None] != nodes[None, :])  # [Np, S]
    running = (onehot > 0) & others[..., None] & (start[..., None] < ready[None] - EPS)  # [Np, S, Dm]
    est = jnp.maximum(ready, jnp.where(running, finish[..., None], 0.0).max(0))
    eft = est + cost
    later = eft - finish[nodes, cols][:, None]
    out_of = (g.senders[:, None] == nodes[None, :]) & a.edge_mask[:, None]  # [Ep, S]
    need = eft[None] + (1.0 - onehot[g.receivers]) * xfer[nodes, cols][None, :, None] - start[g.receivers][..., None]
    has_child = out_of.any(0)[:, None]
    lateness = jnp.where(has_child, jnp.where(out_of[..., None], need, -jnp.inf).max(0), eft - 1.0)
    busy = jnp.einsum("nsd,nd->sd", onehot, a.cost_units) * per_r[:, None]  # [S, Dm] compute time / R
    here = onehot[nodes, cols]  # [S, Dm]
    moved = busy - (here * cost).sum(-1, keepdims=True) * here  # v taken off its device
    after = moved[:, None, :] + jnp.eye(dm)[None] * cost[:, :, None]  # [S, candidate, Dm]
    after = jnp.where(a.dev_mask[None, None, :], after, 0.0)
    load = after.max(-1) - jnp.where(a.dev_mask[None, :], busy, 0.0).max(-1, keepdims=True)
    peak = (onehot * peak_of[..., None]).max(0)  # [S, Dm] each device's peak / capacity
    headroom = 1.0 - peak - (1.0 - here) * a.persist_frac[nodes]
    feats = jnp.stack([ready, est, eft, later, lateness, load, headroom, (headroom >= 0).astype(jnp.float32)], -1)
    return jnp.clip(feats, -4.0, 4.0)


def _device_features(a: GraphArrays, onehot, placement, nodes):
    """float32[S, Dm, 6] per-device summary for each state's current node.

    A balanced device reads ~1.
    """
    g = a.graph
    n_real_dev = jnp.maximum(a.dev_mask.sum(), 1)
    load = jnp.einsum("n,nsd->sd", a.load_cost, onehot) * n_real_dev
    count = onehot.sum(0) / jnp.maximum(a.node_mask.sum(), 1) * n_real_dev
    into = ((g.receivers[:, None] == nodes[None, :]) & a.edge_mask[:, None]).astype(jnp.float32)  # [Ep, S]
    out_of = ((g.senders[:, None] == nodes[None, :]) & a.edge_mask[:, None]).astype(jnp.float32)
    parents_on = jnp.einsum("es,esd->sd", into, onehot[g.senders]) * a.inv_in_deg[nodes][:, None]
    children_on = jnp.einsum("es,esd->sd", out_of, onehot[g.receivers]) * a.inv_out_deg[nodes][:, None]
    here = onehot[nodes, jnp.arange(nodes.shape[0])]
    return jnp.stack([load, count, a.dev_cost[nodes], parents_on, children_on, here], axis=-1)


def _score_devices(hidden: int, a: GraphArrays, onehot, h, ctx, feats):
    """Logits float32[S, Dm] from one MLP shared by the devices.

    Its input: [context, device embedding, device features float32[S, Dm, F]]; padded devices are masked.
    """
    counts = onehot.sum(0)  # [S, Dm]
    dev_emb = jnp.einsum("nsd,nsh->sdh", onehot, h) / jnp.maximum(counts, 1.0)[..., None]
    s, dm = counts.shape
    z = jnp.concatenate([jnp.broadcast_to(ctx[:, None, :], (s, dm, ctx.shape[1])), dev_emb, feats], axis=-1)
    z = nn.relu(nn.Dense(hidden, name="score_hidden")(z))
    logits = nn.Dense(1, name="score_out")(z)[..., 0]
    return jnp.where(a.dev_mask[None, :], logits, NEG)


class Policy(NamedTuple):
    """Jitted policy functions for one config.

    B = episodes in the batch, Dm = max devices.
    """

    net: PlacetoNet
    init: Callable[[jax.Array, GraphArrays], Params]
    act: Callable[..., tuple[jax.Array, jax.Array]]  # (params, arrays, obs, key, greedy) -> (int32[B], f32[B])
    log_probs: Callable[..., jax.Array]  # (params, arrays, placement[S, Np], schedule, nodes[S], ts[S]) -> [S, Dm]
    embed: Callable[..., jax.Array]  # same arguments -> float32[Np, S, H] message-passing embeddings
    head_log_probs: Callable[..., jax.Array]  # same arguments + embeddings [Np, S, H] -> [S, Dm]
    act_refresh: Callable[..., tuple[jax.Array, jax.Array, jax.Array]]  # act's arguments -> act's + [Np, B, H]
    act_stale: Callable[..., tuple[jax.Array, jax.Array]]  # act's arguments + embeddings [Np, B, H] -> act's
    embed_every: int = 1  # message passing every this many steps of an episode (PlacetoConfig.embed_every)


def log_probs(net: PlacetoNet, params, arrays: GraphArrays, placement, schedule, nodes, ts):
    """Log-probabilities float32[S, Dm] of S states, for loss functions.

    S states of one graph; not jitted. placement: int[S, Np]; schedule: float32[S, Np, C]; nodes, ts: int32[S].
    """
    return jax.nn.log_softmax(net.apply(params, arrays, placement, schedule, nodes, ts), axis=-1)


def make_policy(config: PlacetoConfig) -> Policy:
    """The policy of `config`, memoised on the model fields.

    Equal models share jitted functions and caches.
    """
    return _make_policy(config.hidden, config.rounds, config.max_devices, config.group_agg, config.device_onehot,
                        config.embed_every, config.schedule_features)


@functools.lru_cache(maxsize=None)
def _make_policy(hidden: int, rounds: int, max_devices: int, group_agg: str, device_onehot: bool,
                 embed_every: int = 1, schedule_features: bool = False) -> Policy:
    net = PlacetoNet(hidden, rounds, max_devices, group_agg, device_onehot, schedule_features)

    def init(key, arrays: GraphArrays) -> Params:
        n_pad = arrays.node_mask.shape[0]
        zeros = jnp.zeros((1,), jnp.int32)
        return net.init(key, arrays, jnp.zeros((1, n_pad), jnp.int32), jnp.zeros((1, n_pad, SCHEDULE_CHANNELS)),
                        zeros, zeros)

    def _sample(logp, obs: Observation, key, greedy):
        sampled = jax.random.categorical(jax.random.fold_in(key, obs.t), logp, axis=-1)
        actions = jnp.where(greedy, jnp.argmax(logp, axis=-1), sampled).astype(jnp.int32)
        return actions, jnp.take_along_axis(logp, actions[:, None], axis=-1)[:, 0]

    def _state_args(obs: Observation):
        b = obs.placement.shape[0]
        return obs.placement, obs.schedule, jnp.full((b,), obs.node, jnp.int32), jnp.full((b,), obs.t, jnp.int32)

    @jax.jit
    def act(params, arrays: GraphArrays, obs: Observation, key, greedy):
        """Sample (key folded with the step) or, where greedy, take the argmax.

        Returns (actions int32[B], logp float32[B]).
        """
        TRACES["act"] += 1
        return _sample(log_probs(net, params, arrays, *_state_args(obs)), obs, key, greedy)

    @jax.jit
    def jitted_log_probs(params, arrays: GraphArrays, placement, schedule, nodes, ts):
        TRACES["log_probs"] += 1
        return log_probs(net, params, arrays, placement, schedule, nodes, ts)

    @jax.jit
    def embed(params, arrays: GraphArrays, placement, schedule, nodes, ts):
        TRACES["embed"] += 1
        return net.apply(params, arrays, placement, schedule, nodes, ts, return_embeddings=True)

    @jax.jit
    def head_log_probs(params, arrays: GraphArrays, placement, schedule, nodes, ts, embeddings):
        TRACES["head"] += 1
        logits = net.apply(params, arrays, placement, schedule, nodes, ts, embeddings=embeddings)
        return jax.nn.log_softmax(logits, axis=-1)

    @jax.jit
    def act_refresh(params, arrays: GraphArrays, obs: Observation, key, greedy):
        """`act`, also returning the embeddings float32[Np, B, H] it computed."""
        TRACES["act_refresh"] += 1
        args = _state_args(obs)
        h = net.apply(params, arrays, *args, return_embeddings=True)
        logp = jax.nn.log_softmax(net.apply(params, arrays, *args, embeddings=h), axis=-1)
        return (*_sample(logp, obs, key, greedy), h)

    @jax.jit
    def act_stale(params, arrays: GraphArrays, obs: Observation, key, greedy, embeddings):
        """`act` with the message-passing embeddings of an earlier step.

        The head sees the current placement.
        """
        TRACES["act_stale"] += 1
        logp = jax.nn.log_softmax(net.apply(params, arrays, *_state_args(obs), embeddings=embeddings), axis=-1)
        return _sample(logp, obs, key, greedy)

    return Policy(net, init, act, jitted_log_probs, embed, head_log_probs, act_refresh, act_stale, embed_every)
