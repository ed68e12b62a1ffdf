"""Peak memory of a finished schedule: the fast engine's sweeps.

Both are bit-equal to simulator.engine.reference.peak_memory_reference. The reference sorts every change record
(time, +/-bytes) of a device and keeps the largest running sum. `_peak_memory` does exactly that (bucket sort, then
exact sort per bucket). `_peak_memory_exact` skips the sort when every running sum is exact (whole bytes, sums below
2**53; `Prepared.exact_memory`): then at equal times, where the reference sums frees first, the largest running sum
is the one after the whole time, which does not depend on the order within the time, and the records of a device
come from two streams the event loop already sorted: the device's ops in execution order (start <= end <= next
start) and the transfers in arrival order. The sweep costs well under the sort
(experiments/README.md, "Figures behind design choices").
"""

from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


@_jit
def fill_peak_memory(g, w, dev, peak):
    """Fill peak (float64[D]) with the schedule's peak bytes per device.

    The schedule in `w`, after _run; bit-equal to peak_memory_reference.
    """
    if g.exact_memory:
        _peak_memory_exact(g, w, dev, peak)
    else:
        _peak_memory(g, w, dev, peak)

@_jit
def _peak_memory(g, w, dev, peak):
    """`fill_peak_memory` in general: every change record sorted."""
    n, n_dev = g.cost.shape
    out_off, out_bytes, cons_off, cons = g.out_off, g.out_bytes, g.cons_off, g.cons
    start, end, arrival = w.start, w.end, w.arrival
    m_t, m_v, m_d = np.empty(g.max_changes), np.empty(g.max_changes), np.empty(g.max_changes, np.int32)
    free_d = np.empty(n_dev)  # per receiving device: when its consumers are done, -1 if none
    m = 0
    for p in range(n):
        home = dev[p]
        for o in range(out_off[p], out_off[p + 1]):
            free_home = end[p]
            free_d[:] = -1.0
            for j in range(cons_off[o], cons_off[o + 1]):
                c = cons[j]
                if dev[c] == home:
                    free_home = max(free_home, end[c])
                else:
                    free_d[dev[c]] = max(free_d[dev[c]], end[c])
            if arrival[o] >= 0.0:
                free_home = max(free_home, arrival[o])
                for d in range(n_dev):
                    if free_d[d] >= 0.0:
                        m_t[m], m_v[m], m_d[m] = arrival[o], out_bytes[o], d
                        m_t[m + 1], m_v[m + 1], m_d[m + 1] = free_d[d], -out_bytes[o], d
                        m += 2
            m_t[m], m_v[m], m_d[m] = start[p], out_bytes[o], home
            m_t[m + 1], m_v[m + 1], m_d[m + 1] = free_home, -out_bytes[o], home
            m += 2
    _live_peak(m_t[:m], m_v[:m], m_d[:m], peak)
    _add_persistent(g, dev, peak)


@_jit
def _add_persistent(g, dev, peak):
    """peak[d] += the persistent bytes of the nodes on device d.

    Summed in node order, as the reference does.
    """
    n, n_dev = g.cost.shape
    persistent = np.zeros(n_dev)
    for i in range(n):
        persistent[dev[i]] += g.persistent[i]
    for d in range(n_dev):
        peak[d] = persistent[d] + peak[d]


@_jit
def _live_peak(t, v, dev, peak):
    """Fill peak[d] with the largest running sum of device d's changes.

    The changes (time t, bytes v) are summed in the reference's order: by (time, bytes), so at equal times frees
    come first. A bucket sort on time (bucket floor(t * scale) is monotone in t) that moves the records themselves, then
    each bucket sorted exactly: linear on the spread-out times of a schedule, n log n when they bunch up.
    """
    m = len(t)
    scale = m / t.max() if m and t.max() > 0 else 0.0
    scale = scale if scale < 1e300 else 0.0
    first = np.zeros(m + 1, np.int64)  # bucket b holds records first[b]:first[b + 1]
    for k in range(m):
        first[_bucket(t[k], scale, m) + 1] += 1
    for b in range(m):
        first[b + 1] += first[b]
    fill = first[:-1].copy()
    ts, vs, ds = np.empty(m), np.empty(m), np.empty(m, np.int32)
    for k in range(m):
        b = _bucket(t[k], scale, m)
        ts[fill[b]], vs[fill[b]], ds[fill[b]] = t[k], v[k], dev[k]
        fill[b] += 1
    for b in range(m):
        if first[b + 1] - first[b] > 1:
            _sort_records(ts, vs, ds, first[b], first[b + 1])
    live = np.zeros(len(peak))
    peak[:] = 0.0
    for k in range(m):
        live[ds[k]] += vs[k]
        peak[ds[k]] = max(peak[ds[k]], live[ds[k]])


@_jit
def _bucket(t, scale, m):
    """min(floor(t * scale), m - 1), and in [0, m) whatever t is.

    A NaN or infinite time (which validated inputs never produce) must not become an index outside the array
    (int(NaN) is undefined).
    """
    x = t * scale
    if x >= 0.0 and x < m - 1:
        return int(x)
    return m - 1 if x >= m - 1 else 0


@_jit
def _sort_records(t, v, d, lo, hi):
    """Sort records lo:hi by (t, v), in place.

    Insertion sort when short, else heapsort (no numba sort to compile).
    """
    if hi - lo <= 16:
        for i in range(lo + 1, hi):
            j = i
            while j > lo and (t[j] < t[j - 1] or (t[j] == t[j - 1] and v[j] < v[j - 1])):
                _swap(t, v, d, j, j - 1)
                j -= 1
        return
    for root in range(lo + (hi - lo) // 2 - 1, lo - 1, -1):
        _sift_down(t, v, d, lo, root, hi)
    for last in range(hi - 1, lo, -1):
        _swap(t, v, d, lo, last)
        _sift_down(t, v, d, lo, lo, last)


@_jit
def _swap(t, v, d, a, b):
    t[a], t[b] = t[b], t[a]
    v[a], v[b] = v[b], v[a]
    d[a], d[b] = d[b], d[a]


@_jit
def _sift_down(t, v, d, lo, root, hi):
    """Restore the max-heap by (t, v) of records lo:hi below `root`.

    The children of r are 2r - lo + 1 and 2r - lo + 2.
    """
    while 2 * root - lo + 1 < hi:
        c = 2 * root - lo + 1
        if c + 1 < hi and (t[c] < t[c + 1] or (t[c] == t[c + 1] and v[c] < v[c + 1])):
            c += 1
        if t[root] > t[c] or (t[root] == t[c] and v[root] >= v[c]):
            return
        _swap(t, v, d, root, c)
        root = c


@_jit
def _peak_memory_exact(g, w, dev, peak):
    """_peak_memory when g.exact_memory: one merge of sorted streams.

    Per device, one merge of its two sorted record streams. Each record is added to the slot whose time it has: an
    allocation to its producer's start, a free to the end of the last consumer on that device (ends grow along a
    device's execution order) or to the arrival of the transfer, a transferred copy to its arrival. Then the running
    sum over each device's slots in time order, its largest value taken only after all slots of one time.
    """
    n, n_dev = g.cost.shape
    start, end, queue = w.start, w.end, w.queue
    pos = np.empty(n, np.int64)  # position of each node in the device FIFOs = its execution order
    for k in range(n):
        pos[queue[k]] = k
    s_val, e_val, x_home = _slot_values(g, w, dev, pos)
    a_off, a_t, a_v = _arrival_slots(g, w, dev, x_home)
    q_lo = 0
    for d in range(n_dev):
        q_hi = w.heads[0, d]  # after _run, device d's FIFO slice is q_lo:q_hi, all executed
        i, i_end, k, k_end = 2 * q_lo, 2 * q_hi, a_off[d], a_off[d + 1]
        live, top = 0.0, 0.0
        while i < i_end or k < k_end:  # one time per pass; at least one slot taken (NaN times end too)
            t_op = (start[queue[i >> 1]] if i & 1 == 0 else end[queue[i >> 1]]) if i < i_end else np.inf
            if i < i_end and (k == k_end or not a_t[k] < t_op):  # op slot i: the start (even) or end (odd)
                t = t_op                                         # of the op at FIFO position i // 2
                live += s_val[i >> 1] if i & 1 == 0 else e_val[i >> 1]
                i += 1
            else:
                t = a_t[k]
                live += a_v[k]
                k += 1
            while i < i_end and (start[queue[i >> 1]] if i & 1 == 0 else end[queue[i >> 1]]) == t:
                live += s_val[i >> 1] if i & 1 == 0 else e_val[i >> 1]
                i += 1
            while k < k_end and a_t[k] == t:
                live += a_v[k]
                k += 1
            top = max(top, live)
        peak[d] = top
        q_lo = q_hi
    _add_persistent(g, dev, peak)


@_jit
def _slot_values(g, w, dev, pos):
    """Bytes each op allocates and frees, and each arrival frees.

    Returns (s_val, e_val, x_home): bytes allocated at each op's start and freed at its end (float64[N] each, by
    execution position), and bytes freed on the producer's device at each output's arrival (float64[O]).
    """
    n, n_dev = g.cost.shape
    out_off, out_bytes, cons_off, cons, end, arrival, queue = (g.out_off, g.out_bytes, g.cons_off, g.cons,
                                                              w.end, w.arrival, w.queue)
    s_val, e_val, x_home = np.zeros(n), np.zeros(n), np.zeros(len(out_bytes))
    last = np.full(n_dev, -1, np.int64)  # per device: position of the output's last consumer there, -1: none
    for p in range(n):
        home, a = dev[p], pos[p]
        for o in range(out_off[p], out_off[p + 1]):
            b = out_bytes[o]
            s_val[a] += b
            best = a
            for j in range(cons_off[o], cons_off[o + 1]):
                d, q = dev[cons[j]], pos[cons[j]]
                if d == home:
                    best = max(best, q)
                else:
                    last[d] = max(last[d], q)
            if arrival[o] >= 0.0:
                for j in range(cons_off[o], cons_off[o + 1]):
                    d = dev[cons[j]]
                    if d != home and last[d] >= 0:
                        e_val[last[d]] -= b
                        last[d] = -1
            if arrival[o] > end[queue[best]]:
                x_home[o] -= b
            else:
                e_val[best] -= b
    return s_val, e_val, x_home


@_jit
def _arrival_slots(g, w, dev, x_home):
    """Per device, the (time, bytes) of its transfers in arrival order.

    The copy received (+bytes) or the sender's own tensor freed at arrival (x_home). Returns (a_off, a_t, a_v),
    a CSR: device d's slots are a_off[d]:a_off[d + 1].
    """
    n_dev = g.cost.shape[1]
    cons_off, out_bytes, out_node, x_arr, n_x = g.cons_off, g.out_bytes, g.out_node, w.x_arr, w.n_x[0]
    a_off = np.zeros(n_dev + 1, np.int64)
    stamp = np.full(n_dev, -1, np.int64)
    for k in range(n_x):
        o = x_arr[k]
        a_off[dev[out_node[o]] + 1] += 1
        for j in range(cons_off[o], cons_off[o] + w.n_remote[o]):
            d = dev[w.remote[j]]
            if stamp[d] != k:
                stamp[d] = k
                a_off[d + 1] += 1
    for d in range(n_dev):
        a_off[d + 1] += a_off[d]
    a_t, a_v, fill = np.empty(a_off[n_dev]), np.empty(a_off[n_dev]), a_off[:n_dev].copy()
    stamp[:] = -1
    for k in range(n_x):
        o = x_arr[k]
        h = dev[out_node[o]]
        a_t[fill[h]], a_v[fill[h]] = w.arrival[o], x_home[o]
        fill[h] += 1
        for j in range(cons_off[o], cons_off[o] + w.n_remote[o]):
            d = dev[w.remote[j]]
            if stamp[d] != k:
                stamp[d] = k
                a_t[fill[d]], a_v[fill[d]] = w.arrival[o], out_bytes[o]
                fill[d] += 1
    return a_off, a_t, a_v
