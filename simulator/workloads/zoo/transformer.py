"""Transformer family: pre-LN blocks as a causal LM or encoder stack.

Block (`block_i`): x + attention(LN(x)), then x + MLP(LN(x)); attention is multi-head scaled dot-product
attention with separate query/key/value/output projections (heads H, head width D / H), the MLP is
dense(mlp_ratio * D) -> gelu -> dense(D).

Two programs, by `lm`:
  * language model (full layers): `embedding` (token plus learned position embeddings) of tokens int32[B, T],
    `layers` blocks with causal attention, then `head`: final layer norm, projection to the vocabulary and the
    mean next-token softmax cross-entropy against targets int32[B, T];
  * encoder blocks: `layers` blocks with bidirectional attention on features float32[B, T, D], then `head`:
    final layer norm and a dense regression to targets float32[B, T, D] (mean squared error).

Activations are float32[B, T, D] between blocks, attention scores float32[B, H, T, T]. Layer scopes, in order:
(`embedding`,) `block_0` ... `block_{L-1}`, `head`. Adam updates every parameter.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from simulator.workloads.zoo import common


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Size of a transformer program."""

    d_model: int = 128
    """Model width D (a multiple of heads)."""
    heads: int = 4
    """Attention heads H."""
    layers: int = 2
    """Transformer blocks L."""
    seq_len: int = 64
    """Sequence length T."""
    batch: int = 8
    """Sequences per batch B."""
    mlp_ratio: int = 4
    """Hidden width of each block's MLP, in multiples of D."""
    lm: bool = True
    """Causal language model with embeddings and a vocabulary softmax (else encoder blocks with a regression)."""
    vocab: int = 1000
    """Vocabulary size V (language model only)."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("adam", 1e-3)
    """Adam."""

    @classmethod
    def tiny(cls) -> "TransformerConfig":
        """A CPU-cheap preset for tests."""
        return cls(d_model=8, heads=2, layers=1, seq_len=4, batch=2, mlp_ratio=2, vocab=16)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention."""

    heads: int
    causal: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: float32[B, T, D] -> float32[B, T, D]."""
        batch, length, width = x.shape
        head_width = width // self.heads

        def project(name: str) -> jax.Array:  # float32[B, T, H, D / H]
            return nn.Dense(width, name=name)(x).reshape(batch, length, self.heads, head_width)

        q, k, v = project("query"), project("key"), project("value")
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(head_width)  # float32[B, H, T, T]
        if self.causal:
            mask = np.tril(np.ones((length, length), dtype=bool))
            scores = jnp.where(mask, scores, -1e9)
        weights = jax.nn.softmax(scores, axis=-1)
        context = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, length, width)
        return nn.Dense(width, name="output")(context)


class Block(nn.Module):
    """Pre-LN block: attention and MLP sublayers, each with a residual."""

    heads: int
    mlp_ratio: int
    causal: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: float32[B, T, D] -> float32[B, T, D]."""
        width = x.shape[-1]
        x = x + SelfAttention(self.heads, self.causal, name="attention")(nn.LayerNorm(name="norm_0")(x))
        h = nn.Dense(self.mlp_ratio * width, name="mlp_in")(nn.LayerNorm(name="norm_1")(x))
        return x + nn.Dense(width, name="mlp_out")(jax.nn.gelu(h))


class LMHead(nn.Module):
    """Final layer norm, vocabulary projection, mean cross-entropy."""

    vocab: int

    @nn.compact
    def __call__(self, x: jax.Array, targets: jax.Array) -> jax.Array:
        """The mean softmax cross-entropy of `x` against `targets`.

        Args:
            x: float32[..., D].
            targets: int32[...].

        Returns:
            float32[] mean loss.
        """
        logits = nn.Dense(self.vocab, name="projection")(nn.LayerNorm(name="norm")(x))  # float32[..., V]
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


class RegressionHead(nn.Module):
    """Final layer norm, dense regression and mean squared error."""

    @nn.compact
    def __call__(self, x: jax.Array, targets: jax.Array) -> jax.Array:
        """The mean squared error of the regression of `x`.

        Args:
            x, targets: float32[B, T, D].

        Returns:
            float32[] mean squared error.
        """
        y = nn.Dense(x.shape[-1], name="projection")(nn.LayerNorm(name="norm")(x))
        return jnp.mean(jnp.square(y - targets))


class Embedding(nn.Module):
    """Token plus learned position embeddings."""

    vocab: int
    width: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        """tokens int32[B, T] -> float32[B, T, D]."""
        positions = nn.Embed(tokens.shape[1], self.width, name="position")(jnp.arange(tokens.shape[1]))
        return nn.Embed(self.vocab, self.width, name="token")(tokens) + positions


class Transformer(nn.Module):
    """(Embedding ->) L blocks -> head; `__call__` returns the loss."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, inputs: jax.Array, targets: jax.Array) -> jax.Array:
        """The training loss of a batch.

        Args:
            inputs: int32[B, T] tokens (lm) or float32[B, T, D] features.
            targets: of the same shape.

        Returns:
            float32[] mean cross-entropy (lm) or mean squared error.
        """
        cfg = self.config
        x = Embedding(cfg.vocab, cfg.d_model, name="embedding")(inputs) if cfg.lm else inputs
        for i in range(cfg.layers):
            x = Block(cfg.heads, cfg.mlp_ratio, cfg.lm, name=f"block_{i}")(x)
        head = LMHead(cfg.vocab, name="head") if cfg.lm else RegressionHead(name="head")
        return head(x, targets)


def layer_names(cfg: TransformerConfig) -> list[str]:
    """Top-level scopes of the program, in model order."""
    return [*(["embedding"] if cfg.lm else []), *(f"block_{i}" for i in range(cfg.layers)), "head"]


def example_batch(seed: int, cfg: TransformerConfig, abstract: bool = False) -> dict:
    """Example batch: tokens (lm) or N(0, 1) features, with targets.

    lm: inputs and next-token targets int32[B, T]; else inputs and targets float32[B, T, D] ~ N(0, 1). With
    `abstract`, their jax.ShapeDtypeStructs (nothing drawn).
    """
    if abstract:
        shape, dtype = ((cfg.batch, cfg.seq_len), jnp.int32) if cfg.lm else \
            ((cfg.batch, cfg.seq_len, cfg.d_model), jnp.float32)
        return {k: jax.ShapeDtypeStruct(shape, dtype) for k in ("inputs", "targets")}
    rng = common.numpy_rng(seed, common.DATA_STREAM)
    if cfg.lm:
        tokens = rng.integers(0, cfg.vocab, size=(cfg.batch, cfg.seq_len + 1), dtype="int32")
        return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}
    shape = (cfg.batch, cfg.seq_len, cfg.d_model)
    return {"inputs": rng.standard_normal(shape, dtype="float32"),
            "targets": rng.standard_normal(shape, dtype="float32")}


def build_transformer(seed: int = 0, *, config: TransformerConfig | None = None, abstract: bool = False,
                      **overrides) -> common.Program:
    """A transformer training step; `overrides` replace `config` fields.

    `config` defaults to `TransformerConfig()`; `abstract` builds it by shape (simulator.workloads.zoo.common).

    Raises:
        ValueError: if heads does not divide d_model.
    """
    cfg = dataclasses.replace(config or TransformerConfig(), **overrides)
    if cfg.d_model % cfg.heads:
        raise ValueError(f"d_model {cfg.d_model} is not a multiple of heads {cfg.heads}")
    meta = {"family": "transformer", "config": common.config_dict(cfg), "layers": layer_names(cfg)}
    name = f"transformer_{'lm' if cfg.lm else 'enc'}_l{cfg.layers}_d{cfg.d_model}_t{cfg.seq_len}"
    return common.make_program(name, Transformer(cfg), example_batch(seed, cfg, abstract), seed, cfg.optimizer,
                               meta, abstract)
