"""Issue 64 item 7: the hardware commands say how long before they start, and refuse a placement of too many stages.

`place --hardware`'s profile prints an estimate before it starts and a bar through it (placeto.progress.estimated);
`eval --hardware` counts each placement's stages up front (simulator.hardware.stages) and refuses, in one line with
the estimate, one over --max-stages, before calibrating or starting a worker.
"""

from __future__ import annotations

import io
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from placeto.harness import on_hardware
from placeto.progress import estimated
from simulator import load_graph, make_graph, save_placement
from simulator.hardware.stages import check_stages, count_stages, estimate, planned_stages
from simulator.measure import graph_profile
from simulator.measure.profile import with_measured
from simulator.measure.step_profile import ATTRIBUTION
from simulator.model.errors import InputError

ROOT = Path(__file__).resolve().parents[3]
CIFAR = "datasets/cifar10/cifar10_000.json.gz"  # 490 groups of 5,459 ops


class FakeCpu:
    platform, device_kind, id = "cpu", "cpu", 0


def test_count_stages_of_a_toy_plan():
    holders = np.array([True, False, False, False, False, False])  # an input, then a chain of five units
    order = list(range(6))
    assert count_stages(order, [0, 0, 0, 0, 0, 0], holders) == 1  # one device: the step is one stage
    assert count_stages(order, [1, 0, 1, 0, 1, 0], holders) == 5  # every unit switches: a stage each
    assert count_stages(order, [0, 0, 0, 1, 1, 1], holders) == 2
    assert count_stages(order, [1, 0, 0, 1, 1, 1], holders) == 2  # a holder's device makes no stage


def test_round_robin_of_a_cifar10_graph_is_refused_up_front_with_its_estimate():
    graph = load_graph(CIFAR)
    rr = (np.arange(graph.n_nodes) % 2).astype(np.int32)
    half = (np.arange(graph.n_nodes) >= graph.n_nodes // 2).astype(np.int32)
    single = np.zeros(graph.n_nodes, np.int32)
    stages = [planned_stages(graph, p, 2, "processes") for p in (single, half, rr)]
    assert stages[0] == 1 and stages[1] < 40 < 250 < stages[2]  # measured on the rig: 1, 22 and 331 stages
    ok = check_stages(graph, [("single.json", single), ("half.json", half)], 2, "processes", 128, 8)
    assert [c.stages for c in ok] == stages[:2] and ok[0].compile_s < ok[1].compile_s
    with pytest.raises(InputError) as e:
        check_stages(graph, [("single.json", single), ("rr.json", rr)], 2, "processes", 128, 8)
    text = str(e.value)
    assert text.startswith(f"rr.json: about {stages[2]} stages") and "min here" in text
    assert f"--max-stages {stages[2]} to run it anyway" in text and "\n" not in text
    assert estimate(graph, stages[2], 8).compile_s > 60  # minutes, as measured (119 s for its first step)


def test_profile_estimate_grows_with_the_ops_and_the_step():
    small = load_graph("datasets/transformer/transformer_000.json.gz")  # 2,348 ops: 7.5 s here
    big = load_graph(CIFAR)  # 5,459 ops: 40.1 s here
    assert 3 < graph_profile.estimate_seconds(small) < 20 < graph_profile.estimate_seconds(big) < 100
    costless = make_graph("g", [{"name": "a", "cost": {"k80": 1.0}, "out_bytes": [4]}], [])
    assert graph_profile.estimate_seconds(costless) == pytest.approx(graph_profile.PROFILE_BASE_S, abs=1e-3)


def test_place_hardware_profile_says_its_estimate_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("PLACETO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(graph_profile.LOAD_ENV, raising=False)
    graph = load_graph("datasets/nmt/nmt_002.json.gz")
    lines: list[str] = []
    seen_when_called = []

    def fake_profile(graph, devices, repeats, warmup):
        seen_when_called.append(list(lines))
        info = {"method": "step", "materialised": True, "attribution": ATTRIBUTION, "host": platform.node(),
                "load_1min": 0.0, "cores": 2}
        return with_measured(graph, "local-cpu", np.full(graph.n_nodes, 7.0), info, devices[0])

    monkeypatch.setattr(on_hardware, "profile", fake_profile)
    on_hardware.ensure_profile(graph, None, [FakeCpu()], lines.append)
    guess = round(graph_profile.estimate_seconds(graph))
    before = seen_when_called[0]
    assert any(line.startswith(f"profiling {graph.name} on cpu") and line.endswith(f"about {guess} s here ...")
               for line in before)  # said before the measurement began
    assert lines[-1].startswith("profile: measured in ") and lines[-1].endswith(" s")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_estimated_bar_ticks_on_a_terminal_and_stays_silent_elsewhere():
    term = _Terminal()
    with estimated("profiling g", 100, file=term) as bar:
        deadline = time.monotonic() + 20
        while bar.n < 1 and time.monotonic() < deadline:  # ticks each second (a loaded box: allow for it)
            time.sleep(0.2)
        assert 1 <= bar.n < 100
    assert "profiling g" in term.getvalue() and "estimated]" in term.getvalue()
    log = io.StringIO()  # not a terminal: nothing written
    with estimated("profiling g", 100, file=log):
        pass
    assert log.getvalue() == ""


def test_eval_hardware_refuses_a_round_robin_placement_before_anything_runs(tmp_path):
    graph = load_graph(CIFAR)
    rr = tmp_path / "rr.json"
    save_placement(rr, np.arange(graph.n_nodes) % 2, ["/cpu:0", "/cpu:1"])
    env = dict(os.environ, PYTHONPATH=str(ROOT), PLACETO_CACHE=str(tmp_path / "cache"))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "placeto.cli.main", "eval", CIFAR, "--placement", str(rr),
                        "--hardware", "--devices", "2"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "rr.json: about" in err and "--max-stages" in err
    assert "calibrating" not in r.stdout and not (tmp_path / "cache" / "clusters").exists()  # nothing measured
    assert time.monotonic() - t0 < 120  # refused up front, not after minutes
