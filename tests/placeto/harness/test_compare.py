"""The comparison harness: rows and ratios, OOM and not-applicable rows, writers, plots, families, the CLI entry
and the benchmark and headroom scripts."""

import argparse
import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from placeto.cli.compare import add_compare_arguments, run_compare
from placeto.harness.compare import compare, markdown_table, plot_compare, write_csv
from simulator.workloads.families import load_family
from simulator import cluster_preset, make_graph, save_graph
from simulator.model.errors import InputError
from simulator.model.generate import layered_dag

ROOT = Path(__file__).resolve().parents[3]
METHODS = ["single", "expert", "metis", "etf", "local-search"]


def huge_params():
    """Two 8 GB parameter nodes: OOM on one 12 GB K80, fine on two."""
    nodes = [{"name": f"w{i}", "cost": 100.0, "out_bytes": [8], "persistent_bytes": 8 * 10**9} for i in range(2)]
    return make_graph("huge", nodes, [(0, 1, 0)])


@pytest.fixture(scope="module")
def rows():
    return compare([layered_dag(80, seed=0), huge_params()], [2, 4], METHODS, budget=16, progress=False)


def test_rows_and_ratios(rows):
    assert len(rows) == 2 * 2 * len(METHODS)
    for key in {(r.graph, r.n_devices) for r in rows}:
        group = [r for r in rows if (r.graph, r.n_devices) == key]
        fits = [r for r in group if r.applies and not r.oom]
        best = min(fits, key=lambda r: r.runtime_us)
        assert best.ratio_to_best == 1.0
        assert all(r.ratio_to_best >= 1.0 for r in fits)
        assert all(r.ratio_to_lower_bound >= 1.0 for r in group if r.applies)
    calls = {r.method: r.simulator_calls for r in rows if r.graph.startswith("layered")}
    assert calls == {"single": 0, "expert": 0, "metis": 0, "etf": 0, "local-search": 16}


def test_not_applicable_and_oom_rows(rows):
    expert = [r for r in rows if r.method == "expert"]
    assert all(not r.applies and math.isnan(r.ratio_to_best) and "no expert placement" in r.note for r in expert)
    single = next(r for r in rows if r.graph == "huge" and r.method == "single" and r.n_devices == 2)
    assert single.oom and math.isnan(single.ratio_to_best) and single.peak_fraction > 1 and not single.repaired
    assert not next(r for r in rows if r.graph == "huge" and r.method == "etf" and r.n_devices == 2).oom
    placers = [r for r in rows if r.graph == "huge" and r.method not in ("single", "expert")]
    assert placers and all(not r.oom and r.peak_fraction <= 1 for r in placers)  # a placement that fits exists


def test_markdown_and_csv(rows, tmp_path):
    table = markdown_table(rows)
    header = table.splitlines()[0]
    assert all(m in header for m in METHODS)
    huge_line = next(line for line in table.splitlines() if line.startswith("| huge | 2 |"))
    assert "OOM" in huge_line and "—" in huge_line and "**" in huge_line
    assert "expert does not apply in 4 of 4 runs" in table
    write_csv(rows, tmp_path / "c.csv")
    with open(tmp_path / "c.csv") as f:
        read = list(csv.DictReader(f))
    assert len(read) == len(rows) and read[0].keys() >= {"graph", "n_devices", "method", "runtime_us", "oom"}
    for r, d in zip(rows, read):
        assert d["method"] == r.method and (d["runtime_us"] == "" if not r.applies else
                                            float(d["runtime_us"]) == r.runtime_us)


def test_rows_record_their_budget_and_a_run_over_it_is_marked(rows):
    import dataclasses

    by = {(r.graph, r.n_devices, r.method): r for r in rows}
    search, etf = by[("layered_80_s0", 2, "local-search")], by[("layered_80_s0", 2, "etf")]
    assert search.budget_calls == 16 and search.simulator_calls <= 16 and not search.over_budget
    assert search.budget_seconds > 0  # the default seconds, by the graph's size (default_seconds)
    assert math.isnan(etf.budget_calls) and math.isnan(etf.budget_seconds) and not etf.over_budget  # spends none
    timed = dataclasses.replace(search, budget_calls=math.inf, budget_seconds=1.0, place_seconds=1.09)
    assert not timed.over_budget  # within the 10% allowed
    late = dataclasses.replace(timed, place_seconds=1.2)
    assert late.over_budget
    table = markdown_table([late, etf])
    assert "1.20 (over) | 1 s |" in table and "(over)" in table.splitlines()[2]
    assert "local-search went over its budget in 1 of 1 runs" in table


@pytest.mark.skipif(not (ROOT / "placeto" / "shipped" / "general").is_dir(), reason="no shipped general policy")
def test_a_method_handed_a_budget_it_cannot_keep_says_so():
    """The `placeto` row finishes its greedy pass (its zero-shot placement) whatever the budget: at 1 call it
    simulates more, and the row and the table say it went over."""
    rows = compare([layered_dag(40, seed=2)], [2], ["placeto", "random"], budget=1, progress=False)
    by = {r.method: r for r in rows}
    assert by["placeto"].simulator_calls > 1 and by["placeto"].over_budget
    assert by["random"].simulator_calls == 1 and not by["random"].over_budget
    assert "placeto went over its budget in 1 of 1 runs" in markdown_table(rows)


def test_plot(rows, tmp_path):
    paths = plot_compare(rows, tmp_path)
    assert sorted(p.name for p in paths) == ["huge.png", "layered_80_s0.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_plot_legend_explains_every_mark(rows):
    """Bars in the shared method colours, and legend entries for the lower bound, OOM and inapplicable methods."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from placeto.harness import plot_style
    from placeto.harness.compare import _compare_figure

    fig = _compare_figure(plt, [r for r in rows if r.graph == "huge"], "huge")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:4] == ["single", "metis", "etf", "local-search"]  # expert does not apply: no bar, listed
    assert any(t.startswith("lower bound") for t in labels) and "out of memory (OOM)" in labels
    assert any(t.startswith("does not apply") and "expert" in t for t in labels)
    faces = {to_hex(p.get_facecolor()) for p in ax.patches}
    assert {plot_style.color(m) for m in labels[:4]} <= faces
    assert any(p.get_hatch() for p in ax.patches)  # the single device's OOM bar on 2 devices
    plt.close(fig)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    from placeto.methods.placeto.config import tiny
    from placeto.methods.placeto.train import train

    run = tmp_path_factory.mktemp("run")
    train(tiny(episodes=4), [layered_dag(30, seed=3)], cluster_preset("placeto-k80", 2), run)
    return run


def test_learned_rows_share_the_budget(tiny_run):
    graph = layered_dag(40, seed=1)
    rows = compare([graph], [2], ["single"], checkpoint=tiny_run, progress=False)
    assert [r.method for r in rows] == ["single"]  # learned methods are only added to "all" or when named
    rows = compare([graph], [2], ["single", "placeto", "placeto-search", "sa"], checkpoint=tiny_run, budget=200,
                   progress=False)
    by = {r.method: r for r in rows}
    assert 40 <= by["placeto"].simulator_calls <= 200  # the greedy episode, then sampled batches that fit
    assert by["placeto-search"].simulator_calls == by["sa"].simulator_calls == 200  # counted by the one meter
    assert by["placeto-search"].compile_seconds > 0 or by["placeto"].compile_seconds > 0
    assert by["placeto-search"].trace and by["placeto-search"].trace[-1][2] <= by["placeto-search"].trace[0][2]
    timed = compare([graph], [2], ["placeto-search", "local-search"], checkpoint=tiny_run, budget=None,
                    seconds=0.3, progress=False)
    for r in timed:
        assert 0.25 <= r.place_seconds < 0.6 and r.simulator_calls > 40
    with pytest.raises(InputError, match="unknown method"):
        compare([graph], [2], "single,bogus", progress=False)


def test_load_family(tmp_path):
    with pytest.raises(InputError, match="unknown family 'fam'"):  # neither a family of ours nor built there
        load_family("fam", root=tmp_path)
    with pytest.raises(InputError, match="no manifest"):  # one of ours, not built there
        load_family("nmt", root=tmp_path)
    (tmp_path / "fam").mkdir()
    entries = []
    for i, split in enumerate(["train", "test", "test"]):
        save_graph(layered_dag(10, seed=i), tmp_path / "fam" / f"g{i}.json.gz")
        entries.append({"file": f"g{i}.json.gz", "split": split})
    (tmp_path / "fam" / "manifest.json").write_text(json.dumps({"family": "fam", "graphs": entries}))
    assert [g.name for g in load_family("fam", "test", tmp_path)] == ["layered_10_s1", "layered_10_s2"]
    assert len(load_family("fam", None, tmp_path)) == 3
    (tmp_path / "fam" / "manifest.json").write_text("{}")
    with pytest.raises(InputError, match="malformed manifest"):
        load_family("fam", "test", tmp_path)


def _experiment(name: str):
    """The module experiments.<name> (e.g. "benchmarks.anytime")."""
    import importlib

    return importlib.import_module(f"experiments.{name}")


def _args(*argv):
    p = argparse.ArgumentParser()
    add_compare_arguments(p)
    return p.parse_args(list(argv))


def test_run_compare(tmp_path, capsys):
    save_graph(layered_dag(50, seed=0), tmp_path / "g.json.gz")
    out = tmp_path / "out"
    assert run_compare(_args(str(tmp_path / "g.json.gz"), "--devices", "2,4", "--methods", "single,etf,random",
                             "--budget", "8", "--out", str(out), "--plot", "--quiet")) == 0
    assert "| layered_50_s0 | 4 |" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"compare.csv", "compare.md", "layered_50_s0.png"}
    with pytest.raises(InputError, match="graph files or --family"):
        run_compare(_args("--quiet"))
    with pytest.raises(InputError, match="--plot needs --out"):
        run_compare(_args(str(tmp_path / "g.json.gz"), "--plot"))


def test_compare_runs_on_a_cluster_file(tmp_path, capsys):
    """--cluster FILE: every method placed and simulated on the file's cluster, at its device count."""
    from placeto.baselines import run_method
    from placeto.cli.main import main
    from simulator import Cluster, Device, lower_bound, save_cluster, simulate

    graph = layered_dag(40, seed=0)
    save_graph(graph, tmp_path / "g.json")
    cluster = Cluster("slow-links", tuple(Device(f"/dev:{i}", "custom", 12e9) for i in range(3)), delta1_us=50.0,
                      delta2_us=200.0, bandwidth_bytes_per_us=100.0, latency_us=10.0)
    save_cluster(cluster, tmp_path / "c.json")
    out = tmp_path / "out"
    for devices in ([], ["--devices", "3"]):  # the file's count, or the same count given
        assert main(["compare", str(tmp_path / "g.json"), "--cluster", str(tmp_path / "c.json"), *devices,
                     "--methods", "single,etf", "--quiet", "--out", str(out)]) == 0
        table = capsys.readouterr().out
        line = next(t for t in table.splitlines() if t.startswith("| layered_40_s0 |"))
        assert line.startswith(f"| layered_40_s0 | 3 | {lower_bound(graph, cluster) / 1e3:.2f} |")
        with open(out / "compare.csv") as f:
            rows = {r["method"]: r for r in csv.DictReader(f)}
        assert {r["n_devices"] for r in rows.values()} == {"3"}
        for method in ("single", "etf"):
            placement = run_method(method, graph, cluster, 0).placement
            assert float(rows[method]["runtime_us"]) == simulate(graph, placement, cluster).runtime
        preset = cluster_preset("placeto-k80", 3)
        assert float(rows["etf"]["runtime_us"]) != simulate(graph, run_method("etf", graph, preset, 0).placement,
                                                             preset).runtime


def test_compare_cluster_file_errors_are_one_line(tmp_path, capsys):
    from placeto.cli.main import main
    from simulator import save_cluster

    save_graph(layered_dag(20, seed=0), tmp_path / "g.json")
    save_graph(layered_dag(20, seed=0, kinds=("k80", "cpu")), tmp_path / "kinds.json")
    save_cluster(cluster_preset("placeto-k80", 2), tmp_path / "c2.json")
    (tmp_path / "bad.json").write_text('{"format": "placeto-cluster", "version": 1, "name": "x", "devices": [], '
                                       '"delta1_us": 1, "delta2_us": 1, "bandwidth_bytes_per_us": 1}')
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "h100.json").write_text(json.dumps(cluster_preset("h100-nvlink", 2).to_dict()))
    g, run = str(tmp_path / "g.json"), ["--methods", "single", "--quiet"]
    for argv, expected in (
            ([g, "--cluster", str(tmp_path / "bad.json")], "no devices"),
            ([g, "--cluster", str(tmp_path / "text.json")], "text.json"),
            ([g, "--cluster", str(tmp_path / "missing.json")], "missing.json"),
            ([g, "--cluster", str(tmp_path / "c2.json"), "--devices", "4"], "--devices 4 but cluster"),
            ([str(tmp_path / "kinds.json"), "--cluster", str(tmp_path / "h100.json")], "'h100'")):
        assert main(["compare", *argv, *run]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and expected in err, (argv, err)
    with pytest.raises(SystemExit) as stop:  # argparse: --preset and --cluster exclude each other
        main(["compare", g, "--preset", "placeto-k80", "--cluster", str(tmp_path / "c2.json"), *run])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "not allowed with argument" in err


def test_benchmark_script(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    script = [sys.executable, "-m", "experiments.reproduce.compare_benchmarks"]
    empty = subprocess.run(script + ["--benchmarks", str(tmp_path)], env=env, capture_output=True, text=True)
    assert empty.returncode == 2 and "no benchmark graphs" in empty.stderr
    save_graph(layered_dag(30, seed=0), tmp_path / "tiny.json.gz")
    done = subprocess.run(script + ["--benchmarks", str(tmp_path), "--devices", "2", "--budget", "4",
                                    "--out", str(tmp_path / "res")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "res" / "compare_benchmarks.csv").is_file()
    assert "| layered_30_s0 | 2 |" in (tmp_path / "res" / "compare_benchmarks.md").read_text()


def test_save_placements_writes_every_placement_made(tmp_path):
    """compare --save-placements: one placement file per graph x devices x method that applies, the placement the
    row's runtime was simulated from; names made file-safe and numbered when two graphs share one."""
    import dataclasses

    from simulator import load_placement, simulate

    graphs = [dataclasses.replace(layered_dag(40, seed=k), name="my net/v1") for k in (1, 2)]
    names = ["single", "expert", "etf", "random"]
    rows = compare(graphs, [2, 3], names, budget=8, progress=False, save_placements=tmp_path / "plc")
    files = sorted(p.name for p in (tmp_path / "plc").iterdir())
    assert len(files) == sum(r.applies for r in rows) == 2 * 2 * 3  # expert does not apply: no file
    assert sorted({f.split(".")[0] for f in files}) == ["my_net_v1", "my_net_v1-2"]
    per_graph = len(rows) // 2  # rows come graph by graph
    for graph, stem, mine in zip(graphs, ["my_net_v1", "my_net_v1-2"], (rows[:per_graph], rows[per_graph:])):
        for r in (r for r in mine if r.applies):
            cluster = cluster_preset("placeto-k80", r.n_devices)
            placement = load_placement(tmp_path / "plc" / f"{stem}.{r.n_devices}dev.{r.method}.json", graph,
                                       r.n_devices)
            assert placement.devices == cluster.device_names
            assert simulate(graph, placement.assignment, cluster).runtime == pytest.approx(r.runtime_us)
    assert not list((tmp_path / "plc").glob(".*.tmp"))  # written atomically: no temporary file left


def test_place_method_runs_any_baseline(tmp_path, capsys):
    """`placeto place --method NAME` for a baseline writes the placement the library method makes."""
    from placeto.baselines import run_method
    from placeto.cli.main import main
    from simulator import load_placement

    graph = layered_dag(60, seed=4)
    save_graph(graph, tmp_path / "g.json")
    cluster = cluster_preset("placeto-k80", 2)
    for name in ("etf", "m-topo", "local-search"):
        out = tmp_path / f"{name}.json"
        assert main(["place", str(tmp_path / "g.json"), "--devices", "2", "--method", name, "--budget", "20",
                     "--out", str(out)]) == 0
        assert f"({name}, " in capsys.readouterr().out
        expected = run_method(name, graph, cluster, 0, budget=20).placement
        assert load_placement(out, graph, 2).assignment.tolist() == expected.tolist()


def test_headroom_report_bounds_the_gain_over_the_classical_placers():
    """headroom.py: the best known objective is the best of the long searches and of every anytime
    row; the gap at a budget is the best classical objective over it, minus 1."""
    headroom = _experiment("benchmarks.headroom")
    long_rows = [{"graph": "g", "n_devices": 4, "search": "local-search", "seed": 0, "calls": 10,
                  "objective_us": 100.0, "seconds": 0.1}]
    anytime = {(1.0, "g", "local-search"): 110.0, (1.0, "g", "etf"): 120.0, (1.0, "g", "gdp-search"): 99.0,
               (10.0, "g", "sa"): 101.0, (10.0, "g", "gdp-search"): 100.0}
    text = "\n".join(headroom.report("nmt", 4, long_rows, anytime, "cmd"))
    assert "| g | 0.099 | 0.100 |" in text  # (ms) gdp-search's anytime row is the best known
    assert "| 1 | 1.111 | 11.1% | 11.1% | 1 of 1 | — | 1.000 |" in text
    assert "| 10 | 1.020 | 2.0% | 2.0% | 0 of 1 | — | 1.010 |" in text


def test_sample_efficiency_report_targets_ratios_and_the_expert_check():
    """sample_efficiency.py: the target is 1.05x the best run; a method's cell is the calls of its
    first trace point at or under it; rnn / placeto-finetuned is the ratio of those calls; the runs are checked
    against the single device and (nmt rows) the expert."""
    se = _experiment("reproduce.sample_efficiency")

    def row(method, best, trace):
        return {"graph": "nmt_l2", "n_devices": 2, "method": method, "calls": trace[-1][1], "seconds": 9.0,
                "best_us": best, "trace": trace}

    rows = [row("rnn", 41000.0, [[1.0, 16, 60000.0], [2.0, 600, 41000.0]]),
            row("placeto-finetuned", 40000.0, [[0.5, 100, 41500.0], [3.0, 900, 40000.0]]),
            row("hierarchical", 45000.0, [[1.0, 16, 45000.0]])]
    text = se.report(rows, "cmd", {("nmt_l2", 2): (48.8, 43.5)})
    # target 42.0 ms: rnn at 600 calls, placeto-finetuned at 100, hierarchical never (16 calls run)
    assert "| nmt_l2 | 2 | 48.80 | 43.50 | 42.00 | 600 (2.0 s) | > 16 (> 9 s) | 100 (0.5 s) |" in text
    assert "| 6.00 |" in text  # rnn / placeto-finetuned
    assert "- hierarchical: better than the single device on 1 of 1 rows, than the expert on 0 of 1 nmt rows " \
           "(not: nmt_l2@2d)" in text
    assert "- rnn: better than the single device on 1 of 1 rows, than the expert on 1 of 1 nmt rows" in text


def _exit_status(main, argv: list[str]) -> int:
    """An experiment's main(argv) status, argparse's SystemExit included."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_anytime_merge_replaces_only_the_rerun_methods_in_place(tmp_path):
    """anytime.py: rerunning some methods replaces their rows at the rerun device counts and budgets
    and keeps every other row, in its place."""
    anytime = _experiment("benchmarks.anytime")

    def row(graph, d, method, us, s=1.0):
        return {"graph": graph, "n_devices": d, "seconds": s, "method": method, "runtime_us": us,
                "place_seconds": s, "compile_seconds": 0.0, "simulator_calls": 5, "oom": False}

    old = [row("a", 4, "sa", 1.0), row("a", 4, "placeto-search", 2.0), row("a", 4, "gdp", 3.0),
           row("a", 2, "placeto-search", 4.0), row("a", 4, "placeto-search", 5.0, s=10.0)]
    anytime.atomic_write_csv(tmp_path / "old.csv", old, anytime.FIELDS)
    new = [row("a", 4, "placeto-search", 9.0), row("b", 4, "placeto-search", 8.0)]
    merged = anytime.merge(tmp_path / "old.csv", new)
    assert [(r["graph"], r["n_devices"], r["seconds"], r["method"], r["runtime_us"]) for r in merged] == [
        ("a", 4, 1.0, "sa", 1.0), ("a", 4, 1.0, "placeto-search", 9.0), ("a", 4, 1.0, "gdp", 3.0),
        ("a", 2, 1.0, "placeto-search", 4.0), ("a", 4, 10.0, "placeto-search", 5.0),
        ("b", 4, 1.0, "placeto-search", 8.0)]


def test_anytime_overall_ratio_spans_device_counts():
    """anytime.py: per budget, a learned search's mean ratio to the best method of each (graph, device
    count) row, over all its rows; no line for a search that ran at one device count only."""
    anytime = _experiment("benchmarks.anytime")

    def row(graph, d, method, us, s=1.0):
        return {"graph": graph, "n_devices": d, "seconds": s, "method": method, "runtime_us": us}

    rows = [row("a", 2, "local-search", 100.0), row("a", 2, "placeto-search", 110.0),
            row("a", 4, "local-search", 100.0), row("a", 4, "placeto-search", 90.0),
            row("a", 4, "gdp-search", 95.0), row("a", 2, "placeto-search", 200.0, s=10.0),
            row("a", 2, "sa", math.nan, s=10.0)]
    text = "\n".join(anytime.overall(rows))
    assert "at 1 s: placeto-search 1.050x the best method of its row, mean over 2 rows." in text  # (1.1 + 1) / 2
    assert "gdp-search" not in text and "at 10 s" not in text  # one device count each


def test_anytime_traces_are_kept_merged_and_unreadable_ones_ignored(tmp_path, capsys):
    """anytime.py: traces round-trip through their gzipped JSON; a corrupt file is ignored with a
    warning naming it (the curves are then drawn from the new runs alone), never a crash."""
    anytime = _experiment("benchmarks.anytime")
    path = tmp_path / "anytime_x_traces.json.gz"
    traces = {("a", 4, 1.0, "sa"): ((0.01, 1, 900.0), (0.5, 40, 800.0)), ("a", 4, 1.0, "etf"): ()}
    anytime.save_traces(path, traces)
    assert anytime.load_traces(path) == traces
    path.write_bytes(b"\x1f\x8b not gzip")
    assert anytime.load_traces(path) == {}
    assert str(path) in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--devices", "x"], ["--devices", "0"], ["--seconds", "nan"], ["--seconds", ""],
                                   ["--graphs", "-1"], ["--methods", "foo"], ["--family", "nope"]])
def test_anytime_bad_flags_are_one_line_errors(flags, tmp_path, capsys):
    """anytime.py: a bad flag is one line on stderr and exit status 2, before any run; nothing is
    written."""
    status = _exit_status(_experiment("benchmarks.anytime").main,
                          ["--family", "nmt", *flags, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_table_run_saves_a_gdp_run_it_resumes_from(tmp_path):
    """checkpoint_io.save_table_run (a run with its optimizer state and rows) writes a run directory that gdp's
    load_run reads (the same parameters) and load_table_run restores with its optimizer state, step and rows; a
    damaged file is an InputError naming it."""
    import jax
    import numpy as np
    import optax

    from placeto.checkpoint_io import load_table_run, save_table_run
    from placeto.methods.gdp.place import load_run
    from placeto.policies import resolve_checkpoint

    columns = ("step", "seconds", "loss", "ratio")
    config, params = load_run(resolve_checkpoint("gdp-ptb"))
    params = jax.tree.map(lambda a: a + 0.5, params)
    opt = optax.adam(1e-3)
    state = opt.init(params)
    rows = [(0, 0.0, math.nan, 1.2), (800, 66.0, 0.5, 1.15)]
    save_table_run(tmp_path / "run", config, params, state, 800, rows, columns)
    _, loaded = load_run(tmp_path / "run")
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)))
    p2, _, step, rows2 = load_table_run(tmp_path / "run", jax.tree.map(np.zeros_like, params), opt.init(params),
                                        columns)
    assert step == 800 and rows2[1] == rows[1] and rows2[0][0] == 0 and math.isnan(rows2[0][2])
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(p2), jax.tree.leaves(params)))
    with pytest.raises(InputError, match="malformed step or rows"):
        load_table_run(tmp_path / "run", params, state, ("step", "other"))
    (tmp_path / "run" / "checkpoint.msgpack").write_bytes(b"\x00garbage")
    with pytest.raises(InputError, match="checkpoint.msgpack"):
        load_table_run(tmp_path / "run", params, state, columns)


def test_learned_methods_beyond_their_devices_are_rows_that_do_not_apply(tmp_path, capsys):
    """The shipped policies place on at most 8 devices: at 16, compare gives their rows "does not apply" and a note
    (as for expert or cpu-only), where it stopped with an error; `place` refuses in one line, exit 2."""
    from placeto.cli.main import main

    rows = compare([layered_dag(30, seed=0)], [16], ["etf", "placeto", "placeto-search", "gdp"], seconds=1,
                   progress=False)
    learned = [r for r in rows if r.method != "etf"]
    assert all(not r.applies and "places on at most 8 devices" in r.note for r in learned)
    assert next(r for r in rows if r.method == "etf").applies
    assert "placeto does not apply in 1 of 1 runs" in markdown_table(rows)
    save_graph(layered_dag(30, seed=0), tmp_path / "g.json")
    for method in ("placeto", "gdp"):
        assert main(["place", str(tmp_path / "g.json"), "--devices", "16", "--method", method,
                     "--out", str(tmp_path / "p.json")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "at most 8 devices" in err and "Traceback" not in err, err
    assert not (tmp_path / "p.json").exists()
