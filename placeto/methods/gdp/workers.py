"""gdp's rollout worker: its share of one update's sampled placements.

placeto.rollouts.workers runs it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from placeto.methods.gdp.model import make_net
from placeto.methods.gdp.ppo import draw_range, make_task
from placeto.rollouts.workers import Pair, from_key_data

WORKER = "placeto.methods.gdp.workers:GdpWorker"  # its kind (placeto.rollouts.workers.make_worker)


class GdpWorker:
    """gdp placements on the tasks of a run.

    Payload: (GdpConfig, [(graph, cluster), ...]).
    """

    def __init__(self, config, pairs: Sequence[Pair]):
        self.config, self.net = config, make_net(config)
        self.tasks = [make_task(g, c, config) for g, c in pairs]

    def run(self, params, task: int, key: np.ndarray, lo: int, hi: int):
        """gdp.ppo.Drawn of samples [lo, hi) of task `task`'s update."""
        return draw_range(self.net, self.config, params, self.tasks[task], from_key_data(key), lo, hi)
