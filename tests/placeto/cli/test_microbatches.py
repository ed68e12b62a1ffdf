"""`--microbatches M` on place, simulate, compare and eval: simulated as M microbatches; bad M is one line, exit 2."""

import json

import numpy as np
import pytest

from placeto.cli.main import main
from simulator import cluster_preset, save_graph, save_placement, simulate
from simulator.model.microbatch import microbatched
from tests.simulator.engine.test_microbatched import two_stage_chain


@pytest.fixture()
def files(tmp_path):
    save_graph(two_stage_chain(), tmp_path / "g.json")
    save_placement(tmp_path / "p.json", [0, 1, 1, 0, 0, 1], ["/gpu:0", "/gpu:1"])
    return tmp_path


def test_simulate_with_microbatches(files, capsys):
    graph, cluster = two_stage_chain(), cluster_preset("placeto-k80", 2)
    for m in (1, 4):
        assert main(["simulate", str(files / "g.json"), "--placement", str(files / "p.json"), "--json",
                     "--microbatches", str(m)]) == 0
        result = json.loads(capsys.readouterr().out)
        expected = simulate(microbatched(graph, m), [0, 1, 1, 0, 0, 1], cluster)
        assert result["runtime_us"] == expected.runtime and len(result["nodes"]) == graph.n_nodes
    assert expected.runtime < simulate(graph, [0, 1, 1, 0, 0, 1], cluster).runtime  # pipelined: shorter


def test_place_compare_and_eval_with_microbatches(files, capsys):
    out = files / "placed.json"
    assert main(["place", str(files / "g.json"), "--method", "m-sct", "--devices", "2", "--out", str(out),
                 "--microbatches", "4"]) == 0
    assert json.loads(out.read_text())["placement"]
    assert main(["compare", str(files / "g.json"), "--methods", "single,m-sct", "--devices", "2", "--budget", "5",
                 "--quiet", "--microbatches", "2"]) == 0
    assert main(["eval", str(files / "g.json"), "--placement", str(files / "p.json"), "--microbatches", "3"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("bad", ["0", "-2", "1000000000", "1025", "2.5", "nan", "four"])
@pytest.mark.parametrize("command", ["simulate", "place", "compare", "eval"])
def test_bad_microbatches_is_one_line_exit_2(files, capsys, command, bad):
    g, p = str(files / "g.json"), str(files / "p.json")
    argv = {"simulate": ["simulate", g, "--placement", p], "place": ["place", g, "--out", str(files / "o.json")],
            "compare": ["compare", g], "eval": ["eval", g, "--placement", p]}[command]
    with pytest.raises(SystemExit) as e:
        main(argv + ["--microbatches", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--microbatches" in err


@pytest.mark.parametrize("command", ["place", "eval"])
def test_microbatches_are_not_run_on_hardware(files, capsys, command):
    g, p = str(files / "g.json"), str(files / "p.json")
    argv = {"place": ["place", g, "--out", str(files / "o.json")], "eval": ["eval", g, "--placement", p]}[command]
    assert main(argv + ["--hardware", "--microbatches", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--microbatches" in err and "--hardware" in err
