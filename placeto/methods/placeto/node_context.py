"""Placeto's grouped view of the current node v.

Three groups, each pooled (mean or sum) and passed through its own MLP: ancestors of v, descendants of v, and
parallel nodes (neither, nor v); concatenated with v's embedding. Node-major layout ([Np, S, ...]) as
placeto.gnn.MessagePassing's, whose embeddings it reads.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


class NodeContext(nn.Module):
    """Embeddings [Np, S, H] + current nodes [S] -> contexts float32[S, 4H].

    The four parts: own, ancestors, descendants, parallel.
    """

    hidden: int
    agg: str = "mean"

    @nn.compact
    def __call__(self, h, reach, nodes, node_mask):
        """Contexts float32[S, 4H] of the current nodes.

        Args:
          h: float32[Np, S, H] node embeddings.
          reach: bool[Np, Np] (reach[u, v]: u is an ancestor of v).
          nodes: int32[S] the current node of each state.
        """
        n_pad, s = h.shape[0], h.shape[1]
        anc = reach[:, nodes]  # [Np, S]
        desc = reach[nodes, :].T  # [Np, S]
        par = node_mask[:, None] & ~anc & ~desc & (jnp.arange(n_pad)[:, None] != nodes[None, :])
        parts = [h[nodes, jnp.arange(s)]]
        for name, group in (("ancestors", anc), ("descendants", desc), ("parallel", par)):
            w = group.astype(h.dtype)
            pooled = jnp.einsum("ns,nsh->sh", w, h)
            if self.agg == "mean":
                pooled = pooled / jnp.maximum(w.sum(0), 1.0)[:, None]
            parts.append(nn.relu(nn.Dense(self.hidden, name=name)(pooled)))
        return jnp.concatenate(parts, axis=-1)
