"""The list schedulers' model, and plain references as oracles.

The list schedulers (`etf`, `heft`, `m-sct`) keep one estimated timeline per device and per channel:

* node v runs on device d for cost[v, d] us (the graph's cost for the device's kind, as the simulator prices it);
  the device can start its next op delta1 us later (not after a zero-cost op);
* transfers move output tensors (producer, output index), each a separate transfer, like the simulator. A
  child on another device than its parent needs the distinct outputs of the parent it consumes; an output
  is sent at most once: one transfer serves every other device (the simulator's broadcast), or, with
  copy_per_device (Baechi), at most once to each device. A transfer of output o from device a to device b
  starts at max(producer end, channel[a] free); it keeps channel[a] busy for busy[o] us and the data arrives
  latency[o] us after the start. With a shared channel (Baechi's model) the receiver's channel is used too:
  the transfer is received from max(send start, channel[b] free), busy[o] us, arriving latency[o] us later;
* a node's input-ready time on a device is the latest arrival (or same-device parent end) of its inputs;
* memory (Baechi's m-ETF rule): a node placed on d charges need = persistent + output bytes to d; the output
  bytes are given back once every child of the node is placed. A device is open to v if v's need fits
  (tier 0). If nothing fits (etf: no ready node on any device; heft: the node on any device), the
  scheduler falls back to devices where v's persistent bytes fit (tier 1), then to any device (tier 2), where
  Baechi would stop with an error;
* mixed devices: m-ETF and m-SCT put a node only on a device where it finishes first (`earliest_finish`), HEFT
  always did; on identical devices that is a device where it starts first, so nothing changes there.

`TRANSFER_MODELS` names the variants; see `TransferModel`. The references below are deliberately plain; the
kernels (etf.py, heft.py) and Baechi's own event loop (`baechi_reference`) are tested equal to them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from placeto.baselines.common import memory_need
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


class TransferModel(NamedTuple):
    """How the list schedulers estimate transfers.

    The timeline: see the module docstring.
    """

    latency_with_delta2: bool  # data arrives bytes/bandwidth + delta2 after the start, not bytes/bandwidth
    whole_us: bool  # transfer times rounded to whole us, as Baechi's get_comm_cost
    shared_channel: bool  # one channel per device for sending and receiving (Baechi), not a send-only bus
    copy_per_device: bool  # each receiving device gets its own copy (Baechi), not one transfer for all
    exact_estimate: bool  # estimate = the commit dry-run; else Baechi's per-parent merged estimate
    delta1: bool  # charge the cluster's delta1 after each op of non-zero cost


TRANSFER_MODELS: dict[str, TransferModel] = {
    # The simulator's own transfer model (simulator/engine/reference.py), except that a transfer is queued when the
    # first child that needs it is placed, not in producer-end order.
    "simulator": TransferModel(False, False, False, False, True, True),
    # The simulator's model with a channel shared by sending and receiving, as in Baechi. The simulator has
    # no receive-side contention, but its FIFO bus sends every remote output of a producer in output order
    # the moment it ends, which a list scheduler cannot foresee; charging the receiver too is the pessimism
    # that makes the greedy choices good (experiments/results/reproduce/baechi_compare.md). A broadcast copy is booked
    # on the first receiver's channel only.
    "shared-channel": TransferModel(False, False, True, False, True, True),
    # Baechi's m-ETF exactly (placer/device.py, placer/placer_utils.py): comm = round(bytes/bw + delta2) us
    # per tensor, one channel per device, a copy per device, no delta1.
    "baechi": TransferModel(True, True, True, True, False, False),
}
DEFAULT_TRANSFER_MODEL = "shared-channel"


class ScheduleProblem(NamedTuple):
    """A graph on a cluster as the list schedulers see it.

    N nodes, D devices, P distinct parent pairs, O outputs. Passed whole to the numba kernels (a namedtuple of
    arrays and scalars).
    """

    cost: np.ndarray  # float64[N, D] compute time of node on device, us
    par_off: np.ndarray  # int64[N + 1] CSR offsets of distinct parents
    par: np.ndarray  # int32[P] parents, ascending per node
    in_off: np.ndarray  # int64[P + 1] outputs of parent par[j] the node consumes: in_out[in_off[j]:in_off[j+1]]
    in_out: np.ndarray  # int64[I] global output index (out_offsets[p] + k), ascending per pair
    ch_off: np.ndarray  # int64[N + 1] CSR offsets of distinct children
    ch: np.ndarray  # int32[P] children, ascending per node
    topo_pos: np.ndarray  # int64[N] position in the graph's Kahn order (Baechi's tie-break)
    need: np.ndarray  # float64[N] bytes charged on the node's device (persistent + outputs)
    persistent: np.ndarray  # float64[N] bytes held for the whole step
    out_total: np.ndarray  # float64[N] output bytes, given back when every child is placed
    capacity: np.ndarray  # float64[D] device memory, bytes
    latency: np.ndarray  # float64[O] transfer start -> data on the receiver, us
    busy: np.ndarray  # float64[O] time a transfer holds its channel(s), us
    delta1: float  # device idle after a non-zero-cost op, us
    shared_channel: bool  # see TransferModel
    copy_per_device: bool
    exact_estimate: bool
    rank: np.ndarray  # float64[N] upward rank: mean cost + max over children (mean comm + rank), us
    slower: np.ndarray  # float64[N, D] cost[v, d] - min_e cost[v, e], us: how much longer v runs on d than on its
    # fastest device; 0 everywhere on identical devices (`earliest_finish` then reduces to the earliest start)
    even: np.ndarray  # bool[N] slower[v] is all zero: v costs the same on every device


def pair_outputs(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Each (parent, child) pair's distinct global outputs used.

    Returns:
      (in_off int64[P + 1], in_out int64[I]): a CSR aligned with `graph.parents`, outputs ascending.
    """
    par_off, par = graph.parents
    n_out = max(int(graph.out_bytes.size), 1)
    dst = np.repeat(np.arange(graph.n_nodes, dtype=np.int64), np.diff(par_off))
    pair_key = dst * graph.n_nodes + par  # pairs are sorted by (dst, src), so this key is ascending
    out = graph.out_offsets[graph.edge_src] + graph.edge_out
    key = np.unique((graph.edge_dst.astype(np.int64) * graph.n_nodes + graph.edge_src) * n_out + out)
    in_off = np.searchsorted(key // n_out, pair_key, side="left")
    return np.append(in_off, key.size).astype(np.int64), (key % n_out).astype(np.int64)


def transfer_times(graph: Graph, cluster: Cluster, model: TransferModel) -> tuple[np.ndarray, np.ndarray]:
    """(latency, busy): float64[O] us per output tensor under `model`."""
    xfer = graph.out_bytes / cluster.bandwidth_bytes_per_us
    busy = xfer + cluster.delta2_us
    if model.whole_us:
        busy = np.round(busy)  # Baechi: int(round(coef * bytes + intercept)); numpy and Python both round half even
    return (busy if model.latency_with_delta2 else xfer), busy


def build_problem(graph: Graph, cluster: Cluster, model: str | TransferModel = DEFAULT_TRANSFER_MODEL
                  ) -> ScheduleProblem:
    """The arrays the list schedulers read, under transfer model `model`.

    `model`: a TRANSFER_MODELS name, or a TransferModel.
    """
    tm = TRANSFER_MODELS[model] if isinstance(model, str) else model
    par_off, par = graph.parents
    in_off, in_out = pair_outputs(graph)
    latency, busy = transfer_times(graph, cluster, tm)
    cost = graph.cost_matrix(cluster.kinds)
    ch_off, ch = graph.children
    topo_pos = np.empty(graph.n_nodes, dtype=np.int64)
    topo_pos[graph.topo_order] = np.arange(graph.n_nodes)
    pair_comm = np.add.reduceat(busy[in_out], in_off[:-1]) if in_out.size else np.zeros(0)
    rank = upward_rank(graph, cost.mean(axis=1), pair_comm * (cluster.n_devices - 1) / cluster.n_devices)
    slower = cost - cost.min(axis=1, keepdims=True)
    return ScheduleProblem(cost, par_off, par, in_off, in_out, ch_off, ch, topo_pos, memory_need(graph),
                           graph.persistent_bytes, graph.node_out_bytes,
                           np.asarray(cluster.memory, dtype=np.float64), latency, busy,
                           float(cluster.delta1_us) if tm.delta1 else 0.0, tm.shared_channel, tm.copy_per_device,
                           tm.exact_estimate, rank, slower, ~(slower != 0).any(axis=1))


def upward_rank(graph: Graph, mean_cost: np.ndarray, mean_comm: np.ndarray) -> np.ndarray:
    """HEFT's upward rank float64[N], us.

    mean_cost: float64[N], us; mean_comm: float64[P], us, aligned with `graph.parents`. rank[p] >= rank[c] for
    every edge p -> c (floating-point addition of non-negatives is monotone), so sorting by (-rank, topological
    position) is a topological order.
    """
    par_off, par = graph.parents
    rank = np.asarray(mean_cost, dtype=np.float64).copy()
    best_child = np.zeros(graph.n_nodes)  # max over children of (comm + rank[child])
    off, par_l, comm_l = par_off.tolist(), par.tolist(), np.asarray(mean_comm).tolist()
    for v in graph.topo_order[::-1].tolist():
        rank[v] = mean_cost[v] + best_child[v]
        for j in range(off[v], off[v + 1]):
            p = par_l[j]
            best_child[p] = max(best_child[p], comm_l[j] + rank[v])
    return rank


def heft_order(prob: ScheduleProblem, topo_order: np.ndarray) -> np.ndarray:
    """Nodes int32[N] by decreasing upward rank, then topologically.

    So parents come before their children.
    """
    pos = np.empty(len(topo_order), dtype=np.int64)
    pos[topo_order] = np.arange(len(topo_order))
    return np.lexsort((pos, -prob.rank)).astype(np.int32)


class Schedule(NamedTuple):
    """What a list scheduler decided.

    device: int32[N]; start, end: float64[N] estimated times, us.
    """

    device: np.ndarray
    start: np.ndarray
    end: np.ndarray


# ---- plain references ---------------------------------------------------------------------------------------
class State:
    """The timelines of a partial schedule, in plain Python.

    Shared by the references below and `baechi_reference`.
    """

    def __init__(self, prob: ScheduleProblem):
        self.prob = prob
        n, n_dev = prob.cost.shape
        self.device, self.start, self.end = [-1] * n, [0.0] * n, [0.0] * n
        self.avail = [0.0] * n_dev  # device free, us
        self.chan = [0.0] * n_dev  # channel free, us
        self.arrival = [[-1.0] * n_dev for _ in range(prob.latency.size)]  # -1: not on that device yet
        self.used, self.used_p = [0.0] * n_dev, [0.0] * n_dev  # bytes charged; persistent bytes charged
        self.kids_left = np.diff(prob.ch_off).tolist()
        self.senders: set[int] = set()  # devices that sent in the last commit

    def tier(self, v: int, d: int) -> int:
        """0: v's need fits on d; 1: its persistent bytes fit; 2: neither."""
        p, cap = self.prob, float(self.prob.capacity[d])
        if self.used[d] + float(p.need[v]) <= cap:
            return 0
        return 1 if self.used_p[d] + float(p.persistent[v]) <= cap else 2

    def ready_time(self, v: int, d: int, commit: bool = False) -> tuple[float, set[int]]:
        """(time v's inputs are all on d, devices that must send them).

        With commit, book the transfers.
        """
        p = self.prob
        chan = self.chan if commit else list(self.chan)
        r, senders = 0.0, set()
        for j in range(int(p.par_off[v]), int(p.par_off[v + 1])):
            q = int(p.par[j])
            src = self.device[q]
            if src == d:
                r = max(r, self.end[q])
                continue
            todo = []
            for o in p.in_out[p.in_off[j]:p.in_off[j + 1]].tolist():
                if self.arrival[o][d] >= 0:
                    r = max(r, self.arrival[o][d])
                else:
                    todo.append(o)
            if not todo:
                continue
            senders.add(src)
            if commit or p.exact_estimate:
                for o in todo:
                    r = max(r, self._send(o, q, src, d, chan, commit))
            else:
                r = max(r, self._merged(todo, q, src, d))
        return r, senders

    def _send(self, o: int, q: int, src: int, d: int, chan: list[float], record: bool) -> float:
        p = self.prob
        start = max(self.end[q], chan[src])
        chan[src] = start + float(p.busy[o])
        if p.shared_channel:
            start = max(start, chan[d])
            chan[d] = start + float(p.busy[o])
        arrive = start + float(p.latency[o])
        if record:
            for e in ([d] if p.copy_per_device else range(len(chan))):
                if e != src:
                    self.arrival[o][e] = arrive
        return arrive

    def _merged(self, todo: list[int], q: int, src: int, d: int) -> float:
        """Baechi's estimate: q's missing outputs as one transfer.

        On the current channels; nothing is booked.
        """
        p = self.prob
        start = max(self.end[q], self.chan[src])
        if p.shared_channel:
            start = max(start, self.chan[d])
        span = 0.0
        for o in todo[:-1]:
            span += float(p.busy[o])
        return start + (span + float(p.latency[todo[-1]]))

    def commit(self, v: int, d: int, s: float) -> None:
        """Place v on d at the later of s and its booked input-ready time."""
        p = self.prob
        r, self.senders = self.ready_time(v, d, commit=True)
        c = float(p.cost[v, d])
        self.device[v], self.start[v] = d, max(s, r)
        self.end[v] = self.start[v] + c
        self.avail[d] = self.end[v] + p.delta1 if c > 0 else self.end[v]
        self.used[d] += float(p.need[v])
        self.used_p[d] += float(p.persistent[v])
        for j in range(int(p.par_off[v]), int(p.par_off[v + 1])):
            q = int(p.par[j])
            self.kids_left[q] -= 1
            if self.kids_left[q] == 0:  # every child placed: the outputs are no longer charged
                self.used[self.device[q]] -= float(p.out_total[q])

    def schedule(self) -> Schedule:
        return Schedule(np.asarray(self.device, dtype=np.int32), np.asarray(self.start), np.asarray(self.end))


def etf_reference(prob: ScheduleProblem) -> Schedule:
    """m-ETF: repeatedly place the ready pair that can start first, on a device where its node finishes first.

    A pair is (ready node, device). A pair's start is max(estimated input-ready time, device free, time of the
    previous pick); only each node's earliest-finish pairs compete (`earliest_finish`: on identical devices, those
    that start first, so this is Baechi's rule; on mixed devices a node is not put on a slow device because it is
    free). Ties go to the earlier node in topological order, then the lower device (Baechi's order). Only pairs of
    the best memory tier compete; when that is not tier 0 (nothing fits anywhere), the start is also held back to
    when every device is idle, the time Baechi's loop would stop waiting for memory.
    """
    st = State(prob)
    n, n_dev = prob.cost.shape
    pending = np.diff(prob.par_off).tolist()
    ready = [v for v in range(n) if pending[v] == 0]
    t_last = 0.0
    for _ in range(n):
        tiers = {(v, d): st.tier(v, d) for v in ready for d in range(n_dev)}
        best_tier = min(tiers.values())
        floor = t_last if best_tier == 0 else max([t_last] + st.avail)
        best = None
        for v in ready:
            starts = {d: max(st.ready_time(v, d)[0], st.avail[d], floor) for d in range(n_dev)
                      if tiers[v, d] == best_tier}
            for d in earliest_finish(prob, v, starts):
                key = (starts[d], int(prob.topo_pos[v]), d, v)
                best = key if best is None or key < best else best
        s, _, d, v = best
        ready.remove(v)
        st.commit(v, d, s)
        t_last = s
        for c in prob.ch[prob.ch_off[v]:prob.ch_off[v + 1]].tolist():
            pending[c] -= 1
            if pending[c] == 0:
                ready.append(c)
    return st.schedule()


def earliest_finish(prob: ScheduleProblem, v: int, starts: dict[int, float]) -> list[int]:
    """The devices of `starts` on which node v finishes first, ascending.

    starts: {device: start, us} of the devices v may go to. A device's finish is compared as start + slower[v, d]
    (its finish less v's least cost: the same order as the finish, and on identical devices exactly the start, so
    the earliest-finish devices are then the earliest-start ones to the last bit).
    """
    adjusted = {d: s + float(prob.slower[v, d]) for d, s in starts.items()}
    first = min(adjusted.values(), default=math.inf)
    return [d for d in sorted(adjusted) if adjusted[d] == first]


def heft_reference(prob: ScheduleProblem, order: np.ndarray) -> Schedule:
    """HEFT, no insertion: each node in `order` where it finishes first.

    Only the devices of its best memory tier compete; start = max(estimated input-ready, device free). Ties:
    earlier start, lower device.
    """
    st = State(prob)
    n_dev = prob.cost.shape[1]
    for v in order.tolist():
        tiers = [st.tier(v, d) for d in range(n_dev)]
        best = None
        for d in range(n_dev):
            if tiers[d] == min(tiers):
                s = max(st.ready_time(v, d)[0], st.avail[d])
                key = (s + float(prob.cost[v, d]), s, d)
                best = key if best is None or key < best else best
        _, s, d = best
        st.commit(v, d, s)
    return st.schedule()
