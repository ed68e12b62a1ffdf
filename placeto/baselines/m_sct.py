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
   model's busy time). Solved with scipy's HiGHS (Baechi used MOSEK; the published placements used GLPK).
2. Rounding: edge i -> j is a favourite edge if round(x_ij - threshold + 0.5) == 0 (Baechi's rule and
   threshold 0.5), assigned in edge order with Baechi's overwrites: a later favourite child of i replaces the
   earlier one, and a later favoured parent of j clears the earlier parent's favourite.
3. m-ETF's event loop (`listsched.baechi_reference.baechi_sct`), except that a free device whose last op's favourite
   child is ready and starts earliest there waits for it unless another op is urgent.

Complexity: the LP (N + P variables) plus the plain-Python event loop, about N * R * D.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize
import scipy.sparse

from placeto.baselines.listsched.baechi_reference import baechi_sct
from placeto.baselines.listsched.problem import DEFAULT_TRANSFER_MODEL, ScheduleProblem, build_problem
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph

THRESHOLD = 0.5  # Baechi's m_sct default: x <= 0.5 rounds to a favourite edge


def m_sct(graph: Graph, cluster: Cluster, seed: int = 0, model: str = DEFAULT_TRANSFER_MODEL,
          threshold: float = THRESHOLD) -> np.ndarray:
    """Devices int32[N] m-SCT schedules the nodes on.

    Deterministic: `seed` is unused. `model` names a `listsched.problem.TRANSFER_MODELS` entry; `threshold` rounds
    the LP (module docstring).
    """
    del seed  # deterministic
    prob = build_problem(graph, cluster, model)
    return baechi_sct(prob, favourite_children(prob, threshold)).device


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
    """The LP's x float64[P] per edge of `edges_by_source`.

    0: a favourite edge; 1: the edge pays its communication time.
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
    if res.status != 0:
        raise RuntimeError(f"m-sct: the favourite-child LP failed: {res.message}")
    return res.x[:n_e]


def _lp_unit(cost: np.ndarray, comm: np.ndarray) -> float:
    """The LP's time unit, us: the mean positive node cost.

    Else the mean positive communication time, else 1.
    """
    for x in (cost, comm):
        pos = x[x > 0]
        if pos.size:
            return float(pos.mean())
    return 1.0


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
