"""The seeds' seq2seq placer: items in, one device per item out.

That of seeds 000/002, and the Placer of 001.

    encoder   a bidirectional LSTM over the item sequence (flax OptimizedLSTMCell under nn.RNN: a lax.scan),
              projected to `hidden`: the attention memory float32[Bi, T, H]
    decoder   an LSTM scanned over the items (nn.scan); its input at step t is [embedding of the device given to
              item t - 1 (a start token at t = 0), encoder state t]; its output attends over the whole memory
              (Luong's general attention), and [output, context] -> tanh layer -> logits over the devices

One decoder serves three modes: "sample" (each item's device drawn from its distribution, given the devices drawn
before it), "greedy" (argmax) and "forced" (the given devices, for the log-probabilities REINFORCE needs). Padding
items (mask False, at the end of the sequence) get device 0, log-probability 0 and entropy 0.

Cost: O(T * (B * H^2 + B * T * H)) per pass for B placements of T items; nothing is N x N in the ops.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

NEG = -1e9  # attention score of a padding item

MODES = ("sample", "greedy", "forced")


def clip_logits(logits: jax.Array, clip: float) -> jax.Array:
    """Bound logits to +-clip: clip * tanh(logits / clip).

    The identity for clip = 0.

    No decision becomes certain (two devices: p <= 1 / (1 + e^(-2 clip))) and sampling keeps exploring, as
    Google's RL controllers of the same years (NAS, ENAS: "tanh constant") do.
    """
    return logits if clip <= 0 else clip * jnp.tanh(logits / clip)


class Decoded(NamedTuple):
    """B placements of T items (padding items: device 0, zeros)."""

    actions: jax.Array  # int32[B, T] device of each item
    logp: jax.Array  # float32[B, T] log-probability of that device, nats
    entropy: jax.Array  # float32[B, T] entropy of the item's device distribution, nats


class DecoderStep(nn.Module):
    """One decoder step for B placements.

    Carry: ((c, h) float32[B, H] each, previous device int32[B]).
    """

    hidden: int
    devices: int
    mode: str
    logit_clip: float = 0.0
    stay_prior: float = 0.0

    @nn.compact
    def __call__(self, carry, xs, memory, mem_mask):
        """Decode one item for B placements.

        Args:
          carry: ((c, h) float32[B, H] each, previous device int32[B]).
          xs: (encoder state float32[Bi, H], key, forced device int32[B], real item bool[]).
          memory: float32[Bi, T, H] the encoder's states.
          mem_mask: bool[T] real items.

        Returns:
          (carry, (device int32[B], log-probability float32[B], entropy float32[B])).
        """
        (lstm, prev), (enc_t, key, forced, real) = carry, xs
        b = prev.shape[0]
        prev_emb = nn.Embed(self.devices + 1, self.hidden, name="device")(prev)  # id `devices`: the start token
        inp = jnp.concatenate([prev_emb, jnp.broadcast_to(enc_t, (b, enc_t.shape[-1]))], axis=-1)
        lstm, h = nn.OptimizedLSTMCell(self.hidden, name="lstm")(lstm, inp)
        q = nn.Dense(memory.shape[-1], use_bias=False, name="query")(h) / math.sqrt(memory.shape[-1])  # [B, H]
        if memory.shape[0] == 1:  # one memory for all B placements (rnn): plain matrix products
            score = jnp.where(mem_mask[None, :], q @ memory[0].T, NEG)  # [B, T]
            context = jax.nn.softmax(score, axis=-1) @ memory[0]  # [B, H]
        else:
            score = jnp.where(mem_mask[None, :], jnp.einsum("bth,bh->bt", memory, q), NEG)
            context = jnp.einsum("bt,bth->bh", jax.nn.softmax(score, axis=-1), memory)
        out = jnp.tanh(nn.Dense(self.hidden, name="combine")(jnp.concatenate([h, context], axis=-1)))
        logits = clip_logits(nn.Dense(self.devices, name="logits")(out), self.logit_clip)
        stay = (prev[:, None] == jnp.arange(self.devices)[None, :]).astype(logits.dtype)  # 0 after the start token
        logp = jax.nn.log_softmax(logits + self.stay_prior * stay, axis=-1)  # [B, D]
        if self.mode == "sample":
            action = jax.random.categorical(key, logp, axis=-1)
        elif self.mode == "greedy":
            action = jnp.argmax(logp, axis=-1)
        else:
            action = forced
        action = jnp.where(real, action, 0).astype(jnp.int32)
        taken = jnp.where(real, jnp.take_along_axis(logp, action[:, None], axis=-1)[:, 0], 0.0)
        entropy = jnp.where(real, -(jnp.exp(logp) * logp).sum(-1), 0.0)
        prev = jnp.where(real, action, prev)
        return (lstm, prev), (action, taken, entropy)


class Seq2Seq(nn.Module):
    """Item embeddings + mask -> Decoded for B placements.

    Items float32[Bi, T, F] (Bi = 1 or B), mask bool[T].
    """

    hidden: int
    devices: int
    logit_clip: float = 0.0  # see `clip_logits`
    stay_prior: float = 0.0  # a fixed bonus to the logit of the previous item's device

    @nn.compact
    def __call__(self, items, mask, mode: str, key: jax.Array, forced: jax.Array) -> Decoded:
        """Decode B placements of the items.

        Args:
          items: float32[Bi, T, F] in sequence order; Bi = 1 when every placement shares the items (rnn).
          mask: bool[T] real items (padding at the end).
          mode: "sample", "greedy" or "forced" (a Python string: a static choice).
          key: the sampling key (ignored unless mode is "sample").
          forced: int32[B, T] devices to score in "forced" mode; its shape gives B in every mode.
        """
        if mode not in MODES:
            raise ValueError(f"Seq2Seq: mode must be one of {MODES}, got {mode!r}")
        b, t = forced.shape
        bi, h = items.shape[0], self.hidden
        x = nn.Dense(h, name="item_in")(items)
        lengths = jnp.full((bi,), mask.sum(), jnp.int32)
        cell_f, cell_b = nn.OptimizedLSTMCell(h, name="encoder_fwd"), nn.OptimizedLSTMCell(h, name="encoder_bwd")
        last, fwd = nn.RNN(cell_f, return_carry=True)(x, seq_lengths=lengths)
        bwd = nn.RNN(cell_b, reverse=True, keep_order=True)(x, seq_lengths=lengths)
        memory = nn.Dense(h, name="memory")(jnp.concatenate([fwd, bwd], axis=-1)) * mask[None, :, None]
        start = jax.tree.map(lambda c: jnp.broadcast_to(c, (b, h)), last)  # decoder starts from the encoder's end
        carry = (start, jnp.full((b,), self.devices, jnp.int32))
        xs = (jnp.swapaxes(memory, 0, 1), jax.random.split(key, t), jnp.swapaxes(forced, 0, 1), mask)
        scan = nn.scan(DecoderStep, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=(0, nn.broadcast, nn.broadcast), out_axes=0)
        step = scan(h, self.devices, mode, self.logit_clip, self.stay_prior, name="decoder")
        _, (actions, logp, entropy) = step(carry, xs, memory, mask)
        return Decoded(actions.T, logp.T, entropy.T)
