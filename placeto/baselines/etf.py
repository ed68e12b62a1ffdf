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

With model="baechi" it is the public Baechi m-ETF (placer/m_etf.py) node for node. Complexity O(N * R * D) for
R the largest ready set, plus re-estimating the cached input-ready times a placement made stale (only for pairs
whose static lower bound could still win; timing: docs/commands.md). `listsched.problem.etf_reference` is the
plain oracle and `listsched.baechi_reference.baechi_etf` Baechi's own event loop.
"""

from __future__ import annotations

import numba
import numpy as np

from placeto.baselines.listsched.problem import DEFAULT_TRANSFER_MODEL, Schedule, ScheduleProblem, build_problem
from placeto.baselines.listsched.kernels import new_timeline, place, ready_time, tier
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
    _etf_kernel(prob, tl)
    return Schedule(tl.device, tl.start, tl.end)


@numba.njit(cache=True)
def _best_tier(ready, n_ready, prob, tl):
    """The lowest memory tier of any ready (node, device) pair.

    Tiers: `listsched.kernels.tier`.
    """
    best = 2
    for i in range(n_ready):
        for d in range(prob.cost.shape[1]):
            best = min(best, tier(ready[i], d, prob, tl))
            if best == 0:
                return 0
    return best


@numba.njit(cache=True)
def _invalidate(ready, n_ready, prob, tl, valid, xfer):
    """Forget the estimates using a channel the last placement booked.

    Baechi's rule, plus the channels of the devices of the node's parents.
    """
    for i in range(n_ready):
        w = ready[i]
        touched = False
        for j in range(prob.par_off[w], prob.par_off[w + 1]):
            touched = touched or tl.changed[tl.device[prob.par[j]]]
        for d in range(prob.cost.shape[1]):
            if valid[w, d] and xfer[w, d] and (touched or tl.changed[d]):
                valid[w, d] = False


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
def earliest_pair(ready, n_ready, best_tier, floor, prob, tl, est, valid, xfer, lower):
    """(start, device, index in ready) of the earliest ready pair.

    Among the pairs of `best_tier` on which their node finishes first (`problem.earliest_finish`), a pair starts at
    max(input-ready, device free, floor); ties: earlier topological position, then lower device. A node whose cost
    is the same on every device (prob.even: its earliest-start pairs are its earliest-finish ones) is searched pair
    by pair, cached estimates first, so the static lower bounds prune more of the stale ones, which are
    re-estimated; the other nodes after them, node by node (`_uneven_pairs`), those with enough fresh estimates
    first.
    """
    n, n_dev = prob.cost.shape
    bs, bt, bd, bi = np.inf, n, n_dev, -1
    for stale in (False, True):
        for i in range(n_ready):
            v = ready[i]
            if not prob.even[v]:
                continue
            for d in range(n_dev):
                if valid[v, d] == stale or tier(v, d, prob, tl) != best_tier:
                    continue
                if stale:
                    if (max(max(lower[v, d], tl.avail[d]), floor), prob.topo_pos[v], d) >= (bs, bt, bd):
                        continue  # its start is at least this bound, so it cannot beat the best
                    est[v, d], xfer[v, d] = ready_time(v, d, False, prob, tl)
                    valid[v, d] = True
                s = max(max(est[v, d], tl.avail[d]), floor)
                if (s, prob.topo_pos[v], d) < (bs, bt, bd):
                    bs, bt, bd, bi = s, prob.topo_pos[v], d, i
    for refresh in (False, True):
        for i in range(n_ready):
            v = ready[i]
            if prob.even[v]:
                continue
            # v's earliest pair among its earliest-finish pairs. A device can win only if it could start v before
            # the best; it is an earliest-finish device only if nothing finishes v sooner (start + slower below its
            # own). So stale estimates are made fresh, the lowest bound on the finish first, only while their
            # static lower bound could still take the least finish (a device that could win: or tie it); the rest
            # cannot change the choice. Without refresh, a node that would need one waits for the second round (a
            # good best found cheaply first).
            can_win = False
            least = np.inf
            for d in range(n_dev):
                if tier(v, d, prob, tl) == best_tier:
                    s = max(max(est[v, d] if valid[v, d] else lower[v, d], tl.avail[d]), floor)
                    can_win = can_win or (s, prob.topo_pos[v]) < (bs, bt)
                    if valid[v, d]:
                        least = min(least, s + prob.slower[v, d])
            if not can_win:
                continue
            skip = False
            while not skip:
                pick, pick_f = -1, np.inf
                for d in range(n_dev):
                    if valid[v, d] or tier(v, d, prob, tl) != best_tier:
                        continue
                    s = max(max(lower[v, d], tl.avail[d]), floor)
                    f = s + prob.slower[v, d]
                    if (f < least or (f == least and (s, prob.topo_pos[v]) < (bs, bt))) and f < pick_f:
                        pick, pick_f = d, f
                if pick < 0:
                    break
                if not refresh:
                    skip = True
                    break
                est[v, pick], xfer[v, pick] = ready_time(v, pick, False, prob, tl)
                valid[v, pick] = True
                least = min(least, max(max(est[v, pick], tl.avail[pick]), floor) + prob.slower[v, pick])
            if skip:
                continue
            for d in range(n_dev):
                if valid[v, d] and tier(v, d, prob, tl) == best_tier:
                    s = max(max(est[v, d], tl.avail[d]), floor)
                    if s + prob.slower[v, d] == least and (s, prob.topo_pos[v], d) < (bs, bt, bd):
                        bs, bt, bd, bi = s, prob.topo_pos[v], d, i
    return bs, bd, bi


@numba.njit(cache=True)
def etf_start(prob):
    """m-ETF's bookkeeping before its first choice.

    Returns:
      (pending, ready, n_ready, est, valid, xfer, lower): pending int64[N], each node's unplaced parents; ready
      int64[N], whose first n_ready entries are the sources; and per (node, device) the cached input-ready
      estimates est float64[N, D], their validity valid bool[N, D], whether they need a transfer xfer
      bool[N, D] (so channels can change them) and their static lower bounds lower float64[N, D].
    """
    n, n_dev = prob.cost.shape
    pending = prob.par_off[1:] - prob.par_off[:-1]
    ready = np.empty(n, np.int64)  # ready[:n_ready] unordered; ties are broken by topological position
    n_ready = 0
    for v in range(n):
        if pending[v] == 0:
            ready[n_ready] = v
            n_ready += 1
    return (pending, ready, n_ready, np.zeros((n, n_dev)), np.zeros((n, n_dev), np.bool_),
            np.zeros((n, n_dev), np.bool_), np.zeros((n, n_dev)))


@numba.njit(cache=True)
def pop_earliest(ready, n_ready, t_last, prob, tl, est, valid, xfer, lower):
    """m-ETF's next choice, its node taken off ready.

    Returns (node, device, start, best tier, floor, new n_ready): `earliest_pair`'s pair among the ready pairs of
    the lowest memory tier, starting no earlier than `t_last` (the last start) nor, outside tier 0, than every
    device's free time (the floor).
    """
    best_tier = _best_tier(ready, n_ready, prob, tl)
    floor = t_last if best_tier == 0 else max(t_last, tl.avail.max())
    bs, bd, bi = earliest_pair(ready, n_ready, best_tier, floor, prob, tl, est, valid, xfer, lower)
    v = ready[bi]
    ready[bi] = ready[n_ready - 1]
    return v, bd, bs, best_tier, floor, n_ready - 1


@numba.njit(cache=True)
def after_placing(v, ready, n_ready, pending, prob, tl, valid, xfer, lower):
    """Update ready after placing v; returns the new n_ready.

    v was placed and taken off ready: forget the estimates it made stale and add the children it made ready, with
    their lower bounds.
    """
    _invalidate(ready, n_ready, prob, tl, valid, xfer)
    for j in range(prob.ch_off[v], prob.ch_off[v + 1]):
        w = prob.ch[j]
        pending[w] -= 1
        if pending[w] == 0:
            _lower_bound(w, prob, tl, lower[w])
            ready[n_ready] = w
            n_ready += 1
    return n_ready


@numba.njit(cache=True)
def _etf_kernel(prob, tl):
    pending, ready, n_ready, est, valid, xfer, lower = etf_start(prob)
    t_last = 0.0
    for _ in range(prob.cost.shape[0]):
        v, bd, bs, _, _, n_ready = pop_earliest(ready, n_ready, t_last, prob, tl, est, valid, xfer, lower)
        place(v, bd, bs, prob, tl)
        t_last = bs
        n_ready = after_placing(v, ready, n_ready, pending, prob, tl, valid, xfer, lower)
