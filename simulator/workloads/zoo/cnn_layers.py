"""Convolutional blocks shared by the zoo's CNN programs.

ENAS-CIFAR10, NASNet-A and Inception-V3. All tensors are NHWC float32. Batch normalisation is in training mode
(batch statistics, learned scale and offset) and keeps no running averages, so the step stays `(params, opt_state,
batch) -> ...` with no mutable collection; the moving-average update it omits is a handful of elementwise ops per
layer.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class BatchNorm(nn.Module):
    """Training-mode batch normalisation over N, H, W."""

    epsilon: float = 1e-3

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: float32[N, H, W, C] -> same shape."""
        features = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (features,))
        offset = self.param("offset", nn.initializers.zeros, (features,))
        mean = jnp.mean(x, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
        return (x - mean) * (scale * jax.lax.rsqrt(var + self.epsilon)) + offset


def conv(features: int, kernel: tuple[int, int], stride: int = 1, padding: str = "SAME", **kw) -> nn.Conv:
    """A bias-free conv: batch norm follows every conv here.

    The module name comes via `kw`.
    """
    return nn.Conv(features, kernel, strides=(stride, stride), padding=padding, use_bias=False, **kw)


class ConvBNReLU(nn.Module):
    """conv -> batch norm -> relu (Inception's BasicConv2d)."""

    features: int
    kernel: tuple[int, int]
    stride: int = 1
    padding: str = "SAME"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: float32[N, H, W, Cin] -> float32[N, H', W', features]."""
        x = conv(self.features, self.kernel, self.stride, self.padding, name="conv")(x)
        return jax.nn.relu(BatchNorm(name="bn")(x))


class ConvBN(nn.Module):
    """conv -> batch norm (the NASNet/ENAS stem)."""

    features: int
    kernel: tuple[int, int] = (3, 3)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: float32[N, H, W, Cin] -> float32[N, H, W, features]."""
        return BatchNorm(name="bn")(conv(self.features, self.kernel, name="conv")(x))


class ReLUConvBN(nn.Module):
    """relu -> conv -> batch norm (the NASNet/ENAS ordering)."""

    features: int
    kernel: tuple[int, int] = (1, 1)
    stride: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """relu, conv and batch norm of `x`.

        x: float32[N, H, W, Cin] -> float32[N, H/stride, W/stride, features].
        """
        x = conv(self.features, self.kernel, self.stride, name="conv")(jax.nn.relu(x))
        return BatchNorm(name="bn")(x)


class SepConv(nn.Module):
    """Stacked separable convolutions, `repeats` of them.

    Each is relu -> depthwise kxk -> pointwise 1x1 -> batch norm. Only the first depthwise conv is strided (NASNet's
    `separable_kxk_2`, ENAS's sep_conv).
    """

    features: int
    kernel: int
    stride: int = 1
    repeats: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """The stacked separable convolutions of `x`.

        x: float32[N, H, W, Cin] -> float32[N, H/stride, W/stride, features].
        """
        for r in range(self.repeats):
            channels = x.shape[-1]
            stride = self.stride if r == 0 else 1
            k = (self.kernel, self.kernel)
            x = conv(channels, k, stride, feature_group_count=channels, name=f"depthwise_{r}")(jax.nn.relu(x))
            x = conv(self.features, (1, 1), name=f"pointwise_{r}")(x)
            x = BatchNorm(name=f"bn_{r}")(x)
        return x


class FactorizedReduce(nn.Module):
    """Halve H and W: two offset strided 1x1 convs, concatenated.

    NASNet's and ENAS's path reduction.
    """

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`x` at half resolution.

        x: float32[N, H, W, Cin] -> float32[N, ceil(H/2), ceil(W/2), features].
        """
        x = jax.nn.relu(x)
        half = self.features // 2
        path1 = conv(half, (1, 1), 2, name="path_0")(x)
        shifted = jnp.pad(x[:, 1:, 1:, :], ((0, 0), (0, 1), (0, 1), (0, 0)))
        path2 = conv(self.features - half, (1, 1), 2, name="path_1")(shifted)
        return BatchNorm(name="bn")(jnp.concatenate([path1, path2], axis=-1))


def pool(kind: str, x: jax.Array, window: int = 3, stride: int = 1, padding: str = "SAME") -> jax.Array:
    """"avg" or "max" pooling of x (float32[N, H, W, C]), square window.

    Raises:
        ValueError: for another `kind`.
    """
    shape, strides = (window, window), (stride, stride)
    if kind == "avg":
        return nn.avg_pool(x, shape, strides, padding=padding, count_include_pad=False)
    if kind == "max":
        return nn.max_pool(x, shape, strides, padding=padding)
    raise ValueError(f"unknown pooling {kind!r}")


class Classifier(nn.Module):
    """relu -> global average pool -> dense -> mean cross-entropy."""

    classes: int

    @nn.compact
    def __call__(self, x: jax.Array, labels: jax.Array) -> jax.Array:
        """The mean softmax cross-entropy of the features `x`.

        Args:
            x: float32[N, H, W, C].
            labels: int32[N].

        Returns:
            float32[] mean loss.
        """
        x = jnp.mean(jax.nn.relu(x), axis=(1, 2))
        logits = nn.Dense(self.classes, name="logits")(x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def cell_plan(n_cells: int) -> list[bool]:
    """Per cell, whether it reduces: N normal, R, N normal, R, N normal."""
    stage = [False] * n_cells
    return stage + [True] + stage + [True] + stage


def image_batch(rng, batch: int, size: int, classes: int, abstract: bool = False) -> dict:
    """Example image batch: N(0, 1) images and uniform labels.

    images float32[batch, size, size, 3], labels int32[batch]. With `abstract`, their jax.ShapeDtypeStructs (nothing
    drawn: full-size images are tens of megabytes).
    """
    if abstract:
        return {"images": jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32),
                "labels": jax.ShapeDtypeStruct((batch,), jnp.int32)}
    images = rng.standard_normal((batch, size, size, 3), dtype="float32")
    labels = rng.integers(0, classes, size=(batch,), dtype="int32")
    return {"images": images, "labels": labels}
