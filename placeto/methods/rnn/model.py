"""The RNN placer's network (seeds 000/002): op embeddings -> items -> seq2seq.

Op embeddings are pooled into colocation items, and the seq2seq placer gives each item a device.

OpEmbed      op type, output sizes, adjacency (placeto.methods.sequence.op_embed): float32[Np, H]
items        the mean embedding of each item's ops (segment sums over `OpInputs.item`): float32[Tp, H],
             in the topological order of the items' first ops
Seq2Seq      bidirectional LSTM encoder + attentional LSTM decoder (placeto.methods.sequence.seq2seq), one memory
             shared by the K sampled placements
placement    each op takes its item's device: int32[K, Np]
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from placeto.methods.sequence.op_embed import OpEmbed, OpInputs
from placeto.methods.sequence.reinforce import Sampled, Scored
from placeto.methods.rnn.config import RnnConfig
from placeto.methods.sequence.seq2seq import Seq2Seq


class RnnPlacer(nn.Module):
    """OpInputs -> placements of the items (see the module docstring)."""

    config: RnnConfig

    def setup(self):
        c = self.config
        self.embed = OpEmbed(c.hidden, c.op_types)
        self.seq2seq = Seq2Seq(c.hidden, c.devices, c.logit_clip, c.stay_prior)

    def _items(self, x: OpInputs) -> jax.Array:
        """float32[1, Tp, H] mean op embedding per item."""
        h = self.embed(x)
        t_pad = x.item_mask.shape[0]
        total = jax.ops.segment_sum(h, x.item, t_pad)
        count = jax.ops.segment_sum(x.node_mask.astype(h.dtype), x.item, t_pad)
        return (total / jnp.maximum(count, 1.0)[:, None])[None]

    def sample(self, x: OpInputs, key: jax.Array, batch: int, greedy: bool = False) -> Sampled:
        """`batch` placements: actions and placement.

        actions: int32[K, Tp] device per item; placement: int32[K, Np].
        """
        forced = jnp.zeros((batch, x.item_mask.shape[0]), jnp.int32)
        dec = self.seq2seq(self._items(x), x.item_mask, "greedy" if greedy else "sample", key, forced)
        return Sampled(dec.actions, dec.actions[:, x.item])

    def __call__(self, x: OpInputs, actions: jax.Array) -> Scored:
        """Log-probabilities of actions int32[K, Tp]: means over the real items."""
        dec = self.seq2seq(self._items(x), x.item_mask, "forced", jax.random.key(0), actions)
        n = jnp.maximum(x.item_mask.sum(), 1)
        return Scored(dec.logp.sum(-1) / n, dec.entropy.sum(-1).mean() / n)


def make_net(config: RnnConfig) -> RnnPlacer:
    """The network of `config`'s model fields.

    Runs differing in budget or seed share compilations.
    """
    return RnnPlacer(RnnConfig(**{f: getattr(config, f) for f in config.MODEL_FIELDS}))
