"""Clusters: devices, memory, interconnect, presets, file format.

Cluster file::

    {"format": "placeto-cluster", "version": 1, "name": "placeto-k80",
     "devices": [{"name": "/gpu:0", "kind": "k80", "memory_bytes": 12000000000}, ...],
     "delta1_us": 5.7, "delta2_us": 25.0, "bandwidth_bytes_per_us": 7600.0}

Optional (absent: zero, the published Placeto simulator's model)::

     "latency_us": 20.0,                        # every transfer arrives this long after it leaves the bus
     "hosts": [{"name": "host0", "dispatch_us": 15.0, "transfer_us": 40.0}],
     "devices": [{..., "host": "host0"}, ...]   # with "hosts": every device names its host

A host is the CPU time its devices' dispatch threads share (on one machine, one Python process: they take turns
on the interpreter lock): each op of a device costs its host `dispatch_us` and each producer whose outputs a
device sends `transfer_us` (once, with its first output), served one job at a time in the order asked (see
simulator.engine.reference for the exact rules).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import numpy as np

from simulator.model.errors import InputError
from simulator.model.io import PathLike, check_file_kind, read_json, write_json
from simulator.model.limits import (MAX_BANDWIDTH, MAX_BYTES, MAX_DELTA_US, MAX_DEVICES, MIN_BANDWIDTH, number,
                              short_repr)

FORMAT = "placeto-cluster"
VERSION = 1
GB = 10**9


@dataclasses.dataclass(frozen=True)
class Device:
    """One device; its `kind` selects the node costs the simulator uses."""

    name: str
    kind: str  # e.g. "k80", "cpu"
    memory_bytes: float  # capacity, bytes; placements above it are reported out of memory
    host: str | None = None  # name of the cluster's Host whose time this device's dispatch and sends take

    def __post_init__(self):
        for field in ("name", "kind"):
            if not isinstance(getattr(self, field), str):
                raise InputError(f"device {self.name!r}: field {field!r} must be a string")
        if self.host is not None and not isinstance(self.host, str):
            raise InputError(f"device {self.name!r}: field 'host' must be a string")
        object.__setattr__(self, "memory_bytes", number(self.memory_bytes, f"device {self.name!r}: field "
                                                                           f"'memory_bytes'", 0.0, MAX_BYTES, "bytes",
                                                        lo_open=True))


@dataclasses.dataclass(frozen=True)
class Host:
    """CPU time shared by the devices that name this host.

    Their dispatch threads take turns on it.

    Attributes:
      name: referred to by Device.host.
      dispatch_us: host time to dispatch each op of its devices, microseconds (the op starts after it).
      transfer_us: host time to start the transfers of each producer its devices send, microseconds: the
        first of a producer's outputs that its bus sends leaves after it, the producer's other outputs leave
        without a host job (simulator.hardware.dispatch sends all of a producer's values for a device in one call).
    """

    name: str
    dispatch_us: float = 0.0
    transfer_us: float = 0.0

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise InputError(f"host {short_repr(self.name)}: field 'name' must be a string")
        for field in ("dispatch_us", "transfer_us"):
            object.__setattr__(self, field, number(getattr(self, field), f"host {self.name!r}: field {field!r}",
                                                   0.0, MAX_DELTA_US, "us"))


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Devices plus the interconnect model of the Placeto simulator.

    Attributes:
      delta1_us: idle time of a device after each op of non-zero cost (dispatch overhead), microseconds.
      delta2_us: time the sending bus stays busy after each transfer, microseconds.
      bandwidth_bytes_per_us: transfer bandwidth of each device's outgoing bus, bytes per microsecond.
      latency_us: time from a transfer leaving the sending bus to its arrival, microseconds (not bus time).
      hosts: the CPU-time resources the devices' dispatch and sends share (empty: none, no host costs).
      source: the file the cluster was read from, for error messages (None for presets).

    Limits (simulator.model.limits): delta1, delta2, latency and host times in [0, 1e9] us, bandwidth in
    [1e-3, 1e15] bytes/us, memory in [0, 1e18] bytes, 1 to 1024 devices.
    """

    name: str
    devices: tuple[Device, ...]
    delta1_us: float
    delta2_us: float
    bandwidth_bytes_per_us: float
    latency_us: float = 0.0
    hosts: tuple[Host, ...] = ()
    source: str | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if not self.devices:
            raise InputError(f"cluster {self.name!r}: field 'devices': no devices")
        if len(self.devices) > MAX_DEVICES:
            raise InputError(f"cluster {self.name!r}: field 'devices': {len(self.devices)} devices, more than "
                             f"{MAX_DEVICES}")
        for field, lo, hi, unit in (("delta1_us", 0.0, MAX_DELTA_US, "us"), ("delta2_us", 0.0, MAX_DELTA_US, "us"),
                                    ("bandwidth_bytes_per_us", MIN_BANDWIDTH, MAX_BANDWIDTH, "bytes/us"),
                                    ("latency_us", 0.0, MAX_DELTA_US, "us")):
            object.__setattr__(self, field, number(getattr(self, field), f"cluster {self.name!r}: field {field!r}",
                                                   lo, hi, unit))
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            raise InputError(f"cluster {self.name!r}: field 'devices': duplicate device names")
        object.__setattr__(self, "hosts", tuple(self.hosts))
        _check_hosts(self)

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

    @functools.cached_property
    def capacity(self) -> np.ndarray:
        """float64[D] memory capacity per device, bytes.

        Read-only: one array shared by every result.
        """
        a = np.asarray(self.memory, dtype=np.float64)
        a.flags.writeable = False
        return a

    @functools.cached_property
    def host_model(self) -> HostModel:
        """The hosts as per-device arrays for the simulators."""
        if not self.hosts:  # every device its own host, at no cost
            zeros = np.zeros(self.n_devices)
            return HostModel(np.arange(self.n_devices, dtype=np.int64), zeros, zeros, self.n_devices)
        index = {h.name: k for k, h in enumerate(self.hosts)}
        of = np.array([index[d.host] for d in self.devices], dtype=np.int64)
        return HostModel(of, np.array([self.hosts[k].dispatch_us for k in of]),
                         np.array([self.hosts[k].transfer_us for k in of]), len(self.hosts))

    def to_dict(self) -> dict[str, Any]:
        """The cluster file's dictionary.

        The optional fields only when set, so a preset's file is unchanged.
        """
        d = {"format": FORMAT, "version": VERSION, "name": self.name,
             "devices": [{k: v for k, v in dataclasses.asdict(dev).items() if k != "host" or v is not None}
                         for dev in self.devices],
             "delta1_us": self.delta1_us, "delta2_us": self.delta2_us,
             "bandwidth_bytes_per_us": self.bandwidth_bytes_per_us}
        if self.latency_us:
            d["latency_us"] = self.latency_us
        if self.hosts:
            d["hosts"] = [dataclasses.asdict(h) for h in self.hosts]
        return d


class HostModel(NamedTuple):
    """A cluster's hosts as per-device arrays (D devices, H hosts).

    Without hosts, each device is its own host, at no cost.
    """

    host: np.ndarray  # int64[D] host index of each device, in [0, H)
    dispatch_us: np.ndarray  # float64[D] host time per op dispatched on the device, microseconds
    transfer_us: np.ndarray  # float64[D] host time per producer whose outputs the device sends, microseconds
    n_hosts: int  # H


def _check_hosts(cluster: Cluster) -> None:
    """Check host names are unique and, if any, every device names one.

    Raises:
      InputError: naming the cluster and the device or field, otherwise.
    """
    where = f"cluster {cluster.name!r}"
    for h in cluster.hosts:
        if not isinstance(h, Host):
            raise InputError(f"{where}: field 'hosts': expected Host objects, got {short_repr(h)}")
    names = [h.name for h in cluster.hosts]
    if len(set(names)) != len(names):
        raise InputError(f"{where}: field 'hosts': duplicate host names")
    for dev in cluster.devices:
        if dev.host is None and names:
            raise InputError(f"{where}: device {dev.name!r}: missing field 'host' (the cluster has hosts: "
                             f"{', '.join(names)})")
        if dev.host is not None and dev.host not in names:
            raise InputError(f"{where}: device {dev.name!r}: field 'host': {dev.host!r} is not a host of the "
                             f"cluster ({', '.join(names) or 'it has none'})")


def _k80(n: int) -> Cluster:
    """The published Placeto simulator's parameters for n K80 GPUs."""
    return Cluster(
        name="placeto-k80",
        devices=tuple(Device(f"/gpu:{i}", "k80", 12 * GB) for i in range(n)),
        delta1_us=5.7, delta2_us=25.0, bandwidth_bytes_per_us=7600.0,
    )


def _k80_cpu(n: int) -> Cluster:
    """A host CPU (device 0) plus n-1 K80 GPUs.

    As in the 2017 paper's single-CPU/single-GPU baselines.
    """
    gpus = _k80(n - 1).devices if n > 1 else ()
    return Cluster(name="placeto-k80-cpu", devices=(Device("/cpu:0", "cpu", 64 * GB),) + gpus,
                   delta1_us=5.7, delta2_us=25.0, bandwidth_bytes_per_us=7600.0)


class MachineSpec(NamedTuple):
    """A machine people own: GPUs of one cost kind, and their links."""

    kind: str  # the graph cost kind of its GPUs (a key of simulator.model.costs.SPECS)
    memory_bytes: float  # per GPU, bytes
    link_gbs: float  # GPU <-> GPU bandwidth, one direction, GB/s
    host_link_gbs: float  # GPU <-> host CPU bandwidth, one direction, GB/s (the "-cpu" presets' bus)
    launch_us: float  # delta1, us: a GPU's idle time after each op (launch to launch, order of magnitude)
    transfer_us: float  # delta2, us: fixed cost of one transfer on the bus (a peer copy's launch)
    latency_us: float  # us: a transfer's flight time on the link
    source: str  # where the numbers come from


# Datasheet bandwidths (one direction: NVLink figures are quoted for both directions together, so halved);
# launch and transfer costs are orders of magnitude of what CUDA kernel launches and peer copies cost, not
# datasheet values (a jitted call's host floor, which stages pay once, not per op: docs/hardware.md).
MACHINES: dict[str, MachineSpec] = {
    # https://www.nvidia.com/en-us/data-center/h100/ : H100 SXM5 80 GB, NVLink 4 at 900 GB/s per GPU (both
    # directions), host PCIe Gen5 x16 at 128 GB/s (both directions).
    "h100-nvlink": MachineSpec("h100", 80 * GB, 450.0, 64.0, 4.0, 10.0, 2.0,
                               "NVIDIA H100 SXM5 datasheet: NVLink 900 GB/s, PCIe Gen5 128 GB/s"),
    # the same page, H100 PCIe 80 GB: no NVLink bridge assumed, peer copies over PCIe Gen5 x16 (64 GB/s one way)
    "h100-pcie": MachineSpec("h100-pcie", 80 * GB, 64.0, 64.0, 4.0, 10.0, 5.0,
                             "NVIDIA H100 PCIe datasheet: PCIe Gen5 128 GB/s (both directions), no NVLink"),
    # https://www.nvidia.com/en-us/data-center/h200/ : H200 SXM 141 GB, NVLink 900 GB/s, PCIe Gen5 128 GB/s
    "h200-nvlink": MachineSpec("h200", 141 * GB, 450.0, 64.0, 4.0, 10.0, 2.0,
                               "NVIDIA H200 SXM datasheet: NVLink 900 GB/s, PCIe Gen5 128 GB/s"),
    # https://www.nvidia.com/en-us/data-center/a100/ : A100 SXM4 40 GB, NVLink 3 at 600 GB/s (both directions),
    # PCIe Gen4 x16 at 64 GB/s (both directions)
    "a100-nvlink": MachineSpec("a100", 40 * GB, 300.0, 32.0, 5.0, 10.0, 2.0,
                               "NVIDIA A100 SXM4 datasheet: NVLink 600 GB/s, PCIe Gen4 64 GB/s"),
    # https://images.nvidia.com/content/technologies/volta/pdf/tesla-volta-v100-datasheet-letter-fnl-web.pdf :
    # V100 SXM2 16 GB, NVLink 2 at 300 GB/s (both directions), PCIe Gen3 x16 at 32 GB/s (both directions)
    "v100-nvlink": MachineSpec("v100", 16 * GB, 150.0, 16.0, 5.0, 10.0, 2.0,
                               "NVIDIA V100 SXM2 datasheet: NVLink 300 GB/s, PCIe Gen3 32 GB/s"),
}


def machine(name: str, n: int, with_cpu: bool = False) -> Cluster:
    """n GPUs of MACHINES[name] (with `with_cpu`: the CPU, n-1 GPUs).

    With `with_cpu`, device 0 is the host CPU (analytic kind "cpu", the machine's memory of 512 GB assumed) and
    every transfer goes over the host link (the model has one bandwidth).
    """
    spec = MACHINES[name]
    gpus = tuple(Device(f"/gpu:{i}", spec.kind, spec.memory_bytes) for i in range(n - 1 if with_cpu else n))
    devices = ((Device("/cpu:0", "cpu", 512 * GB),) + gpus) if with_cpu else gpus
    link = spec.host_link_gbs if with_cpu else spec.link_gbs
    return Cluster(name=name + ("-cpu" if with_cpu else ""), devices=devices, delta1_us=spec.launch_us,
                   delta2_us=spec.transfer_us, bandwidth_bytes_per_us=link * 1e3, latency_us=spec.latency_us)


PRESETS: dict[str, Callable[[int], Cluster]] = {"placeto-k80": _k80, "placeto-k80-cpu": _k80_cpu}
PRESETS.update({name: functools.partial(machine, name) for name in MACHINES})
PRESETS.update({f"{name}-cpu": functools.partial(machine, name, with_cpu=True) for name in MACHINES})


def cluster_preset(name: str, n_devices: int) -> Cluster:
    """A named preset with `n_devices` devices.

    E.g. cluster_preset("placeto-k80", 4).

    Raises:
      InputError: for a name not in PRESETS, or a device count outside [1, MAX_DEVICES].
    """
    if name not in PRESETS:
        raise InputError(f"unknown cluster preset {name!r} (known: {', '.join(PRESETS)})")
    if isinstance(n_devices, bool) or not isinstance(n_devices, int) or not 1 <= n_devices <= MAX_DEVICES:
        raise InputError(f"cluster preset {name!r}: device count must be an integer in [1, {MAX_DEVICES}], "
                         f"got {n_devices!r}")
    return PRESETS[name](n_devices)


def with_memory(cluster: Cluster, memory_bytes: float | None) -> Cluster:
    """`cluster` with every device's capacity `memory_bytes` (None: as it is).

    E.g. the memory-constrained tasks: a preset's costs and interconnect, smaller devices.

    Raises:
      InputError: a capacity that is not a number in (0, MAX_BYTES].
    """
    if memory_bytes is None:
        return cluster
    memory_bytes = number(memory_bytes, "memory per device", 0.0, MAX_BYTES, "bytes", lo_open=True)
    devices = tuple(dataclasses.replace(d, memory_bytes=memory_bytes) for d in cluster.devices)
    return dataclasses.replace(cluster, devices=devices)


class PresetSpec(NamedTuple):
    """A preset at any device count, with every device's capacity set (`with_memory`): one cluster per count."""

    name: str
    memory_bytes: float | None = None

    def at(self, n_devices: int) -> Cluster:
        return with_memory(cluster_preset(self.name, n_devices), self.memory_bytes)


def cluster_from_dict(d: Any, source: str | None = None) -> Cluster:
    """Parse and validate a cluster file's dictionary.

    Raises:
      InputError: naming `source` and the field.
    """
    try:
        check_file_kind(d, "cluster")
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
            devices.append(Device(dev["name"], dev["kind"], dev["memory_bytes"], dev.get("host")))
        return Cluster(d["name"], tuple(devices), d["delta1_us"], d["delta2_us"], d["bandwidth_bytes_per_us"],
                       d.get("latency_us", 0.0), _hosts_from_list(d.get("hosts", [])), source=source)
    except InputError as e:
        raise e.with_source(source) if source else e


def _hosts_from_list(hosts: Any) -> tuple[Host, ...]:
    """The "hosts" field of a cluster file, parsed.

    A list of {"name", "dispatch_us", "transfer_us"} objects; other fields are refused (InputError).
    """
    if not isinstance(hosts, list):
        raise InputError("field 'hosts' must be a list")
    out = []
    for i, h in enumerate(hosts):
        if not isinstance(h, dict):
            raise InputError(f"host #{i}: expected an object")
        if "name" not in h:
            raise InputError(f"host #{i}: missing field 'name'")
        unknown = sorted(set(h) - {"name", "dispatch_us", "transfer_us"})
        if unknown:
            raise InputError(f"host {short_repr(h['name'])}: unknown field {unknown[0]!r}")
        out.append(Host(h["name"], h.get("dispatch_us", 0.0), h.get("transfer_us", 0.0)))
    return tuple(out)


def load_cluster(path: PathLike) -> Cluster:
    return cluster_from_dict(read_json(path), str(path))


def save_cluster(cluster: Cluster, path: PathLike) -> None:
    write_json(path, cluster.to_dict())


def describe_devices(cluster: Cluster) -> str:
    """The devices in a few words, e.g. "2x local-cpu (64.0 GB each)".

    A mixed cluster is described device by device: "/gpu:0 local-h200 (143.8 GB), /cpu:0 local-cpu (270.0 GB)".
    """
    if len(set(cluster.kinds)) == 1 and len(set(cluster.memory)) == 1:
        return f"{cluster.n_devices}x {cluster.kinds[0]} ({gb_text(cluster.memory[0])} each)"
    return ", ".join(f"{d.name} {d.kind} ({gb_text(d.memory_bytes)})" for d in cluster.devices)


def gb_text(n_bytes: float) -> str:
    """Bytes as GB: one decimal from 1 GB up ("12.0 GB"), else three significant digits ("0.09 GB")."""
    gb = n_bytes / 1e9
    return f"{gb:.1f} GB" if gb >= 1 else f"{gb:.3g} GB"


def cluster_summary(cluster: Cluster) -> str:
    """delta1, delta2, bandwidth, latency and host times, on one line.

    Latency and hosts only when set.
    """
    text = (f"delta1 {cluster.delta1_us:g} us, delta2 {cluster.delta2_us:g} us, bandwidth "
            f"{cluster.bandwidth_bytes_per_us:g} B/us ({cluster.bandwidth_bytes_per_us / 1e3:.2f} GB/s)")
    if cluster.latency_us:
        text += f", latency {cluster.latency_us:g} us"
    for h in cluster.hosts:
        text += f", host {h.name!r}: dispatch {h.dispatch_us:g} us, transfer {h.transfer_us:g} us"
    return text
