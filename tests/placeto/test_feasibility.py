"""The repair every placer's result goes through, and the bound on what a device must hold."""

import numpy as np
import pytest

from placeto import feasibility as F
from placeto.objective import metered
from simulator import Cluster, Device, make_graph, simulate
from simulator.model.generate import layered_dag

GB = 10**9


def heavy_chain(n: int = 6, weights: float = 4 * GB):
    """n nodes of `weights` persistent bytes in a chain: n * 4 GB over devices of 10 GB."""
    nodes = [{"name": f"w{i}", "cost": 100.0, "out_bytes": [1000], "persistent_bytes": weights} for i in range(n)]
    return make_graph("heavy", nodes, [(i, i + 1, 0) for i in range(n - 1)])


def cluster_of(n_dev: int, memory: float) -> Cluster:
    return Cluster("c", tuple(Device(f"/gpu:{i}", "k80", memory) for i in range(n_dev)), 5.7, 25.0, 7600.0)


def test_repair_moves_nodes_until_it_fits():
    g, c = heavy_chain(), cluster_of(3, 10 * GB)
    with metered() as m:
        fixed = F.repair(g, c, np.zeros(6, np.int32))
    assert fixed.fits and fixed.how == "moves" and fixed.moves >= 4 and m.calls > 0
    assert not simulate(g, fixed.placement, c).any_oom
    with metered() as m:  # a placement that fits is returned as it is, and checking it is not a search
        again = F.repair(g, c, fixed.placement)
    assert again.how == "" and m.calls == 0 and np.array_equal(again.placement, fixed.placement)


def test_repair_says_none_when_nothing_can_fit():
    g, c = heavy_chain(), cluster_of(2, 10 * GB)  # 24 GB of weights on 2 x 10 GB
    fixed = F.repair(g, c, np.zeros(6, np.int32), seconds=2.0)
    assert not fixed.fits and fixed.how == "none"
    assert F.needed_per_device(g, 2) == 12 * GB > 10 * GB  # and the bound says why


@pytest.mark.parametrize("seed", range(4))
def test_needed_per_device_is_below_every_placements_fullest_device(seed):
    g = layered_dag(30, seed=seed)
    c = cluster_of(3, 1e12)
    need = F.needed_per_device(g, 3)
    rng = np.random.default_rng(seed)
    for p in rng.integers(0, 3, (20, g.n_nodes)):
        assert simulate(g, p, c).peak_memory.max() >= need * (1 - 1e-12)
    assert need >= F.footprint(g).max() and need >= g.persistent_bytes.sum() / 3
