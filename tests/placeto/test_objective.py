"""The feasibility-first objective: every placement that fits beats every one that does not, less excess beats more,
and the bound under it holds for every placement (hosts, latency, microbatches included)."""

import numpy as np
from hypothesis import given, settings, strategies as st

from placeto import objective as O
from simulator import Cluster, Device, simulate, simulate_reference
from simulator.model.cluster import Host
from simulator.model.generate import layered_dag
from simulator.model.result import upper_bound


def _cluster(memory: float, hosts: bool, n: int = 3) -> Cluster:
    if not hosts:
        return Cluster("c", tuple(Device(f"d{i}", "k80", memory) for i in range(n)), 5.7, 25.0, 7600.0)
    return Cluster("h", tuple(Device(f"d{i}", "k80", memory, "h0") for i in range(n)), 5.7, 25.0, 7600.0,
                   latency_us=20.0, hosts=(Host("h0", 15.0, 40.0),))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), memory=st.sampled_from([2e5, 6e5, 2e6]), hosts=st.booleans())
def test_every_fitting_placement_beats_every_oom_one(seed, memory, hosts):
    g, cluster = layered_dag(18, seed=seed % 97), _cluster(memory, hosts)
    rng = np.random.default_rng(seed)
    placements = rng.integers(0, 3, (24, g.n_nodes)).astype(np.int32)
    placements[0] = 0
    parts = O.score_batch_parts(g, placements, cluster)
    bound = upper_bound(g, cluster)
    for p, r in zip(placements, parts.runtime):
        assert simulate_reference(g, p, cluster).runtime == r <= bound  # the bound holds
    fits = parts.excess == 0
    assert np.array_equal(fits, parts.objective < O.fits_threshold(g, cluster))
    if fits.any() and (~fits).any():
        assert parts.objective[fits].max() < parts.objective[~fits].min()
    oom = np.flatnonzero(~fits)
    for i in oom:  # among those that do not fit: ordered by their relative excess
        for j in oom:
            if parts.excess[i] < parts.excess[j] - 1e-9:
                assert parts.objective[i] < parts.objective[j]
    np.testing.assert_array_equal(parts.objective[fits], parts.runtime[fits])


def test_excess_is_relative_to_capacity():
    """The same excess in bytes counts ten times more on a device ten times smaller: the model's scale is out."""
    peak, cap = np.array([[12.0, 0.0], [0.0, 102.0]]), np.array([10.0, 100.0])
    np.testing.assert_allclose(O.relative_excess(peak, cap), [0.2, 0.02])
    np.testing.assert_allclose(O.over_capacity_gb(peak * 1e9, cap * 1e9), [2.0, 2.0])


def test_microbatched_bound_scales_with_the_count():
    g, cluster = layered_dag(12, seed=3), _cluster(1e12, False)
    one = upper_bound(g, cluster)
    g4 = type(g)(**{**{f: getattr(g, f) for f in g.__dataclass_fields__}, "meta": {**g.meta, "microbatches": 4}})
    assert upper_bound(g4, cluster) == 4 * one
    assert simulate(g, np.zeros(12, np.int32), cluster).runtime <= one
