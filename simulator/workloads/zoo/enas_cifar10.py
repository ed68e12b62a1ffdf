"""ENAS-CIFAR10 family: CNNs of conv cells drawn from ENAS's space.

The cells are sampled in the ENAS micro search space. A cell (Pham et al. 2018, Sec. 2.3) has two inputs, the
outputs h_{-2}, h_{-1} of the two previous cells (indices 0 and 1), and `n_nodes` nodes; node j (index j + 2) picks
two inputs among indices < j + 2 and one op for each from OPS, and sums the two results. The cell output
concatenates the nodes no other node reads and a 1x1 conv maps it back to the cell width. In a reduction cell the
ops reading the cell inputs have stride 2 and the width doubles. Sampling is uniform, as the untrained ENAS
controller; the normal and reduction cells of one network are sampled independently from the seed's architecture
stream.

Network: stem 3x3 conv; three stages of `n_cells` normal cells with a reduction cell before stages 2 and
3; relu, global average pool, dense, softmax cross-entropy. Layer scopes: `stem`, `cell_0`, ...,
`classifier` (`meta["reduction_cells"]` says which cells reduce).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import numpy as np

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

OPS = ("sep_conv_3x3", "sep_conv_5x5", "avg_pool_3x3", "max_pool_3x3", "identity")


@dataclasses.dataclass(frozen=True)
class ConvNode:
    """One node of an ENAS conv cell: two inputs, two ops, summed.

    op[k] is applied to input[k], and the two results are summed.
    """

    inputs: tuple[int, int]
    ops: tuple[str, str]


@dataclasses.dataclass(frozen=True)
class ConvCellArch:
    """A sampled ENAS conv cell; hashable, so a Flax module field."""

    nodes: tuple[ConvNode, ...]

    def loose_ends(self) -> tuple[int, ...]:
        """Indices (>= 2) of the nodes no other node reads: the output.

        The cell output concatenates them.
        """
        used = {i for node in self.nodes for i in node.inputs}
        return tuple(j + 2 for j in range(len(self.nodes)) if j + 2 not in used)

    def to_json(self) -> list[dict]:
        """[{"inputs": [i, j], "ops": [op, op]}, ...]."""
        return [{"inputs": list(n.inputs), "ops": list(n.ops)} for n in self.nodes]


def sample_conv_cell(rng: np.random.Generator, n_nodes: int = 5) -> ConvCellArch:
    """A uniformly sampled ENAS conv cell of `n_nodes` nodes."""
    nodes = []
    for j in range(n_nodes):
        inputs = tuple(int(i) for i in rng.integers(0, j + 2, size=2))
        ops = tuple(OPS[int(k)] for k in rng.integers(0, len(OPS), size=2))
        nodes.append(ConvNode(inputs, ops))
    return ConvCellArch(tuple(nodes))


@dataclasses.dataclass(frozen=True)
class Cifar10Config:
    """Size of an ENAS-CIFAR10 program (the cells come from the seed)."""

    n_cells: int = 2
    """Normal cells per stage N (three stages; ENAS uses N = 5 for the final network)."""
    channels: int = 16
    """Cell width C of the first stage; doubled by each reduction cell."""
    batch: int = 16
    """Images per batch."""
    n_nodes: int = 5
    """Nodes per sampled cell (ENAS uses 5)."""
    image_size: int = 32
    """Square input resolution (CIFAR-10: 32)."""
    classes: int = 10
    """Number of classes."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("momentum", 0.05)
    """SGD with Nesterov-free momentum 0.9, as ENAS."""

    @classmethod
    def tiny(cls) -> "Cifar10Config":
        """A CPU-cheap preset for tests: five cells.

        N = 1 per stage, plus 2 reductions.
        """
        return cls(n_cells=1, channels=4, batch=2, n_nodes=2, image_size=8)


def apply_op(op: str, x: jax.Array, features: int, stride: int, name: str) -> jax.Array:
    """One ENAS op on x; call it inside a compact method.

    x: float32[N, H, W, features].

    Raises:
        ValueError: for an unknown op.
    """
    if op.startswith("sep_conv_"):
        return SepConv(features, int(op[-1]), stride, name=name)(x)
    if op in ("avg_pool_3x3", "max_pool_3x3"):
        return pool(op[:3], x, 3, stride)
    if op == "identity":
        return x if stride == 1 else FactorizedReduce(features, name=name)(x)
    raise ValueError(f"unknown op {op!r}")


class EnasConvCell(nn.Module):
    """A sampled ENAS conv cell (normal, or reduction when `reduction`)."""

    arch: ConvCellArch
    features: int
    reduction: bool = False

    @nn.compact
    def __call__(self, h_prev2: jax.Array, h_prev1: jax.Array) -> jax.Array:
        """The cell's output, from those of the two previous cells.

        Args:
            h_prev2, h_prev1: outputs of the previous two cells, NHWC.

        Returns:
            float32[N, H', W', features].
        """
        states = [self.calibrate(h_prev2, h_prev1.shape[1], 0), self.calibrate(h_prev1, h_prev1.shape[1], 1)]
        for j, node in enumerate(self.arch.nodes):
            outs = []
            for k, (i, op) in enumerate(zip(node.inputs, node.ops)):
                stride = 2 if self.reduction and i < 2 else 1
                outs.append(apply_op(op, states[i], self.features, stride, f"node_{j}_{k}"))
            states.append(outs[0] + outs[1])
        out = jax.numpy.concatenate([states[i] for i in self.arch.loose_ends()], axis=-1)
        return ReLUConvBN(self.features, name="final_conv")(out)

    @nn.nowrap  # a helper of the compact method: no extra name scope
    def calibrate(self, h: jax.Array, size: int, index: int) -> jax.Array | None:
        """Cell input `index` at `features` channels and `size` resolution.

        None if unread: an unread input gets no ops, so the traced graph has no dead branch.
        """
        if all(index not in node.inputs for node in self.arch.nodes):
            return None
        if h.shape[1] != size:
            return FactorizedReduce(self.features, name=f"calibrate_{index}")(h)
        return ReLUConvBN(self.features, name=f"calibrate_{index}")(h)


class EnasConvNet(nn.Module):
    """Stem -> sampled cells -> classifier; `__call__` returns the loss."""

    config: Cifar10Config
    normal: ConvCellArch
    reduce: ConvCellArch

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
        h_prev2 = h_prev1 = ConvBN(3 * cfg.channels, name="stem")(images)
        features = cfg.channels
        for index, reduction in enumerate(cell_plan(cfg.n_cells)):
            features *= 2 if reduction else 1
            arch = self.reduce if reduction else self.normal
            cell = EnasConvCell(arch, features, reduction, name=f"cell_{index}")
            h_prev2, h_prev1 = h_prev1, cell(h_prev2, h_prev1)
        return Classifier(cfg.classes, name="classifier")(h_prev1, labels)


def build_cifar10(seed: int = 0, *, config: Cifar10Config | None = None, **overrides) -> common.Program:
    """An ENAS-CIFAR10 training step whose cells are sampled from `seed`.

    `overrides` replace Cifar10Config fields.
    """
    cfg = dataclasses.replace(config or Cifar10Config(), **overrides)
    rng = common.numpy_rng(seed, common.ARCH_STREAM)
    normal, reduce = sample_conv_cell(rng, cfg.n_nodes), sample_conv_cell(rng, cfg.n_nodes)
    plan = cell_plan(cfg.n_cells)
    batch = image_batch(common.numpy_rng(seed, common.DATA_STREAM), cfg.batch, cfg.image_size, cfg.classes)
    meta = {
        "family": "cifar10",
        "config": common.config_dict(cfg),
        "normal_cell": normal.to_json(),
        "reduction_cell": reduce.to_json(),
        "reduction_cells": [f"cell_{i}" for i, r in enumerate(plan) if r],
        "layers": ["stem", *(f"cell_{i}" for i in range(len(plan))), "classifier"],
    }
    model = EnasConvNet(cfg, normal, reduce)
    return common.make_program(f"cifar10_{seed:03d}", model, batch, seed, cfg.optimizer, meta)
