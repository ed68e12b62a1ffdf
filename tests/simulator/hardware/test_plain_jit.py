"""simulator.hardware.plain_jit: the plain jax.jit of a graph's step, timed in a fresh process with JAX's defaults."""

import pytest

from simulator.hardware import plain_jit
from simulator.hardware.plain_jit import (PlainJit, combined, parse_child, plain_env, plain_line, plain_platform,
                                          rig_line)
from simulator.model.errors import InputError
from simulator.model.graph import make_graph
from simulator.hardware.timing import timing_of
from simulator.hardware.devices import HOST_DEVICE_FLAG, SERIAL_CPU_FLAGS
from simulator.model.io import save_graph

TINY_MLP = {"kind": "mlp", "kwargs": {"depth": 2, "width": 16, "batch": 8, "in_features": 16, "classes": 4}}


def _graph_file(tmp_path, name, meta=None):
    path = tmp_path / f"{name}.json"
    save_graph(make_graph(name, [{"name": "a", "cost": {"cpu": 1.0}}], [], meta=meta), path)
    return path


def test_plain_env_strips_the_rig_flags_and_keeps_the_rest():
    rig = f"--xla_dump_to=/tmp/d {HOST_DEVICE_FLAG}=4 {' '.join(SERIAL_CPU_FLAGS)} --xla_cpu_multi_thread_eigen=true"
    env = plain_env({"XLA_FLAGS": rig, "JAX_NUM_CPU_DEVICES": "4", "HOME": "/h"}, "cpu")
    assert env == {"XLA_FLAGS": "--xla_dump_to=/tmp/d", "HOME": "/h", "JAX_PLATFORMS": "cpu"}  # every value goes
    assert "XLA_FLAGS" not in plain_env({"XLA_FLAGS": f"{HOST_DEVICE_FLAG}=2 {SERIAL_CPU_FLAGS[0]}"})
    # the default device may be a GPU whose memory the parent holds: no preallocation, unless the user says so
    assert plain_env({"JAX_PLATFORMS": "cuda,cpu"}) == {"JAX_PLATFORMS": "cuda,cpu",  # the user's own, kept
                                                        "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert plain_env({"XLA_PYTHON_CLIENT_PREALLOCATE": "true"})["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    with pytest.raises(InputError):
        plain_env({}, "tpu:0")


def test_plain_platform_follows_the_devices():
    assert plain_platform(2) == "default"  # a count: the default backend's devices (GPUs where there are)
    assert plain_platform((("cpu", 0), ("cpu", 1))) == "cpu"
    assert plain_platform((("gpu", 0), ("cpu", 0))) == "default"


def test_measure_times_a_zoo_step_in_a_fresh_process_without_the_rig_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"{HOST_DEVICE_FLAG}=2 {' '.join(SERIAL_CPU_FLAGS)}")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    result = plain_jit.measure(_graph_file(tmp_path, "tiny", {"program": TINY_MLP}), "cpu", steps=4, warmup=1,
                               timeout_s=120)
    assert result.available, result.why
    assert len(result.times_us) == 4 and all(t > 0 for t in result.times_us)
    assert result.device.startswith("cpu:0 (") and result.program == "zoo program mlp"


def test_a_started_child_times_the_step_again_in_the_same_process(tmp_path):
    with plain_jit.start(_graph_file(tmp_path, "tiny", {"program": TINY_MLP}), "cpu", steps=3, warmup=1,
                         timeout_s=120) as child:
        assert child.first.available, child.first.why
        pid = child._proc.pid
        again = child.again()
        assert again.available and len(again.times_us) == 3 and again.device == child.first.device
        assert child._proc.pid == pid  # no second process
    assert child._proc is None and child.again().why == "the fresh process has ended"
    with plain_jit.start(_graph_file(tmp_path, "bare"), "cpu", timeout_s=60) as unavailable:
        assert not unavailable.first.available and unavailable.again() is unavailable.first  # not asked again


def test_measure_times_an_exported_step(tmp_path):
    import jax

    from tests.helpers.programs import mlp_step
    from simulator.tracing.export import export_path, export_program
    from simulator.tracing.trace import trace

    step, *args = mlp_step()
    traced = trace(step, *args)
    path = tmp_path / "exp.json"
    save_graph(traced.graph, path)
    export_program(traced, traced.graph, export_path(path))
    result = plain_jit.measure(path, "cpu", steps=3, warmup=1, timeout_s=120)
    assert result.available, result.why
    assert result.program == "exported program exp.export.zip (its units in one jax.jit)"
    del jax


def test_a_graph_without_program_is_unavailable_not_an_error(tmp_path):
    result = plain_jit.measure(_graph_file(tmp_path, "bare"), "cpu", steps=2, timeout_s=60)
    assert not result.available and "no zoo program" in result.why
    assert not plain_jit.measure(None).available
    line = plain_line([result], "kept placement (etf)", timing_of([1000.0]))
    assert line.endswith(f"unavailable ({result.why})") and "\n" not in line


def test_a_child_past_its_time_limit_or_failing_is_unavailable(tmp_path):
    slow = plain_jit.measure(_graph_file(tmp_path, "tiny", {"program": TINY_MLP}), "cpu", timeout_s=0.05)
    assert not slow.available and slow.why == "it ran past its 0.05 s time limit"
    bad = plain_jit.measure(_graph_file(tmp_path, "bad", {"program": {"kind": "nope"}}), "cpu", timeout_s=60)
    assert not bad.available and bad.why.startswith("the fresh process failed: ") and "unknown program" in bad.why
    crashed = parse_child(-11, "", "Fatal Python error: Segmentation fault\n")
    assert crashed.why == "the fresh process failed: Fatal Python error: Segmentation fault"
    assert parse_child(0, "not json", "").why == "the fresh process failed: exit status 0, no output"


def test_bad_inputs_are_one_line(tmp_path, capsys):
    with pytest.raises(InputError):
        plain_jit.measure(tmp_path / "g.json", steps=0)
    with pytest.raises(InputError):
        plain_jit.measure(tmp_path / "g.json", timeout_s=0)
    assert plain_jit.main([str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simulator.hardware.plain_jit: error: ") and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as e:
        plain_jit.main([str(tmp_path / "g.json"), "--steps", "0"])
    assert e.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_plain_line_combines_runs_and_compares_the_kept_placement():
    runs = [PlainJit((900.0, 1000.0, 1100.0), "cpu:0 (2 cores)", "zoo program nmt"),
            PlainJit((1000.0, 1100.0, 1200.0), "cpu:0 (2 cores)", "zoo program nmt")]
    assert combined(runs).times_us == runs[0].times_us + runs[1].times_us
    line = plain_line(runs, "kept placement (etf, fresh steps)", timing_of([2000.0, 2100.0, 2200.0]))
    assert line.startswith("plain jax.jit of the step (default device and threading, a fresh process: what you "
                           "run without placeto): 1.050 ms [")
    assert "on cpu:0 (2 cores), zoo program nmt, 6 steps in 2 runs (before and after the placements: medians " \
           "1.000, 1.100 ms)" in line
    assert line.endswith("; kept placement (etf, fresh steps): 2.100 ms = 0.50x plain jit's speed")
    one = plain_line(runs[:1] + [PlainJit(why="it ran past its 300 s time limit")], "x", timing_of([500.0]))
    assert "runs" not in one and one.endswith("x: 0.500 ms = 2.00x plain jit's speed")
    assert "a test rig" in rig_line() and "the single device there is one core, the rig's control" in rig_line()
