"""Network parts shared by the learned methods.

Message passing in both directions serves Placeto, gdp's GraphSAGE (S = 1) and the op embeddings of rnn and
hierarchical; the sinusoid position encoding serves gdp and the op embeddings.

`MessagePassing`: k rounds; in each, every node averages a transform of its parents' embeddings and, with
separate weights, of its children's, and updates its embedding with a residual MLP followed by LayerNorm
(without it the embeddings grow every round and a few Adam steps saturate the softmax: experiments/README.md,
Results log). Weights are shared across rounds (one propagation operator applied k times, as in Placeto), so the
receptive field grows with k while the parameter count does not.

It takes S states of ONE graph at once in node-major layout ([Np, S, ...]): the gathers and segment sums then
move rows of S * H floats, which XLA on CPU does far faster than S vmapped scatters (experiments/README.md,
"Figures behind design choices"). Placeto's grouped view of its current node is
placeto.methods.placeto.node_context.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class MessagePassing(nn.Module):
    """Node features -> embeddings, k rounds both ways.

    float32[Np, S, F] -> float32[Np, S, hidden], zero on padding nodes.
    """

    hidden: int
    rounds: int

    @nn.compact
    def __call__(self, x, senders, receivers, node_mask, inv_in_deg, inv_out_deg):
        """Embed S states of one graph.

        Args:
          x: float32[Np, S, F] node features of S states.
          senders, receivers: int32[Ep] edges parent -> child.
          node_mask: bool[Np].
          inv_in_deg, inv_out_deg: float32[Np] 1 / max(1, degree), for mean aggregation.
        """
        n = x.shape[0]
        mask = node_mask[:, None, None].astype(x.dtype)
        h = nn.relu(nn.Dense(self.hidden, name="embed")(x)) * mask
        to_msg = nn.Dense(2 * self.hidden, name="messages")  # [from-parent | from-child] transforms
        update = nn.Dense(self.hidden, name="update")
        norm = nn.LayerNorm(name="norm")  # keeps embeddings O(1) however many rounds (else they grow every round)
        for _ in range(self.rounds):
            msg = to_msg(h)
            from_parents = jax.ops.segment_sum(msg[senders, :, :self.hidden], receivers, n)
            from_children = jax.ops.segment_sum(msg[receivers, :, self.hidden:], senders, n)
            agg = [from_parents * inv_in_deg[:, None, None], from_children * inv_out_deg[:, None, None]]
            h = norm(h + nn.relu(update(jnp.concatenate([h] + agg, axis=-1)))) * mask
        return h


def sinusoid(n: int, width: int) -> jax.Array:
    """float32[n, width] Transformer position encoding of 0..n-1.

    Without it, nodes with equal features and neighbourhoods (two identical chains) get equal logits and no
    policy could put them on different devices; with it, neighbours in the order differ (1 rad per step).
    """
    pos = jnp.arange(n, dtype=jnp.float32)[:, None]
    freq = jnp.exp(-jnp.log(10000.0) * jnp.arange(0, width, 2, dtype=jnp.float32) / width)
    angle = pos * freq[None, :]
    return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)[:, :width]
