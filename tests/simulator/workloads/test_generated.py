"""simulator.workloads.generated: seeded synthetic (graph, cluster) tasks: determinism, the fixed split, the distribution's
ranges, CCR on target, valid graphs that simulate, per-kind costs of heterogeneous clusters, the README section."""

import dataclasses

import numpy as np
import pytest

from simulator.model.stats import communication_ratio
from simulator.workloads.generated import (CLUSTER_TYPES, GEN_FAMILIES, GenSpec, build, draw_spec, gen_specs, readme_section,
                               rebuild, spec_from_meta, tasks)
from simulator import load_cluster, load_graph, lower_bound, save_cluster, save_graph, simulate
from simulator.model.errors import InputError
from simulator.model.result import min_costs

SMALL = 300  # max_nodes of the graphs built here: the tests stay fast


def assert_same_task(a, b):
    (ga, ca), (gb, cb) = a, b
    assert ga.name == gb.name and ga.names == gb.names and ga.ops == gb.ops and ga.meta == gb.meta
    assert ga.costs.keys() == gb.costs.keys()
    for kind in ga.costs:
        np.testing.assert_array_equal(ga.costs[kind], gb.costs[kind])
    for field in ("out_offsets", "out_bytes", "persistent_bytes", "edge_src", "edge_dst", "edge_out"):
        np.testing.assert_array_equal(getattr(ga, field), getattr(gb, field))
    assert ca == cb


@pytest.mark.parametrize("family", GEN_FAMILIES)
def test_same_seed_same_task(family):
    specs = gen_specs(family, 3, seed=7, split="all", max_nodes=SMALL)
    assert specs == gen_specs(family, 3, seed=7, split="all", max_nodes=SMALL)
    for spec in specs:
        assert_same_task(build(spec), build(spec))
    assert specs != gen_specs(family, 3, seed=8, split="all", max_nodes=SMALL)


def test_split_is_fixed_and_a_quarter_is_test():
    train = gen_specs("gen-layered", 30, split="train", max_nodes=SMALL)
    test = gen_specs("gen-layered", 10, split="test", max_nodes=SMALL)
    every = gen_specs("gen-layered", 40, split="all", max_nodes=SMALL)
    assert not {s.index for s in train} & {s.index for s in test}
    assert sorted(s.index for s in train + test) == [s.index for s in every] == list(range(40))
    assert all(sum(s.index // 4 == b for s in test) == 1 for b in range(10))  # one of every 4 indices
    assert gen_specs("gen-layered", 12, split="train", max_nodes=SMALL) == train[:12]  # longer lists extend
    # the cap changes the sizes only, monotonically
    big = gen_specs("gen-layered", 30, split="train")
    assert [s.index for s in big] == [s.index for s in train]
    assert all(b.n_nodes >= s.n_nodes and dataclasses.replace(b, n_nodes=s.n_nodes) == s for b, s in zip(big, train))
    assert train[0].name == f"gen-layered_{train[0].index:03d}"
    assert gen_specs("gen-layered", 1, seed=3, split="all")[0].name == "gen-layered_000_s3"


def test_distribution_ranges():
    specs = [draw_spec(f, i) for f in GEN_FAMILIES for i in range(150)]
    nodes = np.array([s.n_nodes for s in specs])
    assert nodes.min() >= 50 and nodes.max() <= 20_000 and nodes.min() < 100 and nodes.max() > 10_000
    ccr = np.array([s.ccr for s in specs])
    assert ccr.min() >= 0.1 and ccr.max() <= 20 and ccr.min() < 0.2 and ccr.max() > 10
    scale = np.array([s.cost_scale_us for s in specs])
    assert scale.min() >= 1.0 and scale.max() <= 1e6 and scale.min() < 10 and scale.max() > 1e5
    assert {s.n_devices for s in specs} == set(range(2, 9))
    types = [s.cluster_type for s in specs]
    assert all(0.2 < types.count(t) / len(types) < 0.5 for t in CLUSTER_TYPES)
    assert 0.15 < np.mean([s.memory_tight for s in specs]) < 0.35
    for s in specs:
        assert len(s.device_kinds) == s.n_devices and len(s.kind_factors) == len(s.kinds)
        assert set(s.device_kinds) == set(range(len(s.kinds)))  # every kind has a device
        if s.cluster_type == "heterogeneous":
            assert 2 <= len(s.kinds) <= 3 and all(1.0 <= f <= 4.0 for f in s.kind_factors)
        if s.cluster_type == "gpu-cpu":
            assert s.device_kinds[0] == 1 and 5.0 <= s.kind_factors[1] <= 30.0


@pytest.mark.parametrize("family", GEN_FAMILIES)
def test_graphs_are_valid_on_target_and_simulate(family):
    for spec in gen_specs(family, 8, split="all", max_nodes=SMALL):
        graph, cluster = build(spec)
        assert graph.n_nodes == spec.n_nodes and 50 <= graph.n_nodes <= SMALL
        assert graph.name == spec.name and spec_from_meta(graph.meta) == spec
        assert cluster.n_devices == spec.n_devices and 2 <= cluster.n_devices <= 8
        assert graph.n_edges >= graph.n_nodes - 1 and len(graph.topo_order) == graph.n_nodes
        assert np.all(graph.edge_src < graph.edge_dst)  # ops are numbered in a topological order
        ratio = communication_ratio(graph, cluster)
        assert spec.ccr / 1.5 <= ratio <= spec.ccr * 1.5 and ratio == pytest.approx(spec.ccr, rel=0.02)
        fastest = min_costs(graph, cluster)
        assert np.median(fastest[fastest > 0]) == pytest.approx(spec.cost_scale_us, rel=1.0)
        placement = np.random.default_rng(spec.index).integers(0, cluster.n_devices, graph.n_nodes)
        result = simulate(graph, placement, cluster)
        assert np.isfinite(result.runtime) and result.runtime >= lower_bound(graph, cluster) * (1 - 1e-12)
        if not spec.memory_tight:  # roomy: the whole graph fits on one GPU
            gpu = cluster.kinds.index(spec.kinds[0])
            assert not simulate(graph, np.full(graph.n_nodes, gpu), cluster).any_oom


def test_heterogeneous_clusters_have_per_kind_costs():
    seen = set()
    for family in GEN_FAMILIES:
        for spec in gen_specs(family, 12, split="all", max_nodes=120):
            if spec.cluster_type == "homogeneous":
                continue
            graph, cluster = build(spec)
            seen.add(spec.cluster_type)
            assert set(graph.kinds) == set(cluster.kinds) == set(spec.kinds)
            base = graph.cost_for(spec.kinds[0])
            for kind, factor in zip(spec.kinds[1:], spec.kind_factors[1:]):
                cost = graph.cost_for(kind)
                assert np.all(cost >= base) and not np.array_equal(cost, base)
                ratio = cost[base > 0] / base[base > 0]
                assert np.median(ratio) == pytest.approx(factor, rel=0.3)
            if spec.cluster_type == "gpu-cpu":
                assert cluster.devices[0].name == "/cpu:0" and cluster.devices[0].kind == "cpu"
                assert all(d.kind == "gpu" for d in cluster.devices[1:])
    assert seen == {"heterogeneous", "gpu-cpu"}


def test_files_round_trip_and_rebuild(tmp_path):
    graph, cluster = build(gen_specs("gen-skip", 1, split="test", max_nodes=SMALL)[0])
    save_graph(graph, tmp_path / "g.json.gz")
    save_cluster(cluster, tmp_path / "c.json")
    loaded, loaded_cluster = load_graph(tmp_path / "g.json.gz"), load_cluster(tmp_path / "c.json")
    assert loaded_cluster == cluster
    assert_same_task(rebuild(loaded), (graph, cluster))
    placement = np.arange(graph.n_nodes) % cluster.n_devices
    assert simulate(loaded, placement, loaded_cluster).runtime == simulate(graph, placement, cluster).runtime


def test_largest_graph_builds():
    spec = dataclasses.replace(draw_spec("gen-layered", 0), n_nodes=20_000)
    graph, cluster = build(spec)
    assert graph.n_nodes == 20_000 and len(graph.topo_order) == 20_000


def test_tasks_and_bad_arguments():
    pairs = tasks("gen-chain", 2, split="test", max_nodes=100)
    assert [g.name for g, _ in pairs] == [s.name for s in gen_specs("gen-chain", 2, split="test", max_nodes=100)]
    with pytest.raises(InputError, match="unknown generated family"):
        gen_specs("gen-ring", 1)
    with pytest.raises(InputError, match="unknown split"):
        gen_specs("gen-chain", 1, split="valid")
    with pytest.raises(InputError, match="node range"):
        gen_specs("gen-chain", 1, max_nodes=10)
    with pytest.raises(InputError, match="seed"):
        draw_spec("gen-chain", 0, seed=-1)
    with pytest.raises(InputError, match="no 'gen_spec'"):
        spec_from_meta({})
    assert isinstance(draw_spec("gen-chain", 0), GenSpec)


def test_readme_section():
    text = readme_section(n=3, max_nodes=150)
    assert text.startswith("## Generated families")
    assert "generated on demand" in text and "gen_specs" in text
    rows = [line for line in text.splitlines() if line.startswith("| gen-")]
    assert [r.split(" | ")[0][2:] for r in rows] == list(GEN_FAMILIES)
    assert all(r.split(" | ")[1] == "3" for r in rows)
