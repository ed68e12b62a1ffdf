"""`m-sct`: Baechi's memory-aware Small Communication Time placer.

Memory-constrained SCT (Jeon et al. 2020; Baechi's placer/m_sct.py):

1. Favourite children from the LP relaxation of SCT (Hanen & Munier's small-communication-time rule): for
   every distinct edge i -> j a variable x_ij in [0, 1] (0: j is i's favourite child and runs right after it
   on the same device, 1: the edge pays its communication time c_ij), start times s_i >= 0 and the makespan w:

       minimise w  s.t.  s_i + p_i + c_ij * x_ij <= s_j        for every edge i -> j
                         sum_j x_ij >= (children of i) - 1     at most one favourite child per node
                         sum_i x_ij >= (parents of j) - 1      at most one favoured parent per node
                         s_i + p_i <= w

   p_i is the node's mean cost over the devices, c_ij the channel time of the outputs j uses (the transfer
   model's busy time). Solved with scipy's HiGHS (Baechi used MOSEK; the published placements used GLPK), in a
   time unit that keeps its coefficients within a range HiGHS solves (`_lp_unit`). Should HiGHS still report
   anything but an optimum, the favourites come from a greedy rule instead (`greedy_favourites`: the heaviest
   edges first, one favourite child per node and one favoured parent per child), never an error.
2. Rounding: edge i -> j is a favourite edge if round(x_ij - threshold + 0.5) == 0 (Baechi's rule and
   threshold 0.5), assigned in edge order with Baechi's overwrites: a later favourite child of i replaces the
   earlier one, and a later favoured parent of j clears the earlier parent's favourite.
3. Baechi's m-ETF event loop, except that a free device whose last op's favourite child is ready and starts
   earliest there waits for it unless another op is urgent (on mixed devices "finishes earliest there", and a
   device takes only the ops that finish first on it: `listsched.baechi_reference`): `sct_schedule`, numba
   kernels over `listsched.kernels`' timeline, equal bit for bit to the plain oracle
   `listsched.baechi_reference.baechi_sct` (its cached input-ready estimates, ties, event times and memory
   fallback included).

Complexity: the LP (N + P variables) plus the event loop. Each pick scans the ready set in topological order and
stops once every free device has its answer (`_pick`), so a wide ready set of nodes that can start now costs O(D)
per pick; the worst case stays O((N + T) * R * D) for T event times and R the largest ready set. The LP takes most
of the time: on inception_v3 (582 nodes) at 4 K80s the loop takes about 2 ms, the plain oracle about 0.1 s
(experiments/benchmarks/m_sct_speed.py); growth with N: experiments/results/benchmarks/listsched_scaling.md.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import scipy.optimize
import scipy.sparse

from placeto.baselines.listsched.kernels import new_timeline, place, ready_time, tier
from placeto.baselines.listsched.problem import DEFAULT_TRANSFER_MODEL, Schedule, ScheduleProblem, build_problem
from placeto.baselines.listsched.ready import (Ready, best_tier, is_open, list_cached, new_ready, ready_add, ready_at,
                                               ready_remove, ready_sources)
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph

THRESHOLD = 0.5  # Baechi's m_sct default: x <= 0.5 rounds to a favourite edge
LP_RANGE = 1e3  # the largest LP coefficient, in LP time units (`_lp_unit`)
LP_NEGLIGIBLE = 1e-9  # LP times below this many units count as 0
LP_ALL_ROWS = 4096  # graphs of up to this many nodes state every node's makespan row (`_makespan_rows`)


def m_sct(graph: Graph, cluster: Cluster, seed: int = 0, model: str = DEFAULT_TRANSFER_MODEL,
          threshold: float = THRESHOLD) -> np.ndarray:
    """Devices int32[N] m-SCT schedules the nodes on.

    Deterministic: `seed` is unused. `model` names a `listsched.problem.TRANSFER_MODELS` entry; `threshold` rounds
    the LP (module docstring).
    """
    del seed  # deterministic
    prob = build_problem(graph, cluster, model)
    return sct_schedule(prob, favourite_children(prob, threshold)).device


def edges_by_source(prob: ScheduleProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct edges in (source, child) order, as Baechi numbers them.

    Returns:
      (src int64[P], dst int64[P], comm float64[P]): comm is the edge's channel time, us.
    """
    n = prob.cost.shape[0]
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(prob.par_off))
    src = prob.par.astype(np.int64)
    comm = np.add.reduceat(prob.busy[prob.in_out], prob.in_off[:-1]) if prob.in_out.size else np.zeros(0)
    order = np.lexsort((dst, src))
    return src[order], dst[order], comm[order]


class _Rows:
    """Sparse inequalities A @ x <= b, added block by block.

    Row numbers are local to the block.
    """

    def __init__(self):
        self.rows, self.cols, self.vals, self.rhs = [], [], [], []

    def add(self, row: np.ndarray, col: np.ndarray, val: np.ndarray, rhs: np.ndarray) -> None:
        self.rows.append(sum(b.size for b in self.rhs) + row)
        self.cols.append(col)
        self.vals.append(val)
        self.rhs.append(rhs)

    def build(self, n_var: int) -> tuple[scipy.sparse.csr_matrix, np.ndarray]:
        b = np.concatenate(self.rhs)
        a = scipy.sparse.csr_matrix((np.concatenate(self.vals), (np.concatenate(self.rows),
                                                                 np.concatenate(self.cols))), shape=(b.size, n_var))
        return a, b


def relaxed_favourites(prob: ScheduleProblem) -> np.ndarray:
    """The LP's x float64[P] per edge of `edges_by_source`; `greedy_favourites` where HiGHS finds no optimum.

    0: a favourite edge; 1: the edge pays its communication time.
    """
    x = solve_lp(prob)
    return greedy_favourites(prob) if x is None else x


def solve_lp(prob: ScheduleProblem, all_rows: int = LP_ALL_ROWS) -> np.ndarray | None:
    """The LP's x float64[P] per edge of `edges_by_source`, or None when HiGHS reports anything but an optimum.

    all_rows: up to this many nodes the LP states every node's makespan row, above only the sinks'
    (`_makespan_rows`).
    """
    n = prob.cost.shape[0]
    src, dst, comm = edges_by_source(prob)
    n_e = src.size
    if n_e == 0:
        return np.zeros(0)
    p = prob.cost.mean(axis=1)
    # In units of the mean op cost: HiGHS's tolerances are absolute (1e-7), so in microseconds they would choose
    # among the LP's many optimal vertices differently for the same graph in other units
    # (simulator.model.scaling.scale_units).
    unit = _lp_unit(p, comm)
    p, comm = p / unit, comm / unit
    comm = np.where(comm < LP_NEGLIGIBLE, 0.0, comm)  # HiGHS would drop these matrix entries with a warning
    e, s_var, w_var = np.arange(n_e), n_e + np.arange(n), n_e + n  # variables: [x (P), s (N), w]
    lp = _Rows()
    lp.add(np.repeat(e, 3), np.stack([s_var[src], s_var[dst], e], 1).ravel(),  # s_i - s_j + c_ij x_ij <= -p_i
           np.stack([np.ones(n_e), -np.ones(n_e), comm], 1).ravel(), -p[src])
    for side in (src, dst):  # -sum x <= 1 - count: one row per node with children, then per node with parents
        count = np.bincount(side, minlength=n)
        has = np.flatnonzero(count)
        row_of = np.full(n, -1)
        row_of[has] = np.arange(has.size)
        lp.add(row_of[side], e, -np.ones(n_e), 1.0 - count[has])
    # s_i - w <= -p_i; above all_rows nodes only for the sinks (`_makespan_rows`)
    sink = _makespan_rows(prob, all_rows)
    lp.add(np.repeat(np.arange(sink.size), 2), np.stack([s_var[sink], np.full(sink.size, w_var)], 1).ravel(),
           np.tile([1.0, -1.0], sink.size), -p[sink])
    a, b = lp.build(w_var + 1)
    c = np.zeros(w_var + 1)
    c[w_var] = 1.0
    bounds = [(0.0, 1.0)] * n_e + [(0.0, None)] * (n + 1)
    res = scipy.optimize.linprog(c, A_ub=a, b_ub=b, bounds=bounds, method="highs")
    if res.status != 0 or res.x is None:
        return None
    return res.x[:n_e]


def _makespan_rows(prob: ScheduleProblem, all_rows: int) -> np.ndarray:
    """int64[:] the nodes i whose makespan row s_i + p_i <= w the LP states.

    Every node's up to `all_rows` nodes (default LP_ALL_ROWS), as Baechi's LP; above, only the sinks': another
    node's row follows from a child's (s_i + p_i <= s_j - c_ij * x_ij <= s_j + p_j <= w, as p, c and x are >= 0), so
    the feasible set and the optimum are the same, but with every row HiGHS takes time quadratic in the graph (a
    chain of 10,000 nodes: 2.1 s, against 0.10 s; experiments/results/benchmarks/listsched_scaling.md). Where the LP
    has several optimal vertices HiGHS may then return another one, so below the size the rows stay Baechi's (the
    shipped graphs have at most 1,319 nodes).
    """
    n = prob.cost.shape[0]
    return np.arange(n) if n <= all_rows else np.flatnonzero(np.diff(prob.ch_off) == 0)


def _lp_unit(cost: np.ndarray, comm: np.ndarray) -> float:
    """The LP's time unit, us: the mean positive node cost, raised to a LP_RANGE-th of the largest time.

    The mean positive node cost (else the mean positive communication time, else 1) keeps the LP's vertex choice
    independent of the graph's time unit. Raised so that no coefficient exceeds LP_RANGE units: HiGHS refuses
    matrix entries above 1e15 ("Model error") and, with entries 1e6 to 1e11 apart (tensors near
    simulator.model.limits.MAX_BYTES beside microsecond ops), takes minutes or stops without an optimum. Times
    below LP_NEGLIGIBLE units then count as 0: at most a 1e-9 fraction of the largest one, far below HiGHS's 1e-7
    tolerances. On the shipped graphs the largest time is at most about 100 mean costs, so the rule changes nothing
    there.

    Args:
      cost: float64[N] mean node costs, us.
      comm: float64[P] edge communication times, us.
    """
    unit = 1.0
    for x in (cost, comm):
        pos = x[x > 0]
        if pos.size:
            unit = float(pos.mean())
            break
    largest = max(float(cost.max(initial=0.0)), float(comm.max(initial=0.0)))
    return max(unit, largest / LP_RANGE)


def greedy_favourites(prob: ScheduleProblem) -> np.ndarray:
    """x float64[P] per edge of `edges_by_source` without the LP: 0 on a greedy set of favourite edges, else 1.

    The fallback when HiGHS reports no optimum. Edges by decreasing communication time (ties: edge order); an
    edge becomes favourite when its source has no favourite child yet and its child no favoured parent, so the
    most expensive transfers are the ones saved, as the LP aims to (a greedy matching, where the LP's relaxation
    can choose better when the heavy edges share nodes). Zero-time edges are never favourite: there is nothing
    to save.
    """
    src, dst, comm = edges_by_source(prob)
    x = np.ones(src.size)
    has_child = np.zeros(prob.cost.shape[0], np.bool_)
    has_parent = np.zeros(prob.cost.shape[0], np.bool_)
    for e in np.lexsort((np.arange(src.size), -comm)).tolist():
        i, j = int(src[e]), int(dst[e])
        if comm[e] > 0 and not has_child[i] and not has_parent[j]:
            x[e], has_child[i], has_parent[j] = 0.0, True, True
    return x


def favourite_children(prob: ScheduleProblem, threshold: float = THRESHOLD) -> np.ndarray:
    """Each node's favourite child int64[N] (-1: none) from the LP.

    Edges are assigned in Baechi's order, with its overwrites (module docstring, step 2).
    """
    src, dst, _ = edges_by_source(prob)
    favourite_edge = np.round(relaxed_favourites(prob) - threshold + 0.5) == 0
    fav = [-1] * prob.cost.shape[0]
    parent = [-1] * prob.cost.shape[0]
    for i, j in zip(src[favourite_edge].tolist(), dst[favourite_edge].tolist()):
        fav[i] = j
        if parent[j] != -1:
            fav[parent[j]] = -1
        parent[j] = i
    return np.asarray(fav, dtype=np.int64)


# ---- the event loop (fast path of baechi_reference.baechi_sct) ----------------------------------------------
# The kernels fill arrays element by element, not by slice assignment: the shape check of one can raise, and then
# numba counts references to every array of the tuples on each call (kernels.ready_time has the same comment).
def sct_schedule(prob: ScheduleProblem, favourite: np.ndarray) -> Schedule:
    """The m-SCT schedule with these favourite children: the fast path of `baechi_reference.baechi_sct`.

    favourite: int[N] the child each node's device waits for; -1 (or any value outside [0, N), as in the reference):
    none.
    """
    n = prob.cost.shape[0]
    fav = np.asarray(favourite).astype(np.int64)
    if fav.shape != (n,):
        raise ValueError(f"m-sct: favourite must have shape ({n},), got {fav.shape}")
    tl = new_timeline(prob)
    _sct_kernel(prob, tl, _new_loop(prob, np.where((fav >= 0) & (fav < n), fav, -1)))
    return Schedule(tl.device, tl.start, tl.end)


class _Loop(NamedTuple):
    """`baechi_reference._Loop`'s state beside the `kernels.Timeline`, as arrays. N nodes, D devices.

    The ready nodes are a `listsched.ready.Ready`, scanned in topological order by `_pick`; a node's cached
    estimates exist only while it is ready. tss and fit are the reference's schedule times and memory fits, fresh
    for the nodes the last scan visited; state, fc, fc_now, later and least_hi are what that scan found per device.
    """

    fav: np.ndarray  # int64[N] favourite child, -1: none
    waiting: np.ndarray  # int64[N] parents not ended yet
    releases: np.ndarray  # int64[N] releases[:count[0]] placed nodes whose children wait for their end
    count: np.ndarray  # int64[2] releases, placed nodes
    last_op: np.ndarray  # int64[D] the last node placed on the device, -1: none
    awake: np.ndarray  # bool[D] the device waits for its last node's favourite child
    est: np.ndarray  # float64[N, D] cached input-ready estimates (Baechi's ready_tss)
    valid: np.ndarray  # bool[N, D] est is cached
    xfer: np.ndarray  # bool[N, D] the estimate needs a transfer (its senders are not empty)
    tss: np.ndarray  # float64[N, D] schedule time: max(estimate, device free), where fit
    fit: np.ndarray  # bool[N, D] the node's need fits on the device (memory tier 0)
    state: np.ndarray  # int64[D] in a scan: 0 busy or decided, 1 free and not awake, 2 awake
    fc: np.ndarray  # int64[D] an awake device's favourite child
    fc_now: np.ndarray  # bool[D] the favourite child's schedule time on the device has come
    later: np.ndarray  # float64[D] the earliest schedule time after now of a ready node fitting the device (inf)
    least_hi: np.ndarray  # float64[D] the least urgent time of a ready node fitting the device (inf: none)
    changed: np.ndarray  # bool[D] the channels the placement being made books, and its device
    ready: Ready  # the ready nodes; ready.cached lists those that may hold an estimate needing a transfer


def _new_loop(prob: ScheduleProblem, fav: np.ndarray) -> _Loop:
    """Nothing placed: the sources are ready."""
    n, n_dev = prob.cost.shape
    lp = _Loop(fav, np.diff(prob.par_off).astype(np.int64), np.zeros(n, np.int64), np.zeros(2, np.int64),
               np.full(n_dev, -1, np.int64), np.zeros(n_dev, np.bool_), np.zeros((n, n_dev)),
               np.zeros((n, n_dev), np.bool_), np.zeros((n, n_dev), np.bool_), np.zeros((n, n_dev)),
               np.zeros((n, n_dev), np.bool_), np.zeros(n_dev, np.int64), np.full(n_dev, -1, np.int64),
               np.zeros(n_dev, np.bool_), np.full(n_dev, np.inf), np.full(n_dev, np.inf), np.zeros(n_dev, np.bool_),
               new_ready(prob.topo_pos, prob.need, prob.persistent))
    ready_sources(lp.ready, prob)
    return lp


@numba.njit(cache=True)
def _is_ready(v, tl, lp):
    return lp.waiting[v] == 0 and tl.device[v] < 0


@numba.njit(cache=True)
def _release(now, prob, tl, lp):
    """The placed nodes ended by `now` release their children; a child whose parents have all ended is ready."""
    end, releases, count, waiting = tl.end, lp.releases, lp.count, lp.waiting
    i = 0
    while i < count[0]:
        v = releases[i]
        if end[v] > now:
            i += 1
            continue
        count[0] -= 1
        releases[i] = releases[count[0]]
        for j in range(prob.ch_off[v], prob.ch_off[v + 1]):
            c = prob.ch[j]
            waiting[c] -= 1
            if waiting[c] == 0:
                ready_add(c, lp.ready, prob)


@numba.njit(cache=True, inline="always")
def _visit(v, prob, tl, lp):
    """(urgent time, least tss + slower) of ready node v over the devices it fits (-inf, inf: none); fills its
    fit and tss, estimating (the reference's _estimate) where no estimate is cached."""
    last, least = -np.inf, np.inf
    for d in range(prob.cost.shape[1]):
        lp.fit[v, d] = tier(v, d, prob, tl) == 0
        if lp.fit[v, d]:
            if not lp.valid[v, d]:
                lp.est[v, d], lp.xfer[v, d] = ready_time(v, d, False, prob, tl)
                lp.valid[v, d] = True
                if lp.xfer[v, d]:
                    list_cached(v, lp.ready)
            t = max(lp.est[v, d], tl.avail[d])
            lp.tss[v, d] = t
            last, least = max(last, t), min(least, t + prob.slower[v, d])
    return last, least


@numba.njit(cache=True)
def _pick(now, prob, tl, lp):
    """(node, device) to place now, (-1, -1): none; sets awake, and (when nothing is picked) what `_next_time`
    reads.

    Each free device's pick (Baechi's get_op_to_schedule): if its last node's favourite child is ready and suits it
    (finishes first there of the devices it fits), the device waits for that child ("awake") unless its most urgent
    node's urgent time has come and that node suits it; else its earliest suiting node if that time has come. Of the
    picks, the earliest (schedule time, position) wins, the lower device on ties.

    Every device is free at now or later, so a pick starts now: a free device's earliest suiting node is then the
    first in topological order whose schedule time there is now and that suits it, and an awake device's most
    urgent node, if its time has come, the first fitting it whose urgent time is now. So the ready nodes are
    scanned in topological order, and the scan stops once every free device has its answer, or once a pick is
    found and no undecided device could pick an earlier node (only an awake one, its favourite child, can). When
    nothing is picked and a free device is not decided, the scan has visited every ready node.
    """
    n_dev, topo, avail, slower, rs = prob.cost.shape[1], prob.topo_pos, tl.avail, prob.slower, lp.ready
    state, fc, fc_now, later, least_hi, tss, fit = lp.state, lp.fc, lp.fc_now, lp.later, lp.least_hi, lp.tss, lp.fit
    open_ = 0
    for d in range(n_dev):
        lp.awake[d], state[d], later[d], least_hi[d] = False, 0, np.inf, np.inf
        if avail[d] > now:
            continue
        state[d], open_ = 1, open_ + 1
        f = lp.fav[lp.last_op[d]] if lp.last_op[d] >= 0 else -1
        if f >= 0 and _is_ready(f, tl, lp):
            _, first = _visit(f, prob, tl, lp)
            if fit[f, d] and tss[f, d] + slower[f, d] == first:
                lp.awake[d], state[d], fc[d], fc_now[d] = True, 2, f, tss[f, d] <= now
    bv, bd, bp = -1, -1, 0
    p = ready_at(rs, 0)
    while p >= 0 and open_ > 0:
        if bv >= 0 and p > bp:
            can_win = False
            for d in range(n_dev):
                if state[d] == 2 and fc_now[d] and (topo[fc[d]] < bp or (topo[fc[d]] == bp and d < bd)):
                    can_win = True
            if not can_win:
                break
        v = rs.at_topo[p]
        p = ready_at(rs, p + 1)
        hi, first = _visit(v, prob, tl, lp)
        for d in range(n_dev):
            if not fit[v, d]:
                continue
            if tss[v, d] > now:
                later[d] = min(later[d], tss[v, d])
            least_hi[d] = min(least_hi[d], hi)
            suits = tss[v, d] + slower[v, d] == first
            pick = -1
            if state[d] == 1 and tss[v, d] <= now and suits:
                state[d], open_, pick = 0, open_ - 1, v
            elif state[d] == 2 and hi <= now:  # v is d's most urgent node, and its time has come
                state[d], open_ = 0, open_ - 1
                pick = v if suits else (fc[d] if fc_now[d] else -1)
            if pick >= 0 and (bv < 0 or topo[pick] < bp or (topo[pick] == bp and d < bd)):
                bv, bd, bp = pick, d, topo[pick]
    for d in range(n_dev):  # an awake device whose most urgent node's time has not come: its favourite child
        if state[d] == 2 and fc_now[d] and (bv < 0 or topo[fc[d]] < bp or (topo[fc[d]] == bp and d < bd)):
            bv, bd, bp = fc[d], d, topo[fc[d]]
    return bv, bd


@numba.njit(cache=True)
def _next_time(now, prob, tl, lp):
    """(found, time) of the next event, after a pick found nothing to run.

    The earliest pending release, busy device's free time, awake device's favourite child's schedule time and
    most urgent node's urgent time (if it is to come), and other free device's earliest schedule time after now of
    any node (`_pick`'s later). found is False when there is none.
    """
    end, avail, awake = tl.end, tl.avail, lp.awake
    found, nxt = False, np.inf
    for i in range(lp.count[0]):
        e = end[lp.releases[i]]
        if e > now:
            found, nxt = True, min(nxt, e)
    for d in range(prob.cost.shape[1]):
        if avail[d] > now:  # busy
            found, nxt = True, min(nxt, avail[d])
        elif awake[d]:  # set by the last pick, so the favourite child is ready and fits on d
            found, nxt = True, min(nxt, lp.tss[lp.fc[d], d])
            if now < lp.least_hi[d] < np.inf:
                found, nxt = True, min(nxt, lp.least_hi[d])
        elif lp.later[d] < np.inf:
            found, nxt = True, min(nxt, lp.later[d])
    if found and nxt <= now:
        raise AssertionError("m-sct: the next event time does not move forward")  # Baechi's assertion
    return found, nxt


@numba.njit(cache=True)
def _without_memory(now, prob, tl, lp):
    """(node, device, start) of the earliest best-tier pair, when nothing fits and nothing runs.

    Among each node's best-tier pairs on which it finishes first (`problem.earliest_finish`), start
    max(estimate, device free, now); ties: topological position, then lower device. Scanned in topological order,
    so a later node wins only by starting sooner; none starts before now nor the earliest free device open at the
    tier, so the scan stops at a pair that starts then.
    """
    n_dev, avail, valid, est, xfer, rs = prob.cost.shape[1], tl.avail, lp.valid, lp.est, lp.xfer, lp.ready
    low, least_need, least_persistent = best_tier(rs, prob, tl)
    bound = np.inf
    for d in range(n_dev):
        if is_open(d, low, least_need, least_persistent, prob, tl):
            bound = min(bound, avail[d])
    bound = max(bound, now)
    bv, bd, bs = -1, -1, np.inf
    p = ready_at(rs, 0)
    while p >= 0 and bs > bound:
        v = rs.at_topo[p]
        p = ready_at(rs, p + 1)
        least = np.inf
        for d in range(n_dev):
            if tier(v, d, prob, tl) == low:
                if not valid[v, d]:
                    est[v, d], xfer[v, d] = ready_time(v, d, False, prob, tl)
                    valid[v, d] = True
                    if xfer[v, d]:
                        list_cached(v, rs)
                least = min(least, max(max(est[v, d], avail[d]), now) + prob.slower[v, d])
        for d in range(n_dev):
            if tier(v, d, prob, tl) == low:
                s = max(max(est[v, d], avail[d]), now)
                if s + prob.slower[v, d] == least and s < bs:
                    bv, bd, bs = v, d, s
    if bv < 0:
        raise AssertionError("m-sct: no node is ready")
    return bv, bd, bs


@numba.njit(cache=True)
def _sends(j, e, prob, tl):
    """Whether parent pair j must send to device e: its parent is elsewhere and an output it gives is not on e."""
    if tl.device[prob.par[j]] == e:
        return False
    for i in range(prob.in_off[j], prob.in_off[j + 1]):
        if tl.arrival[prob.in_out[i], e] < 0:
            return True
    return False


@numba.njit(cache=True)
def _forget(v, d, prob, tl, lp):
    """Forget the estimates that placing v on d makes stale, before the placement is booked.

    The reference's rule: v's own, and each one that needs a transfer whose device, or a device sending to it, is d
    or sends v's inputs (changed). The reference keeps each estimate's senders; here they are read off the timeline
    as it is before the booking, where they are the same: an estimate is kept only while no booking touched its
    senders' channels nor its device, so none of its missing inputs has arrived since. Only the listed nodes can
    hold an estimate that needs a transfer; one that holds none any more, or is not ready, leaves the list.
    """
    device, par, par_off, valid, xfer, changed, rs = tl.device, prob.par, prob.par_off, lp.valid, lp.xfer, \
        lp.changed, lp.ready
    for e in range(prob.cost.shape[1]):
        changed[e], valid[v, e] = False, False
    for j in range(par_off[v], par_off[v + 1]):
        if _sends(j, d, prob, tl):
            changed[device[par[j]]] = True
    changed[d] = True
    k = 0
    for i in range(rs.count[1]):
        w = rs.cached[i]
        keep = False
        if w != v and device[w] < 0:
            for e in range(prob.cost.shape[1]):
                if not (valid[w, e] and xfer[w, e]):
                    continue
                stale = changed[e]
                j = par_off[w]
                while not stale and j < par_off[w + 1]:
                    stale = changed[device[par[j]]] and _sends(j, e, prob, tl)
                    j += 1
                if stale:
                    valid[w, e] = False
                else:
                    keep = True
        if keep:
            rs.cached[k] = w
            k += 1
        else:
            rs.in_cached[w] = False
    rs.count[1] = k


@numba.njit(cache=True)
def _place(v, d, now, prob, tl, lp):
    """Book v on d from `now` (the reference's _place); a zero-cost v's children are ready at once."""
    _forget(v, d, prob, tl, lp)
    ready_remove(v, lp.ready, prob)
    place(v, d, now, prob, tl)
    lp.last_op[d] = v
    lp.count[1] += 1
    lp.releases[lp.count[0]] = v
    lp.count[0] += 1
    _release(now, prob, tl, lp)


@numba.njit(cache=True)
def _sct_kernel(prob, tl, lp):
    """The reference's run(): at each event time advance, place the picks, then move to the next event time."""
    n, n_dev = prob.cost.shape
    now = 0.0
    while lp.count[1] < n:
        for d in range(n_dev):
            tl.avail[d] = max(tl.avail[d], now)
        _release(now, prob, tl, lp)
        while True:
            v, d = _pick(now, prob, tl, lp)
            if v < 0:
                break
            _place(v, d, now, prob, tl, lp)
        if lp.count[1] == n:
            break
        found, nxt = _next_time(now, prob, tl, lp)
        if found:
            now = nxt
        else:
            v, d, now = _without_memory(now, prob, tl, lp)
            _place(v, d, now, prob, tl, lp)
