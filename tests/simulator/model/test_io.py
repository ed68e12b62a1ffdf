"""Graph/placement/cluster files: round trips, determinism and one-line errors for every kind of bad input."""

import copy
import gzip
import json
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

from placeto.cli.main import main
from simulator import cluster_preset, load_graph, load_placement, save_graph
from simulator.model.cluster import load_cluster, save_cluster
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.model.io import from_networkx, graph_to_dict, to_networkx
from simulator.model.placement_file import save_placement

GOOD = {
    "format": "placeto-graph", "version": 1, "name": "tiny", "meta": {"family": "test"},
    "nodes": [
        {"name": "a", "op": "param", "cost": 1.5, "out_bytes": [100], "persistent_bytes": 100, "colocation": "w"},
        {"name": "b", "op": "matmul", "cost": {"k80": 10, "cpu": 40}, "out_bytes": [200, 8]},
        {"name": "c", "op": "add", "cost": 2, "out_bytes": [4], "attrs": {"shape": [1]}},
    ],
    "edges": [{"src": "a", "dst": "b", "out": 0}, {"src": "b", "dst": "c", "out": 1},
              {"src": "b", "dst": "c", "out": 0}],
}


def write(tmp_path, d, name="g.json"):
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return str(path)


def test_round_trip_json_and_gzip_byte_identical(tmp_path):
    g = load_graph(write(tmp_path, GOOD))
    assert g.n_nodes == 3 and g.n_edges == 3
    assert g.cost_for("k80").tolist() == [1.5, 10.0, 2.0]
    assert g.cost_for("cpu").tolist() == [1.5, 40.0, 2.0]
    for name in ("out.json", "out.json.gz"):
        save_graph(g, tmp_path / name)
        g2 = load_graph(tmp_path / name)
        save_graph(g2, tmp_path / ("again_" + name))
        assert (tmp_path / name).read_bytes() == (tmp_path / ("again_" + name)).read_bytes()
        assert graph_to_dict(g2) == graph_to_dict(g)
    assert gzip.decompress((tmp_path / "out.json.gz").read_bytes()) == (tmp_path / "out.json").read_bytes()


def test_random_graph_round_trip(tmp_path):
    g = layered_dag(300, seed=4, kinds=("k80", "cpu"))
    save_graph(g, tmp_path / "r.json.gz")
    g2 = load_graph(tmp_path / "r.json.gz")
    for field in ("out_offsets", "out_bytes", "persistent_bytes", "edge_src", "edge_dst", "edge_out"):
        assert np.array_equal(getattr(g, field), getattr(g2, field)), field
    for kind in ("k80", "cpu"):
        assert np.array_equal(g.cost_for(kind), g2.cost_for(kind))


def test_networkx_round_trip():
    g = layered_dag(50, seed=1)
    nxg = to_networkx(g)
    assert isinstance(nxg, nx.MultiDiGraph) and nxg.number_of_nodes() == 50 and nxg.number_of_edges() == g.n_edges
    assert nx.is_directed_acyclic_graph(nxg)
    assert graph_to_dict(from_networkx(nxg)) == graph_to_dict(g)


def test_missing_kind_names_node(tmp_path):
    g = load_graph(write(tmp_path, GOOD))
    with pytest.raises(InputError, match="node 'b': no cost for device kind 'v100'"):
        g.cost_for("v100")
    d = copy.deepcopy(GOOD)
    d["nodes"][1]["cost"] = {"cpu": 3}
    g = load_graph(write(tmp_path, d))
    with pytest.raises(InputError, match="node 'b': no cost for device kind 'k80'"):
        g.cost_for("k80")


def mutate(fn):
    d = copy.deepcopy(GOOD)
    fn(d)
    return d


BAD_GRAPHS = [
    ("cycle", lambda d: d["edges"].append({"src": "c", "dst": "a", "out": 0}), "node '.': the graph has a cycle"),
    ("self loop", lambda d: d["edges"].append({"src": "c", "dst": "c", "out": 0}), "node 'c' feeds itself"),
    ("unknown node", lambda d: d["edges"].append({"src": "a", "dst": "zz", "out": 0}), "unknown node 'zz'"),
    ("duplicate name", lambda d: d["nodes"].append(dict(d["nodes"][0])), "node 'a': duplicate name"),
    ("negative cost", lambda d: d["nodes"][2].update(cost=-1), "node 'c': field 'cost'"),
    ("nan cost", lambda d: d["nodes"][2].update(cost=float("nan")), "node 'c': field 'cost'"),
    ("inf cost in map", lambda d: d["nodes"][1].update(cost={"k80": float("inf")}), "node 'b': field 'cost'"),
    ("negative bytes", lambda d: d["nodes"][0].update(out_bytes=[-4]), "node 'a': field 'out_bytes'"),
    ("nan persistent", lambda d: d["nodes"][0].update(persistent_bytes=float("nan")),
     "node 'a': field 'persistent_bytes'"),
    ("string bytes", lambda d: d["nodes"][0].update(out_bytes=["x"]), "node 'a': field 'out_bytes'"),
    ("output index", lambda d: d["edges"].append({"src": "a", "dst": "c", "out": 3}), "output index 3 but 'a' has 1"),
    ("missing cost", lambda d: d["nodes"][2].pop("cost"), "node 'c': missing field 'cost'"),
    ("missing name", lambda d: d["nodes"][2].pop("name"), "node #2: missing field 'name'"),
    ("missing edges", lambda d: d.pop("edges"), "missing field 'edges'"),
    ("missing src", lambda d: d["edges"][0].pop("src"), "edge #0: missing field 'src'"),
    ("wrong format", lambda d: d.update(format="tf-graph"), "field 'format'"),
    ("wrong version", lambda d: d.update(version=7), "field 'version': unsupported version 7"),
    ("wrong type", lambda d: d["nodes"][1].update(op=3), "node 'b': field 'op' has the wrong type"),
]


@pytest.mark.parametrize("label,fn,message", BAD_GRAPHS, ids=[b[0] for b in BAD_GRAPHS])
def test_bad_graph_one_line_error(tmp_path, capsys, label, fn, message):
    path = write(tmp_path, mutate(fn))
    with pytest.raises(InputError, match=message):
        load_graph(path)
    assert main(["graph", "info", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"placeto: error: {path}: ")
    assert "Traceback" not in err


def test_cycle_error_names_a_node_on_the_cycle(tmp_path):
    d = mutate(lambda d: d["edges"].append({"src": "c", "dst": "b", "out": 0}))
    with pytest.raises(InputError, match="node '(b|c)': the graph has a cycle"):
        load_graph(write(tmp_path, d))


def test_not_json_and_missing_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert main(["graph", "info", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["graph", "info", str(tmp_path / "nothing.json")]) == 2
    assert "no such file" in capsys.readouterr().err


BAD_PLACEMENTS = [
    ({"devices": ["/gpu:0", "/gpu:1"], "placement": [0, 1]}, "placement has 2 entries but graph 'tiny' has 3"),
    ({"devices": ["/gpu:0", "/gpu:1"], "placement": [0, 1, 2]}, "node 'c': device index 2 out of range for 2"),
    ({"devices": [], "placement": [0, -1, 0]}, "node 'b': device index -1 out of range"),
    ({"placement": {"a": 0, "b": 1}}, "node 'c' has no device"),
    ({"placement": {"a": 0, "b": 1, "c": 0, "q": 1}}, "node 'q' is not in graph 'tiny'"),
    ({"placement": [0, "x", 1]}, "entry 1 is 'x'"),
    ({"devices": []}, "missing field 'placement'"),
]


@pytest.mark.parametrize("placement,message", BAD_PLACEMENTS)
def test_bad_placement_one_line_error(tmp_path, capsys, placement, message):
    gpath = write(tmp_path, GOOD)
    ppath = write(tmp_path, placement, "p.json")
    with pytest.raises(InputError, match=message):
        load_placement(ppath, load_graph(gpath), 2)
    assert main(["simulate", gpath, "--placement", ppath, "--devices", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{ppath}: " in err and "Traceback" not in err


def test_placement_by_name_and_save(tmp_path):
    g = load_graph(write(tmp_path, GOOD))
    p = load_placement(write(tmp_path, {"placement": {"c": 1, "a": 0, "b": 1}}, "p.json"), g, 2)
    assert p.assignment.tolist() == [0, 1, 1]
    save_placement(tmp_path / "q.json", p.assignment, ["/gpu:0", "/gpu:1"])
    assert load_placement(tmp_path / "q.json", g).assignment.tolist() == [0, 1, 1]


def test_cluster_file_round_trip_and_errors(tmp_path, capsys):
    c = cluster_preset("placeto-k80", 4)
    save_cluster(c, tmp_path / "c.json")
    assert load_cluster(tmp_path / "c.json") == c
    d = c.to_dict()
    d["bandwidth_bytes_per_us"] = -1
    path = write(tmp_path, d, "bad_cluster.json")
    with pytest.raises(InputError, match="bad_cluster.json: cluster 'placeto-k80': field 'bandwidth_bytes_per_us'"):
        load_cluster(path)
    with pytest.raises(InputError, match="unknown cluster preset"):
        cluster_preset("tpu-pod", 2)


def test_cli_subprocess_prints_no_traceback(tmp_path):
    path = write(tmp_path, mutate(lambda d: d["edges"].append({"src": "c", "dst": "a", "out": 0})))
    proc = subprocess.run([sys.executable, "-m", "placeto.cli.main", "graph", "info", path], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "has a cycle" in proc.stderr and "Traceback" not in proc.stderr
