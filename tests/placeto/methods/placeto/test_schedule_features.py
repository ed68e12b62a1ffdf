"""The policy's schedule features: equal to a plain-Python reference, unit-free, and read by the head."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from placeto.methods.placeto import env as E
from placeto.methods.placeto.config import tiny
from placeto.methods.placeto.policy import EPS, N_SCHEDULE_FEATURES, make_policy, schedule_features
from simulator import cluster_preset
from simulator.model.generate import layered_dag

CFG = tiny(max_devices=4, init_placement="random")


def _state(graph, cluster, seed=0, batch=3, steps=5):
    ctx = E.make_context(graph, cluster, CFG)
    state, _ = E.reset(ctx, seed, batch)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        state, _, _ = E.step(state, rng.integers(0, cluster.n_devices, batch))
    return ctx, state


def _features(ctx, state, node):
    a = ctx.arrays
    b = state.placement.shape[0]
    onehot = jax.nn.one_hot(state.placement.T, a.dev_mask.shape[0]) * a.node_mask[:, None, None]
    return np.asarray(schedule_features(jax.tree.map(jnp.asarray, a), onehot, jnp.swapaxes(state.schedule, 0, 1),
                                        jnp.full(b, node, jnp.int32)))


def _reference(ctx, state, node):
    """The features of `schedule_features`, one episode and device at a time, from the simulated schedule."""
    g, cluster, a = ctx.graph, ctx.cluster, ctx.arrays
    n, d_real = g.n_nodes, cluster.n_devices
    par_off, par = g.parents
    ch_off, ch = g.children
    parents = sorted(set(par[par_off[node]:par_off[node + 1]].tolist()))
    children = sorted(set(ch[ch_off[node]:ch_off[node + 1]].tolist()))
    out = np.zeros((state.placement.shape[0], a.dev_mask.shape[0], N_SCHEDULE_FEATURES))
    for b in range(state.placement.shape[0]):
        place, sched = state.placement[b, :n], state.schedule[b, :n].astype(np.float64)
        start, finish, peak_of, per_r = sched[:, 0], sched[:, 1], sched[:, 2], sched[0, 3]
        xfer = a.xfer_units[:n].astype(np.float64) * per_r
        busy = np.zeros(d_real)
        for u in range(n):
            busy[place[u]] += a.cost_units[u, place[u]] * per_r
        peak = np.zeros(d_real)
        for u in range(n):
            peak[place[u]] = max(peak[place[u]], peak_of[u])
        descendants = set(np.flatnonzero(a.reach[node, :n]).tolist())
        for d in range(a.dev_mask.shape[0]):
            cost = a.cost_units[node, d] * per_r
            ready = max([finish[p] + (place[p] != d) * xfer[p] for p in parents], default=0.0)
            running = [finish[u] for u in range(n) if place[u] == d and u != node and u not in descendants
                       and start[u] < ready - EPS]
            est = max([ready, *running])
            eft = est + cost
            if children:
                lateness = max(eft + (place[c] != d) * xfer[node] - start[c] for c in children)
            else:
                lateness = eft - 1.0
            after = busy.copy()
            after[place[node]] -= a.cost_units[node, place[node]] * per_r
            if d < d_real:
                after[d] += cost
            load = after.max() - busy.max()
            moved = d != place[node]
            headroom = 1.0 - (peak[d] if d < d_real else 0.0) - moved * a.persist_frac[node, d]
            out[b, d] = [ready, est, eft, eft - finish[node], lateness, load, headroom, float(headroom >= 0)]
    return np.clip(out, -4, 4)


def test_schedule_features_equal_the_reference():
    g, cluster = layered_dag(40, seed=3), cluster_preset("placeto-k80", 3)
    ctx, state = _state(g, cluster)
    for node in (int(g.topo_order[0]), int(g.topo_order[17]), int(g.topo_order[-1])):
        got, want = _features(ctx, state, node), _reference(ctx, state, node)
        real = ctx.arrays.dev_mask
        np.testing.assert_allclose(got[:, real], want[:, real], rtol=1e-4, atol=1e-5)


def test_schedule_features_are_unit_free():
    """Costs, bytes, the cluster's overheads and capacities x 10: the same features (every one is a fraction)."""
    g = layered_dag(40, seed=4)
    cluster = cluster_preset("placeto-k80", 3)
    big = dataclasses.replace(g.with_costs("default", g.costs["default"] * 10), out_bytes=g.out_bytes * 10,
                              persistent_bytes=g.persistent_bytes * 10)
    big_cluster = dataclasses.replace(
        cluster, delta1_us=cluster.delta1_us * 10, delta2_us=cluster.delta2_us * 10,
        latency_us=cluster.latency_us * 10,
        devices=tuple(dataclasses.replace(d, memory_bytes=d.memory_bytes * 10) for d in cluster.devices))
    ctx, state = _state(g, cluster, seed=1)
    ctx10, state10 = _state(big, big_cluster, seed=1)
    np.testing.assert_array_equal(state.placement, state10.placement)
    node = int(g.topo_order[20])
    np.testing.assert_allclose(_features(ctx, state, node), _features(ctx10, state10, node), rtol=1e-4, atol=1e-5)


def test_the_head_reads_the_schedule():
    """With schedule_features the logits change with the schedule alone; without, the head ignores it."""
    g, cluster = layered_dag(30, seed=5), cluster_preset("placeto-k80", 3)
    for on in (True, False):
        policy = make_policy(CFG.replace(schedule_features=on, rounds=0))
        ctx, state = _state(g, cluster, seed=2, batch=1)
        params = policy.init(jax.random.key(0), ctx.arrays)
        node, t = np.full(1, int(g.topo_order[10]), np.int32), np.zeros(1, np.int32)
        shifted = state.schedule.copy()
        shifted[..., 1] += 0.3  # later finish times, the start times (the message passing's input) kept
        lp = [np.asarray(policy.log_probs(params, ctx.arrays, state.placement, s, node, t)) for s in
              (state.schedule, shifted)]
        assert (np.abs(lp[0] - lp[1]).max() > 1e-6) == on
