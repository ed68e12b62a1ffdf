"""Placement files that know what they place (simulator.model.placement_file): the graph's and the cluster's
fingerprints, stable and order-independent; a placement for another graph refused at the same size; version-1
files read unchecked; a damaged fingerprint one line naming the file and the field."""

import dataclasses
import gzip
import hashlib
import json

import numpy as np
import pytest

from simulator import InputError, cluster_preset, load_graph, save_graph
from simulator.model.cluster import Cluster, Device, with_memory
from simulator.model.generate import layered_dag
from simulator.model.io import graph_from_dict, graph_to_dict
from simulator.model.placement_file import (VERSION, cluster_note, cluster_print, graph_notes, graph_print,
                                            load_placement, placement_dict, preset_of, recorded_cluster,
                                            save_placement)

SHIPPED = "datasets/nmt/nmt_004.json.gz"


def _reordered(d: dict) -> dict:
    """The same graph file with every dictionary's keys in reverse order (cost kinds, node fields, meta)."""
    if isinstance(d, dict):
        return {k: _reordered(d[k]) for k in reversed(list(d))}
    if isinstance(d, list):
        return [_reordered(x) for x in d]
    return d


def test_the_fingerprint_is_the_same_for_two_loads_and_any_key_order(tmp_path):
    a, b = load_graph(SHIPPED), load_graph(SHIPPED)
    assert a is not b and graph_print(a) == graph_print(b)
    d = json.loads(gzip.decompress(open(SHIPPED, "rb").read()))
    assert len(d["nodes"][0]["cost"]) > 1  # a cost map whose order the reversal changes
    shuffled = _reordered(d)
    shuffled["edges"] = shuffled["edges"][::-1]  # edges are a set: their order does not matter either
    shuffled["meta"] = {"anything": 1}  # nor the meta
    assert graph_print(graph_from_dict(shuffled)) == graph_print(a)


def test_the_fingerprint_is_pinned_across_runs_and_machines():
    """A literal: no hash randomisation, byte order or float printing changes it."""
    g = graph_from_dict({"format": "placeto-graph", "version": 1, "name": "tiny",
                         "nodes": [{"name": "a", "op": "dot", "cost": {"k80": 1.5, "cpu": 3}, "out_bytes": [8]},
                                   {"name": "b", "op": "add", "cost": 0.25, "out_bytes": [4, 4],
                                    "persistent_bytes": 16, "colocation": "v", "attrs": {"flops": 10}}],
                         "edges": [{"src": "a", "dst": "b", "out": 0}]})
    p = graph_print(g)
    assert (p.name, p.nodes) == ("tiny", 2)
    # the canonical texts of the module docstring, written out by hand
    structure = b'{"edges":[[0,1,0]],"nodes":[["a","dot",[8],0,null],["b","add",[4,4],16,"v"]]}'
    costs = b'{"attrs":[{},{"flops":10}],"costs":{"cpu":[3,null],"default":[null,0.25],"k80":[1.5,null]}}'
    assert p.structure == hashlib.sha256(structure).hexdigest() == PINNED_STRUCTURE
    assert p.costs == hashlib.sha256(costs).hexdigest() == PINNED_COSTS
    assert cluster_print(cluster_preset("h100-nvlink", 4)).hash == PINNED_H100_4


PINNED_STRUCTURE = "db0581a4d466e7a73c7caaf9dbce344d903ccc80b27295754ca3ae04220d5f7b"
PINNED_COSTS = "ee85a79ee9846a6deaf20a0472c65a0a99bbcef9d7fe34046cc376199f0ac02d"
PINNED_H100_4 = "897363934472f577109bd18e15ad871927a86148cc9ea583c55d6f8847d8f814"


def test_a_changed_cost_changes_the_costs_hash_and_a_changed_size_the_structure():
    g = layered_dag(30, seed=1)
    base = graph_print(g)
    kind = g.kinds[0]
    cost = g.costs[kind].copy()
    cost[7] += 1.0
    changed = graph_print(g.with_costs(kind, cost))
    assert changed.structure == base.structure and changed.costs != base.costs
    d = graph_to_dict(g)
    d["nodes"][3]["out_bytes"][0] += 1
    assert graph_print(graph_from_dict(d)).structure != base.structure
    d = graph_to_dict(g)
    d["name"] = "renamed"
    assert graph_print(graph_from_dict(d))[2:] == base[2:]  # the name is recorded beside, not hashed


def test_a_placement_for_another_graph_is_refused_at_the_same_size(tmp_path):
    a, b = layered_dag(40, seed=0), layered_dag(40, seed=1)
    b = dataclasses.replace(b, name="other")
    assert a.n_nodes == b.n_nodes
    cluster = cluster_preset("placeto-k80", 2)
    save_placement(tmp_path / "p.json", np.arange(a.n_nodes) % 2, cluster.device_names, graph=a, cluster=cluster)
    assert load_placement(tmp_path / "p.json", a).assignment.tolist() == (np.arange(a.n_nodes) % 2).tolist()
    with pytest.raises(InputError) as e:
        load_placement(tmp_path / "p.json", b)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{tmp_path / 'p.json'}: made for graph {a.name!r}")
    assert "not for graph 'other'" in msg


def test_a_renamed_or_profiled_graph_is_accepted_with_a_note(tmp_path):
    g = layered_dag(20, seed=0)
    save_placement(tmp_path / "p.json", np.zeros(g.n_nodes, int), ["/gpu:0"], graph=g)
    p = load_placement(tmp_path / "p.json", g)
    assert graph_notes(p, g, "p.json") == []
    kind = g.kinds[0]
    other = dataclasses.replace(g.with_costs(kind, g.costs[kind] * 2), name="renamed")
    notes = graph_notes(load_placement(tmp_path / "p.json", other), other, "p.json")
    assert len(notes) == 2 and "same structure as 'renamed'" in notes[0] and "other costs" in notes[1]


def test_a_version_1_file_reads_as_before_with_one_note(tmp_path):
    g = layered_dag(20, seed=0)
    (tmp_path / "old.json").write_text(json.dumps({"devices": ["/gpu:0", "/gpu:1"],
                                                   "placement": [i % 2 for i in range(g.n_nodes)]}))
    p = load_placement(tmp_path / "old.json", g, 2)
    assert p.made_for.version == 1 and p.made_for.graph is None and p.made_for.cluster is None
    notes = graph_notes(p, g, "old.json")
    assert len(notes) == 1 and notes[0].startswith("note: old.json: no fingerprint: made before")
    assert "not checked" in notes[0]


def test_the_file_records_the_graph_and_the_cluster(tmp_path):
    g = layered_dag(20, seed=0)
    cluster = with_memory(cluster_preset("h100-nvlink", 2), 8e9)
    save_placement(tmp_path / "p.json", np.zeros(g.n_nodes, int), cluster.device_names, graph=g, cluster=cluster)
    d = json.loads((tmp_path / "p.json").read_text())
    assert (d["format"], d["version"]) == ("placeto-placement", VERSION)
    assert d["graph"] == {"name": g.name, "nodes": g.n_nodes, **{k: v for k, v in graph_print(g)._asdict().items()
                                                                  if k in ("structure", "costs")}}
    assert d["cluster"]["preset"] == "h100-nvlink" and d["cluster"]["definition"] == cluster.to_dict()
    p = load_placement(tmp_path / "p.json", g)
    assert p.made_for.cluster.cluster == cluster and p.made_for.cluster.preset == "h100-nvlink"
    assert recorded_cluster([("p.json", p)]) == ("p.json", cluster)
    assert cluster_note(p, "p.json", cluster, "") is None
    note = cluster_note(p, "p.json", cluster_preset("placeto-k80", 2), "as --preset says")
    assert note.startswith("note: p.json was made for cluster h100-nvlink (preset): 2x h100 (8.0 GB each)")
    assert note.endswith("simulating on placeto-k80 (preset): 2x k80 (12.0 GB each) as --preset says")


def test_presets_and_other_clusters():
    assert preset_of(cluster_preset("a100-nvlink-cpu", 3)) == "a100-nvlink-cpu"
    assert preset_of(with_memory(cluster_preset("placeto-k80", 4), 1e9)) == "placeto-k80"
    mine = Cluster("placeto-k80", tuple(Device(f"/gpu:{i}", "k80", 12e9) for i in range(2)), 1.0, 25.0, 7600.0)
    assert preset_of(mine) is None  # the preset's name, not its parameters
    assert cluster_print(mine).hash != cluster_print(cluster_preset("placeto-k80", 2)).hash


def test_two_placements_for_different_clusters_are_one_line(tmp_path):
    g = layered_dag(20, seed=0)
    placed = []
    for name in ("placeto-k80", "v100-nvlink"):
        c = cluster_preset(name, 2)
        save_placement(tmp_path / f"{name}.json", np.zeros(g.n_nodes, int), c.device_names, graph=g, cluster=c)
        placed.append((f"{name}.json", load_placement(tmp_path / f"{name}.json", g)))
    with pytest.raises(InputError, match=r"placeto-k80.json was made for cluster 'placeto-k80' but "
                                         r"v100-nvlink.json for 'v100-nvlink'.*give --preset or --cluster"):
        recorded_cluster(placed)


def test_the_writer_refuses_devices_that_are_not_the_clusters():
    g = layered_dag(10, seed=0)
    with pytest.raises(InputError, match="are not cluster"):
        placement_dict(np.zeros(g.n_nodes, int), ["/gpu:0", "/gpu:9"], g, cluster_preset("placeto-k80", 2))
    with pytest.raises(InputError, match="entries but graph"):
        placement_dict(np.zeros(3, int), ["/gpu:0"], g)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["graph"].update(structure="not a hash"), "'graph.structure'"),
    (lambda d: d["graph"].update(costs=7), "'graph.costs'"),
    (lambda d: d["graph"].pop("structure"), "'graph.structure': missing"),
    (lambda d: d["graph"].update(nodes=3), "'graph.nodes'"),
    (lambda d: d["graph"].update(nodes=True), "'graph.nodes'"),
    (lambda d: d["graph"].update(name=None), "'graph.name'"),
    (lambda d: d.update(graph=[1]), "'graph'"),
    (lambda d: d["cluster"].update(hash="0" * 64), "'cluster.hash'"),
    (lambda d: d["cluster"]["definition"].update(delta1_us=99.0), "'cluster.hash'"),  # edited by hand
    (lambda d: d["cluster"]["definition"].update(delta1_us="x"), "'cluster.definition'"),
    (lambda d: d["cluster"].pop("definition"), "'cluster.definition'"),
    (lambda d: d["cluster"].update(preset="v100-nvlink"), "'cluster.preset'"),
    (lambda d: d.update(devices=["/gpu:0", "/gpu:7"]), "'devices'"),
    (lambda d: d.update(version=3), "'version': unsupported version 3"),
    (lambda d: d.update(version="2"), "'version'"),
    (lambda d: d.update(format="placeto-graph"), "this is a graph file"),
])
def test_a_damaged_fingerprint_is_one_line_naming_the_file_and_field(tmp_path, edit, field):
    g = layered_dag(10, seed=0)
    c = cluster_preset("placeto-k80", 2)
    d = placement_dict(np.zeros(g.n_nodes, int), c.device_names, g, c)
    edit(d)
    (tmp_path / "p.json").write_text(json.dumps(d))
    with pytest.raises(InputError) as e:
        load_placement(tmp_path / "p.json", g)
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{tmp_path / 'p.json'}: ")
    assert field in str(e.value)


def test_fingerprints_of_the_shipped_graph_round_trip(tmp_path):
    """Saved again, a graph keeps its fingerprint (save_graph is what `profile` and `--save-profile` do)."""
    g = load_graph(SHIPPED)
    save_graph(g, tmp_path / "again.json.gz")
    assert graph_print(load_graph(tmp_path / "again.json.gz")) == graph_print(g)
