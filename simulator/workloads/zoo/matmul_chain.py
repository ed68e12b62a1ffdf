"""Matmul family: chains of matmuls, parallel chains summed.

Chains of dense matrix multiplications, one chain or several in parallel joined by a sum. Each of the `chains` C
chains (scopes `chain_0` ... `chain_{C-1}`) reads the same input x float32[R, N] and applies `length` k bias-free
matmuls `matmul_0` ... `matmul_{k-1}` in a row, alternating between widths N and expand * N: matmul j maps to expand
* N features for even j < k - 1 and to N otherwise, so every chain ends at float32[R, N]. With `nonlinear`, tanh
follows every matmul but the last. The chain outputs are summed and the loss is the mean squared error against a
target float32[R, N]; Adam updates every matrix.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from simulator.workloads.zoo import common


@dataclasses.dataclass(frozen=True)
class MatmulConfig:
    """Size of a matmul-chain program."""

    chains: int = 1
    """Parallel chains C, summed at the end."""
    length: int = 8
    """Matmuls per chain k."""
    size: int = 256
    """Width N of the input, the output and every other intermediate."""
    expand: int = 1
    """Factor of the wide intermediates (1: every matrix is N x N)."""
    rows: int = 64
    """Rows R of the input (the batch)."""
    nonlinear: bool = True
    """Apply tanh between successive matmuls."""
    optimizer: common.OptimizerConfig = common.OptimizerConfig("adam", 1e-3)
    """Adam."""

    @classmethod
    def tiny(cls) -> "MatmulConfig":
        """A CPU-cheap preset for tests."""
        return cls(chains=2, length=3, size=8, expand=2, rows=4)

    def widths(self) -> list[int]:
        """Output features of matmul j of a chain, j = 0 ... k - 1."""
        wide = self.expand * self.size
        return [wide if j % 2 == 0 and j < self.length - 1 else self.size for j in range(self.length)]


class Chain(nn.Module):
    """k bias-free matmuls in a row, tanh between them if `nonlinear`."""

    widths: tuple[int, ...]
    nonlinear: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """x: float32[R, N] -> float32[R, widths[-1]]."""
        for j, features in enumerate(self.widths):
            x = nn.Dense(features, use_bias=False, name=f"matmul_{j}")(x)
            if self.nonlinear and j < len(self.widths) - 1:
                x = jnp.tanh(x)
        return x


class MatmulChains(nn.Module):
    """C parallel chains, summed; `__call__` returns the squared error."""

    config: MatmulConfig

    @nn.compact
    def __call__(self, x: jax.Array, target: jax.Array) -> jax.Array:
        """The mean squared error of the summed chains.

        Args:
            x, target: float32[R, N].

        Returns:
            float32[] mean squared error.
        """
        cfg = self.config
        widths = tuple(cfg.widths())
        y = sum(Chain(widths, cfg.nonlinear, name=f"chain_{c}")(x) for c in range(cfg.chains))
        return jnp.mean(jnp.square(y - target))


def example_batch(seed: int, cfg: MatmulConfig) -> dict:
    """x and target float32[R, N] ~ N(0, 1)."""
    rng = common.numpy_rng(seed, common.DATA_STREAM)
    return {"x": rng.standard_normal((cfg.rows, cfg.size), dtype="float32"),
            "target": rng.standard_normal((cfg.rows, cfg.size), dtype="float32")}


def build_matmul(seed: int = 0, *, config: MatmulConfig | None = None, **overrides) -> common.Program:
    """A matmul-chain training step; `overrides` replace `config` fields.

    `config` defaults to `MatmulConfig()`.
    """
    cfg = dataclasses.replace(config or MatmulConfig(), **overrides)
    meta = {"family": "matmul", "config": common.config_dict(cfg),
            "layers": [f"chain_{c}" for c in range(cfg.chains)]}
    name = f"matmul_c{cfg.chains}_k{cfg.length}_n{cfg.size}"
    return common.make_program(name, MatmulChains(cfg), example_batch(seed, cfg), seed, cfg.optimizer, meta)
