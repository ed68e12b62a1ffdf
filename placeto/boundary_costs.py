"""What stages and values crossing them cost on the process rig, fitted on the user's graph itself (issue 40, item 2).

The rig's launch and transfer costs (simulator.rig_workload) are fitted once per machine on a small calibration
step and cached. They miss three things, all measured here on the user's graph at the time it is placed:

* per MB. The calibration step's values (64 KB to 1 MB) stay in a core's cache: its per-MB stage charges come out
  near 0. A graph with large values pays more where a placement cuts it: a value that crosses stages is written
  out as a stage's result and read back by the next, where inside one program it is consumed where it is made.
  On inception_v3 at 2 rig devices (ad hoc, 2026-11-28, this 2-core machine) the stages of etf, round-robin and 64
  runs alternating between the workers ran 0.18 ms per MB read from other stages and 0.35 ms per MB made for
  other stages beyond their units' costs and the fitted launch; the calibration step's fit put both at 0.
* per value. The calibration step's batches are a few values each; ptb_006's are up to hundreds of small ones.
  The calibration's least squares split a receive's cost between fixed, per value and per MB differently from run
  to run (0 per value and 496 us per MB in one, 142 and 22 in another): on ptb_006, m-topo's one batch of 425
  values (4.9 MB) took 26.2 ms to receive against 3.4 ms charged (62 us a value), while heft's 63 small batches
  were charged twice what they took. Likewise a stage reading tens of values cost ~580 us beyond its units, one
  reading a few ~270: the launch and the per-value charge must be told apart on the graph's own stages.
* the machine's moment. The cached costs are those of the moment they were measured: on a day this machine ran
  2-3x slower, the calibration's launch (373 us) and latency (623 us) were 3-7x the day before's.

`measure(runner)`: the graph's units in the rig's dispatch order are cut into `chunks` runs of about equal
profiled cost alternating between the rig's first two workers (`chunked`: one worker computes at a time, so no
contention), the plan runs `steps` times after `warmup` steps, and three non-negative least squares fits
(`fit`), each row divided by what the cached costs predict for it (relative errors: a large stage's noise does
not drown the fixed charges of the small ones), give the graph's own:

* a stage's costs beyond its units (each stage's median run, its worker's "run" events, less its units' costs):
  launch + per value read from other stages + per MB read + per MB made for other stages;
* a send's (the producer's "send" event, median over the steps): fixed + per value + per MB;
* a receive's (from the later of the receiver's "recv" start and the send's end to its end, every step a row):
  fixed + per value + per MB + the wake-up latency where the receiver was waiting.

A fit with fewer than `ROWS_PER_TERM` rows per term keeps the cached costs of its part (a small graph cut into few
stages). `Boundary.applied_to` puts them in the costs. No placement a placer chose is run.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import numpy as np

CHUNKS = 32  # runs of about equal profiled cost (each one stage or a few: holders split none)
STEPS = 3  # timed steps of the chunked plan (each stage's and send's median is fitted)
ROWS_PER_TERM = 3  # fewer rows per fitted term: that part's cached costs are kept


class Boundary(NamedTuple):
    """The graph's own stage and transfer costs on the rig (`measure`), microseconds (per MB: per 10^6 bytes):
    `stage` (launch, per value read from other stages, per MB read, per MB made for other stages), `send` (fixed,
    per value, per MB), `recv` (fixed, per value, per MB, latency: the wake-up where the receiver waited); None
    where too few rows kept the cached costs; and how many stages and batches the fits used."""

    stage: tuple[float, float, float, float] | None
    send: tuple[float, float, float] | None
    recv: tuple[float, float, float, float] | None
    stages: int
    transfers: int

    def applied_to(self, costs: Any) -> Any:
        """`costs` (simulator.staged.RigCosts) with the fitted parts in place of the cached ones (`step_us`, the
        parent's round trip, and `contention` as they are)."""
        fields = {}
        if self.stage is not None:
            fields.update(zip(("launch_us", "launch_us_per_input", "launch_us_per_input_mb",
                               "launch_us_per_output_mb"), self.stage))
        if self.send is not None:
            fields.update(zip(("send_us", "send_us_per_value", "send_us_per_mb"), self.send))
        if self.recv is not None:
            fields.update(zip(("recv_us", "recv_us_per_value", "recv_us_per_mb", "latency_us"), self.recv))
        return dataclasses.replace(costs, **fields)

    def describe(self) -> str:
        """One line: the fitted costs, or which are the cached ones."""
        parts = []
        if self.stage is not None:
            parts.append("a stage {:.0f} us + {:.1f} per value read + {:.0f} per MB read + {:.0f} per MB made for "
                         "others".format(*self.stage))
        if self.send is not None:
            parts.append("a send {:.0f} + {:.1f} per value + {:.0f} per MB".format(*self.send))
        if self.recv is not None:
            parts.append("a receive {:.0f} + {:.1f} per value + {:.0f} per MB, +{:.0f} when it waited".format(
                *self.recv))
        kept = [name for name, got in (("stages'", self.stage), ("sends'", self.send), ("receives'", self.recv))
                if got is None]
        return "; ".join(parts + ([f"the cached {', '.join(kept)} costs kept (too few rows)"] if kept else []))


def chunked(cost: np.ndarray, order: np.ndarray, holders: np.ndarray, chunks: int) -> np.ndarray:
    """int32[N]: worker 0 or 1 of each unit, runs of about equal summed `cost` (float[N] microseconds, holders
    counted 0) along `order` (a permutation of the N units), alternating between the two."""
    cost = np.where(np.asarray(holders, dtype=bool), 0.0, np.asarray(cost, dtype=np.float64))
    order = np.asarray(order)
    cum = np.cumsum(cost[order])
    total = cum[-1] if len(cum) and cum[-1] > 0 else 1.0
    run_at = np.minimum(np.floor((cum - cost[order] / 2) * chunks / total), chunks - 1).astype(int)
    placement = np.empty(len(cost), dtype=np.int32)
    placement[order] = run_at % 2
    return placement


def fit(target_us: np.ndarray, terms: np.ndarray, scale_us: np.ndarray | None = None) -> tuple[float, ...] | None:
    """The coefficients (each >= 0) fitting float[R] `target_us` as float[R, K] `terms` @ coefficients, least
    squares, each row divided by its float[R] `scale_us` when given (what is predicted for it: a row's error grows
    with its size, so the small rows, where the fixed charges show, are not drowned by the noise of a large one);
    None with fewer than ROWS_PER_TERM rows per term."""
    from scipy.optimize import nnls

    a = np.asarray(terms, dtype=np.float64).reshape(len(target_us), -1)
    b = np.asarray(target_us, dtype=np.float64)
    if len(b) < ROWS_PER_TERM * a.shape[1]:
        return None
    if scale_us is not None:
        w = 1.0 / np.maximum(np.asarray(scale_us, dtype=np.float64), 1.0)
        a, b = a * w[:, None], b * w
    return tuple(float(c) for c in nnls(a, b)[0])


def transfer_times(events: Sequence[dict], sends: dict, placement: np.ndarray) -> dict:
    """{(producer stage, receiving device): [(send us, receive us, waited)] per step}: each batch's send (its
    producer's "send" event, labelled by the stage) and its receive (the receiver's "recv" event of that label, as
    simulator.rig_workload.received times it: from the later of its start and the send's end), in the steps'
    `events` ({worker: [simulator.rig_worker.Event]} each); `sends` as simulator.staged.stage_sends, stages on
    devices `placement` (int[S]). A batch whose events are not one send and one receive in every step is left out."""
    from simulator.rig_workload import received

    out = {}
    for s, dst in sends:
        taken = []
        for step in events:
            sent = [e for e in step.get(int(placement[s]), []) if e.kind == "send" and e.label == s]
            got = [e for e in step.get(dst, []) if e.kind == "recv" and e.label == s]
            if len(sent) != 1 or len(got) != 1:
                break
            us, waited = received(sent[0].end_ns, got[0])
            taken.append(((sent[0].end_ns - sent[0].start_ns) / 1e3, us, waited))
        else:
            if taken:
                out[(s, dst)] = taken
    return out


def measure(runner: Any, chunks: int = CHUNKS, steps: int = STEPS, warmup: int = 2) -> Boundary:
    """The Boundary of `runner`'s graph on its process rig (placeto.evaluate.HardwareRunner with a rig of at least
    2 workers and rig costs: the units' costs already scaled to the rig); see the module docstring."""
    from placeto.rig_gantt import timed_steps
    from simulator.errors import InputError
    from simulator.staged import run_cost, stage_graph, stage_inputs, stage_outputs, stage_sends

    if runner.rig is None or runner.rig.n_devices < 2 or runner.rig_costs is None:
        raise InputError("values crossing stages are measured between two workers of a process rig")
    graph, costs, holders = runner.graph, runner.rig_costs, runner.holders
    base = runner.order(np.zeros(graph.n_nodes, dtype=np.int32))
    placement = chunked(graph.cost_for(runner.cluster.kinds[0]), base, holders, chunks)
    sg = stage_graph(graph, placement, runner.cluster, runner.order(placement), costs, holders)
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
    terms = np.stack([np.ones(len(s)), n_in[s], in_bytes[s] / 1e6, out_bytes[s] / 1e6], axis=1)
    stage = fit(np.asarray(runs) - sg.work[s], terms, run_cost(costs, sg.work, n_in, in_bytes, out_bytes)[s])
    sends = stage_sends(graph, sg.stage_of, sg.placement)
    times = transfer_times(events, sends, sg.placement)
    sent, got = [], []  # (values, MB, us) per batch; (values, MB, waited, us) per batch and step
    for key, each in times.items():
        count, b = sends[key]
        sent.append((count, b / 1e6, float(np.median([us for us, _, _ in each]))))
        got += [(count, b / 1e6, float(waited), us) for _, us, waited in each]
    sent_a, got_a = np.asarray(sent, dtype=np.float64).reshape(-1, 3), np.asarray(got, dtype=np.float64).reshape(-1, 4)
    send = fit(sent_a[:, 2], np.column_stack([np.ones(len(sent_a)), sent_a[:, :2]]),
               [costs.send_cost(mb * 1e6, n) for n, mb, _ in sent_a])
    recv = fit(got_a[:, 3], np.column_stack([np.ones(len(got_a)), got_a[:, :3]]),
               [costs.recv_cost(mb * 1e6, n) + costs.latency_us * w for n, mb, w, _ in got_a])
    return Boundary(stage, send, recv, len(stages), len(times))
