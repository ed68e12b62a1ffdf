"""Issue 64, item 8: the messages a new user trips over read sensibly: a family typo is "unknown family 'nmtt'
(did you mean 'nmt'?)" with the choices; an unknown option is the subcommand's error, with the close option and
its help; a graph, placement or cluster file given for another says so; a profile without a method says that."""

from __future__ import annotations

import json

import pytest

from placeto.cli.main import main
from simulator.measure.cache import ProfileKey
from simulator.measure.graph_profile import stale
from simulator.model.cluster import cluster_preset, load_cluster, save_cluster
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.model.io import load_graph, save_graph
from simulator.model.placement_file import load_placement, save_placement
from simulator.workloads.families import load_manifest


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_family_typo_suggests_the_family(capsys):
    with pytest.raises(InputError) as e:
        load_manifest("nmtt")
    assert str(e.value).startswith("unknown family 'nmtt' (did you mean 'nmt'?); choices: ")
    assert "cifar10" in str(e.value) and "datasets build" not in str(e.value)
    with pytest.raises(InputError, match=r"unknown family 'zzzzzz'; choices: "):  # nothing close: no guess
        load_manifest("zzzzzz")
    assert main(["train", "--family", "nmtt", "--out", "unused"]) == 2
    assert _error(capsys).startswith("placeto: error: unknown family 'nmtt' (did you mean 'nmt'?); choices: ")
    with pytest.raises(SystemExit):
        main(["datasets", "build", "--family", "nmtt"])
    line = _error(capsys)
    assert line.startswith("placeto datasets build: error: argument --family: invalid choice: 'nmtt' (did you mean "
                           "'nmt'?) (choose from 'cifar10'") and line.endswith("(see placeto datasets build --help)")


def test_an_unknown_option_is_the_subcommands_with_the_close_one(capsys):
    for argv, says in ((["place", "g.json", "--out", "p.json", "--secs", "1"],
                        "placeto place: error: unrecognized arguments: --secs 1 (did you mean --seconds?) (see "
                        "placeto place --help)"),
                       (["graph", "info", "g.json", "--kindd", "k80"],
                        "placeto graph info: error: unrecognized arguments: --kindd k80 (did you mean --kind?) (see "
                        "placeto graph info --help)"),
                       (["place", "g.json", "--out", "p.json", "--zzzzzz"],
                        "placeto place: error: unrecognized arguments: --zzzzzz (see placeto place --help)")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2 and _error(capsys) == says


def test_a_file_of_another_kind_says_what_it_is(tmp_path):
    graph = layered_dag(6, seed=0)
    save_graph(graph, tmp_path / "g.json")
    save_placement(tmp_path / "p.json", [0] * 6, ["/gpu:0", "/gpu:1"])
    save_cluster(cluster_preset("placeto-k80", 2), tmp_path / "c.json")
    for load, path, says in ((load_placement, "g.json", "this is a graph file, not a placement file"),
                             (load_placement, "c.json", "this is a cluster file, not a placement file"),
                             (load_graph, "p.json", "this is a placement file, not a graph file"),
                             (load_graph, "c.json", "this is a cluster file, not a graph file"),
                             (load_cluster, "g.json", "this is a graph file, not a cluster file"),
                             (load_cluster, "p.json", "this is a placement file, not a cluster file")):
        with pytest.raises(InputError) as e:
            load(tmp_path / path)
        assert str(e.value) == f"{tmp_path / path}: {says}"
    (tmp_path / "x.json").write_text(json.dumps({"devices": []}))  # of no kind: the expected kind's own message
    with pytest.raises(InputError, match="missing field 'placement'"):
        load_placement(tmp_path / "x.json")


def test_a_profile_without_a_method_says_so():
    key = ProfileKey("0" * 64, "local-cpu", "cpu", "host", "0.0")
    assert stale({"device": "cpu"}, key) == "records no measuring method (an older op-level profile, not the step " \
                                            "method's)"
    assert stale({"method": "op"}, key) == "was measured by method 'op', not 'step'"
