"""What protects the machine and the user's files beyond one bad file: the user's own code fails in one
line (its traceback on request), an unresolvable cache directory stops only what needs it, host device lists are
bounded by the machine, and a damaged or stale calibration cache entry is named and replaced.

The one-line rule for every bad command line, and the messages, are tests/docs/test_bad_inputs.py's (cases hw41-*,
meta41-*, run41-*, gdp41-*, user41-*, out41-*); the fields of every file format tests/docs/test_bad_inputs_fields.py's.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.model.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SPEC = '[{"shape": [2, 2]}, {"shape": [2, 2]}]'
GRAPH = {"format": "placeto-graph", "version": 1, "name": "g", "meta": {},
         "nodes": [{"name": "a", "op": "x", "cost": 10, "out_bytes": [1000]},
                   {"name": "b", "op": "x", "cost": 20, "out_bytes": []}],
         "edges": [{"src": "a", "dst": "b"}]}


@pytest.fixture
def root(tmp_path) -> Path:
    """A working directory with a graph and a user module whose step raises."""
    (tmp_path / "g.json").write_text(json.dumps(GRAPH))
    (tmp_path / "usercode.py").write_text("def raises(a, b):\n    raise RuntimeError('boom in user code')\n")
    return tmp_path


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}


def test_the_users_traceback_on_request(root):
    """import-jax of a function that raises: one line by default; --verbose (or PLACETO_TRACEBACK=1) first prints
    the traceback through the user's own frame, the one line still last."""
    cmd = [sys.executable, "-m", "placeto.cli.main", "import-jax", "usercode:raises", "--args-spec", SPEC, "--out",
           "new_tb.json"]
    for extra, env in (([], {}), (["--verbose"], {}), ([], {"PLACETO_TRACEBACK": "1"})):
        proc = subprocess.run(cmd + extra, capture_output=True, text=True, cwd=root, env={**_env(root), **env},
                              timeout=120)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and lines[-1].startswith("placeto: error: usercode:raises raised RuntimeError")
        shown = bool(extra or env)
        assert ("Traceback" in proc.stderr and "usercode.py" in proc.stderr) == shown, proc.stderr
        assert len(lines) == 1 or shown
    assert not (root / "new_tb.json").exists()


def test_an_unresolvable_cache_home_stops_only_what_needs_the_cache(root):
    """PLACETO_CACHE=~nosuchuser/x: a command that needs no cache runs, with one warning (the compilation cache
    is off); one that keeps its measurements there (place --hardware) stops with one line naming the variable."""
    env = {**{k: v for k, v in _env(root).items() if k != "PLACETO_COMPILE_CACHE"},  # (conftest sets it)
           "PLACETO_CACHE": "~nosuchuser_41/x"}
    ok = subprocess.run([sys.executable, "-m", "placeto.cli.main", "graph", "info", "g.json"], capture_output=True,
                        text=True, cwd=root, env=env, timeout=120)
    warning = ok.stderr.splitlines()
    assert ok.returncode == 0 and len(warning) == 1 and warning[0].startswith("placeto: warning: compilation cache")
    assert "~nosuchuser_41" in warning[0]
    hw = subprocess.run([sys.executable, "-m", "placeto.cli.main", "place", "g.json", "--hardware", "--out", "new_hw.json"],
                        capture_output=True, text=True, cwd=root, env=env, timeout=300)
    assert hw.returncode == 2 and "Traceback" not in hw.stderr, hw.stderr[-2000:]
    assert hw.stderr.splitlines()[-1].startswith("placeto: error: PLACETO_CACHE=~nosuchuser_41/x"), hw.stderr


def test_device_lists_are_bounded_by_the_machine(monkeypatch):
    """At most max(8, 4 x cores) host CPU devices, checked when a list is parsed (a cpu index) or host devices
    are asked for (a count); a digit Python reads but int() refuses ('¹') is no index."""
    from simulator.hardware import devices as H

    monkeypatch.setattr(H.os, "cpu_count", lambda: 2)
    assert H.max_host_devices() == 8
    assert H.parse_device_spec("cpu:7") == (("cpu", 7),) and H.parse_device_spec("gpu:99") == (("gpu", 99),)
    for bad, says in (("cpu:8", "at most 8 host CPU devices"), ("cpu:99999", "at most 8"),
                      ("cpu:¹", "not platform:index"), ("²", "not platform:index"), ("cpu:٣", "not platform:index")):
        with pytest.raises(InputError, match=re.escape(says)):
            H.parse_device_spec(bad)
    with pytest.raises(InputError, match="at most 8 host CPU devices"):
        H.ensure_host_devices(9)
    monkeypatch.setattr(H.os, "cpu_count", lambda: 16)
    assert H.max_host_devices() == 64 and H.parse_device_spec("cpu:63") == (("cpu", 63),)


def test_a_damaged_or_stale_calibration_cache_entry_is_named_and_replaced(tmp_path, monkeypatch, capsys):
    """place/eval --hardware's cached cluster: a valid entry of these devices is used; an unreadable one, or one of
    other devices (their count or cost kinds), is named in one warning and calibrated again, the entry replaced;
    an entry that cannot be written is a warning, the calibration still used."""
    import simulator.measure.calibrate
    from simulator.measure import cache
    from simulator.model.cluster import Cluster, Device, load_cluster, save_cluster

    class CPU:
        platform, device_kind, id = "cpu", "cpu", 0

    fresh = Cluster("fresh", tuple(Device(f"/cpu:{i}", "local-cpu", 1e9) for i in range(2)), 1.0, 1.0, 1.0)
    calls = []
    monkeypatch.setattr(simulator.measure.calibrate, "calibrate_fit",
                        lambda spec, repeats: calls.append(spec) or type("Fit", (), {"cluster": fresh}))
    entry = tmp_path / "entry.json"
    monkeypatch.setattr(cache, "cluster_cache_path", lambda devices: entry)
    devices = [CPU(), CPU()]
    stale = Cluster("old", tuple(Device(f"/gpu:{i}", "k80", 1e9) for i in range(2)), 1.0, 1.0, 1.0)
    for content in (b"{ not json", stale, Cluster("one", fresh.devices[:1], 1.0, 1.0, 1.0)):
        if isinstance(content, bytes):
            entry.write_bytes(content)
        else:
            save_cluster(content, entry)
        calls.clear()
        got = simulator.measure.calibrate.cached_cluster(devices, 2, progress=lambda _: None)
        err = capsys.readouterr().err.splitlines()
        assert got is fresh and calls == [2] and len(err) == 1, err
        assert str(entry) in err[0] and "damaged or stale calibration cache entry" in err[0]
        assert load_cluster(entry).name == "fresh"  # replaced
    calls.clear()
    assert simulator.measure.calibrate.cached_cluster(devices, 2, progress=lambda _: None).name == "fresh" and calls == []
    entry.unlink()
    entry.mkdir()  # a directory in the way: calibrated, used, not cached
    entry.joinpath("x").write_text("")
    assert simulator.measure.calibrate.cached_cluster(devices, 2, progress=lambda _: None) is fresh
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "cannot cache the calibration" in err[1]


def test_damaged_rig_costs_cache_entry_is_replaced(monkeypatch, tmp_path, capsys):
    """simulator.measure.rig_calibrate.cached_rig_costs: an entry that is not an object of RigCosts' fields, each a finite
    number >= 0, is named in one warning and measured again (replacing it); a good entry is reused; an entry that
    cannot be written is a warning, the costs still used."""
    import json

    import simulator.measure.rig_calibrate
    from simulator.measure import cache
    from simulator.engine.staged import RigCosts

    fresh = RigCosts(launch_us=50.0, step_us=100.0, latency_us=80.0)
    calls = []
    monkeypatch.setattr(simulator.measure.rig_calibrate, "rig_costs", lambda rig, repeats: (calls.append(1) or fresh, {}))
    entry = tmp_path / "entry.rig.json"
    monkeypatch.setattr(cache, "rig_costs_path", lambda devices, version: entry)
    good = json.loads(json.dumps(fresh.__dict__))
    for content in ("{ not json", "[]", json.dumps({**good, "launch_us": -1.0}), json.dumps({**good, "x": 1.0}),
                    json.dumps({**good, "step_us": True}), json.dumps({**good, "latency_us": "NaN"})):
        entry.write_text(content)
        calls.clear()
        got = simulator.measure.rig_calibrate.cached_rig_costs(None, [], progress=lambda _: None)
        err = capsys.readouterr().err.splitlines()
        assert got == fresh and calls == [1] and len(err) == 1, (content, err)
        assert str(entry) in err[0] and "damaged rig costs cache entry" in err[0]
        assert json.loads(entry.read_text()) == good  # replaced
    calls.clear()
    assert simulator.measure.rig_calibrate.cached_rig_costs(None, [], progress=lambda _: None) == fresh and calls == []
    entry.unlink()
    entry.mkdir()  # a directory in the way: measured, used, not cached
    entry.joinpath("x").write_text("")
    assert simulator.measure.rig_calibrate.cached_rig_costs(None, [], progress=lambda _: None) == fresh
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "cannot cache the rig costs" in err[1]
