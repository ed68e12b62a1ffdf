"""embed_every > 1: the rollout's stale-embedding policy, its block gradient and training, against plain
re-evaluation step by step."""

import json

import jax
import numpy as np

from placeto.methods.placeto import env as E
from placeto.methods.placeto.config import tiny
from placeto.methods.placeto.gradient import BlockChunk, block_log_probs, make_grad_fn, policy_gradient
from placeto.methods.placeto.policy import make_policy
from placeto.methods.placeto.rollout import collect_rollout
from placeto.methods.placeto.train import train
from simulator import cluster_preset
from simulator.model.generate import layered_dag

M = 3


def _rollout(m=M, greedy=False, batch=4, n=25):
    config = tiny(embed_every=m, max_devices=4, init_placement="random")
    graph, cluster = layered_dag(n, seed=4), cluster_preset("placeto-k80", 3)
    ctx = E.make_context(graph, cluster, config)
    arrays, policy = jax.device_put(ctx.arrays), make_policy(config)
    params = policy.init(jax.random.key(1), arrays)
    ro = collect_rollout(policy, params, ctx, arrays, jax.random.key(2), batch, 5, greedy=greedy)
    return config, ctx, arrays, policy, params, ro


def _step_by_step(policy, params, arrays, ro, m):
    """float32[T, B, Dm]: each step's log-probabilities, embeddings recomputed at t % m == 0 (plain loop)."""
    out = []
    for t in range(len(ro.nodes)):
        b = ro.actions.shape[1]
        args = lambda s: (ro.placement[s].astype(np.int32), ro.schedule[s], np.full(b, ro.nodes[s], np.int32),  # noqa
                          np.full(b, s, np.int32))
        if t % m == 0:
            h = policy.embed(params, arrays, *args(t))
        out.append(np.asarray(policy.head_log_probs(params, arrays, *args(t), h)))
    return np.stack(out)


def test_greedy_rollout_takes_the_argmax_of_the_stale_policy():
    _, _, arrays, policy, params, ro = _rollout(greedy=True)
    logp = _step_by_step(policy, params, arrays, ro, M)
    np.testing.assert_array_equal(ro.actions, logp[..., :3].argmax(-1))


def test_refresh_step_is_the_plain_policy():
    config, ctx, arrays, policy, params, _ = _rollout()
    _, obs = E.reset(ctx, 0, 4)
    a1, lp1 = policy.act(params, arrays, obs, jax.random.key(0), True)
    a2, lp2, h = policy.act_refresh(params, arrays, obs, jax.random.key(0), True)
    a3, lp3 = policy.act_stale(params, arrays, obs, jax.random.key(0), True, h)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(a2, a3)
    np.testing.assert_allclose(lp1, lp2, atol=1e-5)
    np.testing.assert_allclose(lp2, lp3, atol=1e-6)


def test_block_log_probs_equal_the_rollouts_policy():
    _, _, arrays, policy, params, ro = _rollout()
    t_len = len(ro.nodes)
    n_blocks = -(-t_len // M)
    idx = np.minimum(np.arange(n_blocks * M).reshape(n_blocks, M), t_len - 1)
    z = np.zeros(idx.shape + (ro.actions.shape[1],), np.float32)
    chunk = BlockChunk(ro.placement[idx], ro.schedule[idx], ro.nodes[idx], idx.astype(np.int32),
                       ro.actions[idx], z, np.zeros(z.shape + (4,), np.float32), np.ones(idx.shape, np.float32))
    got = np.asarray(block_log_probs(policy.net, params, arrays, chunk)).reshape(n_blocks * M, -1, 4)
    want = _step_by_step(policy, params, arrays, ro, M)
    real = np.arange(n_blocks * M) < t_len
    np.testing.assert_allclose(got[real], want, atol=1e-5)


def test_block_gradient_weights_average_over_every_step():
    """grad_steps = 0: the entropy total is the mean entropy over all steps and episodes, as the plain loop's."""
    config, ctx, arrays, policy, params, ro = _rollout()
    logp = _step_by_step(policy, params, arrays, ro, M)[..., :3]
    want = float(-(np.exp(logp) * logp).sum(-1).mean())
    adv = np.zeros(ro.rewards.shape)
    aadv = np.zeros(ro.rewards.shape + (4,))
    for grad_steps in (0, 6):  # all blocks, and 2 of them (unbiased: a weight of NB / (K T B) per step)
        cfg = config.replace(grad_steps=grad_steps)
        _, totals = policy_gradient(make_grad_fn(policy), params, ctx, arrays, ro, adv, aadv, cfg,
                                    np.random.default_rng(0), 1.0)
        if grad_steps == 0:
            np.testing.assert_allclose(totals[2], want, rtol=1e-4)
        else:
            assert np.isfinite(totals).all() and totals[2] > 0


def test_training_with_stale_embeddings_runs_and_resumes(tmp_path):
    graph, cluster = layered_dag(20, seed=2), cluster_preset("placeto-k80", 2)
    config = tiny(embed_every=4, episodes=8)
    first = train(config, [graph], cluster, tmp_path / "run")
    assert first.episodes == 8 and first.sim_calls > 0
    again = train(config.replace(episodes=16), [graph], cluster, tmp_path / "run")
    assert again.start_episode == 8 and again.episodes == 16


def test_configs_from_before_the_field_keep_their_meaning_and_commands_pin_them(tmp_path):
    from placeto.cli.placers import _reproducing
    from placeto.config_fields import pinned_overrides
    from placeto.methods.placeto.config import PlacetoConfig

    old = PlacetoConfig.from_dict({"episodes_per_update": 8, "lr_end": 1e-4})  # a config.json of before
    assert old.embed_every == 1 and old.counterfactual_loss == "expected"
    assert PlacetoConfig().embed_every > 1  # today's default differs: the pin below is needed
    pins = pinned_overrides(old, PlacetoConfig(), "placeto train --family nmt --set lr_end=1e-4")
    assert "embed_every=1" in pins and "episodes_per_update=8" in pins
    assert not any(p.startswith("lr_end=") for p in pins)  # already in the command
    run = tmp_path / "run"  # a run directory of before, as `placeto policies` shows its command
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"episodes_per_update": 8, "lr_end": 1e-4}))
    (run / "checkpoint.msgpack").write_bytes(b"")  # only looked for: the command comes from config.json
    shown = _reproducing("placeto train --family nmt --set lr_end=1e-4", run)
    assert shown.startswith("placeto train --family nmt --set lr_end=1e-4 ")
    assert "embed_every=1" in shown and "episodes_per_update=8" in shown and "schedule_features=false" in shown
