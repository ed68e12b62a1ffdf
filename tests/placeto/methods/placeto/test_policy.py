"""The policy: shapes, device masking, padding invariance, any device count, no recompiles within a bucket."""

import dataclasses

import jax
import numpy as np

from placeto.methods.placeto import env as E
from placeto import features as F
from placeto.methods.placeto.config import tiny
from placeto.methods.placeto.policy import TRACES, make_policy
from simulator import cluster_preset
from simulator.model.generate import layered_dag

CFG = tiny(max_devices=6)


def _setup(n, n_dev, seed=0, **pad):
    g, cluster = layered_dag(n, seed=seed), cluster_preset("placeto-k80", n_dev)
    ctx = E.make_context(g, cluster, CFG)
    if pad:
        ctx = dataclasses.replace(ctx, arrays=F.graph_arrays(g, cluster, ctx.visit_seq, 6, **pad))
    return ctx


def _log_probs(policy, params, ctx, seed=0, batch=3):
    state, obs = E.reset(ctx, seed, batch)
    state, _, _ = E.step(state, np.arange(batch) % ctx.cluster.n_devices)
    state, _, _ = E.step(state, np.zeros(batch, int))
    obs = E.observe(state)
    nodes = np.full(batch, obs.node, np.int32)
    return np.asarray(policy.log_probs(params, ctx.arrays, obs.placement, obs.schedule, nodes,
                                       np.full(batch, obs.t, np.int32)))


def test_shapes_masking_and_any_device_count():
    policy = make_policy(CFG)
    ctx4 = _setup(30, 4)
    params = policy.init(jax.random.key(0), ctx4.arrays)
    for n_dev in (2, 4, 6):
        lp = _log_probs(policy, params, _setup(30, n_dev), batch=3)
        assert lp.shape == (3, 6) and np.isfinite(lp[:, :n_dev]).all()
        np.testing.assert_allclose(np.exp(lp[:, :n_dev]).sum(-1), 1.0, rtol=1e-5)
        assert (np.exp(lp[:, n_dev:]) == 0).all()


def test_padding_does_not_change_the_policy():
    policy = make_policy(CFG)
    small, big = _setup(30, 4), _setup(30, 4, n_pad=96, e_pad=200)
    assert F.shape_key(small.arrays) != F.shape_key(big.arrays)
    params = policy.init(jax.random.key(1), small.arrays)
    np.testing.assert_allclose(_log_probs(policy, params, small), _log_probs(policy, params, big), atol=1e-5)


def test_act_greedy_and_sampled():
    policy = make_policy(CFG)
    ctx = _setup(20, 3)
    params = policy.init(jax.random.key(2), ctx.arrays)
    _, obs = E.reset(ctx, 0, 64)
    greedy, _ = policy.act(params, ctx.arrays, obs, jax.random.key(0), True)
    sampled, logp = policy.act(params, ctx.arrays, obs, jax.random.key(0), False)
    assert len(set(np.asarray(greedy).tolist())) == 1  # identical states -> identical argmax
    assert np.asarray(sampled).max() < 3 and (np.asarray(logp) <= 0).all()


def test_no_recompiles_within_a_bucket():
    policy = make_policy(CFG)
    a, b, c = _setup(40, 4, seed=1), _setup(45, 4, seed=2), _setup(200, 4, seed=3)
    assert F.shape_key(a.arrays) == F.shape_key(b.arrays) != F.shape_key(c.arrays)
    params = policy.init(jax.random.key(3), a.arrays)
    key = jax.random.key(0)

    def act_once(ctx):
        _, obs = E.reset(ctx, 0, 2)
        jax.block_until_ready(policy.act(params, ctx.arrays, obs, key, False))

    act_once(a)
    before = TRACES["act"]
    act_once(b)
    act_once(a)
    assert TRACES["act"] == before  # same bucket: no new trace
    act_once(c)
    assert TRACES["act"] == before + 1  # a new bucket compiles once
