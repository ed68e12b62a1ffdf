"""The policy: GNN embeddings + a device-scoring head for any device count.

The network evaluates S states of one graph together (the B episodes of a rollout step, or C * B recorded
states in the gradient pass): node features (static + placement-dependent) -> `MessagePassing` ->
`NodeContext` of each state's current node v. Each device d is then scored by ONE shared MLP from
[context of v, mean embedding of the nodes on d, compute load and node count of d (1 = balanced), v's cost
on d, share of v's parents / children on d, "d is v's device now"] -> one logit; padded devices are masked.
Nothing in the head is tied to a device index, so a policy trained on 4 devices runs on 2 or 8 (the node
features' device one-hot is padded to `max_devices`).

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
from placeto.features import GraphArrays
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

    @nn.compact
    def __call__(self, a: GraphArrays, placement, start, nodes, ts, embeddings=None, return_embeddings=False):
        """Masked device logits float32[S, Dm] of S states (or their embeddings).

        Args:
          a: graph arrays.
          placement: int[S, Np].
          start: float32[S, Np].
          nodes, ts: int32[S].
          embeddings: float32[Np, S, H] message-passing output to use instead of computing it (a stale one from an
            earlier step: `fast greedy`).
          return_embeddings: return that output instead of the logits.
        """
        dm, n_pad, s = self.max_devices, placement.shape[1], placement.shape[0]
        placement, start = placement.T, start.T  # node-major [Np, S]
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
        return _score_devices(self.hidden, a, onehot, h, ctx, placement, nodes)


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


def _score_devices(hidden: int, a: GraphArrays, onehot, h, ctx, placement, nodes):
    """Logits float32[S, Dm] from one MLP shared by the devices.

    Its input: [context, device embedding, device features]; padded devices are masked.
    """
    counts = onehot.sum(0)  # [S, Dm]
    dev_emb = jnp.einsum("nsd,nsh->sdh", onehot, h) / jnp.maximum(counts, 1.0)[..., None]
    feats = _device_features(a, onehot, placement, nodes)
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
    log_probs: Callable[..., jax.Array]  # (params, arrays, placement[S, Np], start, nodes[S], ts[S]) -> [S, Dm]
    embed: Callable[..., jax.Array]  # same arguments -> float32[Np, S, H] message-passing embeddings
    head_log_probs: Callable[..., jax.Array]  # same arguments + embeddings [Np, S, H] -> [S, Dm]
    act_refresh: Callable[..., tuple[jax.Array, jax.Array, jax.Array]]  # act's arguments -> act's + [Np, B, H]
    act_stale: Callable[..., tuple[jax.Array, jax.Array]]  # act's arguments + embeddings [Np, B, H] -> act's
    embed_every: int = 1  # message passing every this many steps of an episode (PlacetoConfig.embed_every)


def log_probs(net: PlacetoNet, params, arrays: GraphArrays, placement, start, nodes, ts):
    """Log-probabilities float32[S, Dm] of S states, for loss functions.

    S states of one graph; not jitted. placement: int[S, Np]; start: float32[S, Np]; nodes, ts: int32[S].
    """
    return jax.nn.log_softmax(net.apply(params, arrays, placement, start, nodes, ts), axis=-1)


def make_policy(config: PlacetoConfig) -> Policy:
    """The policy of `config`, memoised on the model fields.

    Equal models share jitted functions and caches.
    """
    return _make_policy(config.hidden, config.rounds, config.max_devices, config.group_agg, config.device_onehot,
                        config.embed_every)


@functools.lru_cache(maxsize=None)
def _make_policy(hidden: int, rounds: int, max_devices: int, group_agg: str, device_onehot: bool,
                 embed_every: int = 1) -> Policy:
    net = PlacetoNet(hidden, rounds, max_devices, group_agg, device_onehot)

    def init(key, arrays: GraphArrays) -> Params:
        n_pad = arrays.node_mask.shape[0]
        zeros = jnp.zeros((1,), jnp.int32)
        return net.init(key, arrays, jnp.zeros((1, n_pad), jnp.int32), jnp.zeros((1, n_pad)), zeros, zeros)

    def _sample(logp, obs: Observation, key, greedy):
        sampled = jax.random.categorical(jax.random.fold_in(key, obs.t), logp, axis=-1)
        actions = jnp.where(greedy, jnp.argmax(logp, axis=-1), sampled).astype(jnp.int32)
        return actions, jnp.take_along_axis(logp, actions[:, None], axis=-1)[:, 0]

    def _state_args(obs: Observation):
        b = obs.placement.shape[0]
        return obs.placement, obs.start, jnp.full((b,), obs.node, jnp.int32), jnp.full((b,), obs.t, jnp.int32)

    @jax.jit
    def act(params, arrays: GraphArrays, obs: Observation, key, greedy):
        """Sample (key folded with the step) or, where greedy, take the argmax.

        Returns (actions int32[B], logp float32[B]).
        """
        TRACES["act"] += 1
        return _sample(log_probs(net, params, arrays, *_state_args(obs)), obs, key, greedy)

    @jax.jit
    def jitted_log_probs(params, arrays: GraphArrays, placement, start, nodes, ts):
        TRACES["log_probs"] += 1
        return log_probs(net, params, arrays, placement, start, nodes, ts)

    @jax.jit
    def embed(params, arrays: GraphArrays, placement, start, nodes, ts):
        TRACES["embed"] += 1
        return net.apply(params, arrays, placement, start, nodes, ts, return_embeddings=True)

    @jax.jit
    def head_log_probs(params, arrays: GraphArrays, placement, start, nodes, ts, embeddings):
        TRACES["head"] += 1
        logits = net.apply(params, arrays, placement, start, nodes, ts, embeddings=embeddings)
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
