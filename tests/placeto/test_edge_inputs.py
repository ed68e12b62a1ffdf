"""Edge inputs within the documented limits (tests/helpers/edge_graphs.py: tiny and huge costs and bytes, one node,
isolated nodes, a chain, wide fan-in and fan-out, 1 and 64 devices, heterogeneous presets): every list scheduler,
the learned methods' list start, and `placeto place` with the shipped policies place each one validly or refuse it
in one line (InputError, exit 2), never a traceback."""

import numpy as np
import pytest

from tests.helpers.edge_graphs import edge_cases
from placeto.baselines import run_method
from placeto.cli.main import main
from placeto.methods.placeto.env import list_start
from simulator import save_cluster, save_graph
from simulator.model.errors import InputError
from simulator.model.placement_file import load_placement

CASES = edge_cases()
SCHEDULERS = ("etf", "heft", "m-topo", "m-sct")


def _valid(placement, case):
    p = np.asarray(placement)
    assert p.shape == (case.graph.n_nodes,) and p.dtype.kind == "i", case.name
    assert np.all((p >= 0) & (p < case.cluster.n_devices)), case.name


def test_the_sweep_covers_its_corners():
    names = {c.name for c in CASES}
    for must in ("huge_bytes@placeto-k80x4", "max_bytes_one_tensor@placeto-k80x64", "isolated@placeto-k80x64",
                 "one_node@placeto-k80x1", "wide_fan_in@h100-nvlink-cpux3", "tiny_costs@placeto-k80-cpux2"):
        assert must in names


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_list_schedulers_place_every_edge_case(case):
    for name in SCHEDULERS:
        try:
            _valid(run_method(name, case.graph, case.cluster).placement, case)
        except InputError as e:  # a refusal is allowed, in one line
            assert "\n" not in str(e), (case.name, name, str(e))
    for kind in ("etf", "list"):  # the learned methods' starts (m-ETF; the four, scored)
        case.graph.cache.clear()
        _valid(list_start(case.graph, case.cluster, kind), case)


PLACE_CASES = [c for c in CASES if c.name in {  # a JAX compile or two per case: nine of the corners
    *(f"{g}@placeto-k80x4" for g in ("huge_bytes", "max_bytes_one_tensor", "mixed_extremes", "huge_costs",
                                     "isolated")),
    "isolated@placeto-k80x64", "one_node@placeto-k80x1", "mixed_extremes@h100-nvlink-cpux3",
    "wide_fan_in@placeto-k80-cpux2"}]


@pytest.mark.parametrize("method", ["placeto", "gdp"])
def test_place_with_the_shipped_policies_on_every_edge_case(method, tmp_path, capsys):
    """`placeto place` (in process) on each case: exit 0 with a placement file of the graph's size (3 with one line
    where nothing fits the memory), or exit 2 with one line (64 devices: more than the policies place)."""
    outcomes = {}
    for i, case in enumerate(PLACE_CASES):
        graph, cluster, out = tmp_path / f"g{i}.json", tmp_path / f"c{i}.json", tmp_path / f"p{i}.json"
        save_graph(case.graph, graph)
        save_cluster(case.cluster, cluster)
        rc = main(["place", str(graph), "--cluster", str(cluster), "--method", method, "--out", str(out)])
        err = capsys.readouterr().err
        assert "Traceback" not in err, (case.name, err)
        if rc in (0, 3):  # 3: nothing fits the memory; the best placement is written all the same, with one line
            _valid(load_placement(out, case.graph, case.cluster.n_devices).assignment, case)
            assert rc == 0 or err.count("\n") == 1, (case.name, err)
        else:
            assert rc == 2 and err.count("\n") == 1 and not out.exists(), (case.name, rc, err)
        outcomes[case.name] = rc
    assert all(rc == 2 for name, rc in outcomes.items() if name.endswith("x64"))  # policies place on <= 8 devices
    assert len(outcomes) == 9
    plain = ("one_node", "huge_costs", "wide_fan_in")  # the others hold tensors no 12 GB device fits: exit 3
    assert all(rc == 0 for name, rc in outcomes.items()
               if name.split("@")[0] in plain or name == "isolated@placeto-k80x4"), outcomes
