"""Memory on the command line: --memory, each device's peak against capacity, "nothing fits" (exit 3), and
msr-fiddle's inputs read as they are; bad values one line, exit 2."""

import json
from pathlib import Path

import pytest

from placeto.cli.main import main
from simulator import save_graph
from tests.placeto.test_feasibility import heavy_chain

ROOT = Path(__file__).resolve().parents[3]
MSR = ROOT / "datasets" / "outside" / "msr_fiddle" / "throughput-inputs" / "LayerGraphs"


@pytest.fixture()
def graph_file(tmp_path):
    save_graph(heavy_chain(), tmp_path / "g.json")
    return tmp_path / "g.json"


def test_place_fits_where_a_fit_exists_and_says_so(graph_file, tmp_path, capsys):
    out = tmp_path / "p.json"
    for method in ("metis", "etf", "local-search"):
        assert main(["place", str(graph_file), "--devices", "3", "--memory", "10", "--method", method,
                     "--budget", "50", "--out", str(out)]) == 0
        text = capsys.readouterr().out
        assert "peak GB" in text and "capacity GB" in text and "OOM" not in text.split("single device")[0]


def test_place_that_cannot_fit_exits_3_with_one_line(graph_file, tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["place", str(graph_file), "--devices", "2", "--memory", "10", "--method", "m-sct",
                 "--out", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("placeto: nothing fits: m-sct's placement")
    assert "no placement can fit" in err[0] and "12.000 GB" in err[0]
    assert json.loads(out.read_text())["placement"]  # the least-over placement is written all the same


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "1e12"])
def test_bad_memory_is_one_line_exit_2(graph_file, tmp_path, bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["place", str(graph_file), f"--memory={bad}", "--out", str(tmp_path / "p.json")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--memory" in err[0]


def test_a_cluster_file_with_zero_memory_is_one_line(graph_file, tmp_path, capsys):
    cluster = {"format": "placeto-cluster", "version": 1, "name": "z", "delta1_us": 1.0, "delta2_us": 1.0,
               "bandwidth_bytes_per_us": 1000.0, "devices": [{"name": "d0", "kind": "k80", "memory_bytes": 0}]}
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    assert main(["place", str(graph_file), "--cluster", str(tmp_path / "c.json"), "--out",
                 str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "memory_bytes" in err[0] and "c.json" in err[0]


def test_msr_fiddle_input_placed_as_it_is(tmp_path, capsys):
    assert main(["place", str(MSR / "gnmt_inference.json"), "--method", "pipeline-dp",
                 "--out", str(tmp_path / "p.json")]) == 0
    text = capsys.readouterr().out
    assert "max-load" in text and "/accelerator:5" in text


@pytest.mark.parametrize("change", [{"maxSizePerFPGA": 0}, {"maxFPGAs": "six"}, {"nodes": [{"id": 0}]},
                                    {"edges": [{"sourceId": 0, "destId": 99, "cost": 1.0}]}])
def test_malformed_msr_fiddle_input_is_one_line_exit_2(tmp_path, change, capsys):
    d = json.loads((MSR / "gnmt_inference.json").read_text())
    d.update(change)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    assert main(["place", str(bad), "--method", "pipeline-dp", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0]
