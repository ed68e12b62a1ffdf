"""Every shipped policy places a task in seconds as it places the same task in microseconds: scaling every cost and
byte of a graph and cluster by 10^k (k = -3 and 3, simulator.model.scaling.scale_units) leaves its zero-shot placement
unchanged (placeto.features normalises times by the graph's cost unit and the runtime, sizes by the bandwidth
and the capacities)."""

from pathlib import Path

import numpy as np
import pytest

from simulator.workloads.generated import build, gen_specs
from placeto.policies import shipped_policies
from simulator import cluster_preset, load_graph
from simulator.model.scaling import scale_units

ROOT = Path(__file__).resolve().parents[2]
FACTORS = [1e-3, 1e3]  # six orders of magnitude apart, both far from the recorded units
POLICIES = [p.name for p in shipped_policies()]


def tasks():
    """A shipped family graph on 4 K80s and a generated graph on its own (heterogeneous or GPU+CPU) cluster."""
    gen = [build(s) for s in gen_specs("gen-skip", 1, split="test", max_nodes=120)]
    return [(load_graph(ROOT / "datasets" / "ptb" / "ptb_013.json.gz"), cluster_preset("placeto-k80", 4)), *gen]


def one_pass(policy: str, graph, cluster) -> np.ndarray:
    from placeto.methods.gdp.place import is_gdp_checkpoint, load_run, greedy_placement
    from placeto.methods.placeto.place import place
    from placeto.policies import resolve_checkpoint

    if is_gdp_checkpoint(policy):
        config, params = load_run(resolve_checkpoint(policy))
        return greedy_placement(config, params, graph, cluster)
    return place(graph, cluster, policy).placement


def test_every_shipped_policy_is_tested():
    assert {"general", "gdp-general", "gdp-large"} <= set(POLICIES)


@pytest.mark.parametrize("policy", POLICIES)
def test_shipped_policy_does_not_depend_on_units(policy):
    for graph, cluster in tasks():
        if cluster.n_devices > 8:
            continue
        base = one_pass(policy, graph, cluster)
        for f in FACTORS:
            g, c = scale_units(graph, cluster, f)
            np.testing.assert_array_equal(one_pass(policy, g, c), base, err_msg=f"{policy} {graph.name} x{f:g}")
