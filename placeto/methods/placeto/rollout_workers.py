"""Placeto's rollout worker: its share of one update's episodes.

placeto.rollouts.workers runs it, in this process or on a Ray actor; see there for why the batch does not
depend on the number of workers.
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np

from placeto.methods.placeto import env as E
from placeto.methods.placeto.episodes import collect_episodes
from placeto.methods.placeto.policy import make_policy
from placeto.rollouts.workers import Pair, from_key_data

WORKER = "placeto.methods.placeto.rollout_workers:PlacetoWorker"  # its kind (placeto.rollouts.workers.make_worker)


class PlacetoWorker:
    """Placeto episodes on the tasks of a family run.

    Payload: (PlacetoConfig, [(graph, cluster), ...]).
    """

    def __init__(self, config, pairs: Sequence[Pair]):
        self.config, self.policy = config, make_policy(config)
        self.contexts = [E.make_context(g, c, config) for g, c in pairs]
        self.arrays = [jax.device_put(ctx.arrays) for ctx in self.contexts]

    def run(self, params, task: int, key: np.ndarray, seed: int, lo: int, hi: int):
        """Rollout of episodes [lo, hi) of task `task`'s update (key data, seed).

        A placeto.methods.placeto.rollout.Rollout.
        """
        return collect_episodes(self.policy, params, self.contexts[task], self.arrays[task], from_key_data(key),
                                seed, lo, hi, counterfactual=self.config.counterfactual)
