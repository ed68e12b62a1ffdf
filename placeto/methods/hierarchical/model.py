"""The hierarchical planner's network (seed 001): Grouper and Placer.

A feed-forward Grouper and a seq2seq Placer over the groups.

    Grouper    op embeddings (placeto.methods.sequence.op_embed: type, output sizes, adjacency, position) -> a
               ReLU layer -> a softmax over G groups per op; K groupings are sampled, one group per op
    groups     per sampled grouping, each group's embedding from segment sums over its ops (nothing N x N): the
               mean op embedding, the share of the graph's ops, and the group's adjacency (edges from it to
               each group and into it from each group, as shares of all edges): float32[K, G, H + 1 + 2G]
    Placer     placeto.methods.sequence.seq2seq over the G groups in index order (a memory per sampled grouping)
    placement  each op takes its group's device: int32[K, Np]

Both are trained jointly by REINFORCE on log p(grouping) + log p(devices | grouping) (each a mean over its
decisions). Memory is O(K * Np * H + K * G^2), so raw op graphs of tens of thousands of ops fit.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from placeto.methods.hierarchical.config import HierarchicalConfig
from placeto.methods.sequence.op_embed import OpEmbed, OpInputs
from placeto.methods.sequence.reinforce import Sampled, Scored
from placeto.methods.sequence.seq2seq import Seq2Seq, clip_logits


class Actions(NamedTuple):
    """K sampled hierarchical placements."""

    groups: jax.Array  # int32[K, Np] group of each op
    devices: jax.Array  # int32[K, G] device of each group


def group_features(h: jax.Array, groups: jax.Array, x: OpInputs, n_groups: int) -> jax.Array:
    """float32[K, G, H + 1 + 2G] group embeddings.

    See the module docstring.

    Args:
      h: float32[Np, H] op embeddings (0 on padding ops).
      groups: int32[K, Np] the group of each op.
    """
    mask = x.node_mask.astype(h.dtype)
    n_ops = jnp.maximum(mask.sum(), 1.0)
    n_edges = jnp.maximum(x.edge_mask.sum(), 1)

    def one(g):
        total = jax.ops.segment_sum(h, g, n_groups)  # [G, H]
        count = jax.ops.segment_sum(mask, g, n_groups)  # [G]
        pair = g[x.senders] * n_groups + g[x.receivers]
        adj = jax.ops.segment_sum(x.edge_mask.astype(h.dtype), pair, n_groups * n_groups)
        adj = adj.reshape(n_groups, n_groups) / n_edges
        return jnp.concatenate([total / jnp.maximum(count, 1.0)[:, None], (count / n_ops)[:, None], adj, adj.T],
                               axis=-1)

    return jax.vmap(one)(groups)


def block_prior(x: OpInputs, n_groups: int, strength: float) -> jax.Array:
    """float32[Np, G] the block prior's term of the Grouper's logits.

    -strength * (d / 1 group)^2, where d is the distance from the op's place in the depth-first order (scaled to [0,
    G)) to the centre of group g: with strength > 0 the untrained Grouper favours contiguous blocks of the order. 0:
    the seed's plain Grouper.
    """
    n = jnp.maximum(x.node_mask.sum(), 1)
    place = x.position.astype(jnp.float32) * n_groups / n  # [Np]
    d = place[:, None] - (jnp.arange(n_groups, dtype=jnp.float32)[None, :] + 0.5)
    return -strength * d * d


class HierarchicalPlacer(nn.Module):
    """OpInputs -> hierarchical placements (see the module docstring)."""

    config: HierarchicalConfig

    def setup(self):
        c = self.config
        self.embed = OpEmbed(c.hidden, c.op_types)
        self.grouper_hidden = nn.Dense(c.hidden)
        self.grouper_out = nn.Dense(c.groups)
        self.placer = Seq2Seq(c.hidden, c.devices, c.logit_clip, c.stay_prior)

    def _grouper(self, x: OpInputs) -> tuple[jax.Array, jax.Array]:
        """(op embeddings float32[Np, H], group log-probs float32[Np, G])."""
        h = self.embed(x)
        logits = clip_logits(self.grouper_out(nn.relu(self.grouper_hidden(h))), self.config.logit_clip)
        return h, jax.nn.log_softmax(logits + block_prior(x, self.config.groups, self.config.block_prior), axis=-1)

    def sample(self, x: OpInputs, key: jax.Array, batch: int, greedy: bool = False) -> Sampled:
        """`batch` placements: Actions and placement int32[K, Np].

        Actions: groups int32[K, Np], devices int32[K, G].
        """
        h, logp = self._grouper(x)
        k_group, k_place = jax.random.split(key)
        if greedy:
            groups = jnp.broadcast_to(jnp.argmax(logp, axis=-1), (batch, logp.shape[0]))
        else:
            groups = jax.random.categorical(k_group, logp, axis=-1, shape=(batch, logp.shape[0]))
        groups = groups.astype(jnp.int32)
        items = group_features(h, groups, x, self.config.groups)
        forced = jnp.zeros((batch, self.config.groups), jnp.int32)
        mask = jnp.ones(self.config.groups, bool)
        dec = self.placer(items, mask, "greedy" if greedy else "sample", k_place, forced)
        return Sampled(Actions(groups, dec.actions), jnp.take_along_axis(dec.actions, groups, axis=1))

    def __call__(self, x: OpInputs, actions: Actions) -> Scored:
        """Log-probability of the groupings plus that of the devices.

        Each a mean: over the real ops for the groupings, over the groups for the devices.
        """
        h, logp = self._grouper(x)
        mask = x.node_mask.astype(logp.dtype)
        n_ops = jnp.maximum(mask.sum(), 1.0)
        taken = jnp.take_along_axis(logp[None], actions.groups[..., None], axis=-1)[..., 0]  # [K, Np]
        lp_group = (taken * mask).sum(-1) / n_ops
        ent_group = (-(jnp.exp(logp) * logp).sum(-1) * mask).sum() / n_ops
        items = group_features(h, actions.groups, x, self.config.groups)
        dec = self.placer(items, jnp.ones(self.config.groups, bool), "forced", jax.random.key(0), actions.devices)
        g = self.config.groups
        return Scored(lp_group + dec.logp.sum(-1) / g, 0.5 * (ent_group + dec.entropy.sum(-1).mean() / g))


def make_net(config: HierarchicalConfig) -> HierarchicalPlacer:
    """The network of `config`'s model fields.

    Runs differing in budget or seed share compilations.
    """
    return HierarchicalPlacer(HierarchicalConfig(**{f: getattr(config, f) for f in config.MODEL_FIELDS}))
