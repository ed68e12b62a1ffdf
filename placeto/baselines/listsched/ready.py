"""The ready set of m-ETF and m-SCT: numba kernels over ranked sets (two-level bitsets) of the ready nodes.

The schedulers break ties by topological position, so they scan the ready nodes in that order and stop at the
first pair no later node can beat, instead of visiting every ready node at every pick; the least need and least
persistent bytes of the ready set tell the best memory tier without visiting it either (`best_tier`).

A ranked set holds ranks 0..N-1 as two arrays, (lo, hi): lo uint64[ceil(N / 64)] has bit r % 64 of word r // 64 set
for each member r; hi uint64[ceil(len(lo) / 64)] has bit w % 64 of word w // 64 set for each non-empty lo word w.
`add` and `remove` are O(1); `next_at` is O(1) within a 64-rank word and otherwise reads the summary level: O(N /
4096) words at worst.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)  # a de Bruijn sequence B(2, 6): its 6-bit windows are distinct
_SIX = np.uint64(6)
_FIFTY_EIGHT = np.uint64(58)


def _de_bruijn_table() -> np.ndarray:
    """int64[64]: the bit index of each power of two, by the top 6 bits of its product with _DE_BRUIJN."""
    table = np.zeros(64, np.int64)
    for i in range(64):
        table[((int(_DE_BRUIJN) << i) & int(_ALL)) >> 58] = i
    return table


_TABLE = _de_bruijn_table()


def new_set(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The empty set of ranks 0..n-1: (lo, hi)."""
    lo = np.zeros(max((n + 63) // 64, 1), np.uint64)
    return lo, np.zeros((lo.size + 63) // 64, np.uint64)


@numba.njit(cache=True, inline="always")
def lowest_bit(m):
    """Index of the lowest set bit of the non-zero uint64 m."""
    return _TABLE[np.int64(((m & (~m + _ONE)) * _DE_BRUIJN) >> _FIFTY_EIGHT)]


@numba.njit(cache=True)
def add(lo, hi, r):
    """Put rank r in the set."""
    w = r >> 6
    lo[w] |= _ONE << np.uint64(r & 63)
    hi[w >> 6] |= _ONE << np.uint64(w & 63)


@numba.njit(cache=True)
def remove(lo, hi, r):
    """Take rank r out of the set (a no-op if it is not there)."""
    w = r >> 6
    lo[w] &= ~(_ONE << np.uint64(r & 63))
    if lo[w] == _ZERO:
        hi[w >> 6] &= ~(_ONE << np.uint64(w & 63))


@numba.njit(cache=True, inline="always")
def next_at(lo, hi, r):
    """The least member >= r, or -1 if there is none."""
    w = r >> 6
    if w >= lo.size:
        return -1
    m = lo[w] & (_ALL << np.uint64(r & 63))
    if m != _ZERO:
        return (w << 6) + lowest_bit(m)
    w += 1
    h = w >> 6
    if h >= hi.size:
        return -1
    m = hi[h] & (_ALL << np.uint64(w & 63))
    while m == _ZERO:
        h += 1
        if h >= hi.size:
            return -1
        m = hi[h]
    w = (h << 6) + lowest_bit(m)
    return (w << 6) + lowest_bit(lo[w])


# ---- the ready set of a list scheduler ----------------------------------------------------------------------
class Ready(NamedTuple):
    """The ready nodes of m-ETF or m-SCT, as ranked sets, and the ones whose cached estimates a booking can change.

    N nodes. Ranked three ways: by topological position (the tie-break order, in which the schedulers scan), by
    need and by persistent bytes (the least of each tells the best memory tier: `best_tier`).
    """

    topo_lo: np.ndarray  # uint64[:] ranked set of the ready nodes' topological positions
    topo_hi: np.ndarray  # uint64[:]
    at_topo: np.ndarray  # int64[N] the node at each topological position
    need_lo: np.ndarray  # uint64[:] ranked set of the ready nodes' ranks by need
    need_hi: np.ndarray  # uint64[:]
    need_rank: np.ndarray  # int64[N] each node's rank by need
    at_need: np.ndarray  # int64[N] the node of each need rank
    persistent_lo: np.ndarray  # uint64[:] ranked set of the ready nodes' ranks by persistent bytes
    persistent_hi: np.ndarray  # uint64[:]
    persistent_rank: np.ndarray  # int64[N]
    at_persistent: np.ndarray  # int64[N]
    cached: np.ndarray  # int64[N] cached[:count[1]]: nodes that may hold a valid estimate needing a transfer
    in_cached: np.ndarray  # bool[N] the node is in cached[:count[1]]
    count: np.ndarray  # int64[2] ready nodes, cached nodes


def new_ready(topo_pos: np.ndarray, need: np.ndarray, persistent: np.ndarray) -> Ready:
    """No node ready; topo_pos int64[N], need and persistent float64[N] bytes (a `ScheduleProblem`'s)."""
    n = topo_pos.size
    orders = [np.argsort(x, kind="stable").astype(np.int64) for x in (topo_pos, need, persistent)]
    ranks = []
    for order in orders:
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n)
        ranks.append(rank)
    return Ready(*new_set(n), orders[0], *new_set(n), ranks[1], orders[1], *new_set(n), ranks[2], orders[2],
                 np.zeros(n, np.int64), np.zeros(n, np.bool_), np.zeros(2, np.int64))


@numba.njit(cache=True)
def ready_add(v, rs, prob):
    """Make v ready."""
    add(rs.topo_lo, rs.topo_hi, prob.topo_pos[v])
    add(rs.need_lo, rs.need_hi, rs.need_rank[v])
    add(rs.persistent_lo, rs.persistent_hi, rs.persistent_rank[v])
    rs.count[0] += 1


@numba.njit(cache=True)
def ready_sources(rs, prob):
    """Make every node without parents ready: a list scheduler's start."""
    for v in range(prob.cost.shape[0]):
        if prob.par_off[v + 1] == prob.par_off[v]:
            ready_add(v, rs, prob)


@numba.njit(cache=True)
def ready_remove(v, rs, prob):
    """v is no longer ready (it is being placed)."""
    remove(rs.topo_lo, rs.topo_hi, prob.topo_pos[v])
    remove(rs.need_lo, rs.need_hi, rs.need_rank[v])
    remove(rs.persistent_lo, rs.persistent_hi, rs.persistent_rank[v])
    rs.count[0] -= 1


@numba.njit(cache=True, inline="always")
def ready_at(rs, p):
    """The least topological position >= p of a ready node, or -1: the node is rs.at_topo[position]."""
    return next_at(rs.topo_lo, rs.topo_hi, p)


@numba.njit(cache=True)
def list_cached(v, rs):
    """List v as holding an estimate that needs a transfer (so that a booking's invalidation visits it)."""
    if not rs.in_cached[v]:
        rs.in_cached[v] = True
        rs.cached[rs.count[1]] = v
        rs.count[1] += 1


@numba.njit(cache=True)
def is_open(d, tier, least_need, least_persistent, prob, tl):
    """Whether a pair of the given memory tier can be on device d, when no ready pair is of a lower tier.

    least_need and least_persistent are the ready nodes' least (`best_tier`). Float addition is monotone, so a
    node's need fits on d only if the least one does, and the least one fits wherever any does.
    """
    if tier == 0:
        return tl.used[d] + least_need <= prob.capacity[d]
    if tier == 1:
        return tl.used_p[d] + least_persistent <= prob.capacity[d]
    return True


@numba.njit(cache=True)
def best_tier(rs, prob, tl):
    """(the lowest memory tier of any ready (node, device) pair, least need, least persistent bytes of the ready
    nodes); there must be a ready node. Tiers: `listsched.kernels.tier`."""
    least_need = prob.need[rs.at_need[next_at(rs.need_lo, rs.need_hi, 0)]]
    least_persistent = prob.persistent[rs.at_persistent[next_at(rs.persistent_lo, rs.persistent_hi, 0)]]
    for t in range(2):
        for d in range(prob.cost.shape[1]):
            if is_open(d, t, least_need, least_persistent, prob, tl):
                return t, least_need, least_persistent
    return 2, least_need, least_persistent
