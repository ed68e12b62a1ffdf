"""simulator.measure.cache: the compilation cache (where PLACETO_COMPILE_CACHE puts it, `off`, an unusable directory
(one warning, no cache), a second command reading what the first wrote), and the profile and cluster caches with the
profile step of `place --hardware` (placeto.harness.on_hardware.ensure_profile): profiles cached per graph, device,
host and JAX version, never written into the graph file unless asked; a profile taken under load is measured again;
a damaged entry is ignored with one warning line. No device is profiled: the measurement
(simulator.measure.graph_profile.profile) is replaced by a stand-in that records what it was asked."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from placeto.cli.main import build_parser
from placeto.harness import on_hardware
from simulator.measure import cache as measure_cache, graph_profile as profiling
from simulator.measure.profile import with_measured
from simulator.measure.rig_workload import VERSION
from simulator.measure.step_profile import ATTRIBUTION
from simulator.model.generate import layered_dag
from simulator.model.io import load_graph, save_graph


class FakeCpu:
    """What the profile step reads of a JAX CPU device."""

    platform, device_kind, id = "cpu", "cpu", 0


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
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

    monkeypatch.setattr(on_hardware, "profile", fake_profile)  # the name ensure_profile calls
    return calls


def test_graph_hash_ignores_costs_and_profiles():
    graph = load_graph("datasets/nmt/nmt_002.json.gz")
    measured = with_measured(graph, "local-cpu", np.ones(graph.n_nodes), {"method": "step"}, FakeCpu())
    assert measure_cache.graph_hash(graph) == measure_cache.graph_hash(measured)
    other = load_graph("datasets/nmt/nmt_004.json.gz")
    assert measure_cache.graph_hash(other) != measure_cache.graph_hash(graph)


def test_place_profile_is_cached_not_written_into_the_graph(cache_root, tmp_path, monkeypatch):
    path = tmp_path / "g.json.gz"
    save_graph(load_graph("datasets/nmt/nmt_002.json.gz"), path)
    before = path.read_bytes()
    calls, lines = _measure_stub(monkeypatch), []
    graph = on_hardware.ensure_profile(load_graph(path), str(path), [FakeCpu()], lines.append)
    assert calls == [["cpu"]] and graph.costs["local-cpu"][0] == 7.0
    assert path.read_bytes() == before  # the input file untouched
    assert lines[0] == (f"profile: the local-cpu profile in {path} records no measuring method (an older op-level "
                        f"profile, not the step method's): measuring it again")  # the shipped file's old profile
    assert "the graph file untouched" in lines[1] and len(list((cache_root / "profiles").iterdir())) == 1
    lines.clear()
    again = on_hardware.ensure_profile(load_graph(path), str(path), [FakeCpu()], lines.append)
    assert calls == [["cpu"]] and np.array_equal(again.costs["local-cpu"], graph.costs["local-cpu"])
    assert lines[0].startswith("profile: cached (local-cpu in ") and not any("profiling" in x for x in lines)
    on_hardware.ensure_profile(load_graph(path), str(path), [FakeCpu()], lines.append, save=True)
    assert path.read_bytes() != before and "local-cpu" in load_graph(path).meta["profile"]  # asked: written


def test_a_profile_taken_under_load_is_measured_again(cache_root, tmp_path, monkeypatch):
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


def test_other_host_or_jax_or_damage_is_not_used(cache_root, tmp_path, monkeypatch, capsys):
    graph = load_graph("datasets/nmt/nmt_002.json.gz")
    key = measure_cache.profile_key(graph, FakeCpu())
    how = {"method": "step", "device": "cpu", "platform": "cpu", "materialised": True, "attribution": ATTRIBUTION,
           "jax_version": key.jax_version, "host": key.host}
    assert profiling.stale(how, key) is None
    # a profile whose unscoped kernels went to their operand's unit (before the users-first rule) is taken again
    assert "older rule" in profiling.stale({k: v for k, v in how.items() if k != "attribution"}, key)
    # a CPU profile taken with fusion across units (before simulator.hardware.plans.materialises) no longer holds
    assert "materialised" in profiling.stale({k: v for k, v in how.items() if k != "materialised"}, key)
    assert profiling.stale({**how, "platform": "gpu", "materialised": False}, key) is None
    assert profiling.stale({**how, "host": "elsewhere"}, key) == "is from another host"
    assert profiling.stale({**how, "jax_version": "0.0.1"}, key).startswith("is from JAX 0.0.1")
    assert profiling.stale({k: v for k, v in how.items() if k != "host"}, key) == "does not record its host"
    calls = _measure_stub(monkeypatch)
    on_hardware.ensure_profile(graph, None, [FakeCpu()], lambda line: None)
    path = measure_cache.profile_path(key, graph.name)
    path.write_text(path.read_text()[:50])  # a truncated entry
    capsys.readouterr()
    on_hardware.ensure_profile(graph, None, [FakeCpu()], lambda line: None)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged profile cache entry" in err[0] and "measuring again" in err[0]
    assert calls == [["cpu"], ["cpu"]]  # measured again, and cached again
    assert measure_cache.read_profile(key, graph) is not None
    other = key._replace(host="elsewhere")  # an entry keyed for another host is never read here
    assert measure_cache.profile_path(other, graph.name) != path


def test_eval_hardware_uses_the_cached_calibration(cache_root, capsys):
    """eval --hardware's cluster is place --hardware's cached calibration (nothing is calibrated here)."""
    import argparse

    from placeto.cli.eval import eval_cluster
    from simulator.model.cluster import Cluster, Device, load_cluster, save_cluster
    from simulator.hardware.devices import local_devices

    path = measure_cache.cluster_cache_path(local_devices(1))
    path.parent.mkdir(parents=True)
    save_cluster(Cluster("cached", (Device("/cpu:0", "local-cpu", 1e9),), 1.0, 2.0, 1e3), path)
    args = argparse.Namespace(cluster=None, hardware=True, preset="placeto-k80", memory=None)
    chosen = eval_cluster(args, 1, [])
    assert chosen.cluster == load_cluster(path) and "(cached calibration" in capsys.readouterr().out


def test_rig_costs_are_keyed_by_the_workers_malloc_settings(cache_root, monkeypatch):
    """Rig costs measured on workers that return freed memory to the kernel are not another rig's costs."""
    from simulator.hardware.rig import pool as process_rig
    from simulator.hardware.devices import local_devices

    devices = local_devices(1)
    now = measure_cache.rig_costs_path(devices, VERSION)
    assert now.parent == measure_cache.cluster_cache_path(devices).parent and now.name.endswith(".json")
    monkeypatch.setattr(process_rig, "WORKER_MALLOC", ())
    assert measure_cache.rig_costs_path(devices, VERSION) != now


ENV = measure_cache.ENV


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default = Path.home() / ".cache" / "placeto" / "jax"
    assert measure_cache.compile_cache_dir({}) == default
    assert measure_cache.compile_cache_dir({ENV: ""}) == default  # empty = unset
    assert measure_cache.compile_cache_dir({"XDG_CACHE_HOME": "/xdg"}) == Path("/xdg/placeto/jax")
    assert measure_cache.compile_cache_dir({"XDG_CACHE_HOME": "relative"}) == default  # XDG: a relative path is ignored
    assert measure_cache.compile_cache_dir({ENV: "/a/b", "XDG_CACHE_HOME": "/xdg"}) == Path("/a/b")
    assert measure_cache.compile_cache_dir({ENV: "here"}) == tmp_path / "here"  # made absolute
    assert measure_cache.compile_cache_dir({ENV: "~/c"}) == Path.home() / "c"
    assert measure_cache.compile_cache_dir({ENV: "off"}) is None
    assert measure_cache.compile_cache_dir({ENV: " OFF "}) is None
    root = measure_cache.ROOT_ENV  # placeto's cache root moves the compilation cache with it
    assert measure_cache.compile_cache_dir({root: "/r"}) == Path("/r/jax")
    assert measure_cache.compile_cache_dir({root: "/r", ENV: "/a"}) == Path("/a")
    assert measure_cache.compile_cache_dir({root: "/r", ENV: "off"}) is None


def test_jax_options_turn_the_cache_on_or_off(tmp_path):
    assert measure_cache.jax_options(None) == {"jax_enable_compilation_cache": False}
    on = measure_cache.jax_options(tmp_path)
    assert on["jax_enable_compilation_cache"] is True
    assert on["jax_compilation_cache_dir"] == str(tmp_path)
    assert on["jax_persistent_cache_min_compile_time_secs"] == 0.0  # small executables are kept too


def test_off_disables_and_creates_nothing(tmp_path):
    environ = {ENV: "off", "HOME": str(tmp_path)}
    assert measure_cache.enable_compile_cache(environ) is None
    assert environ["JAX_ENABLE_COMPILATION_CACHE"] == "false"  # for a later `import jax` and subprocesses
    assert "JAX_COMPILATION_CACHE_DIR" not in environ
    assert jax.config.jax_enable_compilation_cache is False
    assert list(tmp_path.iterdir()) == []


def test_unusable_directory_warns_once_and_runs_without(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(measure_cache, "_warned", False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    environ = {ENV: str(blocker / "jax")}  # under a regular file: cannot be created, even by root
    assert measure_cache.usable(blocker / "jax") is not None
    assert measure_cache.enable_compile_cache(environ) is None
    assert measure_cache.enable_compile_cache(environ) is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"placeto: warning: compilation cache {blocker / 'jax'}: ")
    assert "running without it" in err[0]
    assert environ["JAX_ENABLE_COMPILATION_CACHE"] == "false"


def test_no_home_directory_warns_and_runs_without(monkeypatch, capsys):
    monkeypatch.setattr(measure_cache, "_warned", False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert measure_cache.enable_compile_cache({}) is None
    assert capsys.readouterr().err.startswith("placeto: warning: compilation cache: Could not determine home")


def test_usable_creates_the_directory(tmp_path):
    path = tmp_path / "x" / "y"
    assert measure_cache.usable(path) is None
    assert path.is_dir() and list(path.iterdir()) == []  # the probe file is gone


def test_help_says_how_to_move_or_disable_it():
    text = " ".join(build_parser().format_help().split())
    assert f"{ENV}=DIR" in text and f"{ENV}=off" in text and "~/.cache/placeto/jax" in text


@pytest.fixture(scope="module")
def tiny_graph(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("graph") / "g.json"
    save_graph(layered_dag(40, seed=1), path)
    return path


def _place(graph: Path, cache: str, out: Path) -> subprocess.CompletedProcess:
    """`placeto place` with a shipped gdp policy of the independent decoder (gdp-nmt: its forward pass is one jitted
    function), JAX's compile log on (it reports persistent-cache hits)."""
    env = {**os.environ, ENV: cache, "JAX_LOG_COMPILES": "1"}
    proc = subprocess.run([sys.executable, "-m", "placeto.cli.main", "place", str(graph), "--checkpoint", "gdp-nmt",
                           "--devices", "2", "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_second_command_reads_the_warm_cache(tiny_graph, tmp_path):
    cache = tmp_path / "cache"
    first = _place(tiny_graph, str(cache), tmp_path / "p1.json")
    entries = sorted(p.name for p in cache.glob("*-cache"))
    assert any(name.startswith("jit_sample-") for name in entries), entries  # the policy's forward pass
    assert "Persistent compilation cache hit" not in first.stderr
    second = _place(tiny_graph, str(cache), tmp_path / "p2.json")
    assert "Persistent compilation cache hit for 'jit_sample'" in second.stderr
    assert sorted(p.name for p in cache.glob("*-cache")) == entries  # nothing compiled anew
    assert (tmp_path / "p1.json").read_bytes() == (tmp_path / "p2.json").read_bytes()
