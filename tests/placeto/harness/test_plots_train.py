"""Plots that explain themselves: the Gantt chart's legend and labels, `placeto plot` on short and empty runs of
each kind of metrics (Placeto's, the sequence methods')."""

import csv

import matplotlib
import numpy as np
import pytest

from placeto.harness.plots_train import MAX_NAMED, PLACETO, SEQUENCE, _curves_figure, _read, family_spread, plot_run
from simulator import cluster_preset, simulate
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag
from simulator.plots import gantt, gantt_figure

matplotlib.use("Agg")


def test_gantt_says_what_every_row_and_line_is(tmp_path):
    import matplotlib.pyplot as plt

    graph, cluster = layered_dag(40, seed=0), cluster_preset("placeto-k80", 2)
    placement = (np.arange(graph.n_nodes) % 2).astype(np.int32)
    result = simulate(graph, placement, cluster)
    assert len(result.transfers.device)  # the bus rows have bars
    fig = gantt_figure(result, cluster, "g on 2 devices")
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert rows == [f"{d} {k}" for d in cluster.device_names for k in ("compute", "bus")]
    assert ax.get_xlabel().endswith("(ms)")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("bus row") and "transfer" in t for t in legend)
    assert any(t.startswith("dashed line") and "runtime" in t for t in legend)
    assert any(t.startswith("dotted line") and "lower bound" in t for t in legend)
    lines = {(ln.get_linestyle(), round(ln.get_xdata()[0], 6)) for ln in ax.get_lines()}
    assert ("--", round(result.runtime * 1e-3, 6)) in lines
    assert f"{result.runtime * 1e-3:.3f} ms" in ax.get_title() and ax.get_title().startswith("g on 2 devices")
    plt.close(fig)
    gantt(result, cluster, tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 1000


def _write_metrics(run, fields, rows):
    run.mkdir(parents=True, exist_ok=True)
    with (run / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)


PLACETO_ROW = {"update": 1, "episode": 4, "graph": "g", "sim_calls": 990, "final_ratio": 2.4, "best_runtime": 48.0,
               "lower_bound": 26.0, "entropy": 0.6}
SEQ_FIELDS = ("update", "samples", "seconds", "task", "mean_objective_us", "best_us")


def test_plot_one_point_is_marked_and_noted(tmp_path):
    _write_metrics(tmp_path, list(PLACETO_ROW), [PLACETO_ROW])
    notes = []
    assert plot_run(tmp_path, notes.append)[0].stat().st_size > 1000
    assert len(notes) == 1 and "one point" in notes[0] and "g" in notes[0]
    panels, data = _read(tmp_path)
    assert panels == PLACETO and data["g"]["best_runtime"].tolist() == [48.0]


def test_plot_without_rows_says_no_data(tmp_path):
    _write_metrics(tmp_path, SEQ_FIELDS, [])
    notes = []
    assert plot_run(tmp_path, notes.append)[0].exists()
    assert len(notes) == 1 and "no metrics rows yet" in notes[0]


def test_plot_sequence_metrics_per_task(tmp_path):
    rows = [{"update": u, "samples": 16 * u, "seconds": 0.5 * u, "task": t, "mean_objective_us": 5000 - u,
             "best_us": 4000 - u} for u in range(1, 5) for t in ("a", "b")]
    _write_metrics(tmp_path, SEQ_FIELDS, rows)
    notes = []
    plot_run(tmp_path, notes.append)
    assert notes == []
    panels, data = _read(tmp_path)
    assert panels == SEQUENCE and sorted(data) == ["a", "b"] and data["a"]["samples"].tolist() == [16, 32, 48, 64]


def test_plot_per_graph_run_named_after_its_graph(tmp_path):
    fields = [f for f in SEQ_FIELDS if f != "task"]  # rnn / hierarchical: one graph, no task column
    _write_metrics(tmp_path, fields, [{"update": 1, "samples": 16, "seconds": 80.0, "mean_objective_us": 5e4,
                                       "best_us": 4e4}])
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "nmt_l2@2d.json").write_text("{}")
    notes = []
    plot_run(tmp_path, notes.append)
    assert list(_read(tmp_path)[1]) == ["nmt_l2@2d"] and "nmt_l2@2d has one point" in notes[0]


def test_plot_bad_run_directory(tmp_path):
    with pytest.raises(InputError, match="no metrics.csv"):
        plot_run(tmp_path / "nothing")
    _write_metrics(tmp_path, ["update", "graph", "final_ratio"], [{"update": 1, "graph": "g", "final_ratio": 2}])
    with pytest.raises(InputError, match="no column"):
        plot_run(tmp_path)


def _placeto_run(run, n_graphs, updates=6):
    """metrics.csv of a Placeto run of n_graphs graphs in turn; graph i's runtimes are (i + 1) x its bound."""
    rows = [{**PLACETO_ROW, "update": u, "episode": u, "graph": f"g{u % n_graphs:02d}", "sim_calls": 100 * u,
             "final_ratio": 2 + u % n_graphs, "best_runtime": 26.0 * (1 + u % n_graphs)}
            for u in range(1, n_graphs * updates + 1)]
    _write_metrics(run, list(PLACETO_ROW), rows)


def test_plot_of_many_graphs_draws_their_mean_and_spread_not_24_lines(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    _placeto_run(tmp_path, 24)
    panels, data = _read(tmp_path)
    spread = family_spread(panels[2], data)  # best runtime / bound: graph i is at i + 1 throughout
    inner = spread.x >= 24  # where every graph has a value
    assert inner.any() and (spread.graphs[inner] == 24).all()
    np.testing.assert_allclose(spread.mean[inner], 12.5)
    np.testing.assert_allclose(spread.low[inner], np.percentile(np.arange(1, 25), 25))
    np.testing.assert_allclose(spread.high[inner], np.percentile(np.arange(1, 25), 75))
    fig = _curves_figure(plt, list(panels), data, "t", "held-out graphs: none recorded in this run")
    for ax in fig.axes:
        assert len(ax.get_lines()) <= MAX_NAMED
        assert [ln.get_label() for ln in ax.get_lines()] == ["mean of 24 graphs"]
        assert sum(isinstance(c, PolyCollection) for c in ax.collections) == 1  # the band
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["25th-75th percentile of the graphs", "mean of 24 graphs"]
    assert "24 graphs" in fig._suptitle.get_text() and "held-out graphs: none" in fig._suptitle.get_text()
    plt.close(fig)
    assert plot_run(tmp_path, None)[0].stat().st_size > 1000
    again = family_spread(panels[2], dict(reversed(data.items())))  # deterministic: not the rows' order
    for a, b in zip(spread, again):
        np.testing.assert_array_equal(a, b)


def test_plot_of_few_graphs_names_each_and_the_held_out_ones(tmp_path):
    import json

    import matplotlib.pyplot as plt

    _placeto_run(tmp_path, 3)
    panels, data = _read(tmp_path)
    fig = _curves_figure(plt, list(panels), data, "t")
    for ax in fig.axes:
        assert sorted(ln.get_label() for ln in ax.get_lines()) == ["g00", "g01", "g02"] and not ax.collections
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["g00", "g01", "g02"]
    plt.close(fig)
    (tmp_path / "selection.json").write_text(json.dumps({"validation": "80 tasks (validation_tasks)"}))
    from placeto.harness.plots_train import _held_out

    assert "80 tasks" in _held_out(tmp_path) and "none recorded" in _held_out(tmp_path / "nothing")
    assert plot_run(tmp_path, None)[0].stat().st_size > 1000


def _timing(median_us, spread_us):
    from simulator.hardware.timing import Timing

    return Timing(median_us, median_us - spread_us, median_us + spread_us, median_us - 2 * spread_us,
                  median_us + 2 * spread_us, np.array([median_us]))


def test_agreement_plot_colours_placements_by_method(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from placeto.harness import plot_style
    from simulator.measure.agreement import EvalRow
    from placeto.harness.evaluate import _agreement_figure, plot_agreement

    rows = [EvalRow("/p/nmt_004.2dev.etf.json", 4100, _timing(5200, 200)),
            EvalRow("single device", 6000, _timing(4700, 50)), EvalRow("mine.json", 3000, None),
            EvalRow("/p/nmt_004.2dev.gdp-search.json", 3600, _timing(4900, 100))]
    measured = [r for r in rows if r.measured is not None]
    fig = _agreement_figure(plt, measured, "t")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["nmt_004.2dev.etf", "single device", "nmt_004.2dev.gdp-search"]
    assert any("interquartile" in t for t in labels) and "measured = simulated" in labels
    assert "black edge: learned method" in labels
    dots = [ln for ln in ax.get_lines() if ln.get_marker() not in ("None", "", None) and ln.get_linestyle() == "None"]
    assert {to_hex(ln.get_color()) for ln in dots} == {plot_style.color(m) for m in ("etf", "single", "gdp-search")}
    assert ax.get_xlabel() == "simulated step time (ms)" and ax.get_ylabel() == "measured step time (ms)"
    plt.close(fig)
    plot_agreement(rows, tmp_path / "a.png", "t")
    assert (tmp_path / "a.png").stat().st_size > 1000
    with pytest.raises(InputError, match="needs --hardware"):
        plot_agreement([rows[2]], tmp_path / "b.png")
