"""NMT: a GNMT-lite encoder-decoder LSTM with attention, unrolled.

Luong attention; every time step statically unrolled.

Structure (TensorFlow NMT tutorial with attention): source and target embeddings; L encoder LSTM layers
over the source; L decoder LSTM layers whose initial states are the encoder's final states; at every
decoder step Luong "general" attention of the top decoder output over all encoder outputs, giving the
attentional state tanh(W_c [context; h]) that is fed to the next step's bottom layer (input feeding) and
to the output projection + softmax cross-entropy.

Layer scopes, in order: `encoder_embedding`, `encoder_lstm_{0..L-1}`, `decoder_embedding`,
`decoder_lstm_{0..L-1}`, `attention`, `softmax`. The GNMT expert placement (`meta["layer_groups"]`) puts
encoder and decoder layer i on device i, embeddings with layer 0, attention and softmax with layer L-1.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from simulator.workloads.zoo import common
from simulator.workloads.zoo.rnn_layers import LSTMCell, LSTMState, SoftmaxLoss, time_slices, unroll, zero_state


@dataclasses.dataclass(frozen=True)
class NMTConfig:
    """Size of the NMT program."""

    layers: int = 2
    """LSTM layers L in the encoder and, separately, in the decoder (benchmarks: 2, 4, 8)."""
    src_len: int = 30
    """Unrolled source length S."""
    tgt_len: int = 30
    """Unrolled target length T (the "RNN length" varied by the nmt family)."""
    batch: int = 64
    """Sentence pairs per batch B."""
    hidden: int = 128
    """LSTM, embedding and attention width H."""
    vocab: int = 1000
    """Source and target vocabulary size V."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("sgd", 1.0, clip_norm=5.0)
    """SGD with gradient norm clipped to 5, as in the TensorFlow NMT tutorial."""

    @classmethod
    def tiny(cls) -> "NMTConfig":
        """A CPU-cheap preset for tests."""
        return cls(layers=2, src_len=3, tgt_len=3, batch=2, hidden=8, vocab=16)


class LuongAttention(nn.Module):
    """Luong "general" attention producing the attentional hidden state."""

    hidden: int
    """Width H of the attentional state."""

    @nn.compact
    def __call__(self, query: jax.Array, memory: jax.Array) -> jax.Array:
        """The attentional state tanh(W_c [context; query]).

        Args:
            query: float32[B, H], the top decoder output.
            memory: float32[B, S, H], the encoder outputs.

        Returns:
            float32[B, H] attentional state.
        """
        keys = nn.Dense(memory.shape[-1], use_bias=False, name="query")(query)  # float32[B, H]
        scores = jnp.einsum("bsh,bh->bs", memory, keys)
        weights = jax.nn.softmax(scores, axis=-1)  # float32[B, S]
        context = jnp.einsum("bs,bsh->bh", weights, memory)
        combined = jnp.concatenate([context, query], axis=-1)
        return jnp.tanh(nn.Dense(self.hidden, use_bias=False, name="output")(combined))


class NMT(nn.Module):
    """Encoder-decoder LSTM with attention; `__call__` returns the loss."""

    config: NMTConfig

    @nn.compact
    def __call__(self, source: jax.Array, target_in: jax.Array, target_out: jax.Array) -> jax.Array:
        """The mean per-token cross-entropy of a batch.

        Args:
            source: int32[B, S].
            target_in, target_out: int32[B, T], shifted by one.

        Returns:
            float32[] mean per-token cross-entropy.
        """
        cfg = self.config
        batch = source.shape[0]
        xs = time_slices(nn.Embed(cfg.vocab, cfg.hidden, name="encoder_embedding")(source))
        finals = []
        for layer in range(cfg.layers):
            cell = LSTMCell(cfg.hidden, name=f"encoder_lstm_{layer}")
            final, xs = unroll(cell, zero_state(batch, cfg.hidden), xs)
            finals.append(final)
        memory = jnp.stack(xs, axis=1)  # float32[B, S, H]
        ys = time_slices(nn.Embed(cfg.vocab, cfg.hidden, name="decoder_embedding")(target_in))
        outputs = self.decode(ys, finals, memory)
        return SoftmaxLoss(cfg.vocab, name="softmax")(jnp.stack(outputs, axis=1), target_out)

    @nn.nowrap  # a helper of the compact method: no extra name scope
    def decode(self, ys: list[jax.Array], states: list[LSTMState], memory: jax.Array) -> list[jax.Array]:
        """Unrolled decoder with input feeding: T attentional states.

        ys: T x float32[B, H]; returns T x float32[B, H].
        """
        cfg = self.config
        cells = [LSTMCell(cfg.hidden, name=f"decoder_lstm_{i}") for i in range(cfg.layers)]
        attention = LuongAttention(cfg.hidden, name="attention")
        attentional = jnp.zeros_like(ys[0])
        outputs = []
        for y in ys:
            x = jnp.concatenate([y, attentional], axis=-1)
            for i, cell in enumerate(cells):
                states[i] = cell(states[i], x)
                x = states[i].h
            attentional = attention(x, memory)
            outputs.append(attentional)
        return outputs


def layer_names(layers: int) -> list[str]:
    """Top-level scopes of an L-layer NMT, in model order."""
    return [
        "encoder_embedding",
        *(f"encoder_lstm_{i}" for i in range(layers)),
        "decoder_embedding",
        *(f"decoder_lstm_{i}" for i in range(layers)),
        "attention",
        "softmax",
    ]


def layer_groups(layers: int) -> list[list[str]]:
    """GNMT expert grouping: encoder and decoder layer i together.

    The embeddings with layer 0, attention and softmax with the last.
    """
    groups = [[f"encoder_lstm_{i}", f"decoder_lstm_{i}"] for i in range(layers)]
    groups[0] = ["encoder_embedding", "decoder_embedding", *groups[0]]
    groups[-1] += ["attention", "softmax"]
    return groups


def example_batch(seed: int, cfg: NMTConfig, abstract: bool = False) -> dict:
    """Random sentence pairs: source int32[B, S], targets int32[B, T].

    target_in and target_out, shifted by one. With `abstract`, their jax.ShapeDtypeStructs (nothing drawn).
    """
    if abstract:
        shapes = {"source": cfg.src_len, "target_in": cfg.tgt_len, "target_out": cfg.tgt_len}
        return {k: jax.ShapeDtypeStruct((cfg.batch, n), jnp.int32) for k, n in shapes.items()}
    rng = common.numpy_rng(seed, common.DATA_STREAM)
    source = rng.integers(0, cfg.vocab, size=(cfg.batch, cfg.src_len), dtype="int32")
    target = rng.integers(0, cfg.vocab, size=(cfg.batch, cfg.tgt_len + 1), dtype="int32")
    return {"source": source, "target_in": target[:, :-1], "target_out": target[:, 1:]}


def build_nmt(seed: int = 0, *, config: NMTConfig | None = None, abstract: bool = False,
              **overrides) -> common.Program:
    """An NMT training step; `overrides` replace `config` fields.

    `config` defaults to `NMTConfig()`; `abstract` builds it by shape (simulator.workloads.zoo.common).
    """
    cfg = dataclasses.replace(config or NMTConfig(), **overrides)
    meta = {
        "family": "nmt",
        "config": common.config_dict(cfg),
        "layers": layer_names(cfg.layers),
        "layer_groups": layer_groups(cfg.layers),
    }
    name = f"nmt_l{cfg.layers}_s{cfg.src_len}_t{cfg.tgt_len}_b{cfg.batch}"
    return common.make_program(name, NMT(cfg), example_batch(seed, cfg, abstract), seed, cfg.optimizer, meta,
                               abstract)
