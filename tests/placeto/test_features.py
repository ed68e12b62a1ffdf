"""Feature construction: buckets, reachability against a plain BFS, shapes and masks of the padded arrays."""

import networkx as nx
import numpy as np
import pytest

from placeto import features as F
from placeto.methods.placeto.env import visit_sequence
from simulator import cluster_preset, to_networkx
from simulator.model.generate import layered_dag


def test_buckets_are_few_and_waste_at_most_half():
    sizes = {F.bucket(n) for n in range(1, 5000)}
    assert len(sizes) <= 20
    for n in range(1, 5000):
        b = F.bucket(n)
        assert b >= n and (n <= F.MIN_BUCKET or b <= 1.5 * n)
    assert F.node_bucket(16) > 16  # jraph needs one padding node


def test_reachability_matches_networkx():
    g = layered_dag(60, seed=3)
    r = F.reachability(g)
    nxg = nx.DiGraph(to_networkx(g))
    for v in range(g.n_nodes):
        anc = {g.index[a] for a in nx.ancestors(nxg, g.names[v])}
        assert set(np.flatnonzero(r[:, v]).tolist()) == anc


def test_graph_arrays_shapes_and_masks():
    g, cluster = layered_dag(50, seed=1), cluster_preset("placeto-k80", 3)
    seq = visit_sequence(g, "topo", 2)
    a = F.graph_arrays(g, cluster, seq, max_devices=8)
    n_pad, e_pad = F.shape_key(a)
    assert n_pad == F.node_bucket(50) and e_pad >= len(np.unique(np.stack([g.edge_src, g.edge_dst]), axis=1).T)
    assert a.graph.nodes.shape == (n_pad, F.N_STATIC) and np.isfinite(a.graph.nodes).all()
    assert a.node_mask.sum() == 50 and a.edge_mask.sum() == len(g.children[1])
    assert not a.graph.nodes[~a.node_mask].any()
    assert a.dev_mask.tolist() == [True] * 3 + [False] * 5
    assert (a.dev_cost[:, 3:] == 0).all()
    assert np.isclose(a.load_cost.sum(), 1.0)
    assert sorted(a.first_visit[:50].tolist()) == list(range(50))  # first pass visits each node once
    assert a.reach.shape == (n_pad, n_pad) and not a.reach[50:].any() and not a.reach[:, 50:].any()
    # padding edges only touch padding nodes
    pad_e = ~a.edge_mask
    assert (a.graph.senders[pad_e] >= 50).all() and (a.graph.receivers[pad_e] >= 50).all()


def test_static_features_are_scale_free():
    """Multiplying every cost and size by 10 leaves the per-graph normalised features unchanged."""
    g, cluster = layered_dag(40, seed=2), cluster_preset("placeto-k80", 2)
    scaled = g.with_costs("default", g.costs["default"] * 10)
    f1 = F.static_node_features(g, cluster)
    f2 = F.static_node_features(scaled, cluster)
    changed = [1, 3]  # transfer-time columns depend on the cost unit by design
    keep = [c for c in range(F.N_STATIC) if c not in changed]
    np.testing.assert_allclose(f1[:, keep], f2[:, keep], rtol=1e-5, atol=1e-6)


def test_too_many_devices_is_an_error():
    g = layered_dag(10, seed=0)
    with pytest.raises(ValueError, match="at most 2"):
        F.graph_arrays(g, cluster_preset("placeto-k80", 3), visit_sequence(g, "topo", 1), max_devices=2)
