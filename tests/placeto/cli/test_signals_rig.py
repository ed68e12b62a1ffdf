"""One way to stop, on the process rig: real signals to `eval --hardware` and `place --hardware`, and a rig worker
that dies or goes silent.

`eval --hardware --rig processes --mode synthetic --costs graph` with a given cluster reaches the rig at once
(nothing profiled or calibrated): its start-up (the workers importing JAX) and its timed rounds (a plan loaded,
its shared memory block made) are each a few seconds in. Every test checks the exit code, one line on stderr, no
traceback, the command's workers gone (they run in a session of their own) and its shared memory unlinked
(tests/helpers/signals.py). Marked serial: they run real steps, which a second test process would slow past the
waits.
"""

from __future__ import annotations

import os
import re
import shutil
import signal

import numpy as np
import pytest

from simulator.hardware.rig.pool import TIMEOUT_ENV
from simulator.model.cluster import Cluster, Device, save_cluster
from simulator.model.generate import layered_dag
from simulator.model.io import save_graph
from simulator.model.placement_file import save_placement
from tests.helpers.signals import ROOT, Run, blocks, check_stopped, cli

pytestmark = pytest.mark.serial


@pytest.fixture
def files(tmp_path):
    """g.json (40 nodes), p.json (alternating over 2 devices: values cross, so the plan has a block), c.json."""
    graph = layered_dag(40, seed=3)
    save_graph(graph, tmp_path / "g.json")
    save_placement(tmp_path / "p.json", np.arange(graph.n_nodes) % 2, ["/cpu:0", "/cpu:1"])
    save_cluster(Cluster("local", tuple(Device(f"/cpu:{i}", "local-cpu", 1e10) for i in range(2)), 20.0, 30.0,
                         1e3), tmp_path / "c.json")
    return tmp_path


def _eval(files, repeats: int = 100000, env: dict | None = None) -> Run:
    return Run(cli("eval", str(files / "g.json"), "--placement", str(files / "p.json"), "--hardware", "--devices",
                   "2", "--cluster", str(files / "c.json"), "--rig", "processes", "--mode", "synthetic", "--costs",
                   "graph", "--repeats", str(repeats)), env=dict(os.environ, **(env or {}),
                                                                 PLACETO_CACHE=str(files / "cache")))


@pytest.mark.parametrize("sig, group", [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["SIGINT-group", "SIGTERM-alone"])
def test_a_signal_during_the_rigs_start_up(files, sig, group):
    """While the workers import JAX (today a KeyboardInterrupt traceback of each worker)."""
    run = _eval(files)
    run.wait_for(lambda: len(run.workers()) == 2, timeout=300)
    workers = run.workers()
    assert "graph layered_40_s3" not in run.stdout  # still starting
    run.send(sig, group=group)
    assert check_stopped(run, 128 + sig, also_gone=tuple(workers)) == \
        f"placeto: interrupted ({signal.Signals(sig).name}): eval --hardware"


@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, True), (signal.SIGINT, False)],
                         ids=["SIGTERM-group", "SIGINT-alone"])
def test_a_signal_during_the_timed_rounds(files, sig, group):
    """SIGTERM to the process group is `timeout`'s: eval --hardware once left its shared memory block behind
    ("resource_tracker: ... leaked shared_memory objects"), and its workers died of BrokenPipeError tracebacks."""
    run = _eval(files)
    run.wait_for(lambda: "placement " in run.stdout and blocks(run.pid), timeout=300)  # the plan is on the rig
    workers = run.workers()
    assert len(workers) == 2
    run.send(sig, group=group)
    assert check_stopped(run, 128 + sig, also_gone=tuple(workers)) == \
        f"placeto: interrupted ({signal.Signals(sig).name}): eval --hardware"


def test_a_killed_worker_is_one_line_naming_it(files):
    run = _eval(files)
    run.wait_for(lambda: "placement " in run.stdout and blocks(run.pid), timeout=300)
    workers = sorted(run.workers())
    os.kill(workers[1], signal.SIGKILL)
    line = check_stopped(run, 1, also_gone=tuple(workers))
    assert re.match(r"placeto: error: process rig during the (loading of the placements|warm-up steps|timed "
                    r"rounds): worker 1 died .*killed by SIGKILL.*; its 2 worker processes are stopped and its "
                    r"shared memory freed; rerun the command", line), line


def test_a_silent_worker_is_one_line_naming_it(files):
    """A worker stopped (SIGSTOP) mid-run: the other's wait for its batch, or the parent's for its reply, times out
    (PLACETO_RIG_TIMEOUT_S), and the line says what to do."""
    run = _eval(files, env={TIMEOUT_ENV: "3"})
    run.wait_for(lambda: "placement " in run.stdout and blocks(run.pid), timeout=300)
    workers = sorted(run.workers())
    os.kill(workers[1], signal.SIGSTOP)
    line = check_stopped(run, 1, also_gone=tuple(workers))
    assert re.match(r"placeto: error: process rig during the (loading of the placements|warm-up steps|timed "
                    r"rounds): worker (0 failed in 'run': TimeoutError: worker 0: no batch \d+ from worker 1 within "
                    r"3 s|1 did not answer '\w+' within 8 s).*; the machine may be overloaded .*PLACETO_RIG_TIMEOUT_S",
                    line), line


def test_a_bad_rig_timeout_is_one_line(files):
    run = _eval(files, env={TIMEOUT_ENV: "soon"})
    assert run.finish(timeout=300) == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == "placeto: error: PLACETO_RIG_TIMEOUT_S='soon': expected a positive number of seconds"


def test_place_hardware_interrupted_at_the_rigs_start_up(tmp_path, files):
    """`place --hardware` (profiled first: its cache is this test's own) stopped when its rig starts."""
    graph = tmp_path / "mlp.json.gz"
    shutil.copyfile(ROOT / "datasets" / "mlp" / "mlp_000.json.gz", graph)
    run = Run(cli("place", str(graph), "--hardware", "--devices", "2", "--cluster", str(files / "c.json"),
                  "--candidates", "etf", "--seconds", "0.2", "--top", "1", "--repeats", "2", "--out",
                  str(tmp_path / "out.json")), env=dict(os.environ, PLACETO_CACHE=str(tmp_path / "cache"),
                                                        PLACETO_MAX_LOAD_PER_CORE="1000"))
    run.wait_for("starting 2 worker processes", timeout=600)
    run.wait_for(lambda: len(run.workers()) == 2, timeout=60)
    workers = run.workers()
    run.send(signal.SIGINT)
    assert check_stopped(run, 130, also_gone=tuple(workers)) == "placeto: interrupted (SIGINT): place --hardware"
    assert not (tmp_path / "out.json").exists()
