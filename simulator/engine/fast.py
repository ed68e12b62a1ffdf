"""The reference event loop compiled with numba, bit-equal to it.

The semantics are those of simulator.engine.reference, to the last bit; only the bookkeeping differs:

* The event queue is a small array kept sorted by (time, rank, output), the reference's heap key with the kind
  folded into the rank: a release of parent p has rank p (and the output sent, -1 for local releases), a bus
  start of device d rank N + d, a device start rank N + D + d. It holds a few events per device at a time
  (plus the transfers in flight when there is a latency), so insertion by shifting beats a heap.
* A parent's local releases at one time share one event that visits its children in ascending order, which is
  the reference's (parent, output, child) order: nothing with a release's rank is created while releases are
  processed. Likewise one transfer's arrivals; two transfers of one parent arriving at one time are two events,
  ordered by output as in the reference.
* Host jobs are booked when the bus or device event that asks for them runs: events run in the reference's
  order, so the jobs are served in its order.
* Each device and each bus has at most one pending event, at the time its head can start
  (max(free time, ready time)); the reference's duplicate and no-op events change nothing but the clock, so
  the runtime (time of the last event) is the largest device- or bus-free time.
* Ready queues and bus queues are FIFO slices of one array, each device owning a slice sized by its nodes
  (or outputs); every node (output) enters once, so no slice wraps.
* Floats are computed with the reference's operations in its order; peak memory sorts the same
  (time, +/-bytes) changes as the reference and sums them in that order.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import NamedTuple, Sequence

import numba
import numpy as np

from simulator.model.cluster import Cluster
from simulator.model.errors import InputError
from simulator.model.graph import Graph
from simulator.model.io import check_placement
from simulator.engine.microbatched import simulate_microbatched
from simulator.engine.peak_memory import fill_peak_memory
from simulator.engine.prepared import Prepared, prepare
from simulator.model.microbatch import expansion
from simulator.model.result import SimResult, Transfers, lower_bound


class BatchResult(NamedTuple):
    """simulate_batch's answer with_memory=True."""

    runtime: np.ndarray  # float64[B] microseconds
    peak_memory: np.ndarray  # float64[B, D] bytes


class _Work(NamedTuple):
    """Per-simulation scratch, reused across simulations of one thread."""

    start: np.ndarray  # float64[N]
    end: np.ndarray  # float64[N]
    pending: np.ndarray  # int32[N]
    queue: np.ndarray  # int32[N] ready nodes, device d's FIFO at q_head[d]:q_tail[d]
    bus: np.ndarray  # int32[O] outputs waiting to be sent, device d's FIFO at b_head[d]:b_tail[d]
    arrival: np.ndarray  # float64[O] transfer arrival time, -1 if the output is not transferred
    heads: np.ndarray  # int64[4, D] q_head, q_tail, b_head, b_tail
    free: np.ndarray  # float64[2, D] device free time, bus free time
    host_free: np.ndarray  # float64[H] time each host finishes its last job
    ev_t: np.ndarray  # float64[K] event times, sorted by descending (time, rank)
    ev_rx: np.ndarray  # int64[K, 2] event rank; transferred output of a release event (-1: local release)
    x_out: np.ndarray  # int32[O] transferred outputs in start order
    x_start: np.ndarray  # float64[O] their bus start times
    n_x: np.ndarray  # int64[1] number of transfers
    n_remote: np.ndarray  # int64[O] consumers on other devices, compacted at remote[cons_off[o]:]
    remote: np.ndarray  # int32[C]
    n_local: np.ndarray  # int64[N] children on the own device, compacted at local[child_off[i]:]
    local: np.ndarray  # int32[P]
    local_count: np.ndarray  # int32[P]
    x_arr: np.ndarray  # int32[O] transferred outputs in arrival order (the order their release events ran)


class _Schedule(NamedTuple):
    runtime: float  # microseconds
    done: int  # ops executed (N unless the graph has a cycle), -1 for a placement that does not fit
    busy: np.ndarray  # float64[D] microseconds
    x_node: np.ndarray  # int32[T] producer of each transfer, in start order
    x_out: np.ndarray  # int32[T] its output index
    x_dev: np.ndarray  # int32[T] sending device
    x_end: np.ndarray  # float64[T] arrival, microseconds (the starts are work.x_start[:T])
    work: _Work  # the schedule (start, end, x_start) and what fill_peak_memory reads


# ---- the compiled event loop ---------------------------------------------------------------------------
_jit = numba.njit(cache=True, nogil=True)


@_jit
def _new_work(g):
    """Scratch for simulating placements of the prepared graph `g`."""
    n, n_dev = g.cost.shape
    n_out, n_cons, n_child = len(g.out_bytes), len(g.cons), len(g.child)
    # Pending at once, per device: one release group, one arrival, one bus and one device event; with a latency
    # a bus may send its next transfer before the previous one arrives: any number in flight, at most one per
    # output. (Not `latency > 0`: a NaN from a caller that skipped validation must not overflow the queue.)
    n_ev = 4 * n_dev + 4 + (n_out if g.latency != 0.0 else 0)
    return _Work(np.empty(n), np.empty(n), np.empty(n, np.int32), np.empty(n, np.int32),
                 np.empty(n_out, np.int32), np.empty(n_out), np.empty((4, n_dev), np.int64),
                 np.empty((2, n_dev)), np.empty(max(g.n_hosts, 1)), np.empty(n_ev), np.empty((n_ev, 2), np.int64),
                 np.empty(n_out, np.int32), np.empty(n_out), np.empty(1, np.int64),
                 np.empty(n_out, np.int64), np.empty(n_cons, np.int32), np.empty(n, np.int64),
                 np.empty(n_child, np.int32), np.empty(n_child, np.int32), np.empty(n_out, np.int32))


@_jit
def _push(ev_t, ev_rx, n_ev, t, r, x):
    """Insert (t, r, x) into the n_ev events; returns the new count.

    The events are sorted by descending (t, r, x), the next one last. x breaks ties of one parent's release
    groups at one time: local (-1) first, then transfers by output.
    """
    if n_ev == len(ev_t):
        raise AssertionError("event queue overflow")  # impossible: sized for the most events pending at once
    j = n_ev
    while j > 0 and (ev_t[j - 1] < t or (ev_t[j - 1] == t and (ev_rx[j - 1, 0] < r or (
            ev_rx[j - 1, 0] == r and ev_rx[j - 1, 1] < x)))):
        ev_t[j], ev_rx[j, 0], ev_rx[j, 1] = ev_t[j - 1], ev_rx[j - 1, 0], ev_rx[j - 1, 1]
        j -= 1
    ev_t[j], ev_rx[j, 0], ev_rx[j, 1] = t, r, x
    return n_ev + 1


@_jit
def _reset(g, w, dev):
    """Reset scratch `w` for placement `dev`; returns the event count.

    FIFOs sliced per device, sources queued, devices with work woken at 0. Returns -1 (nothing written) if `dev`
    is not a placement of the n nodes on the n_dev devices.
    """
    n, n_dev = g.cost.shape
    if len(dev) != n:
        return -1
    for i in range(n):  # a guard for callers that skipped check_placement: every index below trusts dev
        if dev[i] < 0 or dev[i] >= n_dev:
            return -1
    out_off, heads, pending, queue = g.out_off, w.heads, w.pending, w.queue
    pending[:] = g.pending0
    w.free[:] = 0.0
    w.host_free[:] = 0.0
    w.arrival[:] = -1.0
    heads[:] = 0
    for i in range(n):  # slice sizes: nodes and outputs per device
        heads[1, dev[i]] += 1
        heads[3, dev[i]] += out_off[i + 1] - out_off[i]
    q, b = 0, 0
    for d in range(n_dev):
        q, heads[0, d], heads[1, d] = q + heads[1, d], q, q
        b, heads[2, d], heads[3, d] = b + heads[3, d], b, b
    for i in range(n):
        if pending[i] == 0:
            queue[heads[1, dev[i]]] = i
            heads[1, dev[i]] += 1
    _split_neighbours(g, w, dev)
    n_ev = 0
    for d in range(n_dev):
        if heads[1, d] > heads[0, d]:
            n_ev = _push(w.ev_t, w.ev_rx, n_ev, 0.0, n + n_dev + d, -1)
    return n_ev


@_jit
def _split_neighbours(g, w, dev):
    """Compact remote consumers per output and local children per node.

    Each output's consumers on other devices, each node's children on its own device. Branch-free, so the event loop
    visits only the neighbours it releases (random placements make the local/remote test unpredictable).
    """
    out_off, cons_off, cons, child_off, child, child_count = (g.out_off, g.cons_off, g.cons, g.child_off,
                                                              g.child, g.child_count)
    n_remote, remote, n_local, local, local_count = w.n_remote, w.remote, w.n_local, w.local, w.local_count
    for i in range(len(dev)):
        a = dev[i]
        for o in range(out_off[i], out_off[i + 1]):
            k = cons_off[o]
            for j in range(cons_off[o], cons_off[o + 1]):
                remote[k] = cons[j]
                k += dev[cons[j]] != a
            n_remote[o] = k - cons_off[o]
        k = child_off[i]
        for j in range(child_off[i], child_off[i + 1]):
            local[k], local_count[k] = child[j], child_count[j]
            k += dev[child[j]] == a
        n_local[i] = k - child_off[i]


@_jit
def _run(g, w, dev):
    """Simulate placement `dev` into `w`: (runtime, ops executed).

    dev: int32[N]. The runtime in microseconds; (NaN, -1) if `dev` is not a placement. One function with every array
    in a local on purpose: helpers reading namedtuple fields in the loop made numba emit reference counting on every
    access, far slower (experiments/README.md, "Figures behind design choices").
    """
    n, n_dev = g.cost.shape
    bus_rank, dev_rank = n, n + n_dev
    cost, xfer, out_off, out_node, d1, d2 = g.cost, g.xfer_time, g.out_off, g.out_node, g.delta1, g.delta2
    latency, host, dispatch, send, host_free = g.latency, g.host, g.dispatch, g.send, w.host_free
    cons_off, child_off = g.cons_off, g.child_off
    start, end, pending, queue, bus, arrival = w.start, w.end, w.pending, w.queue, w.bus, w.arrival
    heads, free, ev_t, ev_rx, x_out, x_start = w.heads, w.free, w.ev_t, w.ev_rx, w.x_out, w.x_start
    n_remote, remote, n_local, local, local_count = w.n_remote, w.remote, w.n_local, w.local, w.local_count
    x_arr, n_arr = w.x_arr, 0
    n_ev, n_x, done = _reset(g, w, dev), 0, 0
    if n_ev < 0:
        w.n_x[0] = 0
        return np.nan, -1
    while n_ev > 0:
        n_ev -= 1
        t, r, x = ev_t[n_ev], ev_rx[n_ev, 0], ev_rx[n_ev, 1]
        if r < bus_rank:  # parent r releases its local children (x < 0) or output x's remote consumers
            is_local = x < 0
            if not is_local:
                x_arr[n_arr] = x
                n_arr += 1
            lo = child_off[r] if is_local else cons_off[x]
            for j in range(lo, lo + (n_local[r] if is_local else n_remote[x])):
                c = local[j] if is_local else remote[j]
                pending[c] -= local_count[j] if is_local else 1
                if pending[c] == 0:  # ready: join the FIFO, wake the device if the FIFO was empty
                    d = dev[c]
                    if heads[0, d] == heads[1, d]:
                        n_ev = _push(ev_t, ev_rx, n_ev, max(t, free[0, d]), dev_rank + d, -1)
                    queue[heads[1, d]] = c
                    heads[1, d] += 1
        elif r < dev_rank:  # bus d sends its head output
            d = r - bus_rank
            o = bus[heads[2, d]]
            heads[2, d] += 1
            leave = t
            if send[d] > 0:  # the host's job first, once per producer: with its first output that goes remote
                first = True
                for o0 in range(out_off[out_node[o]], o):
                    if n_remote[o0] > 0:
                        first = False
                        break
                if first:
                    leave = max(t, host_free[host[d]]) + send[d]
                    host_free[host[d]] = leave
            sent = leave + xfer[o]
            arrival[o] = sent + latency
            free[1, d] = sent + d2
            x_out[n_x], x_start[n_x] = o, t
            n_x += 1
            n_ev = _push(ev_t, ev_rx, n_ev, arrival[o], out_node[o], o)
            if heads[2, d] < heads[3, d]:
                ready = end[out_node[bus[heads[2, d]]]]
                n_ev = _push(ev_t, ev_rx, n_ev, max(free[1, d], ready), bus_rank + d, -1)
        else:  # device d starts the head of its FIFO
            d = r - dev_rank
            i = queue[heads[0, d]]
            heads[0, d] += 1
            done += 1
            begin = t
            if dispatch[d] > 0:  # the host's job first
                begin = max(t, host_free[host[d]]) + dispatch[d]
                host_free[host[d]] = begin
            start[i], end[i] = begin, begin + cost[i, d]
            free[0, d] = end[i] + d1 if cost[i, d] > 0 else end[i]
            if heads[0, d] < heads[1, d]:
                n_ev = _push(ev_t, ev_rx, n_ev, free[0, d], dev_rank + d, -1)
            for o in range(out_off[i], out_off[i + 1]):  # outputs with a consumer elsewhere join the bus
                if n_remote[o] > 0:
                    if heads[2, d] == heads[3, d]:
                        n_ev = _push(ev_t, ev_rx, n_ev, max(free[1, d], end[i]), bus_rank + d, -1)
                    bus[heads[3, d]] = o
                    heads[3, d] += 1
            if n_local[i] > 0:  # one release event for all local children
                n_ev = _push(ev_t, ev_rx, n_ev, end[i], i, -1)
    w.n_x[0] = n_x
    runtime = 0.0  # the last event is a device or a bus becoming free
    for d in range(n_dev):
        runtime = max(runtime, free[0, d], free[1, d])
    return runtime, done


@_jit
def _simulate_one(g, dev):
    """The full schedule of one placement, peak memory aside.

    `_LazyPeak` computes the peak from the returned work.
    """
    n, n_dev = g.cost.shape
    w = _new_work(g)
    runtime, done = _run(g, w, dev)
    busy = np.zeros(n_dev)
    for i in range(n if done >= 0 else 0):  # node order, as the reference sums
        busy[dev[i]] += g.cost[i, dev[i]]
    n_x = w.n_x[0]
    x_node, x_out, x_dev, x_end = (np.empty(n_x, np.int32), np.empty(n_x, np.int32), np.empty(n_x, np.int32),
                                   np.empty(n_x))
    for k in range(n_x):
        o = w.x_out[k]
        x_node[k] = g.out_node[o]
        x_out[k] = o - g.out_off[x_node[k]]
        x_dev[k] = dev[x_node[k]]
        x_end[k] = w.arrival[o]
    return _Schedule(runtime, done, busy, x_node, x_out, x_dev, x_end, w)


class _LazyPeak:
    """() -> float64[D] peak bytes of a `simulate` schedule, lazily.

    Computed on the first call (thread-safe); the schedule's scratch arrays are released then. Pickled as the
    computed peak.
    """

    __slots__ = ("_args", "_peak", "_lock")

    def __init__(self, g: Prepared, w: _Work, dev: np.ndarray):
        self._args, self._peak, self._lock = (g, w, dev), None, threading.Lock()

    def __call__(self) -> np.ndarray:
        if self._peak is None:
            with self._lock:
                if self._peak is None:
                    g, w, dev = self._args
                    peak = np.zeros(g.cost.shape[1])
                    fill_peak_memory(g, w, dev, peak)
                    self._peak, self._args = peak, None
        return self._peak

    def __getstate__(self) -> np.ndarray:  # pickled (e.g. sent to another process) as the computed peak
        return self()

    def __setstate__(self, peak: np.ndarray) -> None:
        self._args, self._peak, self._lock = None, peak, threading.Lock()


@_jit
def _simulate_rows(g, placements, lo, hi, runtime, peak, with_memory, done):
    """Simulate placements[lo:hi] into runtime, peak and done.

    placements: int32[B, N]; runtime: float64[B] microseconds; peak: float64[B, D] bytes (with_memory); done:
    int64[B] ops executed per row (-1: not a placement).
    """
    n = g.cost.shape[0]
    w = _new_work(g)
    for b in range(lo, hi):
        runtime[b], done[b] = _run(g, w, placements[b])
        if with_memory and done[b] == n:
            fill_peak_memory(g, w, placements[b], peak[b])


# ---- public API ----------------------------------------------------------------------------------------
def simulate(graph: Graph, placement: Sequence[int] | np.ndarray, cluster: Cluster) -> SimResult:
    """Simulate one step of `graph` under `placement` on `cluster`.

    placement: a device index per node. Equal, float for float, to
    simulator.engine.reference.simulate_reference. A microbatched graph (meta["microbatches"] > 1) is simulated as
    its expanded graph, the result read per original node (simulator.engine.microbatched).

    Raises:
      InputError: for a bad placement, or a graph and cluster whose times could leave the limits.
    """
    if graph.meta.get("microbatches", 1) != 1:
        return simulate_microbatched(simulate, graph, placement, cluster)
    check_placement(placement, graph, cluster.n_devices)
    dev = np.array(placement, dtype=np.int32)  # a copy: the lazy peak memory reads it later
    g = prepare(graph, cluster)
    s = _simulate_one(g, dev)
    if s.done < 0:
        raise InputError(f"graph {graph.name!r}: placement does not fit {cluster.n_devices} devices")
    if s.done != graph.n_nodes:
        raise AssertionError("simulation ended with unexecuted nodes")  # impossible for a validated DAG
    w = s.work
    transfers = Transfers(s.x_node, s.x_out, s.x_dev, _read_only(w.x_start[:len(s.x_node)]), s.x_end)
    # start, end and device are views of what the memory sweep reads later: read-only, so they stay its input
    return SimResult(runtime=float(s.runtime), start=_read_only(w.start), end=_read_only(w.end),
                     device=_read_only(dev), busy=s.busy, capacity=cluster.capacity,
                     lower_bound=lower_bound(graph, cluster), transfers=transfers,
                     compute_peak_memory=_LazyPeak(g, w, dev))


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of `a`; its owner keeps its writing rights."""
    v = a.view()
    v.flags.writeable = False
    return v


def simulate_batch(graph: Graph, placements: np.ndarray, cluster: Cluster, with_memory: bool = False,
                   n_threads: int | None = None) -> np.ndarray | BatchResult:
    """Simulate B placements (int[B, N]) on `n_threads` threads.

    n_threads: default numba's thread count; at most B // 4 (at least 1) are used.

    Returns:
      float64[B] runtimes, microseconds; with `with_memory`, a BatchResult that adds the peak bytes
      float64[B, D]. Each row equals simulate(graph, row, cluster) exactly (a microbatched graph's rows are
      repeated per copy and simulated on its expanded graph).

    Raises:
      InputError: naming the first bad row.
    """
    placements = _check_batch(graph, placements, cluster.n_devices)
    if graph.meta.get("microbatches", 1) != 1:
        ex = expansion(graph, cluster.kinds)
        return simulate_batch(ex.graph, placements[:, ex.copy_of], cluster, with_memory, n_threads)
    g = prepare(graph, cluster)
    n_rows = placements.shape[0]
    runtime = np.empty(n_rows)
    peak = np.empty((n_rows, cluster.n_devices) if with_memory else (n_rows, 0))
    done = np.empty(n_rows, dtype=np.int64)
    n_threads = max(1, min(n_threads or numba.config.NUMBA_NUM_THREADS, n_rows // 4))
    bounds = np.linspace(0, n_rows, n_threads + 1).astype(np.int64)
    chunks = [(g, placements, bounds[k], bounds[k + 1], runtime, peak, with_memory, done) for k in range(n_threads)]
    if n_threads == 1:
        _simulate_rows(*chunks[0])
    else:  # the kernel releases the GIL; a numba prange over the chunks was no faster (experiments/README.md)
        list(_pool(n_threads).map(lambda chunk: _simulate_rows(*chunk), chunks))
    if np.any(done < 0):
        raise InputError(f"graph {graph.name!r}: placement row {int(np.argmax(done < 0))} does not fit "
                         f"{cluster.n_devices} devices")
    if np.any(done != graph.n_nodes):
        raise AssertionError("simulation ended with unexecuted nodes")  # impossible for a validated DAG
    return BatchResult(runtime, peak) if with_memory else runtime


_POOLS: dict[int, concurrent.futures.ThreadPoolExecutor] = {}


def _pool(n_threads: int) -> concurrent.futures.ThreadPoolExecutor:
    if n_threads not in _POOLS:
        _POOLS[n_threads] = concurrent.futures.ThreadPoolExecutor(n_threads, thread_name_prefix="simulate")
    return _POOLS[n_threads]


def _check_batch(graph: Graph, placements: np.ndarray, n_dev: int) -> np.ndarray:
    """The placements as int32[B, N], C-contiguous and read-only.

    Read-only: numba compiles a read-only and a writable array as two types, and the kernel sees one, whichever
    the caller has (np.asarray of a JAX array is read-only).

    Raises:
      InputError: naming the first bad row and node.
    """
    a = np.asarray(placements)
    if a.ndim != 2 or a.shape[1] != graph.n_nodes:
        raise InputError(f"placements have shape {a.shape}, expected (batch, {graph.n_nodes})")
    bad = np.flatnonzero(((a < 0) | (a >= n_dev)).any(axis=1)) if a.size else []
    if len(bad):
        try:
            check_placement(a[bad[0]], graph, n_dev)
        except InputError as e:
            raise InputError(f"placement row {bad[0]}: {e}") from None
    return _read_only(np.ascontiguousarray(a.astype(np.int32, copy=False)))
