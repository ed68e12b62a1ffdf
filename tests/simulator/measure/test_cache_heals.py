"""Every cache heals (issue 64, item 2): an entry of the profile cache, the calibration (cluster) cache, the rig-cost
cache or JAX's compilation cache that cannot be read or fails validation is named in one warning line, measured
(or compiled) again and replaced; never an error. Each kind with the same three damages: bytes that are not UTF-8
(or not an executable), valid JSON with an out-of-range value, and JSON of the wrong schema. Nothing is measured:
the measurements are replaced by stand-ins that count their calls."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import simulator.measure.calibrate
import simulator.measure.rig_calibrate
from placeto.harness import on_hardware
from simulator.engine.staged import RigCosts
from simulator.measure import cache, graph_profile
from simulator.measure.profile import with_measured
from simulator.measure.rig_calibrate import MAX_RIG_US
from simulator.measure.step_profile import ATTRIBUTION
from simulator.model.cluster import Cluster, Device, load_cluster, save_cluster
from simulator.model.generate import layered_dag

GARBAGE = bytes(range(128, 256)) + b"\xe9"  # not UTF-8 (ends in a lone Latin-1 e-acute)


class CPU:
    """What the caches read of a JAX host CPU device."""

    platform, device_kind, id = "cpu", "cpu", 0


def _one_warning(capsys, entry: Path, says: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(entry) in err[0] and says in err[0] and err[0].startswith("placeto: warning: "), err[0]
    return err[0]


# ---- the profile cache --------------------------------------------------------------------------------------------
def _profile_damages(entry: dict) -> dict[str, bytes]:
    return {"garbage": GARBAGE, "latin-1": b"\xe9",
            "out of range": json.dumps({**entry, "cost_us": [1e300] * len(entry["cost_us"])}).encode(),
            "negative": json.dumps({**entry, "cost_us": [-1.0] * len(entry["cost_us"])}).encode(),
            "wrong schema": json.dumps({**entry, "cost_us": {"a": 1}}).encode(),
            "a list": b"[1, 2]", "another format": json.dumps({**entry, "format": "placeto-cluster"}).encode()}


@pytest.mark.parametrize("damage", list(_profile_damages({"cost_us": []})))
def test_a_damaged_profile_entry_is_named_measured_again_and_replaced(damage, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLACETO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(graph_profile.LOAD_ENV, raising=False)
    calls = []

    def fake_profile(graph, devices, repeats, warmup):
        calls.append(1)
        info = {"method": "step", "materialised": True, "attribution": ATTRIBUTION, "host": platform.node(),
                "load_1min": 0.0, "cores": 2}
        return with_measured(graph, "local-cpu", np.full(graph.n_nodes, 7.0), info, devices[0])

    monkeypatch.setattr(on_hardware, "profile", fake_profile)
    graph = layered_dag(30, seed=3)
    on_hardware.ensure_profile(graph, None, [CPU()], lambda line: None)
    path = cache.profile_path(cache.profile_key(graph, CPU()), graph.name)
    good = path.read_bytes()
    path.write_bytes(_profile_damages(json.loads(good))[damage])
    capsys.readouterr()
    got = on_hardware.ensure_profile(graph, None, [CPU()], lambda line: None)
    _one_warning(capsys, path, "damaged profile cache entry")
    assert calls == [1, 1] and got.costs["local-cpu"][0] == 7.0  # measured again
    assert path.read_bytes() == good  # replaced
    on_hardware.ensure_profile(graph, None, [CPU()], lambda line: None)
    assert calls == [1, 1] and capsys.readouterr().err == ""  # healed: read back, nothing said


# ---- the calibration (cluster) cache ------------------------------------------------------------------------------
FRESH = Cluster("fresh", tuple(Device(f"/cpu:{i}", "local-cpu", 1e9) for i in range(2)), 1.0, 1.0, 1.0)


def _cluster_damages() -> dict[str, bytes]:
    good = FRESH.to_dict()
    return {"garbage": GARBAGE, "latin-1": b"\xe9",
            "out of range": json.dumps({**good, "bandwidth_bytes_per_us": 1e300}).encode(),
            "negative delta": json.dumps({**good, "delta1_us": -5.0}).encode(),
            "wrong schema": json.dumps({**good, "devices": "two"}).encode(), "a list": b"[]"}


@pytest.mark.parametrize("damage", list(_cluster_damages()))
def test_a_damaged_calibration_entry_is_named_measured_again_and_replaced(damage, tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(simulator.measure.calibrate, "calibrate_fit",
                        lambda spec, repeats: calls.append(spec) or type("Fit", (), {"cluster": FRESH}))
    entry = tmp_path / "entry.json"
    monkeypatch.setattr(cache, "cluster_cache_path", lambda devices: entry)
    entry.write_bytes(_cluster_damages()[damage])
    got = simulator.measure.calibrate.cached_cluster([CPU(), CPU()], 2, progress=lambda _: None)
    _one_warning(capsys, entry, "damaged or stale calibration cache entry")
    assert got is FRESH and calls == [2] and load_cluster(entry) == FRESH  # measured again, replaced
    assert simulator.measure.calibrate.cached_cluster([CPU(), CPU()], 2, progress=lambda _: None) == FRESH
    assert calls == [2] and capsys.readouterr().err == ""


# ---- the rig-cost cache ---------------------------------------------------------------------------------------------
RIG = RigCosts(launch_us=50.0, step_us=100.0, latency_us=80.0, send_us_per_mb=300.0)


def _rig_damages() -> dict[str, bytes]:
    good = RIG.__dict__
    return {"garbage": GARBAGE, "latin-1": b"\xe9",
            "out of range": json.dumps({**good, "launch_us_per_input_mb": 1e300}).encode(),  # the probe's entry
            "past the rig bound": json.dumps({**good, "send_us": MAX_RIG_US * 10}).encode(),
            "contention": json.dumps({**good, "contention": 1e6}).encode(),
            "a huge integer": (json.dumps({**good, "step_us": 0})[:-1] + ', "recv_us": ' + "9" * 400 + "}").encode(),
            "wrong schema": json.dumps({**good, "step_us": [1.0]}).encode(), "a list": b"[]"}


@pytest.mark.parametrize("damage", list(_rig_damages()))
def test_a_damaged_rig_costs_entry_is_named_measured_again_and_replaced(damage, tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(simulator.measure.rig_calibrate, "rig_costs", lambda rig, repeats: (calls.append(1) or RIG, {}))
    entry = tmp_path / "entry.rig.json"
    monkeypatch.setattr(cache, "rig_costs_path", lambda devices, version: entry)
    entry.write_bytes(_rig_damages()[damage])
    got = simulator.measure.rig_calibrate.cached_rig_costs(None, [], progress=lambda _: None)
    line = _one_warning(capsys, entry, "damaged rig costs cache entry")
    assert "measuring again and replacing it" in line
    assert got == RIG and calls == [1] and json.loads(entry.read_text()) == RIG.__dict__
    assert simulator.measure.rig_calibrate.cached_rig_costs(None, [], progress=lambda _: None) == RIG
    assert calls == [1] and capsys.readouterr().err == ""


def test_the_rig_bound_keeps_a_large_stage_in_range():
    """An entry within MAX_RIG_US is never damage downstream: the rig's charges on a stage of 10^4 inputs and 10 GB
    stay below the limit a node's cost is checked against."""
    from simulator.model.limits import MAX_COST_US

    top = RigCosts(**{k: MAX_RIG_US for k in RIG.__dict__ if k != "contention"})
    charge = (top.launch_us + 1e4 * top.launch_us_per_input + 1e4 * (top.launch_us_per_input_mb
                                                                      + top.launch_us_per_output_mb)
              + top.send_cost(1e10, 10**4) + top.recv_cost(1e10, 10**4))
    assert charge < MAX_COST_US


# ---- JAX's compilation cache ------------------------------------------------------------------------------------------
SCRIPT = """
from simulator.measure import cache
cache.enable_compile_cache()
import jax, jax.numpy as jnp
def twice_sin(x):
    return jnp.sin(x) * 2
print(float(jax.jit(twice_sin)(jnp.ones(3)).sum()))
"""


def _compile(directory: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, cache.ENV: str(directory), "PYTHONPATH": str(Path(__file__).parents[3])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "5.048825740814209", proc.stderr[-2000:]
    return proc


def test_a_damaged_compilation_cache_entry_is_named_compiled_again_and_replaced(tmp_path):
    directory = tmp_path / "jax"
    assert _compile(directory).stderr == ""
    (entry,) = directory.glob("jit_twice_sin-*-cache")
    for damage in (GARBAGE, b"", zlib.compress(b"\0\0\0\1" + b"not an executable" * 50)):  # the last: JAX's framing
        entry.write_bytes(damage)
        err = _compile(directory).stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"placeto: warning: compilation cache entry {entry}: unreadable ("), err
        assert err[0].endswith("removed, compiling jit_twice_sin again (the new entry replaces it)")
        assert entry.is_file() and entry.read_bytes() != damage  # replaced by the new executable
        assert _compile(directory).stderr == ""  # healed: read back without a word


def test_the_compilation_cache_line_without_the_key_names_the_directory(tmp_path):
    from simulator.measure.compile_heal import healed_entry_line

    line = healed_entry_line("jit_f", "bad header", None, tmp_path)
    assert line == (f"placeto: warning: compilation cache entry of jit_f in {tmp_path}: unreadable (bad header); "
                    f"compiling jit_f again (delete it to rebuild it)")
    (tmp_path / "k-cache").mkdir()  # not a file: named, not removed
    assert "delete it to rebuild it" in healed_entry_line("jit_f", "x", "k", tmp_path)
    assert (tmp_path / "k-cache").is_dir()
