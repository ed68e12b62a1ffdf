"""Local JAX devices: how many host "devices" the CPU backend has, and how many cores each task may use.

JAX's CPU backend exposes one device unless `--xla_force_host_platform_device_count` (`HOST_DEVICE_FLAG`) is in
XLA_FLAGS when the backend starts; those host devices are labels over one shared thread pool
(`simulator.hardware` explains what that means for placed execution). `SERIAL_CPU_FLAGS` switch off XLA's
intra-op threading so a task uses one core, and D host devices can behave like D single-core devices when
D <= free cores.

`ensure_host_devices(n)` sets both before JAX starts (scripts and the CLI call it first), and only checks the
device count once it has; `local_devices(n)` returns the first n devices. This module must not import jax at
import time: importing it is how callers get to set XLA_FLAGS before jax is imported.
"""

from __future__ import annotations

import os
import sys

from simulator.errors import InputError

HOST_DEVICE_FLAG = "--xla_force_host_platform_device_count"
SERIAL_CPU_FLAGS = ("--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1")  # one core per task


def ensure_host_devices(n: int, serial: bool = True) -> None:
    """Make `n` local JAX devices available; call before anything imports jax.

    If jax is not imported yet, sets XLA_FLAGS so the CPU backend has (at least) `n` host devices and, with
    `serial`, single-threaded ops (`SERIAL_CPU_FLAGS`). If jax is already initialised, only checks: raises
    InputError when it has fewer than `n` devices. (If jax is imported but no backend has started yet, the
    device count is set through `jax_num_cpu_devices`; the threading flags may then come too late.)
    """
    if not isinstance(n, int) or n < 1:
        raise InputError(f"device count must be a positive integer, got {n!r}")
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = _with_flags(os.environ.get("XLA_FLAGS", ""), n, serial)
        return
    import jax

    try:
        from jax._src import xla_bridge

        started = xla_bridge.backends_are_initialized()
    except (ImportError, AttributeError):
        started = True
    if not started:
        os.environ["XLA_FLAGS"] = _with_flags(os.environ.get("XLA_FLAGS", ""), n, serial)
        if jax.config.jax_num_cpu_devices < n:
            jax.config.update("jax_num_cpu_devices", n)
    local_devices(n)


def _with_flags(flags: str, n: int, serial: bool) -> str:
    words = flags.split()
    count = [w for w in words if w.startswith(HOST_DEVICE_FLAG + "=")]
    have = max((int(w.split("=", 1)[1]) for w in count if w.split("=", 1)[1].isdigit()), default=0)
    words = [w for w in words if w not in count] + [f"{HOST_DEVICE_FLAG}={max(n, have)}"]
    if serial:
        words += [f for f in SERIAL_CPU_FLAGS if f.split("=")[0] not in {w.split("=")[0] for w in words}]
    return " ".join(words)


def local_devices(n: int) -> list:
    """The first `n` devices of the default JAX backend; InputError if there are fewer."""
    import jax

    devices = jax.devices()
    if n > len(devices):
        raise InputError(f"{n} devices requested but JAX has {len(devices)} ({devices[0].platform}); on a CPU "
                         f"set XLA_FLAGS={HOST_DEVICE_FLAG}={n} before JAX starts (the CLI does)")
    return devices[:n]


def kind_of(device) -> str:
    """The cost kind of measurements made on a JAX device: "local-cpu" for the host CPU, else "local-" + the
    accelerator's model from its `device_kind` ("NVIDIA H200" -> "local-h200", "NVIDIA H100 80GB HBM3" ->
    "local-h100", "Tesla V100-SXM2-16GB" -> "local-v100", "NVIDIA GeForce RTX 4090" -> "local-rtx4090", "TPU v4" -> "local-tpu-v4"). The "local-" prefix keeps
    measured costs apart from the analytic ones of simulator.costs (kinds "h100", "a100", ...)."""
    import re

    platform = getattr(device, "platform", "cpu")
    if platform == "cpu":
        return "local-cpu"
    words = re.sub(r"[^a-z0-9]+", " ", str(getattr(device, "device_kind", platform)).lower()).split()
    words = [w for w in words if w not in ("nvidia", "tesla", "geforce", "amd", "instinct", "radeon")]
    if not words:
        return f"local-{platform}"
    if words[0] == "tpu" and len(words) > 1:
        return f"local-tpu-{words[1]}"
    if not any(c.isdigit() for c in words[0]) and len(words) > 1 and words[1][0].isdigit():
        return f"local-{words[0]}{words[1]}"  # "RTX 4090" -> "local-rtx4090"
    return f"local-{words[0]}"
