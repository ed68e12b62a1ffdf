"""Stage and transfer costs on the process rig, fitted on the user's graph.

The rig's launch and transfer costs (simulator.measure.rig_workload) are fitted once per machine on a small
calibration step and cached. Two things they miss, both measured here on the user's graph at the time it is
placed:

* per MB. The calibration step's values (64 KB to 1 MB) stay in a core's cache: its per-MB stage charges come out
  near 0. A graph with large values pays more where a placement cuts it: a value that crosses stages is written
  out as a stage's result and read back by the next, where inside one program it is consumed where it is made
  (inception_v3's stages paid per MB where the calibration step's fit put 0: docs/hardware.md, "Stages, not
  units", and "Measured facts behind design choices").
* the machine's moment. The cached fixed costs are those of the moment they were measured, and a machine's speed
  moves between days (docs/hardware.md, "Stages, not units"): units' costs scaled to the step as it runs do not
  undo that. So the stages' fixed costs (launch, per value read) and the transfers' (send, receive, latency) are
  scaled by factors the graph measures now.

`measure(runner)`: the graph's units in the rig's dispatch order are cut into `chunks` runs of about equal
profiled cost alternating between the rig's first two workers (`chunked`: one worker computes at a time, so no
contention), the plan runs `steps` times after `warmup` steps. Stages (`fit`): each stage's median run (its
worker's "run" events) less its units' costs and the per-MB charges already in the costs is fitted, non-negative
least squares on relative errors (each row divided by the stage's predicted run), as `stage_factor` x its fixed
charges (launch + per value read) + extra per input MB + extra per output MB. Transfers (`transfer_factor`):
each batch's send (the producer's "send" event) and receive (from the later of the receiver's "recv" start and
the send's end to its end), median over the steps, summed over the batches, against what the costs charge them
(send, receive, and the latency where the receiver was waiting). `Boundary.added_to` applies them. No placement
a placer chose is run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import numpy as np

from simulator.engine.staged import stage_graph, stage_inputs, stage_outputs, stage_sends
from simulator.measure.rig_step import timed_steps
from simulator.measure.rig_workload import received
from simulator.model.errors import InputError

CHUNKS = 32  # runs of about equal profiled cost (each one stage or a few: holders split none)
STEPS = 3  # timed steps of the chunked plan (each stage's median is fitted)


class Boundary(NamedTuple):
    """The graph's stage and transfer costs beyond the cached rig costs.

    Measured by `measure`: extra microseconds per 10^6 bytes a stage reads from (`per_input_mb`) or makes for
    (`per_output_mb`) other stages, the factor of the stages' fixed charges (`stage_factor`) and of the transfers'
    (`transfer_factor`), and how many stages and batches the fits used.
    """

    per_input_mb: float
    per_output_mb: float
    stage_factor: float
    transfer_factor: float
    stages: int
    transfers: int

    def added_to(self, costs: Any) -> Any:
        """`costs` (simulator.engine.staged.RigCosts) with these applied.

        The per-MB stage charges added to, the launch and per-input charges times `stage_factor`, the sends',
        receives' and latency times `transfer_factor`.
        """
        a, g = self.stage_factor, self.transfer_factor
        return dataclasses.replace(
            costs, launch_us=costs.launch_us * a, launch_us_per_input=costs.launch_us_per_input * a,
            launch_us_per_input_mb=costs.launch_us_per_input_mb + self.per_input_mb,
            launch_us_per_output_mb=costs.launch_us_per_output_mb + self.per_output_mb,
            send_us=costs.send_us * g, send_us_per_value=costs.send_us_per_value * g,
            send_us_per_mb=costs.send_us_per_mb * g, recv_us=costs.recv_us * g,
            recv_us_per_value=costs.recv_us_per_value * g, recv_us_per_mb=costs.recv_us_per_mb * g,
            latency_us=costs.latency_us * g)


def chunked(cost: np.ndarray, order: np.ndarray, holders: np.ndarray, chunks: int) -> np.ndarray:
    """int32[N] worker 0 or 1 of each unit: runs of equal cost, alternating.

    Runs of about equal summed `cost` (float[N] microseconds, holders counted 0) along `order` (a permutation of the
    N units), alternating between the two workers.
    """
    cost = np.where(np.asarray(holders, dtype=bool), 0.0, np.asarray(cost, dtype=np.float64))
    order = np.asarray(order)
    cum = np.cumsum(cost[order])
    total = cum[-1] if len(cum) and cum[-1] > 0 else 1.0
    run_at = np.minimum(np.floor((cum - cost[order] / 2) * chunks / total), chunks - 1).astype(int)
    placement = np.empty(len(cost), dtype=np.int32)
    placement[order] = run_at % 2
    return placement


def fit(excess_us: np.ndarray, fixed_us: np.ndarray, input_mb: np.ndarray, output_mb: np.ndarray,
        scale_us: np.ndarray | None = None) -> tuple[float, float, float]:
    """Fits stages' excess time as factor x fixed charges + per-MB extras.

    Args:
      excess_us: float[S] each stage's measured run less its units' costs and its per-MB charges.
      fixed_us: float[S] the stages' fixed charges (launch and per-input).
      input_mb: float[S] MB each stage reads from other stages.
      output_mb: float[S] MB each stage makes for other stages.
      scale_us: float[S] each stage's predicted run: when given, each stage's row is divided by it (a stage's error
        grows with its work, so a small stage, where the fixed charges show, is not drowned by the noise of a large
        one).

    Returns:
      (factor of the fixed charges, extra us per input MB, extra us per output MB), each >= 0; (1, 0, 0) without
      stages.
    """
    from scipy.optimize import nnls

    if len(excess_us) == 0:
        return 1.0, 0.0, 0.0
    a = np.stack([np.asarray(c, dtype=np.float64) for c in (fixed_us, input_mb, output_mb)], axis=1)
    b = np.asarray(excess_us, dtype=np.float64)
    if scale_us is not None:
        w = 1.0 / np.maximum(np.asarray(scale_us, dtype=np.float64), 1.0)
        a, b = a * w[:, None], b * w
    coef = nnls(a, b)[0]
    return float(coef[0]), float(coef[1]), float(coef[2])


def transfer_times(events: Sequence[dict], sends: dict, placement: np.ndarray) -> dict:
    """Each batch's send plus receive time per step, and whether it waited.

    A batch's send is its producer's "send" event (labelled by the stage), its receive the receiver's "recv" event
    of that label, as simulator.measure.rig_workload.received times it. A batch whose events are not one send and
    one receive in every step is left out.

    Args:
      events: per step, {worker: [simulator.hardware.rig.worker.Event]}.
      sends: as simulator.engine.staged.stage_sends.
      placement: int[S] the stages' devices.

    Returns:
      {(producer stage, receiving device): [(us taken, waited)] per step}.
    """
    out = {}
    for s, dst in sends:
        taken = []
        for step in events:
            sent = [e for e in step.get(int(placement[s]), []) if e.kind == "send" and e.label == s]
            got = [e for e in step.get(dst, []) if e.kind == "recv" and e.label == s]
            if len(sent) != 1 or len(got) != 1:
                break
            us, waited = received(sent[0].end_ns, got[0])
            taken.append(((sent[0].end_ns - sent[0].start_ns) / 1e3 + us, waited))
        else:
            if taken:
                out[(s, dst)] = taken
    return out


class Observed(NamedTuple):
    """The graph's chunked plan as the rig ran it (`observe`).

    S stages fitted (on the rig's first two workers, not holders), B batches of values sent between them, `steps`
    timed steps. Microseconds; MB: 10^6 bytes.
    """

    run_us: np.ndarray  # float64[S] each stage's median run (its worker's "run" events)
    work_us: np.ndarray  # float64[S] its units' costs (as the runner has them)
    n_in: np.ndarray  # float64[S] values it reads from other stages
    in_mb: np.ndarray  # float64[S] MB it reads from other stages
    out_mb: np.ndarray  # float64[S] MB it makes that other stages read
    values: np.ndarray  # float64[B] values in each batch
    mb: np.ndarray  # float64[B] MB in each batch
    taken_us: np.ndarray  # float64[B, steps] each batch's send plus receive (`transfer_times`)
    waited: np.ndarray  # bool[B, steps] whether its receiver was waiting for it


def observe(runner: Any, chunks: int = CHUNKS, steps: int = STEPS, warmup: int = 2) -> Observed:
    """The Observed of `runner`'s graph: its chunked plan, timed on the rig.

    Its units are cut into `chunks` runs (`chunked`) and the plan runs `steps` times after `warmup`.

    Args:
      runner: a simulator.hardware.runner.HardwareRunner with a rig of at least 2 workers and rig costs (the units'
        costs already scaled to the rig).

    Raises:
      InputError: the runner has no such rig or no rig costs.
    """
    if runner.rig is None or runner.rig.n_devices < 2 or runner.rig_costs is None:
        raise InputError("values crossing stages are measured between two workers of a process rig")
    graph, holders = runner.graph, runner.holders
    base = runner.order(np.zeros(graph.n_nodes, dtype=np.int32))
    placement = chunked(graph.cost_for(runner.cluster.kinds[0]), base, holders, chunks)
    sg = stage_graph(graph, placement, runner.cluster, runner.order(placement), runner.rig_costs, holders)
    n_in, in_bytes = stage_inputs(graph, sg.stage_of, len(sg.runs))
    out_bytes = stage_outputs(graph, sg.stage_of, len(sg.runs))
    events = [ev for _, _, ev in timed_steps(runner, placement, steps, warmup)]
    stages, runs = [], []
    for d in (0, 1):
        ours = [s for s in range(len(sg.runs)) if sg.placement[s] == d and not sg.holder[s]]
        each = [[(e.end_ns - e.start_ns) / 1e3 for e in step.get(d, []) if e.kind == "run"] for step in events]
        if any(len(ran) != len(ours) for ran in each):  # not the stages simulated: nothing to fit on this worker
            continue
        stages += ours
        runs += np.median(np.asarray(each), axis=0).tolist()
    s = np.asarray(stages, dtype=np.int64)
    sends = stage_sends(graph, sg.stage_of, sg.placement)
    times = transfer_times(events, sends, sg.placement)
    taken = [[us for us, _ in each] for each in times.values()]
    waited = [[w for _, w in each] for each in times.values()]
    n = len(times)
    return Observed(np.asarray(runs, dtype=np.float64), np.asarray(sg.work, dtype=np.float64)[s],
                    np.asarray(n_in, dtype=np.float64)[s], np.asarray(in_bytes, dtype=np.float64)[s] / 1e6,
                    np.asarray(out_bytes, dtype=np.float64)[s] / 1e6,
                    np.asarray([sends[key][0] for key in times], dtype=np.float64).reshape(n),
                    np.asarray([sends[key][1] / 1e6 for key in times], dtype=np.float64).reshape(n),
                    np.asarray(taken, dtype=np.float64).reshape(n, len(events)),
                    np.asarray(waited, dtype=bool).reshape(n, len(events)))


def transfer_charges(obs: Observed, costs: Any) -> np.ndarray:
    """float64[B, steps] what `costs` charge each observed batch in each step.

    `costs` is a simulator.engine.staged.RigCosts; the charge is the batch's send, its receive, and the latency
    where the receiver was waiting.
    """
    return np.asarray([[costs.send_cost(mb * 1e6, values) + costs.recv_cost(mb * 1e6, values) + costs.latency_us * w
                        for w in waited] for values, mb, waited in zip(obs.values, obs.mb, obs.waited)],
                      dtype=np.float64).reshape(obs.waited.shape)


def fit_observed(obs: Observed, costs: Any) -> Boundary:
    """The Boundary that makes `costs` fit `obs`; see the module docstring.

    `costs` are the cached rig costs (simulator.engine.staged.RigCosts).
    """
    fixed = costs.launch_us + costs.launch_us_per_input * obs.n_in
    charged = obs.work_us + costs.launch_us_per_input_mb * obs.in_mb + costs.launch_us_per_output_mb * obs.out_mb
    factor, extra_in, extra_out = fit(obs.run_us - charged, fixed, obs.in_mb, obs.out_mb, charged + fixed)
    taken = float(np.median(obs.taken_us, axis=1).sum()) if len(obs.values) else 0.0
    charged_t = float(np.median(transfer_charges(obs, costs), axis=1).sum()) if len(obs.values) else 0.0
    transfer = taken / charged_t if charged_t > 0 else 1.0
    return Boundary(extra_in, extra_out, factor, transfer, len(obs.run_us), len(obs.values))


def measure(runner: Any, chunks: int = CHUNKS, steps: int = STEPS, warmup: int = 2) -> Boundary:
    """The Boundary of `runner`'s graph on its process rig.

    `fit_observed` of `observe`.
    """
    return fit_observed(observe(runner, chunks, steps, warmup), runner.rig_costs)
