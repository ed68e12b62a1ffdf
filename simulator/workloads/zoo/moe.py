"""MoE family: a token classifier of dense-dispatch MoE layers.

Mixture-of-experts layers, every expert running on every token. Network: `embedding` of tokens int32[B, T] to
float32[B, T, D], flattened to N = B * T tokens; then `moe_layers` residual MoE layers `moe_0`, ... (x +
MoE(LN(x))), and `head`: layer norm, projection to the vocabulary and the mean softmax cross-entropy against targets
int32[B, T].

MoE layer: a router (dense D -> E, softmax) gives each token E gate probabilities float32[N, E]; all but the
`top_k` largest are zeroed and the kept ones renormalised. Every expert `expert_e` (dense D -> hidden, gelu,
dense hidden -> D) runs on every token (dense dispatch: no gather, no capacity), and the layer output is the
gate-weighted sum of the E expert outputs float32[N, D]. The Switch-Transformer load-balancing loss
E * sum_e(share of the N * top_k token-to-expert assignments going to e * mean gate probability of e), scaled by
`balance_weight`, is added to the training loss. Adam updates every parameter.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from simulator.workloads.zoo import common
from simulator.workloads.zoo.transformer import LMHead


@dataclasses.dataclass(frozen=True)
class MoEConfig:
    """Size of a mixture-of-experts program."""

    experts: int = 4
    """Experts E per MoE layer."""
    top_k: int = 2
    """Gates kept per token (at most E)."""
    moe_layers: int = 1
    """Stacked MoE layers."""
    d_model: int = 64
    """Token width D."""
    hidden: int = 128
    """Hidden width of each expert's MLP."""
    seq_len: int = 32
    """Tokens per sequence T."""
    batch: int = 8
    """Sequences per batch B."""
    vocab: int = 512
    """Vocabulary size V of the inputs and targets."""
    balance_weight: float = 0.01
    """Weight of the load-balancing loss."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("adam", 1e-3)
    """Adam."""

    @classmethod
    def tiny(cls) -> "MoEConfig":
        """A CPU-cheap preset for tests."""
        return cls(experts=2, top_k=1, d_model=8, hidden=8, seq_len=3, batch=2, vocab=16)


class Expert(nn.Module):
    """One expert: dense -> gelu -> dense."""

    hidden: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: float32[N, D] -> float32[N, D]."""
        h = jax.nn.gelu(nn.Dense(self.hidden, name="dense_in")(x))
        return nn.Dense(x.shape[-1], name="dense_out")(h)


class MoELayer(nn.Module):
    """Top-k router and E dense-dispatch experts: (output, balance loss)."""

    experts: int
    top_k: int
    hidden: int

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The gate-weighted sum of the experts, and the balance loss.

        x: float32[N, D] -> (float32[N, D] output, float32[] load-balancing loss).
        """
        probs = jax.nn.softmax(nn.Dense(self.experts, name="router")(x), axis=-1)  # float32[N, E]
        _, chosen = jax.lax.top_k(probs, self.top_k)  # int32[N, k]
        kept = jax.nn.one_hot(chosen, self.experts, dtype=probs.dtype).sum(axis=1)  # float32[N, E] of 0/1
        gates = probs * kept
        gates = gates / gates.sum(axis=-1, keepdims=True)
        out = sum(gates[:, e:e + 1] * Expert(self.hidden, name=f"expert_{e}")(x) for e in range(self.experts))
        balance = self.experts * jnp.sum(kept.mean(axis=0) / self.top_k * probs.mean(axis=0))
        return out, balance


class MoEBlock(nn.Module):
    """Residual pre-LN MoE layer."""

    experts: int
    top_k: int
    hidden: int

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """x: float32[N, D] -> (float32[N, D], float32[] balance loss)."""
        out, balance = MoELayer(self.experts, self.top_k, self.hidden, name="moe")(nn.LayerNorm(name="norm")(x))
        return x + out, balance


class MoENet(nn.Module):
    """Embedding -> MoE layers -> head; `__call__` returns the loss."""

    config: MoEConfig

    @nn.compact
    def __call__(self, inputs: jax.Array, targets: jax.Array) -> jax.Array:
        """The training loss: cross-entropy plus the weighted balance loss.

        Args:
            inputs, targets: int32[B, T].

        Returns:
            float32[] loss.
        """
        cfg = self.config
        x = nn.Embed(cfg.vocab, cfg.d_model, name="embedding")(inputs.reshape(-1))  # float32[N, D]
        balance = 0.0
        for i in range(cfg.moe_layers):
            x, layer_balance = MoEBlock(cfg.experts, cfg.top_k, cfg.hidden, name=f"moe_{i}")(x)
            balance = balance + layer_balance
        return LMHead(cfg.vocab, name="head")(x, targets.reshape(-1)) + cfg.balance_weight * balance


def layer_names(cfg: MoEConfig) -> list[str]:
    """Top-level scopes of the program, in model order."""
    return ["embedding", *(f"moe_{i}" for i in range(cfg.moe_layers)), "head"]


def example_batch(seed: int, cfg: MoEConfig) -> dict:
    """Random tokens: inputs and next-token targets int32[B, T]."""
    rng = common.numpy_rng(seed, common.DATA_STREAM)
    tokens = rng.integers(0, cfg.vocab, size=(cfg.batch, cfg.seq_len + 1), dtype="int32")
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}


def build_moe(seed: int = 0, *, config: MoEConfig | None = None, **overrides) -> common.Program:
    """A mixture-of-experts training step; `overrides` replace fields.

    Fields of `config`, which defaults to `MoEConfig()`.

    Raises:
        ValueError: if top_k exceeds the number of experts.
    """
    cfg = dataclasses.replace(config or MoEConfig(), **overrides)
    if cfg.top_k > cfg.experts:
        raise ValueError(f"top_k {cfg.top_k} exceeds experts {cfg.experts}")
    meta = {"family": "moe", "config": common.config_dict(cfg), "layers": layer_names(cfg)}
    name = f"moe_e{cfg.experts}_k{cfg.top_k}_l{cfg.moe_layers}_d{cfg.d_model}"
    return common.make_program(name, MoENet(cfg), example_batch(seed, cfg), seed, cfg.optimizer, meta)
