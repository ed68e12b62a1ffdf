"""simulator.measure.agreement and the hardware output that explains itself: errors, Spearman and concordance, the
concurrency line, the placements measured against the single device, the refit table's columns, and eval's flag
combinations checked before any work."""

import math

import numpy as np
import pytest

from simulator.measure.agreement import EvalRow, agreement, concordance, format_agreement, spearman, versus_single
from simulator.measure.concurrency import Concurrency, concurrency_line
from placeto.cli.main import main
from placeto.harness.evaluate import summary_lines
from simulator import save_graph, save_placement
from simulator.measure.fit import Fit, format_fit
from simulator.model.generate import layered_dag
from simulator.hardware.timing import Timing, timing_of


def _row(name, simulated_ms, measured_ms):
    return EvalRow(name, simulated_ms * 1e3, timing_of([measured_ms * 1e3 * f for f in (0.9, 1.0, 1.1)]))


def test_concurrency_line_says_when_devices_are_not_concurrent_and_what_it_means():
    serial = concurrency_line(Concurrency(n=2, speedup=1.05, cores=2, load=3.0, platform="cpu"))
    assert serial.startswith("devices: 2 host CPU devices sharing 2 cores (load 3.0) ran independent work 1.05x")
    assert "(the simulator assumes 2x): NOT concurrent" in serial and "running the devices at once gains nothing" in serial
    assert "\n" not in serial
    parallel = concurrency_line(Concurrency(n=2, speedup=1.9, cores=16, load=0.1, platform="cpu"))
    assert parallel.endswith("(the simulator assumes 2x): concurrent, as simulated")


@pytest.mark.parametrize("n, cores, speedup, assumed, ceiling, concurrent", [
    (4, 2, 1.9, "4x", ", at most 2x on 2 cores", False),  # the old "ideal 2" for 4 devices: now both figures
    (4, 8, 3.5, "4x", "", True),
    (8, 64, 5.0, "8x", "", False),
])
def test_concurrency_compares_with_the_device_count_and_names_the_cores_ceiling(n, cores, speedup, assumed,
                                                                                 ceiling, concurrent):
    c = Concurrency(n=n, speedup=speedup, cores=cores, load=0.5, platform="cpu")
    assert c.concurrent is concurrent and c.ceiling == min(n, cores)
    assert f"(the simulator assumes {assumed}{ceiling})" in concurrency_line(c)
    gpus = Concurrency(n=n, speedup=speedup, cores=cores, load=0.5, platform="gpu")
    assert gpus.ceiling == n and f"devices: {n} gpu devices ran" in concurrency_line(gpus)


def test_versus_single_names_the_fastest_and_the_placements_measured_slower():
    single, etf, msct, ls = (_row("runs/single.json", 23.0, 34.8), _row("runs/etf.json", 25.0, 66.4),
                             _row("m-sct.json", 26.0, 56.4), _row("ls.json", 19.4, 17.4))
    lines = versus_single([single, etf, msct, ls], single)
    assert lines[0] == "fastest measured: ls.json, 2.00x the speed of the single device (single.json)"
    assert lines[1] == ("measured SLOWER than the single device (single.json, 34.800 ms): m-sct.json 0.62x, "
                        "etf.json 0.52x its speed")  # neither was simulated faster than the single device
    lines = versus_single([single, _row("etf.json", 19.0, 66.4)], single)
    assert lines == ["measured SLOWER than the single device (single.json, 34.800 ms): etf.json 0.52x its speed; "
                     "the simulator predicted it faster than the single device"]
    assert versus_single([single], single) == []


def test_summary_lines_find_the_single_device_placement_and_print_spearman_with_n():
    rows = [_row("one.json", 20.0, 30.0), _row("rr.json", 15.0, 40.0)]
    placements = [np.zeros(4, np.int32), np.array([0, 1, 0, 1], np.int32)]
    c = Concurrency(n=2, speedup=1.0, cores=2, load=2.0, platform="cpu")
    lines = summary_lines(rows, placements, c)
    assert lines[0].startswith("summary, simulated against measured step time: median |error|")
    assert lines[0].endswith("over 2 placements; Spearman n/a (n=2: needs >= 5 placements)")
    assert lines[1].startswith("measured SLOWER than the single device (one.json, 30.000 ms): rr.json 0.75x")
    assert lines[2] == concurrency_line(c) and len(lines) == 3
    two_devices = summary_lines(rows, [placements[1], placements[1]], None)  # no single-device placement given
    assert len(two_devices) == 1
    # a second single-device placement is compared with, not listed as slower than the fastest one
    rows.append(_row("one_again.json", 20.0, 31.0))
    lines = summary_lines(rows, placements + [np.ones(4, np.int32)], None)
    assert lines[1].startswith("measured SLOWER than the single device (one.json, 30.000 ms): rr.json 0.75x its")


def test_summary_lines_set_the_fastest_placement_against_plain_jit_and_say_what_host_devices_are():
    from simulator.hardware.plain_jit import PlainJit, rig_line

    rows = [_row("one.json", 20.0, 30.0), _row("P/rr.json", 15.0, 24.0)]
    placements = [np.zeros(4, np.int32), np.array([0, 1, 0, 1], np.int32)]
    plain = (PlainJit((12e3,), "cpu:0 (2 cores)", "zoo program nmt"),)
    lines = summary_lines(rows, placements, None, plain, rig=True)
    assert lines[-2].startswith("plain jax.jit of the step (default device and threading, a fresh process")
    assert lines[-2].endswith("; fastest measured placement (rr): 24.000 ms = 0.50x plain jit's speed")
    assert lines[-1] == rig_line() and len(lines) == 4
    assert summary_lines(rows, placements, None, (PlainJit(why="no program"),))[-1].endswith("unavailable (no "
                                                                                               "program)")


def test_format_fit_aligns_long_placement_names():
    names = ("a.json", "a_rather_long_placement_name.json")
    params = {"delta1_us": 1.0, "dispatch_us": 2.0, "delta2_us": 3.0, "us_per_mb": 1.0, "latency_us": 4.0,
              "transfer_us": 5.0}
    fit = Fit(None, params, names, np.array([100.0, 2000.0]), np.array([110.0, 1900.0]), 0.9, 0.1)
    lines = format_fit(fit, label="placement").splitlines()
    header, rows = lines[1], lines[2:4]
    assert header.startswith("placement ") and lines[-1].endswith("over 2 placements")
    ends = {len(header)} | {len(r) for r in rows}
    assert len(ends) == 1, lines  # every column ends where its header does
    assert [r.index(" ", len(names[1])) for r in rows] == [len(names[1])] * 2


def test_eval_plot_without_hardware_fails_before_any_work(tmp_path, capsys):
    graph = layered_dag(20, seed=1)
    save_graph(graph, tmp_path / "g.json")
    save_placement(tmp_path / "p.json", np.zeros(graph.n_nodes, int), ["/gpu:0", "/gpu:1"])
    code = main(["eval", str(tmp_path / "g.json"), "--placement", str(tmp_path / "p.json"), "--plot",
                 str(tmp_path / "s.png"), "--json", str(tmp_path / "rows.json")])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and "--plot" in captured.err and "--hardware" in captured.err
    assert captured.out == "" and not (tmp_path / "rows.json").exists()


def test_agreement_and_spearman():
    def row(sim, meas):
        return EvalRow("p", sim, Timing(meas, meas, meas, meas, meas, np.array([meas])))

    rows = [row(100, 100), row(220, 200), row(270, 300), row(500, 400), row(600, 500)]
    a = agreement(rows)
    assert a.n == 5 and a.spearman == pytest.approx(1.0)
    assert a.median_ape == pytest.approx(10.0) and a.mean_ape == pytest.approx((0 + 10 + 10 + 25 + 20) / 5)
    assert spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 2, 3, 4], [1, 2, 3, 4]))  # fewer than MIN_RANKED (5) points
    assert math.isnan(agreement([EvalRow("p", 1.0)]).median_ape)
    # Undefined correlations are "n/a" with the reason, never "nan"
    assert format_agreement(a) == "median |error| 10.0%, mean |error| 13.0% over 5 placements; Spearman 1.00 (n=5)"
    assert not a.spearman_note
    four = format_agreement(agreement(rows[:4]))  # a rank correlation over 4 points is left out, with the reason
    assert "Spearman n/a (n=4: needs >= 5 placements)" in four and "nan" not in four
    tied = format_agreement(agreement([row(100 * k, 100) for k in range(1, 6)]))
    assert "Spearman n/a (every placement measures the same time)" in tied
    assert format_agreement(agreement([EvalRow("p", 1.0)])) == "median |error| n/a, Spearman n/a (nothing measured)"


def test_concordance_counts_overlapping_iqrs_as_ties():
    def timing(median, half_iqr):
        return Timing(median, median - half_iqr, median + half_iqr, median - 2 * half_iqr, median + 2 * half_iqr,
                      np.array([median]))

    measured = [timing(100, 5), timing(108, 5), timing(200, 5), timing(300, 5)]  # 100 and 108 overlap: a tie
    c = concordance([1.0, 2.0, 3.0, 4.0], measured)
    assert (c.agree, c.disagree, c.ties, c.pairs) == (5.0, 0.0, 1, 6) and c.fraction == 1.0
    c = concordance([1.0, 2.0, 4.0, 3.0], measured)  # 200 and 300 swapped
    assert (c.agree, c.disagree, c.ties) == (4.0, 1.0, 1) and c.fraction == pytest.approx(0.8)
    c = concordance([1.0, 2.0, 3.0, 3.0], measured)  # a predicted tie counts half
    assert (c.agree, c.disagree) == (4.5, 0.5)
    second = [timing(100, 5), timing(150, 5), timing(250, 60), timing(300, 5)]  # run 2: 250 +- 60 overlaps 300
    c = concordance([1.0, 2.0, 3.0, 4.0], measured, also_tied=second)
    assert (c.ties, c.agree) == (2, 4.0)  # (100, 108) tied in run 1, (250, 300) in run 2
    assert math.isnan(concordance([1.0, 1.0], [timing(100, 5), timing(101, 5)]).fraction)
