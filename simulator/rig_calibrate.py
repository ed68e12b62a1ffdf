"""Measuring `simulator.staged.RigCosts` on a process rig (`simulator.process_rig.ProcessRig`) directly.

Instead of fitting a per-op model to synthetic-kernel probes (simulator.calibrate), each cost the staged
simulation charges is timed as the rig pays it, from the workers' own events (`simulator.rig_worker.Event`,
`perf_counter_ns`, one clock for all processes) and the parent's round trips:

* launch_us: the median Run event of a trivial stage (fn(token, x: f32[16]) -> (token, x + 1)) in a chain of
  `CHAIN` such stages on every worker: a stage's call, wait and hand-over with (almost) no work;
* step_us: the parent's round trip of that plan (every worker asked at once, all replies back) minus the longest
  worker's summed events: the request, the replies and the worker's loop;
* transfers, one value of each size of `SIZES` and the batches of `MANY` (many float32 values): worker 0 runs a
  stage making them and Sends them as one batch, worker 1 Recvs it. send_us + values * send_us_per_value +
  bytes * send_us_per_mb / 1e6 is a least-squares fit to the Send events (a view and a copy into shared memory
  per value, the pipe message); the Recv's end minus the Send's end (pipe wake-up, then a device_put per value)
  is fitted as latency_us + values * recv_us_per_value + bytes * recv_us_per_mb / 1e6 (recv_us = 0: the fixed
  part of a receive cannot be told apart from the wake-up, and both delay the reader alike).

* boundary_us_per_mb: for each size of `BOUNDARY_SIZES`, `CHAIN` stages of two steps x <- x * 1.0001 + 1 chained
  on worker 0 against ONE stage doing the same 2 * `CHAIN` steps (XLA fuses them into one pass): (chain's summed Run events -
  the fused Run - (CHAIN - 1) * launch_us) / (CHAIN - 1) is what handing a value of that size to the next stage
  costs; a least-squares line through the origin over the sizes gives the per-byte cost.

Each plan runs `repeats` steps after one warm-up (compiling); medians. Needs at least 2 workers for transfers
(with one, the transfer fields stay 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.staged import RigCosts

CHAIN = 8  # trivial stages per worker in the launch plan
SIZES = (1 << 10, 1 << 18, 1 << 21, 1 << 23)  # bytes of the transferred value: 1 KiB .. 8 MiB
MANY = ((16, 1 << 10), (64, 1 << 10), (16, 1 << 16))  # (values per batch, bytes each): per-value costs
BOUNDARY_SIZES = (1 << 18, 1 << 20, 1 << 22)  # bytes of the value between stages: 256 KiB .. 4 MiB
ALIGN = 64


def _export(fn, *avals) -> bytes:
    import jax

    return bytes(jax.export.export(jax.jit(fn))(*avals).serialize())


def _stage_blob(n: int, steps: int = 1) -> bytes:
    """fn(token, x: f32[n]) -> (token, x + 1) (steps 1), else `steps` times x <- x * 1.0001 + 1 (one fusion)."""
    import jax
    import jax.numpy as jnp

    def stage(token, x):
        if steps == 1:
            return token, x + 1.0
        for _ in range(steps):
            x = x * 1.0001 + 1.0
        return token, x

    return _export(stage, jax.ShapeDtypeStruct((), jnp.int8), jax.ShapeDtypeStruct((n,), jnp.float32))


def _runs(rig: Any, plan: int, workers: list[int], repeats: int) -> tuple[list[float], list[dict]]:
    """(parent round trips in us, per step {worker: events}) of `repeats` steps after one warm-up."""
    import time

    rig.call_all({d: ("run", plan) for d in workers})
    trips, events = [], []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        ev = rig.call_all({d: ("run", plan) for d in workers})
        trips.append((time.perf_counter_ns() - t0) / 1e3)
        events.append(ev)
    return trips, events


def launch_and_step(rig: Any, repeats: int = 30) -> tuple[float, float]:
    """(launch_us, step_us) on every worker of `rig` (see the module docstring)."""
    from simulator.rig_worker import Run

    workers = list(range(rig.n_devices))
    stage, plan, x = rig.new_id(), rig.new_id(), rig.new_id()
    ids = [rig.new_id() for _ in range(CHAIN)]
    rig.call_all({d: ("load", stage, _stage_blob(16)) for d in workers})
    rig.call_all({d: ("put", [(x, np.zeros(16, np.float32))]) for d in workers})
    program = tuple(Run(stage, k, ((x,) + tuple(ids))[k:k + 1], (ids[k],)) for k in range(CHAIN))
    rig.call_all({d: ("plan", plan, program, None, ()) for d in workers})
    try:
        trips, events = _runs(rig, plan, workers, repeats)
    finally:
        rig.call_all({d: ("free", plan) for d in workers})
        rig.call_all({d: ("drop", (x,)) for d in workers})
    runs = [(e.end_ns - e.start_ns) / 1e3 for step in events for ev in step.values() for e in ev]
    busy = [max((ev[-1].end_ns - ev[0].start_ns) / 1e3 for ev in step.values()) for step in events]
    return float(np.median(runs)), float(np.median(np.asarray(trips) - np.asarray(busy)))


def _multi_blob(n: int, count: int) -> bytes:
    """fn(token, x: f32[n]) -> (token, x + 1, ..., x + count): `count` values."""
    import jax
    import jax.numpy as jnp

    def stage(token, x):
        return (token, *(x + float(k + 1) for k in range(count)))

    return _export(stage, jax.ShapeDtypeStruct((), jnp.int8), jax.ShapeDtypeStruct((n,), jnp.float32))


def transfer_times(rig: Any, nbytes: int, count: int = 1, repeats: int = 30) -> tuple[float, float]:
    """(median Send event us, median Recv end - Send end us) of one batch of `count` float32 values of `nbytes`
    each from worker 0 to worker 1."""
    from simulator.rig_worker import Recv, Run, Send, Slot

    n = max(1, nbytes // 4)
    stage, plan, x = rig.new_id(), rig.new_id(), rig.new_id()
    ys, zs = [rig.new_id() for _ in range(count)], [rig.new_id() for _ in range(count)]
    rig.call(0, ("load", stage, _multi_blob(n, count)))
    rig.call(0, ("put", [(x, np.zeros(n, np.float32))]))
    step = -(-n * 4 // ALIGN) * ALIGN
    slots = tuple(Slot(y, k * step, (n,), "float32") for k, y in enumerate(ys))
    block = rig.block(step * count)
    rig.call_all({0: ("plan", plan, (Run(stage, 0, (x,), tuple(ys)), Send(1, 0, 0, slots)), block, ()),
                  1: ("plan", plan, (Recv(0, 0, tuple(s._replace(key=z) for s, z in zip(slots, zs))),), block,
                      ())})
    try:
        _, events = _runs(rig, plan, [0, 1], repeats)
    finally:
        rig.call_all({d: ("free", plan) for d in (0, 1)})
        rig.call(0, ("drop", (x,)))
    send, arrive = [], []
    for ev in events:
        s = next(e for e in ev[0] if e.kind == "send")
        r = next(e for e in ev[1] if e.kind == "recv")
        send.append((s.end_ns - s.start_ns) / 1e3)
        arrive.append((r.end_ns - s.end_ns) / 1e3)
    return float(np.median(send)), float(np.median(arrive))


def boundary_times(rig: Any, nbytes: int, repeats: int = 30) -> tuple[float, float]:
    """(median summed Run events of CHAIN one-step stages, median Run event of one CHAIN-step stage) on worker 0,
    values of `nbytes` (float32)."""
    from simulator.rig_worker import Run

    n = max(1, nbytes // 4)
    one, fused, chain_plan, fused_plan, x = (rig.new_id() for _ in range(5))
    ids = [rig.new_id() for _ in range(CHAIN + 1)]
    rig.call(0, ("load", one, _stage_blob(n, 2)))  # 2 steps: x * 1.0001 + 1 twice, so the chain's work is
    rig.call(0, ("load", fused, _stage_blob(n, 2 * CHAIN)))  # the fused stage's, CHAIN - 1 boundaries apart
    rig.call(0, ("put", [(x, np.zeros(n, np.float32))]))
    chain = tuple(Run(one, k, ((x,) + tuple(ids))[k:k + 1], (ids[k],)) for k in range(CHAIN))
    rig.call(0, ("plan", chain_plan, chain, None, ()))
    rig.call(0, ("plan", fused_plan, (Run(fused, 0, (x,), (ids[CHAIN],)),), None, ()))
    try:
        summed, single = [], []
        rig.call(0, ("run", chain_plan)), rig.call(0, ("run", fused_plan))
        for _ in range(repeats):
            summed.append(sum(e.end_ns - e.start_ns for e in rig.call(0, ("run", chain_plan))) / 1e3)
            single.append(sum(e.end_ns - e.start_ns for e in rig.call(0, ("run", fused_plan))) / 1e3)
    finally:
        rig.call(0, ("free", chain_plan)), rig.call(0, ("free", fused_plan))
        rig.call(0, ("drop", (x,)))
    return float(np.median(summed)), float(np.median(single))


def rig_costs(rig: Any, repeats: int = 30, sizes: tuple[int, ...] = SIZES) -> tuple[RigCosts, dict]:
    """(RigCosts measured on `rig`, the raw medians: {"launch_us", "step_us", "transfers": [(values, bytes each,
    send us, arrival us)], "boundaries": [(bytes, chained us, fused us)]})."""
    launch, step = launch_and_step(rig, repeats)
    raw: dict = {"launch_us": launch, "step_us": step, "transfers": [], "boundaries": []}
    for nbytes in BOUNDARY_SIZES:
        raw["boundaries"].append((nbytes, *boundary_times(rig, nbytes, repeats)))
    b, chained, fused = (np.asarray(c, dtype=np.float64) for c in zip(*raw["boundaries"]))
    per = (chained - fused - (CHAIN - 1) * launch) / (CHAIN - 1)  # us per boundary at each size
    boundary = max(float(np.dot(b / 1e6, per) / np.dot(b / 1e6, b / 1e6)), 0.0)
    if rig.n_devices < 2:
        return RigCosts(launch_us=launch, step_us=max(step, 0.0), boundary_us_per_mb=boundary), raw
    for count, nbytes in [(1, b) for b in sizes] + list(MANY):
        raw["transfers"].append((count, nbytes, *transfer_times(rig, nbytes, count, repeats)))
    c, b, s, a = (np.asarray(x, dtype=np.float64) for x in zip(*raw["transfers"]))
    design = np.stack([np.ones_like(c), c, c * b / 1e6], axis=1)  # fixed, per value, per MB
    (s0, s_v, s_mb), (a0, a_v, a_mb) = (np.linalg.lstsq(design, y, rcond=None)[0] for y in (s, a))
    costs = RigCosts(launch_us=launch, step_us=max(step, 0.0), send_us=max(float(s0), 0.0),
                     send_us_per_value=max(float(s_v), 0.0), send_us_per_mb=max(float(s_mb), 0.0), recv_us=0.0,
                     recv_us_per_value=max(float(a_v), 0.0), recv_us_per_mb=max(float(a_mb), 0.0),
                     latency_us=max(float(a0), 0.0), boundary_us_per_mb=boundary)
    return costs, raw
