"""The staged model's fit of the rig's costs, varied on measurements already taken (no rig, no JAX devices).

`staged_fidelity --dump DIR` writes, per graph, what `eval --hardware`'s staged model was fitted and checked on
(`staged_fidelity.record_of`): the profiled units' costs, the cached rig costs, the single device's step at the
rig's start, the graph's chunked plan as the rig ran it (simulator.measure.boundary_costs.Observed), the contention, and every
placement with its dispatch order and measured median. This script simulates the same placements again as
`HardwareRunner.with_rig_costs` and `simulate_and_measure` do (units scaled to the start step with the cached costs,
the boundary fitted on the observation, units scaled again with it, then to the single device's median in the
rounds), with the fit of the boundary replaced by each of FITS:

* `committed`: simulator.measure.boundary_costs.fit_observed (what eval uses); its column must equal the staged column the
  record holds (checked: `reproduced`), or the re-simulation is not eval's;
* `per-value receives`: the stages as committed; the transfers fitted as a factor of the cached send, receive and
  latency charges plus a per-value receive cost (NNLS on each batch and step, relative errors);
* `x drift`: either, with the fixed costs (launch, per value, send, receive, latency, the step's round trip) also
  multiplied by the rounds' factor (the single device's step in the rounds against at the rig's start), as if the
  machine's speed moved them as it moves the units.

Spearman and median |error| over the placements other than the single device (the anchor), as staged_fidelity.

    python -m experiments.benchmarks.staged_refit experiments/results/benchmarks/staged_fidelity_dump/*.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.benchmarks.staged_fidelity import GRAPHS, summary  # noqa: E402
from simulator.measure.boundary_costs import Observed, fit_observed, transfer_charges  # noqa: E402
from simulator.engine.staged import RigCosts  # noqa: E402


class Record(NamedTuple):
    """One graph's dump, loaded."""

    name: str
    graph: object  # simulator.model.graph.Graph with the profiled units' costs under `kind`
    kind: str
    holders: np.ndarray  # bool[N]
    cached: RigCosts
    step_us: float  # the single device's step at the rig's start
    observed: Observed
    contention: float
    placements: list  # [dict]: name, placement, order, measured_us, staged_us


def load_record(path: Path) -> Record:
    """The dump at `path`; SystemExit with one line naming the file (and the field) if it cannot be read as one."""
    from simulator.model.errors import InputError

    try:
        return _load_record(path)
    except InputError as e:  # the file unreadable, a field missing or of the wrong type, the graph it names bad
        what = str(e) if e.source and e.source != str(path) else e.detail
        raise SystemExit(f"{path}: not a staged_fidelity dump: {what}") from None
    except (ValueError, TypeError) as e:  # values of the right type that still do not fit (array shapes, keys)
        raise SystemExit(f"{path}: not a staged_fidelity dump: {type(e).__name__}: "
                         f"{' '.join(str(e).split())[:200]}") from None


def _load_record(path: Path) -> Record:
    from simulator import load_graph
    from simulator.model.io import read_json
    from simulator.model.limits import field

    rec, where = read_json(path), "the record"
    name, kind = field(rec, "graph", where, str), field(rec, "kind", where, str)
    source = field(rec, "path", where, str, None) or next(
        (g for g in GRAPHS if Path(g).name.split(".")[0] == name), None)
    if source is None:
        raise SystemExit(f"{path}: graph {name!r} is none of {GRAPHS} and the record names no path")
    graph = load_graph(ROOT / source)
    graph = graph.with_costs(kind, np.asarray(field(rec, "profiled_us", where, list), dtype=np.float64))
    obs = Observed(**{k: np.asarray(v, dtype=bool if k == "waited" else np.float64)
                      for k, v in field(rec, "observed", where, dict).items()})
    placements, number = field(rec, "placements", where, list), (int, float)
    for k, placement in enumerate(placements):
        for key, types in (("name", str), ("placement", list), ("order", list), ("measured_us", number),
                           ("staged_us", number)):
            field(placement, key, f"placements[{k}]", types)
    return Record(name, graph, kind, np.asarray(field(rec, "holders", where, list), dtype=bool),
                  RigCosts(**field(rec, "cached", where, dict)), float(field(rec, "step_us", where, number)), obs,
                  float(field(rec, "contention", where, number)), placements)


def _runner(rec: Record, graph, costs: RigCosts):
    """A HardwareRunner that simulates only: the cluster of the record's kind, the recorded dispatch orders."""
    from simulator.hardware.runner import HardwareRunner
    from simulator.model.cluster import Cluster, Device

    orders = {np.asarray(p["placement"], dtype=np.int32).tobytes(): p["order"] for p in rec.placements}

    class Recorded(HardwareRunner):
        def order(self, placement):
            return np.asarray(orders[np.asarray(placement, dtype=np.int32).tobytes()], dtype=np.int64)

    n = max(max(p["placement"]) for p in rec.placements) + 1
    cluster = Cluster("rig", tuple(Device(f"cpu:{d}", rec.kind, 1e15) for d in range(n)), 0.0, 0.0, 1e6)
    return Recorded(graph, cluster, "program", [], None, holders=rec.holders, rig_costs=costs)


def committed(obs: Observed, cached: RigCosts) -> RigCosts:
    return fit_observed(obs, cached).added_to(cached)


def per_value_receives(obs: Observed, cached: RigCosts) -> RigCosts:
    from scipy.optimize import nnls

    b = fit_observed(obs, cached)
    costs = b._replace(transfer_factor=1.0).added_to(cached)
    charged = transfer_charges(obs, cached)
    if charged.size == 0:
        return costs
    values = np.repeat(obs.values[:, None], charged.shape[1], axis=1)
    scale = np.maximum(charged, 1.0).ravel()
    a = np.stack([charged.ravel(), values.ravel()], axis=1) / scale[:, None]
    g, per_value = nnls(a, obs.taken_us.ravel() / scale)[0]
    c = cached
    return dataclasses.replace(costs, send_us=c.send_us * g, send_us_per_value=c.send_us_per_value * g,
                               send_us_per_mb=c.send_us_per_mb * g, recv_us=c.recv_us * g,
                               recv_us_per_value=c.recv_us_per_value * g + per_value,
                               recv_us_per_mb=c.recv_us_per_mb * g, latency_us=c.latency_us * g)


FITS: dict[str, Callable[[Observed, RigCosts], RigCosts]] = {"committed": committed,
                                                             "per-value receives": per_value_receives}


def fixed_times(c: RigCosts, d: float) -> RigCosts:
    return dataclasses.replace(c, launch_us=c.launch_us * d, launch_us_per_input=c.launch_us_per_input * d,
                               send_us=c.send_us * d, send_us_per_value=c.send_us_per_value * d,
                               recv_us=c.recv_us * d, recv_us_per_value=c.recv_us_per_value * d,
                               latency_us=c.latency_us * d, step_us=c.step_us * d)


def resimulate(rec: Record, fit: Callable[[Observed, RigCosts], RigCosts], drift: bool = False) -> list[tuple]:
    """[(placement name, simulated us, measured us, off device 0)] as eval would have simulated them with `fit`."""
    unit = rec.graph.cost_for(rec.kind)
    costs = fit(rec.observed, rec.cached)
    scaled = rec.graph.with_costs(rec.kind, unit * _runner(rec, rec.graph, costs).scale_to(rec.step_us, costs))
    costs = dataclasses.replace(costs, contention=rec.contention)
    runner = _runner(rec, scaled, costs)
    single = next(p for p in rec.placements if not any(p["placement"]))
    factor = runner.scale_to(single["measured_us"])
    if drift:
        runner = _runner(rec, scaled, fixed_times(costs, factor))
        factor = runner.scale_to(single["measured_us"])
    return [(p["name"], runner.simulate(np.asarray(p["placement"], dtype=np.int32), factor), p["measured_us"],
             bool(any(p["placement"]))) for p in rec.placements]


def reproduced(rec: Record) -> float:
    """The largest relative difference between the committed fit's re-simulation and the recorded staged times."""
    return max(abs(sim - p["staged_us"]) / p["staged_us"]
               for (_, sim, _, _), p in zip(resimulate(rec, committed), rec.placements))


def statistics(rows: list[tuple]) -> tuple[float, float]:
    """(Spearman, median |error| %) of `resimulate`'s rows, as staged_fidelity.summary counts them (the single
    device left out)."""
    return summary([{"simulated_us": sim, "measured_us": m, "off_device0": float(off)} for _, sim, m, off in rows],
                   "simulated_us")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("dumps", nargs="+", type=Path, help="staged_fidelity --dump files")
    args = p.parse_args(argv)
    print("| graph | fit | Spearman | median err | errors (%) |\n|---|---|---|---|---|")
    for path in args.dumps:
        rec = load_record(path)
        off = reproduced(rec)
        if off > 1e-6:
            raise SystemExit(f"{path}: the committed fit re-simulates {100 * off:.2g}% off the recorded staged times "
                             "(the model changed since the dump: run staged_fidelity --dump again)")
        for name, fit in FITS.items():
            for drift in (False, True):
                rows = resimulate(rec, fit, drift)
                s, e = statistics(rows)
                errors = " ".join(f"{n} {100 * (sim - m) / m:+.0f}" for n, sim, m, split in rows if split)
                print(f"| {rec.name} | {name}{' x drift' if drift else ''} | {s:.2f} | {e:.0f}% | {errors} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
