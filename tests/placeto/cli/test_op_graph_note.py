"""Issue 64 item 6: import-jax prices the op graph per fused kernel on the XLA-era kinds; place / compare / simulate
of an op graph on a kind still priced op by op (k80, cpu) say so in one line."""

import json

from placeto.cli.main import main
from simulator import load_graph
from simulator.model.meta import is_op_graph

SPEC = json.dumps([{"shape": [64, 128]}, {"shape": [128, 32]}])


def _imported(tmp_path):
    op, grouped = tmp_path / "mm.json.gz", tmp_path / "mm.grouped.json.gz"
    assert main(["import-jax", "jax.numpy:matmul", "--args-spec", SPEC, "--out", str(op),
                 "--grouped-out", str(grouped)]) == 0
    return op, grouped


def test_op_graph_is_told_apart_from_grouped_and_family_graphs(tmp_path):
    op, grouped = _imported(tmp_path)
    assert is_op_graph(load_graph(op).meta)
    fusion = load_graph(op).meta["fusion"]
    assert fusion["kinds"] == ["v100", "a100", "h100", "h100-pcie", "h200"] and fusion["kernels"] >= 1
    assert "fusion" not in load_graph(grouped).meta
    assert not is_op_graph(load_graph(grouped).meta)  # meta.grouping
    assert not is_op_graph(load_graph("datasets/nmt/nmt_004.json.gz").meta)  # a shipped family graph
    assert not is_op_graph({})  # a hand-written graph: nothing traced


def test_place_compare_simulate_print_one_note_on_an_op_graph_only(tmp_path, capsys):
    op, grouped = _imported(tmp_path)
    capsys.readouterr()
    for path in (op, grouped):
        out = tmp_path / f"{path.name}.placement.json"
        assert main(["place", str(path), "--devices", "2", "--method", "etf", "--out", str(out)]) == 0
        err = capsys.readouterr().err
        assert main(["simulate", str(path), "--placement", str(out), "--json"]) == 0
        captured = capsys.readouterr()
        json.loads(captured.out)  # the note stays off stdout: --json is still JSON
        err += captured.err
        assert main(["compare", str(path), "--devices", "2", "--methods", "single,etf", "--budget", "2",
                     "--quiet"]) == 0
        err += capsys.readouterr().err
        notes = [line for line in err.splitlines() if line.startswith("note:") and "op graph" in line]
        if path == op:
            assert len(notes) == 3  # place, simulate, compare: one line each
            assert all(str(op) in n and "on k80 its times include one kernel launch per op" in n
                       and "per fused kernel" in n and "--grouped-out" in n for n in notes)
        else:
            assert notes == []
    out = tmp_path / "h200.placement.json"  # an XLA-era preset: priced per fused kernel, nothing to say
    assert main(["place", str(op), "--devices", "2", "--method", "etf", "--preset", "h200-nvlink", "--out",
                 str(out)]) == 0
    assert main(["simulate", str(op), "--placement", str(out), "--preset", "h200-nvlink"]) == 0
    assert "op graph" not in capsys.readouterr().err
