"""GDP's network: GdpInputs -> per-node device logits.

One forward pass, no N x N array.

    GraphSAGE        placeto.gnn.MessagePassing with one state (S = 1): mean over parents and over children,
                     residual MLP, LayerNorm; O(E * H) per round.
    segment attention the nodes in topological order, cut into segments of L; each segment's queries attend
                     to its own keys and to those of the previous segment (the memory, under stop_gradient, as
                     in Transformer-XL). With one memory segment the memory of layer l is the previous
                     segment's input to layer l, so all segments run in parallel: O(N * 2L * H) per layer.
    device head      shared by all devices: an MLP of [node embedding, device features, device index embedding]
                     plus a dot product of a node query and a device key; padded devices get -1e9. Any
                     cluster of up to max_devices devices.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from placeto.gnn import MessagePassing, sinusoid
from placeto.methods.gdp.config import GdpConfig
from placeto.methods.gdp.inputs import GdpInputs

NEG = -1e9  # logit of a padded device
FINISH_WEIGHT_INIT = 20.0
"""A list decoder's initial weight of the finish gap (placeto.methods.gdp.decoder).

A device finishing half a cost unit later than the best starts e^-8 times less likely. With 4, a fresh policy's
samples were close to uniform on generated graphs, whose finish gaps are mostly transfers of about half a cost
unit, and PPO learned nothing from them. The load gap's weight starts at 0 and may turn negative (consolidate) or
positive (spread): experiments/results/ablations/gdp_decoder.md measures both directions helping on some graphs
and hurting on others, and random tie-breaking (the one pass's) ahead of both.
"""


class SegmentAttention(nn.Module):
    """One Transformer-XL style layer over the nodes in topological order.

    float32[Np, H] -> float32[Np, H], Np = G * L.
    """

    segment: int
    heads: int

    @nn.compact
    def __call__(self, x, mask):
        """Attend within and across segments: float32[Np, H] -> float32[Np, H].

        Args:
          x: float32[Np, H] the sequence.
          mask: bool[Np] real positions.
        """
        n, h = x.shape
        g, seg = n // self.segment, self.segment
        xs, ms = x.reshape(g, seg, h), mask.reshape(g, seg)
        # Memory: the previous segment, no gradient through it; the first segment's memory is masked out.
        mem = jax.lax.stop_gradient(jnp.concatenate([jnp.zeros_like(xs[:1]), xs[:-1]], axis=0))
        mem_mask = jnp.concatenate([jnp.zeros_like(ms[:1]), ms[:-1]], axis=0)
        pos = self.param("position", nn.initializers.normal(0.02), (2 * seg, h))  # [memory | own] slots
        kv = jnp.concatenate([mem, xs], axis=1) + pos  # [G, 2L, H]
        q = xs + pos[seg:]
        key_mask = jnp.concatenate([mem_mask, ms], axis=1)  # [G, 2L]
        att_mask = ms[:, None, :, None] & key_mask[:, None, None, :]  # [G, 1, L, 2L]
        y = nn.MultiHeadDotProductAttention(num_heads=self.heads, qkv_features=h, name="attention")(
            q, kv, mask=att_mask)
        z = nn.LayerNorm(name="norm1")(xs + y)
        f = nn.Dense(h, name="ff_out")(nn.relu(nn.Dense(2 * h, name="ff_in")(z)))
        out = nn.LayerNorm(name="norm2")(z + f)
        return (out * ms[..., None]).reshape(n, h)


class ConcatDense(nn.Module):
    """nn.Dense of concatenated `parts`, without concatenating.

    The concatenation is on the last axis.

    Each part is multiplied by its rows of the kernel and the products are broadcast-added. The parameters (names,
    shapes, initialisers) are nn.Dense's, so checkpoints are interchangeable. A part broadcast over an axis is
    multiplied once, not once per position of that axis: the device head's [node, device] inputs cost
    O(Np * H^2 + Np * Dm * H), not O(Np * Dm * H^2).
    """

    features: int

    @nn.compact
    def __call__(self, *parts):
        """Dense of the parts: float32[broadcast shape..., features].

        Args:
          parts: float32[..., F_i] arrays broadcastable against each other (but for the last axis).
        """
        widths = [p.shape[-1] for p in parts]
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (sum(widths), self.features))
        out, start = self.param("bias", nn.initializers.zeros_init(), (self.features,)), 0
        for p, w in zip(parts, widths):
            out = out + p @ kernel[start:start + w]
            start += w
        return out


class GdpNet(nn.Module):
    """GdpInputs -> logits float32[Np, Dm] (or scores and weights).

    Logits in node order: NEG on padded devices, 0 rows on padding nodes. With a list decoder (config.decoder
    "heft" or "etf"): (scores float32[Np, Dm], weights float32[Np, 2] of the finish gap (> 0) and of the load gap).
    """

    config: GdpConfig

    @nn.compact
    def __call__(self, x: GdpInputs):
        c = self.config
        h = MessagePassing(c.hidden, c.sage_rounds, name="sage")(
            x.nodes[:, None, :], x.senders, x.receivers, x.node_mask, x.inv_in_deg, x.inv_out_deg)[:, 0]
        seq, seq_mask = h[x.order] + sinusoid(h.shape[0], c.hidden), x.node_mask[x.order]
        for i in range(c.attn_layers):
            seq = SegmentAttention(c.segment, c.heads, name=f"segment_attention_{i}")(seq, seq_mask)
        z = jnp.concatenate([h, seq[x.position]], axis=-1)  # [Np, 2H]: local structure + sequence context
        n_dev = x.dev_feat.shape[1]
        dev_id = self.param("device_embedding", nn.initializers.normal(1.0), (c.max_devices, c.hidden))
        dev_in = (x.dev_feat, dev_id[None, :n_dev])  # [Np, Dm, 3] and [1, Dm, H]: each device's input, in parts
        dev_key = nn.Dense(c.hidden, name="device_key")(nn.relu(ConcatDense(c.hidden, name="device_hidden")(*dev_in)))
        node_query = nn.Dense(c.hidden, name="node_query")(z)  # [Np, H]
        # A dot product of node and device: an additive MLP of [node, device] alone would give every node the
        # same device preferences (experiments/README.md, "Figures behind design choices").
        bilinear = jnp.einsum("nh,ndh->nd", node_query, dev_key) / jnp.sqrt(c.hidden)
        hid = nn.relu(ConcatDense(c.hidden, name="head_hidden")(z[:, None, :], *dev_in))  # [Np, Dm, H]
        logits = nn.Dense(1, name="head_out")(hid)[..., 0] + bilinear  # [Np, Dm]
        if c.decoder == "independent":
            return jnp.where(x.dev_mask[None, :], logits, NEG)
        # A list decoder (placeto.methods.gdp.decoder): scores and load-gap weight start at 0 and the finish-gap
        # weight large, so that a fresh policy's greedy decoding is its list scheduler's placement exactly (ties
        # to the lower device) and its samples break the ties at random.
        gain = self.param("static_gain", nn.initializers.zeros_init(), ())
        bias = jnp.asarray([math.log(math.expm1(FINISH_WEIGHT_INIT)), 0.0])  # softplus(bias[0]) = the init
        raw = nn.Dense(2, name="list_weight", kernel_init=nn.initializers.zeros_init(), bias_init=lambda *_: bias)(z)
        weight = jnp.stack([nn.softplus(raw[:, 0]), raw[:, 1]], axis=-1)  # finish gap > 0, load gap of any sign
        return jnp.where(x.dev_mask[None, :], gain * logits, NEG), weight  # [Np, Dm], [Np, 2]


def make_net(config: GdpConfig) -> GdpNet:
    """The network of `config`'s model fields.

    Equal for configs that differ elsewhere: one compilation.
    """
    return GdpNet(config.model_config())


def heads(net: GdpNet, params, x: GdpInputs) -> tuple[jax.Array, jax.Array | None]:
    """(scores float32[Np, Dm], list-decoder weights float32[Np, 2] or None).

    None for the "independent" decoder.
    """
    out = net.apply(params, x)
    return out if isinstance(out, tuple) else (out, None)


def log_policy(net: GdpNet, params, x: GdpInputs, temperature: float = 1.0) -> jax.Array:
    """float32[Np, Dm] log-probs of each node's device at `temperature`.

    The softmax of the logits divided by `temperature` (> 1 flattens each node's distribution; the argmax does
    not change); padded devices ~ -1e9.
    """
    return jax.nn.log_softmax(net.apply(params, x) / temperature, axis=-1)


def sample(net: GdpNet, params, x: GdpInputs, key: jax.Array, batch: int) -> tuple[jax.Array, jax.Array]:
    """(placements int32[B, Np], greedy int32[Np]) from one forward pass.

    B placements drawn node by node from the policy, and the argmax placement.
    """
    logits = net.apply(params, x)
    draws = jax.random.categorical(key, logits[None], axis=-1, shape=(batch, logits.shape[0]))
    return draws.astype(jnp.int32), jnp.argmax(logits, axis=-1).astype(jnp.int32)
