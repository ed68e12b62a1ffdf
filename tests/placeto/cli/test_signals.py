"""One way to stop (simulator.interrupts): real SIGINT and SIGTERM sent to real `placeto` commands.

Each command runs in a session of its own and gets the signal as a shell job would (to its process group: a
Ctrl-C, `timeout`'s SIGTERM), or alone; it must end with 128 + the signal, one line on stderr naming what was
running (and, for `train`, the checkpoint it kept), no traceback, no process and no shared memory left
(tests/helpers/signals.py). The process rig's paths are in test_signals_rig.py.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
from flax import serialization

from simulator.model.generate import layered_dag
from simulator.model.io import save_graph
from tests.helpers.signals import (ROOT, Run, bar_count, check_stopped, children, cli, cmdline, cpu_seconds,
                                   descendants)

BUDGET = 10**6  # never reached: every run here is stopped


def _rows(path) -> int:
    return len(path.read_text().splitlines()) - 1 if path.exists() else 0


@pytest.mark.parametrize("method, sig", [("placeto", signal.SIGINT), ("gdp", signal.SIGTERM),
                                         ("rnn", signal.SIGTERM), ("hierarchical", signal.SIGINT)])
def test_an_interrupted_train_keeps_its_last_update_and_resumes_there(tmp_path, method, sig):
    """The checkpoint of the last complete update is written on the way out (checkpoint_seconds is far off: only
    the first update's periodic one would be there otherwise), the line says how many episodes or placements it
    holds, and the same command resumes from exactly there."""
    save_graph(layered_dag(24, seed=5), tmp_path / "g.json")
    out = tmp_path / "run"

    def argv(budget: int) -> list[str]:
        return cli("train", "--graph", str(tmp_path / "g.json"), "--devices", "2", "--method", method, "--out",
                   str(out), "--config", "tiny", "--episodes", str(budget), "--set", "checkpoint_seconds=1000")

    run = Run(argv(BUDGET))
    if method == "placeto":  # no bar in its tiny config: a metrics row per update
        run.wait_for(lambda: _rows(out / "metrics.csv") >= 4)
    else:
        run.wait_for(lambda: len(set(re.findall(r"(\d+)/\d+ \[", run.stderr)) - {"0"}) >= 4)  # 4 updates' counts
    run.send(sig)
    line = check_stopped(run, 128 + sig)
    unit = "episodes" if method == "placeto" else "placements"
    found = re.search(rf"^placeto: interrupted \({signal.Signals(sig).name}\): train: checkpoint kept at (\d+) of "
                      rf"{BUDGET} {unit} \(.*checkpoint.msgpack\); the same command resumes from", line)
    assert found, line
    kept = int(found.group(1))
    blob = serialization.msgpack_restore((out / "checkpoint.msgpack").read_bytes())
    assert int(blob["episode" if method == "placeto" else "samples"]) == kept
    per_update = kept // int(blob["update"])
    assert int(blob["update"]) >= 3 and kept == per_update * int(blob["update"])  # past the first update's
    rerun = subprocess.run(argv(kept + 1), capture_output=True, text=True, timeout=300, env=_env())
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    if method == "placeto":
        total, now = map(int, re.search(r"(\d+) episodes \((\d+) now", rerun.stdout).groups())
        assert (total, now) == (kept + per_update, per_update), rerun.stdout  # one update more, from `kept`
    else:
        total, now = map(int, re.search(r"(\d+) placements \((\d+) updates now", rerun.stdout).groups())
        assert (total, now) == (kept + per_update, 1), rerun.stdout


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT))


def test_an_interrupted_compare_stops_at_once_with_one_line(tmp_path):
    """One Ctrl-C stops `compare` (JAX's garbage-collector callback once swallowed it and the command ran on)."""
    save_graph(layered_dag(40, seed=1), tmp_path / "g.json")
    run = Run(cli("compare", str(tmp_path / "g.json"), "--devices", "2", "--seconds", "30", "--out",
                  str(tmp_path / "cmp")))
    run.wait_for(lambda: bar_count(run.stderr) >= 1 or "compiling" in run.stderr, timeout=300)
    run.send(signal.SIGINT)
    assert check_stopped(run, 130) == "placeto: interrupted (SIGINT): compare"
    assert not (tmp_path / "cmp").exists() or not any((tmp_path / "cmp").iterdir())  # nothing half written


def test_an_interrupted_profile_leaves_the_graph_file_as_it_was(tmp_path):
    graph = tmp_path / "g.json.gz"
    shutil.copyfile(ROOT / "datasets" / "mlp" / "mlp_000.json.gz", graph)  # a zoo graph: its program is known
    before = graph.read_bytes()
    run = Run(cli("profile", str(graph), "--repeats", "100000"))
    run.wait_for(lambda: run.cpu_seconds() > 12, timeout=300)  # imported, tracing or timing (it prints nothing)
    run.send(signal.SIGTERM, group=False)
    assert check_stopped(run, 143) == "placeto: interrupted (SIGTERM): profile"
    assert graph.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["g.json.gz"]


def test_an_interrupted_calibrate_writes_no_cluster_file(tmp_path):
    """A Ctrl-C a few seconds into the probes (where one was once swallowed by JAX's garbage-collector callback
    and the command ran to its end)."""
    run = Run(cli("calibrate", "--out", str(tmp_path / "c.json"), "--devices", "2"))
    run.wait_for("measuring the calibration graphs", timeout=300)
    time.sleep(3)
    run.send(signal.SIGINT)
    assert check_stopped(run, 130).startswith("placeto: interrupted (SIGINT): calibrate")
    assert not (tmp_path / "c.json").exists()


def test_an_interrupted_datasets_build_stops_its_tracing_processes(tmp_path):
    """Its spawned pool's workers ignore the Ctrl-C their process group gets (each printed a KeyboardInterrupt
    traceback) and are killed, not waited for; no manifest is written."""
    run = Run(cli("datasets", "build", "--family", "mlp", "--out", str(tmp_path / "ds"), "--workers", "2"))

    def tracing() -> list[int]:
        return [p for p in children(run.pid) if "multiprocessing.spawn" in cmdline(p)]

    run.wait_for(lambda: len(tracing()) == 2 and all(cpu_seconds(p) > 4 for p in tracing()), timeout=300)
    pool = tracing()
    run.send(signal.SIGINT)
    assert check_stopped(run, 130, also_gone=tuple(pool)) == "placeto: interrupted (SIGINT): datasets build"
    assert not (tmp_path / "ds" / "mlp" / "manifest.json").exists()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install 'placeto[ray]')")
def test_an_interrupted_train_on_ray_workers_stops_ray_too(tmp_path):
    """--workers 2 starts a local Ray (its daemons and two actors, all below the command): a Ctrl-C to the job is
    the same one line and checkpoint as without Ray, and none of Ray's processes is left."""
    save_graph(layered_dag(24, seed=5), tmp_path / "g.json")
    out = tmp_path / "run"
    run = Run(cli("train", "--graph", str(tmp_path / "g.json"), "--devices", "2", "--out", str(out), "--config",
                  "tiny", "--episodes", str(BUDGET), "--set", "checkpoint_seconds=1000", "--workers", "2"))
    run.wait_for(lambda: _rows(out / "metrics.csv") >= 3, timeout=400)
    ray = descendants(run.pid)
    assert any("raylet" in cmdline(p) for p in ray), [cmdline(p) for p in ray]
    said = len(run.stderr)  # Ray's own start-up lines (its core worker's note on restartable actors) aside
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    run.send(signal.SIGINT)
    line = check_stopped(run, 130, also_gone=tuple(ray), timeout=60, since=said)
    assert re.search(rf"^placeto: interrupted \(SIGINT\): train: checkpoint kept at \d+ of {BUDGET} episodes", line), line
