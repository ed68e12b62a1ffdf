"""NASNet-A benchmark (Zoph et al. 2018): its cells in a CIFAR stack.

The published normal and reduction cells, in a CIFAR-style stack. The cells are encoded exactly as TF-slim's
`nasnet_utils.NasNetANormalCell` / `NasNetAReductionCell`: hidden state 0 is the (1x1-conv'd) previous cell output
h_{-1}, state 1 the cell before it h_{-2} (factorised-reduced if its resolution differs, 1x1-conv'd if its width
does); combination k applies operations[2k] to state hidden_indices[2k] and operations[2k+1] to state
hidden_indices[2k+1] and appends their sum; the output concatenates every state not marked in `used`. Ops reading
states 0/1 are strided in reduction cells.

Network (CIFAR NASNet-A): stem 3x3 conv; N normal cells, reduction, N normal, reduction, N normal (the
width doubles at each reduction); relu, global average pool, dense, softmax cross-entropy. Drop-path and
the auxiliary head are omitted. Layer scopes: `stem`, `cell_0`, ..., `classifier`.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from simulator.workloads.zoo import common
from simulator.workloads.zoo.cnn_layers import (
    Classifier,
    ConvBN,
    FactorizedReduce,
    ReLUConvBN,
    SepConv,
    cell_plan,
    image_batch,
    pool,
)


@dataclasses.dataclass(frozen=True)
class CellSpec:
    """A fixed NASNet cell in TF-slim's encoding."""

    operations: tuple[str, ...]
    hidden_indices: tuple[int, ...]
    used: tuple[int, ...]


NORMAL_CELL = CellSpec(
    operations=(
        "separable_5x5_2", "separable_3x3_2", "separable_5x5_2", "separable_3x3_2", "avg_pool_3x3",
        "none", "avg_pool_3x3", "avg_pool_3x3", "separable_3x3_2", "none",
    ),
    hidden_indices=(0, 1, 1, 1, 0, 1, 1, 1, 0, 0),
    used=(1, 0, 0, 0, 0, 0, 0),
)  # fmt: skip
REDUCTION_CELL = CellSpec(
    operations=(
        "separable_5x5_2", "separable_7x7_2", "max_pool_3x3", "separable_7x7_2", "avg_pool_3x3",
        "separable_5x5_2", "none", "avg_pool_3x3", "separable_3x3_2", "max_pool_3x3",
    ),
    hidden_indices=(0, 1, 0, 1, 0, 1, 3, 2, 2, 0),
    used=(1, 1, 1, 0, 0, 0, 0),
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class NASNetConfig:
    """Size of the NASNet-A program."""

    n_cells: int = 4
    """Normal cells per stage N (NASNet-A 6@768 on CIFAR uses N = 6)."""
    filters: int = 16
    """Per-branch width F of the first stage (doubled by each reduction; 32 in NASNet-A 6@768)."""
    stem_multiplier: int = 3
    """Stem width is stem_multiplier * F."""
    batch: int = 32
    """Images per batch."""
    image_size: int = 32
    """Square input resolution (CIFAR-10: 32)."""
    classes: int = 10
    """Number of classes."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("momentum", 0.025)
    """SGD with momentum 0.9, as the CIFAR NASNet training."""

    @classmethod
    def tiny(cls) -> "NASNetConfig":
        """A CPU-cheap preset for tests."""
        return cls(n_cells=1, filters=4, batch=2, image_size=8)


def apply_op(op: str, x: jax.Array, filters: int, stride: int, name: str) -> jax.Array:
    """One NASNet op, as slim's `_apply_conv_operation`.

    Call it inside a compact method.

    Raises:
        ValueError: for an unknown op.
    """
    if op.startswith("separable_"):
        return SepConv(filters, int(op[len("separable_")]), stride, name=name)(x)
    if op in ("avg_pool_3x3", "max_pool_3x3"):
        x = pool(op[:3], x, 3, stride)
        return x if x.shape[-1] == filters else ConvBN(filters, (1, 1), name=name)(x)
    if op == "none":
        if stride == 1 and x.shape[-1] == filters:
            return x
        return ReLUConvBN(filters, stride=stride, name=name)(x)
    raise ValueError(f"unknown op {op!r}")


class NASNetCell(nn.Module):
    """A NASNet-A cell; its output has F x (unused states) channels."""

    spec: CellSpec
    filters: int
    stride: int = 1

    @nn.compact
    def __call__(self, h_prev2: jax.Array | None, h_prev1: jax.Array) -> jax.Array:
        """The cell's output, from those of the two previous cells.

        Args:
            h_prev2: the output two cells back, NHWC; None for the first cell, which then reads the raw h_prev1
              as slim does.
            h_prev1: the previous cell's output, NHWC.

        Returns:
            float32[N, H/stride, W/stride, F * unused states].
        """
        if h_prev2 is None:
            h_prev2 = h_prev1
        elif h_prev2.shape[1] != h_prev1.shape[1]:
            h_prev2 = FactorizedReduce(self.filters, name="reduce_prev")(h_prev2)
        elif h_prev2.shape[-1] != self.filters:
            h_prev2 = ReLUConvBN(self.filters, name="reduce_prev")(h_prev2)
        states = [ReLUConvBN(self.filters, name="base")(h_prev1), h_prev2]
        ops, idx = self.spec.operations, self.spec.hidden_indices
        for k in range(len(ops) // 2):
            outs = []
            for side in (2 * k, 2 * k + 1):
                stride = self.stride if idx[side] < 2 else 1
                name = f"comb_{k}_{'left' if side % 2 == 0 else 'right'}"
                outs.append(apply_op(ops[side], states[idx[side]], self.filters, stride, name))
            states.append(outs[0] + outs[1])
        unused = []
        for i, (state, used) in enumerate(zip(states, self.spec.used)):
            if not used and state.shape[-1] != self.filters:  # only the first cell's raw h_{-2}
                state = ConvBN(self.filters, (1, 1), name=f"reduction_{i}")(state)
            if not used:
                unused.append(state)
        return jnp.concatenate(unused, axis=-1)


class NASNetA(nn.Module):
    """Stem -> NASNet-A cells -> classifier; `__call__` returns the loss."""

    config: NASNetConfig

    @nn.compact
    def __call__(self, images: jax.Array, labels: jax.Array) -> jax.Array:
        """The training loss of a batch.

        Args:
            images: float32[B, S, S, 3].
            labels: int32[B].

        Returns:
            float32[] mean loss.
        """
        cfg = self.config
        h_prev2, h_prev1 = None, ConvBN(cfg.stem_multiplier * cfg.filters, name="stem")(images)
        filters = cfg.filters
        for index, reduction in enumerate(cell_plan(cfg.n_cells)):
            filters *= 2 if reduction else 1
            spec, stride = (REDUCTION_CELL, 2) if reduction else (NORMAL_CELL, 1)
            cell = NASNetCell(spec, filters, stride, name=f"cell_{index}")
            h_prev2, h_prev1 = h_prev1, cell(h_prev2, h_prev1)
        return Classifier(cfg.classes, name="classifier")(h_prev1, labels)


def build_nasnet(seed: int = 0, *, config: NASNetConfig | None = None, **overrides) -> common.Program:
    """A NASNet-A training step; overrides replace NASNetConfig fields."""
    cfg = dataclasses.replace(config or NASNetConfig(), **overrides)
    plan = cell_plan(cfg.n_cells)
    batch = image_batch(common.numpy_rng(seed, common.DATA_STREAM), cfg.batch, cfg.image_size, cfg.classes)
    meta = {
        "family": "nasnet",
        "config": common.config_dict(cfg),
        "reduction_cells": [f"cell_{i}" for i, r in enumerate(plan) if r],
        "layers": ["stem", *(f"cell_{i}" for i in range(len(plan))), "classifier"],
    }
    return common.make_program("nasnet", NASNetA(cfg), batch, seed, cfg.optimizer, meta)
