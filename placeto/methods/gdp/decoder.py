"""gdp's list decoders: placements in a list scheduler's order.

Every decision is conditioned on the devices already chosen (GdpConfig.decoder "heft" or "etf").

Order. "heft": the nodes in decreasing upward rank (`placeto.baselines.listsched.problem.heft_order`), fixed in
advance. "etf": m-ETF's order, decided as it goes: the next node is the ready node of the (ready node, device)
pair that can start first among each node's earliest-finish pairs (`placeto.baselines.etf`'s rule, its memory
tiers and floor), whichever device the policy then picks for it.

Decision. For the node v and each device d of its best memory tier, the list schedulers' timeline
(`placeto.baselines.listsched.kernels`: input-ready times with the transfers booked on the channels, when each
device is free) gives the time f[d] at which v would finish on d. The logit of d is

    l[d] = (s[v, d] + w[v, 0] * g[v, d, 0] + w[v, 1] * g[v, d, 1]) / T
    g[v, d, 0] = -log1p((f[d] - min_e f[e]) / u)                     how much later v would finish on d
    g[v, d, 1] = -(load[d] - min_e load[e]) / (mean load + u)         how much more work d has been given

with s (float[N, D] scores) and w (float[N, 2] weights, w[:, 0] > 0) from the network's one forward pass,
load[d] the compute (us) of the nodes placed on d so far, u the graph's cost unit
(`placeto.features.cost_unit`, us), T the temperature; the minima run over the open devices, the mean over all;
devices outside the tier are masked. The device is sampled (inverse CDF of one uniform per node) or taken
greedily (the largest logit; exact ties to the lower device, or broken by the node's uniform) and committed to
the timeline (its transfers booked).

With s = 0, w[:, 1] = 0, w[:, 0] -> inf and ties to the lower device, the "heft" decoder is HEFT and the "etf"
decoder m-ETF. A fresh policy of the large config (s = 0, w[:, 1] = 0, w[:, 0] = 20) starts there; its greedy
decoding breaks the ties at random (placeto.methods.gdp.place), which alone places the op graphs below m-ETF
(experiments/results/ablations/gdp_decoder.md); the network learns per node how much later a device may finish
and whether to consolidate (w[:, 1] < 0) or spread (w[:, 1] > 0).

A sample records what PPO needs to re-evaluate its log-probabilities under new parameters in one batched pass:
the features g and the masks (they depend on the earlier decisions only, which the sample fixes).

`decode` runs the numba kernels; `decode_reference` is the plain-Python oracle
(tests/placeto/methods/gdp/test_decoder.py).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from placeto.baselines.listsched.problem import State, build_problem, earliest_finish, heft_order
from placeto.baselines.listsched.kernels import new_timeline, place, ready_time, tier
from placeto.baselines.etf import after_placing, etf_start, pop_earliest
from placeto.features import cost_unit
from simulator.model.cluster import Cluster
from simulator.model.graph import Graph


N_FEATURES = 2  # g's last axis: finish gap, load gap
TIE = 1e-9  # logits this close to the largest tie in a greedy decoding


class Decoding(NamedTuple):
    """B placements decoded from one forward pass.

    N real nodes, D real devices.
    """

    acts: np.ndarray  # int32[B, N] device of each node
    logp: np.ndarray  # float32[B, N] log-probability of each node's device when it was chosen
    feat: np.ndarray  # float32[B, N, D, K] g[v, d, :] at v's decision (K = N_FEATURES); 0 where masked
    allowed: np.ndarray  # bool[B, N, D] devices of v's best memory tier at its decision


def problem(graph: Graph, cluster: Cluster):
    """What decoding `graph` on `cluster` reads, memoised in graph.cache.

    (ScheduleProblem, int64[N] decision order, 1 / cost unit).
    """
    key = ("gdp.decoder", cluster)
    if key not in graph.cache:
        prob = build_problem(graph, cluster)
        graph.cache[key] = (prob, heft_order(prob, graph.topo_order).astype(np.int64),
                            1.0 / cost_unit(graph, cluster))
    return graph.cache[key]


def decode(graph: Graph, cluster: Cluster, scores: np.ndarray, weight: np.ndarray, temperature: float,
           uniforms: np.ndarray | None, order: str = "heft", greedy: bool = False) -> Decoding:
    """Decode B = len(uniforms) placements in `order` ("heft" or "etf").

    Sampled, or with `greedy` the largest logit, exact ties (within TIE) broken by the node's uniform (0: the
    lowest device). See the module docstring.

    Args:
      scores: float[N, D].
      weight: float[N, N_FEATURES].
      uniforms: float[B, N], one uniform in [0, 1) per node; None: one greedy placement, ties to the lowest
        device.
    """
    prob, heft_seq, inv_unit = problem(graph, cluster)
    n, d = prob.cost.shape
    scores = np.ascontiguousarray(scores[:n, :d], np.float64)
    weight = np.ascontiguousarray(weight[:n], np.float64)
    greedy = greedy or uniforms is None
    uniforms = np.zeros((1, n)) if uniforms is None else np.ascontiguousarray(uniforms, np.float64)
    b = uniforms.shape[0]
    out = Decoding(np.zeros((b, n), np.int32), np.zeros((b, n), np.float32),
                   np.zeros((b, n, d, N_FEATURES), np.float32), np.zeros((b, n, d), np.bool_))
    if order not in ("heft", "etf"):
        raise ValueError(f"unknown decoder order {order!r}")
    for i in range(b):
        args = (prob, new_timeline(prob), scores, weight, inv_unit, 1.0 / temperature, uniforms[i], greedy,
                out.acts[i], out.logp[i], out.feat[i], out.allowed[i])
        if order == "heft":
            _heft_decode(heft_seq, *args)
        else:
            _etf_decode(etf_start(prob), *args)
    return out


@numba.njit(cache=True)
def _choose(v, ok, start, load, prob, scores, weight, inv_unit, inv_temp, u, greedy, feat, allowed, logit):
    """Choose v's device among those with ok[d].

    Returns (device, its log-probability).

    Here start[d] is v's start on d, load[d] the compute d has so far. Writes feat[v], allowed[v] and adds v's cost to
    the chosen device's load.
    """
    n_dev = prob.cost.shape[1]
    f_min, l_min = np.inf, np.inf
    for d in range(n_dev):
        if ok[d]:
            f_min = min(f_min, start[d] + prob.cost[v, d])
            l_min = min(l_min, load[d])
    l_scale = load.sum() / n_dev + 1.0 / inv_unit
    top = -np.inf
    for d in range(n_dev):
        if ok[d]:
            g0 = -math.log1p((start[d] + prob.cost[v, d] - f_min) * inv_unit)
            g1 = -(load[d] - l_min) / l_scale
            feat[v, d, 0], feat[v, d, 1], allowed[v, d] = g0, g1, True
            logit[d] = (scores[v, d] + weight[v, 0] * g0 + weight[v, 1] * g1) * inv_temp
            top = max(top, logit[d])
    total = 0.0
    for d in range(n_dev):
        if ok[d]:
            total += math.exp(logit[d] - top)
    pick = -1
    if greedy:  # the k-th of the n_tied devices at the top, k = floor(u * n_tied)
        n_tied = 0
        for d in range(n_dev):
            if ok[d] and logit[d] >= top - TIE:
                n_tied += 1
        k = min(int(u * n_tied), n_tied - 1)
        for d in range(n_dev):
            if ok[d] and logit[d] >= top - TIE:
                if k == 0:
                    pick = d
                    break
                k -= 1
    else:
        target, acc = u * total, 0.0
        for d in range(n_dev):
            if ok[d]:
                pick = d  # the last open device if rounding leaves the target beyond the sum
                acc += math.exp(logit[d] - top)
                if target < acc:
                    break
    load[pick] += prob.cost[v, pick]
    return pick, logit[pick] - top - math.log(total)


@numba.njit(cache=True)
def _heft_decode(order, prob, tl, scores, weight, inv_unit, inv_temp, uniforms, greedy, acts, logp, feat, allowed):
    n_dev = prob.cost.shape[1]
    ok = np.empty(n_dev, np.bool_)
    start, logit, load = np.empty(n_dev), np.empty(n_dev), np.zeros(n_dev)
    for v in order:
        best_tier = 2
        for d in range(n_dev):
            best_tier = min(best_tier, tier(v, d, prob, tl))
        for d in range(n_dev):
            ok[d] = tier(v, d, prob, tl) == best_tier
            if ok[d]:
                start[d] = max(ready_time(v, d, False, prob, tl)[0], tl.avail[d])
        pick, lp = _choose(v, ok, start, load, prob, scores, weight, inv_unit, inv_temp, uniforms[v], greedy,
                           feat, allowed, logit)
        acts[v], logp[v] = pick, lp
        place(v, pick, start[pick], prob, tl)


@numba.njit(cache=True)
def _etf_decode(st, prob, tl, scores, weight, inv_unit, inv_temp, uniforms, greedy, acts, logp, feat, allowed):
    """m-ETF's node order; each node's device chosen by `_choose`.

    The node choice of `placeto.baselines.etf._etf_kernel` (with its cached estimates and pruning); each device of
    the node's best tier at max(input-ready, free, floor).
    """
    n, n_dev = prob.cost.shape
    ok = np.empty(n_dev, np.bool_)
    start, logit, load = np.empty(n_dev), np.empty(n_dev), np.zeros(n_dev)
    t_last = 0.0
    for _ in range(n):
        v, _, bs, best_tier, floor = pop_earliest(t_last, st, prob, tl)
        for d in range(n_dev):
            ok[d] = tier(v, d, prob, tl) == best_tier
            if ok[d]:
                start[d] = max(max(ready_time(v, d, False, prob, tl)[0], tl.avail[d]), floor)
        pick, lp = _choose(v, ok, start, load, prob, scores, weight, inv_unit, inv_temp, uniforms[v], greedy,
                           feat, allowed, logit)
        acts[v], logp[v] = pick, lp
        place(v, pick, start[pick], prob, tl)
        t_last = bs
        after_placing(v, st, prob, tl)


def decode_reference(graph: Graph, cluster: Cluster, scores: np.ndarray, weight: np.ndarray, temperature: float,
                     uniforms: np.ndarray | None, order: str = "heft", greedy: bool = False) -> Decoding:
    """`decode` in plain Python: the kernels' oracle.

    Over `_listsched.State`.
    """
    prob, heft_seq, inv_unit = problem(graph, cluster)
    n, n_dev = prob.cost.shape
    out = []
    for u_row in [None] if uniforms is None else list(uniforms):
        st = State(prob)
        act, lp = np.zeros(n, np.int32), np.zeros(n, np.float32)
        ft, al = np.zeros((n, n_dev, N_FEATURES), np.float32), np.zeros((n, n_dev), bool)
        load = [0.0] * n_dev
        pending, t_last = np.diff(prob.par_off).tolist(), 0.0
        ready = [v for v in range(n) if pending[v] == 0]
        for k in range(n):
            if order == "heft":
                v, floor = int(heft_seq[k]), 0.0
                tiers = [st.tier(v, d) for d in range(n_dev)]
                ok = [d for d in range(n_dev) if tiers[d] == min(tiers)]
            else:  # m-ETF's pair (the earliest start among its nodes' earliest-finish pairs) names the node
                tiers = {(w, d): st.tier(w, d) for w in ready for d in range(n_dev)}
                best_tier = min(tiers.values())
                floor = t_last if best_tier == 0 else max([t_last] + st.avail)
                pairs = []
                for w in ready:
                    starts = {d: max(st.ready_time(w, d)[0], st.avail[d], floor) for d in range(n_dev)
                              if tiers[w, d] == best_tier}
                    pairs += [(starts[d], int(prob.topo_pos[w]), d, w) for d in earliest_finish(prob, w, starts)]
                t_last, _, _, v = min(pairs)
                ok = [d for d in range(n_dev) if tiers[v, d] == best_tier]
                ready.remove(v)
            start = {d: max(st.ready_time(v, d)[0], st.avail[d], floor) for d in ok}
            f_min = min(start[d] + float(prob.cost[v, d]) for d in ok)
            l_min, l_scale = min(load[d] for d in ok), sum(load) / n_dev + 1.0 / inv_unit
            logit = {}
            for d in ok:
                g0 = -math.log1p((start[d] + float(prob.cost[v, d]) - f_min) * inv_unit)
                g1 = -(load[d] - l_min) / l_scale
                ft[v, d], al[v, d] = (g0, g1), True
                logit[d] = (float(scores[v, d]) + float(weight[v, 0]) * g0 + float(weight[v, 1]) * g1) * \
                    (1.0 / temperature)
            top = max(logit.values())
            total = sum(math.exp(x - top) for x in logit.values())
            if u_row is None or greedy:
                tied = [d for d in ok if logit[d] >= top - TIE]
                u = 0.0 if u_row is None else float(u_row[v])
                pick = tied[min(int(u * len(tied)), len(tied) - 1)]
            else:
                target, acc = float(u_row[v]) * total, 0.0
                for pick in ok:
                    acc += math.exp(logit[pick] - top)
                    if target < acc:
                        break
            act[v], lp[v] = pick, logit[pick] - top - math.log(total)
            load[pick] += float(prob.cost[v, pick])
            st.commit(v, pick, start[pick])
            for c in prob.ch[prob.ch_off[v]:prob.ch_off[v + 1]].tolist():
                pending[c] -= 1
                if pending[c] == 0:
                    ready.append(c)
        out.append((act, lp, ft, al))
    return Decoding(*(np.stack(field) for field in zip(*out)))
