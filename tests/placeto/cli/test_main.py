"""The CLI end to end on small inputs: import-jax, graph info, simulate (--json, --gantt), train --set."""

import json

import numpy as np

from placeto.cli.main import main
from simulator import load_graph, save_graph, save_placement, simulate, cluster_preset
from simulator.model.generate import layered_dag


def test_import_jax_writes_costed_op_and_grouped_graphs(tmp_path, capsys):
    spec = json.dumps([{"shape": [512, 1024]}, {"shape": [1024, 512]}])  # 0.5 GFLOP: compute-bound
    out, grouped = tmp_path / "mm.json.gz", tmp_path / "mm.grouped.json"
    assert main(["import-jax", "jax.numpy:matmul", "--args-spec", spec, "--out", str(out),
                 "--grouped-out", str(grouped), "--groups", "2"]) == 0
    g = load_graph(out)
    assert "dot_general" in g.ops and g.meta["source"]["args_spec"] == spec
    assert g.name == "mm" and load_graph(grouped).name == "mm"  # named after --out, not the function "matmul"
    assert g.cost_for("k80").max() > 0 and g.cost_for("cpu").max() > g.cost_for("h100").max()
    assert load_graph(grouped).n_nodes <= g.n_nodes
    assert main(["import-jax", "jax.numpy:nope", "--args-spec", spec, "--out", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    three = json.dumps([{"shape": [2, 2]}] * 3)  # matmul(a, b) takes two
    assert main(["import-jax", "jax.numpy:matmul", "--args-spec", three, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "jax.numpy:matmul(a, b) takes 2 positional arguments, but --args-spec gives 3" in err


def test_graph_info_and_simulate(tmp_path, capsys):
    graph = layered_dag(60, seed=3)
    save_graph(graph, tmp_path / "g.json")
    placement = np.arange(graph.n_nodes) % 2
    save_placement(tmp_path / "p.json", placement, ["/gpu:0", "/gpu:1"])
    assert main(["graph", "info", str(tmp_path / "g.json")]) == 0
    assert "lower bound  4d" in capsys.readouterr().out
    assert main(["simulate", str(tmp_path / "g.json"), "--placement", str(tmp_path / "p.json"), "--devices", "2",
                 "--json", "--gantt", str(tmp_path / "s.png")]) == 0
    result = json.loads(capsys.readouterr().out)
    expected = simulate(graph, placement, cluster_preset("placeto-k80", 2))
    assert result["runtime_us"] == expected.runtime and len(result["nodes"]) == graph.n_nodes
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


def test_train_set_overrides_reach_the_config_and_bad_ones_exit_2(tmp_path, capsys):
    from placeto.methods.placeto.config import parse_overrides

    assert parse_overrides(["gamma=0.5", "counterfactual=true", "rounds=3", "visit_order=reverse_topo"]) == {
        "gamma": 0.5, "counterfactual": True, "rounds": 3, "visit_order": "reverse_topo"}
    save_graph(layered_dag(12, seed=1), tmp_path / "g.json")
    base = ["train", "--graph", str(tmp_path / "g.json"), "--devices", "2", "--config", "tiny"]
    for bad, what in ((["nope=1"], "nope=1"), (["rounds=two"], "rounds takes a value of type int"),
                      (["visit_order=sideways"], "visit_order")):
        assert main(base + ["--out", str(tmp_path / "bad"), "--set", *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and what in err
    assert not (tmp_path / "bad").exists()  # nothing written for a bad configuration
    assert main(base + ["--out", str(tmp_path / "run"), "--episodes", "4", "--set", "gamma=0.5", "hidden=8"]) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["gamma"] == 0.5 and config["hidden"] == 8 and config["episodes"] == 4
