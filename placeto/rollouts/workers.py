"""What a rollout worker computes, without Ray: a share of a batch.

Each learned method's share of one update's batch.

An update's batch of B episodes (Placeto) or placements (gdp, rnn, hierarchical) is cut into contiguous ranges,
one per worker (`partition`); a worker computes its range [lo, hi) with the method's per-sample sampling
(Placeto's `collect_episodes`, gdp's `ppo.draw_range`, `reinforce.draw_range`), in which sample i depends
on (parameters, key, seed, i) alone. The driver concatenates the ranges in order: the batch, hence the update
and the checkpoint, is the same for every number of workers.

A worker is built from data only (a config and the (graph, cluster) pairs it serves, as `make_worker(kind,
payload)`), so a Ray actor that restarts after a crash rebuilds the same worker. `kind` is the worker class's
"module:Class" path, which each method names beside its class (placeto.methods.placeto.rollout_workers.WORKER,
placeto.methods.gdp.workers.WORKER, placeto.methods.sequence.rundir.WORKER): this module knows no method.
`SerialPool` runs the shares one after another in this process: the plain reference the Ray pool
(placeto.rollouts.distributed.RayPool) is tested against.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Sequence

import numpy as np

from simulator.model.cluster import Cluster
from simulator.model.graph import Graph

# jax is imported inside the functions that use it: placeto.rollouts.distributed imports this module, and the CLI's
# parser imports that one (jax costs seconds of start-up)
if TYPE_CHECKING:
    import jax

Pair = tuple[Graph, Cluster]


def partition(total: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous ranges [lo, hi) covering [0, total), at most `parts`.

    In order; sizes differ by at most 1 (the first total % parts ranges are one longer); empty ranges are left out.
    """
    if parts < 1 or total < 0:
        raise ValueError(f"partition: {total} items into {parts} parts")
    size, extra = divmod(total, parts)
    bounds = np.cumsum([0] + [size + (k < extra) for k in range(parts)])
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]


def key_data(key: jax.Array) -> np.ndarray:
    """uint32[2] raw bits of a typed key (what crosses to a worker)."""
    import jax  # see the note at the top

    return np.asarray(jax.random.key_data(key))


def from_key_data(data: np.ndarray) -> jax.Array:
    import jax  # see the note at the top
    import jax.numpy as jnp

    return jax.random.wrap_key_data(jnp.asarray(data))


def make_worker(kind: str, payload: tuple):
    """The worker of class `kind`, built from its payload.

    `kind`: "package.module:Class"; payload: (config, pairs).
    """
    module, _, name = kind.partition(":")
    if not name:
        raise ValueError(f"worker kind {kind!r} is not a \"module:Class\" path")
    return getattr(importlib.import_module(module), name)(*payload)


class SerialPool:
    """Shares of a batch computed in turn, in this process (no Ray).

    `workers` shares of every batch, by one in-process worker.
    """

    def __init__(self, kind: str, payload: tuple, workers: int = 1):
        self.worker, self.workers = make_worker(kind, payload), workers

    def run(self, params, args: tuple, total: int) -> list:
        """The shares of a batch, in order: worker.run(params, *args, lo, hi) per range.

        The ranges: partition(total, workers).
        """
        import jax  # see the note at the top

        params = jax.device_get(params)
        return [self.worker.run(params, *args, lo, hi) for lo, hi in partition(total, self.workers)]

    def pids(self) -> list[int]:
        return [os.getpid()]

    def close(self) -> None:
        pass
