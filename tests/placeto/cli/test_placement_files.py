"""The commands and placement files that know what they place: `place` and `compare --save-placements` record the
graph and cluster; `simulate` and `eval` refuse another graph's placement at the same size, use the recorded
cluster unless --preset or --cluster says otherwise (then one note line), name the cluster they used, and read a
version-1 file with one note."""

import json

import numpy as np
import pytest

from placeto.cli.main import main
from simulator import cluster_preset, load_graph, save_graph, simulate
from simulator.model.generate import layered_dag
from simulator.model.placement_file import load_placement, save_placement

PTB, TRANSFORMER = "datasets/ptb/ptb_016.json.gz", "datasets/transformer/transformer_000.json.gz"


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_placement_for_another_graph_of_the_same_size_is_refused(tmp_path, capsys):
    ptb, other = load_graph(PTB), load_graph(TRANSFORMER)
    assert ptb.n_nodes == other.n_nodes  # the probe's case: same node count, another graph
    cluster = cluster_preset("placeto-k80", 4)
    save_placement(tmp_path / "p.json", np.arange(ptb.n_nodes) % 4, cluster.device_names, graph=ptb, cluster=cluster)
    for command in ("simulate", "eval"):
        code, out, err = _run(capsys, command, TRANSFORMER, "--placement", tmp_path / "p.json")
        assert code == 2 and out == "" and err.count("\n") == 1, (command, out, err)
        assert f"{tmp_path / 'p.json'}: made for graph 'ptb_016'" in err and "not for graph 'transformer_000'" in err
    code, out, _ = _run(capsys, "simulate", PTB, "--placement", tmp_path / "p.json")
    assert code == 0 and "note" not in out


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """A graph placed by `place --preset h100-nvlink`: (graph file, placement file, graph)."""
    tmp = tmp_path_factory.mktemp("placed")
    graph = layered_dag(40, seed=2)
    save_graph(graph, tmp / "g.json")
    assert main(["place", str(tmp / "g.json"), "--method", "etf", "--preset", "h100-nvlink", "--devices", "2",
                 "--out", str(tmp / "p.json")]) == 0
    return tmp / "g.json", tmp / "p.json", graph


def test_place_records_the_graph_and_cluster_and_names_the_cluster(placed, capsys):
    g, p, graph = placed
    d = json.loads(p.read_text())
    assert d["graph"]["name"] == graph.name and d["cluster"]["preset"] == "h100-nvlink"
    assert load_placement(p, graph).made_for.cluster.cluster == cluster_preset("h100-nvlink", 2)


def test_simulate_uses_the_recorded_preset_and_says_so(placed, capsys):
    g, p, graph = placed
    assignment = load_placement(p, graph).assignment
    code, out, _ = _run(capsys, "simulate", g, "--placement", p)
    assert code == 0 and "note" not in out
    assert f"cluster          h100-nvlink (preset): 2x h100 (80.0 GB each) (recorded in {p})" in out
    h100 = simulate(graph, assignment, cluster_preset("h100-nvlink", 2)).runtime
    k80 = simulate(graph, assignment, cluster_preset("placeto-k80", 2)).runtime
    assert f"runtime          {h100 / 1e3:.3f} ms" in out and f"{h100 / 1e3:.3f}" != f"{k80 / 1e3:.3f}"
    code, out, _ = _run(capsys, "simulate", g, "--placement", p, "--json")
    record = json.loads(out)
    assert code == 0 and record["runtime_us"] == h100
    assert record["cluster"] == {"name": "h100-nvlink", "preset": "h100-nvlink", "chosen": f"recorded in {p}"}


def test_told_otherwise_simulate_notes_the_other_cluster_once(placed, capsys):
    g, p, graph = placed
    code, out, _ = _run(capsys, "simulate", g, "--placement", p, "--preset", "placeto-k80")
    assert code == 0
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert notes == [f"note: {p} was made for cluster h100-nvlink (preset): 2x h100 (80.0 GB each); simulating on "
                     f"placeto-k80 (preset): 2x k80 (12.0 GB each) as --preset says"]
    k80 = simulate(graph, load_placement(p, graph).assignment, cluster_preset("placeto-k80", 2)).runtime
    assert f"runtime          {k80 / 1e3:.3f} ms" in out
    assert "cluster          placeto-k80 (preset): 2x k80 (12.0 GB each) (--preset)" in out
    code, _, err = _run(capsys, "simulate", g, "--placement", p, "--devices", "4")
    assert code == 2 and err.count("\n") == 1 and "--devices 4 but placement" in err


def test_eval_uses_the_recorded_cluster_and_refuses_two_that_differ(placed, tmp_path, capsys):
    g, p, graph = placed
    code, out, _ = _run(capsys, "eval", g, "--placement", p)
    assert code == 0 and "cluster h100-nvlink (preset): 2x h100 (80.0 GB each) (recorded in" in out
    h100 = simulate(graph, load_placement(p, graph).assignment, cluster_preset("h100-nvlink", 2)).runtime
    assert f"{h100 / 1e3:.3f}" in out
    v100 = cluster_preset("v100-nvlink", 2)
    save_placement(tmp_path / "v.json", np.zeros(graph.n_nodes, int), v100.device_names, graph=graph, cluster=v100)
    code, _, err = _run(capsys, "eval", g, "--placement", p, tmp_path / "v.json")
    assert code == 2 and err.count("\n") == 1 and "give --preset or --cluster" in err
    code, out, _ = _run(capsys, "eval", g, "--placement", p, tmp_path / "v.json", "--preset", "v100-nvlink")
    assert code == 0 and sum(line.startswith("note:") for line in out.splitlines()) == 1  # p.json's only


def test_an_old_file_is_read_with_one_note(placed, tmp_path, capsys):
    g, p, graph = placed
    d = json.loads(p.read_text())
    (tmp_path / "old.json").write_text(json.dumps({"devices": d["devices"], "placement": d["placement"]}))
    for command in ("simulate", "eval"):
        code, out, _ = _run(capsys, command, g, "--placement", tmp_path / "old.json")
        notes = [line for line in out.splitlines() if line.startswith("note:")]
        assert code == 0 and len(notes) == 1 and "no fingerprint: made before" in notes[0], (command, out)
        assert "placeto-k80 (preset): 2x k80" in out  # the default, as before


def test_a_garbage_fingerprint_is_one_line_exit_2(placed, tmp_path, capsys):
    g, p, _ = placed
    d = json.loads(p.read_text())
    d["graph"]["structure"] = "garbage"
    (tmp_path / "bad.json").write_text(json.dumps(d))
    code, out, err = _run(capsys, "simulate", g, "--placement", tmp_path / "bad.json")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{tmp_path / 'bad.json'}: field 'graph.structure'" in err


def test_compare_saves_fingerprinted_placements_and_names_the_cluster(tmp_path, capsys):
    graph = layered_dag(30, seed=0)
    save_graph(graph, tmp_path / "g.json")
    code, out, _ = _run(capsys, "compare", tmp_path / "g.json", "--methods", "single,etf", "--devices", "2",
                        "--preset", "v100-nvlink", "--save-placements", tmp_path / "plc", "--quiet")
    assert code == 0 and "cluster v100-nvlink (preset) at 2 devices" in out
    made = load_placement(tmp_path / "plc" / f"{graph.name}.2dev.etf.json", graph).made_for
    assert made.graph.name == graph.name and made.cluster.cluster == cluster_preset("v100-nvlink", 2)
