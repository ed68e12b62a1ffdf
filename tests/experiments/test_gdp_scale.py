"""experiments/benchmarks/gdp_scale.py: its row CSV, ratios, markdown and one row of a cheap method."""

from __future__ import annotations

import math

import pytest

from experiments.benchmarks import gdp_scale as gs


def _row(graph="layered_10k", devices=4, method="etf", runtime=100.0, **kw) -> gs.Result:
    d = dict(graph=graph, nodes=10_000, devices=devices, method=method, runtime_ms=runtime, lower_bound_ms=50.0,
             oom=False, place_s=0.5, compile_s=0.0, calls=0, note="",
             command="python -m experiments.benchmarks.gdp_scale")
    return gs.Result(**{**d, **kw})


def test_rows_survive_the_csv(tmp_path):
    rows = [_row(), _row(method="expert", runtime=math.nan, note="no expert, here"), _row(method="gdp", oom=True,
                                                                                           compile_s=2.5, calls=3)]
    gs.write_rows(tmp_path / "r.csv", rows)
    back = gs.read_rows(tmp_path / "r.csv")
    assert math.isnan(back[1].runtime_ms) and back[1].note == "no expert, here"
    assert back[0] == rows[0] and back[2] == rows[2]
    assert gs.read_rows(tmp_path / "absent.csv") == []


def test_ratio_to_etf_is_per_graph_and_device_count():
    rows = [_row(runtime=100.0), _row(method="gdp", runtime=250.0), _row(devices=8, runtime=80.0),
            _row(devices=8, method="gdp", runtime=40.0), _row(graph="blocks_10k", method="gdp", runtime=9.0)]
    r = gs.ratio_to_etf(rows)
    assert r["layered_10k", 4, "gdp"] == 2.5 and r["layered_10k", 8, "gdp"] == 0.5
    assert ("blocks_10k", 4, "gdp") not in r  # no etf row beside it


def test_markdown_marks_missing_inapplicable_and_judges_the_ablation():
    rows = [_row(), _row(method="expert", runtime=math.nan, note="none"), _row(method="gdp", runtime=500.0),
            _row(method="gdp-coarse", runtime=120.0), _row(graph="blocks_10k", method="local-search")]
    text = gs.markdown(rows, [("nasnet", 8, "gdp")], "python -m experiments.benchmarks.gdp_scale --seconds 30")
    table = next(line for line in text.splitlines() if line.startswith("| layered_10k | 10000 | 4 |"))
    assert "| — |" in table and "500.0 (5.00)" in table and "120.0 (1.20)" in table and "…" in table
    assert "all graphs: geometric mean 1.200x etf against 5.000x" in text and "it helps" in text
    assert "the generated graphs: geometric mean 1.200x" in text and "op graphs:" not in text
    assert "nasnet 8d: gdp" in text
    assert "`python -m experiments.benchmarks.gdp_scale --seconds 30` measures them" in text
    worse = gs.markdown([_row(), _row(method="gdp", runtime=200.0), _row(method="gdp-coarse", runtime=300.0)], [],
                        "x")
    assert "it does not help" in worse and "Missing rows" not in worse


def test_run_row_of_a_list_scheduler_and_of_a_method_that_does_not_apply():
    from simulator.model.generate import branching_blocks

    graph = branching_blocks(300, seed=1)
    etf = gs.run_row("blocks", graph, 4, "etf", 1.0, "gdp-general", "cmd")
    assert etf.runtime_ms >= etf.lower_bound_ms > 0 and etf.nodes == 300 and etf.note == ""
    expert = gs.run_row("blocks", graph, 4, "expert", 1.0, "gdp-general", "cmd")
    assert math.isnan(expert.runtime_ms) and "expert" in expert.note


def test_unknown_graph_and_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown graph"):
        gs.load("mystery", tmp_path)
    with pytest.raises(SystemExit):
        gs.parse_args(["--graphs", "layered_10k,mystery"])
    args = gs.parse_args(["--quick"])
    assert args.graphs == ("layered_10k", "blocks_10k") and args.devices == (4,)


def test_targets_compare_gdp_with_the_expert_and_etf_at_8_devices():
    rows = [_row(graph="nmt_l8", devices=8, method="expert", runtime=200.0),
            _row(graph="nmt_l8", devices=8, method="gdp", runtime=170.0),
            _row(graph="layered_50k", devices=8, runtime=100.0),
            _row(graph="layered_50k", devices=8, method="gdp", runtime=105.0, place_s=20.0),
            _row(graph="blocks_50k", devices=8, runtime=100.0),
            _row(graph="blocks_50k", devices=8, method="gdp", runtime=130.0, place_s=20.0)]
    rows += [_row(graph="layered_50k", devices=8, method="local-search", runtime=99.0),
             _row(graph="layered_50k", devices=8, method="gdp-large-search", runtime=98.0)]
    lines = gs.targets(rows, gs.ratio_to_etf(rows))
    assert any("gdp +15.0% on average over 1 graphs (x the expert: nmt_l8 0.85; geometric mean 0.85): not met" in line
               for line in lines)  # one graph of three: not met, however good
    assert any("layered_50k" in line and "1.050x etf in 20.0 s: met" in line for line in lines)
    assert any("blocks_50k" in line and "1.300x etf in 20.0 s: not met" in line for line in lines)
    assert any("gdp-large-search 0.9800x etf, local search 0.9900x: met" in line for line in lines)


def test_missing_rows_are_grouped_by_graph_and_device_count():
    missing = [("nasnet", 8, m) for m in gs.METHODS] + [("blocks_50k", 4, "m-sct"), ("blocks_50k", 4, "gdp")]
    assert gs.missing_text(missing) == "nasnet 8d: all; blocks_50k 4d: m-sct, gdp"
