"""RNNLM benchmark: a stacked, unrolled LSTM language model.

Zaremba et al. 2014 style, statically unrolled. Layer scopes, in order: `embedding`, `lstm_0` ... `lstm_{L-1}`,
`softmax`. The expert placement puts one LSTM layer per device, the embedding with the first and the softmax with
the last (`meta["layer_groups"]`).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from simulator.workloads.zoo import common
from simulator.workloads.zoo.rnn_layers import LSTMCell, SoftmaxLoss, lm_tokens, time_slices, unroll, zero_state


@dataclasses.dataclass(frozen=True)
class RNNLMConfig:
    """Size of the RNNLM program."""

    layers: int = 2
    """Number of stacked LSTM layers L (benchmarks: 2, 4, 8)."""
    steps: int = 20
    """Unrolled time steps T."""
    batch: int = 64
    """Sequences per batch B."""
    hidden: int = 128
    """LSTM width and embedding size H."""
    vocab: int = 1000
    """Vocabulary size V."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("sgd", 1.0, clip_norm=5.0)
    """SGD with gradient norm clipped to 5, as in Zaremba et al."""

    @classmethod
    def tiny(cls) -> "RNNLMConfig":
        """A CPU-cheap preset for tests."""
        return cls(layers=2, steps=3, batch=2, hidden=8, vocab=16)


class RNNLM(nn.Module):
    """Embedding -> L unrolled LSTM layers -> softmax cross-entropy."""

    config: RNNLMConfig

    @nn.compact
    def __call__(self, inputs: jax.Array, targets: jax.Array) -> jax.Array:
        """The mean next-token loss.

        Args:
            inputs, targets: int32[B, T].

        Returns:
            float32[] mean loss.
        """
        cfg = self.config
        xs = time_slices(nn.Embed(cfg.vocab, cfg.hidden, name="embedding")(inputs))
        for layer in range(cfg.layers):
            cell = LSTMCell(cfg.hidden, name=f"lstm_{layer}")
            _, xs = unroll(cell, zero_state(inputs.shape[0], cfg.hidden), xs)
        return SoftmaxLoss(cfg.vocab, name="softmax")(jnp.stack(xs, axis=1), targets)


def layer_names(layers: int) -> list[str]:
    """Top-level scopes of an L-layer RNNLM, in model order."""
    return ["embedding", *(f"lstm_{i}" for i in range(layers)), "softmax"]


def layer_groups(layers: int) -> list[list[str]]:
    """Expert grouping: one LSTM layer per group.

    The embedding with the first, the softmax with the last.
    """
    groups = [[f"lstm_{i}"] for i in range(layers)]
    groups[0].insert(0, "embedding")
    groups[-1].append("softmax")
    return groups


def build_rnnlm(seed: int = 0, *, config: RNNLMConfig | None = None, abstract: bool = False,
                **overrides) -> common.Program:
    """An RNNLM training step; `overrides` replace `config` fields.

    `config` defaults to `RNNLMConfig()`; `abstract` builds it by shape (simulator.workloads.zoo.common).
    """
    cfg = dataclasses.replace(config or RNNLMConfig(), **overrides)
    batch = lm_tokens(common.numpy_rng(seed, common.DATA_STREAM), cfg.batch, cfg.steps, cfg.vocab, abstract)
    meta = {
        "family": "rnnlm",
        "config": common.config_dict(cfg),
        "layers": layer_names(cfg.layers),
        "layer_groups": layer_groups(cfg.layers),
    }
    return common.make_program(f"rnnlm_l{cfg.layers}", RNNLM(cfg), batch, seed, cfg.optimizer, meta, abstract)
