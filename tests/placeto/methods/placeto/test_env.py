"""The placement MDP: telescoping rewards, determinism, the feasibility-first objective, visit orders, simulator agreement."""


import numpy as np
import pytest

from placeto.methods.placeto import env as E
from placeto.methods.placeto.config import tiny
from simulator import cluster_preset, simulate_reference
from simulator.model.cluster import Cluster, Device
from simulator.model.result import upper_bound
from simulator.model.generate import layered_dag


def _run(ctx, seed, batch=3, placement=None):
    rng = np.random.default_rng(seed + 100)
    state, obs = E.reset(ctx, seed, batch, placement)
    rewards, done = [], False
    while not done:
        assert obs.node == ctx.visit_seq[state.t]
        state, r, done = E.step(state, rng.integers(0, ctx.cluster.n_devices, batch))
        obs = E.observe(state)
        rewards.append(r)
    return state, np.asarray(rewards)


@pytest.mark.parametrize("init", ["single", "random"])
def test_rewards_telescope(init):
    g, cluster = layered_dag(40, seed=4), cluster_preset("placeto-k80", 4)
    ctx = E.make_context(g, cluster, tiny(init_placement=init, passes=2))
    state0, _ = E.reset(ctx, 7, 3)
    state, rewards = _run(ctx, 7)
    assert rewards.shape == (80, 3)
    np.testing.assert_allclose(rewards.sum(0), (state0.runtime - state.runtime) / ctx.reward_scale,
                               rtol=0, atol=1e-12)
    assert (state.best_runtime <= np.minimum(state0.runtime, state.runtime)).all()


def test_runtimes_match_the_reference_simulator():
    g, cluster = layered_dag(30, seed=5), cluster_preset("placeto-k80", 3)
    ctx = E.make_context(g, cluster, tiny(init_placement="random"))
    state, _ = _run(ctx, 1, batch=2)
    for b in range(2):
        ref = simulate_reference(g, state.placement[b, :30], cluster)
        assert state.runtime[b] == ref.runtime
        np.testing.assert_allclose(state.schedule[b, :30, 0], ref.start / ref.runtime, rtol=1e-6)
        np.testing.assert_allclose(state.schedule[b, :30, 1], ref.end / ref.runtime, rtol=1e-6)
        peak = ref.peak_memory / ref.capacity
        np.testing.assert_allclose(state.schedule[b, :30, 2], peak[state.placement[b, :30]], rtol=1e-6)
        np.testing.assert_allclose(state.schedule[b, :30, 3], ctx.time_unit / ref.runtime, rtol=1e-6)
        assert (state.schedule[b, 30:] == 0).all()
        p = state.best_placement[b]
        assert simulate_reference(g, p, cluster).runtime == state.best_runtime[b]


def test_deterministic_under_seed():
    g, cluster = layered_dag(30, seed=6), cluster_preset("placeto-k80", 4)
    ctx = E.make_context(g, cluster, tiny(init_placement="random"))
    s1, r1 = _run(ctx, 3)
    s2, r2 = _run(ctx, 3)
    s3, _ = _run(ctx, 4)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(s1.placement, s2.placement)
    assert not np.array_equal(E.reset(ctx, 3, 3)[0].placement, E.reset(ctx, 4, 3)[0].placement)


def test_out_of_memory_objective():
    g = layered_dag(20, seed=7)
    small = Cluster("small", tuple(Device(f"d{i}", "k80", 1e6) for i in range(2)), 5.7, 25.0, 7600.0)
    ctx = E.make_context(g, small, tiny())
    res = simulate_reference(g, np.zeros(20, int), small)
    excess = (np.maximum(res.peak_memory - res.capacity, 0) / res.capacity).sum()
    assert excess > 0
    assert ctx.reward_scale == res.runtime  # single-device runtime, memory ignored
    assert ctx.bound == upper_bound(g, small) and ctx.bound > res.runtime
    assert E.objective_of(ctx, res) == pytest.approx(ctx.bound * (2 + excess) + 1e-6 * res.runtime)
    roomy = Cluster("roomy", tuple(Device(f"d{i}", "k80", 1e12) for i in range(2)), 5.7, 25.0, 7600.0)
    fits = simulate_reference(g, np.zeros(20, int), roomy)
    assert E.objective_of(E.make_context(g, roomy, tiny()), fits) == fits.runtime == res.runtime


def test_visit_orders_and_given_placement():
    g = layered_dag(25, seed=8)
    topo = E.visit_sequence(g, "topo", 1)
    pos = np.empty(25, int)
    pos[topo] = np.arange(25)
    assert all(pos[s] < pos[d] for s, d in zip(g.edge_src, g.edge_dst))
    np.testing.assert_array_equal(E.visit_sequence(g, "reverse_topo", 1), topo[::-1])
    r1, r2 = E.visit_sequence(g, "random_fixed", 3, seed=1), E.visit_sequence(g, "random_fixed", 3, seed=1)
    np.testing.assert_array_equal(r1, r2)
    assert len(r1) == 75 and sorted(r1[:25].tolist()) == list(range(25))
    ctx = E.make_context(g, cluster_preset("placeto-k80", 2), tiny())
    given = np.arange(25) % 2
    state, _ = E.reset(ctx, 0, 2, given)
    np.testing.assert_array_equal(state.placement[:, :25], np.stack([given, given]))
    assert not state.placement[:, 25:].any()


def test_unchanged_placement_costs_no_simulation():
    g = layered_dag(20, seed=9)
    ctx = E.make_context(g, cluster_preset("placeto-k80", 2), tiny())
    state, _ = E.reset(ctx, 0, 2)
    state, r, _ = E.step(state, np.array([0, 1]))  # single-device start: only episode 1 changes
    assert state.sim_calls == 3 and r[0] == 0.0
    with pytest.raises(ValueError):
        E.step(state, np.array([0, 2]))


@pytest.mark.parametrize("memory", [3e5, 1e12])
def test_action_rewards_are_the_rewards_step_would_give(memory):
    g = layered_dag(30, seed=9)
    small = Cluster("small", tuple(Device(f"d{i}", "k80", memory) for i in range(3)), 5.7, 25.0, 7600.0)
    ctx = E.make_context(g, small, tiny(init_placement="random"))
    state, _ = E.reset(ctx, 2, 2)
    rng = np.random.default_rng(0)
    for _ in range(12):
        every = E.action_rewards(state)
        assert every.shape == (2, 3)
        for d in range(3):  # each alternative, taken for real
            assert np.array_equal(E.step(state, np.full(2, d))[1], every[:, d])
        state, _, _ = E.step(state, rng.integers(0, 3, 2))


def test_undo_worse_makes_the_pass_a_descent_at_the_same_cost():
    """With undo_worse every step's objective is the best so far, a worse move leaves no trace, and the only
    simulator calls are one per move tried."""
    g, cluster = layered_dag(30, seed=6), cluster_preset("placeto-k80", 3)
    plain = E.make_context(g, cluster, tiny(init_placement="random"))
    undo = E.make_context(g, cluster, tiny(init_placement="random", undo_worse=True))
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 3, (plain.n_steps, 2))
    s_plain, _ = E.reset(plain, 3, 2)
    s_undo, _ = E.reset(undo, 3, 2)
    undone, calls = 0, 2
    for a in actions:
        before = s_undo
        calls += int((before.placement[:, before.ctx.visit_seq[before.t]] != a).sum())
        s_plain, _, _ = E.step(s_plain, a)
        s_undo, r, _ = E.step(s_undo, a)
        assert (r >= 0).all() and (s_undo.runtime <= before.runtime).all()
        np.testing.assert_array_equal(s_undo.runtime, s_undo.best_runtime)
        kept = s_undo.runtime < before.runtime
        undone += int((~kept & (before.placement[:, before.ctx.visit_seq[before.t]] != a)).sum())
        for b in np.flatnonzero(~kept):
            np.testing.assert_array_equal(s_undo.placement[b], before.placement[b])
            np.testing.assert_array_equal(s_undo.schedule[b], before.schedule[b])
    assert undone > 0
    for b in range(2):
        assert simulate_reference(g, s_undo.placement[b, :30], cluster).runtime == s_undo.runtime[b]
    assert s_undo.sim_calls == calls  # one call per move tried, none to undo it
