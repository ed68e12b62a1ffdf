"""numba kernels mirroring `problem.State`, bit for bit.

Each function mirrors the `problem.State` method of the same name (`place` is `State.commit`) operation for
operation, transfer booking included, so the kernels' floats equal the references' to the last bit. The partial
schedule lives in a `Timeline` of arrays; `prob` is a `problem.ScheduleProblem`.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from placeto.baselines.listsched.problem import ScheduleProblem


class Timeline(NamedTuple):
    """A partial schedule as arrays: times in us, memory in bytes.

    N nodes, D devices, O outputs.
    """

    device: np.ndarray  # int32[N] device of each placed node, -1 if not placed
    start: np.ndarray  # float64[N]
    end: np.ndarray  # float64[N]
    avail: np.ndarray  # float64[D] device free
    chan: np.ndarray  # float64[D] channel free
    arrival: np.ndarray  # float64[O, D] output on device, -1 if not there yet
    used: np.ndarray  # float64[D] bytes charged
    used_p: np.ndarray  # float64[D] persistent bytes charged
    kids_left: np.ndarray  # int64[N] children not placed yet
    changed: np.ndarray  # bool[D] channels the last placement booked (senders and the receiver)
    scratch: np.ndarray  # float64[D] channel copy for dry runs


def new_timeline(prob: ScheduleProblem) -> Timeline:
    """The empty schedule: nothing placed or charged, all free at 0."""
    n, n_dev = prob.cost.shape
    return Timeline(np.full(n, -1, np.int32), np.zeros(n), np.zeros(n), np.zeros(n_dev), np.zeros(n_dev),
                    np.full((prob.latency.size, n_dev), -1.0), np.zeros(n_dev), np.zeros(n_dev),
                    np.diff(prob.ch_off), np.zeros(n_dev, np.bool_), np.zeros(n_dev))


@numba.njit(cache=True)
def tier(v, d, prob, tl):
    """0: v's need fits on d; 1: its persistent bytes fit; 2: neither."""
    if tl.used[d] + prob.need[v] <= prob.capacity[d]:
        return 0
    return 1 if tl.used_p[d] + prob.persistent[v] <= prob.capacity[d] else 2


@numba.njit(cache=True)
def _send(o, q, src, d, chan, record, prob, tl):
    start = max(tl.end[q], chan[src])
    chan[src] = start + prob.busy[o]
    if prob.shared_channel:
        start = max(start, chan[d])
        chan[d] = start + prob.busy[o]
    arrive = start + prob.latency[o]
    if record:
        if prob.copy_per_device:
            tl.arrival[o, d] = arrive
        else:
            for e in range(chan.shape[0]):
                if e != src:
                    tl.arrival[o, e] = arrive
    return arrive


@numba.njit(cache=True)
def _merged(j, q, src, d, prob, tl):
    """Baechi's estimate: q's missing outputs as one transfer.

    On the current channels; nothing is booked.
    """
    start = max(tl.end[q], tl.chan[src])
    if prob.shared_channel:
        start = max(start, tl.chan[d])
    span, last = 0.0, -1
    for i in range(prob.in_off[j], prob.in_off[j + 1]):
        o = prob.in_out[i]
        if tl.arrival[o, d] < 0:
            if last >= 0:
                span += prob.busy[last]
            last = o
    return start + (span + prob.latency[last])


@numba.njit(cache=True)
def ready_time(v, d, commit, prob, tl):
    """(time v's inputs are all on d, whether a transfer is needed).

    With commit, book the transfers and mark the booked channels in tl.changed.
    """
    # Element loops, not slice assignments: the shape check of one can raise, and then numba counts references to
    # every array of prob and tl on each call (about 0.2 us, more than the work on a node with few parents).
    if commit:
        chan = tl.chan
        for e in range(chan.shape[0]):
            tl.changed[e] = False
    else:  # a dry run books on a copy, which only the exact estimate reads
        chan = tl.scratch
        if prob.exact_estimate:
            for e in range(chan.shape[0]):
                chan[e] = tl.chan[e]
    r, any_xfer = 0.0, False
    for j in range(prob.par_off[v], prob.par_off[v + 1]):
        q = prob.par[j]
        src = tl.device[q]
        if src == d:
            r = max(r, tl.end[q])
            continue
        missing = False
        for i in range(prob.in_off[j], prob.in_off[j + 1]):
            o = prob.in_out[i]
            if tl.arrival[o, d] >= 0:
                r = max(r, tl.arrival[o, d])
            else:
                missing = True
        if not missing:
            continue
        any_xfer = True
        if commit:
            tl.changed[src] = True
        if commit or prob.exact_estimate:
            for i in range(prob.in_off[j], prob.in_off[j + 1]):
                o = prob.in_out[i]
                if tl.arrival[o, d] < 0:  # outputs of one pair are distinct, so a booking here is never met again
                    r = max(r, _send(o, q, src, d, chan, commit, prob, tl))
        else:
            r = max(r, _merged(j, q, src, d, prob, tl))
    return r, any_xfer


@numba.njit(cache=True)
def place(v, d, s, prob, tl):
    """Place v on d at the later of s and its booked input-ready time."""
    r, any_xfer = ready_time(v, d, True, prob, tl)
    tl.changed[d] = any_xfer and prob.shared_channel  # the receiver's channel is booked only when shared
    c = prob.cost[v, d]
    tl.device[v] = d
    tl.start[v] = max(s, r)
    tl.end[v] = tl.start[v] + c
    tl.avail[d] = tl.end[v] + prob.delta1 if c > 0 else tl.end[v]
    tl.used[d] += prob.need[v]
    tl.used_p[d] += prob.persistent[v]
    for j in range(prob.par_off[v], prob.par_off[v + 1]):
        q = prob.par[j]
        tl.kids_left[q] -= 1
        if tl.kids_left[q] == 0:
            tl.used[tl.device[q]] -= prob.out_total[q]
