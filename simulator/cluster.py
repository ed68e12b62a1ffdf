"""Devices, memory capacities and the interconnect; presets and the cluster file format.

Cluster file::

    {"format": "placeto-cluster", "version": 1, "name": "placeto-k80",
     "devices": [{"name": "/gpu:0", "kind": "k80", "memory_bytes": 12000000000}, ...],
     "delta1_us": 5.7, "delta2_us": 25.0, "bandwidth_bytes_per_us": 7600.0}
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from simulator.errors import InputError
from simulator.io import PathLike, read_json, write_json
from simulator.limits import MAX_BANDWIDTH, MAX_BYTES, MAX_DELTA_US, MAX_DEVICES, MIN_BANDWIDTH, number

FORMAT = "placeto-cluster"
VERSION = 1
GB = 10**9


@dataclasses.dataclass(frozen=True)
class Device:
    """One device. kind selects the node costs the simulator uses (e.g. "k80", "cpu")."""

    name: str
    kind: str
    memory_bytes: float  # capacity; placements above it are reported out of memory

    def __post_init__(self):
        for field in ("name", "kind"):
            if not isinstance(getattr(self, field), str):
                raise InputError(f"device {self.name!r}: field {field!r} must be a string")
        object.__setattr__(self, "memory_bytes", number(self.memory_bytes, f"device {self.name!r}: field "
                                                                           f"'memory_bytes'", 0.0, MAX_BYTES, "bytes"))


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Devices plus the interconnect model of the Placeto simulator.

    Attributes:
      delta1_us: idle time of a device after each op of non-zero cost (dispatch overhead), microseconds.
      delta2_us: time the sending bus stays busy after each transfer, microseconds.
      bandwidth_bytes_per_us: transfer bandwidth of each device's outgoing bus, bytes per microsecond.
      source: the file the cluster was read from, for error messages (None for presets).

    Limits (simulator.limits): delta1 and delta2 in [0, 1e9] us, bandwidth in [1e-3, 1e15] bytes/us,
    memory in [0, 1e18] bytes, 1 to 1024 devices.
    """

    name: str
    devices: tuple[Device, ...]
    delta1_us: float
    delta2_us: float
    bandwidth_bytes_per_us: float
    source: str | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not self.devices:
            raise InputError(f"cluster {self.name!r}: field 'devices': no devices")
        if len(self.devices) > MAX_DEVICES:
            raise InputError(f"cluster {self.name!r}: field 'devices': {len(self.devices)} devices, more than "
                             f"{MAX_DEVICES}")
        for field, lo, hi, unit in (("delta1_us", 0.0, MAX_DELTA_US, "us"), ("delta2_us", 0.0, MAX_DELTA_US, "us"),
                                    ("bandwidth_bytes_per_us", MIN_BANDWIDTH, MAX_BANDWIDTH, "bytes/us")):
            object.__setattr__(self, field, number(getattr(self, field), f"cluster {self.name!r}: field {field!r}",
                                                   lo, hi, unit))
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            raise InputError(f"cluster {self.name!r}: field 'devices': duplicate device names")

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(d.kind for d in self.devices)

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    @property
    def memory(self) -> tuple[float, ...]:
        return tuple(d.memory_bytes for d in self.devices)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "name": self.name,
                "devices": [dataclasses.asdict(d) for d in self.devices],
                "delta1_us": self.delta1_us, "delta2_us": self.delta2_us,
                "bandwidth_bytes_per_us": self.bandwidth_bytes_per_us}


def _k80(n: int) -> Cluster:
    """The published Placeto simulator's parameters for n K80 GPUs."""
    return Cluster(
        name="placeto-k80",
        devices=tuple(Device(f"/gpu:{i}", "k80", 12 * GB) for i in range(n)),
        delta1_us=5.7, delta2_us=25.0, bandwidth_bytes_per_us=7600.0,
    )


def _k80_cpu(n: int) -> Cluster:
    """A host CPU (device 0) plus n-1 K80 GPUs, as in the 2017 paper's single-CPU/single-GPU baselines."""
    gpus = _k80(n - 1).devices if n > 1 else ()
    return Cluster(name="placeto-k80-cpu", devices=(Device("/cpu:0", "cpu", 64 * GB),) + gpus,
                   delta1_us=5.7, delta2_us=25.0, bandwidth_bytes_per_us=7600.0)


PRESETS: dict[str, Callable[[int], Cluster]] = {"placeto-k80": _k80, "placeto-k80-cpu": _k80_cpu}


def cluster_preset(name: str, n_devices: int) -> Cluster:
    """A named preset with `n_devices` devices (e.g. cluster_preset("placeto-k80", 4))."""
    if name not in PRESETS:
        raise InputError(f"unknown cluster preset {name!r} (known: {', '.join(PRESETS)})")
    if isinstance(n_devices, bool) or not isinstance(n_devices, int) or not 1 <= n_devices <= MAX_DEVICES:
        raise InputError(f"cluster preset {name!r}: device count must be an integer in [1, {MAX_DEVICES}], "
                         f"got {n_devices!r}")
    return PRESETS[name](n_devices)


def cluster_from_dict(d: Any, source: str | None = None) -> Cluster:
    """Parse a cluster dictionary; errors name `source` and the field."""
    try:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise InputError(f"field 'format': expected {FORMAT!r}")
        if d.get("version") != VERSION:
            raise InputError(f"field 'version': unsupported version {d.get('version')!r}")
        for field in ("name", "devices", "delta1_us", "delta2_us", "bandwidth_bytes_per_us"):
            if field not in d:
                raise InputError(f"missing field {field!r}")
        if not isinstance(d["name"], str):
            raise InputError("field 'name' must be a string")
        if not isinstance(d["devices"], list):
            raise InputError("field 'devices' must be a list")
        devices = []
        for i, dev in enumerate(d["devices"]):
            if not isinstance(dev, dict):
                raise InputError(f"device #{i}: expected an object")
            for field in ("name", "kind", "memory_bytes"):
                if field not in dev:
                    raise InputError(f"device #{i}: missing field {field!r}")
            devices.append(Device(dev["name"], dev["kind"], dev["memory_bytes"]))
        return Cluster(d["name"], tuple(devices), d["delta1_us"], d["delta2_us"], d["bandwidth_bytes_per_us"],
                       source=source)
    except InputError as e:
        raise e.with_source(source) if source else e


def load_cluster(path: PathLike) -> Cluster:
    return cluster_from_dict(read_json(path), str(path))


def save_cluster(cluster: Cluster, path: PathLike) -> None:
    write_json(path, cluster.to_dict())
