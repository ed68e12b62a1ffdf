"""simulator.measure.profile_cache and the profile step of `place --hardware` (placeto.harness.on_hardware.ensure_profile): profiles
cached per graph, device, host and JAX version, never written into the graph file unless asked; a profile taken
under load is measured again; a damaged entry is ignored with one warning line. No device is measured: the
measurement (simulator.measure.graph_profile.profile) is replaced by a stand-in that records what it was asked."""

import platform

import numpy as np
import pytest

from simulator.measure import cluster_cache, profile_cache, graph_profile as profiling

from placeto.harness import on_hardware
from simulator.model.io import load_graph, save_graph
from simulator.measure.profile import with_measured
from simulator.measure.step_profile import ATTRIBUTION


class FakeCpu:
    """What the profile step reads of a JAX CPU device."""

    platform, device_kind, id = "cpu", "cpu", 0


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLACETO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(profiling.LOAD_ENV, raising=False)
    return tmp_path / "cache"


def _measure_stub(monkeypatch, load: float = 0.0, cores: int = 2):
    """Replace the measurement: every unit costs 7 us, recorded with `load` on `cores`; returns the call log."""
    calls = []

    def fake_profile(graph, devices, repeats, warmup):
        calls.append([d.device_kind for d in devices])
        info = {"method": "step", "materialised": True, "attribution": ATTRIBUTION, "host": platform.node(),
                "load_1min": load, "cores": cores}
        return with_measured(graph, "local-cpu", np.full(graph.n_nodes, 7.0), info, devices[0])

    monkeypatch.setattr(profiling, "profile", fake_profile)
    return calls


def test_graph_hash_ignores_costs_and_profiles():
    graph = load_graph("datasets/nmt/nmt_002.json.gz")
    measured = with_measured(graph, "local-cpu", np.ones(graph.n_nodes), {"method": "step"}, FakeCpu())
    assert profile_cache.graph_hash(graph) == profile_cache.graph_hash(measured)
    other = load_graph("datasets/nmt/nmt_004.json.gz")
    assert profile_cache.graph_hash(other) != profile_cache.graph_hash(graph)


def test_place_profile_is_cached_not_written_into_the_graph(cache, tmp_path, monkeypatch):
    path = tmp_path / "g.json.gz"
    save_graph(load_graph("datasets/nmt/nmt_002.json.gz"), path)
    before = path.read_bytes()
    calls, lines = _measure_stub(monkeypatch), []
    graph = on_hardware.ensure_profile(load_graph(path), str(path), [FakeCpu()], lines.append)
    assert calls == [["cpu"]] and graph.costs["local-cpu"][0] == 7.0
    assert path.read_bytes() == before  # the input file untouched
    assert lines[0] == (f"profile: the local-cpu profile in {path} was measured by method None, not 'step': "
                        f"measuring it again")  # the shipped file's old op-level profile
    assert "the graph file untouched" in lines[1] and len(list((cache / "profiles").iterdir())) == 1
    lines.clear()
    again = on_hardware.ensure_profile(load_graph(path), str(path), [FakeCpu()], lines.append)
    assert calls == [["cpu"]] and np.array_equal(again.costs["local-cpu"], graph.costs["local-cpu"])
    assert lines[0].startswith("profile: cached (local-cpu in ") and not any("profiling" in x for x in lines)
    on_hardware.ensure_profile(load_graph(path), str(path), [FakeCpu()], lines.append, save=True)
    assert path.read_bytes() != before and "local-cpu" in load_graph(path).meta["profile"]  # asked: written


def test_a_profile_taken_under_load_is_measured_again(cache, tmp_path, monkeypatch):
    graph = load_graph("datasets/nmt/nmt_002.json.gz")
    calls, lines = _measure_stub(monkeypatch, load=3.5, cores=2), []
    on_hardware.ensure_profile(graph, None, [FakeCpu()], lines.append)
    assert any("measured under load (load 3.5 on 2 cores): used now, measured again next time" in x for x in lines)
    quiet = _measure_stub(monkeypatch, load=0.2, cores=2)
    lines.clear()
    on_hardware.ensure_profile(graph, None, [FakeCpu()], lines.append)
    assert lines[0].endswith("; the cached local-cpu profile was measured under load (load 3.5 on 2 cores): "
                             "measuring it again") and calls == quiet == [["cpu"]]
    lines.clear()
    on_hardware.ensure_profile(graph, None, [FakeCpu()], lines.append)  # the quiet one is final
    assert lines[0].startswith("profile: cached")
    monkeypatch.setenv(profiling.LOAD_ENV, "2")  # a machine that is never idle may raise the limit
    assert not profiling.under_load({"load_1min": 3.5, "cores": 2})
    monkeypatch.setenv(profiling.LOAD_ENV, "x")  # not a number: the default 0.5 per core, after 1 for placeto
    assert profiling.under_load({"load_1min": 2.1, "cores": 2}) and not profiling.under_load({"load_1min": 1.9,
                                                                                             "cores": 2})
    assert not profiling.under_load({"cores": 2})  # recorded before the rule: no load known


def test_other_host_or_jax_or_damage_is_not_used(cache, tmp_path, monkeypatch, capsys):
    graph = load_graph("datasets/nmt/nmt_002.json.gz")
    key = profile_cache.profile_key(graph, FakeCpu())
    how = {"method": "step", "device": "cpu", "platform": "cpu", "materialised": True, "attribution": ATTRIBUTION,
           "jax_version": key.jax_version, "host": key.host}
    assert profile_cache.stale(how, key) is None
    # a profile whose unscoped kernels went to their operand's unit (before the users-first rule) is taken again
    assert "older rule" in profile_cache.stale({k: v for k, v in how.items() if k != "attribution"}, key)
    # a CPU profile taken with fusion across units (before simulator.hardware.plans.materialises) no longer holds
    assert "materialised" in profile_cache.stale({k: v for k, v in how.items() if k != "materialised"}, key)
    assert profile_cache.stale({**how, "platform": "gpu", "materialised": False}, key) is None
    assert profile_cache.stale({**how, "host": "elsewhere"}, key) == "is from another host"
    assert profile_cache.stale({**how, "jax_version": "0.0.1"}, key).startswith("is from JAX 0.0.1")
    assert profile_cache.stale({k: v for k, v in how.items() if k != "host"}, key) == "does not record its host"
    calls = _measure_stub(monkeypatch)
    on_hardware.ensure_profile(graph, None, [FakeCpu()], lambda line: None)
    path = profile_cache.entry_path(key, graph.name)
    path.write_text(path.read_text()[:50])  # a truncated entry
    capsys.readouterr()
    on_hardware.ensure_profile(graph, None, [FakeCpu()], lambda line: None)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged profile cache entry" in err[0] and "measuring again" in err[0]
    assert calls == [["cpu"], ["cpu"]]  # measured again, and cached again
    assert profile_cache.read(key, graph) is not None
    other = key._replace(host="elsewhere")  # an entry keyed for another host is never read here
    assert profile_cache.entry_path(other, graph.name) != path


def test_eval_hardware_uses_the_cached_calibration(cache, capsys):
    """eval --hardware's cluster is place --hardware's cached calibration (nothing is calibrated here)."""
    import argparse

    from placeto.cli.eval import eval_cluster
    from simulator.model.cluster import Cluster, Device, load_cluster, save_cluster
    from simulator.hardware.devices import local_devices

    path = cluster_cache.cluster_cache_path(local_devices(1))
    path.parent.mkdir(parents=True)
    save_cluster(Cluster("cached", (Device("/cpu:0", "local-cpu", 1e9),), 1.0, 2.0, 1e3), path)
    args = argparse.Namespace(cluster=None, hardware=True, preset="placeto-k80")
    cluster = eval_cluster(args, 1, 1)
    assert cluster == load_cluster(path) and "(cached calibration" in capsys.readouterr().out


def test_rig_costs_are_keyed_by_the_workers_malloc_settings(cache, monkeypatch):
    """Rig costs measured on workers that return freed memory to the kernel are not another rig's costs."""
    from simulator.hardware.rig import pool as process_rig
    from simulator.hardware.devices import local_devices

    devices = local_devices(1)
    now = cluster_cache.rig_costs_path(devices)
    assert now.parent == cluster_cache.cluster_cache_path(devices).parent and now.name.endswith(".json")
    monkeypatch.setattr(process_rig, "WORKER_MALLOC", ())
    assert cluster_cache.rig_costs_path(devices) != now
