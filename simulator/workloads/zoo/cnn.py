"""CNN family: a plain VGG-style convolutional classifier.

No batch norm, no branches. Network: `stages` stages; stage s holds `convs` KxK convolutions with bias and relu
(`conv_{s}_{j}`, width channels * 2^s, stride 1, SAME padding) and ends with 2x2 max pooling (stride 2), so stage s
sees float32[B, S / 2^s, S / 2^s, channels * 2^s] (sizes rounded up); then the feature map is flattened, `dense`
(relu, `dense_width` features) and `logits` (dense to the classes) give the mean softmax cross-entropy against
labels int32[B]. Images are NHWC float32[B, S, S, 3]. With `micro_batches` M > 1 the batch is cut into M slices
float32[B / M, S, S, 3] that run forward and backward separately and the loss is their mean (gradient accumulation
before the one update), so the graph holds M parallel copies of the network. Layer scopes, in order: `conv_0_0`,
..., `dense`, `logits`. SGD with momentum updates every parameter.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from simulator.workloads.zoo import common
from simulator.workloads.zoo.cnn_layers import image_batch, pool


@dataclasses.dataclass(frozen=True)
class CNNConfig:
    """Size of a plain CNN program."""

    stages: int = 3
    """Conv stages, each ending with a 2x2 max pool."""
    convs: int = 2
    """Convolutions per stage."""
    channels: int = 16
    """Width of the first stage; each later stage doubles it."""
    kernel: int = 3
    """Square kernel size K of every convolution."""
    image_size: int = 32
    """Square input resolution S."""
    batch: int = 32
    """Images per batch B (a multiple of micro_batches)."""
    micro_batches: int = 1
    """Slices M the batch is cut into for gradient accumulation (1: none)."""
    dense_width: int = 128
    """Features of the hidden dense layer."""
    classes: int = 10
    """Number of classes."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("momentum", 0.01)
    """SGD with momentum 0.9."""

    @classmethod
    def tiny(cls) -> "CNNConfig":
        """A CPU-cheap preset for tests."""
        return cls(stages=2, convs=1, channels=4, image_size=8, batch=4, micro_batches=2, dense_width=8)


class PlainCNN(nn.Module):
    """Conv stages -> dense -> logits; `__call__` returns the loss."""

    config: CNNConfig

    @nn.compact
    def __call__(self, images: jax.Array, labels: jax.Array) -> jax.Array:
        """The training loss of a batch: the mean over its micro-batches.

        Args:
            images: float32[B, S, S, 3].
            labels: int32[B].

        Returns:
            float32[] mean loss.
        """
        cfg = self.config
        k = (cfg.kernel, cfg.kernel)
        convs = [[nn.Conv(cfg.channels * 2**s, k, padding="SAME", name=f"conv_{s}_{j}") for j in range(cfg.convs)]
                 for s in range(cfg.stages)]
        dense, head = nn.Dense(cfg.dense_width, name="dense"), nn.Dense(cfg.classes, name="logits")
        losses = []
        for x, ys in zip(jnp.split(images, cfg.micro_batches), jnp.split(labels, cfg.micro_batches)):
            for stage in convs:
                for conv in stage:
                    x = jax.nn.relu(conv(x))
                x = pool("max", x, window=2, stride=2)  # float32[B / M, S / 2^(s+1), S / 2^(s+1), C * 2^s]
            logits = head(jax.nn.relu(dense(x.reshape(x.shape[0], -1))))
            losses.append(optax.softmax_cross_entropy_with_integer_labels(logits, ys).mean())
        return sum(losses) / cfg.micro_batches


def layer_names(cfg: CNNConfig) -> list[str]:
    """Top-level scopes of the program, in model order."""
    convs = [f"conv_{s}_{j}" for s in range(cfg.stages) for j in range(cfg.convs)]
    return [*convs, "dense", "logits"]


def build_cnn(seed: int = 0, *, config: CNNConfig | None = None, **overrides) -> common.Program:
    """A plain CNN training step; `overrides` replace `config` fields.

    `config` defaults to `CNNConfig()`.

    Raises:
        ValueError: if micro_batches does not divide batch.
    """
    cfg = dataclasses.replace(config or CNNConfig(), **overrides)
    if cfg.batch % cfg.micro_batches:
        raise ValueError(f"batch {cfg.batch} is not a multiple of micro_batches {cfg.micro_batches}")
    batch = image_batch(common.numpy_rng(seed, common.DATA_STREAM), cfg.batch, cfg.image_size, cfg.classes)
    meta = {"family": "cnn", "config": common.config_dict(cfg), "layers": layer_names(cfg)}
    name = f"cnn_s{cfg.stages}x{cfg.convs}_c{cfg.channels}_i{cfg.image_size}"
    return common.make_program(name, PlainCNN(cfg), batch, seed, cfg.optimizer, meta)
