"""What a rollout worker computes, without Ray: each learned method's share of one update's batch.

An update's batch of B episodes (Placeto) or placements (gdp, rnn, hierarchical) is cut into contiguous ranges,
one per worker (`partition`); a worker computes its range [lo, hi) with the method's per-sample sampling
(`placeto.episodes.collect_episodes`, `gdp.ppo.draw_range`, `reinforce.draw_range`), in which sample i depends
on (parameters, key, seed, i) alone. The driver concatenates the ranges in order: the batch, hence the update
and the checkpoint, is the same for every number of workers.

A worker is built from data only (a config and the (graph, cluster) pairs it serves, as `make_worker(kind,
payload)`), so a Ray actor that restarts after a crash rebuilds the same worker. `SerialPool` runs the shares one
after another in this process: the plain reference the Ray pool (placeto.distributed.RayPool) is tested against.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from simulator.cluster import Cluster
from simulator.graph import Graph

Pair = tuple[Graph, Cluster]


def partition(total: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous ranges [lo, hi) covering [0, total) in order, at most `parts`, sizes differing by at most 1
    (the first total % parts ranges one longer); empty ranges are left out."""
    if parts < 1 or total < 0:
        raise ValueError(f"partition: {total} items into {parts} parts")
    size, extra = divmod(total, parts)
    bounds = np.cumsum([0] + [size + (k < extra) for k in range(parts)])
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]


def key_data(key: jax.Array) -> np.ndarray:
    """uint32[2] raw bits of a typed key (what crosses to a worker)."""
    return np.asarray(jax.random.key_data(key))


def from_key_data(data: np.ndarray) -> jax.Array:
    return jax.random.wrap_key_data(jnp.asarray(data))


class PlacetoWorker:
    """Placeto episodes on the tasks of a family run: payload (PlacetoConfig, [(graph, cluster), ...])."""

    def __init__(self, config, pairs: Sequence[Pair]):
        from placeto.methods.placeto import env as E
        from placeto.methods.placeto.policy import make_policy

        self.config, self.policy = config, make_policy(config)
        self.contexts = [E.make_context(g, c, config) for g, c in pairs]
        self.arrays = [jax.device_put(ctx.arrays) for ctx in self.contexts]

    def run(self, params, task: int, key: np.ndarray, seed: int, lo: int, hi: int):
        """placeto.place.Rollout of episodes [lo, hi) of task `task`'s update (key data, seed)."""
        from placeto.methods.placeto.episodes import collect_episodes

        return collect_episodes(self.policy, params, self.contexts[task], self.arrays[task], from_key_data(key),
                                seed, lo, hi, counterfactual=self.config.counterfactual)


class GdpWorker:
    """gdp placements on the tasks of a run: payload (GdpConfig, [(graph, cluster), ...])."""

    def __init__(self, config, pairs: Sequence[Pair]):
        from placeto.methods.gdp.model import make_net
        from placeto.methods.gdp.ppo import make_task

        self.config, self.net = config, make_net(config)
        self.tasks = [make_task(g, c, config) for g, c in pairs]

    def run(self, params, task: int, key: np.ndarray, lo: int, hi: int):
        """gdp.ppo.Drawn of samples [lo, hi) of task `task`'s update."""
        from placeto.methods.gdp.ppo import draw_range

        return draw_range(self.net, self.config, params, self.tasks[task], from_key_data(key), lo, hi)


class PerGraphWorker:
    """rnn / hierarchical placements of one graph: payload (config, [(graph, cluster)])."""

    def __init__(self, config, pairs: Sequence[Pair]):
        from placeto.methods.pergraph import get_spec

        spec = get_spec(config.METHOD)
        (self.graph, self.cluster), = pairs
        self.config, self.net = config, spec.make_net(config)
        self.inputs = spec.make_inputs(self.graph, self.cluster, config)

    def run(self, params, key: np.ndarray, lo: int, hi: int):
        """reinforce.Drawn of samples [lo, hi) of an update."""
        from placeto.methods.reinforce import draw_range

        return draw_range(self.net, self.config, params, self.inputs, self.graph, self.cluster, from_key_data(key),
                          lo, hi)


KINDS: dict[str, Callable[..., Any]] = {"placeto": PlacetoWorker, "gdp": GdpWorker, "pergraph": PerGraphWorker}


def make_worker(kind: str, payload: tuple):
    """The worker of `kind` ("placeto", "gdp", "pergraph") built from payload (config, pairs)."""
    if kind not in KINDS:
        raise ValueError(f"unknown worker kind {kind!r} (known: {', '.join(KINDS)})")
    return KINDS[kind](*payload)


class SerialPool:
    """`workers` shares of every batch computed one after another by one in-process worker (no Ray)."""

    def __init__(self, kind: str, payload: tuple, workers: int = 1):
        self.worker, self.workers = make_worker(kind, payload), workers

    def run(self, params, args: tuple, total: int) -> list:
        """[worker.run(params, *args, lo, hi) for each range of partition(total, workers)], in order."""
        params = jax.device_get(params)
        return [self.worker.run(params, *args, lo, hi) for lo, hi in partition(total, self.workers)]

    def pids(self) -> list[int]:
        return [os.getpid()]

    def close(self) -> None:
        pass
