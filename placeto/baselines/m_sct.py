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

Complexity: the LP (N + P variables) plus the event loop, O((N + T) * R * D) for T event times and R the largest
ready set (every pick rebuilds the ready nodes' schedule times from the cached estimates). The LP takes most of the
time: on inception_v3 (582 nodes) at 4 K80s the loop takes about 2 ms, the plain oracle about 0.1 s
(experiments/benchmarks/m_sct_speed.py).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import scipy.optimize
import scipy.sparse

from placeto.baselines.listsched.kernels import new_timeline, place, ready_time, tier
from placeto.baselines.listsched.problem import DEFAULT_TRANSFER_MODEL, Schedule, ScheduleProblem, build_problem
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph

THRESHOLD = 0.5  # Baechi's m_sct default: x <= 0.5 rounds to a favourite edge
LP_RANGE = 1e3  # the largest LP coefficient, in LP time units (`_lp_unit`)
LP_NEGLIGIBLE = 1e-9  # LP times below this many units count as 0


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


def solve_lp(prob: ScheduleProblem) -> np.ndarray | None:
    """The LP's x float64[P] per edge of `edges_by_source`, or None when HiGHS reports anything but an optimum."""
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
    lp.add(np.repeat(np.arange(n), 2), np.stack([s_var, np.full(n, w_var)], 1).ravel(),  # s_i - w <= -p_i
           np.tile([1.0, -1.0], n), -p)
    a, b = lp.build(w_var + 1)
    c = np.zeros(w_var + 1)
    c[w_var] = 1.0
    bounds = [(0.0, 1.0)] * n_e + [(0.0, None)] * (n + 1)
    res = scipy.optimize.linprog(c, A_ub=a, b_ub=b, bounds=bounds, method="highs")
    if res.status != 0 or res.x is None:
        return None
    return res.x[:n_e]


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
    """`baechi_reference._Loop`'s state beside the `kernels.Timeline`, as arrays.

    N nodes, D devices. A node's cached estimates exist only while it is ready. tss, fit, hi, first, earliest,
    urgent and later are the reference's tss and what it reads off them, rebuilt for the ready nodes before every
    pick.
    """

    fav: np.ndarray  # int64[N] favourite child, -1: none
    waiting: np.ndarray  # int64[N] parents not ended yet
    ready: np.ndarray  # int64[N] ready[:count[0]] the ready nodes, unordered (every choice breaks ties by topo_pos)
    slot: np.ndarray  # int64[N] index of the node in ready, -1: not ready
    releases: np.ndarray  # int64[N] releases[:count[1]] placed nodes whose children wait for their end
    count: np.ndarray  # int64[3] ready nodes, releases, placed nodes
    last_op: np.ndarray  # int64[D] the last node placed on the device, -1: none
    awake: np.ndarray  # bool[D] the device waits for its last node's favourite child
    est: np.ndarray  # float64[N, D] cached input-ready estimates (Baechi's ready_tss)
    valid: np.ndarray  # bool[N, D] est is cached
    xfer: np.ndarray  # bool[N, D] the estimate needs a transfer (its senders are not empty)
    tss: np.ndarray  # float64[N, D] schedule time: max(estimate, device free), where fit
    fit: np.ndarray  # bool[N, D] the node's need fits on the device (memory tier 0)
    hi: np.ndarray  # float64[N] latest schedule time over the devices it fits: the urgent time (-inf: none)
    first: np.ndarray  # float64[N] least tss + slower over the devices it fits: the devices reaching it suit the node
    earliest: np.ndarray  # int64[D] the ready node suiting the device with the earliest (tss, position), -1: none
    urgent: np.ndarray  # int64[D] the one fitting it with the earliest (urgent time, position), -1: none
    later: np.ndarray  # float64[D] the earliest schedule time on the device after now of any node fitting it (inf)
    changed: np.ndarray  # bool[D] the channels the placement being made books, and its device


def _new_loop(prob: ScheduleProblem, fav: np.ndarray) -> _Loop:
    """Nothing placed: the sources are ready."""
    n, n_dev = prob.cost.shape
    waiting = np.diff(prob.par_off).astype(np.int64)
    sources = np.flatnonzero(waiting == 0)
    ready, slot = np.zeros(n, np.int64), np.full(n, -1, np.int64)
    ready[:sources.size] = sources
    slot[sources] = np.arange(sources.size)
    return _Loop(fav, waiting, ready, slot, np.zeros(n, np.int64), np.array([sources.size, 0, 0], np.int64),
                 np.full(n_dev, -1, np.int64), np.zeros(n_dev, np.bool_), np.zeros((n, n_dev)),
                 np.zeros((n, n_dev), np.bool_), np.zeros((n, n_dev), np.bool_), np.zeros((n, n_dev)),
                 np.zeros((n, n_dev), np.bool_), np.full(n, -np.inf), np.full(n, np.inf),
                 np.full(n_dev, -1, np.int64), np.full(n_dev, -1, np.int64), np.full(n_dev, np.inf),
                 np.zeros(n_dev, np.bool_))


@numba.njit(cache=True)
def _release(now, prob, tl, lp):
    """The placed nodes ended by `now` release their children; a child whose parents have all ended is ready."""
    end, releases, count, waiting, ready, slot = tl.end, lp.releases, lp.count, lp.waiting, lp.ready, lp.slot
    i = 0
    while i < count[1]:
        v = releases[i]
        if end[v] > now:
            i += 1
            continue
        count[1] -= 1
        releases[i] = releases[count[1]]
        for j in range(prob.ch_off[v], prob.ch_off[v + 1]):
            c = prob.ch[j]
            waiting[c] -= 1
            if waiting[c] == 0:
                slot[c] = count[0]
                ready[count[0]] = c
                count[0] += 1


@numba.njit(cache=True)
def _populate(now, prob, tl, lp):
    """The ready nodes' schedule times on the devices they fit (the reference's tss), and per device its earliest
    suiting and its most urgent ready node (the reference's _earliest and _most_urgent on these times) and its
    earliest schedule time after `now` (what the reference's _next_time reads for a free device that is not awake).
    """
    n_dev, topo, avail, slower = prob.cost.shape[1], prob.topo_pos, tl.avail, prob.slower
    ready, fit, valid, est, xfer, tss, hi = lp.ready, lp.fit, lp.valid, lp.est, lp.xfer, lp.tss, lp.hi
    earliest, urgent, later, first = lp.earliest, lp.urgent, lp.later, lp.first
    for d in range(n_dev):
        earliest[d], urgent[d], later[d] = -1, -1, np.inf
    for i in range(lp.count[0]):
        v = ready[i]
        last, least = -np.inf, np.inf
        for d in range(n_dev):
            fit[v, d] = tier(v, d, prob, tl) == 0
            if fit[v, d]:
                if not valid[v, d]:  # the reference's _estimate
                    est[v, d], xfer[v, d] = ready_time(v, d, False, prob, tl)
                    valid[v, d] = True
                t = max(est[v, d], avail[d])
                tss[v, d] = t
                last, least = max(last, t), min(least, t + slower[v, d])
        hi[v], first[v] = last, least
        for d in range(n_dev):
            if fit[v, d]:
                w = earliest[d]
                if tss[v, d] + slower[v, d] == least and (w < 0 or (tss[v, d], topo[v]) < (tss[w, d], topo[w])):
                    earliest[d] = v
                w = urgent[d]
                if w < 0 or (last, topo[v]) < (hi[w], topo[w]):
                    urgent[d] = v
                if tss[v, d] > now:
                    later[d] = min(later[d], tss[v, d])


@numba.njit(cache=True)
def _pick(now, prob, tl, lp):
    """(node, device) to place now, (-1, -1): none; sets awake.

    Each free device's pick (Baechi's get_op_to_schedule): if its last node's favourite child is ready and suits it
    (finishes first there of the devices it fits), the device waits for that child ("awake") unless its most urgent
    node's urgent time has come and that node suits it; else its earliest suiting node if that time has come. Of the
    picks, the earliest (schedule time, position) wins, the lower device on ties.
    """
    topo, avail, fav, awake, last_op, slot = prob.topo_pos, tl.avail, lp.fav, lp.awake, lp.last_op, lp.slot
    fit, tss, first, hi, earliest, urgent, slower = lp.fit, lp.tss, lp.first, lp.hi, lp.earliest, lp.urgent, \
        prob.slower
    bv, bd, bs, bp = -1, -1, 0.0, 0
    for d in range(prob.cost.shape[1]):
        awake[d] = False
        if avail[d] > now:
            continue
        v = -1
        fc = fav[last_op[d]] if last_op[d] >= 0 else -1
        if fc >= 0 and slot[fc] >= 0 and fit[fc, d] and tss[fc, d] + slower[fc, d] == first[fc]:
            awake[d] = True  # wait for the favourite child unless something is urgent
            u = urgent[d]
            if u >= 0 and hi[u] <= now and tss[u, d] + slower[u, d] == first[u]:
                v = u
            elif tss[fc, d] <= now:
                v = fc
        elif earliest[d] >= 0 and tss[earliest[d], d] <= now:
            v = earliest[d]
        if v >= 0 and (bv < 0 or (tss[v, d], topo[v]) < (bs, bp)):
            bv, bd, bs, bp = v, d, tss[v, d], topo[v]
    return bv, bd


@numba.njit(cache=True)
def _next_time(now, prob, tl, lp):
    """(found, time) of the next event, after a pick found nothing to run.

    The earliest pending release, busy device's free time, awake device's favourite child's schedule time and
    most urgent node's urgent time (if it is to come), and other free device's earliest schedule time after now of
    any node (`_populate`'s later). found is False when there is none.
    """
    end, avail, fav, awake, last_op, slot = tl.end, tl.avail, lp.fav, lp.awake, lp.last_op, lp.slot
    fit, tss, hi, urgent, later = lp.fit, lp.tss, lp.hi, lp.urgent, lp.later
    found, nxt = False, np.inf
    for i in range(lp.count[1]):
        e = end[lp.releases[i]]
        if e > now:
            found, nxt = True, min(nxt, e)
    for d in range(prob.cost.shape[1]):
        if avail[d] > now:  # busy
            found, nxt = True, min(nxt, avail[d])
        elif awake[d]:  # set on this state by the last pick, so the favourite child is ready and fits on d
            fc = fav[last_op[d]]
            if slot[fc] >= 0 and fit[fc, d]:
                found, nxt = True, min(nxt, tss[fc, d])
            if urgent[d] >= 0 and hi[urgent[d]] > now:
                found, nxt = True, min(nxt, hi[urgent[d]])
        elif later[d] < np.inf:
            found, nxt = True, min(nxt, later[d])
    if found and nxt <= now:
        raise AssertionError("m-sct: the next event time does not move forward")  # Baechi's assertion
    return found, nxt


@numba.njit(cache=True)
def _without_memory(now, prob, tl, lp):
    """(node, device, start) of the earliest best-tier pair, when nothing fits and nothing runs.

    Among each node's best-tier pairs on which it finishes first (`problem.earliest_finish`), start
    max(estimate, device free, now); ties: topological position, then lower device.
    """
    n_dev, topo, avail, ready, valid, est, xfer = prob.cost.shape[1], prob.topo_pos, tl.avail, lp.ready, lp.valid, \
        lp.est, lp.xfer
    low = 2
    for i in range(lp.count[0]):
        for d in range(n_dev):
            low = min(low, tier(ready[i], d, prob, tl))
    bv, bd, bs, bp = -1, -1, 0.0, 0
    for i in range(lp.count[0]):
        v = ready[i]
        least = np.inf
        for d in range(n_dev):
            if tier(v, d, prob, tl) == low:
                if not valid[v, d]:
                    est[v, d], xfer[v, d] = ready_time(v, d, False, prob, tl)
                    valid[v, d] = True
                least = min(least, max(max(est[v, d], avail[d]), now) + prob.slower[v, d])
        for d in range(n_dev):
            if tier(v, d, prob, tl) != low:
                continue
            s = max(max(est[v, d], avail[d]), now)
            if s + prob.slower[v, d] == least and (bv < 0 or (s, topo[v], d) < (bs, bp, bd)):
                bv, bd, bs, bp = v, d, s, topo[v]
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
    senders' channels nor its device, so none of its missing inputs has arrived since.
    """
    device, par, par_off, ready, valid, xfer, changed = tl.device, prob.par, prob.par_off, lp.ready, lp.valid, \
        lp.xfer, lp.changed
    for e in range(prob.cost.shape[1]):
        changed[e], valid[v, e] = False, False
    for j in range(par_off[v], par_off[v + 1]):
        if _sends(j, d, prob, tl):
            changed[device[par[j]]] = True
    changed[d] = True
    for i in range(lp.count[0]):
        w = ready[i]
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


@numba.njit(cache=True)
def _place(v, d, now, prob, tl, lp):
    """Book v on d from `now` (the reference's _place); a zero-cost v's children are ready at once."""
    _forget(v, d, prob, tl, lp)
    place(v, d, now, prob, tl)
    ready, slot, count, releases = lp.ready, lp.slot, lp.count, lp.releases
    lp.last_op[d] = v
    count[2] += 1
    count[0] -= 1
    last = ready[count[0]]
    ready[slot[v]] = last
    slot[last] = slot[v]
    slot[v] = -1
    releases[count[1]] = v
    count[1] += 1
    _release(now, prob, tl, lp)


@numba.njit(cache=True)
def _sct_kernel(prob, tl, lp):
    """The reference's run(): at each event time advance, place the picks, then move to the next event time.

    _populate is called here, not from _pick, so that _pick calls nothing: a kernel that calls a large one (not
    inlined) on the tuples counts references to all their arrays each time it runs, and _pick runs on every pick.
    """
    n, n_dev = prob.cost.shape
    now = 0.0
    while lp.count[2] < n:
        for d in range(n_dev):
            tl.avail[d] = max(tl.avail[d], now)
        _release(now, prob, tl, lp)
        while True:
            _populate(now, prob, tl, lp)
            v, d = _pick(now, prob, tl, lp)
            if v < 0:
                break
            _place(v, d, now, prob, tl, lp)
        if lp.count[2] == n:
            break
        found, nxt = _next_time(now, prob, tl, lp)
        if found:
            now = nxt
        else:
            v, d, now = _without_memory(now, prob, tl, lp)
            _place(v, d, now, prob, tl, lp)
