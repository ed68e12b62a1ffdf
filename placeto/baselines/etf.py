"""`etf`: Baechi's m-ETF, earliest task first with memory limits.

A list scheduler that also places. Repeatedly, among the nodes whose parents are all placed, place the (node,
device) pair that can start soonest, given when each device is free and when the node's inputs can be on it;
booking a placement books its transfers on the device channels (transfer and memory model:
`listsched.problem`; the default transfer model is "shared-channel"). Ties: earlier in topological order, then
lower device, as Baechi. The start times it picks never decrease, so its estimated schedule reads like the
simulator's timeline.

Mixed devices (a GPU and the host CPU, devices of other kinds): only the pairs on which their node finishes first
compete (`listsched.problem.earliest_finish`: each device's cost for the node is its kind's), so a node is not
started on an idle device that is many times slower. On identical devices those are the pairs that start first,
and the schedule is Baechi's to the last bit.

With model="baechi" it is the public Baechi m-ETF (placer/m_etf.py) node for node. Each choice scans the ready
set in topological order and stops at the first pair that starts as soon as any can (the floor, or the earliest
free device), so a wide ready set of nodes that can all start now costs O(D) per choice, not O(R * D); the worst
case stays O(N * R * D) for R the largest ready set, plus re-estimating the cached input-ready times a placement
made stale (only for pairs whose static lower bound could still win; measured:
experiments/results/benchmarks/listsched_scaling.md). `listsched.problem.etf_reference` is the
plain oracle and `listsched.baechi_reference.baechi_etf` Baechi's own event loop.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from placeto.baselines.listsched.problem import DEFAULT_TRANSFER_MODEL, Schedule, ScheduleProblem, build_problem
from placeto.baselines.listsched.kernels import new_timeline, place, ready_time, tier
from placeto.baselines.listsched.ready import (Ready, best_tier as ready_best_tier, is_open, list_cached, new_ready,
                                               ready_add, ready_at, ready_remove, ready_sources)
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


def etf(graph: Graph, cluster: Cluster, seed: int = 0, model: str = DEFAULT_TRANSFER_MODEL) -> np.ndarray:
    """Devices int32[N] m-ETF schedules the nodes on.

    Deterministic: `seed` is unused. `model` names a `listsched.problem.TRANSFER_MODELS` entry.
    """
    del seed  # deterministic
    return etf_schedule(build_problem(graph, cluster, model)).device


def etf_schedule(prob: ScheduleProblem) -> Schedule:
    """The m-ETF schedule (fast path of `problem.etf_reference`)."""
    tl = new_timeline(prob)
    _etf_kernel(etf_start(prob), prob, tl)
    return Schedule(tl.device, tl.start, tl.end)


class EtfState(NamedTuple):
    """m-ETF's bookkeeping beside the `kernels.Timeline`. N nodes, D devices.

    The ready set is a `listsched.ready.Ready`: scanned in topological order by `earliest_pair` (ties go to the
    earlier node, so the scan stops at the first pair no later node can beat), its least need and persistent bytes
    telling the best memory tier. A node's cached estimates exist only while it is ready.
    """

    pending: np.ndarray  # int64[N] each node's unplaced parents
    est: np.ndarray  # float64[N, D] cached input-ready estimates
    valid: np.ndarray  # bool[N, D] est is cached (and equal to a fresh estimate)
    xfer: np.ndarray  # bool[N, D] the estimate needs a transfer, so a booked channel can change it
    lower: np.ndarray  # float64[N, D] static lower bounds on the input-ready time
    ready: Ready  # the ready nodes; ready.cached lists those with an estimate that needs a transfer


def etf_start(prob: ScheduleProblem) -> EtfState:
    """m-ETF's bookkeeping before its first choice: the sources are ready."""
    n, n_dev = prob.cost.shape
    st = EtfState(np.diff(prob.par_off).astype(np.int64), np.zeros((n, n_dev)), np.zeros((n, n_dev), np.bool_),
                  np.zeros((n, n_dev), np.bool_), np.zeros((n, n_dev)),
                  new_ready(prob.topo_pos, prob.need, prob.persistent))
    ready_sources(st.ready, prob)
    return st


@numba.njit(cache=True)
def _invalidate(st, prob, tl):
    """Forget the estimates using a channel the last placement booked.

    Baechi's rule, plus the channels of the devices of the node's parents, so a kept estimate equals a fresh one.
    Only the listed nodes can hold such an estimate; a node that holds none any more, or is no longer ready, leaves
    the list.
    """
    n_dev = prob.cost.shape[1]
    k = 0
    rs = st.ready
    for i in range(rs.count[1]):
        w = rs.cached[i]
        keep = False
        if tl.device[w] < 0:  # still ready
            touched = False
            for j in range(prob.par_off[w], prob.par_off[w + 1]):
                touched = touched or tl.changed[tl.device[prob.par[j]]]
            for d in range(n_dev):
                if st.valid[w, d] and st.xfer[w, d]:
                    if touched or tl.changed[d]:
                        st.valid[w, d] = False
                    else:
                        keep = True
        if keep:
            rs.cached[k] = w
            k += 1
        else:
            rs.in_cached[w] = False
    rs.count[1] = k


@numba.njit(cache=True)
def _lower_bound(v, prob, tl, out):
    """Lower bounds out[d] on v's input-ready time on each device d.

    A remote output arrives no earlier than its producer's end plus its latency.
    """
    out[:] = 0.0
    for j in range(prob.par_off[v], prob.par_off[v + 1]):
        q = prob.par[j]
        lat = 0.0
        for i in range(prob.in_off[j], prob.in_off[j + 1]):
            lat = max(lat, prob.latency[prob.in_out[i]])
        for d in range(out.shape[0]):
            out[d] = max(out[d], tl.end[q] + (lat if tl.device[q] != d else 0.0))


@numba.njit(cache=True)
def earliest_pair(best_tier, floor, least_need, least_persistent, st, prob, tl):
    """(start, device, node) of the earliest ready pair.

    Among the pairs of `best_tier` on which their node finishes first (`problem.earliest_finish`), a pair starts at
    max(input-ready, device free, floor); ties: earlier topological position, then lower device. The ready nodes
    are visited in topological order, so a later node wins only by starting strictly sooner; no pair starts before
    `floor` nor before the earliest free device open at the tier, so the scan stops at a pair that starts then.

    A node whose cost is the same on every device (prob.even: its earliest-start pairs are its earliest-finish
    ones) is searched pair by pair, its static lower bounds sparing the estimates that cannot win. For another, a
    device can win only if it could start the node sooner than the best; it is an earliest-finish device only if
    nothing finishes the node sooner (start + slower below its own). So its estimates are made, the lowest bound on
    the finish first, only while their static lower bound could still take the least finish (or tie it); the rest
    cannot change the choice. (Estimates are made here, not by a helper: a call that passes the state tuples costs
    more than the work on a node.)
    """
    n, n_dev = prob.cost.shape
    est, valid, xfer, lower, avail, slower = st.est, st.valid, st.xfer, st.lower, tl.avail, prob.slower
    lowest = np.inf
    for d in range(n_dev):
        if is_open(d, best_tier, least_need, least_persistent, prob, tl):
            lowest = min(lowest, avail[d])
    bound = max(lowest, floor)  # no candidate pair starts sooner
    bs, bd, bv = np.inf, n_dev, -1
    p = ready_at(st.ready, 0)
    while p >= 0 and bs > bound:
        v = st.ready.at_topo[p]
        p = ready_at(st.ready, p + 1)
        if prob.even[v]:
            for d in range(n_dev):
                if tier(v, d, prob, tl) != best_tier:
                    continue
                if not valid[v, d]:
                    if max(max(lower[v, d], avail[d]), floor) >= bs:
                        continue  # its start is at least this bound, so it cannot beat the best
                    est[v, d], xfer[v, d] = ready_time(v, d, False, prob, tl)
                    valid[v, d] = True
                    if xfer[v, d]:
                        list_cached(v, st.ready)
                s = max(max(est[v, d], avail[d]), floor)
                if s < bs:
                    bs, bd, bv = s, d, v
            continue
        can_win = False
        least = np.inf
        for d in range(n_dev):
            if tier(v, d, prob, tl) == best_tier:
                s = max(max(est[v, d] if valid[v, d] else lower[v, d], avail[d]), floor)
                can_win = can_win or s < bs
                if valid[v, d]:
                    least = min(least, s + slower[v, d])
        if not can_win:
            continue
        while True:
            pick, pick_f = -1, np.inf
            for d in range(n_dev):
                if valid[v, d] or tier(v, d, prob, tl) != best_tier:
                    continue
                s = max(max(lower[v, d], avail[d]), floor)
                f = s + slower[v, d]
                if (f < least or (f == least and s < bs)) and f < pick_f:
                    pick, pick_f = d, f
            if pick < 0:
                break
            est[v, pick], xfer[v, pick] = ready_time(v, pick, False, prob, tl)
            valid[v, pick] = True
            if xfer[v, pick]:
                list_cached(v, st.ready)
            least = min(least, max(max(est[v, pick], avail[pick]), floor) + slower[v, pick])
        for d in range(n_dev):
            if valid[v, d] and tier(v, d, prob, tl) == best_tier:
                s = max(max(est[v, d], avail[d]), floor)
                if s + slower[v, d] == least and s < bs:
                    bs, bd, bv = s, d, v
    return bs, bd, bv


@numba.njit(cache=True)
def pop_earliest(t_last, st, prob, tl):
    """m-ETF's next choice, its node taken off the ready set.

    Returns (node, device, start, best tier, floor): `earliest_pair`'s pair among the ready pairs of the lowest
    memory tier, starting no earlier than `t_last` (the last start) nor, outside tier 0, than every device's free
    time (the floor).
    """
    best_tier, least_need, least_persistent = ready_best_tier(st.ready, prob, tl)
    floor = t_last if best_tier == 0 else max(t_last, tl.avail.max())
    bs, bd, v = earliest_pair(best_tier, floor, least_need, least_persistent, st, prob, tl)
    ready_remove(v, st.ready, prob)
    return v, bd, bs, best_tier, floor


@numba.njit(cache=True)
def after_placing(v, st, prob, tl):
    """Update the ready set after placing v (taken off it by `pop_earliest`).

    Forget the estimates the placement made stale and add the children it made ready, with their lower bounds.
    """
    _invalidate(st, prob, tl)
    for j in range(prob.ch_off[v], prob.ch_off[v + 1]):
        w = prob.ch[j]
        st.pending[w] -= 1
        if st.pending[w] == 0:
            _lower_bound(w, prob, tl, st.lower[w])
            ready_add(w, st.ready, prob)


@numba.njit(cache=True)
def _etf_kernel(st, prob, tl):
    t_last = 0.0
    for _ in range(prob.cost.shape[0]):
        v, bd, bs, _, _ = pop_earliest(t_last, st, prob, tl)
        place(v, bd, bs, prob, tl)
        t_last = bs
        after_placing(v, st, prob, tl)
