"""simulator.hardware.devices: host device flags, device specs, and the host device count before and after JAX
starts."""

import argparse
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from placeto.cli.calibrate import add_calibrate_arguments
from simulator.model.errors import InputError
from simulator.hardware.devices import HOST_DEVICE_FLAG, SERIAL_CPU_FLAGS, _with_flags

ROOT = Path(__file__).resolve().parents[3]


def test_host_device_flags():
    flags = _with_flags("--foo=1", 4, serial=True).split()
    assert flags[0] == "--foo=1" and f"{HOST_DEVICE_FLAG}=4" in flags
    assert all(f in flags for f in SERIAL_CPU_FLAGS)
    assert f"{HOST_DEVICE_FLAG}=8" in _with_flags(f"{HOST_DEVICE_FLAG}=8", 2, serial=False).split()
    kept = _with_flags("--xla_cpu_multi_thread_eigen=true", 2, serial=True).split()
    assert kept.count("--xla_cpu_multi_thread_eigen=true") == 1 and "--xla_cpu_multi_thread_eigen=false" not in kept


def test_serial_flags_are_flags_xla_knows():
    """XLA aborts on an unknown "--" flag and ignores a later word without "--" (as it did the old
    "intra_op_parallelism_threads=1"): every serial flag is an XLA flag a fresh JAX starts with."""
    assert all(f.startswith("--xla_") for f in SERIAL_CPU_FLAGS)
    env = dict(os.environ, XLA_FLAGS=" ".join(SERIAL_CPU_FLAGS), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; print(float(jnp.ones(2).sum()))"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "2.0", proc.stderr[-500:]


def test_ensure_host_devices_before_and_after_jax_starts():
    code = textwrap.dedent('''
        import jax  # imported, but no backend started yet
        from simulator.model.errors import InputError
        from simulator.hardware.devices import ensure_host_devices
        ensure_host_devices(3)
        print(len(jax.devices()))
        try:
            ensure_host_devices(4)
        except InputError as e:
            print(e)
    ''')
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "3" and "4 devices requested but JAX has 3" in lines[1]


def test_parse_device_spec():
    from simulator.hardware.devices import parse_device_spec, spec_text

    assert parse_device_spec("2") == 2 and parse_device_spec(3) == 3
    assert parse_device_spec("gpu:0,cpu:0") == (("gpu", 0), ("cpu", 0))
    assert parse_device_spec(" CUDA:1 , cpu:3") == (("gpu", 1), ("cpu", 3))
    assert spec_text(parse_device_spec("cuda:0,cpu:0")) == "gpu:0,cpu:0"
    for bad, says in (("0", "count must be in [1, 1024]"), ("gpu", "entry 0 'gpu' is not platform:index"),
                      ("cpu:0,", "entry 1 '' is not platform:index"), ("cpu:0,cpu:x", "entry 1 'cpu:x'"),
                      ("npu:0", "unknown platform 'npu'"), ("cpu:0,cpu:0", "entry 1 'cpu:0' names cpu:0 a second"),
                      ("cpu:-1", "entry 0 'cpu:-1' is not platform:index")):
        with pytest.raises(InputError, match=re.escape(says)):
            parse_device_spec(bad)
    p = argparse.ArgumentParser()
    add_calibrate_arguments(p)
    assert p.parse_args(["--out", "c.json", "--devices", "cpu:0,cpu:1"]).devices == (("cpu", 0), ("cpu", 1))


def test_default_local_spec_without_gpus_is_two_host_devices(monkeypatch):
    from simulator.hardware.devices import default_local_spec

    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert default_local_spec() == 2 and default_local_spec(3) == 3
