"""Inception-V3 benchmark (Szegedy et al. 2016) at reduced size.

Its real block structure: stem (Conv2d_1a..4a with two max pools), Mixed_5b-5d (InceptionA), Mixed_6a (InceptionB,
reduction), Mixed_6b-6e (InceptionC, factorised 1x7/7x1 convs), Mixed_7a (InceptionD, reduction), Mixed_7b-7c
(InceptionE), the auxiliary classifier on Mixed_6e and the main classifier; the loss is the main cross-entropy plus
0.4 times the auxiliary one, optimised with RMSProp as in the paper. Channel counts are the paper's times `width`,
and the input resolution is reduced (`image_size`, default 139, the smallest that keeps every block's spatial size
>= 3). Layer scopes use the TF-slim block names.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from simulator.workloads.zoo import common
from simulator.workloads.zoo.cnn_layers import ConvBNReLU, image_batch, pool

STEM = ("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "Conv2d_3b_1x1", "Conv2d_4a_3x3")
BLOCKS = (
    "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e",
    "AuxLogits", "Mixed_7a", "Mixed_7b", "Mixed_7c", "Logits",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class InceptionConfig:
    """Size of the Inception-V3 program."""

    batch: int = 32
    """Images per batch (the benchmark uses 32)."""
    image_size: int = 139
    """Square input resolution (299 in the paper; 75 is the smallest that runs)."""
    width: float = 0.25
    """Multiplier on every channel count of the paper."""
    classes: int = 1000
    """Number of classes."""
    aux_logits: bool = True
    """Whether the auxiliary classifier (training-time head) is part of the graph."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("rmsprop", 0.045)
    """RMSProp (decay 0.9, eps 1.0) with the paper's learning rate."""

    @classmethod
    def tiny(cls) -> "InceptionConfig":
        """A CPU-cheap preset for tests."""
        return cls(batch=2, image_size=75, width=0.0625, classes=10)


def branch(x: jax.Array, specs: list[tuple], prefix: str) -> jax.Array:
    """A chain of ConvBNReLU, one per spec; call it inside a compact method.

    specs: (features, (kh, kw)[, stride, padding]) per conv.
    """
    for i, spec in enumerate(specs):
        x = ConvBNReLU(*spec, name=f"{prefix}_{i}")(x)
    return x


class InceptionBlock(nn.Module):
    """One mixed block; `kind` "A".."E" selects its layout.

    The paper's figure 5/6/7 or grid-reduction layouts.
    """

    kind: str
    width: float
    arg: int = 0  # A: pool-branch channels; C: the 7x7 branches' inner channels

    @nn.nowrap  # a helper of the compact method: no extra name scope
    def ch(self, n: int) -> int:
        """The paper's channel count n scaled by `width` (at least 4)."""
        return max(4, int(n * self.width))

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """The block's branches, concatenated.

        x: float32[N, H, W, C] -> float32[N, H', W', C'] (H' = (H - 3) // 2 + 1 for B and D).
        """
        return jnp.concatenate(getattr(self, f"block_{self.kind.lower()}")(x), axis=-1)

    @nn.nowrap
    def block_a(self, x):
        c = self.ch
        pooled = pool("avg", x, 3, 1)
        return [
            branch(x, [(c(64), (1, 1))], "branch1x1"),
            branch(x, [(c(48), (1, 1)), (c(64), (5, 5))], "branch5x5"),
            branch(x, [(c(64), (1, 1)), (c(96), (3, 3)), (c(96), (3, 3))], "branch3x3dbl"),
            branch(pooled, [(self.ch(self.arg), (1, 1))], "branch_pool"),
        ]

    @nn.nowrap
    def block_b(self, x):
        c = self.ch
        return [
            branch(x, [(c(384), (3, 3), 2, "VALID")], "branch3x3"),
            branch(x, [(c(64), (1, 1)), (c(96), (3, 3)), (c(96), (3, 3), 2, "VALID")], "branch3x3dbl"),
            pool("max", x, 3, 2, "VALID"),
        ]

    @nn.nowrap
    def block_c(self, x):
        c, c7 = self.ch, self.ch(self.arg)
        pooled = pool("avg", x, 3, 1)
        dbl = [(c7, (1, 1)), (c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (c(192), (1, 7))]
        return [
            branch(x, [(c(192), (1, 1))], "branch1x1"),
            branch(x, [(c7, (1, 1)), (c7, (1, 7)), (c(192), (7, 1))], "branch7x7"),
            branch(x, dbl, "branch7x7dbl"),
            branch(pooled, [(c(192), (1, 1))], "branch_pool"),
        ]

    @nn.nowrap
    def block_d(self, x):
        c = self.ch
        seven = [(c(192), (1, 1)), (c(192), (1, 7)), (c(192), (7, 1)), (c(192), (3, 3), 2, "VALID")]
        return [
            branch(x, [(c(192), (1, 1)), (c(320), (3, 3), 2, "VALID")], "branch3x3"),
            branch(x, seven, "branch7x7x3"),
            pool("max", x, 3, 2, "VALID"),
        ]

    @nn.nowrap
    def block_e(self, x):
        c = self.ch
        mid = branch(x, [(c(384), (1, 1))], "branch3x3")
        dbl = branch(x, [(c(448), (1, 1)), (c(384), (3, 3))], "branch3x3dbl")
        return [
            branch(x, [(c(320), (1, 1))], "branch1x1"),
            branch(mid, [(c(384), (1, 3))], "branch3x3_a"),
            branch(mid, [(c(384), (3, 1))], "branch3x3_b"),
            branch(dbl, [(c(384), (1, 3))], "branch3x3dbl_a"),
            branch(dbl, [(c(384), (3, 1))], "branch3x3dbl_b"),
            branch(pool("avg", x, 3, 1), [(c(192), (1, 1))], "branch_pool"),
        ]


class AuxHead(nn.Module):
    """Auxiliary classifier: avg pool, 1x1 and 5x5 convs, dense.

    avg pool 5/3, 1x1 conv 128, 5x5 conv 768 (valid), dense.
    """

    width: float
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """The auxiliary logits of Mixed_6e's output.

        x: float32[N, H, W, C] -> logits float32[N, classes].
        """
        x = nn.avg_pool(x, (5, 5), (3, 3), padding="VALID") if x.shape[1] >= 5 else x
        x = ConvBNReLU(max(4, int(128 * self.width)), (1, 1), name="conv0")(x)
        k = min(5, x.shape[1])
        x = ConvBNReLU(max(4, int(768 * self.width)), (k, k), padding="VALID", name="conv1")(x)
        return nn.Dense(self.classes, name="logits")(jnp.mean(x, axis=(1, 2)))


class InceptionV3(nn.Module):
    """The full network; `__call__` returns the training loss."""

    config: InceptionConfig

    @nn.compact
    def __call__(self, images: jax.Array, labels: jax.Array) -> jax.Array:
        """The main cross-entropy plus 0.4 times the auxiliary one.

        Args:
            images: float32[B, S, S, 3].
            labels: int32[B].

        Returns:
            float32[] loss.
        """
        cfg = self.config
        x = self.stem(images)
        aux_loss = 0.0
        for name, kind, arg in _mixed_plan():
            x = InceptionBlock(kind, cfg.width, arg, name=name)(x)
            if name == "Mixed_6e" and cfg.aux_logits:
                aux = AuxHead(cfg.width, cfg.classes, name="AuxLogits")(x)
                with jax.named_scope("AuxLogits"):  # the loss sits with its head in the graph
                    aux_loss = optax.softmax_cross_entropy_with_integer_labels(aux, labels).mean()
        logits = nn.Dense(cfg.classes, name="Logits")(jnp.mean(x, axis=(1, 2)))
        with jax.named_scope("Logits"):
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss + 0.4 * aux_loss

    @nn.nowrap
    def stem(self, x: jax.Array) -> jax.Array:
        """The stem: convs and two stride-2 max pools.

        299 -> 35 in the paper, 139 -> 15 by default.
        """
        c = lambda n: max(4, int(n * self.config.width))  # noqa: E731
        specs = [(c(32), (3, 3), 2, "VALID"), (c(32), (3, 3), 1, "VALID"), (c(64), (3, 3))]
        specs += [(c(80), (1, 1), 1, "VALID"), (c(192), (3, 3), 1, "VALID")]
        for i, (name, spec) in enumerate(zip(STEM, specs)):
            x = ConvBNReLU(*spec, name=name)(x)
            if i in (2, 4):
                x = pool("max", x, 3, 2, "VALID")
        return x


def _mixed_plan() -> list[tuple[str, str, int]]:
    """(block name, kind, arg) for Mixed_5b .. Mixed_7c."""
    a = [("Mixed_5b", "A", 32), ("Mixed_5c", "A", 64), ("Mixed_5d", "A", 64), ("Mixed_6a", "B", 0)]
    c = [(f"Mixed_6{s}", "C", n) for s, n in zip("bcde", (128, 160, 160, 192))]
    return a + c + [("Mixed_7a", "D", 0), ("Mixed_7b", "E", 0), ("Mixed_7c", "E", 0)]


def layer_names(aux_logits: bool) -> list[str]:
    """Top-level scopes in model order."""
    return list(STEM) + [b for b in BLOCKS if aux_logits or b != "AuxLogits"]


def build_inception_v3(seed: int = 0, *, config: InceptionConfig | None = None, abstract: bool = False,
                       **overrides) -> common.Program:
    """An Inception-V3 training step; overrides replace config fields.

    Fields of InceptionConfig; `abstract` builds it by shape (simulator.workloads.zoo.common).
    """
    cfg = dataclasses.replace(config or InceptionConfig(), **overrides)
    rng = common.numpy_rng(seed, common.DATA_STREAM)
    batch = image_batch(rng, cfg.batch, cfg.image_size, cfg.classes, abstract)
    meta = {
        "family": "inception_v3",
        "config": common.config_dict(cfg),
        "layers": layer_names(cfg.aux_logits),
    }
    return common.make_program("inception_v3", InceptionV3(cfg), batch, seed, cfg.optimizer, meta, abstract)
