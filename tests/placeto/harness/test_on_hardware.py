"""placeto.harness.on_hardware / `placeto place --hardware`: profile, calibrate, place, run, keep the fastest measured."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from placeto.harness.on_hardware import RIG_COLUMN, Candidate, Outcome, Recheck, pick, report
from simulator.hardware.plain_jit import PlainJit, rig_line
from simulator.model.cluster import Cluster, Device, save_cluster
from simulator.hardware.timing import timing_of
from simulator.hardware.devices import HOST_DEVICE_FLAG

ROOT = Path(__file__).resolve().parents[3]


def _candidate(name, median, spread=0.1):
    p = np.zeros(3, np.int32) if name == "single device" else np.array([0, 1, 0], np.int32)
    return Candidate(name, p, 1000.0, timing_of([median * (1 - spread), median, median * (1 + spread)]))


def test_pick_the_fastest_median_with_its_speedup_and_spread():
    single, other = _candidate("single device", 200.0), _candidate("etf", 100.0)
    best, speedup, (lo, hi) = pick([other, single], single)
    assert best is other and speedup == pytest.approx(2.0)
    assert lo < 2.0 < hi  # the single device's quartiles over the placement's
    best, speedup, _ = pick([_candidate("etf", 300.0), single], single)
    assert best is single and speedup == 1.0


def test_report_says_why_the_single_device_is_kept():
    single, slow = _candidate("single device", 100.0), _candidate("etf", 150.0)
    cluster = Cluster("c", tuple(Device(f"/cpu:{i}", "local-cpu", 1e9) for i in range(2)), 0.0, 0.0, 1e3)
    text = report(Outcome(single, single, [slow._replace(simulated_us=500.0), single], cluster, 1.0, (0.9, 1.1)))
    assert ("kept: the single device, the fastest measured: every placement over 2 devices measured slower (etf "
            "0.67x its speed), although simulated up to 2.00x faster; a placement is kept only when measured "
            "faster") in text
    assert text.splitlines()[1].split()[-1] == "0.67x" and "<- kept" in text.splitlines()[2]
    fast, slow = _candidate("etf", 50.0), _candidate("m-sct", 400.0)
    text = report(Outcome(fast, single, [fast, single, slow], cluster, 2.0, (1.6, 2.4)))
    assert ("kept: etf, 2.00x the single device's measured speed (spread 1.60-2.40x: the single device's quartiles "
            "over the placement's); measured slower than the single device: m-sct 0.25x its speed") in text
    header, first = text.splitlines()[:2]
    assert first.index("2.00x") + 5 == header.index(RIG_COLUMN) + len(RIG_COLUMN)  # the column under its header
    assert rig_line() in text  # host CPU devices: the single device is the rig's control
    gpus = Cluster("g", tuple(Device(f"/gpu:{i}", "local-h100", 1e9) for i in range(2)), 0.0, 0.0, 1e3)
    text = report(Outcome(fast, single, [fast, single, slow], gpus, 2.0, (1.6, 2.4)))
    header, first = text.splitlines()[:2]
    assert first.index("2.00x") + 5 == header.index("vs single") + 9 and "test rig" not in text


def test_report_headlines_the_fresh_speedup_and_plain_jit():
    """The speedup printed is the one re-measured on fresh steps (the pick's own samples favour the winner), and
    the kept placement is set against the plain jit of the step."""
    single, fast = _candidate("single device", 200.0), _candidate("etf", 100.0)
    cluster = Cluster("c", tuple(Device(f"/cpu:{i}", "local-cpu", 1e9) for i in range(2)), 0.0, 0.0, 1e3)
    fresh = Recheck(timing_of([150.0, 160.0, 170.0]), timing_of([190.0, 200.0, 210.0]))
    plain = (PlainJit((50.0, 60.0, 70.0), "cpu:0 (2 cores)", "zoo program nmt"),
             PlainJit((60.0, 70.0, 80.0), "cpu:0 (2 cores)", "zoo program nmt"))
    text = report(Outcome(fast, single, [fast, single], cluster, 2.0, (1.6, 2.4), recheck=fresh, plain=plain))
    assert ("kept: etf, 1.25x the single device's speed on fresh steps (spread 1.18-1.32x; 2.00x on the steps it "
            "was picked with)") in text
    assert "plain jax.jit of the step (default device and threading, a fresh process" in text
    assert "; kept placement (etf, fresh steps): 0.160 ms = 0.41x plain jit's speed" in text
    slower = Recheck(timing_of([210.0, 220.0, 230.0]), timing_of([190.0, 200.0, 210.0]))
    text = report(Outcome(fast, single, [fast, single], cluster, 2.0, (1.6, 2.4), recheck=slower))
    assert "0.91x the single device's speed on fresh steps" in text and "NOT confirmed" in text
    assert "plain jax.jit" not in text  # not timed: nothing said


def test_a_speedup_beyond_the_devices_concurrency_is_flagged():
    """Devices that run independent work 1.14x as fast as one cannot make a placement 3x faster by running at
    once: such a speedup is flagged (place --hardware measures it again), and if it holds the report says the gain
    is not from concurrency; within SPEEDUP_SLACK of the concurrency it is noise, not flagged."""
    from simulator.measure.concurrency import SPEEDUP_SLACK, Concurrency, beyond_concurrency

    serial = Concurrency(2, 1.14, 2, 0.3, "cpu")
    assert beyond_concurrency(3.0, serial) and not beyond_concurrency(1.14 * SPEEDUP_SLACK, serial)
    assert not beyond_concurrency(3.0, None)  # not measured (one device, or mixed platforms): nothing to say
    assert beyond_concurrency(1.3, Concurrency(2, 0.8, 2, 0.3, "cpu"))  # a concurrency below 1 counts as 1
    assert not beyond_concurrency(2.2, Concurrency(2, 1.95, 16, 0.3, "cpu"))
    single, fast = _candidate("single device", 300.0), _candidate("etf", 100.0)
    cluster = Cluster("c", tuple(Device(f"/cpu:{i}", "local-cpu", 1e9) for i in range(2)), 0.0, 0.0, 1e3)
    first = Recheck(timing_of([95.0, 100.0, 105.0]), timing_of([290.0, 300.0, 310.0]))
    held = Recheck(timing_of([105.0, 110.0, 115.0]), timing_of([320.0, 330.0, 340.0]))
    text = report(Outcome(fast, single, [fast, single], cluster, 3.0, (2.5, 3.5), concurrency=serial,
                          recheck=held, flagged=first))
    assert ("3.00x is BEYOND the 1.14x the devices' measured concurrency allows (on two sets of fresh steps: 3.00x, "
            "then 3.00x): the gain is not from running the devices at once") in text
    gone = Recheck(timing_of([250.0, 260.0, 270.0]), timing_of([290.0, 300.0, 310.0]))
    text = report(Outcome(fast, single, [fast, single], cluster, 3.0, (2.5, 3.5), concurrency=serial,
                          recheck=gone, flagged=first))
    assert ("1.15x the single device's speed on fresh steps" in text and "measured again: the first fresh steps "
            "gave 3.00x, beyond the 1.14x the devices' measured concurrency allows") in text and "BEYOND" not in text
    from simulator.measure.agreement import EvalRow
    from placeto.harness.evaluate import summary_lines

    rows = [EvalRow("one.json", 300.0, timing_of([300.0] * 3)), EvalRow("etf.json", 200.0, timing_of([100.0] * 3))]
    lines = summary_lines(rows, [np.zeros(4, np.int32), np.array([0, 1, 0, 1], np.int32)], serial)
    assert ("fastest measured placement (etf): 3.00x is BEYOND the 1.14x the devices' measured concurrency "
            "allows: the gain is not from running the devices at once") in "\n".join(lines)


@pytest.mark.xdist_group("test_on_hardware")  # (tests/conftest.py: SLOW_FIRST entries are groups) started early
def test_place_hardware_end_to_end(tmp_path, monkeypatch):
    """On 2 host devices (a subprocess: XLA_FLAGS before JAX starts), with a given cluster so nothing is
    calibrated: the graph is profiled (the profile cached in placeto's cache, the graph file byte-identical: the
    next command's profile step reads it back, checked here in this process rather than by a second run), the
    placements run for real, the fastest measured is written and plotted."""
    graph = tmp_path / "g.json.gz"
    shutil.copyfile(ROOT / "datasets" / "nmt" / "nmt_002.json.gz", graph)
    original = graph.read_bytes()
    cluster = Cluster("local", tuple(Device(f"/cpu:{i}", "local-cpu", 1e10) for i in range(2)), 20.0, 30.0, 1e3)
    save_cluster(cluster, tmp_path / "c.json")
    flags = " ".join([os.environ.get("XLA_FLAGS", ""), f"{HOST_DEVICE_FLAG}=2"]).strip()  # (tests/conftest.py's too)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XLA_FLAGS=flags, JAX_PLATFORMS="cpu",
               PLACETO_CACHE=str(tmp_path / "cache"), PLACETO_MAX_LOAD_PER_CORE="1000")  # (a busy test machine
    #                                                   would make every profile one taken under load)
    argv = [sys.executable, "-m", "placeto.cli.main", "place", str(graph), "--hardware", "--devices", "2", "--cluster",
            str(tmp_path / "c.json"), "--candidates", "etf,m-sct", "--seconds", "0.2", "--top", "1", "--repeats", "2",
            "--out", str(tmp_path / "p.json"), "--plot", str(tmp_path / "p.png")]
    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "profiling nmt_002" in first.stdout and "<- kept (fastest measured)" in first.stdout
    assert graph.read_bytes() == original  # the input file untouched
    assert "devices: 2 host CPU devices sharing" in first.stdout and "the simulator assumes 2x" in first.stdout
    assert "\nkept: " in first.stdout  # which placement is kept, and why, on stdout
    assert "single device" in first.stdout and (tmp_path / "p.png").stat().st_size > 0
    assert "the single device's speed on fresh steps" in first.stdout or "kept: the single device" in first.stdout
    plain = next(line for line in first.stdout.splitlines() if line.startswith("plain jax.jit of the step"))
    assert "zoo program nmt, " in plain and " runs (before and after the placements" in plain, plain
    assert "x plain jit's speed" in plain and "host CPU devices: a test rig" in first.stdout
    placement = json.loads((tmp_path / "p.json").read_text())
    assert len(placement["devices"]) == 2 and len(placement["placement"]) > 0
    # what it was made for: the graph file's graph (not its profiled copy) and the cluster it placed on, named
    assert placement["graph"]["name"] == "nmt_002" and placement["cluster"]["definition"] == cluster.to_dict()
    assert "placing on cluster local: 2x local-cpu (10.0 GB each)" in first.stdout
    # the next `place --hardware` (the process rig: a profile taken on one core) finds the profile in the cache
    import jax

    from placeto.harness import on_hardware

    from simulator.measure import graph_profile as profiling
    from simulator import load_graph

    def measured_again(*args, **kwargs):
        raise AssertionError("the cached profile was measured again")

    for name, value in (("PLACETO_CACHE", str(tmp_path / "cache")), (profiling.LOAD_ENV, "1000")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(profiling, "profile", measured_again)
    lines = []
    on_hardware.ensure_profile(load_graph(graph), str(graph), jax.devices("cpu")[:1], lines.append, one_core=True)
    assert len(lines) == 1 and lines[0].startswith("profile: cached (local-cpu in " + str(tmp_path / "cache")), lines
    assert graph.read_bytes() == original
    bad = subprocess.run(argv[:-4] + ["--top", "0", "--out", str(tmp_path / "q.json")], env=env,
                         capture_output=True, text=True, timeout=100)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
