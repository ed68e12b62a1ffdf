"""simulator.model.scaling.scale_units: simulated times scale by the factor, and the list schedulers etf and m-sct place
the scaled task exactly as the original (no unit-dependent constant)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from placeto.baselines import run_method
from simulator.workloads.generated import GEN_FAMILIES, build, gen_specs
from simulator import cluster_preset, load_graph, simulate
from simulator.model.cluster import Host
from simulator.model.errors import InputError
from simulator.model.scaling import scale_units

ROOT = Path(__file__).resolve().parents[3]
FACTORS = [10.0 ** k for k in range(-3, 4)]


def with_hosts(cluster):
    """`cluster` with two hosts of non-zero dispatch and transfer times, so they are scaled too."""
    hosts = (Host("h0", 3.0, 7.0), Host("h1", 1.5, 2.0))
    devices = tuple(dataclasses.replace(d, host=f"h{i % 2}") for i, d in enumerate(cluster.devices))
    return dataclasses.replace(cluster, devices=devices, hosts=hosts, latency_us=4.0)


def cases():
    generated = [build(s) for f in GEN_FAMILIES for s in gen_specs(f, 1, split="all", max_nodes=250)]
    return generated + [(load_graph(ROOT / "datasets" / "nmt" / "nmt_004.json.gz"), cluster_preset("placeto-k80", 4))]


def test_scale_units_scales_every_time_and_size():
    graph, cluster = build(gen_specs("gen-forkjoin", 1, split="all", max_nodes=200)[0])
    cluster = with_hosts(cluster)
    g, c = scale_units(graph, cluster, 1e-3)
    for kind in graph.costs:
        np.testing.assert_allclose(g.costs[kind], graph.costs[kind] * 1e-3, rtol=1e-15)
    np.testing.assert_allclose(g.out_bytes, graph.out_bytes * 1e-3, rtol=1e-15)
    np.testing.assert_allclose(g.persistent_bytes, graph.persistent_bytes * 1e-3, rtol=1e-15)
    assert c.bandwidth_bytes_per_us == cluster.bandwidth_bytes_per_us
    for field in ("delta1_us", "delta2_us", "latency_us"):
        assert getattr(c, field) == pytest.approx(getattr(cluster, field) * 1e-3, rel=1e-15)
    assert [h.dispatch_us for h in c.hosts] == pytest.approx([h.dispatch_us * 1e-3 for h in cluster.hosts])
    assert [h.transfer_us for h in c.hosts] == pytest.approx([h.transfer_us * 1e-3 for h in cluster.hosts])
    assert c.memory == pytest.approx([m * 1e-3 for m in cluster.memory])
    assert g.names == graph.names and np.array_equal(g.edge_src, graph.edge_src) and g.meta == graph.meta
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match="scale factor"):
            scale_units(graph, cluster, bad)


def test_simulated_runtime_scales_by_the_factor():
    for graph, cluster in cases()[::2] + [(cases()[1][0], with_hosts(cases()[1][1]))]:
        placement = np.random.default_rng(0).integers(0, cluster.n_devices, graph.n_nodes)
        base = simulate(graph, placement, cluster)
        for f in FACTORS:
            g, c = scale_units(graph, cluster, f)
            result = simulate(g, placement, c)
            assert result.runtime == pytest.approx(base.runtime * f, rel=1e-9)
            np.testing.assert_allclose(result.end, base.end * f, rtol=1e-9, atol=1e-12 * base.runtime * f)
            np.testing.assert_allclose(result.peak_memory, base.peak_memory * f, rtol=1e-9)
            assert np.array_equal(result.oom, base.oom)


@pytest.mark.parametrize("method", ["etf", "m-sct"])
def test_list_schedulers_do_not_depend_on_units(method):
    for graph, cluster in cases():
        base = run_method(method, graph, cluster).placement
        for f in FACTORS:
            assert np.array_equal(run_method(method, *scale_units(graph, cluster, f)).placement, base), \
                (graph.name, f)
