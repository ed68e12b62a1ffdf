"""Local JAX devices: device specs, host CPU devices, one core each.

JAX's CPU backend exposes one device unless `--xla_force_host_platform_device_count` (`HOST_DEVICE_FLAG`) is in
XLA_FLAGS when the backend starts; those host devices are labels over one shared thread pool
(`simulator.hardware.dispatch` explains what that means for placed execution). `SERIAL_CPU_FLAGS` switch off XLA's
intra-op threading so a task uses one core, and D host devices can behave like D single-core devices when
D <= free cores.

A device spec (`parse_device_spec`, the CLI's --devices) is a count n (the first n devices of the default
backend) or a list of `platform:index` entries, e.g. "gpu:0,cpu:0" (a GPU and the host CPU: heterogeneous) or
"cpu:0,cpu:1" (two host devices standing in); "cuda" and "rocm" are aliases of "gpu".

`ensure_host_devices(spec)` sets both flags before JAX starts (scripts and the CLI call it first; a list asks for
as many host devices as its largest cpu index needs), and only checks the devices once it has; `local_devices(spec)`
resolves the spec to JAX devices (`jax.devices(platform)[index]` for a list). This module must not import jax at
import time: importing it is how callers get to set XLA_FLAGS before jax is imported.

Host devices are bounded (`max_host_devices()`: 4 per core, at least 8): each is a label over the same cores,
and XLA allocates memory per device as the backend starts (docs/hardware.md). A cpu index at or past the bound is
refused when the spec is parsed, a count past it when the host devices are asked for (`ensure_host_devices`; a
count may also name GPUs or simulated devices, up to 1024).
"""

from __future__ import annotations

import os
import sys

from simulator.model.errors import InputError

HOST_DEVICE_FLAG = "--xla_force_host_platform_device_count"
PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}  # spelling -> jax platform
MAX_SPEC_DEVICES = 1024  # as simulator.model.limits.MAX_DEVICES
HOST_DEVICES_PER_CORE, MIN_HOST_DEVICES = 4, 8  # max_host_devices()

DeviceSpec = int | tuple[tuple[str, int], ...]  # a count, or (platform, index) per device


def max_host_devices() -> int:
    """The most host CPU devices a command may ask XLA for.

    4 per core, at least 8.
    """
    return max(MIN_HOST_DEVICES, HOST_DEVICES_PER_CORE * (os.cpu_count() or 1))


def _digits(text: str) -> bool:
    """Whether `text` is ASCII digits only.

    str.isdigit also takes '¹' or '٣', which int() refuses or reads unexpectedly.
    """
    return text.isascii() and text.isdigit()


def parse_device_spec(text: str | int) -> int | tuple[tuple[str, int], ...]:
    """Parses a device count ("2") or a comma list of platform:index entries.

    "gpu:0,cpu:0" -> (("gpu", 0), ("cpu", 0)).

    Raises:
      InputError: (one line naming the offending entry) an unknown platform, a missing or non-numeric index, an
        empty entry, a device listed twice, a count outside [1, 1024], or a cpu index at or past max_host_devices().
    """
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise InputError(f"--devices: expected a count or platform:index list, got {text!r}")
    words = text.strip()
    if _digits(words) and len(words) <= 6:
        if not 1 <= int(words) <= MAX_SPEC_DEVICES:
            raise InputError(f"--devices: a count must be in [1, {MAX_SPEC_DEVICES}], got {int(words)}")
        return int(words)
    entries: list[tuple[str, int]] = []
    for k, part in enumerate(words.split(",")):
        platform, colon, index = part.strip().partition(":")
        shown = part.strip()[:40]
        if not colon or not _digits(index) or len(index) > 6:
            raise InputError(f"--devices: entry {k} {shown!r} is not platform:index (e.g. gpu:0,cpu:0) nor a "
                             f"device count")
        if platform.lower() not in PLATFORMS:
            raise InputError(f"--devices: entry {k} {shown!r}: unknown platform {platform[:20]!r} (known: "
                             f"{', '.join(PLATFORMS)})")
        entry = (PLATFORMS[platform.lower()], int(index))
        if entry[0] == "cpu" and entry[1] >= max_host_devices():
            raise InputError(f"--devices: entry {k} {shown!r}: at most {max_host_devices()} host CPU devices here "
                             f"(cpu:0 to cpu:{max_host_devices() - 1}: {HOST_DEVICES_PER_CORE} per core, at least "
                             f"{MIN_HOST_DEVICES})")
        if entry in entries:
            raise InputError(f"--devices: entry {k} {shown!r} names {entry[0]}:{entry[1]} a second time")
        entries.append(entry)
    if len(entries) > MAX_SPEC_DEVICES:
        raise InputError(f"--devices: at most {MAX_SPEC_DEVICES} devices, got {len(entries)}")
    return tuple(entries)


def device_count(spec: int | tuple) -> int:
    """How many devices a (parsed) device spec names."""
    return spec if isinstance(spec, int) else len(spec)


def spec_text(spec: int | tuple) -> str:
    """The spec as the CLI takes it: "2", or "gpu:0,cpu:0"."""
    return str(spec) if isinstance(spec, int) else ",".join(f"{p}:{i}" for p, i in spec)


def default_local_spec(host_devices: int = 2) -> int | tuple[tuple[str, int], ...]:
    """Every local GPU as ("gpu", i), else `host_devices` (a count).

    Found without starting JAX (which would be too late for XLA_FLAGS): a CUDA plugin of jax must be installed,
    JAX_PLATFORMS (when set) must allow it, and `nvidia-smi -L` lists the GPUs (CUDA_VISIBLE_DEVICES, when set,
    limits how many count).
    """
    import importlib.util
    import shutil
    import subprocess

    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms and not {"cuda", "gpu"} & {p.strip() for p in platforms.split(",")}:
        return host_devices
    if not any(importlib.util.find_spec(m) is not None for m in ("jax_cuda12_plugin", "jax_cuda13_plugin")):
        return host_devices
    if shutil.which("nvidia-smi") is None:
        return host_devices
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20,
                                check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return host_devices
    n = sum(line.startswith("GPU ") for line in listed.splitlines())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        n = min(n, len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"]))
    return tuple(("gpu", i) for i in range(n)) if n else host_devices


def _host_count(spec: int | tuple) -> int:
    """Host CPU devices `spec` needs.

    n for a count (host devices on a CPU-only machine), else the largest cpu index + 1 (at least 1).
    """
    if isinstance(spec, int):
        return spec
    return max((i + 1 for p, i in spec if p == "cpu"), default=1)


# one core per task; XLA flags only: XLA aborts on an unknown "--" flag, ignores a later word without "--" (as it
# did "intra_op_parallelism_threads=1", no XLA flag) and reads a first one as a file of flags
SERIAL_CPU_FLAGS = ("--xla_cpu_multi_thread_eigen=false",)


def ensure_host_devices(spec: int | tuple | str, serial: bool = True) -> None:
    """Makes `spec`'s local JAX devices available; call before jax.

    `spec` is a count n, or a (parsed or text) platform:index list. If jax is not imported yet, sets XLA_FLAGS so
    the CPU backend has (at least) n host devices (for a list: the largest cpu index + 1) and, with `serial`,
    single-threaded ops (`SERIAL_CPU_FLAGS`). If jax is imported but no backend has started yet, the device count is
    set through `jax_num_cpu_devices` (the threading flags may then come too late). Once a backend has started, it
    only checks.

    Raises:
      InputError: more host devices than max_host_devices(), or (jax started) a device of the spec is missing
        (`local_devices`).
    """
    if isinstance(spec, str):
        spec = parse_device_spec(spec)
    if isinstance(spec, bool) or not isinstance(spec, (int, tuple)) or (isinstance(spec, int) and spec < 1):
        raise InputError(f"device count must be a positive integer, got {spec!r}")
    n = _host_count(spec)
    if n > max_host_devices():
        raise InputError(f"--devices {spec_text(spec)}: at most {max_host_devices()} host CPU devices here "
                         f"({HOST_DEVICES_PER_CORE} per core, at least {MIN_HOST_DEVICES})")
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
    local_devices(spec)


def _with_flags(flags: str, n: int, serial: bool) -> str:
    words = flags.split()
    count = [w for w in words if w.startswith(HOST_DEVICE_FLAG + "=")]
    have = max((int(w.split("=", 1)[1]) for w in count if w.split("=", 1)[1].isdigit()), default=0)
    words = [w for w in words if w not in count] + [f"{HOST_DEVICE_FLAG}={max(n, have)}"]
    if serial:
        words += [f for f in SERIAL_CPU_FLAGS if f.split("=")[0] not in {w.split("=")[0] for w in words}]
    return " ".join(words)


def local_devices(spec: int | tuple | str) -> list:
    """The JAX devices of a device spec.

    For a count n, the first n devices of the default backend; for a platform:index list,
    `jax.devices(platform)[index]` each, across backends.

    Raises:
      InputError: a device of the spec is missing.
    """
    import jax

    if isinstance(spec, str):
        spec = parse_device_spec(spec)
    if isinstance(spec, int):
        devices = jax.devices()
        if spec > len(devices):
            raise InputError(f"{spec} devices requested but JAX has {len(devices)} ({devices[0].platform}); on a "
                             f"CPU set XLA_FLAGS={HOST_DEVICE_FLAG}={spec} before JAX starts (the CLI does)")
        return devices[:spec]
    out = []
    for platform, index in spec:
        try:
            devices = jax.devices(platform)
        except RuntimeError:
            have = sorted({d.platform for d in jax.devices()} | {"cpu"})
            raise InputError(f"--devices {platform}:{index}: JAX has no {platform!r} backend here (it has: "
                             f"{', '.join(have)})") from None
        if index >= len(devices):
            hint = (f"; set XLA_FLAGS={HOST_DEVICE_FLAG}={index + 1} before JAX starts (the CLI does)"
                    if platform == "cpu" else "")
            raise InputError(f"--devices {platform}:{index}: JAX has {len(devices)} {platform} device(s){hint}")
        out.append(devices[index])
    return out


def kind_of(device) -> str:
    """The cost kind of measurements made on a JAX device, e.g. "local-h200".

    "local-cpu" for the host CPU, else "local-" + the accelerator's model from its `device_kind` ("NVIDIA H200" ->
    "local-h200", "NVIDIA H100 80GB HBM3" -> "local-h100", "Tesla V100-SXM2-16GB" -> "local-v100",
    "NVIDIA GeForce RTX 4090" -> "local-rtx4090", "TPU v4" -> "local-tpu-v4"). The "local-" prefix keeps measured
    costs apart from the analytic ones of simulator.model.costs (kinds "h100", "a100", ...).
    """
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
