"""Fits the cluster model to measured step times: probes and least squares.

The cluster model (simulator.model.cluster) has six timing parameters, all microseconds:

    delta1_us     device idle after each op                     (per device, overlaps other devices)
    dispatch_us   host time to dispatch each op                 (shared by the devices of one host)
    delta2_us     sending bus busy after each transfer          (per device)
    us_per_mb     wire time per 10^6 bytes = 10^6 / bandwidth_bytes_per_us
    latency_us    flight time of each transfer                  (overlaps everything)
    transfer_us   host time to start each producer's transfers  (shared by the devices of one host)

`calibration_probes` builds small graphs whose step times separate them: a chain on one device
(dispatch + delta1 per op) against two chains on two devices (dispatch serialises on a shared host, delta1 does
not), chains hopping between two devices with small and large tensors (transfer + latency per hop, wire time
per byte) against two such chains at once (the host time doubles, the latency does not), a fan-out of many
tensors over one bus (delta2 per transfer), and two chains of long ops (how concurrent the devices are, which
the model assumes and cannot fit). `fit_cluster` finds the parameters that minimise the squared relative
errors of the simulated step times (`scipy.optimize.least_squares`, bounded, from a few starting points) and
reports the fit: every probe's residual, R^2 and the RMS relative error.

Nothing here runs hardware: `simulator.measure.calibrate` measures the probes. The tests fit probes "measured" by
the simulator itself with known parameters, which the fit must recover.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Sequence

import numpy as np

from simulator.engine.fast import simulate
from simulator.model.cluster import Cluster, Host
from simulator.model.graph import Graph, make_graph

PARAMS = ("delta1_us", "dispatch_us", "delta2_us", "us_per_mb", "latency_us", "transfer_us")
BOUNDS = {"delta1_us": (0.0, 1e6), "dispatch_us": (0.0, 1e6), "delta2_us": (0.0, 1e6),
          "us_per_mb": (1e-3, 1e9), "latency_us": (0.0, 1e6), "transfer_us": (0.0, 1e6)}
HOST = "host"  # the one host of a calibrated cluster: devices of one process share its interpreter lock
CHAIN, HOPS, FAN, LONG = 32, 24, 12, 6  # ops per chain, per hop chain, tensors fanned out, long ops per device
SMALL, MEDIUM, LARGE = 4 * 2**10, 256 * 2**10, 2**20  # tensor sizes, bytes
LONG_US = 500.0  # cost of a long op


class Probe(NamedTuple):
    """One calibration graph placed on devices 0 and 1.

    measured_us is NaN until measured.
    """

    name: str
    graph: Graph  # costs under the default kind: what the synthetic kernel of each node takes, microseconds
    placement: np.ndarray  # int32[N]
    measured_us: float = float("nan")  # step time, microseconds


class Fit(NamedTuple):
    """The fitted cluster and how well it reproduces the P probes."""

    cluster: Cluster
    params: dict[str, float]  # PARAMS -> value
    names: tuple[str, ...]  # [P] probe names
    measured_us: np.ndarray  # float64[P]
    simulated_us: np.ndarray  # float64[P] with the fitted cluster
    r2: float  # 1 - sum (sim - meas)^2 / sum (meas - mean meas)^2
    rms_relative: float  # sqrt(mean ((sim - meas) / meas)^2)

    @property
    def residual_us(self) -> np.ndarray:
        """float64[P] simulated minus measured, microseconds."""
        return self.simulated_us - self.measured_us


def _chain(name: str, n: int, out_bytes: int, device_of: Callable[[int], int], task_us: Callable[[int], float],
           copies: int = 1, cost: float | None = None) -> tuple[Graph, np.ndarray]:
    """`copies` independent chains of n ops, each passing out_bytes to the next.

    Op k of copy c runs on device_of(k + c) (0 or 1).
    """
    nodes, edges, place = [], [], []
    for c in range(copies):
        for k in range(n):
            nodes.append({"name": f"c{c}n{k}", "cost": cost if cost is not None else task_us(out_bytes),
                          "out_bytes": [out_bytes]})
            place.append(device_of(k + c))
            if k:
                edges.append((len(nodes) - 2, len(nodes) - 1, 0))
    return make_graph(name, nodes, edges), np.asarray(place, dtype=np.int32)


def _fan_out(name: str, n: int, out_bytes: int, task_us: Callable[[int], float],
             both: bool = False) -> tuple[Graph, np.ndarray]:
    """One op on device 0 with n outputs, each read by an op on device 1.

    n transfers on one bus; with `both`, the same from device 1 to device 0 at once (two buses sending, one host).
    """
    nodes, edges, place = [], [], []
    for src_dev in (0, 1) if both else (0,):
        src = len(nodes)
        nodes.append({"name": f"src{src_dev}", "cost": task_us(n * out_bytes), "out_bytes": [out_bytes] * n})
        place.append(src_dev)
        for k in range(n):
            edges.append((src, len(nodes), k))
            nodes.append({"name": f"dst{src_dev}_{k}", "cost": task_us(4), "out_bytes": [4]})
            place.append(1 - src_dev)
    return make_graph(name, nodes, edges), np.asarray(place, dtype=np.int32)


def calibration_probes(n_devices: int, task_us: Callable[[int], float]) -> list[Probe]:
    """The calibration graphs (see the module docstring).

    Only the one-device chain when n_devices == 1. task_us(out_bytes): microseconds a minimal op writing out_bytes
    takes (simulator.hardware.synthetic: the fill time of its outputs, or about 1 us).
    """
    one = lambda k: 0  # noqa: E731
    alternate = lambda k: k % 2  # noqa: E731
    specs = [("chain", *_chain("chain", CHAIN, 4, one, task_us))]
    if n_devices >= 2:
        specs += [
            ("chains-2dev", *_chain_pair("chains", CHAIN, 4, task_us)),
            ("hops-4KB", *_chain("hops", HOPS, SMALL, alternate, task_us)),
            ("hops-256KB", *_chain("hops", HOPS, MEDIUM, alternate, task_us)),
            ("hops-1MB", *_chain("hops", HOPS, LARGE, alternate, task_us)),
            ("hops-2x4KB", *_chain("hops2", HOPS, SMALL, alternate, task_us, copies=2)),
            ("fanout-4KB", *_fan_out("fan", FAN, SMALL, task_us)),
            ("fanout-256KB", *_fan_out("fan", FAN, MEDIUM, task_us)),
            ("fanout-2x4KB", *_fan_out("fan2", FAN, SMALL, task_us, both=True)),
            ("long-2dev", *_chain_pair("long", LONG, 4, task_us, cost=LONG_US)),
        ]
    return [Probe(name, graph, placement) for name, graph, placement in specs]


def _chain_pair(name: str, n: int, out_bytes: int, task_us: Callable[[int], float],
                cost: float | None = None) -> tuple[Graph, np.ndarray]:
    """Two independent chains of n ops, one on device 0 and one on device 1."""
    return _chain(name, n, out_bytes, lambda k: 0, task_us, copies=2, cost=cost)[0], np.repeat(
        np.arange(2, dtype=np.int32), n)


def cluster_with(base: Cluster, params: dict[str, float]) -> Cluster:
    """`base` with the six timing parameters set, all devices on one host.

    The host is HOST.
    """
    devices = tuple(dataclasses.replace(d, host=HOST) for d in base.devices)
    return dataclasses.replace(base, devices=devices, delta1_us=params["delta1_us"],
                               delta2_us=params["delta2_us"], bandwidth_bytes_per_us=1e6 / params["us_per_mb"],
                               latency_us=params["latency_us"],
                               hosts=(Host(HOST, params["dispatch_us"], params["transfer_us"]),))


def cluster_params(cluster: Cluster) -> dict[str, float]:
    """The six timing parameters of `cluster`: the inverse of `cluster_with`.

    Its first host's dispatch and transfer times, 0 when it has no host.
    """
    host = cluster.hosts[0] if cluster.hosts else Host(HOST, 0.0, 0.0)
    return {"delta1_us": cluster.delta1_us, "dispatch_us": host.dispatch_us, "delta2_us": cluster.delta2_us,
            "us_per_mb": 1e6 / cluster.bandwidth_bytes_per_us, "latency_us": cluster.latency_us,
            "transfer_us": host.transfer_us}


def simulate_probes(probes: Sequence[Probe], cluster: Cluster) -> np.ndarray:
    """float64[P] simulated step time of every probe on `cluster`, microseconds."""
    return np.array([simulate(p.graph, p.placement, cluster).runtime for p in probes])


def fit_cluster(probes: Sequence[Probe], base: Cluster, free: Sequence[str] = PARAMS,
                fixed: dict[str, float] | None = None, start: dict[str, float] | None = None) -> Fit:
    """Fits the parameters in `free` to the probes' measured step times.

    Least squares on relative residuals, so that long and short probes count alike.

    Args:
      probes: measured probes.
      base: the cluster the parameters are set on (`cluster_with`).
      free: the parameters fitted.
      fixed: the values of the others (default 0, and us_per_mb 1).
      start: one more starting point (e.g. a calibration's values).

    Returns:
      The Fit: the fitted cluster (`cluster_with(base, ...)`) and the fit report.

    Raises:
      ValueError: a probe without a positive measured step time.
    """
    from scipy.optimize import least_squares

    measured = np.array([p.measured_us for p in probes], dtype=np.float64)
    if not (len(probes) and np.all(np.isfinite(measured)) and np.all(measured > 0)):
        raise ValueError("every probe needs a positive measured step time")
    values = {"us_per_mb": 1.0, **{k: 0.0 for k in PARAMS if k != "us_per_mb"}, **(fixed or {})}
    # Private copies: each trial cluster caches prepared arrays on the graph; they go with the copies.
    probes = [p._replace(graph=dataclasses.replace(p.graph)) for p in probes]
    lo = np.array([BOUNDS[k][0] for k in free])
    hi = np.array([BOUNDS[k][1] for k in free])

    def params_of(x: np.ndarray) -> dict[str, float]:
        return {**values, **{k: float(v) for k, v in zip(free, x)}}

    def residuals(x: np.ndarray) -> np.ndarray:
        return simulate_probes(probes, cluster_with(base, params_of(x))) / measured - 1.0

    best = None
    extra = [np.array([start[k] for k in free])] if start is not None else []
    for x in extra + _starts(probes, free):
        x0 = np.clip(x, lo, hi)
        # Finite differences over steps of ~0.5 us (or 5%): the step time is piecewise linear in the parameters.
        r = least_squares(residuals, x0, bounds=(lo, hi), diff_step=0.05, x_scale=np.maximum(x0, 1.0),
                          max_nfev=200 * len(free))
        if best is None or r.cost < best.cost:
            best = r
    params = params_of(best.x)
    cluster = cluster_with(base, params)
    simulated = simulate_probes(probes, cluster)
    total = float(np.sum((measured - measured.mean()) ** 2))
    r2 = 1.0 - float(np.sum((simulated - measured) ** 2)) / total if total > 0 else float("nan")
    return Fit(cluster, params, tuple(p.name for p in probes), measured, simulated, r2,
               float(np.sqrt(np.mean((simulated / measured - 1.0) ** 2))))


WORKLOAD_FREE = ("delta1_us", "dispatch_us", "delta2_us", "latency_us", "transfer_us")
"""What a fit on a graph's own placements moves: the per-op and per-transfer costs, where real groups differ from
the calibration's minimal ops; the bandwidth keeps the calibration's value."""


def fit_on_placements(graph: Graph, placements: Sequence[np.ndarray], measured_us: Sequence[float],
                      calibrated: dict[str, float], base: Cluster, free: Sequence[str] = WORKLOAD_FREE,
                      names: Sequence[str] | None = None) -> Fit:
    """`fit_cluster` on measured steps of one graph's placements.

    Instead of the calibration graphs: the placements (each int[N]) with their measured step times; the parameters
    in `free` are fitted, starting from and otherwise equal to `calibrated` (a calibration's params, or
    `cluster_params`). `names`: the placements' names in the fit report.
    """
    names = names or [f"placement {k}" for k in range(len(placements))]
    probes = [Probe(name, graph, np.asarray(p, dtype=np.int32), float(m))
              for name, p, m in zip(names, placements, measured_us)]
    return fit_cluster(probes, base, free, fixed=calibrated, start=calibrated)


def held_out_predictions(graph: Graph, placements: Sequence[np.ndarray], measured_us: Sequence[float],
                         calibrated: dict[str, float], base: Cluster,
                         free: Sequence[str] = WORKLOAD_FREE) -> np.ndarray:
    """float64[P] each placement's step time simulated with a fit on the others.

    The parameters are those `fit_on_placements` fits on the other P - 1 (leave-one-out: no placement is predicted
    by a fit that saw it).
    """
    out = np.empty(len(placements))
    for k in range(len(placements)):
        rest = [i for i in range(len(placements)) if i != k]
        fit = fit_on_placements(graph, [placements[i] for i in rest], [measured_us[i] for i in rest], calibrated,
                                base, free)
        out[k] = simulate(graph, np.asarray(placements[k], dtype=np.int32), fit.cluster).runtime
    return out


def _starts(probes: Sequence[Probe], free: Sequence[str]) -> list[np.ndarray]:
    """Starting points of the fit, from the one-device chain's time per op.

    Every parameter a tenth of it, then a fiftieth and a half of it (the fit is not convex: the step time has a kink
    wherever the critical path changes).
    """
    per_op = next((p.measured_us / p.graph.n_nodes for p in probes if p.name == "chain"),
                  float(np.median([p.measured_us / p.graph.n_nodes for p in probes])))
    return [np.array([per_op * scale for _ in free]) for scale in (0.1, 0.02, 0.5)]


def format_fit(fit: Fit, label: str = "probe") -> str:
    """The fit report: parameters, one line per probe, then R^2.

    A probe's line: measured, simulated, residual; the first column is `label`, as wide as the longest name.
    """
    p = fit.params
    width = max([14, len(label)] + [len(n) for n in fit.names])
    lines = [f"fitted: delta1 {p['delta1_us']:.2f} us, dispatch {p['dispatch_us']:.2f} us (shared host), delta2 "
             f"{p['delta2_us']:.2f} us, bandwidth {1e6 / p['us_per_mb']:.0f} B/us, latency {p['latency_us']:.2f} us, "
             f"transfer {p['transfer_us']:.2f} us (shared host)",
             f"{label:<{width}} {'measured us':>12} {'simulated us':>12} {'residual':>10}"]
    for name, m, s in zip(fit.names, fit.measured_us, fit.simulated_us):
        lines.append(f"{name:<{width}} {m:>12.1f} {s:>12.1f} {(s - m) / m * 100:>+9.1f}%")
    lines.append(f"R^2 {fit.r2:.4f}, RMS relative error {fit.rms_relative * 100:.1f}% over {len(fit.names)} {label}s")
    return "\n".join(lines)
