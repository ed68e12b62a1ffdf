"""MLP family: dense classifiers, optionally with micro-batches.

A feed-forward classifier of dense layers with an activation. Network: `depth` hidden layers `dense_0` ...
`dense_{depth-1}`, layer i mapping to round(width * taper^i) features (at least 8), optionally layer-normalised,
then the activation; `logits` (dense to the classes) and the mean softmax cross-entropy. With `micro_batches` M > 1
the batch is cut into M equal slices that run forward and backward separately and the loss is their mean, so the
gradient is accumulated over the slices before the one update (gradient accumulation, the GPipe micro-batch
structure): M parallel copies of the network in the graph, joined at the parameters and their gradients.

Shapes: inputs float32[B, F], labels int32[B]; a micro-batch is float32[B / M, F]. Layer scopes, in
order: `dense_0`, ..., `logits`.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from simulator.workloads.zoo import common

ACTIVATIONS = ("relu", "gelu", "tanh", "silu")  # MLPConfig.activation is a 1-based index into these


@dataclasses.dataclass(frozen=True)
class MLPConfig:
    """Size of an MLP program."""

    depth: int = 4
    """Hidden layers L."""
    width: int = 256
    """Features of the first hidden layer."""
    taper: float = 1.0
    """Width ratio of successive hidden layers (1: constant width; below 1: a narrowing funnel)."""
    batch: int = 64
    """Examples per batch B (a multiple of micro_batches)."""
    micro_batches: int = 1
    """Slices M the batch is cut into for gradient accumulation (1: none)."""
    in_features: int = 784
    """Input features F."""
    classes: int = 10
    """Number of classes."""
    layer_norm: bool = False
    """Layer normalisation between each hidden layer's dense and its activation."""
    activation: int = 1
    """1-based index into ACTIVATIONS (1 relu, 2 gelu, 3 tanh, 4 silu); graph files accept integers >= 1 only."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("momentum", 0.05)
    """SGD with momentum 0.9."""

    @classmethod
    def tiny(cls) -> "MLPConfig":
        """A CPU-cheap preset for tests."""
        return cls(depth=2, width=8, batch=4, micro_batches=2, in_features=6, classes=3)

    def widths(self) -> list[int]:
        """Features of each hidden layer: round(width * taper^i).

        At least 8, or `width` if that is smaller.
        """
        return [max(min(8, self.width), round(self.width * self.taper**i)) for i in range(self.depth)]


def activation_fn(index: int):
    """The activation function ACTIVATIONS[index - 1].

    Raises:
        ValueError: for an index outside 1..len(ACTIVATIONS).
    """
    if not 1 <= index <= len(ACTIVATIONS):
        raise ValueError(f"activation {index} is not in 1..{len(ACTIVATIONS)} ({', '.join(ACTIVATIONS)})")
    return getattr(jax.nn, ACTIVATIONS[index - 1])


class DenseBlock(nn.Module):
    """dense -> (layer norm) -> activation."""

    features: int
    layer_norm: bool
    activation: Callable[[jax.Array], jax.Array]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: float32[N, D] -> float32[N, features]."""
        x = nn.Dense(self.features, name="dense")(x)
        return self.activation(nn.LayerNorm(name="norm")(x) if self.layer_norm else x)


class MLP(nn.Module):
    """Dense layers -> logits; `__call__` returns the mean loss.

    The mean cross-entropy over the micro-batches.
    """

    config: MLPConfig

    @nn.compact
    def __call__(self, inputs: jax.Array, labels: jax.Array) -> jax.Array:
        """The training loss of a batch: the mean over its micro-batches.

        Args:
            inputs: float32[B, F].
            labels: int32[B].

        Returns:
            float32[] mean loss.
        """
        cfg = self.config
        act = activation_fn(cfg.activation)
        layers = [DenseBlock(w, cfg.layer_norm, act, name=f"dense_{i}") for i, w in enumerate(cfg.widths())]
        head = nn.Dense(cfg.classes, name="logits")
        losses = []
        for xs, ys in zip(jnp.split(inputs, cfg.micro_batches), jnp.split(labels, cfg.micro_batches)):
            for layer in layers:
                xs = layer(xs)  # float32[B / M, width_i]
            losses.append(optax.softmax_cross_entropy_with_integer_labels(head(xs), ys).mean())
        return sum(losses) / cfg.micro_batches


def layer_names(depth: int) -> list[str]:
    """Top-level scopes of a `depth`-layer MLP, in model order."""
    return [*(f"dense_{i}" for i in range(depth)), "logits"]


def example_batch(seed: int, cfg: MLPConfig) -> dict:
    """inputs float32[B, F] ~ N(0, 1), labels int32[B] uniform."""
    rng = common.numpy_rng(seed, common.DATA_STREAM)
    inputs = rng.standard_normal((cfg.batch, cfg.in_features), dtype="float32")
    return {"inputs": inputs, "labels": rng.integers(0, cfg.classes, size=(cfg.batch,), dtype="int32")}


def build_mlp(seed: int = 0, *, config: MLPConfig | None = None, **overrides) -> common.Program:
    """An MLP training step; `overrides` replace `config` fields.

    `config` defaults to `MLPConfig()`.

    Raises:
        ValueError: if micro_batches does not divide batch, or for an unknown activation.
    """
    cfg = dataclasses.replace(config or MLPConfig(), **overrides)
    if cfg.batch % cfg.micro_batches:
        raise ValueError(f"batch {cfg.batch} is not a multiple of micro_batches {cfg.micro_batches}")
    activation_fn(cfg.activation)
    meta = {"family": "mlp", "config": common.config_dict(cfg), "layers": layer_names(cfg.depth)}
    name = f"mlp_d{cfg.depth}_w{cfg.width}_b{cfg.batch}"
    return common.make_program(name, MLP(cfg), example_batch(seed, cfg), seed, cfg.optimizer, meta)
