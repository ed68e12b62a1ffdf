"""Placements far slower than `single` and methods that take mixed devices for identical ones: one warning line
from `place` and from `compare`, none on identical devices where the placers do well; compare's bar chart on a log
axis past plot_style.LOG_SPAN."""

from pathlib import Path

import matplotlib
import numpy as np
import pytest

from placeto.baselines.single import SINGLE_MEANS, single_device
from placeto.cli.main import main
from placeto.harness import plot_style
from placeto.harness.against_single import SLOW_FACTOR, compare_warning, place_warning, same_speed_note
from placeto.harness.compare import _compare_figure, compare
from simulator import cluster_preset, load_graph, simulate
from simulator.model.generate import layered_dag

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend)

ROOT = Path(__file__).resolve().parents[3]
NMT = ROOT / "datasets" / "nmt" / "nmt_004.json.gz"


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("placeto: warning:")]


def test_place_warns_in_one_line_when_the_placement_is_far_slower_than_single(tmp_path, capsys):
    """m-topo on three H100s and the host CPU fills the CPU first: 12x single, and it assumes identical devices."""
    assert main(["place", str(NMT), "--preset", "h100-nvlink-cpu", "--method", "m-topo",
                 "--out", str(tmp_path / "p.json")]) == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert "m-topo's placement simulates 12.32x slower than single (3.159 ms, every node on /gpu:0" in line
    assert "as if they were identical (h100-nvlink-cpu mixes cpu and h100)" in line


@pytest.mark.parametrize("preset, method", [("h100-nvlink-cpu", "etf"), ("h100-nvlink-cpu", "m-sct"),
                                            ("placeto-k80", "m-topo")])
def test_place_says_nothing_where_the_placement_is_near_single(preset, method, tmp_path, capsys):
    assert main(["place", str(NMT), "--preset", preset, "--method", method, "--out", str(tmp_path / "p.json")]) == 0
    assert _warnings(capsys.readouterr().err) == []


def test_place_warning_threshold_and_references():
    graph, cluster = load_graph(NMT), cluster_preset("h100-nvlink-cpu", 4)
    alone = simulate(graph, np.full(graph.n_nodes, 1, np.int32), cluster)
    on_cpu = simulate(graph, np.zeros(graph.n_nodes, np.int32), cluster)
    assert on_cpu.runtime > SLOW_FACTOR * alone.runtime
    assert "random's placement simulates" in place_warning("random", graph, cluster, on_cpu, alone)
    assert place_warning("cpu-only", graph, cluster, on_cpu, alone) is None  # a reference, shown as it is
    assert place_warning("etf", graph, cluster, alone, alone) is None
    assert same_speed_note("m-topo", graph, cluster_preset("h100-nvlink", 4)) == ""  # one kind: nothing to say


def test_compare_warns_once_naming_each_slow_method(capsys):
    graph = load_graph(NMT)
    rows = compare([graph], [4], ["single", "cpu-only", "etf", "m-topo", "random"], "h100-nvlink-cpu", budget=8,
                   progress=False)
    line = compare_warning(rows, [graph], "h100-nvlink-cpu")
    assert line.startswith(f"placeto: warning: more than {SLOW_FACTOR:g}x slower than single")
    assert "m-topo (up to 12.3x: nmt_004 at 4 devices)" in line and "random (up to" in line
    assert "etf" not in line.split(";")[0] and "cpu-only" not in line  # near single; a reference
    without_single = [r for r in rows if r.method != "single"]  # single simulated here instead of read off its row
    assert compare_warning(without_single, [graph], "h100-nvlink-cpu") == line
    assert compare_warning([r for r in rows if r.method in ("single", "etf")], [graph], "h100-nvlink-cpu") is None


def test_compare_cli_prints_the_warning_on_stderr(capsys):
    assert main(["compare", str(NMT), "--preset", "h100-nvlink-cpu", "--methods", "single,m-topo", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "| m-topo |" in out
    (line,) = _warnings(err)
    assert "m-topo (up to 12.3x" in line and "h100-nvlink-cpu mixes cpu and h100" in line


def test_compare_bars_spanning_more_than_ten_times_get_a_log_axis():
    """cpu-only's 180 ms beside single's 3 ms on h100-nvlink-cpu: log; the K80s' bars within 10x: linear."""
    graph = load_graph(NMT)
    mixed = compare([graph], [4], ["single", "cpu-only", "etf"], "h100-nvlink-cpu", progress=False)
    same = compare([layered_dag(60, seed=1)], [2, 4], ["single", "etf"], progress=False)
    for rows, scale in ((mixed, "log"), (same, "linear")):
        assert plot_style.wants_log_axis([r.runtime_us for r in rows]) == (scale == "log")
        fig = _compare_figure(plt, rows, rows[0].graph)
        ax = fig.axes[0]
        assert ax.get_yscale() == scale
        low, high = ax.get_ylim()
        assert all(low < r.runtime_us / 1e3 < high for r in rows)  # every bar's top inside the axis
        plt.close(fig)
    assert not plot_style.wants_log_axis([1.0, 10.0, 0.0, float("nan")]) and plot_style.wants_log_axis([1, 10.5])


def test_single_is_what_the_help_says(capsys):
    """`single` on h100-nvlink-cpu is /gpu:0, device 1 (the fastest; the first of the tied GPUs), and `place` and
    `compare` --help say what single is in the same words."""
    graph, cluster = load_graph(NMT), cluster_preset("h100-nvlink-cpu", 4)
    assert single_device(graph, cluster) == 1 and cluster.devices[1].name == "/gpu:0"
    for command in ("place", "compare"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert " ".join(SINGLE_MEANS.split()) in " ".join(capsys.readouterr().out.split())
